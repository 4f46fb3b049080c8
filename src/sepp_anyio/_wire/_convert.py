"""Wire <-> public conversion: the only bridge between ``_model`` and ``_proto``.

Everything that builds a request message or reads a response message lives here, so the
client and worker never touch generated classes, and no generated type can leak into a
public signature. The generated module is untyped for mypy (``follow_imports = skip``), so
every value read from a message is converted to a concrete Python type right here.

Rules applied on the way in (server -> public), from the protocol and the other clients:

* a job whose *required* fields are missing or out of range (id, job type, priority,
  attempt, enqueue time, lease expiry, a custom value with no branch set) raises
  :class:`JobConversionError`; reserve and drain skip that job and keep the rest;
* so does a job (or a result, a record) that does not decode at all: the replies that
  carry lists are decoded element by element (``_wire._codec.ElementWise``), and an
  element that fails arrives here as an ``UndecodedElement``, its error naming the
  field; what can be read of it (a job's id and attempt) is salvaged for the report;
* a bad *optional* field never blocks delivery: an unparseable trace context or a
  pre-epoch ``scheduled_at`` becomes ``None``;
* an unrecognised rejection reason is an :class:`UnknownRejection`, an unknown dead-letter
  cause is :attr:`DeadLetterCause.UNSPECIFIED`: a newer server must not break us.

On the way out (public -> server): durations are truncated to whole milliseconds (the
server's resolution), a pre-epoch ``scheduled_at`` is left off (it means "now" anyway and
cannot be sent as a negative time), and an empty nack reason or worker id is left off
rather than sent empty.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import betterproto2

from .._model._checks import MAX_PRIORITY
from .._model._dead_letters import DeadLetterCause, DeadLetterRecord
from .._model._enqueue import CustomValue, EnqueueAck, EnqueueRequest
from .._model._errors import (
    BatchResultCountMismatchError,
    BatchValidationError,
    EmptyBatchError,
    InvalidArgumentError,
    InvalidArgumentTypeError,
    JobConversionError,
    MalformedResponseError,
    MalformedServerInfoError,
)
from .._model._job import Job, JobCtx, _LeaseLike, attach_lease
from .._model._payload import Payload
from .._model._rejections import (
    CustomEntriesTooMany,
    CustomKeyTooLong,
    CustomMapTooLarge,
    EncodingNotAllowed,
    IdempotencyKeyTooLong,
    InvalidRequest,
    JobRejection,
    JobTypeNameTooLong,
    JobTypeNotAllowed,
    JobValidationError,
    PayloadTooLarge,
    QueueClosing,
    QueueFull,
    QueueNameTooLong,
    ScheduledTooFar,
    UnknownQueue,
    UnknownRejection,
)
from .._model._retries import RetryDirective
from .._model._server_info import ServerInfo
from .._model._trace import TraceContext
from .._proto.google import protobuf as pb_wkt
from .._proto.sepp import v1 as pb
from ._codec import MESSAGE, STRING, UINT32, UndecodedElement, salvage_fields

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_ONE_MS = timedelta(milliseconds=1)

# ---------------------------------------------------------------------------- durations / times


def seconds_to_duration(seconds: float) -> timedelta:
    """Float seconds -> ``timedelta`` truncated to whole milliseconds (toward zero).

    Float noise below a microsecond is rounded away first, so ``1.001`` (stored as
    ``1.000999...``) is 1001 ms, not 1000.

    Raises:
        ValueError: if ``seconds`` is not finite.
    """
    if not math.isfinite(seconds):
        raise InvalidArgumentError(f"a duration must be a finite number of seconds, got {seconds}")
    micros = round(seconds * 1_000_000)
    millis = micros // 1000 if micros >= 0 else -(-micros // 1000)
    return timedelta(milliseconds=millis)


def duration_to_seconds(duration: timedelta | None) -> float:
    """``timedelta`` (or an unset Duration) -> float seconds, truncated to milliseconds."""
    if duration is None:
        return 0.0
    millis = duration // _ONE_MS if duration >= timedelta(0) else -(-duration // _ONE_MS)
    return millis / 1000


def _instant(value: Any) -> datetime | None:
    """A Timestamp field as an aware UTC datetime; ``None`` when unset or pre-epoch.

    Pre-epoch values are what an unset-but-defaulted or garbage field decodes to; sepp
    never produces them, so they are treated as absent.
    """
    if value is None:
        return None
    if not isinstance(value, datetime):  # pragma: no cover - betterproto2 always unwraps
        return None
    instant: datetime = value.astimezone(UTC)
    if instant < _EPOCH:
        return None
    return instant


def _wire_instant(value: datetime | None) -> datetime | None:
    # Point 13 of the peer notes: a pre-epoch time is dropped, not sent as negative.
    if value is None or value < _EPOCH:
        return None
    return value


def _which(message: Any, group: str) -> tuple[str, Any]:
    """The set branch of a oneof (``""`` if none) and its value, typed loosely on purpose:
    the generated classes are ``Any`` to mypy, so the branch name is what narrows."""
    branch, value = betterproto2.which_one_of(message, group)
    return branch, value


def _str(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _int(value: Any) -> int:
    return int(value) if isinstance(value, int) else 0


def _opt_str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


# ---------------------------------------------------------------------- payload, custom, trace


def payload_to_pb(payload: Payload | None) -> Any:
    """A :class:`Payload` as a ``pb.Payload``, or ``None``."""
    if payload is None:
        return None
    return pb.Payload(data=payload.data, encoding=payload.encoding)


def payload_from_pb(message: Any, *, job_id: str | None = None) -> Payload | None:
    """A ``pb.Payload`` (or ``None``) as a :class:`Payload` (or ``None``).

    A payload message with no data is "no data" (``None``): zero bytes lose nothing.

    Raises:
        JobConversionError: if there is data but no encoding.
    """
    if message is None:
        return None
    data = bytes(message.data or b"")
    if not data:
        return None
    encoding = _str(message.encoding)
    if not encoding:
        raise JobConversionError("the payload has data but no encoding", job_id=job_id)
    return Payload(data, encoding)


def custom_to_pb(custom: Mapping[str, CustomValue]) -> dict[str, Any]:
    """A validated custom map as ``{key: pb.PrimitiveValue}``."""
    out: dict[str, Any] = {}
    for key, value in custom.items():
        # bool first: it is an int subclass but has its own wire branch.
        if isinstance(value, bool):
            out[key] = pb.PrimitiveValue(bool_value=value)
        elif isinstance(value, int):
            out[key] = pb.PrimitiveValue(int_value=value)
        elif isinstance(value, float):
            out[key] = pb.PrimitiveValue(double_value=value)
        else:
            out[key] = pb.PrimitiveValue(string_value=value)
    return out


def custom_from_pb(
    custom: Mapping[str, Any], *, job_id: str | None = None
) -> dict[str, CustomValue]:
    """``{key: pb.PrimitiveValue}`` as a plain dict.

    Raises:
        JobConversionError: if a value has no branch set.
    """
    out: dict[str, CustomValue] = {}
    for key, value in custom.items():
        inner: Any = None
        branch = ""
        if value is not None:
            branch, inner = _which(value, "value")
        if branch == "string_value":
            out[str(key)] = str(inner)
        elif branch == "int_value":
            out[str(key)] = int(inner)
        elif branch == "double_value":
            out[str(key)] = float(inner)
        elif branch == "bool_value":
            out[str(key)] = bool(inner)
        else:
            raise JobConversionError(f"custom[{key!r}] has no value set", job_id=job_id)
    return out


def trace_context_to_pb(trace_context: TraceContext | None) -> Any:
    """A :class:`TraceContext` as a ``pb.TraceContext``, or ``None``."""
    if trace_context is None:
        return None
    return pb.TraceContext(
        traceparent=trace_context.traceparent, tracestate=trace_context.tracestate
    )


def trace_context_from_pb(message: Any) -> TraceContext | None:
    """A ``pb.TraceContext`` as a :class:`TraceContext`; ``None`` if unset or invalid.

    Invalid is not an error: a job must never be undeliverable because of its tracing.
    """
    if message is None:
        return None
    try:
        return TraceContext(_str(message.traceparent), _opt_str(message.tracestate))
    except ValueError:
        return None


# ---------------------------------------------------------------------------- enqueue


def enqueue_request_to_pb(request: EnqueueRequest, *, now: datetime | None = None) -> Any:
    """An :class:`EnqueueRequest` as a ``pb.EnqueueRequest``.

    Args:
        now: the clock used to turn ``delay`` into ``scheduled_at`` (default: the
            current UTC time). Build the message once per call and reuse it across retries, so
            a retry does not push the job further out.
    """
    scheduled_at = request.scheduled_at
    if request.delay is not None:
        base = now if now is not None else datetime.now(UTC)
        scheduled_at = base + seconds_to_duration(request.delay)
    return pb.EnqueueRequest(
        queue=request.queue,
        job_type=request.job_type,
        payload=payload_to_pb(request.payload),
        idempotency_key=request.idempotency_key,
        priority=request.priority,
        max_attempts=request.max_attempts,
        trace_context=trace_context_to_pb(request.trace_context),
        custom=custom_to_pb(request.custom),
        scheduled_at=_wire_instant(scheduled_at),
    )


def enqueue_batch_request_to_pb(
    requests: Sequence[EnqueueRequest], *, now: datetime | None = None
) -> Any:
    """A ``pb.EnqueueBatchRequest`` for ``EnqueueBatch`` or ``EnqueueAtomic``.

    Raises:
        EmptyBatchError: if ``requests`` is empty (the server refuses it).
        TypeError: if an element is not an :class:`EnqueueRequest`.
    """
    if not requests:
        raise EmptyBatchError()
    stamp = now if now is not None else datetime.now(UTC)
    jobs = []
    for index, request in enumerate(requests):
        if not isinstance(request, EnqueueRequest):
            raise InvalidArgumentTypeError(
                f"jobs[{index}] must be an EnqueueRequest, got {type(request).__name__}"
            )
        jobs.append(enqueue_request_to_pb(request, now=stamp))
    return pb.EnqueueBatchRequest(jobs=jobs)


def enqueue_ack_from_pb(message: Any) -> EnqueueAck:
    """A ``pb.EnqueueResponse`` as an :class:`EnqueueAck`.

    Raises:
        MalformedResponseError: if the job id is empty.
    """
    job_id = _str(message.job_id)
    if not job_id:
        raise MalformedResponseError("the server acknowledged a job without a job_id")
    return EnqueueAck(job_id, bool(message.deduplicated))


def _unknown_field_number(message: Any) -> int | None:
    raw = getattr(message, "_unknown_fields", b"")
    if not raw:
        return None
    try:
        for parsed in betterproto2.parse_fields(bytes(raw)):
            return int(parsed.number)
    except Exception:  # pragma: no cover - garbage in the unknown bytes; keep going
        return None
    return None  # pragma: no cover


def rejection_from_pb(message: Any) -> JobRejection:
    """A ``pb.JobRejection`` (or ``None``) as the matching :class:`JobRejection`.

    A missing or unrecognised reason gives :class:`UnknownRejection`, never an error.
    """
    if message is None:
        return UnknownRejection()
    branch, r = _which(message, "reason")
    match branch:
        case "unknown_queue":
            return UnknownQueue(_str(r.queue))
        case "payload_too_large":
            return PayloadTooLarge(_int(r.limit), _int(r.actual))
        case "encoding_not_allowed":
            return EncodingNotAllowed(_str(r.encoding), tuple(str(a) for a in r.allowed))
        case "job_type_not_allowed":
            return JobTypeNotAllowed(_str(r.job_type), tuple(str(a) for a in r.allowed))
        case "custom_entries_too_many":
            return CustomEntriesTooMany(_int(r.limit), _int(r.actual))
        case "custom_map_too_large":
            return CustomMapTooLarge(_int(r.limit), _int(r.actual))
        case "custom_key_too_long":
            return CustomKeyTooLong(_str(r.key), _int(r.limit), _int(r.actual))
        case "queue_name_too_long":
            return QueueNameTooLong(_int(r.limit), _int(r.actual))
        case "job_type_name_too_long":
            return JobTypeNameTooLong(_int(r.limit), _int(r.actual))
        case "idempotency_key_too_long":
            return IdempotencyKeyTooLong(_int(r.limit), _int(r.actual))
        case "scheduled_too_far":
            # sepp-rs falls back to the epoch for a missing time; so do we, to keep the
            # field a plain datetime. The server always sets it.
            actual = r.actual if isinstance(r.actual, datetime) else _EPOCH
            return ScheduledTooFar(duration_to_seconds(r.horizon), actual.astimezone(UTC))
        case "invalid_request":
            return InvalidRequest(_str(r.message))
        case "queue_full":
            return QueueFull(_str(r.queue), _int(r.limit))
        case "queue_closing":
            return QueueClosing(_str(r.queue))
        case _:
            return UnknownRejection(_unknown_field_number(message))


def job_result_from_pb(message: Any, *, index: int) -> EnqueueAck | JobRejection:
    """One ``pb.JobResult`` of a best-effort batch.

    Raises:
        MalformedResponseError: if the result has neither success nor rejection.
    """
    branch, value = _which(message, "outcome")
    if branch == "success":
        return enqueue_ack_from_pb(value)
    if branch == "rejection":
        return rejection_from_pb(value)
    raise MalformedResponseError(
        f"enqueue_batch: the server's result for job {index} has neither a success nor a rejection"
    )


_MAX_LISTED_IDS = 10


def enqueue_batch_results_from_pb(
    message: Any, *, expected: int
) -> list[EnqueueAck | JobRejection]:
    """A ``pb.EnqueueBatchResponse`` as one outcome per job, in request order.

    The results may have been decoded one by one (``UndecodedElement`` for one that did
    not decode). Unlike a reserve's jobs, no result can be left out (there is one per
    job, in order), so an unreadable one fails the call; the error names its index and
    field, and the jobs that the readable results say were accepted, so that none of
    them is lost from sight.

    Raises:
        BatchResultCountMismatchError: if there are not ``expected`` results.
        MalformedResponseError: if a result does not decode, has no outcome, or an
            ack has no job id.
    """
    results = list(message.results)
    if len(results) != expected:
        raise BatchResultCountMismatchError(expected, len(results))
    unreadable = [
        (index, result)
        for index, result in enumerate(results)
        if isinstance(result, UndecodedElement)
    ]
    if not unreadable:
        return [job_result_from_pb(result, index=i) for i, result in enumerate(results)]
    accepted: list[str] = []
    for index, result in enumerate(results):
        if isinstance(result, UndecodedElement):
            continue
        try:
            outcome = job_result_from_pb(result, index=index)
        except MalformedResponseError:
            continue
        if isinstance(outcome, EnqueueAck):
            accepted.append(f"{index}: {outcome.job_id}")
    first_index, first = unreadable[0]
    others = f" (and {len(unreadable) - 1} more)" if len(unreadable) > 1 else ""
    listed = ", ".join(accepted[:_MAX_LISTED_IDS])
    if len(accepted) > _MAX_LISTED_IDS:
        listed += f", and {len(accepted) - _MAX_LISTED_IDS} more"
    raise MalformedResponseError(
        f"enqueue_batch: the server's result for job {first_index} cannot be decoded "
        f"({first.error}){others}; its outcome is unknown. The readable results accepted "
        f"{len(accepted)} job(s){': ' + listed if listed else ''}"
    )


def validation_error_from_pb(message: Any) -> JobValidationError:
    """A ``pb.JobValidationError``; a missing rejection is an :class:`UnknownRejection`."""
    return JobValidationError(_int(message.index), rejection_from_pb(message.rejection))


def enqueue_atomic_from_pb(message: Any, *, expected: int) -> list[EnqueueAck]:
    """A ``pb.EnqueueAtomicResponse`` as one ack per job, in request order.

    Raises:
        BatchValidationError: if the server refused the batch (nothing was enqueued).
        BatchResultCountMismatchError: if there are not ``expected`` acks.
        MalformedResponseError: if the response has no outcome.
    """
    branch, value = _which(message, "outcome")
    if branch == "rejection":
        raise BatchValidationError([validation_error_from_pb(e) for e in value.errors])
    if branch != "success":
        raise MalformedResponseError(
            "enqueue_atomic: the server's response has neither a success nor a rejection"
        )
    responses = list(value.responses)
    if len(responses) != expected:
        raise BatchResultCountMismatchError(expected, len(responses))
    return [enqueue_ack_from_pb(r) for r in responses]


# ---------------------------------------------------------------------------- reserve / jobs


def reserve_request_to_pb(
    queues: Sequence[str],
    *,
    lease: float,
    wait: float,
    max_jobs: int | None = None,
    worker_id: str | None = None,
) -> Any:
    """A ``pb.ReserveRequest``. Arguments are assumed validated by the caller.

    Args:
        lease: requested lease in seconds (the server may clamp it).
        wait: long-poll window in seconds (the server may clamp it).
    """
    return pb.ReserveRequest(
        queues=list(queues),
        wait_timeout=seconds_to_duration(wait),
        lease_duration=seconds_to_duration(lease),
        worker_id=worker_id or None,
        max_jobs=max_jobs,
    )


def _required_instant(value: Any, name: str, job_id: str) -> datetime:
    instant = _instant(value)
    if instant is None:
        what = "missing" if value is None else "before 1970"
        raise JobConversionError(f"{name} is {what}", job_id=job_id)
    return instant


def _checked_core(message: Any) -> tuple[str, str, int]:
    job_id = _str(message.id)
    if not job_id:
        raise JobConversionError("the job has no id")
    job_type = _str(message.job_type)
    if not job_type:
        raise JobConversionError("job_type is empty", job_id=job_id)
    priority = _int(message.priority)
    if priority > MAX_PRIORITY:
        raise JobConversionError(
            f"priority {priority} is out of range (0-{MAX_PRIORITY})", job_id=job_id
        )
    return job_id, job_type, priority


def job_from_pb(
    message: Any,
    *,
    worker_id: str | None,
    make_lease: Callable[[JobCtx], _LeaseLike] | None = None,
) -> Job:
    """A reserved ``pb.Job`` as a :class:`Job`.

    Args:
        worker_id: the worker id the reserve was sent with; echoed on ack/nack/extend.
        make_lease: called with the finished context to build the lease that
            :meth:`JobCtx.extend` goes through (its ``known_expiry`` should start at
            ``ctx.lease_expires_at``, the *granted* expiry). ``None`` leaves the job without a
            lease.

    Raises:
        JobConversionError: if a required field is missing or out of range.
    """
    job_id, job_type, priority = _checked_core(message)
    attempt = _int(message.attempt)
    if attempt < 1:
        raise JobConversionError(
            f"attempt {attempt} is invalid (attempts start at 1)", job_id=job_id
        )
    ctx = JobCtx(
        id=job_id,
        queue=_str(message.queue),
        job_type=job_type,
        priority=priority,
        attempt=attempt,
        max_attempts=_int(message.max_attempts),
        enqueued_at=_required_instant(message.enqueued_at, "enqueued_at", job_id),
        scheduled_at=_instant(message.scheduled_at),
        lease_expires_at=_required_instant(message.lease_expires_at, "lease_expires_at", job_id),
        custom=custom_from_pb(message.custom, job_id=job_id),
        trace_context=trace_context_from_pb(message.trace_context),
        worker_id=worker_id or None,
    )
    payload = payload_from_pb(message.payload, job_id=job_id)
    if make_lease is not None:
        attach_lease(ctx, make_lease(ctx))
    return Job(payload, ctx)


# Job: 1 id, 2 job_type, 7 attempt, 12 queue.
_JOB_IDENTITY = {1: STRING, 2: STRING, 7: UINT32, 12: STRING}
# DeadLetterRecord: 1 job, 4 final_attempt.
_RECORD_IDENTITY = {1: MESSAGE, 4: UINT32}


def _salvaged_job(data: bytes) -> tuple[str | None, int | None, str | None, str | None]:
    """What a job that did not decode still tells: (id, attempt, queue, job type)."""
    fields = salvage_fields(data, _JOB_IDENTITY)
    return (
        fields.get(1) or None,
        fields.get(7) or None,
        fields.get(12) or None,
        fields.get(2) or None,
    )


def _unreadable_job(element: UndecodedElement) -> JobConversionError:
    job_id, attempt, queue, job_type = _salvaged_job(element.data)
    return JobConversionError(
        str(element.error), job_id=job_id, attempt=attempt, queue=queue, job_type=job_type
    )


def _identified(error: JobConversionError, message: Any) -> JobConversionError:
    """``error`` with what the (decoded but unusable) job says of itself added."""
    job_id = error.job_id or _str(message.id) or None
    return JobConversionError(
        error.reason,
        job_id=job_id,
        attempt=_int(message.attempt) or None,
        queue=_str(message.queue) or None,
        job_type=_str(message.job_type) or None,
    )


def jobs_from_pb(
    message: Any,
    *,
    worker_id: str | None,
    make_lease: Callable[[JobCtx], _LeaseLike] | None = None,
) -> tuple[list[Job], list[JobConversionError]]:
    """Every usable job of a ``pb.ReserveResponse``, plus an error per job left out.

    A job is left out when it did not decode (an ``UndecodedElement``, see
    ``_wire._codec.ElementWise``) or cannot be converted; its error carries what could be
    read of it (``job_id``, ``attempt``, ``queue``, ``job_type``), so that the caller can
    report it and dead-letter it. A bad job must not cost the rest of the batch.
    """
    jobs: list[Job] = []
    errors: list[JobConversionError] = []
    for raw in message.jobs:
        if isinstance(raw, UndecodedElement):
            errors.append(_unreadable_job(raw))
            continue
        try:
            jobs.append(job_from_pb(raw, worker_id=worker_id, make_lease=make_lease))
        except JobConversionError as exc:
            errors.append(_identified(exc, raw))
    return jobs, errors


# ---------------------------------------------------------------------------- ack / nack / extend


def ack_request_to_pb(ctx: JobCtx) -> Any:
    """A ``pb.AckRequest`` echoing the job's id, attempt and worker id."""
    return pb.AckRequest(job_id=ctx.id, attempt=ctx.attempt, worker_id=ctx.worker_id or None)


