"""Deadlines kept by one task (_io._deadlines): calls' own timeouts and the worker's settle
bound without a cancel scope's deadline each.

On virtual time on both backends, so each deadline is checked to the instant.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import anyio
import pytest

from sepp_anyio._io._deadlines import Deadlines
from sepp_anyio._io._native import native
from sepp_anyio._model._error_root import StatusCode
from sepp_anyio._transport._connection import CallState
from tests.server_hostile._vclock import VIRTUAL_BACKENDS, virtual_backend

pytestmark = pytest.mark.anyio


@pytest.fixture(params=VIRTUAL_BACKENDS)
def anyio_backend(request: pytest.FixtureRequest) -> tuple[str, dict[str, Any]]:
    return virtual_backend(request)


@pytest.fixture
async def deadlines() -> AsyncIterator[Deadlines]:
    kept = Deadlines()
    async with anyio.create_task_group() as tg:
        tg.start_soon(kept.run, native())
        yield kept
        tg.cancel_scope.cancel()


def _call(stream_id: int = 1) -> CallState:
    return CallState(stream_id, 1 << 20, 1)


async def _wait_for_failure(call: CallState) -> float:
    """Wait (as a call does) until the call fails; the time it did."""
    waiter = call.waiter = native().waiter()
    with anyio.fail_after(100_000):
        await waiter.wait()
    assert call.failure is not None
    assert call.failure.code is StatusCode.DEADLINE_EXCEEDED
    return anyio.current_time()


async def test_a_call_fails_when_its_deadline_passes_not_before(deadlines: Deadlines) -> None:
    call = _call()
    start = anyio.current_time()
    deadlines.watch(call, start + 5.0)
    assert await _wait_for_failure(call) == pytest.approx(start + 5.0)
    assert call.failure is not None
    assert "client-side timeout" in str(call.failure.message)


async def test_an_earlier_deadline_wakes_the_task_asleep_for_a_later_one(
    deadlines: Deadlines,
) -> None:
    start = anyio.current_time()
    late, early = _call(1), _call(3)
    deadlines.watch(late, start + 3600.0)
    # The task now sleeps until the late deadline.
    await anyio.wait_all_tasks_blocked()
    deadlines.watch(early, start + 5.0)
    assert await _wait_for_failure(early) == pytest.approx(start + 5.0)
    assert late.failure is None
    assert await _wait_for_failure(late) == pytest.approx(start + 3600.0)


async def test_finished_and_ended_calls_are_left_alone(deadlines: Deadlines) -> None:
    start = anyio.current_time()
    finished, ended, live = _call(1), _call(3), _call(5)
    deadlines.watch(finished, start + 1.0)
    deadlines.watch(ended, start + 1.0)
    deadlines.watch(live, start + 2.0)
    finished.finished = True
    ended.ended = True
    assert await _wait_for_failure(live) == pytest.approx(start + 2.0)
    assert finished.failure is None
    assert ended.failure is None
    assert len(deadlines) == 0


async def test_entries_of_finished_calls_do_not_pile_up(deadlines: Deadlines) -> None:
    """Sequential calls with a long timeout leave one entry each: the heap is rebuilt
    without them, so it stays within twice the calls in flight (11 here) plus 64."""
    deadline = anyio.current_time() + 3600.0
    in_flight = [_call(2 * n + 1) for n in range(10)]
    for call in in_flight:
        deadlines.watch(call, deadline)
    largest = 0
    for n in range(10_000):
        call = _call(2 * n + 101)
        deadlines.watch(call, deadline + n)
        call.finished = True
        largest = max(largest, len(deadlines))
    # The heap is rebuilt just after a push, while the new call is still in flight too.
    assert largest <= 2 * (10 + 1) + 64
    assert all(call.failure is None for call in in_flight)


async def test_a_scope_timer_cancels_its_scope_at_the_deadline(deadlines: Deadlines) -> None:
    start = anyio.current_time()
    with anyio.CancelScope(shield=True) as scope:
        timer = deadlines.cancel_at(scope, start + 7.0)
        await anyio.sleep(3600)
    timer.ended = True
    assert scope.cancelled_caught
    assert timer.fired
    assert anyio.current_time() == pytest.approx(start + 7.0)


async def test_an_ended_scope_timer_cancels_nothing(deadlines: Deadlines) -> None:
    start = anyio.current_time()
    with anyio.CancelScope() as scope:
        timer = deadlines.cancel_at(scope, start + 1.0)
        await anyio.sleep(0.5)
    timer.ended = True
    await anyio.sleep(5.0)
    assert not scope.cancel_called
    assert not timer.fired
    assert len(deadlines) == 0


async def test_a_scope_keeps_its_deadline_once_the_task_has_ended() -> None:
    """Scopes waiting when the task ends, and those registered after it, get their
    deadlines as their own (a shielded settle stays bounded however its worker ends)."""
    kept = Deadlines()
    start = anyio.current_time()
    with anyio.CancelScope(shield=True) as before:
        async with anyio.create_task_group() as tg:
            tg.start_soon(kept.run, native())
            await anyio.wait_all_tasks_blocked()
            kept.cancel_at(before, start + 10.0)
            tg.cancel_scope.cancel()
        with anyio.CancelScope(shield=True) as after:
            kept.cancel_at(after, start + 20.0)
            await anyio.sleep(3600)
        assert after.cancelled_caught
        assert anyio.current_time() == pytest.approx(start + 20.0)
        await anyio.sleep(3600)
    assert before.cancelled_caught
    assert anyio.current_time() == pytest.approx(start + 20.0)
