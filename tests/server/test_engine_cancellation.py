"""An engine cancelled while it enters leaves its store closed and usable (the docstrings
of Engine and the stores say so): a later engine opens the same store."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from sepp_anyio._proto.sepp import v1 as pb
from sepp_anyio.server import Engine, MemoryStore, SqliteStore, Store
from sepp_anyio.server._engine._engine import rpc_of

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
async def test_an_engine_cancelled_while_entering_leaves_its_store_usable(
    kind: str, tmp_path: Path
) -> None:
    store: Store = MemoryStore() if kind == "memory" else SqliteStore(tmp_path / "jobs.db")
    entered = False
    with anyio.CancelScope() as scope:
        scope.cancel()
        async with Engine(store=store):
            entered = True
    assert scope.cancelled_caught and not entered
    # Once a MemoryStore was left marked open by the cancelled open(), and every later
    # engine was refused ("already used by a running engine").
    async with Engine(store=store) as engine:
        info = await rpc_of(engine).get_server_info(pb.GetServerInfoRequest())
    assert info.supported_protocol_versions == ["v1"]
