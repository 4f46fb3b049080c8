"""The wire contract: generated code is fresh, and the proto matches sepp-py's."""

from __future__ import annotations

import filecmp
import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
GENERATED = ROOT / "src" / "sepp_anyio" / "_proto"
GENERATED_CODECS = ROOT / "src" / "sepp_anyio" / "_wire" / "_codecs_generated.py"


def _load_generator() -> object:
    spec = importlib.util.spec_from_file_location("_sepp_gen_proto", ROOT / "proto" / "generate.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _tree(path: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(path)): p.read_bytes()
        for p in sorted(path.rglob("*"))
        if p.is_file() and "__pycache__" not in p.parts
    }


def test_generated_code_is_fresh(tmp_path: Path) -> None:
    """Regenerating with the pinned tools gives byte-identical output: the betterproto2
    package and the compiled codecs written from it."""
    generator = _load_generator()
    out = tmp_path / "_proto"
    codecs = tmp_path / "_codecs_generated.py"
    generator.generate(out, codecs)  # type: ignore[attr-defined]
    assert codecs.read_bytes() == GENERATED_CODECS.read_bytes(), (
        "stale src/sepp_anyio/_wire/_codecs_generated.py: run `nox -s proto`"
    )
    fresh, checked_in = _tree(out), _tree(GENERATED)
    assert sorted(fresh) == sorted(checked_in), "generated file set differs: run `nox -s proto`"
    stale = [name for name in fresh if fresh[name] != checked_in[name]]
    assert not stale, f"stale generated files {stale}: run `nox -s proto`"
    assert filecmp.dircmp(out, GENERATED).diff_files == []


def _descriptor_summary(fd: object) -> dict[object, object]:
    """Every field's number, type, label, presence and oneof, by message."""
    out: dict[object, object] = {"package": fd.package}  # type: ignore[attr-defined]

    def walk(message: object, prefix: str) -> None:
        name = prefix + message.name  # type: ignore[attr-defined]
        for field in message.field:  # type: ignore[attr-defined]
            oneof = (
                message.oneof_decl[field.oneof_index].name  # type: ignore[attr-defined]
                if field.HasField("oneof_index")
                else None
            )
            out[(name, field.name)] = (
                field.number,
                field.type,
                field.label,
                field.type_name.rsplit(".", 1)[-1],
                field.proto3_optional,
                oneof,
            )
        for nested in message.nested_type:  # type: ignore[attr-defined]
            walk(nested, name + ".")

    for message in fd.message_type:  # type: ignore[attr-defined]
        walk(message, "")
    for enum in fd.enum_type:  # type: ignore[attr-defined]
        for value in enum.value:
            out[(enum.name, value.name)] = value.number
    for service in fd.service:  # type: ignore[attr-defined]
        out[service.name] = [(m.name, m.input_type, m.output_type) for m in service.method]
    return out


def test_proto_matches_the_official_client_descriptor(tmp_path: Path) -> None:
    """Our hand-written proto is field-for-field the newest contract that
    sepp-py (the official client) was generated from."""
    grpc_tools = pytest.importorskip("grpc_tools")
    from google.protobuf import descriptor_pb2
    from sepp.v1 import queue_pb2

    theirs = descriptor_pb2.FileDescriptorProto()
    queue_pb2.DESCRIPTOR.CopyToProto(theirs)

    out = tmp_path / "queue.pb"
    include = Path(grpc_tools.__file__).parent / "_proto"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "grpc_tools.protoc",
            f"-I{ROOT / 'proto'}",
            f"-I{include}",
            f"--descriptor_set_out={out}",
            "sepp/v1/queue.proto",
        ],
        check=True,
        cwd=ROOT / "proto",
    )
    fds = descriptor_pb2.FileDescriptorSet()
    fds.ParseFromString(out.read_bytes())
    ours = fds.file[0]

    mine, official = _descriptor_summary(ours), _descriptor_summary(theirs)
    assert mine == official
    # The newest contract: 14 rejection reasons and the ADMIN cause.
    closing = mine[("JobRejection", "queue_closing")]
    assert isinstance(closing, tuple)
    assert closing[0] == 14
    assert mine[("DeadLetterCause", "DEAD_LETTER_CAUSE_ADMIN")] == 4


def test_embedded_messages_use_the_compiled_encoders() -> None:
    """Every message class here is compiled, so no encoder falls back to ``bytes(message)``
    (betterproto2's run-time encoder, which cost the server a quarter of its CPU in the job
    pipeline when a reserve reply's jobs went through it)."""
    source = GENERATED_CODECS.read_text()
    assert "_encode_Job_" in source
    assert "bytes(" not in source.replace("bytes(buf)", "")


def test_no_server_side_is_generated() -> None:
    """Only the client stubs are generated (``server_generation=none``): the server speaks
    ``_grpc`` itself, and the grpclib test and benchmark peers write their own
    ``__mapping__``, so a generated ``ServiceBase`` would be dead code on grpclib."""
    import sepp_anyio._proto.sepp.v1 as pb

    assert not hasattr(pb, "QueueServiceBase")
    assert hasattr(pb, "QueueServiceStub")
    for path in GENERATED.rglob("*.py"):
        assert "ServiceBase" not in path.read_text(), path
