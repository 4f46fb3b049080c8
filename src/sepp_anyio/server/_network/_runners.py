"""Reused tasks for a connection's calls: a task is not spawned per call.

Spawning a task through anyio costs a task, its handle, a cancel scope and an event, and
the reference server answers most calls in a few steps, so on a busy connection the spawn
was about a tenth of the server's CPU per call.  :class:`Runners` keeps the tasks that
finished a call waiting for the next one, in the connection's task group: a call is handed
to a waiting runner (one event set), and a new runner is started only when none waits, so
the tasks running at once still follow the calls running at once (a long poll holds its
runner; the next call gets another).

Each call still gets its own cancel scope (its deadline, a reset from the client): that is
the caller's work, in the function it submits.  Nothing carries from one call to the next
on a runner but the task itself; the server's handlers keep no context variables.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Awaitable, Callable
from typing import Final, Generic, TypeVar

import anyio
import anyio.abc

from sepp_anyio._io._native import Waiter, native

__all__ = ["Runners"]

_T = TypeVar("_T")

#: Runners kept waiting for work while calls come and go; the rest end.  A waiting runner
#: holds 4-5 KB (its task, handle, scope and event), so a connection that once had 100
#: calls at once does not keep 100 of them.
DEFAULT_IDLE_RUNNERS: Final = 64
#: Runners kept by :meth:`Runners.trim`, which the owner calls once it has had no work for
#: a while: an idle connection holds at most this many, however many calls it had at once.
DEFAULT_KEEP_RUNNERS: Final = 4


class Runners(Generic[_T]):
    """Run ``work(item)`` for each submitted item, on reused tasks of ``task_group``.

    Items are taken in the order they were submitted.  ``work`` must handle its own errors:
    what it raises ends its runner and, through the task group, the connection.

    Cancellation: cancelling ``task_group`` ends every runner; items not yet taken are
    dropped (the owner accounts for them, as it would for tasks that never started).
    """

    __slots__ = (
        "_dismissed",
        "_idle",
        "_keep",
        "_max_idle",
        "_queued",
        "_task_group",
        "_waiter",
        "_work",
    )

    def __init__(
        self,
        task_group: anyio.abc.TaskGroup,
        work: Callable[[_T], Awaitable[None]],
        *,
        max_idle: int = DEFAULT_IDLE_RUNNERS,
        keep: int = DEFAULT_KEEP_RUNNERS,
        waiter: Callable[[], Waiter] | None = None,
    ) -> None:
        # The backend's own single-waiter wake-up (an anyio.Event looks the backend up
        # each time it is made, once per call here); made inside the event loop.
        self._waiter = waiter if waiter is not None else native().waiter
        self._task_group = task_group
        self._work = work
        self._max_idle = max_idle
        self._keep = keep
        self._queued: deque[_T] = deque()
        #: One event per waiting runner, the newest last (it is woken first: its stack
        #: and frames are the likeliest to be in the CPU's cache).
        self._idle: list[Waiter] = []
        #: The events of runners told to end by :meth:`trim`.
        self._dismissed: set[Waiter] = set()

    @property
    def waiting(self) -> int:
        """Runners waiting for an item."""
        return len(self._idle)

    @property
    def surplus(self) -> bool:
        """More runners wait than :meth:`trim` keeps."""
        return len(self._idle) > self._keep

    def submit(self, item: _T) -> None:
        """Have ``item`` worked on: by a waiting runner, or by a new one if none waits.

        Never blocks; callable from synchronous code in the task group's event loop.
        """
        self._queued.append(item)
        if self._idle:
            self._idle.pop().set()
        else:
            self._task_group.start_soon(self._run)

    def trim(self) -> None:
        """End the waiting runners beyond ``keep`` (the oldest first): a burst's runners
        must not outlive it for long."""
        idle = self._idle
        while len(idle) > self._keep:
            event = idle.pop(0)
            self._dismissed.add(event)
            event.set()

    async def _run(self) -> None:
        queued = self._queued
        work = self._work
        idle = self._idle
        dismissed = self._dismissed
        while True:
            while queued:
                await work(queued.popleft())
            if len(idle) >= self._max_idle:
                return
            event = self._waiter()
            idle.append(event)
            try:
                await event.wait()
            finally:
                # Cancelled while waiting: nobody may hand this runner an item now.
                if not event.is_set():
                    idle.remove(event)
            if dismissed and event in dismissed:
                dismissed.discard(event)
                # Dismissed: what was submitted since is taken first, then the runner ends.
                while queued:
                    await work(queued.popleft())
                return
