"""Job details on every log record emitted while a handler runs."""

from __future__ import annotations

import logging

import anyio
import pytest

import sepp_anyio as sepp
from sepp_anyio.testing import open_in_memory_client

pytestmark = pytest.mark.anyio


async def test_records_inside_a_handler_carry_the_job(caplog: pytest.LogCaptureFixture) -> None:
    user_logger = logging.getLogger("my.app")
    caplog.set_level(logging.INFO, logger="my.app")
    async with open_in_memory_client() as (client, _):
        ack = await client.enqueue(sepp.EnqueueRequest("q", "greet"))
        worker = sepp.Worker(client, ["q"], wait=1.0, worker_id="worker-7")
        done = anyio.Event()
        seen: list[sepp.JobCtx | None] = []

        @worker.handler("greet")
        async def greet(payload: sepp.Payload | None, ctx: sepp.JobCtx) -> None:
            user_logger.info("hello from the handler")
            seen.append(sepp.current_job())
            done.set()

        async with anyio.create_task_group() as tg:
            await tg.start(worker.run)
            with anyio.fail_after(60):
                await done.wait()
            # Outside a job but while the worker runs (after the run, the process's own
            # factory is back: tests/otel/test_record_factory.py).
            user_logger.info("outside any job")
            worker.shutdown()

    inside, outside = [r for r in caplog.records if r.name == "my.app"]
    assert inside.sepp_job_id == ack.job_id  # type: ignore[attr-defined]
    assert inside.sepp_job_type == "greet"  # type: ignore[attr-defined]
    assert inside.sepp_attempt == 1  # type: ignore[attr-defined]
    assert inside.sepp_worker_id == "worker-7"  # type: ignore[attr-defined]
    assert inside.sepp_queue == "q"  # type: ignore[attr-defined]
    assert outside.sepp_job_id is None  # type: ignore[attr-defined]
    assert seen[0] is not None
    assert seen[0].id == ack.job_id
    assert sepp.current_job() is None
    # A format string naming the fields works inside and outside jobs, while it runs.
    formatter = logging.Formatter("%(sepp_job_id)s|%(sepp_attempt)s|%(message)s")
    assert formatter.format(inside) == f"{ack.job_id}|1|hello from the handler"
    assert formatter.format(outside) == "None|None|outside any job"


async def test_a_jobs_context_stays_in_its_task(caplog: pytest.LogCaptureFixture) -> None:
    """The job is set in its own task's context and never reset: a record logged by the
    worker's own task once jobs have run (``stopped``) carries none."""
    caplog.set_level(logging.INFO, logger="sepp_anyio.worker")
    async with open_in_memory_client() as (client, _):
        await client.enqueue_batch([sepp.EnqueueRequest("q", "t") for _ in range(3)])
        worker = sepp.Worker(client, ["q"], wait=1.0)
        handled: list[str] = []

        @worker.handler("t")
        async def handle(payload: sepp.Payload | None, ctx: sepp.JobCtx) -> None:
            logging.getLogger("sepp_anyio.worker").info("handling")
            handled.append(ctx.id)

        await worker.run(until_idle=True)
    handling = [r for r in caplog.records if r.getMessage() == "handling"]
    assert sorted(r.sepp_job_id for r in handling) == sorted(handled)  # type: ignore[attr-defined]
    assert len(handled) == 3
    [stopped] = [r for r in caplog.records if r.getMessage().endswith(" stopped")]
    assert stopped.sepp_job_id is None  # type: ignore[attr-defined]
