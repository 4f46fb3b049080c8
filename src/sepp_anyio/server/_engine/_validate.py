"""Request validation: the structural rules of protocol §1.1 and the enqueue classification
of §3.2.

Structural checks return the human message of the first problem (or None): whole-call RPCs
turn it into INVALID_ARGUMENT, an enqueued job into an ``InvalidRequest`` rejection.  The
order of the checks is the real server's, so the *first* problem reported is the same.
"""

from __future__ import annotations

import datetime
import json
import re
from typing import Any

import betterproto2

from sepp_anyio._proto.sepp import v1 as pb

from .._config._config import ServerConfig
from .._config._names import queue_name_problem
from ._convert import custom_value_bytes, ms_duration, primitive_value, timestamp_ms

_UUID = re.compile(
    "[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}", re.ASCII
)
_ZERO = datetime.timedelta(0)


def quote(text: str) -> str:
    """A string quoted the way the Rust server's ``{:?}`` does (close enough: JSON)."""
    return json.dumps(text, ensure_ascii=False)


def is_uuid(text: str) -> bool:
    """Canonical hyphenated 36-character form; hex digits in either case."""
    # One match instead of a test per character: every ack, nack and extend checks one.
    return _UUID.fullmatch(text) is not None


def _not_empty(field: str, value: str | None) -> str | None:
    return f"{field} must not be empty" if value is not None and not value else None


def _lease_problem(lease: datetime.timedelta | None) -> str | None:
    if lease is None:
        return "lease_duration is required"
    if lease <= _ZERO:
        return "lease_duration must be greater than 0"
    return None


def _lease_common(job_id: str, attempt: int) -> str | None:
    if not is_uuid(job_id):
        return "job_id must be a UUID"
    if attempt < 1:
        return "attempt must be >= 1"
    return None


# ---------------------------------------------------------------------- whole-call requests


def reserve_problem(req: Any) -> str | None:
    if not req.queues:
        return "queues must contain at least 1 item"
    for queue in req.queues:
        problem = queue_name_problem(queue)
        if problem is not None:
            return f"queues item {problem}"
    if req.wait_timeout is not None and req.wait_timeout < _ZERO:
        return "wait_timeout must not be negative"
    return (
        _lease_problem(req.lease_duration)
        or _not_empty("worker_id", req.worker_id)
        or ("max_jobs must be >= 1" if req.max_jobs is not None and req.max_jobs < 1 else None)
    )


def ack_problem(req: Any) -> str | None:
    return _lease_common(req.job_id, req.attempt) or _not_empty("worker_id", req.worker_id)


def nack_problem(req: Any) -> str | None:
    problem = _lease_common(req.job_id, req.attempt)
    if problem is not None:
        return problem
    if req.retry is not None:
        branch, value = betterproto2.which_one_of(req.retry, "strategy")
        if not branch:
            return "retry strategy is required"
        if branch == "delay" and value is not None and value < _ZERO:
            return "retry delay must not be negative"
    return _not_empty("worker_id", req.worker_id)


def extend_problem(req: Any) -> str | None:
    return (
        _lease_common(req.job_id, req.attempt)
        or _lease_problem(req.lease_duration)
        or _not_empty("worker_id", req.worker_id)
    )


def drain_problem(req: Any) -> str | None:
    if req.queue is not None and not req.queue:
        return "queue must not be empty"
    if req.max is not None and req.max < 1:
        return "max must be >= 1"
    return None


# ---------------------------------------------------------------------- enqueue


