"""The backend's own clock, waiter and cancel scope a connection's calls use (_native)."""

from __future__ import annotations

import anyio
import pytest

from sepp_anyio._transport._native import ANYIO, native

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