def retry_directive_to_pb(directive: RetryDirective) -> Any:
    """A :class:`RetryDirective` as a ``pb.NackRetry`` (delay in whole milliseconds)."""
    if directive.kind == "after":
        return pb.NackRetry(delay=seconds_to_duration(directive.delay or 0.0))
    if directive.kind == "dead_letter":
        return pb.NackRetry(dead_letter=pb_wkt.Empty())
    return pb.NackRetry(default=pb_wkt.Empty())


def nack_request_to_pb(ctx: JobCtx, directive: RetryDirective, *, reason: str | None = None) -> Any:
    """A ``pb.NackRequest``. An empty reason is left off the wire: sent empty, it would
    read as the worker reporting an empty reason."""
    return pb.NackRequest(
        job_id=ctx.id,
        attempt=ctx.attempt,
        reason=reason or None,
        retry=retry_directive_to_pb(directive),
        worker_id=ctx.worker_id or None,
    )


def dead_letter_nack_to_pb(job_id: str, attempt: int, *, reason: str, worker_id: str | None) -> Any:
    """A ``pb.NackRequest`` sending a job the client cannot read to the dead-letter queue
    (there is no :class:`JobCtx` for it, only its id and attempt)."""
    return pb.NackRequest(
        job_id=job_id,
        attempt=attempt,
        reason=reason,
        retry=retry_directive_to_pb(RetryDirective.dead_letter()),
        worker_id=worker_id or None,
    )


