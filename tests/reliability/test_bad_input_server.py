"""The reference server fed malformed and hostile requests.

One server subprocess (``python -m sepp_anyio.server --memory``) takes everything, over
our own transport with the request body passed through as raw bytes: Hypothesis-generated
messages of every request type (any strings, any numbers, any durations and times, custom
maps of every shape), random bytes as protobuf, oversized messages, huge custom maps,
invalid UTF-8 in every string field, ten thousand queues in one reserve, times out of any
range, a deadline that is already over, and broken gRPC framing.

Every answer must be OK with a reply that decodes, or one of the documented rejections:
INVALID_ARGUMENT, NOT_FOUND, FAILED_PRECONDITION, OUT_OF_RANGE (message too large), or
INTERNAL "failed to decode Protobuf message" (as tonic).  Never UNKNOWN, never INTERNAL
"internal error" (an unexpected exception in the engine), never a hang.  Meanwhile a
*canary* client in a process of its own keeps enqueuing, reserving and acking, and must never
see an error; at the end the server is still alive and its log holds no traceback.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import anyio
import anyio.from_thread
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sepp_anyio import StatusCode
from sepp_anyio._grpc import GrpcError
from sepp_anyio._proto.google.protobuf import Duration, Empty, Timestamp
from sepp_anyio._proto.sepp import v1 as pb
from sepp_anyio._transport import UNARY_UNARY, Channel
from sepp_anyio.server import ServerProcess
from tests.support.servers import raw_grpc_call

from ._servers import RETENTION_ENV

SERVICE = "/sepp.v1.QueueService/"
REQUESTS: dict[str, tuple[type[Any], type[Any]]] = {
    "EnqueueBatch": (pb.EnqueueBatchRequest, pb.EnqueueBatchResponse),
    "EnqueueAtomic": (pb.EnqueueBatchRequest, pb.EnqueueAtomicResponse),
    "Reserve": (pb.ReserveRequest, pb.ReserveResponse),
    "Ack": (pb.AckRequest, pb.AckResponse),
    "Nack": (pb.NackRequest, pb.NackResponse),
    "Extend": (pb.ExtendRequest, pb.ExtendResponse),
    "DrainDeadLetters": (pb.DrainDeadLettersRequest, pb.DrainDeadLettersResponse),
    "GetServerInfo": (pb.GetServerInfoRequest, pb.GetServerInfoResponse),
}
DOCUMENTED = {
    StatusCode.INVALID_ARGUMENT,
    StatusCode.NOT_FOUND,
    StatusCode.FAILED_PRECONDITION,
    StatusCode.OUT_OF_RANGE,
}
DECODE_FAILURE = "failed to decode Protobuf message"


class Raw:
    """A "message" that is its bytes: lets the transport carry any body at all."""

    def __init__(self, data: bytes = b"") -> None:
        self.data = data

    def __bytes__(self) -> bytes:
        return self.data

    @classmethod
    def FromString(cls, data: bytes) -> Raw:
        return cls(data)


# ------------------------------------------------------------------ the server and its canary


@pytest.fixture(scope="module")
def server() -> Iterator[ServerProcess]:
    """The server, and a canary client (in a process of its own) using it all along."""
    env = {
        **os.environ,
        **RETENTION_ENV,
        # A parked reserve returns after 50 ms whatever the request asks for.
        "SEPP_LIMITS__MAX_WAIT_TIMEOUT_MS": "50",
    }
    process = ServerProcess("--memory", "--port", "0", "--log-level", "WARNING", env=env)
    process.start()
    canary = subprocess.Popen(
        [sys.executable, str(Path(__file__).with_name("_canary.py")), process.address],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert canary.stdout is not None
        # Served once before the first hostile test (starting a process takes seconds on
        # a loaded machine), so "served all along" holds from the start.
        ready, _, _ = select.select([canary.stdout], [], [], 60.0)
        assert ready, "the canary was not served within 60 s"
        assert canary.stdout.readline() == "served\n", "the canary stopped before it was served"
        yield process
        out, _ = canary.communicate(timeout=30)  # closes its stdin: it stops
        report = json.loads(out)
        assert not report["errors"], report["errors"][:5]
        assert report["rounds"] > 0
        assert process.process is not None and process.process.poll() is None, "it crashed"
    finally:
        if canary.poll() is None:
            canary.kill()
            canary.wait()
        process.stop()
    log = process.output
    assert "Traceback" not in log, log[-3000:]
    assert "failed unexpectedly" not in log, log[-3000:]


@pytest.fixture
def portal(anyio_backend: str) -> Iterator[anyio.from_thread.BlockingPortal]:
    """An event loop of the test's backend in a thread, for synchronous Hypothesis tests."""
    with anyio.from_thread.start_blocking_portal(anyio_backend) as running:
        yield running