def enqueue_problem(job: Any) -> str | None:
    """Structural validation of one EnqueueRequest (gives ``InvalidRequest``)."""
    problem = queue_name_problem(job.queue)
    if problem is not None:
        return f"queue {problem}"
    if not job.job_type:
        return "job_type must not be empty"
    if job.payload is not None:
        if not job.payload.data:
            return "payload.data must not be empty"
        if not job.payload.encoding:
            return "payload.encoding must not be empty"
    if job.idempotency_key is not None and not job.idempotency_key:
        return "idempotency_key must not be empty"
    if job.priority is not None and job.priority > 9:
        return "priority must be <= 9"
    if job.max_attempts is not None and job.max_attempts < 1:
        return "max_attempts must be >= 1"
    if job.trace_context is not None and not job.trace_context.traceparent:
        return "trace_context.traceparent must not be empty"
    for key in sorted(job.custom):
        if not key:
            return "custom key must not be empty"
        if primitive_value(job.custom[key]) is None:
            return f"custom[{key}] must set a value"
    return None


def classify_enqueue(job: Any, config: ServerConfig, now_ms: int) -> Any | None:
    """The pre-commit classification of §3.2: a ``JobRejection`` (first failing check) or None.

    Custom keys are checked in sorted order, the order in which the server stores the map.
    """
    problem = enqueue_problem(job)
    if problem is not None:
        return pb.JobRejection(invalid_request=pb.InvalidRequest(message=problem))
    if config.server.strict_queues and not config.is_declared(job.queue):
        return pb.JobRejection(unknown_queue=pb.UnknownQueue(queue=job.queue))
    glob = config.limits
    limits = config.limits_for(job.queue)

    size = len(job.queue.encode())
    if size > glob.max_queue_name_bytes:
        return pb.JobRejection(
            queue_name_too_long=pb.QueueNameTooLong(limit=glob.max_queue_name_bytes, actual=size)
        )
    size = len(job.job_type.encode())
    if size > glob.max_job_type_bytes:
        return pb.JobRejection(
            job_type_name_too_long=pb.JobTypeNameTooLong(limit=glob.max_job_type_bytes, actual=size)
        )
    if limits.allowed_job_types is not None and job.job_type not in limits.allowed_job_types:
        return pb.JobRejection(
            job_type_not_allowed=pb.JobTypeNotAllowed(
                job_type=job.job_type, allowed=list(limits.allowed_job_types)
            )
        )
    if job.idempotency_key is not None:
        size = len(job.idempotency_key.encode())
        if size > glob.max_idempotency_key_bytes:
            return pb.JobRejection(
                idempotency_key_too_long=pb.IdempotencyKeyTooLong(
                    limit=glob.max_idempotency_key_bytes, actual=size
                )
            )
    if job.payload is not None:
        size = len(job.payload.data)
        if size > limits.max_payload_bytes:
            return pb.JobRejection(
                payload_too_large=pb.PayloadTooLarge(limit=limits.max_payload_bytes, actual=size)
            )
        allowed = limits.allowed_encodings
        if allowed is not None and job.payload.encoding not in allowed:
            return pb.JobRejection(
                encoding_not_allowed=pb.EncodingNotAllowed(
                    encoding=job.payload.encoding, allowed=list(allowed)
                )
            )
    if len(job.custom) > limits.max_custom_entries:
        return pb.JobRejection(
            custom_entries_too_many=pb.CustomEntriesTooMany(
                limit=limits.max_custom_entries, actual=len(job.custom)
            )
        )
    total = 0
    for key in sorted(job.custom):
        size = len(key.encode())
        if size > limits.max_custom_key_bytes:
            return pb.JobRejection(
                custom_key_too_long=pb.CustomKeyTooLong(
                    key=key, limit=limits.max_custom_key_bytes, actual=size
                )
            )
        value = primitive_value(job.custom[key])
        assert value is not None  # checked by enqueue_problem
        total += size + custom_value_bytes(value)
    if total > limits.max_custom_total_bytes:
        return pb.JobRejection(
            custom_map_too_large=pb.CustomMapTooLarge(
                limit=limits.max_custom_total_bytes, actual=total
            )
        )
    horizon = limits.max_schedule_horizon_ms
    if job.scheduled_at is not None and timestamp_ms(job.scheduled_at) > now_ms + horizon:
        return pb.JobRejection(
            scheduled_too_far=pb.ScheduledTooFar(
                horizon=ms_duration(horizon), actual=job.scheduled_at
            )
        )
    return None
