"""Public data types: validation, helpers and invariants."""

from __future__ import annotations

import dataclasses
import json
import math
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import anyio
import pytest
from hypothesis import given
from hypothesis import strategies as st

from sepp_anyio._model._codecs import PayloadCodec, decode_payload, encode_payload, register_codec
from sepp_anyio._model._dead_letters import DeadLetterCause, DeadLetterRecord
from sepp_anyio._model._enqueue import EnqueueAck, EnqueueRequest
from sepp_anyio._model._job import Job, JobCtx
from sepp_anyio._model._payload import Payload
from sepp_anyio._model._rejections import (
    EncodingNotAllowed,
    JobRejection,
    QueueClosing,
    QueueFull,
    UnknownQueue,
    UnknownRejection,
)
from sepp_anyio._model._retries import RetryDirective, RetryPolicy
from sepp_anyio._model._trace import TraceContext, TraceContextError

T0 = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
TP = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

# ---------------------------------------------------------------------------- Payload


def test_payload_basic() -> None:
    p = Payload(b"abc", "application/octet-stream")
    assert p.data == b"abc"
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.data = b"x"  # type: ignore[misc]


def test_payload_copies_bytes_like() -> None:
    p = Payload(bytearray(b"ab"), "x")  # type: ignore[arg-type]
    assert type(p.data) is bytes
    assert Payload(memoryview(b"cd"), "x").data == b"cd"  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("data", "encoding", "exc", "match"),
    [
        (b"", "application/json", ValueError, r"Payload\.data must not be empty.*payload=None"),
        (b"x", "", ValueError, r"Payload\.encoding must not be empty"),
        ("text", "text/plain", TypeError, r"Payload\.data must be bytes, got str"),
        (b"x", None, TypeError, r"Payload\.encoding must be a str"),
        (b"x", "\ud800", ValueError, r"Payload\.encoding is not encodable as UTF-8"),
    ],
)
def test_payload_validation(data: Any, encoding: Any, exc: type[Exception], match: str) -> None:
    with pytest.raises(exc, match=match):
        Payload(data, encoding)


def test_payload_from_json_is_compact_utf8() -> None:
    p = Payload.from_json({"user": 42, "name": "Jürgen", "tags": [1, 2]})
    assert p.encoding == "application/json"
    assert p.data == '{"user":42,"name":"Jürgen","tags":[1,2]}'.encode()
    assert p.json() == {"user": 42, "name": "Jürgen", "tags": [1, 2]}


def test_payload_from_json_custom_label() -> None:
    p = Payload.from_json([1], encoding="json")
    assert p.encoding == "json"
    assert p.json() == [1]


def test_payload_from_json_refuses_nan_and_unserialisable() -> None:
    with pytest.raises(ValueError, match="JSON compliant"):
        Payload.from_json({"x": math.nan})
    with pytest.raises(TypeError):
        Payload.from_json({"x": object()})


@pytest.mark.parametrize(
    "encoding",
    [
        "application/json",
        "Application/JSON; charset=utf-8",
        "application/problem+json",
        "text/json",
        "json",
    ],
)
def test_payload_json_accepts_json_media_types(encoding: str) -> None:
    assert Payload(b'{"a":1}', encoding).json() == {"a": 1}


def test_payload_json_refuses_other_encodings() -> None:
    with pytest.raises(ValueError, match=r"payload encoding is 'text/plain', not JSON"):
        Payload(b"{}", "text/plain").json()


def test_payload_json_invalid_bytes() -> None:
    with pytest.raises(json.JSONDecodeError, match="Expecting property name"):
        Payload(b"{nope", "application/json").json()


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda children: (
        st.lists(children, max_size=5) | st.dictionaries(st.text(max_size=8), children, max_size=5)
    ),
    max_leaves=20,
)


@given(json_values)
def test_payload_json_round_trip(value: Any) -> None:
    payload = Payload.from_json(value)
    assert payload.json() == value
    # Compact: json.dumps with default separators is never shorter.
    assert len(payload.data) <= len(json.dumps(value, ensure_ascii=False).encode())


