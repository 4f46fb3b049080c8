"""Injectable time for the engine: integer milliseconds since the epoch.

:class:`Clock` (the default) reads the wall clock once and then advances with the event loop's
monotonic clock (``anyio.current_time()``).  Two consequences, both intended:

* engine time never jumps backwards when the wall clock is adjusted, and
* under trio's ``MockClock(autojump_threshold=0)`` engine time is virtual: lease expiry, retry
  delays and long polls complete instantly in tests.

:class:`ManualClock` never moves on its own; ``await clock.advance(seconds)`` moves it and lets
every task that was sleeping on it run.  It works on both backends.
"""

from __future__ import annotations

import heapq
import itertools
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import anyio
import anyio.lowlevel

from sepp_anyio._io._native import native
from sepp_anyio._model._error_root import InvalidArgumentError


class Clock:
    """The default clock: wall time anchored at first use, advanced by the loop's clock.

    A clock instance belongs to one event loop run: the anchor is taken the first time
    :meth:`now_ms` is called (which must happen inside the loop) and it is not re-taken.
    """

    def __init__(self) -> None:
        self._anchor: tuple[int, float] | None = None
        # The loop's own clock, looked up with the anchor (anyio.current_time looks the
        # backend up on every read, and the engine reads the time on every call).
        self._loop_time: Callable[[], float] = anyio.current_time

    def _get_anchor(self) -> tuple[int, float]:
        if self._anchor is None:
            self._loop_time = native().now
            self._anchor = (time.time_ns() // 1_000_000, self._loop_time())
        return self._anchor

    def now_ms(self) -> int:
        """Current time in integer milliseconds since the Unix epoch."""
        wall_ms, loop_anchor = self._get_anchor()
        return wall_ms + math.floor((self._loop_time() - loop_anchor) * 1000)

    async def sleep_until_ms(self, deadline_ms: int) -> None:
        """Sleep until :meth:`now_ms` reaches *deadline_ms* (returns at once if it has).

        Cancellation: a plain cancellation point; nothing to clean up.
        """
        wall_ms, loop_anchor = self._get_anchor()
        # A microsecond of slack so float rounding cannot wake us just before the deadline.
        await anyio.sleep_until(loop_anchor + (deadline_ms - wall_ms) / 1000 + 1e-6)


@dataclass(order=True, slots=True)
class _Sleeper:
    deadline_ms: int
    seq: int
    event: anyio.Event = field(compare=False)
    #: False once the sleeper is gone (cancelled); lazy deletion keeps cancellation O(1).
    active: bool = field(default=True, compare=False)


class ManualClock(Clock):
    """A clock that only moves with :meth:`advance`; for deterministic tests on any backend.

    "Let every task run" means ``anyio.wait_all_tasks_blocked()``: a task waiting for a worker
    thread (a SqliteStore commit) counts as blocked, so with SQLite wait for the RPC itself
    rather than for :meth:`advance` or :meth:`settle`.
    """

    def __init__(self, start_ms: int = 1_700_000_000_000) -> None:
        super().__init__()
        self._now = start_ms
        self._sleepers: list[_Sleeper] = []
        self._seq = itertools.count()

    def now_ms(self) -> int:
        return self._now

    async def sleep_until_ms(self, deadline_ms: int) -> None:
        if deadline_ms <= self._now:
            await anyio.lowlevel.checkpoint()
            return
        sleeper = _Sleeper(deadline_ms, next(self._seq), anyio.Event())
        heapq.heappush(self._sleepers, sleeper)
        try:
            await sleeper.event.wait()
        finally:
            sleeper.active = False

    def _next_sleeper_ms(self) -> int | None:
        while self._sleepers and not self._sleepers[0].active:
            heapq.heappop(self._sleepers)
        return self._sleepers[0].deadline_ms if self._sleepers else None

    async def advance(self, seconds: float) -> None:
        """Move time forward by *seconds* and let every task that wakes up run.

        Time stops at each sleeper's deadline on the way, in order, so work scheduled for an
        earlier instant is done (and sees that instant as "now") before later work.  Before
        the first step and after each one it waits until all tasks are blocked
        (``anyio.wait_all_tasks_blocked``).

        Raises:
            ValueError: if *seconds* is negative.

        Cancellation: time stays where the advance had got to (the deadline of the last
        sleepers it woke, short of the target; unchanged if cancelled before the first
        step); those sleepers have been woken, and a later advance goes on from there.
        """
        if seconds < 0:
            raise InvalidArgumentError("a ManualClock cannot go backwards")
        target = self._now + round(seconds * 1000)
        # First let every task reach its next sleep, so no deadline is registered late.
        await anyio.wait_all_tasks_blocked()
        while (next_ms := self._next_sleeper_ms()) is not None and next_ms <= target:
            self._now = max(self._now, next_ms)
            while (due := self._next_sleeper_ms()) is not None and due <= self._now:
                heapq.heappop(self._sleepers).event.set()
            await anyio.wait_all_tasks_blocked()
        self._now = target
        await anyio.wait_all_tasks_blocked()

    async def settle(self) -> None:
        """Let every runnable task run until all are blocked, without moving time.

        Cancellation: a plain cancellation point; nothing changes.
        """
        await anyio.wait_all_tasks_blocked()
