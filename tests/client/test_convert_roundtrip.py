"""Property tests: public types <-> wire messages, through real bytes.

Each property encodes with ``_convert``, serialises, parses again (with betterproto2, and
where it adds something with sepp-py's protoc-generated classes, an independent
implementation), decodes, and compares with what the rules say should come back:

* durations are whole milliseconds (truncated); instants keep their microseconds;
* a naive ``scheduled_at`` is UTC; a pre-epoch one is left off the wire (and read back as
  ``None``); a ``delay`` becomes ``now`` + the truncated delay;
* custom values keep their exact type and bits (``True`` stays a bool, ``1`` an int, NaN
  and -0.0 survive);
* whatever a server sends, decoding a job either succeeds with a valid ``Job`` or raises
  ``JobConversionError``, never anything else;
* a dead-letter replay keeps the job but not its id, attempt, schedule or idempotency key.
"""

from __future__ import annotations

import calendar
import dataclasses
import importlib
import math
import struct
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from sepp_anyio._model._dead_letters import DeadLetterCause, DeadLetterRecord
from sepp_anyio._model._enqueue import CustomValue, EnqueueAck, EnqueueRequest
from sepp_anyio._model._errors import JobConversionError
from sepp_anyio._model._job import Job, JobCtx
from sepp_anyio._model._payload import Payload
from sepp_anyio._model._rejections import (
    CustomEntriesTooMany,
    CustomKeyTooLong,
    CustomMapTooLarge,
    EncodingNotAllowed,
    IdempotencyKeyTooLong,
    InvalidRequest,
    JobRejection,
    JobTypeNameTooLong,
    JobTypeNotAllowed,
    PayloadTooLarge,
    QueueClosing,
    QueueFull,
    QueueNameTooLong,
    ScheduledTooFar,
    UnknownQueue,
)
from sepp_anyio._model._retries import RetryDirective
from sepp_anyio._model._server_info import ServerInfo
from sepp_anyio._model._trace import TraceContext
from sepp_anyio._proto.sepp import v1 as pb
from sepp_anyio._wire import _convert as cv
from tests.support import encoders as enc

# sepp-py's classes are built at import time from a descriptor; mypy cannot see them.
q: Any = importlib.import_module("sepp.v1.queue_pb2")

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
NOW = datetime(2026, 5, 17, 12, 0, 0, 250_000, tzinfo=UTC)
U32 = 2**32 - 1
U64 = 2**64 - 1
ONE_MS = timedelta(milliseconds=1)

# ------------------------------------------------------------------------------ strategies

utf8 = st.characters(codec="utf-8")
texts = st.text(utf8, max_size=12)
names = st.text(utf8, min_size=1, max_size=12)
queue_names = st.text(
    st.characters(codec="utf-8", exclude_categories=["Cc"], exclude_characters="/"),
    min_size=1,
    max_size=12,
).filter(lambda name: name not in (".", ".."))
custom_values: st.SearchStrategy[CustomValue] = st.one_of(
    texts, st.integers(-(2**63), 2**63 - 1), st.floats(), st.booleans()
)
customs = st.dictionaries(names, custom_values, max_size=4)


def _hex(size: int) -> st.SearchStrategy[str]:
    return st.text("0123456789abcdefABCDEF", min_size=size, max_size=size)


traceparents = st.builds(
    "{}-{}-{}-{}".format,
    _hex(2).filter(lambda v: v.lower() != "ff"),
    _hex(32).filter(lambda t: t.strip("0") != ""),
    _hex(16).filter(lambda s: s.strip("0") != ""),
    _hex(2),
)
trace_contexts = st.builds(TraceContext, traceparents, st.none() | texts)
payloads = st.builds(Payload, st.binary(min_size=1, max_size=32), names)
offsets = st.builds(
    timezone, st.timedeltas(min_value=timedelta(hours=-23), max_value=timedelta(hours=23))
)
any_instants = st.datetimes(
    min_value=datetime(1800, 1, 1), max_value=datetime(2400, 1, 1), timezones=offsets
)
naive_instants = st.datetimes(min_value=datetime(1800, 1, 1), max_value=datetime(2400, 1, 1))
post_epoch = st.datetimes(
    min_value=datetime(1970, 1, 2), max_value=datetime(2400, 1, 1), timezones=st.just(UTC)
)
delays = st.floats(min_value=0, max_value=10**7, allow_nan=False)
whole_ms = st.integers(0, 10**10).map(lambda ms: ms / 1000)


