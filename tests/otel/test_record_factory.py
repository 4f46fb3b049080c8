"""The job's LogRecord factory is the process's only while a worker runs.

It is installed when the first worker starts running and put back when the last one
stops; a factory someone installs over it meanwhile is left in place (ours stays in its
chain, inert).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from typing import Any

import anyio
import pytest

import sepp_anyio as sepp
from sepp_anyio._logcontext import job_log_records
from sepp_anyio.testing import open_in_memory_client

pytestmark = pytest.mark.anyio


@pytest.fixture
def original() -> Iterator[Callable[..., logging.LogRecord]]:
    """The factory before the test; put back after it, whatever the test did."""
    before = logging.getLogRecordFactory()
    yield before
    logging.setLogRecordFactory(before)


def _record() -> logging.LogRecord:
    return logging.getLogger("my.app").makeRecord("my.app", logging.INFO, "f", 1, "m", (), None)


async def test_a_run_puts_the_factory_back(original: Callable[..., logging.LogRecord]) -> None:
    async with open_in_memory_client() as (client, _):
        await client.enqueue(sepp.EnqueueRequest("q", "t"))
        worker = sepp.Worker(client, ["q"], wait=1.0)
        seen: list[object] = []

        @worker.handler("t")
        async def handle(payload: sepp.Payload | None, ctx: sepp.JobCtx) -> None:
            seen.append(logging.getLogRecordFactory())
            assert _record().sepp_job_id == ctx.id  # type: ignore[attr-defined]

        await worker.run(until_idle=True)
    assert len(seen) == 1
    assert seen[0] is not original
    assert logging.getLogRecordFactory() is original
    assert not hasattr(_record(), "sepp_job_id")


async def test_the_last_of_concurrent_workers_puts_it_back(
    original: Callable[..., logging.LogRecord],
) -> None:
    async with open_in_memory_client() as (client, _):
        first = sepp.Worker(client, ["a"], wait=1.0)
        second = sepp.Worker(client, ["b"], wait=1.0)
        first_stopped = anyio.Event()

        async def run_first(*, task_status: anyio.abc.TaskStatus[None]) -> None:
            await first.run(task_status=task_status)
            first_stopped.set()

        with anyio.fail_after(60):
            async with anyio.create_task_group() as tg:
                await tg.start(run_first)
                ours = logging.getLogRecordFactory()
                assert ours is not original
                await tg.start(second.run)
                assert logging.getLogRecordFactory() is ours  # shared, not stacked
                first.shutdown()
                await first_stopped.wait()
                # The second still runs: the attributes are still there.
                assert logging.getLogRecordFactory() is ours
                assert _record().sepp_job_id is None  # type: ignore[attr-defined]
                second.shutdown()
    assert logging.getLogRecordFactory() is original


def test_nested_and_threaded_users_share_one_factory(
    original: Callable[..., logging.LogRecord],
) -> None:
    with job_log_records():
        ours = logging.getLogRecordFactory()
        assert ours is not original
        with job_log_records():
            assert logging.getLogRecordFactory() is ours
        assert logging.getLogRecordFactory() is ours
        # A user in another thread (a worker on another event loop) shares it too.
        seen: list[object] = []

        def in_thread() -> None:
            with job_log_records():
                seen.append(logging.getLogRecordFactory())
            seen.append(logging.getLogRecordFactory())

        thread = threading.Thread(target=in_thread)
        thread.start()
        thread.join(timeout=60)
        assert seen == [ours, ours]
    assert logging.getLogRecordFactory() is original


async def test_a_factory_installed_over_ours_is_kept(
    original: Callable[..., logging.LogRecord],
) -> None:
    async with open_in_memory_client() as (client, _):
        worker = sepp.Worker(client, ["q"], wait=1.0)
        async with anyio.create_task_group() as tg:
            await tg.start(worker.run)
            below = logging.getLogRecordFactory()

            def mine(*args: Any, **kwargs: Any) -> logging.LogRecord:
                record = below(*args, **kwargs)
                record.mine = True
                return record

            logging.setLogRecordFactory(mine)
            assert _record().sepp_job_id is None  # type: ignore[attr-defined]
            worker.shutdown()
    assert logging.getLogRecordFactory() is mine
    record = _record()
    assert record.mine is True  # type: ignore[attr-defined]
    assert not hasattr(record, "sepp_job_id")  # ours is inert in mine's chain
    # A later run installs a fresh one over mine, and puts mine back.
    async with open_in_memory_client() as (client, _):
        later = sepp.Worker(client, ["q"], wait=1.0)
        async with anyio.create_task_group() as tg:
            await tg.start(later.run)
            assert logging.getLogRecordFactory() is not mine
            assert _record().sepp_job_id is None  # type: ignore[attr-defined]
            later.shutdown()
    assert logging.getLogRecordFactory() is mine