def nack_dead_lettered_from_pb(message: Any) -> bool:
    """Whether the nack sent the job to the dead-letter queue."""
    return bool(message.dead_lettered)


def extend_request_to_pb(ctx: JobCtx, seconds: float) -> Any:
    """A ``pb.ExtendRequest`` asking for ``seconds`` (whole ms) from now."""
    return pb.ExtendRequest(
        job_id=ctx.id,
        attempt=ctx.attempt,
        lease_duration=seconds_to_duration(seconds),
        worker_id=ctx.worker_id or None,
    )


def extend_expiry_from_pb(message: Any) -> datetime:
    """The new lease expiry from a ``pb.ExtendResponse``.

    Raises:
        MalformedResponseError: if it is missing or before 1970.
    """
    expiry = _instant(message.lease_expires_at)
    if expiry is None:
        raise MalformedResponseError("extend: the server's reply has no valid lease_expires_at")
    return expiry


# ---------------------------------------------------------------------------- dead letters

_CAUSE_FROM_WIRE: dict[int, DeadLetterCause] = {
    0: DeadLetterCause.UNSPECIFIED,
    1: DeadLetterCause.ATTEMPTS_EXHAUSTED,
    2: DeadLetterCause.REJECTED,
    3: DeadLetterCause.LEASE_EXPIRED,
    4: DeadLetterCause.ADMIN,
}