@st.composite
def enqueue_requests(draw: st.DrawFn) -> EnqueueRequest:
    when = draw(st.sampled_from(["none", "aware", "naive", "delay"]))
    return EnqueueRequest(
        draw(queue_names),
        draw(names),
        payload=draw(st.none() | payloads),
        idempotency_key=draw(st.none() | names),
        priority=draw(st.none() | st.integers(0, 9)),
        max_attempts=draw(st.none() | st.integers(1, U32)),
        trace_context=draw(st.none() | trace_contexts),
        custom=draw(customs),
        scheduled_at=draw(any_instants if when == "aware" else naive_instants)
        if when in ("aware", "naive")
        else None,
        delay=draw(delays) if when == "delay" else None,
    )


@st.composite
def jobs(draw: st.DrawFn) -> Job:
    ctx = JobCtx(
        id=draw(names),
        queue=draw(texts),
        job_type=draw(names),
        priority=draw(st.integers(0, 9)),
        attempt=draw(st.integers(1, U32)),
        max_attempts=draw(st.integers(0, U32)),
        enqueued_at=draw(post_epoch),
        scheduled_at=draw(st.none() | any_instants.map(lambda d: d.astimezone(UTC))),
        lease_expires_at=draw(post_epoch),
        custom=draw(customs),
        trace_context=draw(st.none() | trace_contexts),
        worker_id=draw(st.none() | names),
    )
    return Job(draw(st.none() | payloads), ctx)


@st.composite
def dead_letter_records(draw: st.DrawFn) -> DeadLetterRecord:
    return DeadLetterRecord(
        queue=draw(queue_names),
        job_id=draw(names),
        job_type=draw(names),
        payload=draw(st.none() | payloads),
        priority=draw(st.integers(0, 9)),
        max_attempts=draw(st.integers(0, U32)),
        custom=draw(customs),
        trace_context=draw(st.none() | trace_contexts),
        enqueued_at=draw(post_epoch),
        scheduled_at=draw(st.none() | any_instants.map(lambda d: d.astimezone(UTC))),
        cause=draw(st.sampled_from(DeadLetterCause)),
        failed_at=draw(post_epoch),
        final_attempt=draw(st.integers(0, U32)),
        last_reason=draw(st.none() | texts),
    )


# ------------------------------------------------------------------------------ comparisons


def same_value(a: CustomValue, b: CustomValue) -> bool:
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        assert isinstance(b, float)
        return struct.pack("<d", a) == struct.pack("<d", b)
    return a == b


def same_custom(a: Mapping[str, CustomValue], b: Mapping[str, CustomValue]) -> bool:
    return a.keys() == b.keys() and all(same_value(a[k], b[k]) for k in a)


def on_the_wire(value: datetime | None) -> datetime | None:
    """What survives the trip: ``None`` for a pre-epoch instant, else the instant in UTC."""
    if value is None or value < EPOCH:
        return None
    return value.astimezone(UTC)


def decode_enqueue_request(message: Any) -> EnqueueRequest:
    """The inverse of ``enqueue_request_to_pb`` (the client never needs one)."""
    payload = message.payload
    trace = message.trace_context
    return EnqueueRequest(
        message.queue,
        message.job_type,
        payload=None if payload is None else Payload(payload.data, payload.encoding),
        idempotency_key=message.idempotency_key,
        priority=message.priority,
        max_attempts=message.max_attempts,
        trace_context=None if trace is None else TraceContext(trace.traceparent, trace.tracestate),
        custom=cv.custom_from_pb(message.custom),
        scheduled_at=message.scheduled_at,
    )


def _reparse(message: Any) -> Any:
    return type(message).parse(bytes(message))


# ------------------------------------------------------------------------------ enqueue


