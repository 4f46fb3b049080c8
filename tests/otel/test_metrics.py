"""Each worker metric's value after a scripted run (in-process server, virtual time)."""

from __future__ import annotations

import dataclasses
import logging
from collections import Counter
from typing import Any

import anyio
import pytest

import sepp_anyio as sepp
from sepp_anyio.testing import open_in_memory_client

from .conftest import Telemetry

pytestmark = pytest.mark.anyio

Key = tuple[str, tuple[tuple[str, Any], ...]]


def _delta(before: dict[Key, float], after: dict[Key, float]) -> dict[Key, float]:
    return {
        key: after[key] - before.get(key, 0.0)
        for key in after
        if after[key] != before.get(key, 0.0)
    }


async def test_metrics_after_acks_retries_dead_letters_and_a_lost_lease(
    telemetry: Telemetry,
) -> None:
    before = telemetry.points()
    async with open_in_memory_client(storage={"dead_letter_retention_ms": 3_600_000}) as (
        client,
        _,
    ):
        await client.enqueue_batch(
            [sepp.EnqueueRequest("q", "ok") for _ in range(3)]
            + [sepp.EnqueueRequest("q", "flaky")]  # retried once, then acked
            + [sepp.EnqueueRequest("q", "doomed")]  # dead-lettered at once
            + [sepp.EnqueueRequest("q", "stuck", max_attempts=1)]  # loses its lease
        )
        worker = sepp.Worker(client, ["q"], wait=1.0, lease=5.0, max_lease_time=1.0)
        runs: Counter[str] = Counter()
        finished = anyio.Event()

        def progress() -> None:
            if (
                runs["ok"] == 3
                and runs["flaky"] == 2
                and runs["doomed"] == 1
                and runs["stuck"] == 1
            ):
                finished.set()

        @worker.handler("ok")
        async def ok(payload: sepp.Payload | None, ctx: sepp.JobCtx) -> None:
            runs["ok"] += 1
            progress()

        @worker.handler("flaky")
        async def flaky(payload: sepp.Payload | None, ctx: sepp.JobCtx) -> None:
            runs["flaky"] += 1
            progress()
            if ctx.attempt == 1:
                raise sepp.HandlerError.retry("try again")

        @worker.handler("doomed")
        async def doomed(payload: sepp.Payload | None, ctx: sepp.JobCtx) -> None:
            runs["doomed"] += 1
            progress()
            raise sepp.HandlerError.permanent("never")

        @worker.handler("stuck")
        async def stuck(payload: sepp.Payload | None, ctx: sepp.JobCtx) -> None:
            runs["stuck"] += 1
            progress()
            await anyio.sleep(3600)

        async with anyio.create_task_group() as tg:
            await tg.start(worker.run)
            with anyio.fail_after(600):
                await finished.wait()
            # The drain waits for every job, the stuck one until its lease is lost.
            worker.shutdown()
        stats = worker.statistics()

    delta = _delta(before, telemetry.points())
    assert delta[("sepp.jobs.processed", (("job_type", "ok"),))] == 3
    assert delta[("sepp.jobs.processed", (("job_type", "flaky"),))] == 1
    assert delta[("sepp.jobs.nacked", (("job_type", "flaky"), ("outcome", "retry")))] == 1
    assert delta[("sepp.jobs.nacked", (("job_type", "doomed"), ("outcome", "dead_letter")))] == 1
    assert delta[("sepp.jobs.lease_lost", (("job_type", "stuck"),))] == 1
    # Every job that started also finished: in flight is back where it was.
    assert ("sepp.jobs.in_flight", ()) not in delta
    # One duration sample per handled job, labelled with its outcome.
    durations = {key: value for key, value in delta.items() if key[0] == "sepp.job.duration"}
    assert durations == {
        ("sepp.job.duration", (("job_type", "ok"), ("outcome", "ack"))): 3,
        ("sepp.job.duration", (("job_type", "flaky"), ("outcome", "retry"))): 1,
        ("sepp.job.duration", (("job_type", "flaky"), ("outcome", "ack"))): 1,
        ("sepp.job.duration", (("job_type", "doomed"), ("outcome", "dead_letter"))): 1,
        ("sepp.job.duration", (("job_type", "stuck"), ("outcome", "lease_lost"))): 1,
    }
    completed_some = delta[("sepp.reserves.completed", (("jobs", "some"),))]
    assert completed_some >= 2
    assert ("sepp.reserves.failed", ()) not in delta
    assert stats.processed == 4
    assert stats.lease_lost == 1


class _CountWarnings(logging.Handler):
    def __init__(self, needle: str, target: int) -> None:
        super().__init__()
        self.needle, self.target, self.count = needle, target, 0
        self.reached = anyio.Event()

    def emit(self, record: logging.LogRecord) -> None:
        if self.needle in record.getMessage():
            self.count += 1
            if self.count >= self.target:
                self.reached.set()


async def test_failed_reserves_are_counted(telemetry: Telemetry) -> None:
    before = telemetry.points()
    counter = _CountWarnings("reserve refused", 3)
    worker_logger = logging.getLogger("sepp_anyio.worker")
    worker_logger.addHandler(counter)
    strict: dict[str, Any] = {"server": {"strict_queues": True}, "queues": [{"name": "q"}]}
    try:
        async with open_in_memory_client(**strict) as (client, engine):
            worker = sepp.Worker(client, ["q"], wait=1.0, reserve_error_backoff=1.0)
            async with anyio.create_task_group() as tg:
                await tg.start(worker.run)
                # An undeclared queue is refused for good before any reserve succeeded;
                # once one has (the first, empty after 1 s), refusals are retried.
                await anyio.sleep(0.5)
                engine.reload(dataclasses.replace(engine.config, queues=()))
                with anyio.fail_after(60):
                    await counter.reached.wait()
                worker.shutdown()
    finally:
        worker_logger.removeHandler(counter)
    delta = _delta(before, telemetry.points())
    assert delta[("sepp.reserves.failed", ())] >= 3