def dead_letter_cause_from_pb(value: Any) -> DeadLetterCause:
    """A wire enum value as a :class:`DeadLetterCause`; unknown values are UNSPECIFIED."""
    try:
        number = int(value)
    except (TypeError, ValueError):
        return DeadLetterCause.UNSPECIFIED
    return _CAUSE_FROM_WIRE.get(number, DeadLetterCause.UNSPECIFIED)


def drain_request_to_pb(queue: str | None, max_records: int) -> Any:
    """A ``pb.DrainDeadLettersRequest``. The caller handles ``max_records == 0`` without an
    RPC (the server refuses 0, and clamping it to 1 would silently drain a record)."""
    return pb.DrainDeadLettersRequest(queue=queue, max=max_records)


def dead_letter_from_pb(message: Any) -> DeadLetterRecord:
    """A ``pb.DeadLetterRecord`` as a :class:`DeadLetterRecord`.

    Raises:
        JobConversionError: if the job is missing, a required job field is missing or
            out of range, the queue is empty, or ``failed_at`` is missing.
    """
    job = message.job
    if job is None:
        raise JobConversionError("the dead-letter record has no job")
    job_id, job_type, priority = _checked_core(job)
    queue = _str(job.queue)
    if not queue:
        raise JobConversionError("the dead-letter record has no queue", job_id=job_id)
    return DeadLetterRecord(
        queue=queue,
        job_id=job_id,
        job_type=job_type,
        payload=payload_from_pb(job.payload, job_id=job_id),
        priority=priority,
        max_attempts=_int(job.max_attempts),
        custom=custom_from_pb(job.custom, job_id=job_id),
        trace_context=trace_context_from_pb(job.trace_context),
        enqueued_at=_required_instant(job.enqueued_at, "enqueued_at", job_id),
        scheduled_at=_instant(job.scheduled_at),
        cause=dead_letter_cause_from_pb(message.cause),
        failed_at=_required_instant(message.failed_at, "failed_at", job_id),
        final_attempt=_int(message.final_attempt),
        last_reason=_opt_str(message.last_reason),
    )


