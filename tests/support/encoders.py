"""Server-direction encoders (public -> protobuf, as a server would send), for tests.

The client only decodes these messages (``sepp_anyio._wire._convert``); tests encode them
to build replies for scripted servers and to check round trips.
"""

from __future__ import annotations

from typing import Any

from sepp_anyio import (
    CustomEntriesTooMany,
    CustomKeyTooLong,
    CustomMapTooLarge,
    DeadLetterRecord,
    EncodingNotAllowed,
    IdempotencyKeyTooLong,
    InvalidRequest,
    Job,
    JobRejection,
    JobTypeNameTooLong,
    JobTypeNotAllowed,
    PayloadTooLarge,
    QueueClosing,
    QueueFull,
    QueueNameTooLong,
    RetryDirective,
    ScheduledTooFar,
    ServerInfo,
    UnknownQueue,
)
from sepp_anyio._proto.sepp import v1 as pb
from sepp_anyio._wire._convert import (
    _CAUSE_FROM_WIRE,
    _which,
    _wire_instant,
    custom_to_pb,
    duration_to_seconds,
    payload_to_pb,
    seconds_to_duration,
    trace_context_to_pb,
)

__all__ = [
    "dead_letter_to_pb",
    "job_to_pb",
    "rejection_to_pb",
    "retry_directive_from_pb",
    "server_info_to_pb",
]

_CAUSE_TO_WIRE = {cause: number for number, cause in _CAUSE_FROM_WIRE.items()}


def rejection_to_pb(rejection: JobRejection) -> Any:
    """A :class:`JobRejection` as a ``pb.JobRejection``.

    An :class:`UnknownRejection` becomes a rejection with no reason set.
    """
    match rejection:
        case UnknownQueue(queue=queue):
            return pb.JobRejection(unknown_queue=pb.UnknownQueue(queue=queue))
        case PayloadTooLarge(limit=limit, actual=actual):
            return pb.JobRejection(payload_too_large=pb.PayloadTooLarge(limit=limit, actual=actual))
        case EncodingNotAllowed(encoding=encoding, allowed=allowed):
            return pb.JobRejection(
                encoding_not_allowed=pb.EncodingNotAllowed(encoding=encoding, allowed=list(allowed))
            )
        case JobTypeNotAllowed(job_type=job_type, allowed=allowed):
            return pb.JobRejection(
                job_type_not_allowed=pb.JobTypeNotAllowed(job_type=job_type, allowed=list(allowed))
            )
        case CustomEntriesTooMany(limit=limit, actual=actual):
            return pb.JobRejection(
                custom_entries_too_many=pb.CustomEntriesTooMany(limit=limit, actual=actual)
            )
        case CustomMapTooLarge(limit=limit, actual=actual):
            return pb.JobRejection(
                custom_map_too_large=pb.CustomMapTooLarge(limit=limit, actual=actual)
            )
        case CustomKeyTooLong(key=key, limit=limit, actual=actual):
            return pb.JobRejection(
                custom_key_too_long=pb.CustomKeyTooLong(key=key, limit=limit, actual=actual)
            )
        case QueueNameTooLong(limit=limit, actual=actual):
            return pb.JobRejection(
                queue_name_too_long=pb.QueueNameTooLong(limit=limit, actual=actual)
            )
        case JobTypeNameTooLong(limit=limit, actual=actual):
            return pb.JobRejection(
                job_type_name_too_long=pb.JobTypeNameTooLong(limit=limit, actual=actual)
            )
        case IdempotencyKeyTooLong(limit=limit, actual=actual):
            return pb.JobRejection(
                idempotency_key_too_long=pb.IdempotencyKeyTooLong(limit=limit, actual=actual)
            )
        case ScheduledTooFar(horizon=horizon, actual=actual):
            return pb.JobRejection(
                scheduled_too_far=pb.ScheduledTooFar(
                    horizon=seconds_to_duration(horizon), actual=actual
                )
            )
        case InvalidRequest(message=text):
            return pb.JobRejection(invalid_request=pb.InvalidRequest(message=text))
        case QueueFull(queue=queue, limit=limit):
            return pb.JobRejection(queue_full=pb.QueueFull(queue=queue, limit=limit))
        case QueueClosing(queue=queue):
            return pb.JobRejection(queue_closing=pb.QueueClosing(queue=queue))
        case _:
            return pb.JobRejection()