@pytest.fixture
def channel(portal: anyio.from_thread.BlockingPortal, server: ServerProcess) -> Iterator[Channel]:
    with portal.wrap_async_context_manager(Channel(server.host, server.port)) as opened:
        yield opened


async def _call(channel: Channel, method: str, body: bytes) -> tuple[StatusCode, str, bytes]:
    stream = channel.request(SERVICE + method, UNARY_UNARY, Raw, Raw, timeout=10.0)
    try:
        async with stream:
            await stream.send_message(Raw(body), end=True)
            reply = await stream.recv_message()
            await stream.recv_trailing_metadata()
    except GrpcError as exc:
        return exc.code, exc.message or "", b""
    assert isinstance(reply, Raw)
    return StatusCode.OK, "", reply.data


def call(
    portal: anyio.from_thread.BlockingPortal, channel: Channel, method: str, body: bytes
) -> tuple[StatusCode, str, Any]:
    """Send ``body`` to ``method``; check the answer is acceptable; return it decoded."""
    status, message, data = portal.call(_call, channel, method, body)
    if status is StatusCode.OK:
        return status, message, REQUESTS[method][1].FromString(data)
    assert status in DOCUMENTED or (
        status is StatusCode.INTERNAL and message.startswith(DECODE_FAILURE)
    ), f"{method}: {status.name} {message!r} for {body[:200]!r}"
    return status, message, None


# ------------------------------------------------------------------ strategies

names = st.one_of(
    st.text(max_size=12),
    st.sampled_from(["", ".", "..", "a/b", "q\x00", "tab\t", "x" * 600, "é" * 300, "q"]),
)
optional_names = st.none() | names
u32 = st.integers(0, 2**32 - 1)
i64 = st.integers(-(2**63), 2**63 - 1)
durations = st.none() | st.timedeltas(
    min_value=timedelta(days=-(10**6)), max_value=timedelta(days=10**6)
)
times = st.datetimes(
    min_value=datetime(1, 1, 2), max_value=datetime(9999, 12, 30), timezones=st.just(UTC)
)
primitive = st.one_of(
    st.builds(pb.PrimitiveValue, string_value=st.text(max_size=30)),
    st.builds(pb.PrimitiveValue, double_value=st.floats()),
    st.builds(pb.PrimitiveValue, int_value=i64),
    st.builds(pb.PrimitiveValue, bool_value=st.booleans()),
    st.just(pb.PrimitiveValue()),
)
enqueue_request = st.builds(
    pb.EnqueueRequest,
    queue=names,
    job_type=names,
    payload=st.none() | st.builds(pb.Payload, data=st.binary(max_size=40), encoding=names),
    idempotency_key=optional_names,
    priority=st.none() | u32,
    max_attempts=st.none() | u32,
    trace_context=st.none()
    | st.builds(pb.TraceContext, traceparent=st.text(max_size=60), tracestate=optional_names),
    custom=st.dictionaries(st.text(max_size=8), primitive, max_size=6),
    scheduled_at=st.none() | times,
)
job_ids = st.one_of(st.uuids().map(str), st.uuids().map(lambda u: str(u).upper()), names)
nack_retry = st.one_of(
    st.none(),
    st.just(pb.NackRetry()),
    st.just(pb.NackRetry(default=Empty())),
    st.just(pb.NackRetry(dead_letter=Empty())),
    st.builds(
        pb.NackRetry,
        delay=st.timedeltas(min_value=timedelta(days=-(10**6)), max_value=timedelta(days=10**6)),
    ),
)
MESSAGES: dict[str, st.SearchStrategy[Any]] = {
    "EnqueueBatch": st.builds(pb.EnqueueBatchRequest, jobs=st.lists(enqueue_request, max_size=4)),
    "EnqueueAtomic": st.builds(pb.EnqueueBatchRequest, jobs=st.lists(enqueue_request, max_size=4)),
    "Reserve": st.builds(
        pb.ReserveRequest,
        queues=st.lists(names, max_size=5),
        wait_timeout=durations,
        lease_duration=durations,
        worker_id=optional_names,
        max_jobs=st.none() | u32,
    ),
    "Ack": st.builds(pb.AckRequest, job_id=job_ids, attempt=u32, worker_id=optional_names),
    "Nack": st.builds(
        pb.NackRequest,
        job_id=job_ids,
        attempt=u32,
        reason=st.none() | st.text(max_size=40),
        retry=nack_retry,
        worker_id=optional_names,
    ),
    "Extend": st.builds(
        pb.ExtendRequest,
        job_id=job_ids,
        attempt=u32,
        lease_duration=durations,
        worker_id=optional_names,
    ),
    "DrainDeadLetters": st.builds(
        pb.DrainDeadLettersRequest, queue=optional_names, max=st.none() | u32
    ),
    "GetServerInfo": st.just(pb.GetServerInfoRequest()),
}
HYPOTHESIS = settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


