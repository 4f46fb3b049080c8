"""Wire <-> public conversion, including byte-level parity with sepp-py's generated code.

sepp-py's ``queue_pb2`` (built by Google's protoc from the same proto) is an independent
implementation of the wire format: encoding with betterproto2 and decoding with it (and
the reverse) proves field numbers, types and presence agree.
"""

from __future__ import annotations

import importlib
import math
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from google.protobuf import duration_pb2, timestamp_pb2
from hypothesis import given
from hypothesis import strategies as st

from sepp_anyio._model._dead_letters import DeadLetterCause, DeadLetterRecord
from sepp_anyio._model._enqueue import EnqueueAck, EnqueueRequest
from sepp_anyio._model._errors import (
    BatchResultCountMismatchError,
    BatchValidationError,
    EmptyBatchError,
    JobConversionError,
    MalformedResponseError,
    MalformedServerInfoError,
)
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
    UnknownRejection,
)
from sepp_anyio._model._retries import RetryDirective
from sepp_anyio._model._server_info import ServerInfo
from sepp_anyio._model._trace import TraceContext
from sepp_anyio._proto.sepp import v1 as pb
from sepp_anyio._wire import _convert as cv
from tests.support import encoders as enc

# sepp-py's module builds its classes at import time from a descriptor, so mypy cannot see
# them; it is only ever used dynamically here.
q: Any = importlib.import_module("sepp.v1.queue_pb2")

T0 = datetime(2026, 1, 2, 3, 4, 5, 123000, tzinfo=UTC)
PRE_EPOCH = datetime(1969, 12, 31, 23, 59, 59, tzinfo=UTC)
TP = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
JOB_ID = "0b1c4a8e-7d2c-4f3e-9a61-3c5b2d1e0f9a"


def _wire(message: Any) -> Any:
    """Round-trip a betterproto2 message through bytes, as the transport would."""
    return type(message).parse(bytes(message))


def _ts(dt: datetime) -> Any:
    ts = timestamp_pb2.Timestamp()
    ts.FromDatetime(dt)
    return ts


def _dur(td: timedelta) -> Any:
    d = duration_pb2.Duration()
    d.FromTimedelta(td)
    return d


# ---------------------------------------------------------------------------- durations


@pytest.mark.parametrize(
    ("seconds", "millis"),
    [
        (0.0, 0),
        (0.0005, 0),
        (0.001, 1),
        (1.0009, 1000),
        (1.001, 1001),  # 1.000999... as a float: the noise must not cost a millisecond
        (2.5, 2500),
        (30, 30_000),
        (-1.0019, -1001),
    ],
)
def test_seconds_to_duration_truncates_to_ms(seconds: float, millis: int) -> None:
    assert cv.seconds_to_duration(seconds) == timedelta(milliseconds=millis)


@pytest.mark.parametrize("seconds", [math.inf, -math.inf, math.nan])
def test_seconds_to_duration_refuses_non_finite(seconds: float) -> None:
    with pytest.raises(ValueError, match="finite"):
        cv.seconds_to_duration(seconds)


@pytest.mark.parametrize(
    ("duration", "seconds"),
    [
        (None, 0.0),
        (timedelta(0), 0.0),
        (timedelta(microseconds=1999), 0.001),
        (timedelta(seconds=30, microseconds=500), 30.0),
        (timedelta(milliseconds=-1500), -1.5),
    ],
)
def test_duration_to_seconds_truncates_to_ms(duration: timedelta | None, seconds: float) -> None:
    assert cv.duration_to_seconds(duration) == seconds


@given(st.floats(min_value=0, max_value=10**9, allow_nan=False))
def test_duration_round_trip_is_ms_truncation(seconds: float) -> None:
    td = cv.seconds_to_duration(seconds)
    assert td % timedelta(milliseconds=1) == timedelta(0)
    # Never rounds up past the float (beyond sub-microsecond noise), loses < 1 ms.
    assert td.total_seconds() <= seconds + 1e-6
    assert td.total_seconds() > seconds - 0.001 - 1e-6
    assert cv.duration_to_seconds(td) == pytest.approx(td.total_seconds())


# ---------------------------------------------------------------------------- enqueue requests


def _full_request(**overrides: Any) -> EnqueueRequest:
    fields: dict[str, Any] = {
        "payload": Payload.from_json({"user": 42}),
        "idempotency_key": "signup-42",
        "priority": 7,
        "max_attempts": 4,
        "trace_context": TraceContext(TP, "vendor=x"),
        "custom": {"tenant": "acme", "n": -3, "ratio": 0.25, "vip": True, "empty": ""},
        "scheduled_at": T0,
    }
    fields.update(overrides)
    return EnqueueRequest("emails", "send_welcome", **fields)


