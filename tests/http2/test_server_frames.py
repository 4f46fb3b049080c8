"""Server role, frame by frame: bytes a client sends -> our events and our answer."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

from sepp_anyio._http2 import (
    Connection,
    DataReceived,
    ErrorCode,
    Event,
    GoAwayReceived,
    RequestHeadersTooLarge,
    RequestReceived,
    TrailersReceived,
)

from ._support import PREFACE, REQUEST, TRAILERS, Peer, describe, feed, raw, server
from .test_client_frames import blank, goaway, reasons, reset, rst, terminated

E = ErrorCode
REQ = tuple(REQUEST)


def without(name: bytes) -> list[tuple[bytes, bytes]]:
    return [header for header in REQUEST if header[0] != name]


def replaced(name: bytes, value: bytes) -> list[tuple[bytes, bytes]]:
    return [(key, value if key == name else old) for key, old in REQUEST]


@dataclass
class Case:
    name: str
    frames: Callable[[Peer], bytes]
    events: list[Event]
    output: list[tuple[Any, ...]] = field(default_factory=list)
    reason: str = ""
    closed: bool = False


BIG = [*REQUEST, (b"x-big", b"v" * (17 << 10))]
BIG_SIZE = sum(len(name) + len(value) + 32 for name, value in BIG)
CONNECT = [(b":method", b"CONNECT"), (b":authority", b"example:443")]

CASES = [
    Case(
        "request with a body",
        lambda p: p.headers(1, REQUEST) + p.data(1, b"body", end_stream=True),
        [RequestReceived(1, REQ, False), DataReceived(1, b"body", 4, True)],
    ),
    Case(
        "request without a body",
        lambda p: p.headers(1, REQUEST, end_stream=True),
        [RequestReceived(1, REQ, True)],
    ),
    Case(
        "request trailers",
        lambda p: p.headers(1, REQUEST) + p.data(1, b"x") + p.headers(1, TRAILERS, end_stream=True),
        [
            RequestReceived(1, REQ, False),
            DataReceived(1, b"x", 1, False),
            TrailersReceived(1, tuple(TRAILERS)),
        ],
    ),
    Case(
        "request trailers without END_STREAM",
        lambda p: p.headers(1, REQUEST) + p.headers(1, TRAILERS),
        [RequestReceived(1, REQ, False), reset(1, E.PROTOCOL_ERROR)],
        [rst(1, E.PROTOCOL_ERROR)],
        reason="trailers",
    ),
    Case(
        "streams in increasing order, skipping some",
        lambda p: p.headers(1, REQUEST, end_stream=True) + p.headers(7, REQUEST, end_stream=True),
        [RequestReceived(1, REQ, True), RequestReceived(7, REQ, True)],
    ),
    Case(
        # RFC 9113 section 5.1.1 (h2spec http2/5.1.1/2).
        "a new stream below the highest one ends the connection",
        lambda p: p.headers(5, REQUEST, end_stream=True) + p.headers(3, REQUEST, end_stream=True),
        [RequestReceived(5, REQ, True), terminated(E.PROTOCOL_ERROR, 5)],
        [goaway(E.PROTOCOL_ERROR, 5)],
        reason="must increase",
        closed=True,
    ),
    Case(
        "a client opening an even stream",
        lambda p: p.headers(2, REQUEST),
        [terminated(E.PROTOCOL_ERROR)],
        [goaway(E.PROTOCOL_ERROR)],
        reason="idle",
        closed=True,
    ),
    Case(
        "data after the client ended its side",
        lambda p: p.headers(1, REQUEST, end_stream=True) + p.data(1, b"x"),
        [RequestReceived(1, REQ, True), reset(1, E.STREAM_CLOSED)],
        [rst(1, E.STREAM_CLOSED)],
        reason="after the end",
    ),
    Case(
        "request without :method is refused",
        lambda p: p.headers(1, without(b":method")),
        [],
        [rst(1, E.PROTOCOL_ERROR)],
    ),
    Case(
        "request without :path is refused",
        lambda p: p.headers(1, without(b":path")),
        [],
        [rst(1, E.PROTOCOL_ERROR)],
    ),
    Case(
        "request with an empty :path is refused",
        lambda p: p.headers(1, replaced(b":path", b"")),
        [],
        [rst(1, E.PROTOCOL_ERROR)],
    ),
    Case(
        "request without :scheme is refused",
        lambda p: p.headers(1, without(b":scheme")),
        [],
        [rst(1, E.PROTOCOL_ERROR)],
    ),
    Case(
        "request with :status is refused",
        lambda p: p.headers(1, [(b":status", b"200"), *REQUEST]),
        [],
        [rst(1, E.PROTOCOL_ERROR)],
    ),
    Case(
        "request with :protocol (no extended CONNECT) is refused",
        lambda p: p.headers(1, [*REQUEST[:4], (b":protocol", b"websocket"), *REQUEST[4:]]),
        [],
        [rst(1, E.PROTOCOL_ERROR)],
    ),
    Case(
        "two :authority are refused",
        lambda p: p.headers(1, [*REQUEST[:4], (b":authority", b"other"), *REQUEST[4:]]),
        [],
        [rst(1, E.PROTOCOL_ERROR)],
    ),
    Case(
        "a non-ASCII byte in a value passes (obs-text)",
        lambda p: p.headers(1, [*REQUEST, (b"x-name", b"\xe9")], end_stream=True),
        [RequestReceived(1, (*REQ, (b"x-name", b"\xe9")), True)],
    ),
    Case(
        "a CR in a value is refused",
        lambda p: p.headers(1, [*REQUEST, (b"x-name", b"a\rb")]),
        [],
        [rst(1, E.PROTOCOL_ERROR)],
    ),
    Case(
        "transfer-encoding is refused",
        lambda p: p.headers(1, [*REQUEST, (b"transfer-encoding", b"chunked")]),
        [],
        [rst(1, E.PROTOCOL_ERROR)],
    ),
    Case(
        "CONNECT with :authority only",
        lambda p: p.headers(1, CONNECT),
        [RequestReceived(1, tuple(CONNECT), False)],
    ),
    Case(
        "CONNECT with a :path is refused",
        lambda p: p.headers(1, [*CONNECT, (b":path", b"/")]),
        [],
        [rst(1, E.PROTOCOL_ERROR)],
    ),
    Case(
        "CONNECT without :authority is refused",
        lambda p: p.headers(1, CONNECT[:1]),
        [],
        [rst(1, E.PROTOCOL_ERROR)],
    ),
    Case(
        "END_STREAM with a content-length above 0 is refused",
        lambda p: p.headers(1, [*REQUEST, (b"content-length", b"3")], end_stream=True),
        [],
        [rst(1, E.PROTOCOL_ERROR)],
    ),
    Case(
        "a refused stream's body is ignored",
        lambda p: p.headers(1, without(b":method")) + p.data(1, b"body", end_stream=True),
        [],
        [rst(1, E.PROTOCOL_ERROR)],
    ),
    Case(
        "request headers over the header-list limit",
        lambda p: p.headers(1, BIG),
        [RequestHeadersTooLarge(1, BIG_SIZE, 16 << 10, False)],
    ),
    Case(
        "client resets its stream",
        lambda p: p.headers(1, REQUEST) + p.rst(1, 8),
        [RequestReceived(1, REQ, False), reset(1, E.CANCEL, remote=True)],
    ),
    Case(
        "client goaway",
        lambda p: p.headers(1, REQUEST) + p.goaway(0),
        [RequestReceived(1, REQ, False), GoAwayReceived(E.NO_ERROR, 0, b"", ())],
    ),
    Case(
        "client push promise",
        lambda p: raw(0x5, 0x4, 1, b"\0\0\0\x02\x88"),
        [terminated(E.PROTOCOL_ERROR)],
        [goaway(E.PROTOCOL_ERROR)],
        closed=True,
    ),
    Case(
        "connection error after requests",
        lambda p: p.headers(1, REQUEST) + p.headers(3, REQUEST) + raw(0x6, 0, 0, b"1"),
        [
            RequestReceived(1, REQ, False),
            RequestReceived(3, REQ, False),
            terminated(E.FRAME_SIZE_ERROR, 3),
        ],
        [goaway(E.FRAME_SIZE_ERROR, 3)],
        closed=True,
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_server_frame(case: Case) -> None:
    conn = server()
    events = feed(conn, case.frames(Peer()))
    assert blank(events) == case.events
    assert describe(conn.data_to_send()) == case.output
    assert case.reason in reasons(events)
    assert conn.closed is case.closed


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_server_frame_byte_by_byte(case: Case) -> None:
    conn = server()
    data = case.frames(Peer())
    events = feed(conn, *(data[i : i + 1] for i in range(len(data))))
    assert blank(events) == case.events
    assert describe(conn.data_to_send()) == case.output


def test_preface_and_settings_in_any_split() -> None:
    data = PREFACE + Peer.settings({4: 1 << 20}) + Peer().headers(1, REQUEST, end_stream=True)
    for cut in range(1, len(data)):
        conn = Connection(client_side=False)
        events = feed(conn, data[:cut], data[cut:])
        assert [type(event).__name__ for event in events] == [
            "RemoteSettingsChanged",
            "RequestReceived",
        ], cut
        assert conn.handshake_complete


def test_invalid_preface() -> None:
    conn = Connection(client_side=False)
    conn.data_to_send()
    events = conn.receive_data(b"GET / HTTP/1.1\r\n\r\n", 0.0)
    assert blank(events) == [terminated(E.PROTOCOL_ERROR)]
    assert "preface" in reasons(events)
    assert conn.closed


def test_no_settings_after_the_preface() -> None:
    conn = Connection(client_side=False)
    events = conn.receive_data(PREFACE + Peer().headers(1, REQUEST), 0.0)
    assert blank(events) == [terminated(E.PROTOCOL_ERROR)]
    assert not conn.handshake_complete


def test_server_handshake_output() -> None:
    conn = Connection(client_side=False)
    assert describe(conn.data_to_send()) == [
        ("Settings", 0, (), {3: 100, 4: 1 << 20, 6: 16384}),
        ("WindowUpdate", 0, (), (4 << 20) - 65535),
    ]
