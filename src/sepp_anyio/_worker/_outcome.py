"""What became of one delivery of a job, and the ``on_outcome`` hook that is told.

The worker decides one :class:`Outcome` per delivery (one reserved attempt) and, when
``Worker(on_outcome=...)`` is given, calls the hook once with ``(ctx, outcome, error)``
after the ack or nack has been answered (or has failed). The hook observes: whatever it
does or raises, the job's outcome is already settled. Its exceptions are logged at ERROR
and swallowed; a cancellation is not swallowed.
"""

from __future__ import annotations

import enum
import inspect
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeAlias

from .._model._error_root import InvalidArgumentTypeError
from .._model._job import JobCtx

if TYPE_CHECKING:
    from ._lease import JobRun

__all__ = [
    "Outcome",
    "OutcomeHook",
    "Settled",
    "check_outcome_hook",
    "outcome_of",
    "report_outcome",
]


class Settled(enum.StrEnum):
    """How the worker ended one delivery (internal): the label of its metrics, and what
    :func:`outcome_of` turns into the public :class:`Outcome` with the run's flags.

    A ``str`` (its value is the internal name the metrics' ``OUTCOMES`` map keys on).
    """

    #: Acked.
    ACK = "ack"
    #: Nacked, and the server keeps it for another attempt.
    RETRY = "retry"
    #: Nacked, and the server dead-lettered it.
    DEAD_LETTER = "dead_letter"
    #: Reserved past its ``sepp.expires_at`` deadline: not run, nacked dead-lettered.
    EXPIRED = "expired"
    #: The ack or nack failed or timed out.
    SETTLE_FAILED = "settle_failed"
    #: Not settled: the lease was lost while the handler ran.
    LEASE_LOST = "lease_lost"
    #: Not settled, and no outcome reported: ``run()`` was cancelled from outside, or the
    #: job's task ended with a ``BaseException`` that is not an ``Exception``.
    CANCELLED = "cancelled"


class Outcome(enum.Enum):
    """What became of one delivery of a job (see ``Worker(on_outcome=...)``)."""

    #: The handler returned and the ack was answered.
    ACKED = "acked"
    #: Nacked for another attempt (a handler error, ``HandlerError.retry``, no handler).
    RETRIED = "retried"
    #: Nacked and dead-lettered, as the server's reply says: a permanent failure, an
    #: unreadable or invalid payload, or a failure on the job's last attempt.
    DEAD_LETTERED = "dead_lettered"
    #: The lease was lost while the handler ran: the job is not settled by this worker.
    LEASE_LOST = "lease_lost"
    #: The handler ran past its timeout (``Task(timeout=)`` or ``job_timeout``) and the job
    #: was nacked for retry.
    TIMED_OUT = "timed_out"
    #: The worker cancelled the handler while shutting down (``drain_timeout`` or
    #: ``cancel_in_flight()``) and nacked the job for an immediate retry elsewhere.
    RELEASED = "released"
    #: The ack or nack itself failed (a silently expired lease, the server unreachable
    #: within the settle timeout): the server redelivers the job after its lease.
    SETTLE_FAILED = "settle_failed"
    #: The job was reserved at or after its deadline (``Task(expires=)``,
    #: ``EnqueueRequest(expires_at=)``, custom ``sepp.expires_at``): its handler did not
    #: run, and it was dead-lettered with reason ``"expired"``.
    EXPIRED = "expired"


#: ``on_outcome(ctx, outcome, error)``: ``async def`` or plain ``def`` (a plain one runs on
#: the event loop, so it must not block). ``error`` is the handler's or a middleware's
#: exception when there was one, else None.
OutcomeHook: TypeAlias = Callable[
    [JobCtx[Any], Outcome, BaseException | None], Awaitable[None] | None
]


def check_outcome_hook(hook: object) -> OutcomeHook | None:
    """The ``on_outcome`` argument, checked.

    Raises:
        InvalidArgumentTypeError: it is neither None nor callable.
    """
    if hook is not None and not callable(hook):
        raise InvalidArgumentTypeError(
            f"on_outcome must be callable as on_outcome(ctx, outcome, error), got a "
            f"{type(hook).__name__}"
        )
    return hook


async def report_outcome(
    hook: OutcomeHook,
    ctx: JobCtx[Any],
    outcome: Outcome,
    error: BaseException | None,
    log: logging.LoggerAdapter[logging.Logger],
) -> None:
    """Call ``hook`` once; log (never raise) an ``Exception`` it raises.

    Cancellation propagates (the worker only cancels a job's task when ``run()`` itself is
    cancelled, and then no outcome is reported).
    """
    try:
        result = hook(ctx, outcome, error)
        if inspect.isawaitable(result):
            await result
    except Exception:
        log.exception("on_outcome raised while reporting %s; the outcome stands", outcome.name)


_SETTLED = {
    Settled.ACK: Outcome.ACKED,
    Settled.DEAD_LETTER: Outcome.DEAD_LETTERED,
    Settled.EXPIRED: Outcome.EXPIRED,
    Settled.SETTLE_FAILED: Outcome.SETTLE_FAILED,
    Settled.LEASE_LOST: Outcome.LEASE_LOST,
}


def outcome_of(name: Settled, run: JobRun) -> Outcome:
    """The :class:`Outcome` of a job the worker settled as ``name``.

    A nack for retry is ``TIMED_OUT`` or ``RELEASED`` when the worker's timeout or its
    shutdown decided it; a dead-lettered one is ``DEAD_LETTERED`` whatever decided it
    (the server's reply says what became of the job).
    """
    settled = _SETTLED.get(name)
    if settled is not None:
        return settled
    if run.timed_out:
        return Outcome.TIMED_OUT
    if run.stop_reason is not None:
        return Outcome.RELEASED
    return Outcome.RETRIED
