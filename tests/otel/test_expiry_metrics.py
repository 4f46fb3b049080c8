"""An expired job in the OpenTelemetry metrics: nacked with outcome ``expired``, and its
duration sample labelled so (in-process server, virtual time)."""

from __future__ import annotations

import anyio
import pytest

import sepp_anyio as sepp
from sepp_anyio.testing import open_in_memory_client

from .conftest import Telemetry

pytestmark = pytest.mark.anyio


async def test_an_expired_job_is_counted_as_expired(telemetry: Telemetry) -> None:
    before = telemetry.points()
    task = sepp.Task("q", "stale", int, expires=1.0)
    async with open_in_memory_client() as (client, _):
        expired = anyio.Event()

        def on_outcome(ctx: sepp.JobCtx, outcome: sepp.Outcome, error: object) -> None:
            if outcome is sepp.Outcome.EXPIRED:
                expired.set()

        worker = sepp.Worker(client, ["q"], wait=1.0, on_outcome=on_outcome)

        @worker.task(task)
        async def never(value: int, ctx: sepp.JobCtx) -> None:
            raise AssertionError("an expired job must not run")

        await task.enqueue(client, 1)
        await anyio.sleep(2)  # past the deadline
        async with anyio.create_task_group() as tg:
            await tg.start(worker.run)
            with anyio.fail_after(600):
                await expired.wait()
            worker.shutdown()
    after = telemetry.points()
    nacked = ("sepp.jobs.nacked", (("job_type", "stale"), ("outcome", "expired")))
    duration = ("sepp.job.duration", (("job_type", "stale"), ("outcome", "expired")))
    assert after[nacked] - before.get(nacked, 0.0) == 1
    assert after[duration] - before.get(duration, 0.0) == 1
    dead = ("sepp.jobs.nacked", (("job_type", "stale"), ("outcome", "dead_letter")))
    assert after.get(dead, 0.0) == before.get(dead, 0.0)  # counted once, as expired
