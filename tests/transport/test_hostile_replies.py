"""The transport and the client against a server that breaks gRPC on purpose.

A scripted HTTP/2 server (``RawH2Server``) answers unary calls with endless messages, with
a message announced larger than the limit, or with a ``grpc-status`` that is not a plain
number.  The call must fail at once, buffer no more than one message, reset the stream,
and the client must report ``MalformedResponseError`` without retrying it.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import anyio
import h2.connection
import h2.errors
import h2.events
import h2.exceptions
import pytest

import sepp_anyio
from sepp_anyio import (
    MalformedResponseError,
    OverloadedError,
    RetryPolicy,
    StatusCode,
    TransportError,
)
from sepp_anyio._grpc import GrpcError, MalformedReplyError
from sepp_anyio._proto.sepp import v1 as pb
from sepp_anyio._transport import UNARY_UNARY, Channel
from tests.support.servers import MiB, RawH2Server, Send

pytestmark = pytest.mark.anyio

LIMIT = 2 * MiB
PREFIX = 5
RETRYING = RetryPolicy(max_attempts=3, initial_backoff=0)


def _message(body: bytes) -> bytes:
    return b"\x00" + len(body).to_bytes(4, "big") + body


def _info_body(size: int) -> bytes:
    """A valid GetServerInfoResponse of ``size`` bytes (the version padded out)."""
    info = bytes(pb.GetServerInfoResponse(server_version="v", server_time=datetime.now(UTC)))
    pad = size - len(info) - 4  # tag of field 2 (supported versions) + 3 length bytes
    body = info + b"\x12" + bytes([(pad & 0x7F) | 0x80, ((pad >> 7) & 0x7F) | 0x80, pad >> 14])
    body += b"x" * pad
    assert len(body) == size
    return body


@dataclass
class Flood:
    """A raw HTTP/2 handler that answers each request with ``prefix`` and then endless
    copies of ``chunk`` (as fast as flow control allows), up to ``cap`` bytes, then OK
    trailers; it stops when the client resets the stream."""

    prefix: bytes
    chunk: bytes
    cap: int = 32 * MiB
    sent: int = 0
    requests: int = 0
    _pending: dict[int, memoryview] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def _stream_bytes(self) -> Iterator[bytes]:
        yield self.prefix
        while True:
            yield self.chunk

    def _pump(self, conn: h2.connection.H2Connection, stream_id: int, source: Any) -> None:
        while self.sent < self.cap:
            view = self._pending.pop(stream_id, None)
            if view is None:
                view = memoryview(next(source))
            window = min(conn.local_flow_control_window(stream_id), conn.max_outbound_frame_size)
            if window <= 0:
                self._pending[stream_id] = view
                return
            piece, rest = view[:window], view[window:]
            conn.send_data(stream_id, piece.tobytes())
            self.sent += len(piece)
            if rest:
                self._pending[stream_id] = rest
        conn.send_headers(stream_id, [("grpc-status", "0")], end_stream=True)
        self._sources.pop(stream_id, None)

    def __post_init__(self) -> None:
        self._sources: dict[int, Iterator[bytes]] = {}

    def __call__(
        self, conn: h2.connection.H2Connection, event: h2.events.Event, send: Send
    ) -> None:
        with self._lock:
            if isinstance(event, h2.events.RequestReceived):
                assert event.stream_id is not None
                self.requests += 1
                conn.send_headers(
                    event.stream_id, [(":status", "200"), ("content-type", "application/grpc")]
                )
                source = self._sources[event.stream_id] = self._stream_bytes()
                self._pump(conn, event.stream_id, source)
            elif isinstance(event, h2.events.DataReceived) and event.stream_id is not None:
                conn.acknowledge_received_data(event.flow_controlled_length or 0, event.stream_id)
            elif isinstance(event, h2.events.WindowUpdated):
                for stream_id, source in list(self._sources.items()):
                    try:
                        self._pump(conn, stream_id, source)
                    except h2.exceptions.ProtocolError:
                        # The client reset the stream (or said GOAWAY) in the same read:
                        # its event comes next.
                        self._sources.pop(stream_id, None)
            elif isinstance(event, h2.events.StreamReset):
                assert event.stream_id is not None
                self._sources.pop(event.stream_id, None)
                self._pending.pop(event.stream_id, None)
            send()


async def _unary(channel: Channel) -> tuple[Any, Any]:
    """One GetServerInfo call driven by hand, so the test can look at the stream after."""
    stream = channel.request(
        "/sepp.v1.QueueService/GetServerInfo",
        UNARY_UNARY,
        pb.GetServerInfoRequest,
        pb.GetServerInfoResponse,
        timeout=30,
    )
    reply: Any = None
    try:
        async with stream:
            await stream.send_message(pb.GetServerInfoRequest(), end=True)
            reply = await stream.recv_message()
    except GrpcError as exc:
        return stream, exc
    return stream, reply


# ------------------------------------------------------------------ endless messages


async def test_a_second_message_in_a_unary_reply_fails_the_call_at_once() -> None:
    """Regression: a unary reply made of endless 1 MiB messages was buffered until the
    deadline (RSS +600 MiB within 8 s).  The byte after the first message fails the call:
    at most one message (plus its prefix) is ever held, the stream is reset with CANCEL."""
    message = _message(_info_body(1 * MiB))
    flood = Flood(prefix=message, chunk=message)
    with RawH2Server(flood) as raw:
        async with Channel("127.0.0.1", raw.port, max_receive_message_bytes=LIMIT) as channel:
            with anyio.fail_after(10):
                stream, outcome = await _unary(channel)
            # Waited for with the connection still open: the reset goes out when the call
            # fails, not at the channel's close (and a close with the flood still arriving
            # is a TCP reset, which can discard the frame before the peer reads it).
            reset = await anyio.to_thread.run_sync(
                lambda: raw.wait_for(lambda e: isinstance(e.event, h2.events.StreamReset))
            )
    assert isinstance(outcome, MalformedReplyError), outcome
    assert outcome.code is StatusCode.INTERNAL
    assert "more than 1 message" in (outcome.message or "")
    held = stream._call.decoder.held
    assert held <= 1 * MiB + PREFIX, held
    assert isinstance(reset.event, h2.events.StreamReset)
    assert reset.event.error_code == h2.errors.ErrorCodes.CANCEL
    # It stopped at the reset, long before the server ran out of messages to send.
    assert flood.sent < flood.cap // 2


async def test_an_oversized_message_fails_before_its_body_is_buffered() -> None:
    """A message announced larger than max_receive_message_bytes, followed by endless
    bytes: the existing size error at once, with nothing of the body held."""
    flood = Flood(prefix=b"\x00" + (LIMIT + 1).to_bytes(4, "big"), chunk=b"z" * MiB)
    with RawH2Server(flood) as raw:
        async with Channel("127.0.0.1", raw.port, max_receive_message_bytes=LIMIT) as channel:
            with anyio.fail_after(10):
                stream, outcome = await _unary(channel)
            # Waited for with the connection still open: the reset goes out when the call
            # fails, not at the channel's close (and a close with the flood still arriving
            # is a TCP reset, which can discard the frame before the peer reads it).
            reset = await anyio.to_thread.run_sync(
                lambda: raw.wait_for(lambda e: isinstance(e.event, h2.events.StreamReset))
            )
    assert isinstance(outcome, GrpcError) and outcome.code is StatusCode.RESOURCE_EXHAUSTED
    assert "exceeds max_receive_message_bytes" in (outcome.message or "")
    assert stream._call.decoder.held <= PREFIX
    assert isinstance(reset.event, h2.events.StreamReset)
    assert reset.event.error_code == h2.errors.ErrorCodes.CANCEL
    assert flood.sent < flood.cap // 2


async def test_one_message_of_exactly_the_limit_is_fine() -> None:
    flood = Flood(prefix=_message(_info_body(LIMIT)), chunk=b"", cap=LIMIT + PREFIX)
    with RawH2Server(flood) as raw:
        async with Channel("127.0.0.1", raw.port, max_receive_message_bytes=LIMIT) as channel:
            with anyio.fail_after(10):
                _, reply = await _unary(channel)
    assert isinstance(reply, pb.GetServerInfoResponse) and reply.server_version == "v"


async def test_the_client_reports_endless_messages_as_malformed_and_does_not_retry() -> None:
    message = _message(_info_body(1 * MiB))
    flood = Flood(prefix=message, chunk=message)
    with RawH2Server(flood) as raw:
        async with sepp_anyio.connect(
            raw.address, retry=RETRYING, max_receive_message_bytes=LIMIT
        ) as client:
            with anyio.fail_after(10), pytest.raises(MalformedResponseError) as caught:
                await client.server_info()
    assert "server_info: the server sent more than 1 message" in str(caught.value)
    assert flood.requests == 1


async def test_the_client_reports_an_oversized_reply_with_the_size_error() -> None:
    flood = Flood(prefix=b"\x00" + (LIMIT + 1).to_bytes(4, "big"), chunk=b"z" * MiB)
    with RawH2Server(flood) as raw:
        async with sepp_anyio.connect(raw.address, max_receive_message_bytes=LIMIT) as client:
            with anyio.fail_after(10), pytest.raises(OverloadedError, match="exceeds"):
                await client.server_info()


# ------------------------------------------------------------------ grpc-status


_GRPC_HEADERS = [(":status", "200"), ("content-type", "application/grpc")]


def _reply_handler(
    headers: list[tuple[str, str]],
    trailers: list[tuple[str, str]] | None,
    seen: list[int] | None = None,
) -> Any:
    """Answer every request with ``headers``, one valid message and ``trailers``, or with
    ``headers`` alone, ending the stream (trailers-only), when ``trailers`` is None; the
    stream ids go to ``seen``. Nothing is normalised or validated on the way out."""
    info = pb.GetServerInfoResponse(server_version="v", server_time=datetime.now(UTC))
    body = _message(bytes(info))

    def handler(conn: h2.connection.H2Connection, event: h2.events.Event, send: Send) -> None:
        # h2 would strip the surrounding whitespace of " 14" before sending it.
        conn.config.normalize_outbound_headers = False
        conn.config.validate_outbound_headers = False
        if isinstance(event, h2.events.RequestReceived):
            assert event.stream_id is not None
            if seen is not None:
                seen.append(event.stream_id)
            if trailers is None:
                conn.send_headers(event.stream_id, headers, end_stream=True)
            else:
                conn.send_headers(event.stream_id, headers)
                conn.send_data(event.stream_id, body)
                conn.send_headers(event.stream_id, trailers, end_stream=True)
        elif isinstance(event, h2.events.DataReceived) and event.stream_id is not None:
            conn.acknowledge_received_data(event.flow_controlled_length or 0, event.stream_id)
        send()

    return handler


def _status_handler(value: str, *, after_data: bool, seen: list[int]) -> Any:
    status = ("grpc-status", value)
    if after_data:
        return _reply_handler(_GRPC_HEADERS, [status], seen)
    return _reply_handler([*_GRPC_HEADERS, status], None, seen)


BAD_STATUSES = {
    "leading space": " 14",
    "trailing space": "14 ",
    "plus sign": "+0",
    "minus sign": "-14",
    "hex": "0x1",
    "underscore": "1_4",
    "arabic-indic digits": "\u0661\u0664",
    "fullwidth digits": "\uff11\uff14",
    "empty": "",
    "very long": "1" * 5000,
    "eleven digits": "00000000014",
}


@pytest.mark.parametrize("after_data", [False, True], ids=["trailers-only", "trailers"])
@pytest.mark.parametrize("value", list(BAD_STATUSES.values()), ids=list(BAD_STATUSES))
async def test_a_grpc_status_that_is_not_ascii_digits_is_malformed_and_not_retried(
    value: str, after_data: bool
) -> None:
    """Regression: the status was parsed with int(), so " 14" was UNAVAILABLE (and
    retried) and "+0" was OK."""
    seen: list[int] = []
    with RawH2Server(_status_handler(value, after_data=after_data, seen=seen)) as raw:
        async with sepp_anyio.connect(raw.address, retry=RETRYING) as client:
            with anyio.fail_after(10), pytest.raises(MalformedResponseError) as caught:
                await client.server_info()
    # The gRPC layer's verdict, or the HTTP/2 core's for a value HTTP itself forbids
    # (whitespace at either end): both name the field.
    message = str(caught.value)
    assert "malformed grpc-status" in message or re.search(
        r"malformed (response|trailers): field 'grpc-status'", message
    )
    assert len(message) < 200
    assert len(seen) == 1


@pytest.mark.parametrize(
    ("value", "expected", "tries"),
    [
        ("14", TransportError, 3),
        ("0014", TransportError, 3),
        ("13", sepp_anyio.ServerInternalError, 1),
    ],
)
async def test_plain_digits_are_still_a_status(
    value: str, expected: type[Exception], tries: int
) -> None:
    seen: list[int] = []
    with RawH2Server(_status_handler(value, after_data=False, seen=seen)) as raw:
        async with sepp_anyio.connect(raw.address, retry=RETRYING) as client:
            with anyio.fail_after(10), pytest.raises(expected):
                await client.server_info()
    assert len(seen) == tries


async def test_status_zero_in_trailers_is_ok() -> None:
    seen: list[int] = []
    with RawH2Server(_status_handler("0", after_data=True, seen=seen)) as raw:
        async with sepp_anyio.connect(raw.address) as client:
            assert (await client.server_info()).version == "v"


# ------------------------------------------------------------------ whole unary replies

# A unary reply that arrives whole (headers, one valid message, trailers) but is wrong in
# one respect: the call reads such replies in one pass, and must not return the message.
ONE_THING_WRONG: dict[str, tuple[list[tuple[str, str]], list[tuple[str, str]], StatusCode]] = {
    "HTTP status 503": (
        [(":status", "503"), ("content-type", "application/grpc")],
        [("grpc-status", "0")],
        StatusCode.UNAVAILABLE,
    ),
    "content-type text/html": (
        [(":status", "200"), ("content-type", "text/html")],
        [("grpc-status", "0")],
        StatusCode.UNKNOWN,
    ),
    "no content-type": ([(":status", "200")], [("grpc-status", "0")], StatusCode.UNKNOWN),
    "status 13 after the message": (
        _GRPC_HEADERS,
        [("grpc-status", "13"), ("grpc-message", "boom")],
        StatusCode.INTERNAL,
    ),
    "the first of two statuses is 9": (
        _GRPC_HEADERS,
        [("grpc-status", "9"), ("grpc-status", "0")],
        StatusCode.FAILED_PRECONDITION,
    ),
    "trailers without a status": (_GRPC_HEADERS, [("grpc-message", "hm")], StatusCode.UNKNOWN),
}


@pytest.mark.parametrize(
    ("headers", "trailers", "code"), list(ONE_THING_WRONG.values()), ids=list(ONE_THING_WRONG)
)
async def test_a_whole_reply_wrong_in_one_respect_is_an_error_not_its_message(
    headers: list[tuple[str, str]], trailers: list[tuple[str, str]], code: StatusCode
) -> None:
    with RawH2Server(_reply_handler(headers, trailers)) as raw:
        async with Channel("127.0.0.1", raw.port) as channel:
            with anyio.fail_after(10):
                stream, outcome = await _unary(channel)
    assert isinstance(outcome, GrpcError), outcome
    assert outcome.code is code
    assert stream._call is not None and stream._call.finished


async def test_a_whole_usual_reply_is_read_in_one_pass_and_frees_its_stream() -> None:
    with RawH2Server(_reply_handler(_GRPC_HEADERS, [("grpc-status", "0")])) as raw:
        async with Channel("127.0.0.1", raw.port) as channel:
            with anyio.fail_after(10):
                stream, outcome = await _unary(channel)
                # The stream's slot is free again: a second call on the connection works.
                _, again = await _unary(channel)
    assert isinstance(outcome, pb.GetServerInfoResponse)
    assert outcome.server_version == "v"
    assert isinstance(again, pb.GetServerInfoResponse)
    assert stream._call is not None and stream._call.finished
    assert stream._conn is not None and not stream._conn.calls
