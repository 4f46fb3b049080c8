"""Regenerate ``src/sepp_anyio/_proto`` from ``proto/sepp/v1/queue.proto``.

Usage: ``python proto/generate.py [--out DIR]``. Run it with the exact tool
versions of the ``codegen`` extra (``nox -s proto`` does). The output is
deterministic, so the test suite regenerates into a temporary directory and
compares byte for byte (tests/test_codegen.py).
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


def generate(out: Path) -> None:
    """Write the betterproto2 package for the proto files into ``out`` (replaced)."""
    # protoc looks up protoc-gen-python_betterproto2 on PATH, and the compiler
    # runs ``ruff`` from PATH: both live beside this interpreter in a venv.
    bindir = str(Path(sys.executable).parent)
    env = dict(os.environ, PATH=bindir + os.pathsep + os.environ.get("PATH", ""))
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(
            [
                sys.executable,
                "-m",
                "grpc_tools.protoc",
                f"-I{PROTO_DIR}",
                f"--python_betterproto2_out={tmp}",
                "--python_betterproto2_opt=client_generation=async,server_generation=async",
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args()
    generate(args.out)
    print(f"generated {args.out}")


if __name__ == "__main__":
    main()
