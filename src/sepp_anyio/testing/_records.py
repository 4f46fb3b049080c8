"""What :class:`~sepp_anyio.testing.Harness` reports: queued jobs, dead letters, results.

Plain frozen dataclasses built from the engine's records (``StoredJob``, ``DeadLetter``),
with the payload as a :class:`~sepp_anyio.Payload` and, where a
:class:`~sepp_anyio.Task` was given, its decoded typed value. The result format is the
one the worker sends (``sepp.result`` jobs, see :class:`ResultMessage`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Generic, Literal, TypeVar

from .._model._enqueue import CustomValue
from .._model._error_root import SeppError
from .._model._payload import Payload
from .._model._results import CORRELATION_ID, RESULT_JOB_TYPE
from ..server import DeadLetter, JobState, StoredJob

__all__ = [
    "CORRELATION_ID",
    "RESULT_JOB_TYPE",
    "DeadLetteredJob",
    "QueuedJob",
    "ResultMessage",
    "dead_lettered_job",
    "payload_of",
    "queued_job",
    "result_message",
]

T = TypeVar("T")


JobStateName = Literal["ready", "scheduled", "in_flight"]
_STATES: dict[JobState, JobStateName] = {
    JobState.READY: "ready",
    JobState.SCHEDULED: "scheduled",
    JobState.INFLIGHT: "in_flight",
}


def _time(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, UTC)


def payload_of(job: StoredJob) -> Payload | None:
    if job.payload_data is None:
        return None
    return Payload(job.payload_data, job.payload_encoding or "application/octet-stream")


@dataclass(frozen=True, slots=True, kw_only=True)
class QueuedJob(Generic[T]):
    """A live job as the server holds it (see :meth:`Harness.jobs`).

    ``value`` is the payload decoded by the :class:`~sepp_anyio.Task` given to
    :meth:`Harness.jobs` (None when none was).
    """

    id: str
    queue: str
    job_type: str
    #: ``"ready"``, ``"scheduled"`` (not due yet, or waiting for a retry) or
    #: ``"in_flight"`` (leased to a worker).
    state: JobStateName
    priority: int
    #: The attempt of its next delivery (ready, scheduled) or its current one (in flight).
    attempt: int
    max_attempts: int
    enqueued_at: datetime
    #: When a scheduled job is due; None in the other states.
    due_at: datetime | None
    payload: Payload | None = field(repr=False)
    custom: Mapping[str, CustomValue]
    value: T


@dataclass(frozen=True, slots=True, kw_only=True)
class DeadLetteredJob(Generic[T]):
    """A dead-lettered job (see :meth:`Harness.dead_letters`)."""

    id: str
    queue: str
    job_type: str
    #: Why the server dead-lettered it: ``"attempts_exhausted"``, ``"rejected"`` (a nack
    #: that asked for it), ``"lease_expired"`` (on its last attempt) or ``"admin"``.
    cause: str
    #: The last nack's reason (``"expired"``, ``"handler raised ValueError: ..."``), if any.
    reason: str | None
    final_attempt: int
    failed_at: datetime
    payload: Payload | None = field(repr=False)
    custom: Mapping[str, CustomValue]
    value: T


@dataclass(frozen=True, slots=True, kw_only=True)
class ResultMessage(Generic[T]):
    """A job's result waiting in a reply queue (see :meth:`Harness.results`).

    The wire format: a job of type ``sepp.result`` whose custom field
    ``sepp.correlation_id`` is the id of the job it is the result of, with a JSON payload
    ``{"ok": true, "value": ...}`` or ``{"ok": false, "error": {"type": ..., "message":
    ...}}``.
    """

    #: The id of the result job itself.
    id: str
    #: The id of the job it is the result of.
    job_id: str
    ok: bool
    #: The value (decoded by the task's result type where there is one); None for a failure.
    value: T
    #: The exception's class name and message, for a failure.
    error_type: str | None = None
    error_message: str | None = None


def queued_job(job: StoredJob, value: Any) -> QueuedJob[Any]:
    return QueuedJob(
        id=job.id,
        queue=job.queue,
        job_type=job.job_type,
        state=_STATES[job.state],
        priority=job.priority,
        attempt=job.attempt,
        max_attempts=job.max_attempts,
        enqueued_at=_time(job.enqueued_at_ms),
        due_at=_time(job.due_ms) if job.state is JobState.SCHEDULED else None,
        payload=payload_of(job),
        custom=dict(job.custom),
        value=value,
    )


def dead_lettered_job(record: DeadLetter, value: Any) -> DeadLetteredJob[Any]:
    job = record.job
    return DeadLetteredJob(
        id=job.id,
        queue=job.queue,
        job_type=job.job_type,
        cause=record.cause.name.lower(),
        reason=record.last_reason,
        final_attempt=record.final_attempt,
        failed_at=_time(record.failed_at_ms),
        payload=payload_of(job),
        custom=dict(job.custom),
        value=value,
    )


def _refuse(job: StoredJob, what: str) -> SeppError:
    return SeppError(
        f"job {job.id} in queue {job.queue!r} is a {RESULT_JOB_TYPE} job but {what}; a result"
        ' is {"ok": true, "value": ...} or {"ok": false, "error": {"type": ..., "message":'
        f" ...}}}} in JSON, with the job id in custom field {CORRELATION_ID!r}"
    )


def result_message(job: StoredJob) -> tuple[str, bool, Any, str | None, str | None]:
    """``(job id, ok, plain JSON value, error type, error message)`` of a result job.

    Raises:
        SeppError: not a result envelope (the message says what is wrong).
    """
    correlation = dict(job.custom).get(CORRELATION_ID)
    if not isinstance(correlation, str) or not correlation:
        raise _refuse(job, f"has no str custom field {CORRELATION_ID!r}")
    if job.payload_data is None:
        raise _refuse(job, "has no payload")
    try:
        envelope = json.loads(job.payload_data)
    except (UnicodeDecodeError, ValueError):
        raise _refuse(job, "its payload is not JSON") from None
    if not isinstance(envelope, dict) or not isinstance(envelope.get("ok"), bool):
        raise _refuse(job, 'its payload has no boolean "ok"')
    if envelope["ok"]:
        return correlation, True, envelope.get("value"), None, None
    error = envelope.get("error")
    if not isinstance(error, dict):
        raise _refuse(job, 'its failure has no "error" object')
    return correlation, False, None, str(error.get("type", "")), str(error.get("message", ""))