def test_enqueue_request_wire_parity_with_sepp_py() -> None:
    message = cv.enqueue_request_to_pb(_full_request())
    parsed = q.EnqueueRequest.FromString(bytes(message))
    assert parsed.queue == "emails"
    assert parsed.job_type == "send_welcome"
    assert parsed.HasField("payload")
    assert parsed.payload.data == b'{"user":42}'
    assert parsed.payload.encoding == "application/json"
    assert parsed.idempotency_key == "signup-42"
    assert parsed.priority == 7
    assert parsed.max_attempts == 4
    assert parsed.trace_context.traceparent == TP
    assert parsed.trace_context.tracestate == "vendor=x"
    assert parsed.scheduled_at.ToDatetime(tzinfo=UTC) == T0
    custom = {
        k: (v.WhichOneof("value"), getattr(v, v.WhichOneof("value")))
        for k, v in parsed.custom.items()
    }
    assert custom == {
        "tenant": ("string_value", "acme"),
        "n": ("int_value", -3),
        "ratio": ("double_value", 0.25),
        "vip": ("bool_value", True),
        "empty": ("string_value", ""),
    }


def test_enqueue_request_minimal_leaves_optionals_unset() -> None:
    parsed = q.EnqueueRequest.FromString(bytes(cv.enqueue_request_to_pb(EnqueueRequest("q", "t"))))
    for name in ("payload", "idempotency_key", "priority", "max_attempts", "trace_context"):
        assert not parsed.HasField(name), name
    assert not parsed.HasField("scheduled_at")
    assert len(parsed.custom) == 0


def test_enqueue_request_zero_priority_is_sent_not_defaulted() -> None:
    # Priority 0 and "unset" (queue default) differ: presence must survive encoding.
    parsed = q.EnqueueRequest.FromString(
        bytes(cv.enqueue_request_to_pb(EnqueueRequest("q", "t", priority=0)))
    )
    assert parsed.HasField("priority")
    assert parsed.priority == 0


def test_enqueue_request_false_and_zero_custom_values_keep_their_branch() -> None:
    req = EnqueueRequest("q", "t", custom={"b": False, "i": 0, "d": 0.0})
    parsed = q.EnqueueRequest.FromString(bytes(cv.enqueue_request_to_pb(req)))
    assert {k: v.WhichOneof("value") for k, v in parsed.custom.items()} == {
        "b": "bool_value",
        "i": "int_value",
        "d": "double_value",
    }


def test_enqueue_request_delay_is_resolved_against_now() -> None:
    req = EnqueueRequest("q", "t", delay=1.5004)
    message = cv.enqueue_request_to_pb(req, now=T0)
    assert message.scheduled_at == T0 + timedelta(milliseconds=1500)


def test_enqueue_request_delay_defaults_to_current_time() -> None:
    before = datetime.now(UTC)
    message = cv.enqueue_request_to_pb(EnqueueRequest("q", "t", delay=60))
    assert before + timedelta(seconds=60) <= message.scheduled_at
    assert message.scheduled_at <= datetime.now(UTC) + timedelta(seconds=60)


def test_pre_epoch_scheduled_at_is_dropped() -> None:
    message = cv.enqueue_request_to_pb(EnqueueRequest("q", "t", scheduled_at=PRE_EPOCH))
    assert message.scheduled_at is None
    assert not q.EnqueueRequest.FromString(bytes(message)).HasField("scheduled_at")


def test_enqueue_batch_request() -> None:
    reqs = [EnqueueRequest("q", "a", delay=1), EnqueueRequest("q", "b", delay=1)]
    message = cv.enqueue_batch_request_to_pb(reqs, now=T0)
    parsed = q.EnqueueBatchRequest.FromString(bytes(message))
    assert [j.job_type for j in parsed.jobs] == ["a", "b"]
    # One clock reading for the whole batch.
    assert {j.scheduled_at.ToDatetime(tzinfo=UTC) for j in parsed.jobs} == {
        T0 + timedelta(seconds=1)
    }


def test_enqueue_batch_request_refuses_empty_and_wrong_types() -> None:
    with pytest.raises(EmptyBatchError):
        cv.enqueue_batch_request_to_pb([])
    with pytest.raises(TypeError, match=r"jobs\[1\] must be an EnqueueRequest, got dict"):
        cv.enqueue_batch_request_to_pb([EnqueueRequest("q", "t"), {"queue": "q"}])  # type: ignore[list-item]


# ---------------------------------------------------------------------------- rejections

