"""What comes out of the queue: a reserved job and its context.

Part of the public data model (conventions in ``_model/__init__.py``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, Generic, Protocol

from ._checks import (
    check_seconds,
)
from ._enqueue import CustomValue
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

__all__ = ["Job", "JobCtx", "attach_lease", "attach_state", "is_traced", "set_traced"]


class _LeaseLike(Protocol):
    """What :class:`JobCtx` needs from the client's lease object (internal).

    The client attaches one per reserved job (:func:`attach_lease`). ``known_expiry`` is the
    expiry the worker's heartbeat schedules against: it must follow the *granted* lease,
    which the server may clamp below what was requested.
    """

    #: The lease expiry as last confirmed by the server.
    known_expiry: datetime

    async def extend(self, seconds: float) -> datetime:
        """Extend the lease to ``seconds`` from now; return the server's new expiry."""
        ...


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
        expiry = await lease.extend(seconds)
        lease.known_expiry = expiry
        self.lease_expires_at = expiry
        return expiry

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
