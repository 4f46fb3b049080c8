"""Limits: the client's own (the largest reply it reads), and checking a job locally
against the limits a server advertises.

``ServerInfo`` carries the server's *global* limits; a queue may be configured
differently, and strict mode or a full queue can only be judged by the server.
So this check is a convenience for failing fast (say, before building a big
batch), never a replacement for the server's verdict: a job that passes here
can still be rejected, and the server's answer is the one that counts.

The checks and their order follow the server's own classification.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from ._rejections import (
    CustomEntriesTooMany,
    CustomKeyTooLong,
    CustomMapTooLarge,
    EncodingNotAllowed,
    IdempotencyKeyTooLong,
    JobRejection,
    JobTypeNameTooLong,
    PayloadTooLarge,
    QueueNameTooLong,
    ScheduledTooFar,
)

if TYPE_CHECKING:
    # Types only: ``ServerInfo.check`` calls this module, so it may not import theirs.
    from ._enqueue import CustomValue, EnqueueRequest
    from ._server_info import ServerInfo

__all__ = [
    "DEFAULT_MAX_RECEIVE_MESSAGE_BYTES",
    "DEFAULT_REMEMBER_MESSAGE_LIMIT",
    "check_request",
    "request_size_bound",
]

#: The largest reply message the client reads by default (``connect(...,
#: max_receive_message_bytes=...)``; the transport's ``Channel`` defaults to it too): 64 MiB.
#: gRPC's usual 4 MiB is too small here: a reserve of many jobs can carry up to
#: max_reserve_batch x max_payload_bytes, and a reply that fails to decode on the client
#: leaves its jobs leased (stuck) until their leases expire. A larger reply fails the call
#: with RESOURCE_EXHAUSTED (``OverloadedError``); the connection stays usable.
DEFAULT_MAX_RECEIVE_MESSAGE_BYTES = 64 << 20

#: How long, in seconds, the client checks enqueues against a message limit the server
#: stated (by refusing a request as too large) before it sends them (``connect(...,
#: remember_message_limit=...)``): 5 minutes. Bounded, because the server may be restarted
#: with another limit, and the client would refuse what it now accepts; after that the
#: next oversized request is sent, refused, and the limit learnt again.
DEFAULT_REMEMBER_MESSAGE_LIMIT = 300.0

# What protobuf adds around a value, at most: a field tag (1-2 bytes) and a length varint
# (at most 10), rounded up; and a str's UTF-8 bytes, at most 4 per code point.
_FIELD = 12
_UTF8 = 4


def _str_bound(text: str | None) -> int:
    return 0 if text is None else _FIELD + _UTF8 * len(text)


def request_size_bound(requests: Sequence[EnqueueRequest]) -> int:
    """An upper bound on the encoded size of an enqueue of ``requests``, in bytes.

    Cheap (lengths only), so that the client encodes a request a second time to measure
    it only when it may be over a known message limit. A bound that came out too low (a
    field added to the request and not here) costs nothing worse than sending the request
    and getting the server's own refusal.
    """
    total = 0
    for request in requests:
        # The job's own tag and length, and the numbers and times (priority,
        # max_attempts, scheduled_at / delay): a few dozen bytes, generously rounded.
        size = 8 * _FIELD + _str_bound(request.queue) + _str_bound(request.job_type)
        size += _str_bound(request.idempotency_key)
        if request.payload is not None:
            size += 2 * _FIELD + len(request.payload.data) + _str_bound(request.payload.encoding)
        if request.trace_context is not None:
            trace = request.trace_context
            size += _FIELD + _str_bound(trace.traceparent) + _str_bound(trace.tracestate)
        for key, value in request.custom.items():
            size += 3 * _FIELD + _str_bound(key)
            size += _str_bound(value) if isinstance(value, str) else _FIELD
        total += size
    return total


def _value_bytes(value: CustomValue) -> int:
    # The server's accounting: strings by UTF-8 length, bool 1, numbers 8.
    if isinstance(value, str):
        return len(value.encode("utf-8"))
    if isinstance(value, bool):
        return 1
    return 8


def check_request(
    info: ServerInfo, request: EnqueueRequest, *, now: datetime | None = None
) -> JobRejection | None:
    """The rejection the server's global limits predict for ``request``, or None.

    ``now`` (default: the current UTC time) resolves ``request.delay`` and is
    compared with ``scheduled_at`` against the schedule horizon.
    """
    queue_bytes = len(request.queue.encode("utf-8"))
    if queue_bytes > info.max_queue_name_bytes:
        return QueueNameTooLong(limit=info.max_queue_name_bytes, actual=queue_bytes)
    type_bytes = len(request.job_type.encode("utf-8"))
    if type_bytes > info.max_job_type_bytes:
        return JobTypeNameTooLong(limit=info.max_job_type_bytes, actual=type_bytes)
    if request.idempotency_key is not None:
        key_bytes = len(request.idempotency_key.encode("utf-8"))
        if key_bytes > info.max_idempotency_key_bytes:
            return IdempotencyKeyTooLong(limit=info.max_idempotency_key_bytes, actual=key_bytes)
    payload = request.payload
    if payload is not None:
        if len(payload.data) > info.max_payload_bytes:
            return PayloadTooLarge(limit=info.max_payload_bytes, actual=len(payload.data))
        if info.restricts_encodings and payload.encoding not in info.allowed_encodings:
            return EncodingNotAllowed(
                encoding=payload.encoding, allowed=tuple(info.allowed_encodings)
            )
    custom = request.custom
    if len(custom) > info.max_custom_entries:
        return CustomEntriesTooMany(limit=info.max_custom_entries, actual=len(custom))
    total = 0
    for key in sorted(custom):
        key_bytes = len(key.encode("utf-8"))
        if key_bytes > info.max_custom_key_bytes:
            return CustomKeyTooLong(key=key, limit=info.max_custom_key_bytes, actual=key_bytes)
        total += key_bytes + _value_bytes(custom[key])
    if total > info.max_custom_total_bytes:
        return CustomMapTooLarge(limit=info.max_custom_total_bytes, actual=total)
    moment = now if now is not None else datetime.now(UTC)
    scheduled = request.scheduled_at
    if request.delay is not None:
        scheduled = moment + timedelta(seconds=request.delay)
    if scheduled is not None and scheduled > moment + timedelta(seconds=info.max_schedule_horizon):
        return ScheduledTooFar(horizon=info.max_schedule_horizon, actual=scheduled)
    return None