REJECTIONS: list[tuple[str, Any, JobRejection, str]] = [
    (
        "unknown_queue",
        pb.UnknownQueue(queue="emails"),
        UnknownQueue("emails"),
        "queue 'emails' is not declared on the server (strict mode)",
    ),
    (
        "payload_too_large",
        pb.PayloadTooLarge(limit=1024, actual=4096),
        PayloadTooLarge(1024, 4096),
        "payload is 4096 bytes, over the queue's limit of 1024 bytes",
    ),
    (
        "encoding_not_allowed",
        pb.EncodingNotAllowed(encoding="text/csv", allowed=["application/json", "json"]),
        EncodingNotAllowed("text/csv", ("application/json", "json")),
        "payload encoding 'text/csv' is not allowed (allowed: 'application/json', 'json')",
    ),
    (
        "job_type_not_allowed",
        pb.JobTypeNotAllowed(job_type="rm_rf", allowed=["send"]),
        JobTypeNotAllowed("rm_rf", ("send",)),
        "job type 'rm_rf' is not accepted by the queue (allowed: 'send')",
    ),
    (
        "custom_entries_too_many",
        pb.CustomEntriesTooMany(limit=64, actual=65),
        CustomEntriesTooMany(64, 65),
        "custom map has 65 entries, over the limit of 64",
    ),
    (
        "custom_map_too_large",
        pb.CustomMapTooLarge(limit=16384, actual=20000),
        CustomMapTooLarge(16384, 20000),
        "custom map is 20000 bytes in total, over the limit of 16384 bytes",
    ),
    (
        "custom_key_too_long",
        pb.CustomKeyTooLong(key="kkk", limit=2, actual=3),
        CustomKeyTooLong("kkk", 2, 3),
        "custom key 'kkk' is 3 bytes, over the limit of 2 bytes",
    ),
    (
        "queue_name_too_long",
        pb.QueueNameTooLong(limit=255, actual=300),
        QueueNameTooLong(255, 300),
        "queue name is 300 bytes, over the limit of 255 bytes",
    ),
    (
        "job_type_name_too_long",
        pb.JobTypeNameTooLong(limit=255, actual=256),
        JobTypeNameTooLong(255, 256),
        "job type is 256 bytes, over the limit of 255 bytes",
    ),
    (
        "idempotency_key_too_long",
        pb.IdempotencyKeyTooLong(limit=128, actual=129),
        IdempotencyKeyTooLong(128, 129),
        "idempotency key is 129 bytes, over the limit of 128 bytes",
    ),
    (
        "scheduled_too_far",
        pb.ScheduledTooFar(horizon=timedelta(days=7), actual=T0),
        ScheduledTooFar(604800.0, T0),
        "scheduled_at 2026-01-02T03:04:05.123000+00:00 is beyond the queue's schedule "
        "horizon of 604800 seconds",
    ),
    (
        "invalid_request",
        pb.InvalidRequest(message="payload.data must not be empty"),
        InvalidRequest("payload.data must not be empty"),
        "invalid request: payload.data must not be empty",
    ),
    (
        "queue_full",
        pb.QueueFull(queue="emails", limit=10000),
        QueueFull("emails", 10000),
        "queue 'emails' is full (max depth 10000)",
    ),
    (
        "queue_closing",
        pb.QueueClosing(queue="emails"),
        QueueClosing("emails"),
        "queue 'emails' is being deleted and accepts no new jobs",
    ),
]


def test_every_rejection_branch_is_covered() -> None:
    names = [f.name for f in q.JobRejection.DESCRIPTOR.oneofs_by_name["reason"].fields]
    assert names == [branch for branch, *_ in REJECTIONS]


@pytest.mark.parametrize(
    ("branch", "detail", "expected", "text"), REJECTIONS, ids=[r[0] for r in REJECTIONS]
)
def test_rejection_branch_round_trip(
    branch: str, detail: Any, expected: JobRejection, text: str
) -> None:
    message = pb.JobRejection(**{branch: detail})
    rejection = cv.rejection_from_pb(_wire(message))
    assert rejection == expected
    assert type(rejection) is type(expected)
    assert str(rejection) == text
    # Back to the wire, read by sepp-py's independent decoder, and into ours again.
    encoded = bytes(enc.rejection_to_pb(rejection))
    assert q.JobRejection.FromString(encoded).WhichOneof("reason") == branch
    assert encoded == bytes(message)
    assert cv.rejection_from_pb(pb.JobRejection.parse(encoded)) == expected


def test_rejection_defaults_are_tolerated() -> None:
    # A detail message with every field at its default still selects its branch.
    assert cv.rejection_from_pb(_wire(pb.JobRejection(queue_full=pb.QueueFull()))) == QueueFull(
        "", 0
    )
    far = cv.rejection_from_pb(_wire(pb.JobRejection(scheduled_too_far=pb.ScheduledTooFar())))
    assert far == ScheduledTooFar(0.0, datetime(1970, 1, 1, tzinfo=UTC))


def test_empty_allow_list_display() -> None:
    assert str(EncodingNotAllowed("x", ())) == (
        "payload encoding 'x' is not allowed (the queue accepts none)"
    )
    assert "(allowed: none)" in str(JobTypeNotAllowed("x", ()))


def test_unknown_rejection_branch() -> None:
    # Field 15 of JobRejection: a reason added by a newer server, sent as an empty message.
    message = pb.JobRejection.parse(bytes([15 << 3 | 2, 2, 0x0A, 0x00]))
    rejection = cv.rejection_from_pb(message)
    assert rejection == UnknownRejection(15)
    assert "reason field 15" in str(rejection)