def _unreadable_record(element: UndecodedElement) -> JobConversionError:
    fields = salvage_fields(element.data, _RECORD_IDENTITY)
    job = fields.get(1)
    job_id = queue = job_type = None
    if job is not None:
        job_id, _, queue, job_type = _salvaged_job(job)
    return JobConversionError(
        f"dead-letter record: {element.error}",
        job_id=job_id,
        attempt=fields.get(4) or None,
        queue=queue,
        job_type=job_type,
    )


def dead_letters_from_pb(
    message: Any,
) -> tuple[list[DeadLetterRecord], list[JobConversionError]]:
    """Every usable record of a ``pb.DrainDeadLettersResponse``, plus an error per record
    left out (one that did not decode, or cannot be converted), carrying what could be
    read of it. Drained records are gone from the server either way."""
    records: list[DeadLetterRecord] = []
    errors: list[JobConversionError] = []
    for raw in message.records:
        if isinstance(raw, UndecodedElement):
            errors.append(_unreadable_record(raw))
            continue
        try:
            records.append(dead_letter_from_pb(raw))
        except JobConversionError as exc:
            job = raw.job
            if job is not None:
                exc = JobConversionError(
                    exc.reason,
                    job_id=exc.job_id,
                    attempt=_int(raw.final_attempt) or None,
                    queue=_str(job.queue) or None,
                    job_type=_str(job.job_type) or None,
                )
            errors.append(exc)
    return records, errors


