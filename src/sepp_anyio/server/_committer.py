"""Group commit: one task turns the writes of many RPCs into few store transactions.

An RPC mutates the in-memory state, then :meth:`Committer.submit` queues its writes and gets a
ticket; the committer task takes *everything* queued while the previous transaction was in
flight and commits it as one transaction.  Only then are the tickets completed (the RPCs
reply) and the after-commit callbacks run (parked reserves are woken).

Invariant: groups are committed in submission order, and a ticket completes only after every
ticket submitted before it.  Since an RPC submits right after mutating (no await in between),
any reply describes only state that is durable, including replies that merely *observed*
another RPC's uncommitted change (they submit an empty ticket as a barrier).

A failed transaction leaves memory ahead of disk, so the committer fails that group and then
refuses all further work ("storage unavailable"); a restart recovers from the store.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

import anyio
from anyio.abc import TaskStatus
from grpclib.const import Status

from ._errors import EngineError
from ._records import Write
from ._store import Store

logger = logging.getLogger(__name__)


class Ticket:
    """A submitted group of writes; :meth:`wait` returns once they are durable."""

    __slots__ = ("_after_commit", "_done", "_error", "writes")

    def __init__(self, writes: Sequence[Write], after_commit: Callable[[], None] | None) -> None:
        self.writes = writes
        self._after_commit = after_commit
        self._done = anyio.Event()
        self._error: EngineError | None = None

    @property
    def done(self) -> bool:
        return self._done.is_set()

    def complete(self, error: EngineError | None = None) -> None:
        """Release the waiter; on success run the after-commit callback."""
        self._error = error
        self._done.set()
        if error is None and self._after_commit is not None:
            self._after_commit()

    async def wait(self) -> None:
        """Wait until the writes are committed.

        Cancellation: the writes are committed anyway (they are no longer the caller's).
        :raises EngineError: INTERNAL "storage commit failed" if the transaction failed;
            UNAVAILABLE if the engine was torn down before committing them.
        """
        await self._done.wait()
        if self._error is not None:
            raise self._error


class Committer:
    """Owns the store's write path; :meth:`run` is its task."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self._pending: list[Ticket] = []
        self._wakeup = anyio.Event()
        self._closing = False
        self._failed = False

    @property
    def failed(self) -> bool:
        """True once a transaction has failed: the engine is no longer usable."""
        return self._failed

    def check(self) -> None:
        """:raises EngineError: INTERNAL "storage unavailable" after a failed commit."""
        if self._failed:
            raise EngineError(Status.INTERNAL, "storage unavailable")

    def submit(self, writes: Sequence[Write], after_commit: Callable[[], None] | None) -> Ticket:
        """Queue *writes* (possibly none: a barrier) for the next group.

        :raises EngineError: INTERNAL after a failed commit; UNAVAILABLE once closed.
        """
        self.check()
        if self._closing:
            raise EngineError(Status.UNAVAILABLE, "server is shut down")
        ticket = Ticket(writes, after_commit)
        self._pending.append(ticket)
        self._wakeup.set()
        return ticket

    def close(self) -> None:
        """Stop accepting work; :meth:`run` returns once everything queued is committed."""
        self._closing = True
        self._wakeup.set()

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Commit queued groups until :meth:`close`.  Started by the engine's task group.

        Cancellation (engine teardown after an error): tickets not yet committed are released
        with UNAVAILABLE, so no RPC waits forever; their writes may or may not be durable.
        """
        task_status.started()
        group: list[Ticket] = []
        try:
            while True:
                if not self._pending:
                    if self._closing:
                        return
                    self._wakeup = anyio.Event()
                    await self._wakeup.wait()
                    continue
                group, self._pending = self._pending, []
                writes = [write for ticket in group for write in ticket.writes]
                if writes and not self._failed:
                    try:
                        await self._store.commit(writes)
                    except Exception:
                        # The store is outside our control (disk full, I/O error): report it
                        # to the RPCs and refuse further work, rather than crash the server.
                        logger.exception("storage commit failed; refusing further requests")
                        self._failed = True
                error = EngineError(Status.INTERNAL, "storage commit failed")
                for ticket in group:
                    ticket.complete(error if self._failed else None)
        finally:
            self._closing = True
            lost = EngineError(Status.UNAVAILABLE, "server is shut down")
            for ticket in (*group, *self._pending):
                if not ticket.done:
                    ticket.complete(lost)
            self._pending = []