def test_missing_rejection_reason() -> None:
    assert cv.rejection_from_pb(pb.JobRejection()) == UnknownRejection()
    assert cv.rejection_from_pb(None) == UnknownRejection()
    assert str(UnknownRejection()) == "the server rejected the job without giving a reason"
    assert bytes(enc.rejection_to_pb(UnknownRejection(15))) == b""


# ---------------------------------------------------------------------------- batch results


def test_enqueue_batch_results() -> None:
    response = pb.EnqueueBatchResponse(
        results=[
            pb.JobResult(success=pb.EnqueueResponse(job_id=JOB_ID, deduplicated=True)),
            pb.JobResult(rejection=pb.JobRejection(queue_full=pb.QueueFull(queue="q", limit=1))),
            pb.JobResult(success=pb.EnqueueResponse(job_id="other")),
        ]
    )
    results = cv.enqueue_batch_results_from_pb(_wire(response), expected=3)
    assert results == [EnqueueAck(JOB_ID, True), QueueFull("q", 1), EnqueueAck("other", False)]


def test_enqueue_batch_results_count_mismatch() -> None:
    response = pb.EnqueueBatchResponse(
        results=[pb.JobResult(success=pb.EnqueueResponse(job_id="a"))]
    )
    with pytest.raises(BatchResultCountMismatchError) as info:
        cv.enqueue_batch_results_from_pb(response, expected=2)
    assert (info.value.expected, info.value.got) == (2, 1)


def test_enqueue_batch_result_without_outcome() -> None:
    response = pb.EnqueueBatchResponse(
        results=[pb.JobResult(success=pb.EnqueueResponse(job_id="a")), pb.JobResult()]
    )
    with pytest.raises(MalformedResponseError, match="result for job 1 has neither"):
        cv.enqueue_batch_results_from_pb(_wire(response), expected=2)


def test_enqueue_ack_without_job_id() -> None:
    with pytest.raises(MalformedResponseError, match="without a job_id"):
        cv.enqueue_ack_from_pb(pb.EnqueueResponse())


def test_enqueue_atomic_success() -> None:
    response = pb.EnqueueAtomicResponse(
        success=pb.EnqueueAtomicSuccess(
            responses=[pb.EnqueueResponse(job_id="a"), pb.EnqueueResponse(job_id="b")]
        )
    )
    assert cv.enqueue_atomic_from_pb(_wire(response), expected=2) == [
        EnqueueAck("a"),
        EnqueueAck("b"),
    ]
    with pytest.raises(BatchResultCountMismatchError):
        cv.enqueue_atomic_from_pb(_wire(response), expected=3)


def test_enqueue_atomic_rejection() -> None:
    response = pb.EnqueueAtomicResponse(
        rejection=pb.BatchValidationFailure(
            errors=[
                pb.JobValidationError(
                    index=1, rejection=pb.JobRejection(unknown_queue=pb.UnknownQueue(queue="x"))
                ),
                pb.JobValidationError(index=3),
            ]
        )
    )
    with pytest.raises(BatchValidationError) as info:
        cv.enqueue_atomic_from_pb(_wire(response), expected=4)
    errors = info.value.errors
    assert [(e.index, e.rejection) for e in errors] == [
        (1, UnknownQueue("x")),
        (3, UnknownRejection()),
    ]


def test_enqueue_atomic_without_outcome() -> None:
    with pytest.raises(MalformedResponseError, match="enqueue_atomic"):
        cv.enqueue_atomic_from_pb(pb.EnqueueAtomicResponse(), expected=1)


# ---------------------------------------------------------------------------- jobs


def _pb_job(**overrides: Any) -> Any:
    fields: dict[str, Any] = {
        "id": JOB_ID,
        "job_type": "send_welcome",
        "payload": pb.Payload(data=b'{"user":1}', encoding="application/json"),
        "priority": 5,
        "trace_context": pb.TraceContext(traceparent=TP),
        "enqueued_at": T0,
        "attempt": 2,
        "max_attempts": 3,
        "lease_expires_at": T0 + timedelta(seconds=30),
        "custom": {"tenant": pb.PrimitiveValue(string_value="acme")},
        "scheduled_at": T0 - timedelta(minutes=1),
        "queue": "emails",
    }
    fields.update(overrides)
    return _wire(pb.Job(**fields))


def test_job_from_pb() -> None:
    job = cv.job_from_pb(_pb_job(), worker_id="w-1")
    assert job.payload == Payload(b'{"user":1}', "application/json")
    ctx = job.ctx
    assert ctx.id == JOB_ID
    assert ctx.queue == "emails"
    assert ctx.job_type == "send_welcome"
    assert ctx.priority == 5
    assert ctx.attempt == 2
    assert ctx.max_attempts == 3
    assert ctx.enqueued_at == T0
    assert ctx.scheduled_at == T0 - timedelta(minutes=1)
    assert ctx.lease_expires_at == T0 + timedelta(seconds=30)
    assert ctx.custom == {"tenant": "acme"}
    assert ctx.trace_context == TraceContext(TP)
    assert ctx.worker_id == "w-1"
    assert ctx._lease is None