def test_payload_text_round_trip() -> None:
    p = Payload.from_text("grüße")
    assert p.encoding == "text/plain; charset=utf-8"
    assert p.data == "grüße".encode()
    assert p.text() == "grüße"


def test_payload_text_honours_charset() -> None:
    p = Payload.from_text("grüße", "text/plain; charset=latin-1")
    assert p.data == "grüße".encode("latin-1")
    assert p.text() == "grüße"


def test_payload_from_text_empty_is_refused() -> None:
    with pytest.raises(ValueError, match="must not be empty"):
        Payload.from_text("")


# ---------------------------------------------------------------------------- codecs


def test_codecs_builtin() -> None:
    p = encode_payload({"a": [1, 2]})
    assert p == Payload(b'{"a":[1,2]}', "application/json")
    assert decode_payload(p) == {"a": [1, 2]}
    assert decode_payload(Payload(b"[1]", "application/vnd.api+json")) == [1]
    t = encode_payload("hé", "text/plain; charset=latin-1")
    assert t.data == "hé".encode("latin-1")
    assert decode_payload(t) == "hé"
    b = encode_payload(b"\x00\x01", "application/octet-stream")
    assert decode_payload(b) == b"\x00\x01"


def test_codecs_unknown_encoding() -> None:
    with pytest.raises(ValueError, match=r"no payload codec for encoding 'application/x-nope'"):
        encode_payload(1, "application/x-nope")
    with pytest.raises(ValueError, match="registered: "):
        decode_payload(Payload(b"x", "application/x-nope"))


def test_codecs_type_errors() -> None:
    with pytest.raises(TypeError, match="encodes str"):
        encode_payload(1, "text/plain")
    with pytest.raises(TypeError, match="encodes bytes"):
        encode_payload("x", "application/octet-stream")


def test_register_codec() -> None:
    codec = PayloadCodec(
        "application/x-reversed",
        lambda obj, enc: str(obj)[::-1].encode(),
        lambda data, enc: data.decode()[::-1],
    )
    register_codec(codec)
    try:
        p = encode_payload("abc", "application/x-reversed")
        assert p.data == b"cba"
        assert decode_payload(p) == "abc"
        with pytest.raises(ValueError, match="already registered"):
            register_codec(codec)
        register_codec(codec, replace=True)
    finally:
        from sepp_anyio._model import _codecs

        del _codecs._REGISTRY["application/x-reversed"]


def test_register_codec_needs_a_media_type() -> None:
    with pytest.raises(ValueError, match="media_type must not be empty"):
        register_codec(PayloadCodec(" ", lambda o, e: b"", lambda d, e: None))


# ---------------------------------------------------------------------------- TraceContext


def test_trace_context_properties() -> None:
    tc = TraceContext(TP, "vendor=1")
    assert tc.trace_id == "4bf92f3577b34da6a3ce929d0e0e4736"
    assert tc.span_id == "00f067aa0ba902b7"
    assert tc.sampled is True
    assert tc.tracestate == "vendor=1"
    assert TraceContext(TP[:-2] + "00").sampled is False


def test_trace_context_accepts_upper_case_hex() -> None:
    tc = TraceContext(TP.upper())
    assert tc.trace_id == "4bf92f3577b34da6a3ce929d0e0e4736"


