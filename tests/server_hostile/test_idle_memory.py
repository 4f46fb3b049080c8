"""What an idle connection costs the reference server in memory.

A client that finishes the HTTP/2 handshake and then says nothing holds a connection
slot until the idle timeout reaps it; what the server keeps for it meanwhile is what
many such clients can make it hold (the caps bound how many). The count comes from
``tracemalloc``, limited to the package's own modules, so the test's raw peers (which
share the process) are left out.
"""

from __future__ import annotations

import contextlib
import tracemalloc

import anyio
import pytest

from tests.reliability._wait import eventually

from ._harness import Attacker, hostile_server

pytestmark = pytest.mark.anyio

#: Connections opened at once. Enough that one buffer of 64 KiB per connection (what each
#: kept on asyncio before the read buffer became one per thread) is far over the bound.
CONNECTIONS = 40
#: What one idle, handshaken connection may keep in the package's own allocations: its
#: HTTP/2 state, its tasks and its byte stream, with no buffer sized for a large read.
PER_CONNECTION_BOUND = 16 * 1024


def _ours() -> int:
    """Bytes the package's own modules have allocated and still hold."""
    snapshot = tracemalloc.take_snapshot().filter_traces(
        [tracemalloc.Filter(True, "*/sepp_anyio/*")]
    )
    return sum(stat.size for stat in snapshot.statistics("filename"))


async def test_an_idle_connection_costs_the_server_little_memory() -> None:
    settings = {"max_connections": CONNECTIONS + 10, "max_connections_per_ip": CONNECTIONS + 10}
    async with hostile_server(**settings) as server:
        tracemalloc.start()
        try:
            before = _ours()
            async with contextlib.AsyncExitStack() as stack:
                attackers = [
                    await stack.enter_async_context(Attacker.connect(server.port))
                    for _ in range(CONNECTIONS)
                ]
                await eventually(
                    lambda: len(server.connections) >= CONNECTIONS,
                    within=10,
                    what="every connection",
                )
                # Each one served: the server's SETTINGS arrived, so it has read from each.
                with anyio.fail_after(10):
                    for attacker in attackers:
                        while not attacker.frames:
                            assert await attacker.read(1.0)
                held = _ours() - before
        finally:
            tracemalloc.stop()
    per_connection = held / CONNECTIONS
    assert per_connection < PER_CONNECTION_BOUND, (
        f"{per_connection / 1024:.1f} KiB per idle connection"
    )
