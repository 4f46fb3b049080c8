"""Group commit: one task turns the writes of many RPCs into few store transactions.

An RPC mutates the in-memory state, then :meth:`Committer.submit` queues its writes and gets a
ticket; the committer task takes *everything* queued while the previous transaction was in
flight and commits it as one transaction.  Only then are the tickets completed (the RPCs
reply) and the after-commit callbacks run (parked reserves are woken).

Invariant: groups are committed in submission order, and a ticket completes only after every
ticket submitted before it.  Since an RPC submits right after mutating (no await in between),
any reply describes only state that is durable, including replies that merely *observed*
another RPC's uncommitted change (they submit an empty ticket as a barrier).

Storage failure (disk full, I/O error)
--------------------------------------
When a commit raises, memory is ahead of disk: the failed group's RPCs, and every group
queued behind it, have already changed the in-memory state, and later groups may build on
those changes (a reserve of a job whose enqueue failed to commit).  Answering the failed
group with an error would be a lie waiting to happen: a commit that raised may still have
reached the disk (SQLite, like any store, cannot always tell: an fsync that fails after the
WAL frames were written), and the rows are still in memory, where the next successful commit
of a later group would not undo them either.  So the rule is:

* **A ticket is answered OK only after a commit containing its writes has returned.**
* **A failed commit is not answered: the same group is retried, the same writes in the same
  order,** after :data:`STORAGE_RETRY_INITIAL_DELAY`, doubling up to
  :data:`STORAGE_RETRY_MAX_DELAY`, until it succeeds; then its tickets are answered OK and
  the groups queued behind it follow, in order.  Retrying is safe even when the failed
  attempt did reach the disk: every row write is absolute (put a whole row, set columns to
  values, delete a key), so applying a group twice leaves the rows as applying it once.
  Nothing is rolled back in memory and nothing is lost or applied twice.
* **While failed, no new work is accepted**: :meth:`Committer.check`, which every RPC calls
  *before* it touches the state, raises UNAVAILABLE "storage unavailable: ..." (retryable:
  such a call changed nothing), and health answers NOT_SERVING (:attr:`Committer.failed`).
  Writes of RPCs already past that check (a reserve that was woken, a barrier) are still
  accepted and queued: they have changed memory, so they must reach the disk too.
* **An RPC is answered with an error only when its writes are known not to be durable**, or
  as after a crash: at teardown while the store is still failing, after one last attempt,
  the failed group's tickets get INTERNAL "storage commit failed" (the group may or may not
  be durable: the same ambiguity as a crash during a commit, and INTERNAL is never retried
  by clients) and the groups behind it, never handed to the store, UNAVAILABLE "server is
  shut down".  The next engine recovers exactly what the store holds.

A client whose RPC is held while the store fails sees its own deadline pass
(DEADLINE_EXCEEDED: outcome unknown, as for any slow server); if its writes commit later,
they do so exactly once.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

import anyio
from anyio.abc import TaskStatus

from sepp_anyio._io._native import ANYIO, Native, Waiter, native
from sepp_anyio._model._error_root import StatusCode

from .._errors import EngineError
from .._store._records import Write
from .._store._store import Store

logger = logging.getLogger(__name__)

#: Seconds before the first retry of a failed commit.  Short: a transient error (a lock, a
#: full disk freed by a log rotation) costs the held RPCs little.
STORAGE_RETRY_INITIAL_DELAY = 0.05
#: The longest pause between two retries of a failed commit, in seconds; the pause doubles
#: from :data:`STORAGE_RETRY_INITIAL_DELAY` up to this.  It bounds both how long recovery can
#: lag behind the disk getting room again and the rate of failure log lines.
STORAGE_RETRY_MAX_DELAY = 5.0


def _describe(exc: BaseException) -> str:
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


class Ticket:
    """A submitted group of writes; :meth:`wait` returns once they are durable."""

    __slots__ = ("_after_commit", "_done", "_error", "writes")

    def __init__(
        self,
        writes: Sequence[Write],
        after_commit: Callable[[], None] | None,
        done: Waiter | None = None,
    ) -> None:
        self.writes = writes
        self._after_commit = after_commit
        # One task waits for a ticket: the RPC that submitted it.
        self._done: Waiter = done if done is not None else anyio.Event()
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
        """Wait until the writes are committed (however long the store takes to recover).

        Cancellation: the writes are committed anyway (they are no longer the caller's).

        Raises:
            EngineError: INTERNAL "storage commit failed" if the engine stopped while the
                store was still failing (the writes may or may not be durable); UNAVAILABLE if the
                engine was torn down before handing them to the store.
        """
        await self._done.wait()
        if self._error is not None:
            raise self._error


class Committer:
    """Owns the store's write path; :meth:`run` is its task."""

    def __init__(self, store: Store) -> None:
        self._store = store
        # The backend's own wake-ups once run() started (a ticket per write RPC, and an
        # anyio.Event looks the backend up each time one is made).
        self._native: Native = ANYIO
        self._pending: list[Ticket] = []
        self._wakeup = anyio.Event()
        self._closing = False
        self._closed = anyio.Event()
        #: The last commit error while the store is failing; None while it is healthy.
        self._failure: BaseException | None = None
        self._recovered = anyio.Event()

    @property
    def failed(self) -> bool:
        """True from a failed commit until a retry of it succeeds (health: NOT_SERVING)."""
        return self._failure is not None

    async def wait_recovered(self) -> None:
        """Return once the store is healthy (at once if it is).  A plain cancellation point."""
        while self._failure is not None:
            await self._recovered.wait()

    def check(self) -> None:
        """Refuse new work while the store is failing; call before touching the state.

        Raises:
            EngineError: UNAVAILABLE "storage unavailable: ..." (nothing was changed, so
                the call can be retried), naming the store's error.
        """
        if self._failure is not None:
            raise EngineError(
                StatusCode.UNAVAILABLE,
                "storage unavailable: writes are failing "
                f"({_describe(self._failure)}); retrying, try again later",
            )

    def submit(self, writes: Sequence[Write], after_commit: Callable[[], None] | None) -> Ticket:
        """Queue *writes* (possibly none: a barrier) for the next group.

        Accepted while the store is failing (the caller has changed memory already: see the
        module docstring); they are committed once the store has recovered.

        Raises:
            EngineError: UNAVAILABLE once closed.
        """
        if self._closing:
            raise EngineError(StatusCode.UNAVAILABLE, "server is shut down")
        ticket = Ticket(writes, after_commit, self._native.waiter())
        self._pending.append(ticket)
        self._wakeup.set()
        return ticket

    def close(self) -> None:
        """Stop accepting work; :meth:`run` returns once everything queued is committed, or,
        if the store is failing, after one more attempt (see the module docstring)."""
        self._closing = True
        self._wakeup.set()
        self._closed.set()

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Commit queued groups until :meth:`close`.  Started by the engine's task group.

        Cancellation (engine teardown after an error): tickets not yet committed are released
        with UNAVAILABLE, so no RPC waits forever; their writes may or may not be durable.
        """
        self._native = native()
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
                if writes and not await self._commit(writes):
                    # Closed while the store still fails: see the module docstring.
                    failed = EngineError(StatusCode.INTERNAL, "storage commit failed")
                    for ticket in group:
                        ticket.complete(failed)
                    return
                for ticket in group:
                    ticket.complete()
        finally:
            self._closing = True
            lost = EngineError(StatusCode.UNAVAILABLE, "server is shut down")
            for ticket in (*group, *self._pending):
                if not ticket.done:
                    ticket.complete(lost)
            self._pending = []

    async def _commit(self, writes: Sequence[Write]) -> bool:
        """Commit *writes*, retrying with backoff while the store fails.

        Returns True once committed; False if the committer was closed and the attempt after
        that failed too.
        """
        delay = STORAGE_RETRY_INITIAL_DELAY
        attempts = 0
        started = anyio.current_time()
        while True:
            try:
                await self._store.commit(writes)
            except Exception as exc:
                # The store is outside our control (disk full, I/O error): hold the group and
                # retry it, refusing new work meanwhile, rather than crash or answer wrongly.
                attempts += 1
                if self._failure is None:
                    logger.error(
                        "storage commit failed; refusing new requests and retrying every "
                        "%g-%g s until it succeeds",
                        STORAGE_RETRY_INITIAL_DELAY,
                        STORAGE_RETRY_MAX_DELAY,
                        exc_info=True,
                    )
                    self._recovered = anyio.Event()
                else:
                    logger.warning(
                        "storage commit failed again (attempt %d): %s", attempts, _describe(exc)
                    )
                self._failure = exc
                if self._closing:
                    logger.error(
                        "server stopping with storage still failing: the held requests are "
                        "answered 'storage commit failed' (%d write(s) may not be durable)",
                        len(writes),
                    )
                    return False
                # Woken early by close() for the one last attempt.
                with anyio.move_on_after(delay):
                    await self._closed.wait()
                delay = min(delay * 2, STORAGE_RETRY_MAX_DELAY)
                continue
            if self._failure is not None:
                self._failure = None
                self._recovered.set()
                logger.warning(
                    "storage recovered: the commit succeeded after %d failed attempt(s) "
                    "over %.1f s; accepting requests again",
                    attempts,
                    anyio.current_time() - started,
                )
            return True
