"""A job's result, sent to the queue its producer named (``sepp.reply_to``) before the job
is settled.

The format is in :mod:`.._model._results`. When the verdict is an ack, the handler's
result is sent (a typed task's encoded value; ``null`` for any other handler); when it is
a nack that is final (a dead-letter, or the job's last attempt), the failure is sent.
Nothing is sent for a nack that will be retried (the next attempt answers) or a lost lease
(the job is not settled here). The result job's idempotency key is the job's id, so a
redelivered job cannot send a second result within the reply queue's deduplication window.

A value that cannot be sent leaves the job unacked: it is nacked for a retry under the
queue's policy instead (the retry sends again). A failure that cannot be sent is logged,
and the nack goes ahead.
"""

from __future__ import annotations

import logging

import anyio

from .._client import Client
from .._model._enqueue import EnqueueRequest
from .._model._error_root import SeppError
from .._model._errors import HandlerError
from .._model._job import JobCtx, result_of
from .._model._payload import Payload
from .._model._results import (
    CORRELATION_ID,
    REPLY_TO,
    RESULT_JOB_TYPE,
    failure_payload,
    success_payload,
)
from .._model._retries import RetryDirective
from ._lease import JobRun

__all__ = ["reply"]

logger = logging.getLogger("sepp_anyio.worker")

_NULL = b"null"

#: What the job task settles: the directive (None: ack), the reason, and what a
#: HandlerError asked for in words.
Verdict = tuple[RetryDirective | None, str, tuple[str, str] | None]


def _failure(run: JobRun, reason: str, expired: bool) -> tuple[str, str]:
    """The failure's ``(type, message)``: the handler's exception when it decided, else
    what stopped the job (its deadline, a timeout, a shutdown, no handler)."""
    if expired:
        return "JobExpired", "the job was reserved after its deadline (sepp.expires_at)"
    error = run.error
    cancelled = run.lease_lost or run.timed_out or run.stop_reason is not None
    if error is not None and not cancelled:
        if isinstance(error, HandlerError):
            return type(error).__name__, error.reason
        return type(error).__name__, str(error)
    if run.timed_out:
        return "TimeoutError", reason
    if run.stop_reason is not None:
        return "WorkerShutdown", reason
    return "NoHandler", reason


async def _send(client: Client, ctx: JobCtx, queue: str, payload: Payload) -> None:
    await client.enqueue(
        EnqueueRequest(
            queue,
            RESULT_JOB_TYPE,
            payload=payload,
            idempotency_key=ctx.id,
            custom={CORRELATION_ID: ctx.id},
            trace_context=ctx.trace_context,
        )
    )


async def reply(
    client: Client, run: JobRun, verdict: Verdict, limit: float, *, expired: bool = False
) -> Verdict:
    """Send ``run``'s result to its reply queue, if it names one and the verdict is
    final; return the verdict to settle (a nack for retry when a value could not be sent).

    Shielded from cancellation (the verdict is decided, as for the settle that follows)
    and bounded by ``limit`` seconds. ``expired``: the job was not run, being past its
    deadline (its failure says so).
    """
    ctx = run.ctx
    queue = ctx.custom.get(REPLY_TO)
    if not isinstance(queue, str) or not queue:
        return verdict
    directive, reason, _ = verdict
    if directive is None:
        payload = success_payload(result_of(ctx) or _NULL)
    elif directive.kind == "dead_letter" or ctx.attempt >= ctx.max_attempts:
        payload = failure_payload(*_failure(run, reason, expired))
    else:
        return verdict
    problem = f"did not finish within {limit:g}s"
    with anyio.move_on_after(limit, shield=True):
        try:
            await _send(client, ctx, queue, payload)
            return verdict
        except SeppError as exc:
            problem = str(exc)
    if directive is not None:
        run.log.error("could not send the failure to reply queue %r: %s", queue, problem)
        return verdict
    run.log.error(
        "could not send the result to reply queue %r (%s); the job is retried", queue, problem
    )
    return (
        RetryDirective.default(),
        f"could not send the result to reply queue {queue!r}: {problem}",
        None,
    )