@given(enqueue_requests())
def test_enqueue_request_round_trips_through_the_wire(request: EnqueueRequest) -> None:
    message = cv.enqueue_request_to_pb(request, now=NOW)
    decoded = decode_enqueue_request(_reparse(message))

    expected_at: datetime | None
    if request.delay is not None:
        expected_at = NOW + cv.seconds_to_duration(request.delay)
        assert expected_at - NOW <= timedelta(seconds=request.delay) + timedelta(microseconds=1)
    else:
        expected_at = on_the_wire(request.scheduled_at)
    expected = dataclasses.replace(request, scheduled_at=expected_at, delay=None)
    assert same_custom(decoded.custom, expected.custom)
    decoded = dataclasses.replace(decoded, custom={})
    assert decoded == dataclasses.replace(expected, custom={})


@given(enqueue_requests())
def test_enqueue_request_presence_as_seen_by_sepp_py(request: EnqueueRequest) -> None:
    parsed = q.EnqueueRequest.FromString(bytes(cv.enqueue_request_to_pb(request, now=NOW)))
    assert (parsed.queue, parsed.job_type) == (request.queue, request.job_type)
    for name in ("payload", "idempotency_key", "priority", "max_attempts", "trace_context"):
        assert parsed.HasField(name) == (getattr(request, name) is not None), name
    if request.priority is not None:
        assert parsed.priority == request.priority
    if request.max_attempts is not None:
        assert parsed.max_attempts == request.max_attempts
    sent_at = on_the_wire(request.scheduled_at) if request.delay is None else NOW
    assert parsed.HasField("scheduled_at") == (sent_at is not None)
    branches = {bool: "bool_value", int: "int_value", float: "double_value", str: "string_value"}
    assert {k: v.WhichOneof("value") for k, v in parsed.custom.items()} == {
        k: branches[type(v)] for k, v in request.custom.items()
    }


@given(naive_instants)
def test_a_naive_scheduled_at_is_utc_and_a_pre_epoch_one_is_not_sent(naive: datetime) -> None:
    request = EnqueueRequest("q", "t", scheduled_at=naive)
    assert request.scheduled_at == naive.replace(tzinfo=UTC)
    parsed = q.EnqueueRequest.FromString(bytes(cv.enqueue_request_to_pb(request)))
    if naive < datetime(1970, 1, 1):
        assert not parsed.HasField("scheduled_at")
    else:
        assert parsed.scheduled_at.seconds == calendar.timegm(naive.utctimetuple())
        assert parsed.scheduled_at.nanos == naive.microsecond * 1000


@given(delays)
def test_a_delay_is_sent_as_now_plus_whole_milliseconds(delay: float) -> None:
    message = cv.enqueue_request_to_pb(EnqueueRequest("q", "t", delay=delay), now=NOW)
    sent = message.scheduled_at - NOW
    assert sent % ONE_MS == timedelta(0)
    assert timedelta(seconds=delay) - ONE_MS - timedelta(microseconds=1) < sent
    assert sent <= timedelta(seconds=delay) + timedelta(microseconds=1)


@given(st.lists(st.one_of(st.builds(EnqueueAck, names, st.booleans()), st.none()), max_size=6))
def test_enqueue_batch_results_keep_request_order(outcomes: list[EnqueueAck | None]) -> None:
    rejection = UnknownQueue("nope")
    results = [
        pb.JobResult(rejection=enc.rejection_to_pb(rejection))
        if ack is None
        else pb.JobResult(
            success=pb.EnqueueResponse(job_id=ack.job_id, deduplicated=ack.deduplicated)
        )
        for ack in outcomes
    ]
    reply = _reparse(pb.EnqueueBatchResponse(results=results))
    decoded = cv.enqueue_batch_results_from_pb(reply, expected=len(outcomes))
    assert decoded == [rejection if ack is None else ack for ack in outcomes]


# ------------------------------------------------------------------------------ jobs


def expected_job(job: Job) -> Job:
    ctx = dataclasses.replace(job.ctx, scheduled_at=on_the_wire(job.ctx.scheduled_at))
    return Job(job.payload, ctx)