# ---------------------------------------------------------------------------- server info


def _strings(values: Iterable[Any]) -> tuple[str, ...]:
    return tuple(str(v) for v in values)


def server_info_from_pb(message: Any) -> ServerInfo:
    """A ``pb.GetServerInfoResponse`` as a :class:`ServerInfo`.

    Raises:
        MalformedServerInfoError: if the version is empty or the server time is
            missing or before 1970.
    """
    version = _str(message.server_version)
    if not version:
        raise MalformedServerInfoError("server_version is empty")
    server_time = _instant(message.server_time)
    if server_time is None:
        what = "missing" if message.server_time is None else "before 1970"
        raise MalformedServerInfoError(f"server_time is {what}")
    return ServerInfo(
        version=version,
        supported_protocol_versions=_strings(message.supported_protocol_versions),
        server_time=server_time,
        restricts_encodings=bool(message.restricts_encodings),
        allowed_encodings=_strings(message.allowed_encodings),
        max_payload_bytes=_int(message.max_payload_bytes),
        max_custom_entries=_int(message.max_custom_entries),
        max_custom_total_bytes=_int(message.max_custom_total_bytes),
        max_custom_key_bytes=_int(message.max_custom_key_bytes),
        max_queue_name_bytes=_int(message.max_queue_name_bytes),
        max_job_type_bytes=_int(message.max_job_type_bytes),
        max_idempotency_key_bytes=_int(message.max_idempotency_key_bytes),
        max_schedule_horizon=duration_to_seconds(message.max_schedule_horizon),
        max_enqueue_batch=_int(message.max_enqueue_batch),
        max_reserve_batch=_int(message.max_reserve_batch),
        max_reserve_queues=_int(message.max_reserve_queues),
        max_wait_timeout=duration_to_seconds(message.max_wait_timeout),
        max_lease_duration=duration_to_seconds(message.max_lease_duration),
        strict_queues=bool(message.strict_queues),
        dead_letter_retention_enabled=bool(message.dead_letter_retention_enabled),
    )
