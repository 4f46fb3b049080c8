"""The backend's own clock, waiter and cancel scope a connection's calls use (_native)."""

from __future__ import annotations

import anyio
import pytest

from sepp_anyio._io._native import ANYIO, native

pytestmark = pytest.mark.anyio


async def test_the_clock_is_anyios() -> None:
    now = native().now
    before = anyio.current_time()
    assert before <= now() <= anyio.current_time()


async def test_a_waiter_set_before_the_wait_returns_at_once() -> None:
    for backend_native in (native(), ANYIO):
        waiter = backend_native.waiter()
        waiter.set()
        waiter.set()  # idempotent
        with anyio.fail_after(5):
            await waiter.wait()


async def test_a_waiter_wakes_its_task_and_a_cancelled_wait_is_harmless() -> None:
    woke: list[str] = []
    for backend_native in (native(), ANYIO):
        waiter = backend_native.waiter()

        async def wait(name: str, waiter: object = waiter) -> None:
            await waiter.wait()  # type: ignore[attr-defined]
            woke.append(name)

        async with anyio.create_task_group() as tg:
            tg.start_soon(wait, "woken")
            await anyio.wait_all_tasks_blocked()
            waiter.set()
        cancelled = backend_native.waiter()
        with anyio.move_on_after(0.01) as scope:
            await cancelled.wait()
        assert scope.cancelled_caught
        cancelled.set()  # after the waiter gave up: nothing to wake, no error
    assert woke == ["woken", "woken"]


async def test_the_cancel_scope_enforces_its_deadline() -> None:
    scope = native().cancel_scope(anyio.current_time() + 0.01)
    with scope:
        await anyio.sleep(5)
    assert scope.cancelled_caught


async def test_is_set_follows_set_and_not_a_cancelled_wait() -> None:
    for backend_native in (native(), ANYIO):
        waiter = backend_native.waiter()
        with anyio.move_on_after(0) as scope:
            await waiter.wait()
        assert scope.cancelled_caught
        # A wait that gave up is not a wake-up (the server's call runners rely on it).
        assert not waiter.is_set()
        waiter.set()
        assert waiter.is_set()


async def test_the_checkpoint_yields_and_delivers_a_cancellation() -> None:
    for backend_native in (native(), ANYIO):
        order: list[str] = []

        async def other(order: list[str] = order) -> None:
            order.append("other")

        async with anyio.create_task_group() as tg:
            tg.start_soon(other)
            # Without a yield the other task could not run before the block ends (trio
            # may run a batch's tasks in either order, so allow a few).
            for _ in range(10):
                await backend_native.checkpoint()
                if order:
                    break
            order.append("after the checkpoints")
        assert order == ["other", "after the checkpoints"]
        with anyio.CancelScope() as scope:
            scope.cancel()
            await backend_native.checkpoint()
            order.append("not reached")
        assert scope.cancelled_caught
        assert order[-1] != "not reached"
