"""A lane's settle slots: a count taken in arrival order, on the backend's own wake-ups.

A job whose outcome is decided takes one of its lane's ``max_in_flight`` settle slots
before it gives its token back (the capacity model in ``_facade``'s docstring). With
handlers that end at once, every job of a busy lane waits for one: its ack waits for an
earlier one to be answered. On that path ``anyio.CapacityLimiter`` costs a borrower set,
an event (an ``asyncio.Event`` on asyncio, a parking lot on trio) and its bookkeeping per
wait, about a twentieth of a no-op job's CPU on trio. The slots need none of it: nobody
borrows them on behalf of anybody, and a wait is one :class:`~sepp_anyio._io._native.Waiter`
that the slot's giver sets, handing the slot over directly.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable

    from .._io._native import Waiter

__all__ = ["Slots"]


class Slots:
    """``total`` slots, handed out first come, first served."""

    __slots__ = ("_free", "_waiter", "_waiters")

    def __init__(self, total: int, waiter: Callable[[], Waiter]) -> None:
        self._free = total
        self._waiter = waiter
        self._waiters: deque[Waiter] = deque()

    @property
    def free(self) -> int:
        """Slots nobody holds."""
        return self._free

    @property
    def waiting(self) -> int:
        """Takers waiting for a slot."""
        return len(self._waiters)

    def try_take(self) -> bool:
        """Take a slot if one is free; True if taken. (None is free while anybody waits:
        :meth:`give_back` hands a slot to a waiter, not to the count.)"""
        if self._free:
            self._free -= 1
            return True
        return False

    async def take(self) -> None:
        """Take a slot, waiting for one if none is free.

        Cancellation while waiting takes no slot (one handed over just as the wait was
        cancelled goes on to the next waiter).
        """
        if self.try_take():
            return
        waiter = self._waiter()
        self._waiters.append(waiter)
        try:
            await waiter.wait()
        except BaseException:
            if waiter.is_set():
                self.give_back()
            else:
                self._waiters.remove(waiter)
            raise

    def give_back(self) -> None:
        """Give a slot back: to the longest waiter, if any."""
        if self._waiters:
            self._waiters.popleft().set()
        else:
            self._free += 1
