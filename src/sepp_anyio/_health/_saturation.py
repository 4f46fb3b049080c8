"""A lane's saturation: the time-weighted share of its ``max_in_flight`` slots in use.

``sepp_worker_saturation`` (Prometheus) and ``sepp.worker.saturation`` (OpenTelemetry) are
defined as: over the interval from the previous reading *of that reader* to this one (from
the lane's start for the first reading), the time-weighted average of the lane's jobs
holding a ``max_in_flight`` slot, divided by ``max_in_flight``; time is anyio's clock
(``anyio.current_time()``, so a virtual clock drives it in tests). A reading with no time
since the previous one reports the share in use at that instant.

Why an average and not the instant value: a scrape every 15 s of a lane whose short jobs
come and go would see a random sample of 0s and 1s; the average is what an autoscaler
needs (how much of the interval the capacity was busy), and it is exact whatever the
scrape interval.

:class:`Saturation` keeps one running integral (slot-seconds in use since the start); each
reader keeps its own :class:`SaturationWindow` (the integral and the time at its previous
reading), so Prometheus scrapes and OpenTelemetry collections do not shorten each other's
intervals. The worker updates the integral from the event loop; an OpenTelemetry exporter
reads it from its own thread, so the state is one tuple, replaced whole (a reader never
sees half an update).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import anyio
import anyio.lowlevel

__all__ = ["Saturation", "SaturationWindow", "loop_clock"]


def loop_clock() -> Callable[[], float]:
    """The running event loop's own clock, which ``anyio.current_time()`` reads: the
    loop's ``time`` on asyncio, the run's clock's ``current_time`` on trio (what
    ``trio.current_time()`` calls). A fraction of the cost of ``anyio.current_time()``
    (which finds the backend at every call), for two reads per job.
    Call it inside the loop; the function it returns works in that loop only."""
    native = anyio.lowlevel.current_token().native_token
    if isinstance(native, asyncio.AbstractEventLoop):
        return native.time
    try:
        import trio.lowlevel
    except ImportError:  # pragma: no cover - no other backend but asyncio and trio
        return anyio.current_time
    clock: Callable[[], float] = trio.lowlevel.current_clock().current_time
    return clock


class Saturation:
    """Slots in use over time, for one lane of ``capacity`` slots (see the module docs).

    Updated on the worker's hot path: :meth:`change` is a few float operations and one
    tuple. Never raises.
    """

    __slots__ = ("__weakref__", "_anchor", "_origin", "_state", "capacity")

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        # (slots in use, anyio time of the last change or None before the start,
        # slot-seconds in use from the start to that change)
        self._state: tuple[int, float | None, float] = (0, None, 0.0)
        # (anyio time, time.monotonic()) at the start: lets a thread outside the event
        # loop (an OpenTelemetry exporter) tell anyio time on a real clock.
        self._anchor: tuple[float, float] | None = None
        # When the integral starts (the first start): a reader's first interval does too.
        self._origin: float | None = None

    def start(self, now: float) -> None:
        """The lane's reserve loop starts at ``now``: the integral's clock starts (only the
        first time; a second ``run()`` goes on from where the first left it)."""
        held, since, area = self._state
        if since is None:
            self._state = (held, now, area)
            self._origin = now
        self._anchor = (now, time.monotonic())

    def change(self, delta: int, now: float) -> None:
        """``delta`` slots were taken (> 0) or given back (< 0) at ``now``."""
        held, since, area = self._state
        if since is None:
            self._origin = now  # a change before start(): the clock starts here
        else:
            area += held * (now - since)
        self._state = (held + delta, now, area)

    @property
    def in_use(self) -> int:
        """Slots in use right now."""
        return self._state[0]

    def now(self) -> float | None:
        """anyio's time, from the event loop's thread or (on a real clock) another one;
        None when neither can tell (outside any event loop, before the start)."""
        try:
            return anyio.current_time()
        except RuntimeError:  # no event loop in this thread (AsyncLibraryNotFoundError too)
            anchor = self._anchor
            if anchor is None:
                return None
            return anchor[0] + (time.monotonic() - anchor[1])

    def integral(self, now: float | None) -> tuple[float, float | None]:
        """Slot-seconds in use from the start to ``now`` (to the last change when ``now`` is
        None or earlier), and the time they were counted to (None before the start)."""
        held, since, area = self._state
        if since is None:
            return area, None
        if now is None or now < since:
            return area, since
        return area + held * (now - since), now

    def window(self) -> SaturationWindow:
        """A new reader of this saturation, its first interval starting at the lane's
        start."""
        return SaturationWindow(self)


class SaturationWindow:
    """One reader's view of a :class:`Saturation`: each :meth:`sample` is the average
    over the interval since the previous one (see the module docs)."""

    __slots__ = ("_last", "_saturation")

    def __init__(self, saturation: Saturation) -> None:
        self._saturation = saturation
        # (time, integral) of the previous reading; None: none yet (the lane's start).
        self._last: tuple[float, float] | None = None

    def sample(self, now: float | None = None) -> float:
        """The average share of slots in use since the previous sample (0 to 1).

        ``now`` defaults to :meth:`Saturation.now`.
        """
        saturation = self._saturation
        if now is None:
            now = saturation.now()
        area, at = saturation.integral(now)
        if at is None:
            return saturation.in_use / saturation.capacity
        last = self._last
        if last is None:
            # The first interval starts where the lane's clock did (the integral was 0).
            origin = saturation._origin
            last = (at if origin is None else origin, 0.0)
        self._last = (at, area)
        elapsed = at - last[0]
        if elapsed <= 0:
            return saturation.in_use / saturation.capacity
        return max(0.0, (area - last[1]) / elapsed / saturation.capacity)
