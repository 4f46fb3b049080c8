"""The heartbeat timer: a job's heartbeat task starts only when its first wait is over, in
the job's own task group; entries of finished jobs stay bounded. Both backends, virtual
time."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import anyio
import anyio.abc
import pytest

from sepp_anyio import JobCtx, Payload, Worker
from sepp_anyio._worker._heartbeat_timer import HeartbeatTimer
from sepp_anyio.testing import open_in_memory_client

from ._helpers import QUEUE, EngineSpy, enqueue, running

pytestmark = pytest.mark.anyio


def _run(name: str) -> Any:
    """What the timer touches of a ``JobRun``: its entry and its job's id."""
    return SimpleNamespace(timer_entry=None, ctx=SimpleNamespace(id=name))


def _heartbeat_tasks() -> list[anyio.TaskInfo]:
    return [
        t for t in anyio.get_running_tasks() if (t.name or "").startswith("sepp heartbeat of job")
    ]


async def test_the_heartbeat_task_starts_when_due_inside_the_jobs_task() -> None:
    """Before its first extension is due, a job has no heartbeat task; then it has one,
    a child of the job's own task (not of the worker's), and it extends the lease."""
    seen: dict[str, Any] = {}

    async def slow(payload: Payload | None, ctx: JobCtx) -> None:
        seen["before"] = _heartbeat_tasks()
        await anyio.sleep(9.9)  # the first extension of a 30 s lease is due at 10 s
        seen["at_9.9"] = _heartbeat_tasks()
        await anyio.sleep(0.2)
        seen["after"] = _heartbeat_tasks()
        seen["job_task"] = anyio.get_current_task().id

    async with open_in_memory_client() as (client, engine):
        spy = EngineSpy(engine)
        worker = Worker(client, [QUEUE], lease=30.0, auto_extend=True)
        worker.handle("t", slow)
        await enqueue(client)
        async with running(worker):
            await spy.wait_for("ack")
        assert seen["before"] == [] and seen["at_9.9"] == []
        [beat] = seen["after"]
        assert beat.parent_id == seen["job_task"]
        [extend] = spy.of("extend", ok=True)
        assert extend.at == pytest.approx(10.0, abs=0.05)
        assert _heartbeat_tasks() == []


async def test_an_earlier_entry_wakes_the_sleeping_timer() -> None:
    started: list[tuple[str, float]] = []

    async def beat(run: Any) -> None:
        started.append((run.ctx.id, anyio.current_time()))

    timer = HeartbeatTimer(beat)
    async with anyio.create_task_group() as tg:
        t0 = anyio.current_time()
        timer.add(_run("late"), tg, t0 + 10)
        tg.start_soon(timer.serve)
        await anyio.sleep(0.5)  # the timer sleeps until t0 + 10 by now
        timer.add(_run("early"), tg, t0 + 1)
        await anyio.sleep(20)
        tg.cancel_scope.cancel()
    assert [name for name, _ in started] == ["early", "late"]
    assert started[0][1] == pytest.approx(t0 + 1)
    assert started[1][1] == pytest.approx(t0 + 10)


async def test_a_discarded_entry_never_starts() -> None:
    started: list[str] = []

    async def beat(run: Any) -> None:
        started.append(run.ctx.id)

    timer = HeartbeatTimer(beat)
    async with anyio.create_task_group() as tg:
        tg.start_soon(timer.serve)
        gone, kept = _run("gone"), _run("kept")
        t0 = anyio.current_time()
        timer.add(gone, tg, t0 + 1)
        timer.add(kept, tg, t0 + 2)
        assert timer.discard(gone) is True
        await anyio.sleep(5)
        # Started already: nothing left to discard.
        assert timer.discard(kept) is False
        tg.cancel_scope.cancel()
    assert started == ["kept"]
    assert len(timer) == 0


async def test_entries_of_finished_jobs_stay_bounded() -> None:
    """A stream of short jobs (4 at a time, each over before its heartbeat is due) leaves
    at most about twice the live entries behind, not one per job ever run."""

    async def beat(run: Any) -> None:
        raise AssertionError("no heartbeat is due")

    timer = HeartbeatTimer(beat)
    async with anyio.create_task_group() as tg:
        live: list[Any] = []
        most = 0
        for index in range(2000):
            run = _run(str(index))
            timer.add(run, tg, anyio.current_time() + 1000)
            live.append(run)
            if len(live) > 4:
                timer.discard(live.pop(0))
            most = max(most, len(timer))
        for run in live:
            timer.discard(run)
    assert most <= 2 * 4 + 64 + 2, most
