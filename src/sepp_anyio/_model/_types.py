"""The public data types: what goes into the queue and what comes out.

Conventions, shared by every class here:

* durations are ``float`` seconds (the trio/anyio idiom); the wire carries whole
  milliseconds, so anything finer is truncated when sent;
* instants are timezone-aware ``datetime`` objects in UTC; a naive ``datetime`` is refused
  rather than guessed at;
* bad arguments raise :class:`InvalidArgumentError` (or :class:`InvalidArgumentTypeError`
  for the wrong type; both are :class:`SeppError` subclasses, and also a ``ValueError`` /
  ``TypeError``) at construction, with a message naming the field and the limit, so a
  mistake surfaces where it was made instead of as a server rejection later.

Nothing here touches the network or the generated protobuf classes; see ``_convert`` for
the wire mapping.
"""

from __future__ import annotations

import contextlib
import enum
import json
import math
import random
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Generic, Literal, Protocol, TypeAlias

from ._error_root import InvalidArgumentError, InvalidArgumentTypeError

if TYPE_CHECKING:
    from ._rejections import JobRejection

if TYPE_CHECKING:
    # PEP 696 defaults: typing has them from 3.13 only, and they matter to type checkers
    # alone (at run time a plain TypeVar subscripts the same way).
    from typing_extensions import TypeVar

    #: The type of a worker's lifespan state (``JobCtx.state``); ``Any`` when not given.
    StateT_co = TypeVar("StateT_co", covariant=True, default=Any)
else:
    from typing import TypeVar

    StateT_co = TypeVar("StateT_co", covariant=True)

__all__ = [
    "JSON_ENCODING",
    "TEXT_ENCODING",
    "CustomValue",
    "DeadLetterCause",
    "DeadLetterRecord",
    "EnqueueAck",
    "EnqueueRequest",
    "Job",
    "JobCtx",
    "Payload",
    "RetryDirective",
    "RetryPolicy",
    "ServerInfo",
    "TraceContext",
    "TraceContextError",
]

#: The encoding :meth:`Payload.from_json` writes.
JSON_ENCODING = "application/json"
#: The encoding :meth:`Payload.from_text` writes by default.
TEXT_ENCODING = "text/plain; charset=utf-8"

#: A value in a job's ``custom`` map: the four scalar types the protocol can carry.
CustomValue: TypeAlias = str | int | float | bool

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_INT64_MIN = -(2**63)
_INT64_MAX = 2**63 - 1
_UINT32_MAX = 2**32 - 1
_MAX_PRIORITY = 9


# ---------------------------------------------------------------------------- helpers


def _check_str(value: object, name: str, *, allow_empty: bool = False) -> str:
    if not isinstance(value, str):
        raise InvalidArgumentTypeError(f"{name} must be a str, got {type(value).__name__}")
    if not value and not allow_empty:
        raise InvalidArgumentError(f"{name} must not be empty")
    try:
        # Protobuf strings are UTF-8 on the wire; a lone surrogate would only fail later,
        # deep inside serialisation, with no hint of which field it came from.
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidArgumentError(f"{name} is not encodable as UTF-8: {exc.reason}") from None
    return value


def _check_int(value: object, name: str, lo: int, hi: int) -> int:
    # bool is an int subclass; True as a priority is almost certainly a bug.
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidArgumentTypeError(f"{name} must be an int, got {type(value).__name__}")
    if not lo <= value <= hi:
        raise InvalidArgumentError(f"{name} must be between {lo} and {hi}, got {value}")
    return value