# ------------------------------------------------------------------ generated requests


@HYPOTHESIS
@given(data=st.data())
def test_generated_requests_get_documented_answers(
    portal: anyio.from_thread.BlockingPortal, channel: Channel, data: st.DataObject
) -> None:
    method = data.draw(st.sampled_from(sorted(MESSAGES)), label="method")
    message = data.draw(MESSAGES[method], label="request")
    status, _, reply = call(portal, channel, method, bytes(message))
    if method in ("Ack", "Nack", "Extend") and status is StatusCode.OK:
        pytest.fail(f"{method} of a job nobody reserved succeeded: {message!r}")
    if method == "EnqueueBatch" and status is StatusCode.OK:
        assert len(reply.results) == len(message.jobs)


@HYPOTHESIS
@given(method=st.sampled_from(sorted(REQUESTS)), body=st.binary(max_size=300))
def test_random_bytes_as_protobuf(
    portal: anyio.from_thread.BlockingPortal, channel: Channel, method: str, body: bytes
) -> None:
    call(portal, channel, method, body)


# ------------------------------------------------------------------ crafted requests


def _with_invalid_utf8(message: Any, marker: str = "\u00a7MARK\u00a7") -> bytes:
    """``message`` encoded, with the string ``marker`` replaced by invalid UTF-8 bytes of
    the same length (so every length prefix stays right)."""
    encoded = bytes(message)
    raw = marker.encode()
    assert encoded.count(raw) == 1
    return encoded.replace(raw, b"\xff\xfe" + b"\x80" * (len(raw) - 2))


M = "\u00a7MARK\u00a7"
INVALID_UTF8 = {
    "queue": (
        "EnqueueBatch",
        pb.EnqueueBatchRequest(jobs=[pb.EnqueueRequest(queue=M, job_type="t")]),
    ),
    "job_type": (
        "EnqueueBatch",
        pb.EnqueueBatchRequest(jobs=[pb.EnqueueRequest(queue="q", job_type=M)]),
    ),
    "encoding": (
        "EnqueueAtomic",
        pb.EnqueueBatchRequest(
            jobs=[pb.EnqueueRequest(queue="q", job_type="t", payload=pb.Payload(b"x", M))]
        ),
    ),
    "idempotency_key": (
        "EnqueueBatch",
        pb.EnqueueBatchRequest(
            jobs=[pb.EnqueueRequest(queue="q", job_type="t", idempotency_key=M)]
        ),
    ),
    "custom key": (
        "EnqueueBatch",
        pb.EnqueueBatchRequest(
            jobs=[
                pb.EnqueueRequest(
                    queue="q", job_type="t", custom={M: pb.PrimitiveValue(int_value=1)}
                )
            ]
        ),
    ),
    "custom value": (
        "EnqueueBatch",
        pb.EnqueueBatchRequest(
            jobs=[
                pb.EnqueueRequest(
                    queue="q", job_type="t", custom={"k": pb.PrimitiveValue(string_value=M)}
                )
            ]
        ),
    ),
    "traceparent": (
        "EnqueueBatch",
        pb.EnqueueBatchRequest(
            jobs=[pb.EnqueueRequest(queue="q", job_type="t", trace_context=pb.TraceContext(M))]
        ),
    ),
    "reserve queue": (
        "Reserve",
        pb.ReserveRequest(queues=["ok", M], lease_duration=timedelta(seconds=1)),
    ),
    "worker_id": (
        "Reserve",
        pb.ReserveRequest(queues=["ok"], lease_duration=timedelta(seconds=1), worker_id=M),
    ),
    "job_id": ("Ack", pb.AckRequest(job_id=M, attempt=1)),
    "nack reason": ("Nack", pb.NackRequest(job_id=str(uuid.uuid4()), attempt=1, reason=M)),
    "drain queue": ("DrainDeadLetters", pb.DrainDeadLettersRequest(queue=M)),
}


