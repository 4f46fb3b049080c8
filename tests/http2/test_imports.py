"""The HTTP/2 core depends on the standard library and hpack only."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import sepp_anyio._http2

PACKAGE = Path(sepp_anyio._http2.__file__).parent


def test_only_stdlib_and_hpack_are_imported() -> None:
    imported: set[str] = set()
    for path in PACKAGE.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                imported.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                imported.add(node.module.split(".")[0])
    foreign = {name for name in imported if name not in sys.stdlib_module_names}
    assert foreign == {"hpack"}
