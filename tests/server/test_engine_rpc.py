"""The engine's RPC handlers are internal: reached through ``rpc_of``, read on every call.

The network service and the in-process channel look a handler up in the engine's
``EngineRpc`` when a call arrives, not when they are built, so a test that replaces a field
(a spy, an injected fault) changes what is served from the next call on.
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import pytest

import sepp_anyio as sepp
from sepp_anyio import StatusCode
from sepp_anyio.server import Engine, EngineError, NetworkServer
from sepp_anyio.server._engine._engine import EngineRpc, rpc_of
from sepp_anyio.testing import open_in_memory_client

pytestmark = pytest.mark.anyio

RPCS = (
    "enqueue_batch",
    "enqueue_atomic",
    "reserve",
    "ack",
    "nack",
    "extend",
    "drain_dead_letters",
    "get_server_info",
)


def test_rpc_of_gives_the_engines_own_handlers() -> None:
    engine = Engine()
    rpc = rpc_of(engine)
    assert rpc is rpc_of(engine)
    assert [field.name for field in dataclasses.fields(EngineRpc)] == list(RPCS)
    for name in RPCS:
        handler: Any = getattr(rpc, name)
        # Bound to this engine's private method of the same name ...
        assert handler.__self__ is engine
        assert handler.__func__ is getattr(Engine, f"_{name}")
        # ... which is not on the public surface any more.
        assert not hasattr(engine, name), name
    assert rpc_of(Engine()) is not rpc


@asynccontextmanager
async def _network_client(engine: Engine) -> AsyncIterator[sepp.Client]:
    async with NetworkServer(engine, port=0) as network, sepp.connect(network.address) as client:
        yield client


def _spy(rpc: EngineRpc, seen: list[Any]) -> Callable[[Any], Awaitable[Any]]:
    """Record every GetServerInfo request (the engine still answers); returns the handler
    it replaced."""
    real = rpc.get_server_info

    async def spy(request: Any) -> Any:
        seen.append(request)
        return await real(request)

    rpc.get_server_info = spy
    return real


async def test_a_handler_replaced_while_serving_takes_effect_over_the_network() -> None:
    async with Engine() as engine, _network_client(engine) as client:
        # Served once before the replacement: the routes exist, the connection is up.
        assert (await client.server_info()).version == sepp.__version__
        rpc = rpc_of(engine)
        seen: list[Any] = []
        real = _spy(rpc, seen)
        assert (await client.server_info()).version == sepp.__version__
        assert len(seen) == 1

        async def refuse(request: Any) -> Any:
            # Not a retryable status: the client gives up at once.
            raise EngineError(StatusCode.FAILED_PRECONDITION, "injected")

        rpc.get_server_info = refuse
        with pytest.raises(sepp.SeppError, match="injected"):
            await client.server_info()
        rpc.get_server_info = real
        assert (await client.server_info()).version == sepp.__version__
        assert len(seen) == 1


async def test_a_handler_replaced_while_serving_takes_effect_in_process() -> None:
    async with open_in_memory_client() as (client, engine):
        assert (await client.server_info()).version == sepp.__version__
        seen: list[Any] = []
        real = _spy(rpc_of(engine), seen)
        assert (await client.server_info()).version == sepp.__version__
        assert len(seen) == 1
        rpc_of(engine).get_server_info = real
        await client.server_info()
        assert len(seen) == 1
