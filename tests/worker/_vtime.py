"""An asyncio event loop on virtual time, the twin of trio's ``MockClock(autojump_threshold=0)``.

``loop.time()`` (and so ``anyio.current_time()``, every anyio timeout and the in-process
engine's clock) starts at 0 and stands still while callbacks run. When the loop has nothing
ready and no I/O is pending, it would block in ``select(timeout)`` until its next timer; this
loop instead jumps its clock straight to that timer. A 30 s lease expiry therefore takes
microseconds of real time, and the order of events is the same on every run.

Only for tests whose every wait is a timer or another task (the in-process server): a real
socket or a thread would see time jump while it works, exactly as under trio's MockClock.
With no timer at all, the loop blocks for real (a deadlocked test then hits pytest-timeout).
"""

from __future__ import annotations

import asyncio
import selectors
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from _typeshed import FileDescriptorLike

__all__ = ["VirtualTimeLoop"]


class _AutojumpSelector(selectors.BaseSelector):
    """Delegates to a real selector, but turns "sleep ``timeout`` seconds" into a clock jump."""

    def __init__(self, inner: selectors.BaseSelector) -> None:
        self._inner = inner
        self.jump = 0.0
        self.jumps = 0

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        events = self._inner.select(0)
        if events or (timeout is not None and timeout <= 0):
            return events
        if timeout is None:  # nothing scheduled: only I/O (or another thread) can wake us
            return self._inner.select(None)
        self.jump += timeout
        self.jumps += 1
        return []

    def register(
        self, fileobj: FileDescriptorLike, events: int, data: Any = None
    ) -> selectors.SelectorKey:
        return self._inner.register(fileobj, events, data)

    def unregister(self, fileobj: FileDescriptorLike) -> selectors.SelectorKey:
        return self._inner.unregister(fileobj)

    def modify(
        self, fileobj: FileDescriptorLike, events: int, data: Any = None
    ) -> selectors.SelectorKey:
        return self._inner.modify(fileobj, events, data)

    def get_map(self) -> Mapping[FileDescriptorLike, selectors.SelectorKey]:
        return self._inner.get_map()

    def close(self) -> None:
        self._inner.close()


class VirtualTimeLoop(asyncio.SelectorEventLoop):
    """A selector event loop whose clock only moves when every task is waiting on a timer."""

    def __init__(self) -> None:
        self._vt_selector = _AutojumpSelector(selectors.DefaultSelector())
        super().__init__(self._vt_selector)

    def time(self) -> float:
        return self._vt_selector.jump

    @property
    def jumps(self) -> int:
        """How many times the clock jumped (for sanity checks)."""
        return self._vt_selector.jumps
