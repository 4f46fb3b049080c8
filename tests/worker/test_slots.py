"""A lane's settle slots (``_worker/_slots.py``): taken first come, first served, handed
straight to the longest waiter, and never lost to a cancelled wait. Both backends; waits
end by a slot given back or a cancellation, none by time."""

from __future__ import annotations

import asyncio

import anyio
import anyio.abc
import anyio.lowlevel
import pytest

from sepp_anyio._io._native import native
from sepp_anyio._worker._slots import Slots

pytestmark = pytest.mark.anyio

# A bound, not a synchronisation: each wait below ends by an event of the test itself.
_BOUND = 10.0


def _all_taken(total: int) -> Slots:
    """Slots on the running backend's waiters, every one of them taken."""
    slots = Slots(total, native().waiter)
    for _ in range(total):
        assert slots.try_take()
    assert not slots.try_take() and slots.free == 0
    return slots


async def _queued(slots: Slots, count: int) -> None:
    """Yield until ``count`` takers wait (each needs a turn to start), within a few turns."""
    for _ in range(50):
        if slots.waiting == count:
            return
        await anyio.lowlevel.checkpoint()
    raise AssertionError(f"{slots.waiting} takers wait, not {count}")


async def _noted(order: list[str], count: int) -> None:
    """Yield until ``count`` takers have noted their slot, within a few turns."""
    for _ in range(50):
        if len(order) == count:
            return
        await anyio.lowlevel.checkpoint()
    raise AssertionError(f"{order} noted, not {count}")


async def test_free_slots_are_taken_at_once_and_waiters_get_them_in_order() -> None:
    slots = _all_taken(2)
    order: list[str] = []

    async def taker(name: str) -> None:
        await slots.take()
        order.append(name)  # and keeps it

    with anyio.fail_after(_BOUND):
        async with anyio.create_task_group() as tg:
            for count, name in enumerate(("first", "second", "third"), 1):
                tg.start_soon(taker, name)
                await _queued(slots, count)
            # One at a time (trio runs the tasks woken in one turn in either order).
            for count in (2, 1, 0):
                slots.give_back()
                await _queued(slots, count)
                await _noted(order, 3 - count)
    # Handed over in arrival order, none counted free on the way.
    assert order == ["first", "second", "third"] and slots.free == 0
    slots.give_back()
    assert slots.free == 1


async def test_a_waiter_keeps_its_turn_against_try_take() -> None:
    """A slot given back while someone waits goes to the waiter, not to a later try_take."""
    slots = _all_taken(1)
    with anyio.fail_after(_BOUND):
        async with anyio.create_task_group() as tg:
            tg.start_soon(slots.take)
            await _queued(slots, 1)
            slots.give_back()
            assert not slots.try_take()
    assert slots.free == 0 and slots.waiting == 0


async def test_a_cancelled_wait_takes_no_slot() -> None:
    slots = _all_taken(1)
    with anyio.fail_after(_BOUND):
        async with anyio.create_task_group() as tg:
            tg.start_soon(slots.take)
            await _queued(slots, 1)
            tg.cancel_scope.cancel()
    assert slots.waiting == 0
    slots.give_back()
    # The cancelled taker left the queue: the slot is free, not handed to nobody.
    assert slots.free == 1 and slots.try_take()


async def test_a_slot_handed_over_as_its_wait_is_cancelled_is_not_lost() -> None:
    """The slot reaches the first waiter in the same turn as its cancellation: either that
    waiter took it before the cancellation reached it (trio) and gives it back, or it
    passes it on as it unwinds (asyncio); the next waiter gets it either way."""
    slots = _all_taken(1)
    order: list[str] = []

    async def taker(name: str) -> None:
        await slots.take()
        order.append(name)
        slots.give_back()

    with anyio.fail_after(_BOUND):
        async with anyio.create_task_group() as tg:
            first = anyio.CancelScope()

            async def cancelled_taker() -> None:
                with first:
                    await taker("cancelled")

            tg.start_soon(cancelled_taker)
            await _queued(slots, 1)
            tg.start_soon(taker, "next")
            await _queued(slots, 2)
            slots.give_back()
            first.cancel()
    assert order in (["next"], ["cancelled", "next"])
    assert slots.free == 1 and slots.waiting == 0


async def test_a_slot_handed_to_a_waiter_cancelled_in_the_same_turn_goes_on() -> None:
    """The backend's own cancellation reaches a waiter in the turn its slot was handed to
    it: on asyncio a ``task.cancel()`` from outside anyio (anyio's own scopes wait for the
    wake-up instead), which the wait raises and which must pass the slot on; on trio a
    scope's, which comes after the hand-over, so the waiter takes the slot and gives it
    back. Either way the next waiter gets it."""
    slots = _all_taken(1)
    order: list[str] = []
    tasks: dict[str, asyncio.Task[object]] = {}
    on_asyncio = isinstance(anyio.lowlevel.current_token().native_token, asyncio.AbstractEventLoop)
    scope = anyio.CancelScope()

    async def taker(name: str) -> None:
        await slots.take()
        order.append(name)
        slots.give_back()

    async def cancelled_taker() -> None:
        if on_asyncio:
            task = asyncio.current_task()
            assert task is not None
            tasks["cancelled"] = task
            try:
                await taker("cancelled")
            except asyncio.CancelledError:
                # The test's own native cancellation: absorbed here, so that the task
                # group (which would take it for its own) goes on.
                order.append("cancelled while waiting")
        else:
            with scope:
                await taker("cancelled")

    with anyio.fail_after(_BOUND):
        async with anyio.create_task_group() as tg:
            tg.start_soon(cancelled_taker)
            await _queued(slots, 1)
            tg.start_soon(taker, "next")
            await _queued(slots, 2)
            slots.give_back()
            if on_asyncio:
                tasks["cancelled"].cancel()
            else:
                scope.cancel()
            await _noted(order, 2)
    assert order in (["cancelled while waiting", "next"], ["cancelled", "next"])
    assert slots.free == 1 and slots.waiting == 0