@pytest.mark.parametrize(
    ("traceparent", "match"),
    [
        ("", "4 '-'-separated fields"),
        ("00-abc", "4 '-'-separated fields"),
        (TP + "-extra", "4 '-'-separated fields"),
        ("0-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "version must be 2 hex"),
        ("zz-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "version must be 2 hex"),
        ("ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "version 'ff'"),
        ("00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01", "trace-id must be 32"),
        ("00-4bf92f3577b34da6a3ce929d0e0e47g6-00f067aa0ba902b7-01", "trace-id must be 32"),
        ("00-" + "0" * 32 + "-00f067aa0ba902b7-01", "trace-id must not be all zeros"),
        ("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b-01", "span-id must be 16"),
        ("00-4bf92f3577b34da6a3ce929d0e0e4736-" + "0" * 16 + "-01", "span-id must not be all"),
        ("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-1", "flags must be 2 hex"),
        ("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0x", "flags must be 2 hex"),
    ],
)
def test_trace_context_invalid(traceparent: str, match: str) -> None:
    with pytest.raises(TraceContextError, match=match):
        TraceContext(traceparent)


def test_trace_context_error_is_a_value_error() -> None:
    assert issubclass(TraceContextError, ValueError)


def test_trace_context_type_errors() -> None:
    with pytest.raises(TypeError, match="traceparent must be a str"):
        TraceContext(None)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="tracestate must be a str or None"):
        TraceContext(TP, 5)  # type: ignore[arg-type]


def _hex(n: int) -> st.SearchStrategy[str]:
    return st.text("0123456789abcdef", min_size=n, max_size=n)


@given(
    version=_hex(2).filter(lambda v: v != "ff"),
    trace_id=_hex(32).filter(lambda t: t.strip("0") != ""),
    span_id=_hex(16).filter(lambda s: s.strip("0") != ""),
    flags=_hex(2),
)
def test_trace_context_accepts_every_valid_traceparent(
    version: str, trace_id: str, span_id: str, flags: str
) -> None:
    tc = TraceContext(f"{version}-{trace_id}-{span_id}-{flags}")
    assert tc.trace_id == trace_id
    assert tc.span_id == span_id
    assert tc.sampled == bool(int(flags, 16) & 1)


@given(st.text(max_size=80))
def test_trace_context_rejects_or_accepts_consistently(text: str) -> None:
    parts = text.split("-")
    hexdigits = set("0123456789abcdefABCDEF")
    valid = (
        len(parts) == 4
        and [len(p) for p in parts] == [2, 32, 16, 2]
        and all(set(p) <= hexdigits for p in parts)
        and parts[0].lower() != "ff"
        and parts[1].strip("0") != ""
        and parts[2].strip("0") != ""
    )
    if valid:
        TraceContext(text)
    else:
        with pytest.raises(TraceContextError):
            TraceContext(text)


@given(st.integers(min_value=0, max_value=54), st.characters(exclude_characters="-"))
def test_trace_context_rejects_any_single_corruption(position: int, char: str) -> None:
    corrupted = TP[:position] + char + TP[position + 1 :]
    if corrupted == TP or (char.lower() in "0123456789abcdef" and TP[position] != "-"):
        return  # still valid (or unchanged); covered by the acceptance property
    with pytest.raises(TraceContextError):
        TraceContext(corrupted)


# ---------------------------------------------------------------------------- EnqueueRequest


def test_enqueue_request_minimal() -> None:
    req = EnqueueRequest("emails", "send_welcome")
    assert req.payload is None
    assert req.idempotency_key is None
    assert req.priority is None
    assert req.max_attempts is None
    assert req.custom == {}
    assert req.scheduled_at is None
    assert req.delay is None
    assert req.has_idempotency_key is False


def test_enqueue_request_full() -> None:
    req = EnqueueRequest(
        "emails",
        "send_welcome",
        payload=Payload.from_json({"user": 42}),
        idempotency_key="k1",
        priority=9,
        max_attempts=5,
        trace_context=TraceContext(TP),
        custom={"tenant": "acme", "n": 3, "ratio": 0.5, "vip": True},
        scheduled_at=datetime(2030, 1, 1, 12, tzinfo=timezone(timedelta(hours=2))),
    )
    assert req.has_idempotency_key
    assert req.scheduled_at == datetime(2030, 1, 1, 10, tzinfo=UTC)
    assert req.scheduled_at is not None
    assert req.scheduled_at.tzinfo is UTC
    assert req.custom["vip"] is True


def test_enqueue_request_positional_only_for_queue_and_type() -> None:
    with pytest.raises(TypeError):
        EnqueueRequest("q", "t", None)  # type: ignore[call-arg]


def test_enqueue_request_copies_custom() -> None:
    custom: dict[str, str | int | float | bool] = {"a": 1}
    req = EnqueueRequest("q", "t", custom=custom)
    custom["b"] = 2
    assert req.custom == {"a": 1}


def test_enqueue_request_keeps_bool_custom_values_bool() -> None:
    req = EnqueueRequest("q", "t", custom={"flag": False, "n": 0})
    assert req.custom["flag"] is False
    assert type(req.custom["n"]) is int


BAD_REQUESTS: list[tuple[dict[str, Any], type[Exception], str]] = [
    ({"queue": ""}, ValueError, "queue must not be empty"),
    ({"queue": 3}, TypeError, "queue must be a str, got int"),
    ({"queue": "."}, ValueError, "queue must not be '.'"),
    ({"queue": ".."}, ValueError, "queue must not be '..'"),
    ({"queue": "a/b"}, ValueError, "queue must not contain '/'"),
    ({"queue": "a\nb"}, ValueError, "queue must not contain control characters"),
    ({"queue": "a\x7fb"}, ValueError, "queue must not contain control characters"),
    ({"queue": "\udcff"}, ValueError, "queue is not encodable as UTF-8"),
    ({"job_type": ""}, ValueError, "job_type must not be empty"),
    ({"job_type": None}, TypeError, "job_type must be a str"),
    ({"payload": b"raw"}, TypeError, "payload must be a Payload or None, got bytes"),
    ({"idempotency_key": ""}, ValueError, "idempotency_key must not be empty"),
    ({"idempotency_key": 7}, TypeError, "idempotency_key must be a str"),
    ({"priority": -1}, ValueError, "priority must be between 0 and 9, got -1"),
    ({"priority": 10}, ValueError, "priority must be between 0 and 9, got 10"),
    ({"priority": True}, TypeError, "priority must be an int, got bool"),
    ({"priority": 1.0}, TypeError, "priority must be an int, got float"),
    ({"max_attempts": 0}, ValueError, "max_attempts must be between 1 and 4294967295, got 0"),
    ({"max_attempts": 2**32}, ValueError, "max_attempts must be between 1 and 4294967295"),
    ({"trace_context": TP}, TypeError, "trace_context must be a TraceContext or None, got str"),
    ({"custom": [("a", 1)]}, TypeError, "custom must be a mapping"),
    ({"custom": {"": 1}}, ValueError, "custom key must not be empty"),
    ({"custom": {1: 1}}, TypeError, "custom key must be a str, got int"),
    ({"custom": {"k": None}}, TypeError, r"custom\['k'\] must be str, int, float or bool"),
    ({"custom": {"k": [1]}}, TypeError, r"custom\['k'\] must be str, int, float or bool"),
    ({"custom": {"k": 2**63}}, ValueError, r"custom\['k'\] must be between -9223372036854775808"),
    ({"custom": {"k": -(2**63) - 1}}, ValueError, r"custom\['k'\] must be between"),
    ({"custom": {"k": "\ud800"}}, ValueError, r"custom\['k'\] is not encodable as UTF-8"),
    ({"scheduled_at": "2030-01-01"}, TypeError, "scheduled_at must be a datetime"),
    ({"delay": -0.5}, ValueError, "delay must be >= 0 seconds, got -0.5"),
    ({"delay": math.inf}, ValueError, "delay must be a finite number of seconds"),
    ({"delay": math.nan}, ValueError, "delay must be a finite number of seconds"),
    ({"delay": "5"}, TypeError, "delay must be a number of seconds, got str"),
    ({"delay": 1.0, "scheduled_at": T0}, ValueError, "either scheduled_at or delay, not both"),
]


@pytest.mark.parametrize(("kwargs", "exc", "match"), BAD_REQUESTS)
def test_enqueue_request_validation(
    kwargs: dict[str, Any], exc: type[Exception], match: str
) -> None:
    queue = kwargs.pop("queue", "q")
    job_type = kwargs.pop("job_type", "t")
    with pytest.raises(exc, match=match):
        EnqueueRequest(queue, job_type, **kwargs)


def test_enqueue_request_int64_bounds_accepted() -> None:
    req = EnqueueRequest("q", "t", custom={"lo": -(2**63), "hi": 2**63 - 1})
    assert req.custom == {"lo": -(2**63), "hi": 2**63 - 1}


def test_enqueue_request_is_frozen_and_replaceable() -> None:
    req = EnqueueRequest("q", "t")
    with pytest.raises(dataclasses.FrozenInstanceError):
        req.queue = "other"  # type: ignore[misc]
    moved = dataclasses.replace(req, queue="other")
    assert moved.queue == "other"
    with pytest.raises(ValueError, match="queue must not be empty"):
        dataclasses.replace(req, queue="")


def test_enqueue_ack() -> None:
    ack = EnqueueAck("id-1", True)
    assert ack.deduplicated
    assert EnqueueAck("id-2").deduplicated is False


# ---------------------------------------------------------------------------- RetryDirective


def test_retry_directive_constructors() -> None:
    assert RetryDirective.default() == RetryDirective("default")
    assert RetryDirective.dead_letter().kind == "dead_letter"
    after = RetryDirective.after(2)
    assert after.kind == "after"
    assert after.delay == 2.0
    assert isinstance(after.delay, float)
    assert RetryDirective.after(0).delay == 0.0


@pytest.mark.parametrize(
    ("kind", "delay", "exc", "match"),
    [
        ("after", None, ValueError, "needs a delay"),
        ("after", -1.0, ValueError, "delay must be >= 0 seconds"),
        ("after", math.inf, ValueError, "delay must be a finite number"),
        ("default", 1.0, ValueError, "'default' takes no delay"),
        ("dead_letter", 1.0, ValueError, "'dead_letter' takes no delay"),
        ("later", None, ValueError, "kind must be 'default', 'after' or 'dead_letter'"),
        ("after", "1", TypeError, "delay must be a number of seconds"),
    ],
)
def test_retry_directive_validation(
    kind: Any, delay: Any, exc: type[Exception], match: str
) -> None:
    with pytest.raises(exc, match=match):
        RetryDirective(kind, delay)


# ---------------------------------------------------------------------------- RetryPolicy


def test_retry_policy_defaults() -> None:
    p = RetryPolicy()
    assert (p.max_attempts, p.initial_backoff, p.max_backoff, p.multiplier, p.jitter) == (
        1,
        0.1,
        10.0,
        2.0,
        True,
    )


@pytest.mark.parametrize(("given_", "expected"), [(0, 1), (-3, 1), (1, 1), (7, 7)])
def test_retry_policy_clamps_max_attempts(given_: int, expected: int) -> None:
    assert RetryPolicy(max_attempts=given_).max_attempts == expected


@pytest.mark.parametrize(("given_", "expected"), [(0.5, 1.0), (0, 1.0), (-2, 1.0), (3, 3.0)])
def test_retry_policy_clamps_multiplier(given_: float, expected: float) -> None:
    assert RetryPolicy(multiplier=given_).multiplier == expected


@pytest.mark.parametrize(
    ("kwargs", "exc", "match"),
    [
        ({"initial_backoff": -0.1}, ValueError, "initial_backoff must be >= 0"),
        ({"max_backoff": math.inf}, ValueError, "max_backoff must be a finite number"),
        ({"multiplier": math.nan}, ValueError, "multiplier must be a number >= 1.0"),
        ({"multiplier": "2"}, TypeError, "multiplier must be a number"),
        ({"max_attempts": 2.0}, TypeError, "max_attempts must be an int"),
    ],
)
def test_retry_policy_validation(kwargs: dict[str, Any], exc: type[Exception], match: str) -> None:
    with pytest.raises(exc, match=match):
        RetryPolicy(**kwargs)


def test_retry_policy_backoff_without_jitter() -> None:
    p = RetryPolicy(initial_backoff=0.1, max_backoff=1.0, multiplier=2.0, jitter=False)
    assert [p.backoff(i) for i in range(6)] == pytest.approx([0.1, 0.2, 0.4, 0.8, 1.0, 1.0])


def test_retry_policy_backoff_huge_index_does_not_overflow() -> None:
    p = RetryPolicy(multiplier=10.0, jitter=False)
    assert p.backoff(10_000) == 10.0


def test_retry_policy_backoff_negative_index() -> None:
    with pytest.raises(ValueError, match="retry_index must be >= 0"):
        RetryPolicy().backoff(-1)


@given(
    initial=st.floats(min_value=0, max_value=100),
    cap=st.floats(min_value=0, max_value=100),
    multiplier=st.floats(min_value=0, max_value=10),
    index=st.integers(min_value=0, max_value=2000),
    jitter=st.booleans(),
)
def test_retry_policy_backoff_bounds(
    initial: float, cap: float, multiplier: float, index: int, jitter: bool
) -> None:
    p = RetryPolicy(
        max_attempts=3,
        initial_backoff=initial,
        max_backoff=cap,
        multiplier=multiplier,
        jitter=jitter,
    )
    assert p.multiplier >= 1.0
    if initial == 0:
        nominal = 0.0
    else:
        try:
            nominal = min(cap, initial * p.multiplier**index)
        except OverflowError:
            nominal = cap
    delay = p.backoff(index)
    assert 0.0 <= delay <= cap
    if jitter:
        assert nominal * 0.5 <= delay <= nominal
        if nominal > 0:
            assert delay < nominal or math.isclose(delay, nominal)
    else:
        assert delay == nominal


# ---------------------------------------------------------------------------- dead letters


def _record(**overrides: Any) -> DeadLetterRecord:
    fields: dict[str, Any] = {
        "queue": "emails",
        "job_id": "0b1c4a8e-7d2c-4f3e-9a61-3c5b2d1e0f9a",
        "job_type": "send_welcome",
        "payload": Payload.from_json({"user": 1}),
        "priority": 7,
        "max_attempts": 5,
        "custom": {"tenant": "acme"},
        "trace_context": TraceContext(TP),
        "enqueued_at": T0,
        "scheduled_at": T0 + timedelta(hours=1),
        "cause": DeadLetterCause.ATTEMPTS_EXHAUSTED,
        "failed_at": T0 + timedelta(hours=2),
        "final_attempt": 5,
        "last_reason": "boom",
    }
    fields.update(overrides)
    return DeadLetterRecord(**fields)


def test_dead_letter_replay_is_a_fresh_job() -> None:
    record = _record()
    req = record.to_enqueue_request()
    assert req.queue == "emails"
    assert req.job_type == "send_welcome"
    assert req.payload == record.payload
    assert req.priority == 7
    assert req.max_attempts == 5
    assert req.custom == {"tenant": "acme"}
    assert req.trace_context == record.trace_context
    # Dropped on purpose: a new job runs now and must not dedup against the original.
    assert req.scheduled_at is None
    assert req.delay is None
    assert req.idempotency_key is None


def test_dead_letter_replay_drops_the_expiry_deadline() -> None:
    """An expired job replayed as it was would expire again at once."""
    record = _record(custom={"tenant": "acme", "sepp.expires_at": 1_700_000_000_000})
    assert record.to_enqueue_request().custom == {"tenant": "acme"}


def test_dead_letter_replay_zero_max_attempts_means_queue_default() -> None:
    assert _record(max_attempts=0).to_enqueue_request().max_attempts is None


def test_dead_letter_replay_custom_is_independent() -> None:
    custom: dict[str, str | int | float | bool] = {"a": 1}
    record = _record(custom=custom)
    req = record.to_enqueue_request()
    custom["b"] = 2
    assert req.custom == {"a": 1}


def test_dead_letter_replay_without_payload() -> None:
    assert _record(payload=None, trace_context=None).to_enqueue_request().payload is None


def test_dead_letter_cause_values() -> None:
    assert [c.name for c in DeadLetterCause] == [
        "UNSPECIFIED",
        "ATTEMPTS_EXHAUSTED",
        "REJECTED",
        "LEASE_EXPIRED",
        "ADMIN",
    ]
    assert DeadLetterCause.ADMIN.value == "admin"
    assert str(DeadLetterCause.LEASE_EXPIRED) == "lease_expired"


# ---------------------------------------------------------------------------- JobCtx / Job


class FakeLease:
    """Grants ``seconds`` from a fixed clock, like a server that does not clamp."""

    def __init__(self, now: datetime, *, cap: float | None = None) -> None:
        self.now = now
        self.cap = cap
        self.known_expiry = now + timedelta(seconds=30)
        self.calls: list[float] = []

    async def extend(self, ctx: JobCtx, seconds: float) -> datetime:
        self.calls.append(seconds)
        granted = seconds if self.cap is None else min(seconds, self.cap)
        return self.now + timedelta(seconds=granted)


def _ctx(lease: FakeLease | None = None) -> JobCtx:
    return JobCtx(
        id="job-1",
        queue="emails",
        job_type="send_welcome",
        priority=3,
        attempt=2,
        max_attempts=5,
        enqueued_at=T0,
        scheduled_at=None,
        lease_expires_at=T0 + timedelta(seconds=30),
        custom={"a": 1},
        trace_context=None,
        worker_id="w-1",
        _lease=lease,
    )


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_job_ctx_extend_updates_both_expiries(backend: str) -> None:
    lease = FakeLease(T0, cap=60.0)
    ctx = _ctx(lease)

    async def main() -> datetime:
        return await ctx.extend(120)

    expiry = anyio.run(main, backend=backend)
    assert lease.calls == [120.0]
    # The server clamped to 60 s: both views follow the *granted* expiry.
    assert expiry == T0 + timedelta(seconds=60)
    assert ctx.lease_expires_at == expiry
    assert lease.known_expiry == expiry


def test_job_ctx_extend_without_lease() -> None:
    ctx = _ctx()
    with pytest.raises(RuntimeError, match="job 'job-1' has no lease attached"):
        anyio.run(ctx.extend, 10.0)


@pytest.mark.parametrize(
    ("seconds", "exc", "match"),
    [
        (0.0, ValueError, r"seconds must be at least 0\.001 seconds \(1 ms\)"),
        (0.0005, ValueError, "at least 0.001"),
        (-1, ValueError, "at least 0.001"),
        (math.inf, ValueError, "finite"),
        ("5", TypeError, "seconds must be a number of seconds"),
    ],
)
def test_job_ctx_extend_validates(seconds: Any, exc: type[Exception], match: str) -> None:
    lease = FakeLease(T0)
    ctx = _ctx(lease)
    with pytest.raises(exc, match=match):
        anyio.run(ctx.extend, seconds)
    assert lease.calls == []
    assert ctx.lease_expires_at == T0 + timedelta(seconds=30)


def test_job_ctx_str_repr_and_equality() -> None:
    ctx = _ctx(FakeLease(T0))
    assert str(ctx) == "JobCtx(id=job-1, job_type=send_welcome, attempt=2/5, priority=3)"
    assert "_lease" not in repr(ctx)
    assert ctx == _ctx(None)  # the lease is not part of equality


def test_job_holds_payload_and_ctx() -> None:
    ctx = _ctx()
    job = Job(None, ctx)
    assert job.payload is None
    assert job.ctx is ctx


# ---------------------------------------------------------------------------- rejections


def test_rejection_transient_flags() -> None:
    assert QueueFull("q", 1).transient
    assert QueueClosing("q").transient
    assert not UnknownQueue("q").transient
    assert not UnknownRejection().transient


def test_rejections_are_values_not_exceptions() -> None:
    assert not issubclass(JobRejection, BaseException)
    r = EncodingNotAllowed("text/csv", ("application/json",))
    assert hash(r) == hash(EncodingNotAllowed("text/csv", ("application/json",)))
    with pytest.raises(dataclasses.FrozenInstanceError):
        r.encoding = "x"  # type: ignore[misc]


def test_rejection_match_statement() -> None:
    result: object = QueueFull("emails", 10)
    match result:
        case QueueFull(queue=queue, limit=limit):
            assert (queue, limit) == ("emails", 10)
        case _:  # pragma: no cover
            pytest.fail("no match")


def test_payload_repr_is_bounded() -> None:
    assert repr(Payload(b"abc", "x")) == "Payload(data=b'abc', encoding='x')"
    big = repr(Payload(b"a" * 10_000, "x"))
    assert len(big) < 150
    assert "(10000 bytes)" in big


def test_naive_scheduled_at_is_read_as_utc() -> None:
    request = EnqueueRequest("q", "t", scheduled_at=datetime(2030, 1, 1, 12, 0))
    assert request.scheduled_at == datetime(2030, 1, 1, 12, 0, tzinfo=UTC)
