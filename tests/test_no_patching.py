"""``import sepp_anyio`` leaves betterproto2's generated classes exactly as generated.

The library encodes and decodes through its compiled codecs (``sepp_anyio._wire._codec``),
looked up in a table; nothing is installed on the classes. The proof compares every
generated message class, in this process (where the whole library, its server and its
test tools are imported and have been used), with the same classes in a fresh interpreter
that imports the generated modules without ever importing ``sepp_anyio`` itself.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import sepp_anyio
import sepp_anyio.server
import sepp_anyio.testing
from sepp_anyio._proto.google import protobuf as wkt
from sepp_anyio._proto.sepp import v1 as pb
from sepp_anyio._wire._codec import decode, encode

SRC = Path(sepp_anyio.__file__).resolve().parent

# Computes, for every message class of the generated modules: the names in its own
# namespace, and where each of the encoding/decoding methods comes from. Run as is in
# the fresh interpreter, and exec'd here.
FINGERPRINT = r"""
import betterproto2

def where(value):
    value = getattr(value, "__func__", value)
    return f"{getattr(value, '__module__', '?')}.{getattr(value, '__qualname__', repr(value))}"

def fingerprint(modules):
    out = {}
    for module in modules:
        for name, cls in sorted(vars(module).items()):
            if (
                isinstance(cls, type)
                and issubclass(cls, betterproto2.Message)
                and cls.__module__ == module.__name__
            ):
                out[f"{module.__name__}.{name}"] = {
                    # _betterproto_meta is betterproto2's own cache of the field metadata,
                    # filled in by betterproto2 the first time the metadata is read.
                    "namespace": sorted(set(vars(cls)) - {"_betterproto_meta"}),
                    **{
                        attr: where(getattr(cls, attr))
                        for attr in ("__bytes__", "SerializeToString", "parse", "FromString")
                    },
                }
    out["betterproto2.Message"] = {
        attr: where(getattr(betterproto2.Message, attr))
        for attr in ("__bytes__", "SerializeToString", "parse", "FromString")
    }
    return out
"""

# The fresh interpreter: ``sepp_anyio`` is a bare namespace (its __init__ never runs),
# so only the generated modules themselves are imported.
FRESH = (
    r"""
import importlib, json, sys, types
package = types.ModuleType("sepp_anyio")
package.__path__ = [sys.argv[1]]
sys.modules["sepp_anyio"] = package
"""
    + FINGERPRINT
    + r"""
modules = [
    importlib.import_module("sepp_anyio._proto.sepp.v1"),
    importlib.import_module("sepp_anyio._proto.google.protobuf"),
]
assert "sepp_anyio._wire" not in sys.modules and "sepp_anyio._client" not in sys.modules
print(json.dumps(fingerprint(modules)))
"""
)


def _here() -> dict[str, object]:
    namespace: dict[str, object] = {}
    exec(FINGERPRINT, namespace)
    result = namespace["fingerprint"]([pb, wkt])  # type: ignore[operator]
    assert isinstance(result, dict)
    return result


def _fresh() -> dict[str, object]:
    completed = subprocess.run(
        [sys.executable, "-c", FRESH, str(SRC)], check=True, capture_output=True, text=True
    )
    result = json.loads(completed.stdout)
    assert isinstance(result, dict)
    return result


def test_import_leaves_every_generated_class_as_generated() -> None:
    # Use the codecs first, as a client and a server would.
    job = pb.Job(id="j-1", queue="q", attempt=2)
    assert decode(pb.Job, encode(job)) == job
    here, fresh = _here(), _fresh()
    assert len(here) > 40
    assert here == fresh
    # The methods really are betterproto2's (not some other same-named code).
    assert here["sepp_anyio._proto.sepp.v1.Job"] == {
        **here["sepp_anyio._proto.sepp.v1.Job"],  # type: ignore[dict-item]
        "__bytes__": "betterproto2.Message.__bytes__",
        "FromString": "betterproto2.Message.FromString",
    }


def test_no_private_name_of_betterproto2_is_read() -> None:
    """The library and its code generator read betterproto2's classes through public means
    only (dataclass fields, the metadata the generated code's ``betterproto2.field()``
    calls attach to them, type hints); what the codecs need at run time, codegen writes
    into ``_codecs_generated`` itself.  (The tests may read betterproto2's internals: it is
    their oracle.)"""
    sources = [
        path for path in SRC.rglob("*.py") if "_proto" not in path.relative_to(SRC).parts[:1]
    ]
    sources.append(SRC.parents[1] / "proto" / "codecgen.py")
    for path in sources:
        assert "._betterproto" not in path.read_text(), path