def test_job_wire_parity_from_sepp_py() -> None:
    message = q.Job(
        id=JOB_ID,
        job_type="t",
        payload=q.Payload(data=b"\x00\x01", encoding="application/octet-stream"),
        priority=9,
        trace_context=q.TraceContext(traceparent=TP, tracestate="a=b"),
        enqueued_at=_ts(T0),
        attempt=1,
        max_attempts=10,
        lease_expires_at=_ts(T0 + timedelta(minutes=5)),
        scheduled_at=_ts(T0 + timedelta(seconds=1)),
        queue="q",
    )
    message.custom["s"].string_value = "v"
    message.custom["i"].int_value = -(2**63)
    message.custom["d"].double_value = 1.5
    message.custom["b"].bool_value = False
    job = cv.job_from_pb(pb.Job.parse(message.SerializeToString()), worker_id=None)
    assert job.payload == Payload(b"\x00\x01", "application/octet-stream")
    ctx = job.ctx
    assert (ctx.id, ctx.job_type, ctx.queue, ctx.priority) == (JOB_ID, "t", "q", 9)
    assert (ctx.attempt, ctx.max_attempts) == (1, 10)
    assert ctx.trace_context == TraceContext(TP, "a=b")
    assert ctx.enqueued_at == T0
    assert ctx.lease_expires_at == T0 + timedelta(minutes=5)
    assert ctx.scheduled_at == T0 + timedelta(seconds=1)
    assert ctx.custom == {"s": "v", "i": -(2**63), "d": 1.5, "b": False}
    assert ctx.custom["b"] is False
    assert ctx.worker_id is None


def test_job_to_pb_round_trip() -> None:
    job = cv.job_from_pb(_pb_job(), worker_id="w")
    again = cv.job_from_pb(_wire(enc.job_to_pb(job)), worker_id="w")
    assert again == job


BAD_JOBS: list[tuple[dict[str, Any], str]] = [
    ({"id": ""}, "has no id"),
    ({"job_type": ""}, "job_type is empty"),
    ({"priority": 10}, r"priority 10 is out of range \(0-9\)"),
    ({"attempt": 0}, "attempt 0 is invalid"),
    ({"enqueued_at": None}, "enqueued_at is missing"),
    ({"enqueued_at": PRE_EPOCH}, "enqueued_at is before 1970"),
    ({"lease_expires_at": None}, "lease_expires_at is missing"),
    ({"custom": {"k": pb.PrimitiveValue()}}, r"custom\['k'\] has no value set"),
    ({"payload": pb.Payload(data=b"x", encoding="")}, "has data but no encoding"),
]


@pytest.mark.parametrize(("overrides", "match"), BAD_JOBS)
def test_job_from_pb_refuses_bad_required_fields(overrides: dict[str, Any], match: str) -> None:
    with pytest.raises(JobConversionError, match=match) as info:
        cv.job_from_pb(_pb_job(**overrides), worker_id=None)
    if overrides.get("id") != "":
        assert info.value.job_id == JOB_ID


@pytest.mark.parametrize(
    "overrides",
    [
        {"trace_context": pb.TraceContext(traceparent="garbage")},
        {"trace_context": pb.TraceContext(traceparent="")},
        {"trace_context": None},
    ],
)
def test_bad_trace_context_becomes_none(overrides: dict[str, Any]) -> None:
    assert cv.job_from_pb(_pb_job(**overrides), worker_id=None).ctx.trace_context is None


@pytest.mark.parametrize("scheduled_at", [PRE_EPOCH, None])
def test_bad_or_missing_scheduled_at_becomes_none(scheduled_at: datetime | None) -> None:
    job = cv.job_from_pb(_pb_job(scheduled_at=scheduled_at), worker_id=None)
    assert job.ctx.scheduled_at is None


@pytest.mark.parametrize("payload", [None, pb.Payload(), pb.Payload(encoding="application/json")])
def test_empty_payload_is_no_payload(payload: Any) -> None:
    assert cv.job_from_pb(_pb_job(payload=payload), worker_id=None).payload is None


def test_empty_worker_id_is_none() -> None:
    assert cv.job_from_pb(_pb_job(), worker_id="").ctx.worker_id is None


def test_jobs_from_pb_skips_bad_jobs_and_keeps_the_rest() -> None:
    response = pb.ReserveResponse(
        jobs=[_pb_job(), _pb_job(id="bad", priority=42), _pb_job(id="third")]
    )
    jobs, errors = cv.jobs_from_pb(_wire(response), worker_id="w")
    assert [j.ctx.id for j in jobs] == [JOB_ID, "third"]
    assert len(errors) == 1
    assert errors[0].job_id == "bad"
    assert "priority 42" in str(errors[0])


# ---------------------------------------------------------------------- reserve / lease requests


