"""Event loop lag: how late a timer fires, measured by a task of its own.

The task sleeps ``interval`` over and over and records by how much each sleep overshot.
Whatever blocks the loop (a sync call in a handler, a CPU-bound loop) delays that wake-up by
as long as it blocks. The lag reported is the worst sample of the last ``window`` seconds, so
a probe that comes a moment after a block still sees it. While the loop is blocked nothing
can ask, so :meth:`LoopLag.lag` also counts how overdue the current sleep is: the first
request served after a block sees it whichever of the two tasks the loop runs first.
"""

from __future__ import annotations

import math

import anyio
import anyio.abc

from .._model._checks import check_seconds

__all__ = ["LoopLag"]


class LoopLag:
    """Samples the loop's lag every ``interval`` seconds while :meth:`run` runs."""

    __slots__ = (
        "_asleep_since",
        "_changed",
        "_last",
        "_peak",
        "_peak_at",
        "interval",
        "samples",
        "window",
    )

    def __init__(self, interval: float = 0.25, window: float = 1.0) -> None:
        check_seconds(interval, "lag sampling interval", minimum="positive")
        check_seconds(window, "lag window")
        self.interval = float(interval)
        self.window = float(window)
        self._asleep_since: float | None = None
        self._last = 0.0
        self._peak = 0.0
        self._peak_at = -math.inf
        self.samples = 0
        self._changed: anyio.Event | None = None

    def lag(self, now: float) -> float:
        """The worst lag of the last ``window`` seconds, or more if the current sleep is
        already overdue."""
        since = self._asleep_since
        overdue = 0.0 if since is None else now - since - self.interval
        recent = self._peak if now - self._peak_at <= self.window else self._last
        return max(recent, overdue, 0.0)

    def _record(self, now: float, lag: float) -> None:
        self._last = lag
        if lag >= self._peak or now - self._peak_at > self.window:
            self._peak, self._peak_at = lag, now

    async def wait_sample(self) -> None:
        """Wait for the next sample (for tests and diagnostics)."""
        if self._changed is None:
            self._changed = anyio.Event()
        await self._changed.wait()

    async def run(
        self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """Sample until cancelled."""
        self._asleep_since = anyio.current_time()
        task_status.started()
        while True:
            await anyio.sleep(self.interval)
            now = anyio.current_time()
            assert self._asleep_since is not None
            self._record(now, max(now - self._asleep_since - self.interval, 0.0))
            self.samples += 1
            self._asleep_since = now
            changed, self._changed = self._changed, None
            if changed is not None:
                changed.set()