def _check_seconds(value: object, name: str, *, positive: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidArgumentTypeError(
            f"{name} must be a number of seconds, got {type(value).__name__}"
        )
    seconds = float(value)
    if not math.isfinite(seconds):
        raise InvalidArgumentError(f"{name} must be a finite number of seconds, got {value}")
    if positive:
        # The wire carries whole milliseconds: anything shorter would arrive as zero.
        if seconds < 0.001:
            raise InvalidArgumentError(f"{name} must be at least 0.001 seconds (1 ms), got {value}")
    elif seconds < 0:
        raise InvalidArgumentError(f"{name} must be >= 0 seconds, got {value}")
    return seconds


def _check_aware(value: object, name: str) -> datetime:
    if not isinstance(value, datetime):
        raise InvalidArgumentTypeError(f"{name} must be a datetime, got {type(value).__name__}")
    if value.tzinfo is None or value.utcoffset() is None:
        raise InvalidArgumentError(
            f"{name} must be timezone-aware (for example datetime.now(timezone.utc)); "
            "a naive datetime is ambiguous"
        )
    return value.astimezone(UTC)


def _check_queue_name(value: object, name: str) -> str:
    """Apply the server's structural queue-name rule locally.

    The server refuses these names with a generic ``InvalidRequest``; catching them here
    gives an error that points at the argument.
    """
    queue = _check_str(value, name)
    if queue in (".", ".."):
        raise InvalidArgumentError(f"{name} must not be {queue!r}")
    if "/" in queue:
        raise InvalidArgumentError(f"{name} must not contain '/', got {queue!r}")
    # Unicode's Cc category, as the server applies it: C0, DEL and C1.
    if any(ord(ch) < 0x20 or 0x7F <= ord(ch) <= 0x9F for ch in queue):
        raise InvalidArgumentError(f"{name} must not contain control characters, got {queue!r}")
    return queue


def _check_custom(custom: object, name: str = "custom") -> dict[str, CustomValue]:
    if not isinstance(custom, Mapping):
        raise InvalidArgumentTypeError(f"{name} must be a mapping of str to str/int/float/bool")
    checked: dict[str, CustomValue] = {}
    for key, value in custom.items():
        _check_str(key, f"{name} key")
        label = f"{name}[{key!r}]"
        # Order matters: bool is a subclass of int and must keep its own wire branch.
        if isinstance(value, bool):
            checked[key] = value
        elif isinstance(value, int):
            checked[key] = _check_int(value, label, _INT64_MIN, _INT64_MAX)
        elif isinstance(value, float):
            checked[key] = value
        elif isinstance(value, str):
            checked[key] = _check_str(value, label, allow_empty=True)
        else:
            raise InvalidArgumentTypeError(
                f"{label} must be str, int, float or bool, got {type(value).__name__}"
            )
    return checked


def _media_type(encoding: str) -> str:
    return encoding.split(";", 1)[0].strip().lower()


def _charset(encoding: str, default: str = "utf-8") -> str:
    for param in encoding.split(";")[1:]:
        key, _, value = param.partition("=")
        if key.strip().lower() == "charset" and value.strip():
            return value.strip().strip('"')
    return default


def _is_json_encoding(encoding: str) -> bool:
    media = _media_type(encoding)
    # "json" is the short label seen in server allow-lists (and the first sepp-rs codec).
    return media in ("application/json", "text/json", "json") or media.endswith("+json")


# ---------------------------------------------------------------------------- payload


_REPR_BYTES = 64


@dataclass(frozen=True, slots=True, repr=False)
class Payload:
    """The body of a job: opaque bytes plus a label saying how to read them.

    The queue never looks inside ``data``. ``encoding`` (for example ``"application/json"``)
    tells the worker how to decode it; a queue may restrict which encodings it accepts.

    Validation: ``data`` must be non-empty bytes (``bytearray``/``memoryview`` are copied to
    ``bytes``) and ``encoding`` a non-empty string. The protocol refuses an empty payload:
    for a job without data, leave :attr:`EnqueueRequest.payload` as ``None``.

    :raises InvalidArgumentTypeError: if ``data`` is not bytes-like or ``encoding`` is not a string.
    :raises InvalidArgumentError: if either is empty.
    """

    #: The raw bytes, never empty.
    data: bytes
    #: How to interpret :attr:`data`, for example ``"application/json"``; never empty.
    encoding: str

    def __post_init__(self) -> None:
        # Typed as object: callers may hand in any bytes-like (or a wrong type entirely).
        data: object = self.data
        if isinstance(data, bytearray | memoryview):
            object.__setattr__(self, "data", bytes(data))
        elif not isinstance(data, bytes):
            raise InvalidArgumentTypeError(f"Payload.data must be bytes, got {type(data).__name__}")
        if not self.data:
            raise InvalidArgumentError(
                "Payload.data must not be empty; for a job without data pass payload=None"
            )
        _check_str(self.encoding, "Payload.encoding")

    def __repr__(self) -> str:
        # Payloads can be megabytes; a Job in a log line or traceback must stay readable.
        if len(self.data) <= _REPR_BYTES:
            data = repr(self.data)
        else:
            data = f"{self.data[:_REPR_BYTES]!r}... ({len(self.data)} bytes)"
        return f"Payload(data={data}, encoding={self.encoding!r})"

    @classmethod
    def from_json(cls, obj: Any, *, encoding: str = JSON_ENCODING) -> Payload:
        """Serialise ``obj`` as compact UTF-8 JSON.

        NaN and infinities are refused because they are not JSON and most other languages'
        parsers reject them.

        :param obj: anything :func:`json.dumps` accepts.
        :param encoding: the label to attach; override it when a queue's allow-list uses a
            different spelling (for example ``"json"``).
        :raises TypeError: if ``obj`` is not JSON-serialisable.
        :raises ValueError: for NaN/infinite floats or circular references.
        """
        text = json.dumps(obj, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
        return cls(text.encode("utf-8"), encoding)

    def json(self) -> Any:
        """Parse :attr:`data` as JSON.

        :raises InvalidArgumentError: if :attr:`encoding` is not a JSON media type
            (``application/json``, ``*+json``, ``text/json`` or ``json``).
        :raises json.JSONDecodeError: (a ``ValueError``) if the bytes are not valid JSON.
        """
        if not _is_json_encoding(self.encoding):
            raise InvalidArgumentError(
                f"payload encoding is {self.encoding!r}, not JSON; "
                "read payload.data (or payload.text()) instead"
            )
        return json.loads(self.data)

    @classmethod
    def from_text(cls, text: str, encoding: str = TEXT_ENCODING) -> Payload:
        """Encode ``text`` with the charset named in ``encoding`` (UTF-8 if none).

        :raises ValueError: if ``text`` is empty or cannot be encoded in that charset.
        :raises LookupError: if the charset is unknown to Python.
        """
        _check_str(text, "text", allow_empty=True)
        return cls(text.encode(_charset(encoding)), encoding)

    def text(self) -> str:
        """Decode :attr:`data` with the charset named in :attr:`encoding` (UTF-8 if none).

        :raises UnicodeDecodeError: if the bytes are not valid in that charset.
        :raises LookupError: if the charset is unknown to Python.
        """
        return self.data.decode(_charset(self.encoding))


# ---------------------------------------------------------------------------- tracing


class TraceContextError(InvalidArgumentError):
    """A ``traceparent`` string is not in the W3C Trace Context format (an
    :class:`InvalidArgumentError`, so also a ``ValueError``)."""


_HEX = frozenset("0123456789abcdefABCDEF")


def _is_hex(text: str, length: int) -> bool:
    return len(text) == length and all(ch in _HEX for ch in text)


@dataclass(frozen=True, slots=True)
class TraceContext:
    """A W3C trace context carried with a job, linking producer and consumer spans.

    ``traceparent`` is ``<version>-<trace-id>-<span-id>-<flags>``: 2, 32, 16 and 2 hex
    digits. Validation follows the W3C rules (trace and span ids not all zeros, version
    ``ff`` forbidden); upper-case hex is accepted because the other sepp clients accept it.
    ``tracestate`` is passed through untouched.

    :raises TraceContextError: (a ``ValueError``) if ``traceparent`` is malformed.
    """

    #: For example ``"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"``.
    traceparent: str
    #: Vendor-specific trace state, if any.
    tracestate: str | None = None

    def __post_init__(self) -> None:
        tp = self.traceparent
        if not isinstance(tp, str):
            raise InvalidArgumentTypeError(f"traceparent must be a str, got {type(tp).__name__}")
        parts = tp.split("-")
        if len(parts) != 4:
            raise TraceContextError(
                f"traceparent must have 4 '-'-separated fields "
                f"(version-traceid-spanid-flags), got {len(parts)}: {tp!r}"
            )
        version, trace_id, span_id, flags = parts
        if not _is_hex(version, 2):
            raise TraceContextError(f"traceparent version must be 2 hex digits: {tp!r}")
        if version.lower() == "ff":
            raise TraceContextError(f"traceparent version 'ff' is forbidden by W3C: {tp!r}")
        if not _is_hex(trace_id, 32):
            raise TraceContextError(f"traceparent trace-id must be 32 hex digits: {tp!r}")
        if trace_id.strip("0") == "":
            raise TraceContextError(f"traceparent trace-id must not be all zeros: {tp!r}")
        if not _is_hex(span_id, 16):
            raise TraceContextError(f"traceparent span-id must be 16 hex digits: {tp!r}")
        if span_id.strip("0") == "":
            raise TraceContextError(f"traceparent span-id must not be all zeros: {tp!r}")
        if not _is_hex(flags, 2):
            raise TraceContextError(f"traceparent flags must be 2 hex digits: {tp!r}")
        if self.tracestate is not None and not isinstance(self.tracestate, str):
            raise InvalidArgumentTypeError(
                f"tracestate must be a str or None, got {type(self.tracestate).__name__}"
            )

    @property
    def trace_id(self) -> str:
        """The 32-digit trace id, lower case."""
        return self.traceparent.split("-")[1].lower()

    @property
    def span_id(self) -> str:
        """The 16-digit parent span id, lower case."""
        return self.traceparent.split("-")[2].lower()

    @property
    def sampled(self) -> bool:
        """Whether the ``sampled`` flag (bit 0 of the flags) is set."""
        return bool(int(self.traceparent.split("-")[3], 16) & 0x01)

    @classmethod
    def from_current(cls) -> TraceContext | None:
        """The current OpenTelemetry span's context, or None.

        None without the ``otel`` extra, or when no valid span is current.
        """
        from .._otel import current_trace_context

        return current_trace_context()

    def attach(self) -> contextlib.AbstractContextManager[None]:
        """A context manager making this context the current (remote) parent.

        Spans started inside the block become children of the span this
        context names, e.g. to continue a job's producer trace inside a
        handler. A no-op without the ``otel`` extra.
        """
        from .._otel import attach_trace_context

        return attach_trace_context(self)


# ---------------------------------------------------------------------------- enqueue


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
    * ``delay``: ``None`` or finite seconds >= 0, counted from when the request is sent;
      mutually exclusive with ``scheduled_at``.

    Server-configured limits (name lengths, payload size, custom map size) are checked by
    the server and come back as a :class:`JobRejection`.

    :raises InvalidArgumentTypeError: for a field of the wrong type.
    :raises InvalidArgumentError: for a value out of range; the message names the field and limit.
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

    def __post_init__(self) -> None:
        _check_queue_name(self.queue, "queue")
        _check_str(self.job_type, "job_type")
        if self.payload is not None and not isinstance(self.payload, Payload):
            raise InvalidArgumentTypeError(
                f"payload must be a Payload or None, got {type(self.payload).__name__}"
            )
        if self.idempotency_key is not None:
            _check_str(self.idempotency_key, "idempotency_key")
        if self.priority is not None:
            _check_int(self.priority, "priority", 0, _MAX_PRIORITY)
        if self.max_attempts is not None:
            _check_int(self.max_attempts, "max_attempts", 1, _UINT32_MAX)
        if self.trace_context is not None and not isinstance(self.trace_context, TraceContext):
            raise InvalidArgumentTypeError(
                "trace_context must be a TraceContext or None, "
                f"got {type(self.trace_context).__name__}"
            )
        object.__setattr__(self, "custom", _check_custom(self.custom))
        if self.scheduled_at is not None:
            if self.delay is not None:
                raise InvalidArgumentError("pass either scheduled_at or delay, not both")
            scheduled_at = self.scheduled_at
            if isinstance(scheduled_at, datetime) and scheduled_at.tzinfo is None:
                # The protocol's clock is UTC; a naive instant is read as UTC, as
                # the other sepp clients do.
                scheduled_at = scheduled_at.replace(tzinfo=UTC)
            object.__setattr__(self, "scheduled_at", _check_aware(scheduled_at, "scheduled_at"))
        if self.delay is not None:
            object.__setattr__(self, "delay", _check_seconds(self.delay, "delay"))

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


# ---------------------------------------------------------------------------- retries


_RetryKind: TypeAlias = Literal["default", "after", "dead_letter"]


@dataclass(frozen=True, slots=True)
class RetryDirective:
    """What the server should do with a job that is nacked.

    Build one with :meth:`default`, :meth:`after` or :meth:`dead_letter`.

    ``kind`` is ``"default"`` (the queue's retry policy), ``"after"`` (retry after
    :attr:`delay` seconds) or ``"dead_letter"`` (give up now). On the final attempt every
    kind dead-letters.

    :raises InvalidArgumentError: for an unknown kind, or a delay that is missing, negative or not
        finite for ``"after"`` (or given for another kind).
    """

    #: ``"default"``, ``"after"`` or ``"dead_letter"``.
    kind: _RetryKind
    #: Seconds to wait before the retry; only for ``kind == "after"``.
    delay: float | None = None

    def __post_init__(self) -> None:
        if self.kind not in ("default", "after", "dead_letter"):
            raise InvalidArgumentError(
                f"RetryDirective.kind must be 'default', 'after' or 'dead_letter', "
                f"got {self.kind!r}"
            )
        if self.kind == "after":
            if self.delay is None:
                raise InvalidArgumentError("RetryDirective 'after' needs a delay in seconds")
            object.__setattr__(self, "delay", _check_seconds(self.delay, "delay"))
        elif self.delay is not None:
            raise InvalidArgumentError(f"RetryDirective {self.kind!r} takes no delay")

    @classmethod
    def default(cls) -> RetryDirective:
        """Retry under the queue's own policy."""
        return cls("default")

    @classmethod
    def after(cls, seconds: float) -> RetryDirective:
        """Retry no sooner than ``seconds`` from now (finite, >= 0; sent in whole ms)."""
        return cls("after", seconds)

    @classmethod
    def dead_letter(cls) -> RetryDirective:
        """Do not retry: move the job to the dead-letter queue now."""
        return cls("dead_letter")


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How the client retries RPCs that failed transiently (not how jobs are retried).

    The defaults make no retries (``max_attempts=1``). Retried: UNAVAILABLE,
    DEADLINE_EXCEEDED, ABORTED and RESOURCE_EXHAUSTED; an enqueue with any job lacking an
    idempotency key only on UNAVAILABLE and RESOURCE_EXHAUSTED, because the others leave it
    unknown whether the jobs were committed. Reserve and drain are never retried.

    Validation: ``max_attempts`` is raised to at least 1 and ``multiplier`` to at least
    1.0 (matching the other sepp clients); the two backoffs must be finite and >= 0.

    :raises InvalidArgumentTypeError: for a non-numeric field.
    :raises InvalidArgumentError: for a negative or non-finite backoff.
    """

    #: Total tries per call, including the first.
    max_attempts: int = 1
    #: Delay before the first retry, in seconds.
    initial_backoff: float = 0.1
    #: Upper bound of any delay, in seconds.
    max_backoff: float = 10.0
    #: Growth factor of the delay after each retry.
    multiplier: float = 2.0
    #: Scale each delay by a random factor in [0.5, 1.0) ("equal jitter").
    jitter: bool = True

    def __post_init__(self) -> None:
        if isinstance(self.max_attempts, bool) or not isinstance(self.max_attempts, int):
            raise InvalidArgumentTypeError(
                f"max_attempts must be an int, got {type(self.max_attempts).__name__}"
            )
        object.__setattr__(self, "max_attempts", max(1, self.max_attempts))
        object.__setattr__(
            self, "initial_backoff", _check_seconds(self.initial_backoff, "initial_backoff")
        )
        object.__setattr__(self, "max_backoff", _check_seconds(self.max_backoff, "max_backoff"))
        if isinstance(self.multiplier, bool) or not isinstance(self.multiplier, int | float):
            raise InvalidArgumentTypeError(
                f"multiplier must be a number, got {type(self.multiplier).__name__}"
            )
        if math.isnan(self.multiplier):
            raise InvalidArgumentError("multiplier must be a number >= 1.0, got nan")
        object.__setattr__(self, "multiplier", max(1.0, float(self.multiplier)))

    def backoff(self, retry_index: int) -> float:
        """The delay in seconds before retry number ``retry_index`` (0 for the first retry).

        ``initial_backoff * multiplier ** retry_index``, capped at ``max_backoff``; with
        jitter, scaled by a random factor in [0.5, 1.0) so that clients failing together do
        not retry in lockstep, while the delay never drops below half its nominal value.

        :raises InvalidArgumentError: if ``retry_index`` is negative.
        """
        if retry_index < 0:
            raise InvalidArgumentError(f"retry_index must be >= 0, got {retry_index}")
        if self.initial_backoff == 0.0:
            # Checked first so that an overflowing power cannot turn "no delay" into the cap.
            delay = 0.0
        else:
            try:
                delay = self.initial_backoff * self.multiplier**retry_index
            except OverflowError:
                delay = math.inf
        delay = min(delay, self.max_backoff)
        if self.jitter:
            delay *= 0.5 + random.random() * 0.5
        return delay


# ---------------------------------------------------------------------------- server info


@dataclass(frozen=True, slots=True, kw_only=True)
class ServerInfo:
    """What the server reports about itself and its global limits.

    Limits are the global defaults; individual queues may be configured differently, and
    the server does not advertise per-queue values. Durations are float seconds.
    Built by the client from the server's answer; a reply with an empty version or no
    server time raises :class:`MalformedServerInfoError` instead.
    """

    #: The server's version string, never empty.
    version: str
    #: Protocol versions the server speaks, for example ``("v1",)``.
    supported_protocol_versions: tuple[str, ...]
    #: The server's clock when it answered.
    server_time: datetime
    #: Whether a global encoding allow-list is configured (an empty one refuses all).
    restricts_encodings: bool
    #: The global encoding allow-list.
    allowed_encodings: tuple[str, ...]
    max_payload_bytes: int
    max_custom_entries: int
    max_custom_total_bytes: int
    max_custom_key_bytes: int
    max_queue_name_bytes: int
    max_job_type_bytes: int
    max_idempotency_key_bytes: int
    #: How far ahead ``scheduled_at`` may be, in seconds.
    max_schedule_horizon: float
    max_enqueue_batch: int
    max_reserve_batch: int
    max_reserve_queues: int
    #: The longest reserve long-poll, in seconds.
    max_wait_timeout: float
    #: The longest lease, in seconds (per-queue values may differ).
    max_lease_duration: float
    #: Whether enqueueing to an undeclared queue is refused.
    strict_queues: bool
    #: Whether dead letters are kept (otherwise :meth:`Client.drain_dead_letters` is empty).
    dead_letter_retention_enabled: bool

    def check(self, request: EnqueueRequest, *, now: datetime | None = None) -> JobRejection | None:
        """The rejection these (global) limits predict for ``request``, or None.

        A local convenience for failing fast; it never replaces the server's
        verdict (queues may have their own limits, and strict mode or a full
        queue are only known to the server).
        """
        from ._limits import check_request

        return check_request(self, request, now=now)


# ---------------------------------------------------------------------------- dead letters


class DeadLetterCause(enum.StrEnum):
    """Why a job was dead-lettered. A value this library does not know maps to
    :attr:`UNSPECIFIED`, so a newer server cannot break decoding."""

    #: The server did not say, or said something this library does not know.
    UNSPECIFIED = "unspecified"
    #: Nacked on its final attempt.
    ATTEMPTS_EXHAUSTED = "attempts_exhausted"
    #: Nacked with :meth:`RetryDirective.dead_letter`.
    REJECTED = "rejected"
    #: Its lease expired on the final attempt.
    LEASE_EXPIRED = "lease_expired"
    #: Dead-lettered by an operator through the admin API.
    ADMIN = "admin"


@dataclass(frozen=True, slots=True, kw_only=True)
class DeadLetterRecord:
    """A job that failed for good, as returned (and removed) by
    :meth:`Client.drain_dead_letters`.

    Built by the client; a malformed record from the server is skipped and logged, never
    raised. Use :meth:`to_enqueue_request` to run the job again.
    """

    queue: str
    job_id: str
    job_type: str
    payload: Payload | None
    priority: int
    #: The job's resolved max_attempts; 0 if the server did not record it.
    max_attempts: int
    custom: Mapping[str, CustomValue]
    trace_context: TraceContext | None
    enqueued_at: datetime
    scheduled_at: datetime | None
    cause: DeadLetterCause
    failed_at: datetime
    #: The attempt that failed last (1-based).
    final_attempt: int
    #: The last nack reason; ``None`` when the job died by lease expiry or without one.
    last_reason: str | None

    def to_enqueue_request(self) -> EnqueueRequest:
        """A request that replays this job as a *fresh* job.

        Kept: queue, job type, payload, priority, max_attempts, custom and trace context.
        Dropped, on purpose: the id and attempt count (the server assigns new ones),
        ``scheduled_at`` (a replay should run now, not at a time long past or still far
        off) and the idempotency key (it would dedup against the original job within the
        server's window, so nothing would be enqueued). A ``max_attempts`` of 0 becomes
        ``None``, i.e. the queue's default. Use :func:`dataclasses.replace` on the result
        to change anything, such as the queue.
        """
        return EnqueueRequest(
            self.queue,
            self.job_type,
            payload=self.payload,
            priority=self.priority,
            max_attempts=self.max_attempts or None,
            custom=dict(self.custom),
            trace_context=self.trace_context,
        )


# ---------------------------------------------------------------------------- jobs


class _LeaseLike(Protocol):
    """What :class:`JobCtx` needs from the client's lease object (internal).

    The client attaches one per reserved job as ``ctx._lease``. ``known_expiry`` is the
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

        :param seconds: finite, at least 0.001 (the wire carries whole milliseconds).
        :raises InvalidArgumentError: for a duration below 1 ms or not finite.
        :raises RuntimeError: if the context has no lease (it was not made by a reserve).
        :raises JobNotFoundError: if the lease was lost (expired, already settled).
        :raises AttemptMismatchError: if the job was redelivered to someone else.
        :raises ClientError: for transport and server failures.
        """
        seconds = _check_seconds(seconds, "seconds", positive=True)
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


@dataclass(frozen=True, slots=True)
class Job:
    """A reserved job: its payload (``None`` if it has no data) and its context."""

    payload: Payload | None
    ctx: JobCtx
