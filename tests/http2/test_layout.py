"""The connection's parts stay small, and their combination stays one flat object."""

from __future__ import annotations

from pathlib import Path

import sepp_anyio._http2
from sepp_anyio._http2 import Connection
from sepp_anyio._http2._base import ConnectionBase
from sepp_anyio._http2._defences import Defences
from sepp_anyio._http2._reader import Reader
from sepp_anyio._http2._sender import Sender
from sepp_anyio._http2._state import ConnectionState

PACKAGE = Path(sepp_anyio._http2.__file__).parent


def test_no_module_over_1000_lines() -> None:
    sizes = {path.name: len(path.read_text().splitlines()) for path in PACKAGE.glob("*.py")}
    assert {name: size for name, size in sizes.items() if size > 1000} == {}


def test_the_parts_add_no_instance_dict() -> None:
    # Every attribute is a slot of the base (or of the state machine): a connection is
    # one flat object, whose fields each part reads directly.
    for part in (Connection, Reader, Sender, Defences):
        assert part.__dict__["__slots__"] == ()
    assert issubclass(Connection, ConnectionBase) and issubclass(ConnectionBase, ConnectionState)
    for client_side in (True, False):
        assert not hasattr(Connection(client_side=client_side), "__dict__")
