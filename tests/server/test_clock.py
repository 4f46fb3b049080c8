"""Clock (wall time advanced by the loop clock) and ManualClock."""

from __future__ import annotations

import time

import anyio
import pytest
import trio.testing

from sepp_anyio.server import Clock, ManualClock

from ._helpers import T0

pytestmark = pytest.mark.anyio


async def test_default_clock_is_wall_time_in_milliseconds() -> None:
    clock = Clock()
    before = time.time_ns() // 1_000_000
    now = clock.now_ms()
    assert isinstance(now, int)
    assert before <= now <= time.time_ns() // 1_000_000 + 1
    assert clock.now_ms() >= now  # never backwards


@pytest.mark.parametrize(
    "anyio_backend",
    [
        pytest.param(
            ("trio", {"clock": trio.testing.MockClock(autojump_threshold=0)}), id="trio-mockclock"
        )
    ],
)
async def test_default_clock_follows_virtual_time() -> None:
    clock = Clock()
    start = clock.now_ms()
    await clock.sleep_until_ms(start + 90_000)
    assert clock.now_ms() == start + 90_000
    await anyio.sleep(3600)
    assert clock.now_ms() == start + 90_000 + 3_600_000


async def test_manual_clock_moves_only_on_advance() -> None:
    clock = ManualClock(T0)
    assert clock.now_ms() == T0
    await anyio.lowlevel.checkpoint()
    assert clock.now_ms() == T0
    await clock.advance(1.5)
    assert clock.now_ms() == T0 + 1500
    with pytest.raises(ValueError, match="backwards"):
        await clock.advance(-1)


async def test_manual_clock_wakes_sleepers_in_order_at_their_deadline() -> None:
    clock = ManualClock(T0)
    seen: list[tuple[str, int]] = []

    async def sleeper(name: str, deadline: int) -> None:
        await clock.sleep_until_ms(deadline)
        seen.append((name, clock.now_ms()))

    async with anyio.create_task_group() as tg:
        tg.start_soon(sleeper, "late", T0 + 3000)
        tg.start_soon(sleeper, "early", T0 + 1000)
        tg.start_soon(sleeper, "past", T0 - 1)
        await clock.settle()
        assert seen == [("past", T0)]
        await clock.advance(10)
    assert seen == [("past", T0), ("early", T0 + 1000), ("late", T0 + 3000)]
    assert clock.now_ms() == T0 + 10_000


async def test_manual_clock_cancelled_sleeper_is_forgotten() -> None:
    clock = ManualClock(T0)
    with anyio.move_on_after(0):
        await clock.sleep_until_ms(T0 + 1000)
    await clock.advance(2)
    assert clock.now_ms() == T0 + 2000
