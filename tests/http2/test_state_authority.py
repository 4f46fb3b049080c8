"""The state machines are the only writers of the state they keep (an AST check).

A stream's ``state`` and the two flags derived from it are assigned in ``_stream``
only, so every change goes through its transition table; the connection's phase, its
GOAWAYs and its handshake in ``_state`` only. Nothing else in the package may write
them (nor reach them through ``setattr``).
"""

from __future__ import annotations

import ast
from pathlib import Path

import sepp_anyio._http2

PACKAGE = Path(sepp_anyio._http2.__file__).parent

#: attribute name -> the one module allowed to assign it.
OWNERS = {
    "state": "_stream.py",
    "open_for_sending": "_stream.py",
    "open_for_receiving": "_stream.py",
    "_phase": "_state.py",
    "_closed": "_state.py",
    "_goaway_sent": "_state.py",
    "_goaway_received": "_state.py",
    "_settings_received": "_state.py",
    "_settings_unacked": "_state.py",
}


def _assigned_attributes(tree: ast.AST) -> list[tuple[str, int]]:
    found: list[tuple[str, int]] = []
    for node in ast.walk(tree):
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = list(node.targets)
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("setattr", "delattr")
            and len(node.args) >= 2
            and isinstance(node.args[1], ast.Constant)
            and isinstance(node.args[1].value, str)
        ):
            found.append((node.args[1].value, node.lineno))
        for target in targets:
            for sub in ast.walk(target):
                if isinstance(sub, ast.Attribute):
                    found.append((sub.attr, sub.lineno))
    return found


def test_only_the_owning_module_assigns_state() -> None:
    offences: list[str] = []
    for path in sorted(PACKAGE.glob("*.py")):
        for name, line in _assigned_attributes(ast.parse(path.read_text(), str(path))):
            owner = OWNERS.get(name)
            if owner is not None and path.name != owner:
                offences.append(f"{path.name}:{line} assigns .{name} (owned by {owner})")
    assert offences == []


def test_the_check_sees_assignments() -> None:
    # The checker itself: each spelling of an assignment is found.
    source = "s.state = 1\ns.state += 1\nx, s.open_for_sending = 1, 2\nsetattr(s, 'state', 0)\n"
    names = [name for name, _ in _assigned_attributes(ast.parse(source))]
    assert names.count("state") == 3 and "open_for_sending" in names