def _ctx(worker_id: str | None = "w-1") -> JobCtx:
    return cv.job_from_pb(_pb_job(), worker_id=worker_id).ctx


def test_reserve_request() -> None:
    message = cv.reserve_request_to_pb(
        ["a", "b"], lease=30.0, wait=5.0005, max_jobs=8, worker_id="w"
    )
    parsed = q.ReserveRequest.FromString(bytes(message))
    assert list(parsed.queues) == ["a", "b"]
    assert parsed.lease_duration.ToTimedelta() == timedelta(seconds=30)
    assert parsed.wait_timeout.ToTimedelta() == timedelta(seconds=5)
    assert parsed.max_jobs == 8
    assert parsed.worker_id == "w"


def test_reserve_request_omits_unset_optionals() -> None:
    message = cv.reserve_request_to_pb(["a"], lease=1.0, wait=0.0, worker_id="")
    parsed = q.ReserveRequest.FromString(bytes(message))
    assert not parsed.HasField("max_jobs")
    assert not parsed.HasField("worker_id")
    # wait=0 is still sent (present, zero): "no wait" is explicit.
    assert parsed.HasField("wait_timeout")


def test_ack_request() -> None:
    parsed = q.AckRequest.FromString(bytes(cv.ack_request_to_pb(_ctx())))
    assert (parsed.job_id, parsed.attempt, parsed.worker_id) == (JOB_ID, 2, "w-1")
    no_worker = q.AckRequest.FromString(bytes(cv.ack_request_to_pb(_ctx(None))))
    assert not no_worker.HasField("worker_id")


@pytest.mark.parametrize(
    ("directive", "branch"),
    [
        (RetryDirective.default(), "default"),
        (RetryDirective.after(2.0), "delay"),
        (RetryDirective.dead_letter(), "dead_letter"),
    ],
)
def test_nack_request(directive: RetryDirective, branch: str) -> None:
    message = cv.nack_request_to_pb(_ctx(), directive, reason="boom")
    parsed = q.NackRequest.FromString(bytes(message))
    assert (parsed.job_id, parsed.attempt, parsed.worker_id) == (JOB_ID, 2, "w-1")
    assert parsed.reason == "boom"
    assert parsed.retry.WhichOneof("strategy") == branch
    assert enc.retry_directive_from_pb(_wire(message).retry) == directive


@pytest.mark.parametrize("reason", [None, ""])
def test_nack_empty_reason_is_left_off_the_wire(reason: str | None) -> None:
    message = cv.nack_request_to_pb(_ctx(None), RetryDirective.default(), reason=reason)
    parsed = q.NackRequest.FromString(bytes(message))
    assert not parsed.HasField("reason")
    assert not parsed.HasField("worker_id")
    assert parsed.HasField("retry")


def test_retry_directive_delay_is_truncated_to_ms() -> None:
    message = cv.retry_directive_to_pb(RetryDirective.after(1.0009))
    assert q.NackRetry.FromString(bytes(message)).delay.ToMilliseconds() == 1000
    zero = q.NackRetry.FromString(bytes(cv.retry_directive_to_pb(RetryDirective.after(0))))
    assert zero.WhichOneof("strategy") == "delay"


def test_retry_directive_from_pb() -> None:
    assert enc.retry_directive_from_pb(None) == RetryDirective.default()
    with pytest.raises(ValueError, match="retry strategy is required"):
        enc.retry_directive_from_pb(pb.NackRetry())
    with pytest.raises(ValueError, match="delay must be >= 0"):
        enc.retry_directive_from_pb(pb.NackRetry(delay=timedelta(seconds=-1)))


def test_nack_response() -> None:
    assert cv.nack_dead_lettered_from_pb(_wire(pb.NackResponse(job_id="a", dead_lettered=True)))
    assert not cv.nack_dead_lettered_from_pb(_wire(pb.NackResponse(job_id="a")))


def test_extend_request_and_response() -> None:
    parsed = q.ExtendRequest.FromString(bytes(cv.extend_request_to_pb(_ctx(), 45.5)))
    assert (parsed.job_id, parsed.attempt, parsed.worker_id) == (JOB_ID, 2, "w-1")
    assert parsed.lease_duration.ToMilliseconds() == 45500
    reply = q.ExtendResponse(job_id=JOB_ID, lease_expires_at=_ts(T0))
    expiry = cv.extend_expiry_from_pb(pb.ExtendResponse.parse(reply.SerializeToString()))
    assert expiry == T0


@pytest.mark.parametrize("expiry", [None, PRE_EPOCH])
def test_extend_response_without_valid_expiry(expiry: datetime | None) -> None:
    with pytest.raises(MalformedResponseError, match="no valid lease_expires_at"):
        cv.extend_expiry_from_pb(_wire(pb.ExtendResponse(job_id="a", lease_expires_at=expiry)))


# ---------------------------------------------------------------------------- dead letters


