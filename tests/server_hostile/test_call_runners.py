"""The call runners through a served connection, on virtual time: a burst of concurrent
calls is served by as many runners, the next burst reuses them, and a second after the
last call ends only a few still wait (``server/_network/_runners.py``).
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest

import sepp_anyio as sepp
from sepp_anyio.server._network._runners import DEFAULT_KEEP_RUNNERS

from ._harness import hostile_server
from ._vclock import VIRTUAL_BACKENDS, virtual_backend

pytestmark = pytest.mark.anyio

#: Concurrent long polls in a burst; each holds a runner until its wait ends.
BURST = 20
#: How long each long poll waits for a job (virtual seconds).
WAIT = 5.0


@pytest.fixture(params=VIRTUAL_BACKENDS)
def anyio_backend(request: pytest.FixtureRequest) -> tuple[str, dict[str, Any]]:
    return virtual_backend(request)


async def burst(client: sepp.Client) -> None:
    async with anyio.create_task_group() as tg:
        for _ in range(BURST):
            tg.start_soon(lambda: client.reserve(["empty"], lease=30.0, wait=WAIT))


async def test_a_burst_gets_runners_and_an_idle_connection_keeps_only_a_few() -> None:
    async with hostile_server() as server, sepp.connect(server.address) as client:
        await client.server_info()
        [connection] = server.connections
        started = anyio.current_time()
        async with anyio.create_task_group() as tg:
            tg.start_soon(burst, client)
            await anyio.sleep(WAIT / 2)
            # Every poll is running, each on its own runner: none waits.
            assert server.active_calls == BURST
            assert connection.waiting_runners == 0
        assert anyio.current_time() - started == pytest.approx(WAIT, abs=0.1)
        # Just after the burst, its runners wait for the next calls...
        assert connection.waiting_runners == BURST

        # ...which they serve: a second burst starts no more of them.
        await burst(client)
        assert connection.waiting_runners == BURST

        # A second without a call: all but a few end.
        await anyio.sleep(1.5)
        assert connection.waiting_runners == DEFAULT_KEEP_RUNNERS
        # And the connection still serves calls.
        await client.server_info()
        assert connection.waiting_runners == DEFAULT_KEEP_RUNNERS