def assert_same_job(got: Job, want: Job) -> None:
    assert same_custom(got.ctx.custom, want.ctx.custom)
    assert got.payload == want.payload
    assert dataclasses.replace(got.ctx, custom={}) == dataclasses.replace(want.ctx, custom={})


@given(jobs())
def test_job_round_trips_through_the_wire(job: Job) -> None:
    message = _reparse(enc.job_to_pb(job))
    again = cv.job_from_pb(message, worker_id=job.ctx.worker_id)
    assert_same_job(again, expected_job(job))
    assert again.ctx._lease is None


@given(jobs())
def test_job_round_trips_through_sepp_pys_encoder(job: Job) -> None:
    # Our bytes -> protoc's parser -> protoc's serializer -> our parser.
    theirs = q.Job.FromString(bytes(enc.job_to_pb(job))).SerializeToString()
    again = cv.job_from_pb(pb.Job.parse(theirs), worker_id=job.ctx.worker_id)
    assert_same_job(again, expected_job(job))


pb_instants = st.none() | any_instants
raw_custom_values = st.one_of(
    st.builds(pb.PrimitiveValue),
    texts.map(lambda s: pb.PrimitiveValue(string_value=s)),
    st.integers(-(2**63), 2**63 - 1).map(lambda i: pb.PrimitiveValue(int_value=i)),
    st.booleans().map(lambda b: pb.PrimitiveValue(bool_value=b)),
)
raw_jobs = st.builds(
    pb.Job,
    id=texts,
    job_type=texts,
    payload=st.none() | st.builds(pb.Payload, data=st.binary(max_size=8), encoding=texts),
    priority=st.integers(0, U32),
    trace_context=st.none()
    | st.builds(pb.TraceContext, traceparent=st.one_of(texts, traceparents), tracestate=texts),
    enqueued_at=pb_instants,
    attempt=st.integers(0, U32),
    max_attempts=st.integers(0, U32),
    lease_expires_at=pb_instants,
    custom=st.dictionaries(texts, raw_custom_values, max_size=3),
    scheduled_at=pb_instants,
    queue=texts,
)


@settings(max_examples=300)
@given(st.lists(raw_jobs, max_size=5), st.none() | names)
def test_any_reserved_job_decodes_or_is_skipped_never_anything_else(
    raw: list[Any], worker_id: str | None
) -> None:
    reply = _reparse(pb.ReserveResponse(jobs=raw))
    decoded, errors = cv.jobs_from_pb(reply, worker_id=worker_id)
    assert len(decoded) + len(errors) == len(raw)
    assert all(isinstance(error, JobConversionError) for error in errors)
    for job in decoded:
        ctx = job.ctx
        assert ctx.id and ctx.job_type
        assert 0 <= ctx.priority <= 9 and ctx.attempt >= 1
        for instant in (ctx.enqueued_at, ctx.lease_expires_at, ctx.scheduled_at):
            assert instant is None or (instant.tzinfo is UTC and instant >= EPOCH)
        assert ctx.worker_id == worker_id
        assert job.payload is None or (job.payload.data and job.payload.encoding)
    # The survivors are a subsequence of the reply, in its order.
    remaining = iter(m.id for m in raw)
    assert all(any(job.ctx.id == raw_id for raw_id in remaining) for job in decoded)


# ------------------------------------------------------------------------------ dead letters


@given(dead_letter_records())
def test_dead_letter_record_round_trips_through_the_wire(record: DeadLetterRecord) -> None:
    again = cv.dead_letter_from_pb(_reparse(enc.dead_letter_to_pb(record)))
    want = dataclasses.replace(record, scheduled_at=on_the_wire(record.scheduled_at))
    assert same_custom(again.custom, want.custom)
    assert dataclasses.replace(again, custom={}) == dataclasses.replace(want, custom={})