def _q_record(**overrides: Any) -> Any:
    job = q.Job(
        id=JOB_ID,
        job_type="send_welcome",
        payload=q.Payload(data=b"hi", encoding="text/plain"),
        priority=4,
        trace_context=q.TraceContext(traceparent=TP),
        enqueued_at=_ts(T0),
        attempt=3,
        max_attempts=3,
        scheduled_at=_ts(T0 + timedelta(seconds=5)),
        queue="emails",
    )
    job.custom["n"].int_value = 7
    fields: dict[str, Any] = {
        "job": job,
        "cause": q.DEAD_LETTER_CAUSE_ATTEMPTS_EXHAUSTED,
        "failed_at": _ts(T0 + timedelta(hours=1)),
        "final_attempt": 3,
        "last_reason": "boom",
    }
    fields.update(overrides)
    return q.DeadLetterRecord(**{k: v for k, v in fields.items() if v is not None})


def _ours(message: Any) -> Any:
    return pb.DeadLetterRecord.parse(message.SerializeToString())


def test_dead_letter_wire_parity_from_sepp_py() -> None:
    record = cv.dead_letter_from_pb(_ours(_q_record()))
    assert record == DeadLetterRecord(
        queue="emails",
        job_id=JOB_ID,
        job_type="send_welcome",
        payload=Payload(b"hi", "text/plain"),
        priority=4,
        max_attempts=3,
        custom={"n": 7},
        trace_context=TraceContext(TP),
        enqueued_at=T0,
        scheduled_at=T0 + timedelta(seconds=5),
        cause=DeadLetterCause.ATTEMPTS_EXHAUSTED,
        failed_at=T0 + timedelta(hours=1),
        final_attempt=3,
        last_reason="boom",
    )


@pytest.mark.parametrize(
    ("wire", "cause"),
    [
        (0, DeadLetterCause.UNSPECIFIED),
        (1, DeadLetterCause.ATTEMPTS_EXHAUSTED),
        (2, DeadLetterCause.REJECTED),
        (3, DeadLetterCause.LEASE_EXPIRED),
        (4, DeadLetterCause.ADMIN),
        (9, DeadLetterCause.UNSPECIFIED),
    ],
)
def test_dead_letter_causes(wire: int, cause: DeadLetterCause) -> None:
    record = cv.dead_letter_from_pb(_ours(_q_record(cause=wire)))
    assert record.cause is cause


def test_dead_letter_without_last_reason() -> None:
    message = _q_record()
    message.ClearField("last_reason")
    assert cv.dead_letter_from_pb(_ours(message)).last_reason is None


@pytest.mark.parametrize(
    ("mutate", "match"),
    [
        (lambda m: m.ClearField("job"), "has no job"),
        (lambda m: m.ClearField("failed_at"), "failed_at is missing"),
        (lambda m: setattr(m.job, "queue", ""), "has no queue"),
        (lambda m: setattr(m.job, "id", ""), "has no id"),
        (lambda m: m.job.ClearField("enqueued_at"), "enqueued_at is missing"),
        (lambda m: setattr(m.job, "priority", 11), "priority 11"),
    ],
)
def test_dead_letter_refuses_bad_records(mutate: Any, match: str) -> None:
    message = _q_record()
    mutate(message)
    with pytest.raises(JobConversionError, match=match):
        cv.dead_letter_from_pb(_ours(message))


def test_dead_letter_bad_optionals_become_none() -> None:
    message = _q_record()
    message.job.trace_context.traceparent = "nope"
    message.job.scheduled_at.CopyFrom(_ts(PRE_EPOCH))
    record = cv.dead_letter_from_pb(_ours(message))
    assert record.trace_context is None
    assert record.scheduled_at is None


def test_dead_letters_from_pb_skips_bad_records() -> None:
    bad = _q_record()
    bad.job.job_type = ""
    response = q.DrainDeadLettersResponse(records=[_q_record(), bad, _q_record()])
    records, errors = cv.dead_letters_from_pb(
        pb.DrainDeadLettersResponse.parse(response.SerializeToString())
    )
    assert len(records) == 2
    assert len(errors) == 1
    assert "job_type is empty" in str(errors[0])


def test_dead_letter_to_pb_round_trip() -> None:
    record = cv.dead_letter_from_pb(_ours(_q_record()))
    encoded = bytes(enc.dead_letter_to_pb(record))
    parsed = q.DeadLetterRecord.FromString(encoded)
    assert parsed.cause == q.DEAD_LETTER_CAUSE_ATTEMPTS_EXHAUSTED
    assert parsed.job.id == JOB_ID
    assert cv.dead_letter_from_pb(pb.DeadLetterRecord.parse(encoded)) == record


def test_drain_request() -> None:
    parsed = q.DrainDeadLettersRequest.FromString(bytes(cv.drain_request_to_pb(None, 10)))
    assert not parsed.HasField("queue")
    assert parsed.max == 10
    parsed = q.DrainDeadLettersRequest.FromString(bytes(cv.drain_request_to_pb("emails", 1)))
    assert parsed.queue == "emails"


