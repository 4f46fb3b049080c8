"""``Worker.run(job_limit=K)``: takes at most K jobs, then drains and returns by itself (what
``--max-jobs-per-child`` recycles processes with). Both backends, virtual time."""

from __future__ import annotations

import pytest

from sepp_anyio import Worker
from sepp_anyio.testing import open_in_memory_client

from ._helpers import QUEUE, EngineSpy, Probe, enqueue

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize("max_in_flight", [1, 16])
async def test_run_takes_at_most_job_limit_jobs_then_drains_and_returns(
    max_in_flight: int,
) -> None:
    probe = Probe()
    async with open_in_memory_client() as (client, engine):
        spy = EngineSpy(engine)
        await enqueue(client, 5)
        worker = Worker(client, [QUEUE], max_in_flight=max_in_flight)
        worker.handle("t", probe.handler())
        await worker.run(job_limit=3)  # returns by itself
        assert len(probe.finished) == 3
        assert worker.statistics().processed == 3
        # No reserve asked for more than were left, so nothing was taken past the limit.
        assert sum(call.request.max_jobs for call in spy.of("reserve")) <= 3 + max_in_flight
        assert sum(len(call.reply.jobs) for call in spy.of("reserve", ok=True)) == 3
        # The other two are still there for the next worker (a new child).
        again = Worker(client, [QUEUE], max_in_flight=max_in_flight)
        again.handle("t", probe.handler())
        await again.run(job_limit=2)
        assert len(probe.finished) == 5


@pytest.mark.parametrize(
    ("limit", "error", "message"),
    [(0, ValueError, "job_limit must be >= 1, got 0"), (True, TypeError, "got bool")],
)
async def test_a_bad_job_limit_is_refused(limit: object, error: type, message: str) -> None:
    async with open_in_memory_client() as (client, _engine):
        worker = Worker(client, [QUEUE])
        with pytest.raises(error, match=message):
            await worker.run(job_limit=limit)  # type: ignore[arg-type]
