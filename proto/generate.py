"""Regenerate ``src/sepp_anyio/_proto`` and the compiled codecs from the proto files.

Usage: ``python proto/generate.py [--out DIR] [--codecs-out FILE]``. Run it with the
exact tool versions of the ``codegen`` extra (``nox -s proto`` does). Two steps:

1. betterproto2 writes the message classes and stubs (``src/sepp_anyio/_proto``);
2. ``proto/codecgen.py`` reads those classes' field metadata and writes their compiled
   encoders and decoders (``src/sepp_anyio/_wire/_codecs_generated.py``), which the
   pinned ruff then formats.

The output is deterministic, so the test suite regenerates both into a temporary
directory and compares byte for byte (tests/test_codegen.py).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROTO_DIR = ROOT / "proto"
PROTO_FILES = ["sepp/v1/queue.proto"]
DEFAULT_OUT = ROOT / "src" / "sepp_anyio" / "_proto"
DEFAULT_CODECS_OUT = ROOT / "src" / "sepp_anyio" / "_wire" / "_codecs_generated.py"


def generate(out: Path, codecs_out: Path | None = None) -> None:
    """Write the betterproto2 package for the proto files into ``out`` (replaced) and,
    unless ``codecs_out`` is None, the compiled codecs of its classes into ``codecs_out``."""
    # protoc looks up protoc-gen-python_betterproto2 on PATH, and the compiler
    # runs ``ruff`` from PATH: both live beside this interpreter in a venv.
    bindir = str(Path(sys.executable).parent)
    env = dict(os.environ, PATH=bindir + os.pathsep + os.environ.get("PATH", ""))
    _generate_proto(out, env)
    if codecs_out is not None:
        _generate_codecs(out, codecs_out, env)


def _generate_proto(out: Path, env: dict[str, str]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(
            [
                sys.executable,
                "-m",
                "grpc_tools.protoc",
                f"-I{PROTO_DIR}",
                f"--python_betterproto2_out={tmp}",
                "--python_betterproto2_opt=client_generation=async,server_generation=none",
                *PROTO_FILES,
            ],
            cwd=PROTO_DIR,
            env=env,
            check=True,
            capture_output=True,
        )
        if out.exists():
            shutil.rmtree(out)
        shutil.copytree(tmp, out)
        # TemporaryDirectory is created 0o700; the package must stay readable.
        out.chmod(0o755)


def _generate_codecs(proto: Path, codecs_out: Path, env: dict[str, str]) -> None:
    """Run proto/codecgen.py on the package just written to ``proto`` (not on whatever
    ``sepp_anyio._proto`` is installed): a bare ``sepp_anyio`` holding only that package
    comes first on the path of a fresh interpreter."""
    with tempfile.TemporaryDirectory() as tmp:
        package = Path(tmp) / "sepp_anyio"
        package.mkdir()
        (package / "__init__.py").write_text("")
        shutil.copytree(proto, package / "_proto")
        raw = Path(tmp) / "codecs.py"
        subprocess.run(
            [sys.executable, str(PROTO_DIR / "codecgen.py"), str(raw)],
            env=dict(env, PYTHONPATH=tmp),
            check=True,
            capture_output=True,
        )
        # Formatted as if it were the checked-in file, so the project's ruff settings apply.
        formatted = subprocess.run(
            ["ruff", "format", "--stdin-filename", str(DEFAULT_CODECS_OUT), "-"],
            input=raw.read_bytes(),
            cwd=ROOT,
            env=env,
            check=True,
            capture_output=True,
        ).stdout
    codecs_out.write_bytes(formatted)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--codecs-out", type=Path, default=DEFAULT_CODECS_OUT)
    args = parser.parse_args()
    generate(args.out, args.codecs_out)
    print(f"generated {args.out} and {args.codecs_out}")


if __name__ == "__main__":
    main()