def test_replay_of_decoded_record_encodes_as_fresh_job() -> None:
    record = cv.dead_letter_from_pb(_ours(_q_record()))
    parsed = q.EnqueueRequest.FromString(
        bytes(cv.enqueue_request_to_pb(record.to_enqueue_request()))
    )
    assert parsed.queue == "emails"
    assert not parsed.HasField("idempotency_key")
    assert not parsed.HasField("scheduled_at")
    assert parsed.max_attempts == 3
    assert parsed.custom["n"].int_value == 7


# ---------------------------------------------------------------------------- server info


def _q_info(**overrides: Any) -> Any:
    fields: dict[str, Any] = {
        "server_version": "0.4.2",
        "supported_protocol_versions": ["v1"],
        "server_time": _ts(T0),
        "restricts_encodings": True,
        "allowed_encodings": ["application/json", "json"],
        "max_payload_bytes": 1 << 20,
        "max_custom_entries": 64,
        "max_custom_total_bytes": 16384,
        "max_custom_key_bytes": 256,
        "max_queue_name_bytes": 255,
        "max_job_type_bytes": 255,
        "max_idempotency_key_bytes": 128,
        "max_schedule_horizon": _dur(timedelta(days=30)),
        "max_enqueue_batch": 1000,
        "max_reserve_batch": 256,
        "max_reserve_queues": 16,
        "max_wait_timeout": _dur(timedelta(minutes=5)),
        "max_lease_duration": _dur(timedelta(milliseconds=300_500)),
        "strict_queues": True,
        "dead_letter_retention_enabled": True,
    }
    fields.update(overrides)
    return q.GetServerInfoResponse(**{k: v for k, v in fields.items() if v is not None})


def test_server_info_wire_parity_from_sepp_py() -> None:
    message = pb.GetServerInfoResponse.parse(_q_info().SerializeToString())
    info = cv.server_info_from_pb(message)
    assert info == ServerInfo(
        version="0.4.2",
        supported_protocol_versions=("v1",),
        server_time=T0,
        restricts_encodings=True,
        allowed_encodings=("application/json", "json"),
        max_payload_bytes=1 << 20,
        max_custom_entries=64,
        max_custom_total_bytes=16384,
        max_custom_key_bytes=256,
        max_queue_name_bytes=255,
        max_job_type_bytes=255,
        max_idempotency_key_bytes=128,
        max_schedule_horizon=30 * 86400.0,
        max_enqueue_batch=1000,
        max_reserve_batch=256,
        max_reserve_queues=16,
        max_wait_timeout=300.0,
        max_lease_duration=300.5,
        strict_queues=True,
        dead_letter_retention_enabled=True,
    )
    assert cv.server_info_from_pb(_wire(enc.server_info_to_pb(info))) == info
    assert q.GetServerInfoResponse.FromString(bytes(enc.server_info_to_pb(info))) == _q_info()


def test_server_info_missing_durations_are_zero() -> None:
    message = _q_info()
    message.ClearField("max_wait_timeout")
    info = cv.server_info_from_pb(pb.GetServerInfoResponse.parse(message.SerializeToString()))
    assert info.max_wait_timeout == 0.0


@pytest.mark.parametrize(
    ("overrides", "match"),
    [
        ({"server_version": ""}, "server_version is empty"),
        ({"server_time": None}, "server_time is missing"),
        ({"server_time": _ts(PRE_EPOCH)}, "server_time is before 1970"),
    ],
)
def test_server_info_malformed(overrides: dict[str, Any], match: str) -> None:
    message = pb.GetServerInfoResponse.parse(_q_info(**overrides).SerializeToString())
    with pytest.raises(MalformedServerInfoError, match=match):
        cv.server_info_from_pb(message)


# ---------------------------------------------------------------------------- misc


def test_public_job_type_is_plain() -> None:
    job = cv.job_from_pb(_pb_job(), worker_id=None)
    assert isinstance(job, Job)
    assert isinstance(job.ctx.enqueued_at, datetime)
    assert job.ctx.enqueued_at.tzinfo is not None


def test_job_from_pb_attaches_a_lease() -> None:
    made: list[JobCtx] = []

    class Lease:
        def __init__(self, ctx: JobCtx) -> None:
            made.append(ctx)
            self.known_expiry = ctx.lease_expires_at

        async def extend(self, ctx: JobCtx, seconds: float) -> datetime:
            return self.known_expiry + timedelta(seconds=seconds)

    jobs, errors = cv.jobs_from_pb(
        _wire(pb.ReserveResponse(jobs=[_pb_job(), _pb_job(id="x")])),
        worker_id="w",
        make_lease=Lease,
    )
    assert errors == []
    assert [ctx.id for ctx in made] == [JOB_ID, "x"]
    for job in jobs:
        assert isinstance(job.ctx._lease, Lease)
        assert job.ctx._lease.known_expiry == T0 + timedelta(seconds=30)