@given(dead_letter_records())
def test_a_replay_is_a_fresh_job_with_the_same_content(record: DeadLetterRecord) -> None:
    replay = record.to_enqueue_request()
    assert (replay.queue, replay.job_type, replay.payload) == (
        record.queue,
        record.job_type,
        record.payload,
    )
    assert (replay.priority, replay.trace_context) == (record.priority, record.trace_context)
    assert same_custom(replay.custom, record.custom)
    assert replay.custom is not record.custom
    # 0 means "not recorded": let the queue's default apply rather than send 0.
    assert replay.max_attempts == (record.max_attempts or None)
    assert replay.idempotency_key is None
    assert replay.scheduled_at is None and replay.delay is None
    parsed = q.EnqueueRequest.FromString(bytes(cv.enqueue_request_to_pb(replay)))
    assert not parsed.HasField("idempotency_key")
    assert not parsed.HasField("scheduled_at")
    assert parsed.HasField("max_attempts") == (record.max_attempts > 0)
    assert parsed.HasField("priority") and parsed.priority == record.priority


# ------------------------------------------------------------------------------ others


@given(
    st.builds(
        ServerInfo,
        version=names,
        supported_protocol_versions=st.lists(names, max_size=3).map(tuple),
        server_time=post_epoch,
        restricts_encodings=st.booleans(),
        allowed_encodings=st.lists(names, max_size=3).map(tuple),
        max_payload_bytes=st.integers(0, U64),
        max_custom_entries=st.integers(0, U32),
        max_custom_total_bytes=st.integers(0, U64),
        max_custom_key_bytes=st.integers(0, U32),
        max_queue_name_bytes=st.integers(0, U32),
        max_job_type_bytes=st.integers(0, U32),
        max_idempotency_key_bytes=st.integers(0, U32),
        max_schedule_horizon=whole_ms,
        max_enqueue_batch=st.integers(0, U32),
        max_reserve_batch=st.integers(0, U32),
        max_reserve_queues=st.integers(0, U32),
        max_wait_timeout=whole_ms,
        max_lease_duration=whole_ms,
        strict_queues=st.booleans(),
        dead_letter_retention_enabled=st.booleans(),
    )
)
def test_server_info_round_trips_through_the_wire(info: ServerInfo) -> None:
    assert cv.server_info_from_pb(_reparse(enc.server_info_to_pb(info))) == info


@given(
    st.one_of(
        st.just(RetryDirective.default()),
        st.just(RetryDirective.dead_letter()),
        st.floats(0, 10**7).map(RetryDirective.after),
    )
)
def test_retry_directive_round_trips_with_whole_milliseconds(directive: RetryDirective) -> None:
    again = enc.retry_directive_from_pb(_reparse(cv.retry_directive_to_pb(directive)))
    assert again.kind == directive.kind
    if directive.delay is not None:
        assert again.delay == cv.seconds_to_duration(directive.delay).total_seconds()
        assert again.delay is not None and again.delay <= directive.delay + 1e-6
        assert math.isclose(again.delay, directive.delay, abs_tol=0.001 + 1e-6)


u32 = st.integers(0, U32)
u64 = st.integers(0, U64)
rejections: st.SearchStrategy[JobRejection] = st.one_of(
    st.builds(UnknownQueue, texts),
    st.builds(PayloadTooLarge, u64, u64),
    st.builds(EncodingNotAllowed, texts, st.lists(texts, max_size=3).map(tuple)),
    st.builds(JobTypeNotAllowed, texts, st.lists(texts, max_size=3).map(tuple)),
    st.builds(CustomEntriesTooMany, u32, u32),
    st.builds(CustomMapTooLarge, u64, u64),
    st.builds(CustomKeyTooLong, texts, u32, u64),
    st.builds(QueueNameTooLong, u32, u64),
    st.builds(JobTypeNameTooLong, u32, u64),
    st.builds(IdempotencyKeyTooLong, u32, u64),
    st.builds(ScheduledTooFar, whole_ms, post_epoch),
    st.builds(InvalidRequest, texts),
    st.builds(QueueFull, texts, u64),
    st.builds(QueueClosing, texts),
)


@given(rejections)
def test_every_rejection_round_trips_through_the_wire(rejection: JobRejection) -> None:
    assert cv.rejection_from_pb(_reparse(enc.rejection_to_pb(rejection))) == rejection
