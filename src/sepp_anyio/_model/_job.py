"""What comes out of the queue: a reserved job and its context.

Part of the public data model (conventions in ``_model/__init__.py``).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, Generic, Protocol

from ._checks import (
    check_seconds,
    check_str,
)
from ._enqueue import CustomValue, EnqueueAck, EnqueueRequest
from ._error_root import InvalidArgumentError, InvalidArgumentTypeError
from ._payload import Payload
from ._trace import TraceContext

if TYPE_CHECKING:
    # PEP 696 defaults: typing has them from 3.13 only, and they matter to type checkers
    # alone (at run time a plain TypeVar subscripts the same way).
    from typing_extensions import TypeVar

    #: The type of a worker's lifespan state (``JobCtx.state``); ``Any`` when not given.
    StateT_co = TypeVar("StateT_co", covariant=True, default=Any)
else:
    from typing import TypeVar

    StateT_co = TypeVar("StateT_co", covariant=True)

#: A follow-up's value type (what ``JobCtx.enqueue`` checks against the task's).
ValueT = TypeVar("ValueT")

__all__ = [
    "Job",
    "JobCtx",
    "attach_enqueuer",
    "attach_lease",
    "attach_state",
    "follow_up_key",
    "is_traced",
    "result_of",
    "set_result",
    "set_traced",
]


class _LeaseLike(Protocol):
    """What :class:`JobCtx` needs from the client's lease object (internal).

    The client attaches one per reserved job (:func:`attach_lease`). ``known_expiry`` is the
    expiry the worker's heartbeat schedules against: it must follow the *granted* lease,
    which the server may clamp below what was requested.
    """

    #: The lease expiry as last confirmed by the server.
    known_expiry: datetime

    async def extend(self, ctx: JobCtx[Any], seconds: float) -> datetime:
        """Extend the lease of ``ctx`` (the context it is attached to) to ``seconds`` from
        now; return the server's new expiry.

        The context is passed in rather than kept: a lease that kept its context would make
        a reference cycle of the two, left for the garbage collector to find, per job.
        """
        ...


class _EnqueuerLike(Protocol):
    """What :meth:`JobCtx.enqueue` sends through (internal): the worker attaches its
    client (:func:`attach_enqueuer`)."""

    async def enqueue(self, request: EnqueueRequest) -> EnqueueAck: ...

    async def enqueue_atomic(self, requests: Sequence[EnqueueRequest]) -> list[EnqueueAck]: ...


class _TaskLike(Protocol[ValueT]):
    """What :meth:`JobCtx.enqueue` needs of a ``sepp.Task`` (this tier cannot name it).

    ``decode`` is not called: it makes the value type invariant, so that a value of the
    wrong type is reported as such (a contravariant one would only fail inference).
    """

    def decode(self, payload: Payload | None) -> ValueT: ...

    def request(
        self,
        value: ValueT,
        *,
        delay: float | None = None,
        priority: int | None = None,
        idempotency_key: str | None = None,
        trace_context: TraceContext | None = None,
    ) -> EnqueueRequest: ...


def follow_up_key(job_id: str, key: str) -> str:
    """The idempotency key of the follow-up ``key`` of job ``job_id``: the same for every
    delivery of the job, so a redelivery cannot enqueue a second child."""
    return f"follow-up:{job_id}:{key}"


@dataclass(slots=True, kw_only=True)
class JobCtx(Generic[StateT_co]):
    """Everything about a reserved job except its payload, and the handle on its lease.

    Built by the client for each job a reserve returns. All fields are informational
    except :attr:`lease_expires_at`, which :meth:`extend` keeps current.

    Generic in the type of :attr:`state` (the worker's lifespan value): annotate
    ``ctx: JobCtx[AppState]``; a bare ``JobCtx`` means ``JobCtx[Any]``.
    """

    #: The job's id (a UUID string).
    id: str
    queue: str
    job_type: str
    #: 0 to 9.
    priority: int
    #: 1 on the first delivery, +1 on each redelivery.
    attempt: int
    max_attempts: int
    #: When the server committed the job.
    enqueued_at: datetime
    #: When the producer asked it to run, if it did.
    scheduled_at: datetime | None
    #: When the lease runs out unless extended; updated by :meth:`extend`.
    lease_expires_at: datetime
    custom: Mapping[str, CustomValue] = field(default_factory=dict)
    #: The producer's (or the server's delivery span's) trace context.
    trace_context: TraceContext | None = None
    #: The worker id the job was reserved under, echoed on ack/nack/extend.
    worker_id: str | None = None
    _lease: _LeaseLike | None = field(default=None, repr=False, compare=False)
    # Set by the worker before the handler runs (its lifespan's value).
    _state: Any = field(default=None, repr=False, compare=False)
    # Whether the job's spans are made (its process span, ack, nack, extensions): decided
    # once by the reserve that brought it (``_otel.tracing``); None asks at each span.
    _traced: bool | None = field(default=None, repr=False, compare=False)
    # What follow-ups are enqueued through (the worker's client), set by the worker.
    _enqueuer: _EnqueuerLike | None = field(default=None, repr=False, compare=False)
    # The handler's result, encoded, for a job that asks for one (set by a typed task).
    _result: bytes | None = field(default=None, repr=False, compare=False)

    @property
    def state(self) -> StateT_co:
        """The value the worker's ``lifespan`` yielded (None for a worker without one,
        and for a context that did not come through a worker)."""
        state: StateT_co = self._state
        return state

    async def extend(self, seconds: float) -> datetime:
        """Extend the lease to ``seconds`` from now and return the new expiry.

        The server may grant less than asked (it clamps to its maximum lease). The granted
        expiry is stored in :attr:`lease_expires_at` and in the lease the worker's heartbeat
        follows, so an explicit extension also delays the next automatic one.

        If cancelled midway, the server may or may not have extended the lease; the known
        expiry is then left unchanged (the conservative choice).

        Args:
            seconds: finite, at least 0.001 (the wire carries whole milliseconds).

        Raises:
            InvalidArgumentError: for a duration below 1 ms or not finite.
            RuntimeError: if the context has no lease (it was not made by a reserve).
            JobNotFoundError: if the lease was lost (expired, already settled).
            AttemptMismatchError: if the job was redelivered to someone else.
            ClientError: for transport and server failures.
        """
        seconds = check_seconds(seconds, "seconds", minimum="millisecond")
        lease = self._lease
        if lease is None:
            raise RuntimeError(
                f"JobCtx for job {self.id!r} has no lease attached; only contexts returned "
                "by Client.reserve() (or given to a Worker handler) can be extended"
            )
        expiry = await lease.extend(self, seconds)
        lease.known_expiry = expiry
        self.lease_expires_at = expiry
        return expiry

    async def enqueue(
        self,
        task: _TaskLike[ValueT],
        value: ValueT,
        *,
        key: str,
        delay: float | None = None,
        priority: int | None = None,
    ) -> EnqueueAck:
        """Enqueue a follow-up job of ``task`` from inside this job's handler.

        Its idempotency key is derived from this job's id and ``key``
        (``follow-up:<job id>:<key>``), so every delivery of this job enqueues the same
        child: a redelivery (a crash after this call, a lost lease) finds the first one
        (``ack.deduplicated``) within the child queue's deduplication window. Give each
        follow-up of a job its own ``key``. The child's trace context continues this job's
        span (its process span when tracing, else the trace context this job carries).

        Cancellation: as for :meth:`Client.enqueue`, the child may or may not have been
        enqueued; doing it again (or a redelivery doing it) is safe.

        Args:
            task: a ``sepp.Task``; ``value`` is validated against its type.
            key: non-empty; names this follow-up among the job's.
            delay, priority: as for ``task.request``.

        Raises:
            InvalidArgumentError: an empty ``key``, or ``value`` does not validate.
            RuntimeError: the context did not come through a worker.
            JobRejectedError, ClientError: as for :meth:`Client.enqueue`.
        """
        enqueuer = self._follow_up_enqueuer()
        request = task.request(
            value,
            delay=delay,
            priority=priority,
            idempotency_key=follow_up_key(self.id, check_str(key, "key")),
            trace_context=self._child_trace(),
        )
        return await enqueuer.enqueue(request)

    async def enqueue_atomic(self, requests: Sequence[EnqueueRequest]) -> list[EnqueueAck]:
        """Enqueue a fan-out of follow-up jobs, all or none, in one ``EnqueueAtomic``.

        Each request's ``idempotency_key`` is its key among this job's follow-ups (as
        ``key`` is for :meth:`enqueue`; required, and unique within the list): it is
        replaced by the key derived from this job's id, so a redelivery of this job
        enqueues none of them twice. Build them with ``task.request(value,
        idempotency_key="part-1")``. A request without a trace context gets this job's
        (as for :meth:`enqueue`).

        Cancellation: as for :meth:`Client.enqueue_atomic`.

        Raises:
            InvalidArgumentError: a request without an ``idempotency_key``, or two with the
                same one (the message names the index).
            InvalidArgumentTypeError: an item that is not an :class:`EnqueueRequest`.
            RuntimeError: the context did not come through a worker.
            BatchValidationError, ClientError: as for :meth:`Client.enqueue_atomic`.
        """
        enqueuer = self._follow_up_enqueuer()
        trace = self._child_trace()
        children: list[EnqueueRequest] = []
        seen: set[str] = set()
        for index, request in enumerate(requests):
            if not isinstance(request, EnqueueRequest):
                raise InvalidArgumentTypeError(
                    f"requests[{index}] must be an EnqueueRequest, got {type(request).__name__}"
                )
            key = request.idempotency_key
            if key is None:
                raise InvalidArgumentError(
                    f"requests[{index}] has no idempotency_key: a follow-up needs one, its key "
                    "among this job's follow-ups (task.request(value, idempotency_key=...))"
                )
            if key in seen:
                raise InvalidArgumentError(
                    f"requests[{index}] repeats the idempotency_key {key!r}: each follow-up "
                    "of a job needs its own"
                )
            seen.add(key)
            child = copy.copy(request)  # validated when made: not again
            object.__setattr__(child, "idempotency_key", follow_up_key(self.id, key))
            if child.trace_context is None and trace is not None:
                object.__setattr__(child, "trace_context", trace)
            children.append(child)
        return await enqueuer.enqueue_atomic(children)

    def _follow_up_enqueuer(self) -> _EnqueuerLike:
        enqueuer = self._enqueuer
        if enqueuer is None:
            raise RuntimeError(
                f"JobCtx for job {self.id!r} has no client attached; only the contexts a "
                "Worker gives its handlers can enqueue follow-ups"
            )
        return enqueuer

    def _child_trace(self) -> TraceContext | None:
        """The current span (the job's process span when tracing), else the job's own."""
        return TraceContext.from_current() or self.trace_context

    def __str__(self) -> str:
        return (
            f"JobCtx(id={self.id}, job_type={self.job_type}, "
            f"attempt={self.attempt}/{self.max_attempts}, priority={self.priority})"
        )


# The internal setters and getters of JobCtx's private fields, for the modules that build
# a context (the wire conversion, the client's reserve) and the worker that runs it: no
# other module touches the fields themselves.


def attach_lease(ctx: JobCtx[Any], lease: _LeaseLike) -> None:
    """Give ``ctx`` the lease that :meth:`JobCtx.extend` goes through (a reserve does, once
    per reserved job, before the context is handed to anyone)."""
    ctx._lease = lease


def attach_state(ctx: JobCtx[Any], state: Any) -> None:
    """Set what :attr:`JobCtx.state` returns (the worker does: its lifespan's value, before
    the handler runs)."""
    ctx._state = state


def attach_enqueuer(ctx: JobCtx[Any], enqueuer: _EnqueuerLike) -> None:
    """Give ``ctx`` what :meth:`JobCtx.enqueue` sends follow-ups through (the worker
    does: its client, before the handler runs)."""
    ctx._enqueuer = enqueuer


def set_result(ctx: JobCtx[Any], data: bytes) -> None:
    """Record the handler's result, encoded as JSON (a typed task does, as it returns)."""
    ctx._result = data


def result_of(ctx: JobCtx[Any]) -> bytes | None:
    """The handler's result as :func:`set_result` recorded it (None: none recorded)."""
    return ctx._result


def set_traced(ctx: JobCtx[Any], traced: bool | None) -> None:
    """Record whether the job's spans are made (decided once by the reserve that brought
    it; None asks the tracer at each span)."""
    ctx._traced = traced


def is_traced(ctx: JobCtx[Any]) -> bool | None:
    """Whether the job's spans are made, as :func:`set_traced` recorded it (None: ask)."""
    return ctx._traced


@dataclass(frozen=True, slots=True)
class Job:
    """A reserved job: its payload (``None`` if it has no data) and its context."""

    payload: Payload | None
    ctx: JobCtx
