"""The calls' own deadlines (``timeout=``), kept by one task per channel.

A cancel scope with a deadline is the obvious way to bound a call, and it is not cheap:
on asyncio anyio's scope schedules a timer handle and cancels it again, on trio the run
loop registers and unregisters the deadline, and on both entering and leaving the scope
walks the task's scope stack. Measured on a unary call against a grpclib server, that was
20-35 us of CPU, a sixth of the call, on either backend.

A call that waits for its response already waits on a
:class:`~sepp_anyio._io._native.Waiter` that the connection's reader sets, so the deadline
can simply be one more thing that sets it. :class:`Deadlines` keeps the deadline of every
waiting call in a heap, and its one task sleeps until the earliest of them, then fails
each call whose time is up with DEADLINE_EXCEEDED (:meth:`CallState.fail
<sepp_anyio._transport._connection.CallState.fail>`, which wakes it). Registering a call
is a heap push; the task is woken early only when a call's deadline comes before the
one it sleeps until, which with the usual one timeout per kind of call is rare.

Calls that finish leave their entry behind: finished entries at the top of the heap are
dropped whenever the task runs, and the heap is rebuilt without them once it has grown to
twice its size after the last rebuild (plus a constant), so it stays proportional to the
calls in flight, at amortised constant cost per call.

The other places a call can block (connecting, a free stream slot, send window, a
resend's backoff) are rare and keep a cancel scope of their own (see ``_stream``).
"""

from __future__ import annotations

import heapq
import itertools
import math
from typing import TYPE_CHECKING

from .._grpc import GrpcError
from .._model._error_root import StatusCode

if TYPE_CHECKING:
    from .._io._native import Native, Waiter
    from ._connection import CallState

__all__ = ["Deadlines", "deadline_exceeded"]

# Finished entries tolerated beyond twice the heap's size at its last rebuild.
_SLACK = 64


def deadline_exceeded() -> GrpcError:
    """The error of a call whose own timeout has passed."""
    return GrpcError(StatusCode.DEADLINE_EXCEEDED, "deadline exceeded (client-side timeout)")


class Deadlines:
    """The deadlines of the calls in flight on one channel, and the task that enforces them.

    :meth:`watch` is synchronous and may be called from any task of the channel's event
    loop; :meth:`run` is the task (the channel's task group owns it).
    """

    __slots__ = ("_heap", "_order", "_poke", "_rebuild_at", "_target")

    def __init__(self) -> None:
        # (deadline, order, call): ``order`` keeps two calls with one deadline apart
        # (CallState has no ordering).
        self._heap: list[tuple[float, int, CallState]] = []
        self._order = itertools.count()
        # The deadline the task sleeps until (inf: none), and its wake-up while it sleeps.
        self._target = math.inf
        self._poke: Waiter | None = None
        self._rebuild_at = _SLACK

    def __len__(self) -> int:
        """Entries held, finished calls' included (for tests of the bound)."""
        return len(self._heap)

    def watch(self, call: CallState, deadline: float) -> None:
        """Fail ``call`` with DEADLINE_EXCEEDED once ``deadline`` (the backend's clock)
        passes, unless it has ended or finished by then."""
        heap = self._heap
        heapq.heappush(heap, (deadline, next(self._order), call))
        if len(heap) > self._rebuild_at:
            heap[:] = [entry for entry in heap if not entry[2].finished]
            heapq.heapify(heap)
            self._rebuild_at = 2 * len(heap) + _SLACK
        if deadline < self._target:
            poke, self._poke = self._poke, None
            self._target = deadline
            if poke is not None:
                poke.set()

    def _expire(self, now: float) -> None:
        heap = self._heap
        while heap:
            deadline, _, call = heap[0]
            done = call.finished or call.ended
            if deadline > now and not done:
                return
            heapq.heappop(heap)
            if not done:
                call.fail(deadline_exceeded())

    async def run(self, native: Native) -> None:
        """Enforce the deadlines until cancelled (the channel closing).

        Never raises but the cancellation; calls still registered then are left to
        the connections, which fail them as the channel closes.
        """
        while True:
            self._expire(native.now())
            heap = self._heap
            self._target = heap[0][0] if heap else math.inf
            poke = self._poke = native.waiter()
            # A woken wait and a passed deadline both lead back to the top of the loop.
            with native.cancel_scope(self._target):
                await poke.wait()