def job_to_pb(job: Job) -> Any:
    """A :class:`Job` as a ``pb.Job``."""
    ctx = job.ctx
    return pb.Job(
        id=ctx.id,
        job_type=ctx.job_type,
        payload=payload_to_pb(job.payload),
        priority=ctx.priority,
        trace_context=trace_context_to_pb(ctx.trace_context),
        enqueued_at=ctx.enqueued_at,
        attempt=ctx.attempt,
        max_attempts=ctx.max_attempts,
        lease_expires_at=ctx.lease_expires_at,
        custom=custom_to_pb(ctx.custom),
        scheduled_at=_wire_instant(ctx.scheduled_at),
        queue=ctx.queue,
    )


def retry_directive_from_pb(message: Any) -> RetryDirective:
    """A ``pb.NackRetry`` (or ``None``) as a :class:`RetryDirective`, as a server reads it.

    An absent ``retry`` means the queue's default.

    Raises:
        ValueError: the message is present with no strategy set, or a negative delay (the
            server answers both with INVALID_ARGUMENT).
    """
    if message is None:
        return RetryDirective.default()
    branch, value = _which(message, "strategy")
    if branch == "delay":
        return RetryDirective.after(duration_to_seconds(value))
    if branch == "dead_letter":
        return RetryDirective.dead_letter()
    if branch == "default":
        return RetryDirective.default()
    raise ValueError("retry strategy is required")


def dead_letter_to_pb(record: DeadLetterRecord) -> Any:
    """A :class:`DeadLetterRecord` as a ``pb.DeadLetterRecord``."""
    job = pb.Job(
        id=record.job_id,
        job_type=record.job_type,
        payload=payload_to_pb(record.payload),
        priority=record.priority,
        trace_context=trace_context_to_pb(record.trace_context),
        enqueued_at=record.enqueued_at,
        attempt=record.final_attempt,
        max_attempts=record.max_attempts,
        custom=custom_to_pb(record.custom),
        scheduled_at=_wire_instant(record.scheduled_at),
        queue=record.queue,
    )
    return pb.DeadLetterRecord(
        job=job,
        cause=pb.DeadLetterCause(_CAUSE_TO_WIRE[record.cause]),
        failed_at=record.failed_at,
        final_attempt=record.final_attempt,
        last_reason=record.last_reason,
    )


def server_info_to_pb(info: ServerInfo) -> Any:
    """A :class:`ServerInfo` as a ``pb.GetServerInfoResponse``."""
    return pb.GetServerInfoResponse(
        server_version=info.version,
        supported_protocol_versions=list(info.supported_protocol_versions),
        server_time=info.server_time,
        restricts_encodings=info.restricts_encodings,
        allowed_encodings=list(info.allowed_encodings),
        max_payload_bytes=info.max_payload_bytes,
        max_custom_entries=info.max_custom_entries,
        max_custom_total_bytes=info.max_custom_total_bytes,
        max_custom_key_bytes=info.max_custom_key_bytes,
        max_queue_name_bytes=info.max_queue_name_bytes,
        max_job_type_bytes=info.max_job_type_bytes,
        max_idempotency_key_bytes=info.max_idempotency_key_bytes,
        max_schedule_horizon=seconds_to_duration(info.max_schedule_horizon),
        max_enqueue_batch=info.max_enqueue_batch,
        max_reserve_batch=info.max_reserve_batch,
        max_reserve_queues=info.max_reserve_queues,
        max_wait_timeout=seconds_to_duration(info.max_wait_timeout),
        max_lease_duration=seconds_to_duration(info.max_lease_duration),
        strict_queues=info.strict_queues,
        dead_letter_retention_enabled=info.dead_letter_retention_enabled,
    )