@pytest.mark.parametrize("field", sorted(INVALID_UTF8))
def test_invalid_utf8_in_a_string_field_is_a_decode_failure(
    portal: anyio.from_thread.BlockingPortal, channel: Channel, field: str
) -> None:
    method, message = INVALID_UTF8[field]
    status, message_text, _ = call(portal, channel, method, _with_invalid_utf8(message))
    assert (status, message_text[: len(DECODE_FAILURE)]) == (StatusCode.INTERNAL, DECODE_FAILURE)


def test_an_oversized_message_is_out_of_range(
    portal: anyio.from_thread.BlockingPortal, channel: Channel
) -> None:
    big = pb.EnqueueBatchRequest(
        jobs=[
            pb.EnqueueRequest(queue="big", job_type="t", payload=pb.Payload(b"z" * (6 << 20), "b"))
            for _ in range(3)
        ]
    )
    status, message, _ = call(portal, channel, "EnqueueBatch", bytes(big))
    assert status is StatusCode.OUT_OF_RANGE and "too large" in message


def test_a_huge_custom_map_is_rejected_per_job(
    portal: anyio.from_thread.BlockingPortal, channel: Channel
) -> None:
    many = {f"k{i}": pb.PrimitiveValue(int_value=i) for i in range(20_000)}
    request = pb.EnqueueBatchRequest(
        jobs=[
            pb.EnqueueRequest(queue="maps", job_type="t", custom=many),
            pb.EnqueueRequest(
                queue="maps", job_type="t", custom={"k" * 1_000_000: pb.PrimitiveValue(int_value=1)}
            ),
            pb.EnqueueRequest(
                queue="maps",
                job_type="t",
                custom={f"k{i}": pb.PrimitiveValue(string_value="v" * 10_000) for i in range(60)},
            ),
            pb.EnqueueRequest(queue="maps", job_type="t"),
        ]
    )
    status, _, reply = call(portal, channel, "EnqueueBatch", bytes(request))
    assert status is StatusCode.OK
    first, second, third, fine = reply.results
    assert first.rejection.custom_entries_too_many.actual == 20_000
    assert second.rejection.custom_key_too_long.actual == 1_000_000
    assert third.rejection.custom_map_too_large.actual > 16_384
    assert fine.success.job_id


def test_ten_thousand_queues_in_one_reserve(
    portal: anyio.from_thread.BlockingPortal, channel: Channel
) -> None:
    lease = timedelta(seconds=1)
    valid = pb.ReserveRequest(queues=[f"q{i}" for i in range(10_000)], lease_duration=lease)
    status, message, _ = call(portal, channel, "Reserve", bytes(valid))
    assert (status, message) == (
        StatusCode.INVALID_ARGUMENT,
        "reserve exceeds max_reserve_queues (32)",
    )
    # The same many, one of them invalid: the name check comes first.
    invalid = pb.ReserveRequest(
        queues=[*valid.queues[:5000], "a/b", *valid.queues[5000:]], lease_duration=lease
    )
    status, message, _ = call(portal, channel, "Reserve", bytes(invalid))
    assert status is StatusCode.INVALID_ARGUMENT and message.startswith("queues item")


def _field(number: int, payload: bytes) -> bytes:
    """A length-delimited protobuf field."""
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        low, value = value & 0x7F, value >> 7
        out.append(low | (0x80 if value else 0))
        if not value:
            return bytes(out)


