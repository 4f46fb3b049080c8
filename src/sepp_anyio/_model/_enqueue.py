"""What goes into the queue: a job to enqueue, and the server's ack.

Part of the public data model (conventions in ``_model/__init__.py``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TypeAlias

from ._checks import (
    MAX_PRIORITY,
    UINT32_MAX,
    check_aware,
    check_custom,
    check_int,
    check_queue_name,
    check_seconds,
    check_str,
)
from ._error_root import InvalidArgumentError, InvalidArgumentTypeError
from ._expiry import EXPIRES_AT_KEY, expires_at_ms
from ._payload import Payload
from ._trace import TraceContext

__all__ = ["CustomValue", "EnqueueAck", "EnqueueRequest"]


#: A value in a job's ``custom`` map: the four scalar types the protocol can carry.
CustomValue: TypeAlias = str | int | float | bool


#: The longest ``delay`` an :class:`EnqueueRequest` takes, in seconds: 100 years.
MAX_DELAY = 100 * 365.25 * 86400.0

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass(frozen=True, slots=True)
class EnqueueRequest:
    """One job to enqueue. Only ``queue`` and ``job_type`` are required.

    Unset optional fields take the queue's defaults on the server.

    Validation (all at construction):

    * ``queue``: a non-empty string, not ``.`` or ``..``, without ``/`` or control
      characters; ``job_type``: a non-empty string;
    * ``payload``: a :class:`Payload` or ``None``;
    * ``idempotency_key``: ``None`` or a non-empty string (an empty key would be ambiguous:
      the server refuses it, and retry logic could not tell keyed from unkeyed);
    * ``priority``: ``None`` or an int from 0 to 9 (higher runs first);
    * ``max_attempts``: ``None`` or an int >= 1 (the server may clamp it down);
    * ``trace_context``: a :class:`TraceContext` or ``None``;
    * ``custom``: str keys (non-empty) to ``str``, ``int`` (64-bit signed range), ``float``
      or ``bool`` values; copied, so later changes to your mapping do not leak in;
    * ``scheduled_at``: ``None`` or a datetime (naive means UTC; a past time runs at once;
      a time before 1970 is not sent);
    * ``delay``: ``None`` or finite seconds from 0 to 100 years (3155760000),
      counted from when the request is sent; mutually exclusive with ``scheduled_at``;
    * ``expires_at``: ``None`` or a datetime (naive means UTC), after ``scheduled_at`` when
      both are given; stored in ``custom`` under ``"sepp.expires_at"`` (an int of
      milliseconds since the epoch), replacing any value there.

    Server-configured limits (name lengths, payload size, custom map size) are checked by
    the server and come back as a :class:`JobRejection`.

    Raises:
        InvalidArgumentTypeError: for a field of the wrong type.
        InvalidArgumentError: for a value out of range; the message names the field and limit.
    """

    #: The target queue.
    queue: str
    #: Which handler should run the job.
    job_type: str
    #: The job's data, or ``None`` for a job without data.
    payload: Payload | None = field(default=None, kw_only=True)
    #: Deduplicates enqueues of the same key on the same queue within the server's window.
    idempotency_key: str | None = field(default=None, kw_only=True)
    #: 0 (lowest) to 9 (highest); ``None`` means the queue's default.
    priority: int | None = field(default=None, kw_only=True)
    #: Deliveries before the job is dead-lettered; ``None`` means the queue's default.
    max_attempts: int | None = field(default=None, kw_only=True)
    #: The producer's trace context, linked by the worker's span.
    trace_context: TraceContext | None = field(default=None, kw_only=True)
    #: Small metadata the worker can read without decoding the payload.
    custom: Mapping[str, CustomValue] = field(default_factory=dict, kw_only=True)
    #: Do not run before this instant.
    scheduled_at: datetime | None = field(default=None, kw_only=True)
    #: Do not run until this many seconds after the request is sent.
    delay: float | None = field(default=None, kw_only=True)
    #: Do not start after this instant: a worker that reserves the job later dead-letters
    #: it with reason ``"expired"`` instead of running it. Travels in :attr:`custom` as
    #: ``"sepp.expires_at"`` (milliseconds since the epoch), which producers in other
    #: languages set themselves.
    expires_at: datetime | None = field(default=None, kw_only=True)

    def __post_init__(self) -> None:
        check_queue_name(self.queue, "queue")
        check_str(self.job_type, "job_type")
        if self.payload is not None and not isinstance(self.payload, Payload):
            raise InvalidArgumentTypeError(
                f"payload must be a Payload or None, got {type(self.payload).__name__}"
            )
        if self.idempotency_key is not None:
            check_str(self.idempotency_key, "idempotency_key")
        if self.priority is not None:
            check_int(self.priority, "priority", 0, MAX_PRIORITY)
        if self.max_attempts is not None:
            check_int(self.max_attempts, "max_attempts", 1, UINT32_MAX)
        if self.trace_context is not None and not isinstance(self.trace_context, TraceContext):
            raise InvalidArgumentTypeError(
                "trace_context must be a TraceContext or None, "
                f"got {type(self.trace_context).__name__}"
            )
        object.__setattr__(self, "custom", check_custom(self.custom))
        if self.scheduled_at is not None:
            if self.delay is not None:
                raise InvalidArgumentError("pass either scheduled_at or delay, not both")
            scheduled_at = self.scheduled_at
            if isinstance(scheduled_at, datetime) and scheduled_at.tzinfo is None:
                # The protocol's clock is UTC; a naive instant is read as UTC, as
                # the other sepp clients do.
                scheduled_at = scheduled_at.replace(tzinfo=UTC)
            object.__setattr__(self, "scheduled_at", check_aware(scheduled_at, "scheduled_at"))
        if self.delay is not None:
            delay = check_seconds(self.delay, "delay")
            if delay > MAX_DELAY:
                # Beyond this, the send time plus the delay may not fit a datetime (the
                # year 9999): refused here, not as an OverflowError while sending.
                raise InvalidArgumentError(
                    f"delay must be at most {MAX_DELAY:.0f} seconds (100 years), got {delay:g}"
                )
            object.__setattr__(self, "delay", delay)
        if self.expires_at is not None:
            self._set_expiry()

    def _set_expiry(self) -> None:
        """Normalise ``expires_at`` to UTC and write it into ``custom`` (already checked
        and copied, so this writes into the request's own dict)."""
        millis = expires_at_ms(self.expires_at, "expires_at")
        expires_at = _EPOCH + timedelta(milliseconds=millis)
        object.__setattr__(self, "expires_at", expires_at)
        if self.scheduled_at is not None and expires_at <= self.scheduled_at:
            raise InvalidArgumentError(
                f"expires_at ({expires_at.isoformat()}) must be after scheduled_at "
                f"({self.scheduled_at.isoformat()}): the job would expire before it may run"
            )
        custom = self.custom
        assert isinstance(custom, dict)
        # It wins over a value already there: a copy made with dataclasses.replace(request,
        # expires_at=...) carries the old deadline in custom, and the new one is meant.
        custom[EXPIRES_AT_KEY] = millis

    @property
    def has_idempotency_key(self) -> bool:
        """Whether a retry of this job is safe even when the commit is ambiguous."""
        return bool(self.idempotency_key)


@dataclass(frozen=True, slots=True)
class EnqueueAck:
    """The server accepted a job.

    ``deduplicated`` is ``True`` when the idempotency key matched an earlier job within the
    server's dedup window; ``job_id`` is then that job's id and nothing new was enqueued.
    """

    #: The job's id (a UUID string).
    job_id: str
    #: Whether this enqueue was answered from an earlier one with the same key.
    deduplicated: bool = False
