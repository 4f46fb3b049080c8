"""The call runners on their own (``_runners``): reuse, growth with concurrent work, the bound
on waiting runners, trimming after a burst, and cancellation while waiting.

Every wait here is on an event or a bounded number of checkpoints; the whole path through
a served connection is tested in ``tests/server_hostile/test_call_runners.py``.
"""

from __future__ import annotations

import anyio
import anyio.abc
import anyio.lowlevel
import pytest

from sepp_anyio.server._network._runners import DEFAULT_KEEP_RUNNERS, Runners

pytestmark = pytest.mark.anyio

#: Checkpoints enough for every woken runner to take its item and wait again.
_SETTLE = 50


async def settle() -> None:
    for _ in range(_SETTLE):
        await anyio.lowlevel.checkpoint()


def surplus(runners: Runners[int]) -> bool:
    """(A call, not the property: mypy would keep an earlier assert's narrowing of it.)"""
    return runners.surplus


class Recorder:
    """``work`` for the runners: notes which task ran each item, and can hold items."""

    def __init__(self) -> None:
        self.ran: list[tuple[int, int]] = []  # (item, task id)
        self.release = anyio.Event()
        self.held = 0

    async def work(self, item: int) -> None:
        self.ran.append((item, anyio.get_current_task().id))

    async def hold(self, item: int) -> None:
        self.ran.append((item, anyio.get_current_task().id))
        self.held += 1
        try:
            await self.release.wait()
        finally:
            self.held -= 1

    def tasks(self) -> set[int]:
        return {task for _, task in self.ran}


async def test_sequential_items_run_on_one_task() -> None:
    recorder = Recorder()
    async with anyio.create_task_group() as tg:
        runners = Runners(tg, recorder.work)
        for item in range(20):
            runners.submit(item)
            await settle()
        assert [item for item, _ in recorder.ran] == list(range(20))
        assert len(recorder.tasks()) == 1
        assert runners.waiting == 1
        tg.cancel_scope.cancel()


async def test_concurrent_items_get_a_task_each_then_reuse_them() -> None:
    recorder = Recorder()
    async with anyio.create_task_group() as tg:
        runners = Runners(tg, recorder.hold)
        for item in range(10):
            runners.submit(item)
        await settle()
        assert recorder.held == 10
        assert len(recorder.tasks()) == 10
        assert runners.waiting == 0
        recorder.release.set()
        await settle()
        assert runners.waiting == 10
        first = recorder.tasks()

        # The next burst is served by the same tasks: none is spawned.
        recorder.release = anyio.Event()
        for item in range(10, 20):
            runners.submit(item)
        await settle()
        assert recorder.held == 10
        assert recorder.tasks() == first
        recorder.release.set()
        await settle()
        tg.cancel_scope.cancel()


async def test_items_submitted_while_all_runners_are_busy_are_all_run_in_order() -> None:
    recorder = Recorder()
    async with anyio.create_task_group() as tg:
        runners = Runners(tg, recorder.work)
        for item in range(100):
            runners.submit(item)
        await settle()
        assert sorted(item for item, _ in recorder.ran) == list(range(100))
        tg.cancel_scope.cancel()


async def test_waiting_runners_are_bounded_by_max_idle() -> None:
    recorder = Recorder()
    async with anyio.create_task_group() as tg:
        runners = Runners(tg, recorder.hold, max_idle=3, keep=1)
        for item in range(8):
            runners.submit(item)
        await settle()
        assert recorder.held == 8
        recorder.release.set()
        await settle()
        # Five of the eight ended instead of waiting.
        assert runners.waiting == 3
        tg.cancel_scope.cancel()


async def test_trim_keeps_keep_runners_and_the_dismissed_ones_end() -> None:
    recorder = Recorder()
    async with anyio.create_task_group() as tg:
        runners = Runners(tg, recorder.hold)
        for item in range(12):
            runners.submit(item)
        await settle()
        recorder.release.set()
        await settle()
        assert runners.waiting == 12
        assert surplus(runners)

        runners.trim()
        await settle()
        assert runners.waiting == DEFAULT_KEEP_RUNNERS
        assert not surplus(runners)
        # The kept runners still serve work; nothing is spawned while they suffice.
        before = recorder.tasks()
        for item in range(12, 12 + DEFAULT_KEEP_RUNNERS):
            runners.submit(item)
        await settle()
        assert recorder.tasks() == before
        assert runners.waiting == DEFAULT_KEEP_RUNNERS
        tg.cancel_scope.cancel()


async def test_a_dismissed_runner_runs_what_was_submitted_before_it_woke() -> None:
    recorder = Recorder()
    async with anyio.create_task_group() as tg:
        runners = Runners(tg, recorder.work, keep=0)
        runners.submit(0)
        await settle()
        assert runners.waiting == 1
        # The only runner is dismissed, then an item comes before it runs again: nobody
        # waits, so a new runner is started, and the item is run once, by one of the two.
        runners.trim()
        runners.submit(1)
        await settle()
        assert [item for item, _ in recorder.ran] == [0, 1]
        assert runners.waiting == 1
        tg.cancel_scope.cancel()


async def test_cancelling_the_task_group_leaves_no_waiting_runner() -> None:
    recorder = Recorder()
    async with anyio.create_task_group() as tg:
        runners = Runners(tg, recorder.work)
        for item in range(3):
            runners.submit(item)
        await settle()
        assert runners.waiting >= 1
        tg.cancel_scope.cancel()
    assert runners.waiting == 0