OUT_OF_RANGE_TIMES = {
    "scheduled_at year 10^11": (
        "EnqueueBatch",
        _field(
            1,
            bytes(pb.EnqueueRequest(queue="q", job_type="t"))
            + _field(9, bytes(Timestamp(seconds=2**62))),
        ),
    ),
    "scheduled_at before year 1": (
        "EnqueueBatch",
        _field(
            1,
            bytes(pb.EnqueueRequest(queue="q", job_type="t"))
            + _field(9, bytes(Timestamp(seconds=-(2**62)))),
        ),
    ),
    "lease of 2^62 s": (
        "Reserve",
        bytes(pb.ReserveRequest(queues=["q"])) + _field(3, bytes(Duration(seconds=2**62))),
    ),
    "wait of -2^62 s": (
        "Reserve",
        bytes(pb.ReserveRequest(queues=["q"], lease_duration=timedelta(seconds=1)))
        + _field(2, bytes(Duration(seconds=-(2**62)))),
    ),
    "nanos out of range": (
        "Extend",
        bytes(pb.ExtendRequest(job_id=str(uuid.uuid4()), attempt=1))
        + _field(3, bytes(Duration(seconds=1, nanos=-(2**31)))),
    ),
    "nack delay of 2^62 s": (
        "Nack",
        bytes(pb.NackRequest(job_id=str(uuid.uuid4()), attempt=1))
        + _field(4, _field(2, bytes(Duration(seconds=2**62)))),
    ),
}


@pytest.mark.parametrize("case", sorted(OUT_OF_RANGE_TIMES))
def test_times_out_of_any_range(
    portal: anyio.from_thread.BlockingPortal, channel: Channel, case: str
) -> None:
    method, body = OUT_OF_RANGE_TIMES[case]
    status, _, reply = call(portal, channel, method, body)
    if status is StatusCode.OK:  # a time Python can hold after all: then a sane answer
        assert method == "EnqueueBatch" and len(reply.results) == 1


WRONG_WIRE_TYPES = {
    "ack: job id as a group": ("Ack", b"\x0b"),
    "ack: job id as a varint": ("Ack", b"\x08\x05\x10\x01"),
    "ack: attempt as bytes": ("Ack", bytes(pb.AckRequest(job_id=str(uuid.uuid4()))) + b"\x12\x01a"),
    "reserve: a queue as a varint": ("Reserve", b"\x08\x01"),
    "reserve: the lease as a varint": ("Reserve", b"\x0a\x01q\x18\x01"),
    "enqueue: a job as a varint": ("EnqueueBatch", b"\x08\x01"),
    "enqueue: payload data as a varint": (
        "EnqueueBatch",
        _field(1, bytes(pb.EnqueueRequest(queue="q", job_type="t")) + _field(3, b"\x08\x05")),
    ),
    "enqueue: a custom key as a varint": (
        "EnqueueBatch",
        _field(1, bytes(pb.EnqueueRequest(queue="q", job_type="t")) + _field(8, b"\x08\x01")),
    ),
    "nack: the retry delay as a varint": (
        "Nack",
        bytes(pb.NackRequest(job_id=str(uuid.uuid4()), attempt=1)) + _field(4, b"\x10\x05"),
    ),
    "drain: max as bytes": ("DrainDeadLetters", b"\x12\x01a"),
}


@pytest.mark.parametrize("case", sorted(WRONG_WIRE_TYPES))
def test_a_field_with_the_wrong_wire_type_is_a_decode_failure(
    portal: anyio.from_thread.BlockingPortal, channel: Channel, case: str
) -> None:
    """Regression: betterproto2 decodes a wrong wire type into a value of the wrong type
    (a job id ``None`` or ``5``, payload data ``5`` which ``bytes()`` turned into five zero
    bytes); the engine then failed with TypeError ("internal error", a traceback in the log)
    or stored garbage.  Now such a request is undecodable, as in tonic."""
    method, body = WRONG_WIRE_TYPES[case]
    status, message, _ = call(portal, channel, method, body)
    assert status is StatusCode.INTERNAL and "wrong wire type" in message, (status, message)


# ------------------------------------------------------------------ the gRPC layer


