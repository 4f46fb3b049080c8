"""A call reset before its handler's task runs is cancelled when the task starts.

Regression: the server cancels a reset call through the cancel scope its task makes, and a
reset that arrived in the same read as the request (before the task had run) found no scope
and was lost. A long poll reset that way parked anyway, and a nack arriving next made the job
ready for it: the job was leased to a reply nobody reads and sat out its whole lease. The
worker's shutdown produces exactly that sequence (its parked reserve is reset, then the
handler's nack follows on the same connection), so it is the test.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import anyio
import pytest

import sepp_anyio as sepp
from sepp_anyio.server import ServerThread

pytestmark = pytest.mark.anyio

ROUNDS = 10


@pytest.fixture(scope="module", params=["asyncio", "trio"])
def server(request: pytest.FixtureRequest) -> Iterator[ServerThread]:
    with ServerThread(backend=request.param) as running:
        yield running


async def test_a_nack_after_a_reset_long_poll_is_ready_at_once(server: ServerThread) -> None:
    async with sepp.connect(server.address) as client:
        for _ in range(ROUNDS):
            queue = f"reset-{uuid.uuid4().hex[:8]}"
            worker = sepp.Worker(client, [queue], wait=30.0)

            @worker.handler("t")
            async def busy(
                payload: sepp.Payload | None, ctx: sepp.JobCtx, worker: sepp.Worker = worker
            ) -> None:
                worker.shutdown()  # resets the worker's second, parked reserve
                raise sepp.HandlerError.retry("busy")

            ack = await client.enqueue(sepp.EnqueueRequest(queue, "t"))
            with anyio.fail_after(10):
                await worker.run()
            # wait=0: the job must be ready now, not leased to the reset reserve.
            jobs = await client.reserve([queue], lease=5.0, wait=0.0)
            assert [(job.ctx.id, job.ctx.attempt) for job in jobs] == [(ack.job_id, 2)]
            await client.ack(jobs[0].ctx)
