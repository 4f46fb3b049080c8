"""What a batch handler is given: one :class:`BatchItem` per job, and a :class:`BatchCtx`.

A batch handler (``Worker.batch``) decides each job on its own by calling one of its item's
methods; an item it leaves alone is acked when the handler returns. The decisions are
recorded here and carried out by the worker (``_batch``) once the handler is over: every job
is then acked or nacked by itself.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Generic, TypeVar

from .._model._checks import check_seconds, check_str
from .._model._error_root import InvalidArgumentTypeError
from .._model._job import JobCtx
from .._model._retries import RetryDirective

if TYPE_CHECKING:
    from typing_extensions import TypeVar as DefaultTypeVar

    from ._lease import JobRun

    StateT_co = DefaultTypeVar("StateT_co", covariant=True, default=Any)
else:
    StateT_co = TypeVar("StateT_co", covariant=True)

__all__ = ["BatchCtx", "BatchItem"]

T = TypeVar("T", covariant=True)


class BatchItem(Generic[T]):
    """One job of a batch: its decoded value, its context, and how it is to be settled.

    Until the handler calls one of :meth:`ack`, :meth:`fail`, :meth:`retry` or
    :meth:`dead_letter` the item is undecided: it is acked when the handler returns, and
    settled as the handler's exception says when it raises (or as the worker's timeout or
    shutdown says when it cancels the batch). The last call wins while the handler runs; the
    methods may be called from the handler's thread (a sync batch function).
    """

    __slots__ = ("_closed", "_directive", "_error", "_reason", "_run", "_value", "decided")

    def __init__(self, run: JobRun, value: T) -> None:
        self._run = run
        self._value = value
        #: Whether one of the deciding methods was called.
        self.decided = False
        # None with decided: ack. An error (fail) is settled as the handler's would be.
        self._directive: RetryDirective | None = None
        self._reason = ""
        self._error: Exception | None = None
        self._closed = False

    def __repr__(self) -> str:
        return f"<sepp_anyio.BatchItem job {self._run.ctx.id} attempt {self._run.ctx.attempt}>"

    @property
    def value(self) -> T:
        """The job's payload, decoded and validated as the task's type (the raw
        :class:`~sepp_anyio.Payload` or None for a batch registered by job type)."""
        return self._value

    @property
    def ctx(self) -> JobCtx[Any]:
        """The job's own context (id, attempt, lease, custom fields, ``state``)."""
        return self._run.ctx

    @property
    def lease_lost(self) -> bool:
        """Whether this job's lease was lost while the batch ran: another worker may own it
        now, so it is never acked or nacked here, whatever the handler decides."""
        return self._run.lease_lost

    def ack(self) -> None:
        """Ack the job (what an undecided item gets when the handler returns; deciding it
        keeps it acked even if the handler then raises).

        Raises:
            RuntimeError: the batch is over (the decision would come too late).
        """
        self._decide(None, "", None)

    def fail(self, exc: Exception) -> None:
        """Settle the job as a handler raising ``exc`` would settle one job: a
        :class:`~sepp_anyio.HandlerError` by its directive, any other exception by a nack
        with the worker's backoff for failed attempts.

        Raises:
            InvalidArgumentTypeError: ``exc`` is not an ``Exception``.
            RuntimeError: the batch is over.
        """
        if not isinstance(exc, Exception):
            raise InvalidArgumentTypeError(
                f"BatchItem.fail() takes an Exception, got {type(exc).__name__}"
            )
        self._decide(None, "", exc)

    def retry(
        self, *, after: float | None = None, reason: str = "retry asked by the handler"
    ) -> None:
        """Nack the job for another attempt: in ``after`` seconds, or under the queue's own
        retry policy when ``after`` is None. The last attempt is dead-lettered by the
        server, whatever the nack asks.

        Raises:
            InvalidArgumentError: ``after`` is negative or not finite.
            RuntimeError: the batch is over.
        """
        directive = (
            RetryDirective.default()
            if after is None
            else RetryDirective.after(check_seconds(after, "retry(after=)"))
        )
        self._decide(directive, check_str(reason, "reason", allow_empty=True), None)

    def dead_letter(self, reason: str = "dead-lettered by the handler") -> None:
        """Nack the job onto the dead-letter path now, with ``reason``.

        Raises:
            RuntimeError: the batch is over.
        """
        self._decide(
            RetryDirective.dead_letter(), check_str(reason, "reason", allow_empty=True), None
        )

    def _decide(
        self, directive: RetryDirective | None, reason: str, error: Exception | None
    ) -> None:
        if self._closed:
            raise RuntimeError(
                f"job {self._run.ctx.id}: its batch handler has returned; decide its items"
                " before then"
            )
        self.decided = True
        self._directive, self._reason, self._error = directive, reason, error


class BatchCtx(Generic[StateT_co]):
    """The context of one call of a batch handler (each job has its own ``item.ctx``).

    Generic in the type of :attr:`state`, like :class:`~sepp_anyio.JobCtx`.
    """

    __slots__ = ("_state", "job_type", "size", "worker_id")

    def __init__(self, *, job_type: str, size: int, worker_id: str, state: Any) -> None:
        #: The job type of every job in the batch.
        self.job_type = job_type
        #: The number of items the handler is given.
        self.size = size
        #: The worker's id.
        self.worker_id = worker_id
        self._state = state

    def __repr__(self) -> str:
        return f"<sepp_anyio.BatchCtx {self.job_type!r} of {self.size} job(s)>"

    @property
    def state(self) -> StateT_co:
        """The value the worker's ``lifespan`` yielded (None without one)."""
        state: StateT_co = self._state
        return state