def test_a_deadline_that_is_already_over_is_deadline_exceeded(server: ServerProcess) -> None:
    """Regression: grpclib answered ``grpc-timeout: 1n`` with UNKNOWN "Internal Server
    Error" and logged a traceback, because the deadline had run out before the call's task
    started."""
    for timeout in ("1n", "0n", "999u"):
        response = raw_grpc_call(
            server.address, "GetServerInfo", b"", metadata=[("grpc-timeout", timeout)]
        )
        assert response.trailers_only, response.events
        assert dict(response.headers[0])["grpc-status"] == str(StatusCode.DEADLINE_EXCEEDED.value)
    response = raw_grpc_call(
        server.address, "GetServerInfo", b"", metadata=[("grpc-timeout", "5S")]
    )
    assert response.data  # a usable timeout is served as usual


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        pytest.param(b"", "missing request message", id="no message at all"),
        pytest.param(
            b"\x01" + (3).to_bytes(4, "big") + b"abc",
            "compressed-flag but no grpc-encoding",
            id="compressed flag, no encoding",
        ),
        pytest.param(
            b"\x00" + (1 << 20).to_bytes(4, "big") + b"abc",
            "the request is cut short",
            id="length prefix lies",
        ),
        pytest.param(b"\x00\x00\x00", "the request is cut short", id="truncated prefix"),
    ],
)
def test_broken_grpc_framing(server: ServerProcess, body: bytes, expected: str) -> None:
    """Regression (cut short, compressed): grpclib raised bare exceptions for these, which
    the service logged with a traceback as unexpected failures ("internal error")."""
    response = _raw_body_call(server.address, "Ack", body)
    trailers = dict(response.headers[-1])
    assert trailers.get("grpc-status") == str(StatusCode.INTERNAL.value), response.headers
    assert expected in unquote(trailers.get("grpc-message", "")), trailers
    # Still serving.
    assert raw_grpc_call(server.address, "GetServerInfo", b"").data


def test_a_second_message_in_a_unary_call_is_internal(server: ServerProcess) -> None:
    """A unary call carries one request message: a second one is INTERNAL (tonic reads
    and drops it; ``http2-hardening.md`` section 7 makes it an error), and the first one
    is not acted on."""
    empty = b"\x00" + (0).to_bytes(4, "big")
    response = _raw_body_call(server.address, "GetServerInfo", empty * 2)
    trailers = dict(response.headers[-1])
    assert trailers.get("grpc-status") == "13", trailers
    assert "second" in unquote(trailers.get("grpc-message", ""))
    assert not response.data
    # Still serving.
    assert raw_grpc_call(server.address, "GetServerInfo", b"").data


def _raw_body_call(address: str, method: str, body: bytes, *, end_stream: bool = True) -> Any:
    """Like ``raw_grpc_call``, but ``body`` is the whole request body (no framing added)."""
    import socket
    import time

    import h2.config
    import h2.connection
    import h2.events

    from tests.support.servers import RawResponse

    host, _, port = address.rpartition(":")
    conn = h2.connection.H2Connection(config=h2.config.H2Configuration(client_side=True))
    conn.initiate_connection()
    stream_id = conn.get_next_available_stream_id()
    conn.send_headers(
        stream_id,
        [
            (":method", "POST"),
            (":scheme", "http"),
            (":path", SERVICE + method),
            (":authority", address),
            ("content-type", "application/grpc"),
            ("te", "trailers"),
            ("grpc-timeout", "2S"),
        ],
    )
    conn.send_data(stream_id, body, end_stream=end_stream)
    events: list[Any] = []
    deadline = time.monotonic() + 5.0
    with socket.create_connection((host, int(port)), timeout=5.0) as sock:
        sock.sendall(conn.data_to_send())
        done = False
        while not done and time.monotonic() < deadline:
            sock.settimeout(max(0.01, deadline - time.monotonic()))
            try:
                data = sock.recv(65536)
            except TimeoutError:
                break
            if not data:
                break
            for event in conn.receive_data(data):
                events.append(event)
                if (
                    isinstance(event, h2.events.StreamEnded | h2.events.StreamReset)
                    and event.stream_id == stream_id
                ):
                    done = True
            out = conn.data_to_send()
            if out:
                sock.sendall(out)
    return RawResponse(events)


def test_an_announced_giant_is_refused_before_it_is_sent(server: ServerProcess) -> None:
    """Regression: a message announcing 4 GiB was buffered as it arrived, the limit checked
    only once it was complete; now its length prefix alone gets OUT_OF_RANGE, while the
    client is still sending (the stream is not even ended here)."""
    body = b"\x00" + (2**32 - 1).to_bytes(4, "big") + b"z" * 16_000
    response = _raw_body_call(server.address, "EnqueueBatch", body, end_stream=False)
    [trailers] = response.headers
    assert dict(trailers)["grpc-status"] == str(StatusCode.OUT_OF_RANGE.value), trailers
    assert "found 4294967295 bytes" in dict(trailers)["grpc-message"]
