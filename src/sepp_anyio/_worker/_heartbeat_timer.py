"""One timer for all of a worker's heartbeats: a job's heartbeat task starts only when
its first extension (or lease check) is due.

Most handlers end long before their lease needs extending (a 30-second lease is first
extended after 10 seconds), yet a heartbeat task started with every job costs a task, its
sleep and its cancellation: about as much CPU as the rest of a short job's life on the
worker. So a job registers when its heartbeat is first due, and one task of the worker,
:meth:`HeartbeatTimer.serve`, sleeps until the earliest such moment; when it comes and
the handler is still running, it starts the heartbeat task *in the job's own task group*.
The structure is the one it would have had from the start: the heartbeat runs in the
job's scope, shared with the handler, and a lost lease still cancels both. A job whose
handler ends first only marks its entry dead.

Dead entries stay in the heap until their time comes, unless they outnumber the live
ones: then the heap is rebuilt without them, so its size stays within about twice the
jobs in flight, whatever the rate of short jobs.
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections.abc import Callable, Coroutine
from typing import Any

import anyio
import anyio.abc

from ._lease import JobRun

__all__ = ["HeartbeatTimer"]

#: Dead entries tolerated before a rebuild is considered (a rebuild of a small heap
#: would cost more than the entries it frees).
_MIN_DEAD = 64

# An entry: [due (anyio time), order of registration, the job's run or None once it
# is dead, the job's task group or None]. A list, so that a job can kill its own entry
# in place; the order breaks ties between equal due times, so runs are never compared.
_Entry = list[Any]


class HeartbeatTimer:
    """Starts heartbeats when they are due (see the module docs); one per ``Worker.run``.

    Args:
        start: ``start(run)`` returns the coroutine of ``run``'s heartbeat, to be run in
            the job's task group from the moment its first wait is over.
    """

    __slots__ = ("_dead", "_heap", "_order", "_sleeping", "_start")

    def __init__(self, start: Callable[[JobRun], Coroutine[Any, Any, None]]) -> None:
        self._start = start
        self._heap: list[_Entry] = []
        self._order = itertools.count()
        self._dead = 0
        # The scope the serving task sleeps in, its deadline the earliest due time known
        # when it went to sleep (None while it is not asleep).
        self._sleeping: anyio.CancelScope | None = None

    def __len__(self) -> int:
        """Entries held, dead or alive (for tests of the bound)."""
        return len(self._heap)

    def add(self, run: JobRun, group: anyio.abc.TaskGroup, due: float) -> None:
        """Start ``run``'s heartbeat in ``group`` at ``due`` (anyio time), unless
        :meth:`discard` is called first. ``group`` must stay open until then or until
        :meth:`discard` (the job's task group, whose body holds the handler)."""
        entry: _Entry = [due, next(self._order), run, group]
        run.timer_entry = entry
        heapq.heappush(self._heap, entry)
        sleeping = self._sleeping
        if sleeping is not None and due < sleeping.deadline:
            sleeping.deadline = due

    def discard(self, run: JobRun) -> bool:
        """The handler of ``run`` is over: its heartbeat is not to start. Returns False
        (and does nothing) when it has started already."""
        entry = run.timer_entry
        if entry is None:
            return False
        run.timer_entry = None
        entry[2] = entry[3] = None
        self._dead += 1
        heap = self._heap
        if self._dead > _MIN_DEAD and 2 * self._dead > len(heap):
            heap[:] = [entry for entry in heap if entry[2] is not None]
            heapq.heapify(heap)
            self._dead = 0
        return True

    async def serve(self) -> None:
        """Start each heartbeat as it comes due, until cancelled (it never returns).

        Cancellation: returns nothing and starts nothing more; heartbeats already
        started belong to their jobs' task groups and are not affected.
        """
        heap = self._heap
        while True:
            now = anyio.current_time()
            while heap and heap[0][0] <= now:
                _due, _order, run, group = heapq.heappop(heap)
                if run is None:
                    self._dead -= 1
                    continue
                run.timer_entry = None
                group.start_soon(self._start, run, name=f"sepp heartbeat of job {run.ctx.id}")
            with anyio.CancelScope(deadline=heap[0][0] if heap else math.inf) as scope:
                self._sleeping = scope
                try:
                    await anyio.sleep_forever()
                finally:
                    self._sleeping = None
