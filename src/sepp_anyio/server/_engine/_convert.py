"""Conversions at the protobuf boundary: times to and from integer milliseconds, custom maps,
and engine records to ``sepp.v1`` messages.

The generated module is not type-checked (``follow_imports=skip``), so message types are
``Any`` to mypy; this module and ``_validate.py`` are where that is contained.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from typing import Any

import betterproto2

from sepp_anyio._proto.sepp import v1 as pb

from .._store._records import CustomValue, DeadLetter, StoredJob

_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
_ONE_MS = datetime.timedelta(milliseconds=1)


def timestamp_ms(value: datetime.datetime) -> int:
    """A Timestamp in whole milliseconds (truncated towards the past, as the server does)."""
    if value.tzinfo is None:
        value = value.replace(tzinfo=datetime.UTC)
    return (value - _EPOCH) // _ONE_MS


def duration_ms(value: datetime.timedelta) -> int:
    """A non-negative Duration in whole milliseconds (truncated)."""
    return value // _ONE_MS


def ms_timestamp(ms: int) -> datetime.datetime:
    return _EPOCH + datetime.timedelta(milliseconds=ms)


def ms_duration(ms: int) -> datetime.timedelta:
    return datetime.timedelta(milliseconds=ms)


def primitive_value(value: Any) -> CustomValue | None:
    """The Python value of a ``PrimitiveValue``, or None if no branch is set."""
    if value is None:
        return None
    branch, inner = betterproto2.which_one_of(value, "value")
    if inner is None:
        return None
    if branch == "string_value":
        return str(inner)
    if branch == "double_value":
        return float(inner)
    if branch == "int_value":
        return int(inner)
    if branch == "bool_value":
        return bool(inner)
    return None


def custom_value_bytes(value: CustomValue) -> int:
    """Size of a custom value for ``max_custom_total_bytes``: UTF-8 length, 8 or 1."""
    if isinstance(value, str):
        return len(value.encode())
    if isinstance(value, bool):
        return 1
    return 8


def custom_from_pb(custom: Mapping[str, Any]) -> tuple[tuple[str, CustomValue], ...]:
    """A validated request's custom map, sorted by key (as the real server stores it)."""
    out: list[tuple[str, CustomValue]] = []
    for key in sorted(custom):
        value = primitive_value(custom[key])
        if value is not None:
            out.append((key, value))
    return tuple(out)


def _pb_primitive(value: CustomValue) -> Any:
    if isinstance(value, bool):
        return pb.PrimitiveValue(bool_value=value)
    if isinstance(value, int):
        return pb.PrimitiveValue(int_value=value)
    if isinstance(value, float):
        return pb.PrimitiveValue(double_value=value)
    return pb.PrimitiveValue(string_value=value)


def job_to_pb(job: StoredJob) -> Any:
    """A ``sepp.v1.Job`` with ``queue`` and ``payload`` filled in."""
    return pb.Job(
        id=job.id,
        job_type=job.job_type,
        payload=(
            None
            if job.payload_data is None
            else pb.Payload(data=job.payload_data, encoding=job.payload_encoding or "")
        ),
        priority=job.priority,
        trace_context=(
            None
            if job.traceparent is None
            else pb.TraceContext(traceparent=job.traceparent, tracestate=job.tracestate)
        ),
        enqueued_at=ms_timestamp(job.enqueued_at_ms),
        attempt=job.attempt,
        max_attempts=job.max_attempts,
        lease_expires_at=ms_timestamp(job.lease_expires_at_ms),
        custom={key: _pb_primitive(value) for key, value in job.custom},
        scheduled_at=None if job.scheduled_at_ms is None else ms_timestamp(job.scheduled_at_ms),
        queue=job.queue,
    )


def dead_letter_to_pb(record: DeadLetter) -> Any:
    """A ``sepp.v1.DeadLetterRecord``."""
    return pb.DeadLetterRecord(
        job=job_to_pb(record.job),
        cause=pb.DeadLetterCause(int(record.cause)),
        failed_at=ms_timestamp(record.failed_at_ms),
        final_attempt=record.final_attempt,
        last_reason=record.last_reason,
    )
