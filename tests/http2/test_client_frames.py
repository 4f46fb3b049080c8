"""Client role, frame by frame: bytes a server sends -> our events and our answer.

Each row: what the client did first (open streams), the bytes the scripted server
sends, the events expected, the frames we queue in reply, and a word the reason of a
stream or connection error must contain.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

from sepp_anyio._http2 import (
    Connection,
    ConnectionTerminated,
    DataReceived,
    ErrorCode,
    Event,
    GoAwayReceived,
    PingAcknowledged,
    PingReceived,
    RemoteSettingsChanged,
    ResponseReceived,
    SettingsAcknowledged,
    StreamReset,
    TrailersReceived,
    WindowUpdated,
)

from ._support import REQUEST, RESPONSE, TRAILERS, Peer, client, describe, feed, raw

E = ErrorCode
RESP = tuple(RESPONSE)
TRAIL = tuple(TRAILERS)


def terminated(code: ErrorCode, last: int = 0) -> ConnectionTerminated:
    return ConnectionTerminated(code, "", last)


def reset(stream_id: int, code: ErrorCode, remote: bool = False) -> StreamReset:
    return StreamReset(stream_id, code, remote, "")


def goaway(code: ErrorCode, last: int = 0) -> tuple[Any, ...]:
    return ("GoAway", 0, (), last, code)


def rst(stream_id: int, code: ErrorCode) -> tuple[Any, ...]:
    return ("RstStream", stream_id, (), code)


def blank(events: list[Event]) -> list[Event]:
    """The events with the reasons of errors blanked (checked separately)."""
    out: list[Event] = []
    for event in events:
        if isinstance(event, StreamReset):
            event = StreamReset(event.stream_id, event.error_code, event.remote, "")
        elif isinstance(event, ConnectionTerminated):
            event = ConnectionTerminated(event.error_code, "", event.last_stream_id)
        out.append(event)
    return out


def reasons(events: list[Event]) -> str:
    return " ".join(
        event.reason for event in events if isinstance(event, StreamReset | ConnectionTerminated)
    )


def open1(conn: Connection) -> None:
    conn.open_stream(REQUEST)


def open1_ended(conn: Connection) -> None:
    conn.open_stream(REQUEST, end_stream=True)


def open3(conn: Connection) -> None:
    for _ in range(3):
        conn.open_stream(REQUEST, end_stream=True)


def open1_reset(conn: Connection) -> None:
    sid = conn.open_stream(REQUEST)
    conn.reset_stream(sid)


def open1_reset_then_open3(conn: Connection) -> None:
    open1_reset(conn)
    conn.open_stream(REQUEST, end_stream=True)


@dataclass
class Case:
    name: str
    frames: Callable[[Peer], bytes]
    events: list[Event]
    output: list[tuple[Any, ...]] = field(default_factory=list)
    setup: Callable[[Connection], None] = open1_ended
    reason: str = ""
    closed: bool = False


big_value = b"v" * (17 << 10)

CASES = [
    # DATA --------------------------------------------------------------
    Case(
        "response, data, trailers",
        lambda p: (
            p.headers(1, RESPONSE) + p.data(1, b"abc") + p.headers(1, TRAILERS, end_stream=True)
        ),
        [
            ResponseReceived(1, RESP, False),
            DataReceived(1, b"abc", 3, False),
            TrailersReceived(1, TRAIL),
        ],
    ),
    Case(
        "trailers-only response",
        lambda p: p.headers(1, [*RESPONSE, (b"grpc-status", b"5")], end_stream=True),
        [ResponseReceived(1, (*RESP, (b"grpc-status", b"5")), True)],
    ),
    Case(
        "data ends the stream",
        lambda p: p.headers(1, RESPONSE) + p.data(1, b"xy", end_stream=True),
        [ResponseReceived(1, RESP, False), DataReceived(1, b"xy", 2, True)],
    ),
    Case(
        "padded data counts its padding",
        lambda p: p.headers(1, RESPONSE) + p.data(1, b"abc", pad=10),
        [ResponseReceived(1, RESP, False), DataReceived(1, b"abc", 14, False)],
    ),
    Case(
        "data on stream 0",
        lambda p: raw(0x0, 0, 0, b"x"),
        [terminated(E.PROTOCOL_ERROR)],
        [goaway(E.PROTOCOL_ERROR)],
        reason="stream 0",
        closed=True,
    ),
    Case(
        "data on an idle stream",
        lambda p: p.data(3, b"x"),
        [terminated(E.PROTOCOL_ERROR)],
        [goaway(E.PROTOCOL_ERROR)],
        reason="idle",
        closed=True,
    ),
    Case(
        "data on a server-initiated stream",
        lambda p: p.data(2, b"x"),
        [terminated(E.PROTOCOL_ERROR)],
        [goaway(E.PROTOCOL_ERROR)],
        reason="idle",
        closed=True,
    ),
    Case(
        "padding as long as the payload",
        lambda p: p.headers(1, RESPONSE) + raw(0x0, 0x8, 1, b"\x04abc"),
        [ResponseReceived(1, RESP, False), terminated(E.PROTOCOL_ERROR)],
        [goaway(E.PROTOCOL_ERROR)],
        reason="padding",
        closed=True,
    ),
    Case(
        "padded data without a pad length",
        lambda p: raw(0x0, 0x8, 1, b""),
        [terminated(E.PROTOCOL_ERROR)],
        [goaway(E.PROTOCOL_ERROR)],
        reason="padding",
        closed=True,
    ),
    Case(
        "data before the response headers",
        lambda p: p.data(1, b"x"),
        [DataReceived(1, b"x", 1, False)],
    ),
    Case(
        "data on a stream we reset is ignored",
        lambda p: p.headers(1, RESPONSE) + p.data(1, b"late"),
        [],
        setup=open1_reset,
    ),
    Case(
        "data after the server ended the stream",
        lambda p: p.headers(1, RESPONSE, end_stream=True) + p.data(1, b"x"),
        [ResponseReceived(1, RESP, True), reset(1, E.STREAM_CLOSED)],
        [rst(1, E.STREAM_CLOSED)],
        setup=open1,
        reason="after the end",
    ),
    Case(
        # RFC 9113 section 5.1 (h2spec http2/5.1/11 for the server role).
        "data on a stream that completed ends the connection",
        lambda p: p.headers(1, RESPONSE, end_stream=True) + p.data(1, b"x"),
        [ResponseReceived(1, RESP, True), terminated(E.STREAM_CLOSED)],
        [goaway(E.STREAM_CLOSED)],
        reason="both sides ended",
        closed=True,
    ),
    Case(
        "data on a stream the server reset",
        lambda p: p.rst(1, 8) + p.data(1, b"x"),
        [reset(1, E.CANCEL, remote=True)],
        [rst(1, E.STREAM_CLOSED)],
        setup=open1,
    ),
    # HEADERS -----------------------------------------------------------
    Case(
        "padded headers with priority",
        lambda p: p.headers(1, RESPONSE, pad=7, priority=True, end_stream=True),
        [ResponseReceived(1, RESP, True)],
    ),
    Case(
        "headers padding beyond the frame",
        lambda p: raw(0x1, 0x4 | 0x8, 1, b"\x40" + p.block(RESPONSE)),
        [terminated(E.PROTOCOL_ERROR)],
        [goaway(E.PROTOCOL_ERROR)],
        reason="padding",
        closed=True,
    ),
    Case(
        "informational response is skipped",
        lambda p: p.headers(1, [(b":status", b"100")]) + p.headers(1, RESPONSE, end_stream=True),
        [ResponseReceived(1, RESP, True)],
    ),
    Case(
        "informational response with END_STREAM",
        lambda p: p.headers(1, [(b":status", b"103")], end_stream=True),
        [reset(1, E.PROTOCOL_ERROR)],
        [rst(1, E.PROTOCOL_ERROR)],
        reason="informational",
    ),
    Case(
        "trailers without END_STREAM",
        lambda p: p.headers(1, RESPONSE) + p.headers(1, TRAILERS),
        [ResponseReceived(1, RESP, False), reset(1, E.PROTOCOL_ERROR)],
        [rst(1, E.PROTOCOL_ERROR)],
        reason="trailers",
    ),
    Case(
        "pseudo-header in trailers",
        lambda p: p.headers(1, RESPONSE) + p.headers(1, [(b":status", b"200")], end_stream=True),
        [ResponseReceived(1, RESP, False), reset(1, E.PROTOCOL_ERROR)],
        [rst(1, E.PROTOCOL_ERROR)],
        reason="pseudo-header",
    ),
    Case(
        "uppercase field name",
        lambda p: p.headers(1, [(b":status", b"200"), (b"Content-Type", b"x")]),
        [reset(1, E.PROTOCOL_ERROR)],
        [rst(1, E.PROTOCOL_ERROR)],
        reason="lowercase",
    ),
    Case(
        "response without :status",
        lambda p: p.headers(1, [(b"content-type", b"x")]),
        [reset(1, E.PROTOCOL_ERROR)],
        [rst(1, E.PROTOCOL_ERROR)],
        reason=":status",
    ),
    Case(
        ":status twice",
        lambda p: p.headers(1, [(b":status", b"200"), (b":status", b"200")]),
        [reset(1, E.PROTOCOL_ERROR)],
        [rst(1, E.PROTOCOL_ERROR)],
        reason="twice",
    ),
    Case(
        ":status not three digits",
        lambda p: p.headers(1, [(b":status", b"20x")]),
        [reset(1, E.PROTOCOL_ERROR)],
        [rst(1, E.PROTOCOL_ERROR)],
        reason="three digits",
    ),
    Case(
        "request pseudo-header in a response",
        lambda p: p.headers(1, [(b":status", b"200"), (b":path", b"/")]),
        [reset(1, E.PROTOCOL_ERROR)],
        [rst(1, E.PROTOCOL_ERROR)],
        reason="not allowed",
    ),
    Case(
        "pseudo-header after a regular field",
        lambda p: p.headers(1, [(b"content-type", b"x"), (b":status", b"200")]),
        [reset(1, E.PROTOCOL_ERROR)],
        [rst(1, E.PROTOCOL_ERROR)],
        reason="after a regular",
    ),
    Case(
        "connection-specific field",
        lambda p: p.headers(1, [*RESPONSE, (b"connection", b"close")]),
        [reset(1, E.PROTOCOL_ERROR)],
        [rst(1, E.PROTOCOL_ERROR)],
        reason="connection-specific",
    ),
    Case(
        "te other than trailers",
        lambda p: p.headers(1, [*RESPONSE, (b"te", b"gzip")]),
        [reset(1, E.PROTOCOL_ERROR)],
        [rst(1, E.PROTOCOL_ERROR)],
        reason="'te'",
    ),
    Case(
        "NUL in a value",
        lambda p: p.headers(1, [*RESPONSE, (b"x-a", b"a\x00b")]),
        [reset(1, E.PROTOCOL_ERROR)],
        [rst(1, E.PROTOCOL_ERROR)],
        reason="NUL",
    ),
    Case(
        "control character in a value",
        lambda p: p.headers(1, [*RESPONSE, (b"x-a", b"a\x07b")]),
        [reset(1, E.PROTOCOL_ERROR)],
        [rst(1, E.PROTOCOL_ERROR)],
        reason="'x-a' has a control character",
    ),
    Case(
        "leading whitespace in a value",
        lambda p: p.headers(1, [*RESPONSE, (b"x-a", b" a")]),
        [reset(1, E.PROTOCOL_ERROR)],
        [rst(1, E.PROTOCOL_ERROR)],
        reason="whitespace",
    ),
    Case(
        "obs-text (0x80-0xFF) in a value is valid HTTP",
        lambda p: p.headers(1, [*RESPONSE, (b"x-a", "grüße".encode())], end_stream=True),
        [ResponseReceived(1, (*RESP, (b"x-a", "grüße".encode())), True)],
    ),
    Case(
        "tab inside a value",
        lambda p: p.headers(1, [*RESPONSE, (b"x-a", b"a\tb")], end_stream=True),
        [ResponseReceived(1, (*RESP, (b"x-a", b"a\tb")), True)],
    ),
    Case(
        "content-length that the data does not match",
        lambda p: (
            p.headers(1, [*RESPONSE, (b"content-length", b"5")])
            + p.data(1, b"abc", end_stream=True)
        ),
        [
            ResponseReceived(1, (*RESP, (b"content-length", b"5")), False),
            reset(1, E.PROTOCOL_ERROR),
        ],
        [rst(1, E.PROTOCOL_ERROR)],
        reason="content-length",
    ),
    Case(
        "content-length that matches",
        lambda p: (
            p.headers(1, [*RESPONSE, (b"content-length", b"3")])
            + p.data(1, b"abc", end_stream=True)
        ),
        [
            ResponseReceived(1, (*RESP, (b"content-length", b"3")), False),
            DataReceived(1, b"abc", 3, True),
        ],
    ),
    Case(
        "response headers over the header-list limit",
        lambda p: p.headers(1, [*RESPONSE, (b"x-big", big_value)]),
        [reset(1, E.CANCEL)],
        [rst(1, E.CANCEL)],
        reason="exceed the limit of 16384",
    ),
    Case(
        "headers on stream 0",
        lambda p: raw(0x1, 0x4, 0, b"\x88"),
        [terminated(E.PROTOCOL_ERROR)],
        [goaway(E.PROTOCOL_ERROR)],
        reason="stream 0",
        closed=True,
    ),
    Case(
        "headers on a server-initiated stream (push is off)",
        lambda p: p.headers(2, RESPONSE),
        [terminated(E.PROTOCOL_ERROR)],
        [goaway(E.PROTOCOL_ERROR)],
        reason="idle",
        closed=True,
    ),
    Case(
        "headers on an idle stream",
        lambda p: p.headers(5, RESPONSE),
        [terminated(E.PROTOCOL_ERROR)],
        [goaway(E.PROTOCOL_ERROR)],
        reason="idle",
        closed=True,
    ),
    Case(
        "headers on a stream we reset are decoded and ignored",
        lambda p: (
            p.headers(1, [*RESPONSE, (b"x-new", b"1")])
            + p.headers(3, [*RESPONSE, (b"x-new", b"1")], end_stream=True)
        ),
        [ResponseReceived(3, (*RESP, (b"x-new", b"1")), True)],
        setup=open1_reset_then_open3,
    ),
    Case(
        "header block in CONTINUATIONs",
        lambda p: (
            lambda b: (
                p.headers_block(1, b[:2], end_headers=False)
                + p.continuation(1, b[2:4], end_headers=False)
                + p.continuation(1, b[4:])
            )
        )(p.block(RESPONSE + TRAILERS)),
        [ResponseReceived(1, (*RESP, *TRAIL), False)],
    ),
    Case(
        "CONTINUATION without a header block",
        lambda p: p.continuation(1, b"\x88"),
        [terminated(E.PROTOCOL_ERROR)],
        [goaway(E.PROTOCOL_ERROR)],
        reason="CONTINUATION",
        closed=True,
    ),
    Case(
        "header block interrupted by another frame",
        lambda p: p.headers_block(1, b"\x88", end_headers=False) + p.ping(),
        [terminated(E.PROTOCOL_ERROR)],
        [goaway(E.PROTOCOL_ERROR)],
        reason="interrupted",
        closed=True,
    ),
    Case(
        "CONTINUATION on another stream",
        lambda p: p.headers_block(1, b"\x88", end_headers=False) + p.continuation(3, b"\x88"),
        [terminated(E.PROTOCOL_ERROR)],
        [goaway(E.PROTOCOL_ERROR)],
        reason="interrupted",
        closed=True,
        setup=open3,
    ),
    Case(
        "undecodable header block",
        lambda p: p.headers_block(1, b"\xff\xff\xff\xff\xff\xff\xff"),
        [terminated(E.COMPRESSION_ERROR)],
        [goaway(E.COMPRESSION_ERROR)],
        reason="undecodable",
        closed=True,
    ),
    Case(
        "reference to a table entry that does not exist",
        lambda p: p.headers_block(1, b"\xc8"),
        [terminated(E.COMPRESSION_ERROR)],
        [goaway(E.COMPRESSION_ERROR)],
        closed=True,
    ),
    Case(
        "truncated literal",
        lambda p: p.headers_block(1, b"\x88\x00\x05ab"),
        [terminated(E.COMPRESSION_ERROR)],
        [goaway(E.COMPRESSION_ERROR)],
        reason="truncated",
        closed=True,
    ),
    Case(
        "table size update after a field",
        lambda p: p.headers_block(1, b"\x88\x3f\xe1\x1f"),
        [terminated(E.COMPRESSION_ERROR)],
        [goaway(E.COMPRESSION_ERROR)],
        closed=True,
    ),
    Case(
        "table size update beyond our table",
        lambda p: p.headers_block(1, b"\x3f\xe2\x1f\x88"),
        [terminated(E.COMPRESSION_ERROR)],
        [goaway(E.COMPRESSION_ERROR)],
        closed=True,
    ),
    # RST_STREAM --------------------------------------------------------
    Case(
        "reset of an open stream",
        lambda p: p.rst(1, 8),
        [reset(1, E.CANCEL, remote=True)],
    ),
    Case(
        "reset with an unknown code",
        lambda p: p.rst(1, 0x99),
        [StreamReset(1, 0x99, True, "")],
    ),
    Case(
        "reset on stream 0",
        lambda p: raw(0x3, 0, 0, b"\0\0\0\x08"),
        [terminated(E.PROTOCOL_ERROR)],
        [goaway(E.PROTOCOL_ERROR)],
        closed=True,
    ),
    Case(
        "reset of an idle stream",
        lambda p: p.rst(3, 8),
        [terminated(E.PROTOCOL_ERROR)],
        [goaway(E.PROTOCOL_ERROR)],
        reason="idle",
        closed=True,
    ),
    Case(
        "reset of a closed stream is ignored",
        lambda p: p.headers(1, RESPONSE, end_stream=True) + p.rst(1, 0),
        [ResponseReceived(1, RESP, True)],
    ),
    Case(
        "reset of the wrong length",
        lambda p: raw(0x3, 0, 1, b"\0\0\0\x08\0"),
        [terminated(E.FRAME_SIZE_ERROR)],
        [goaway(E.FRAME_SIZE_ERROR)],
        closed=True,
    ),
    # SETTINGS ----------------------------------------------------------
    Case(
        "settings are applied and acknowledged",
        lambda p: p.settings({3: 7, 4: 100, 0x99: 1}),
        [RemoteSettingsChanged({3: 7, 4: 100})],
        [("Settings", 0, ("ACK",), {})],
    ),
    Case(
        "settings ACK",
        lambda p: p.settings(ack=True),
        [],
        setup=lambda c: None,
    ),
    Case(
        "settings on a stream",
        lambda p: raw(0x4, 0, 1, b""),
        [terminated(E.PROTOCOL_ERROR)],
        [goaway(E.PROTOCOL_ERROR)],
        closed=True,
    ),
    Case(
        "settings not a multiple of 6",
        lambda p: raw(0x4, 0, 0, b"\0\x03\0\0\0"),
        [terminated(E.FRAME_SIZE_ERROR)],
        [goaway(E.FRAME_SIZE_ERROR)],
        closed=True,
    ),
    Case(
        "settings ACK with a payload",
        lambda p: raw(0x4, 0x1, 0, b"\0\x03\0\0\0\x01"),
        [terminated(E.FRAME_SIZE_ERROR)],
        [goaway(E.FRAME_SIZE_ERROR)],
        closed=True,
    ),
    Case(
        "server enables push",
        lambda p: p.settings({2: 1}),
        [terminated(E.PROTOCOL_ERROR)],
        [goaway(E.PROTOCOL_ERROR)],
        reason="ENABLE_PUSH",
        closed=True,
    ),
    Case(
        "initial window over 2**31 - 1",
        lambda p: p.settings({4: 1 << 31}),
        [terminated(E.FLOW_CONTROL_ERROR)],
        [goaway(E.FLOW_CONTROL_ERROR)],
        closed=True,
    ),
    Case(
        "max frame size too small",
        lambda p: p.settings({5: 16383}),
        [terminated(E.PROTOCOL_ERROR)],
        [goaway(E.PROTOCOL_ERROR)],
        closed=True,
    ),
    Case(
        "max frame size too large",
        lambda p: p.settings({5: 1 << 24}),
        [terminated(E.PROTOCOL_ERROR)],
        [goaway(E.PROTOCOL_ERROR)],
        closed=True,
    ),
    Case(
        # RFC 9113 section 6.5.3: in order, the last value wins.
        "a setting twice",
        lambda p: raw(0x4, 0, 0, b"\0\x03\0\0\0\x01\0\x03\0\0\0\x02"),
        [RemoteSettingsChanged({3: 2})],
        [("Settings", 0, ("ACK",), {})],
    ),
    Case(
        "too many settings",
        lambda p: raw(0x4, 0, 0, b"".join(bytes((0, 0x10 + i)) + b"\0\0\0\0" for i in range(33))),
        [terminated(E.ENHANCE_YOUR_CALM)],
        [goaway(E.ENHANCE_YOUR_CALM)],
        reason="33 entries",
        closed=True,
    ),
    # PING --------------------------------------------------------------
    Case(
        "ping is answered",
        lambda p: p.ping(b"abcdefgh"),
        [PingReceived(b"abcdefgh")],
        [("Ping", 0, ("ACK",), b"abcdefgh")],
    ),
    Case(
        "ping ACK",
        lambda p: p.ping(b"abcdefgh", ack=True),
        [PingAcknowledged(b"abcdefgh")],
    ),
    Case(
        "ping on a stream",
        lambda p: raw(0x6, 0, 1, b"12345678"),
        [terminated(E.PROTOCOL_ERROR)],
        [goaway(E.PROTOCOL_ERROR)],
        closed=True,
    ),
    Case(
        "ping of the wrong length",
        lambda p: raw(0x6, 0, 0, b"1234567"),
        [terminated(E.FRAME_SIZE_ERROR)],
        [goaway(E.FRAME_SIZE_ERROR)],
        closed=True,
    ),
    # GOAWAY ------------------------------------------------------------
    Case(
        "graceful goaway: streams above it were not processed",
        lambda p: p.goaway(1, 0, b"bye") + p.headers(1, RESPONSE, end_stream=True),
        [GoAwayReceived(E.NO_ERROR, 1, b"bye", (3, 5)), ResponseReceived(1, RESP, True)],
        setup=open3,
    ),
    Case(
        "error goaway closes the connection",
        lambda p: p.goaway(1, 2) + p.headers(1, RESPONSE, end_stream=True),
        [GoAwayReceived(E.INTERNAL_ERROR, 1, b"", (3, 5))],
        setup=open3,
        closed=True,
    ),
    Case(
        "two-step goaway",
        lambda p: p.goaway((1 << 31) - 1) + p.goaway(3),
        [
            GoAwayReceived(E.NO_ERROR, (1 << 31) - 1, b"", ()),
            GoAwayReceived(E.NO_ERROR, 3, b"", (5,)),
        ],
        setup=open3,
    ),
    Case(
        "goaway raising its last stream id",
        lambda p: p.goaway(1) + p.goaway(3),
        [GoAwayReceived(E.NO_ERROR, 1, b"", (3, 5)), terminated(E.PROTOCOL_ERROR)],
        [goaway(E.PROTOCOL_ERROR)],
        setup=open3,
        closed=True,
    ),
    Case(
        "goaway on a stream",
        lambda p: raw(0x7, 0, 1, b"\0" * 8),
        [terminated(E.PROTOCOL_ERROR)],
        [goaway(E.PROTOCOL_ERROR)],
        closed=True,
    ),
    Case(
        "goaway too short",
        lambda p: raw(0x7, 0, 0, b"\0" * 7),
        [terminated(E.FRAME_SIZE_ERROR)],
        [goaway(E.FRAME_SIZE_ERROR)],
        closed=True,
    ),
    # WINDOW_UPDATE -----------------------------------------------------
    Case(
        "connection window update",
        lambda p: p.window_update(0, 1000),
        [WindowUpdated(0, 1000)],
    ),
    Case(
        "stream window update",
        lambda p: p.window_update(1, 1000),
        [WindowUpdated(1, 1000)],
        setup=open1,
    ),
    Case(
        "connection window update of 0",
        lambda p: raw(0x8, 0, 0, b"\0\0\0\0"),
        [terminated(E.PROTOCOL_ERROR)],
        [goaway(E.PROTOCOL_ERROR)],
        closed=True,
    ),
    Case(
        "stream window update of 0",
        lambda p: raw(0x8, 0, 1, b"\0\0\0\0"),
        [reset(1, E.PROTOCOL_ERROR)],
        [rst(1, E.PROTOCOL_ERROR)],
    ),
    Case(
        "connection window over 2**31 - 1",
        lambda p: p.window_update(0, (1 << 31) - 1),
        [terminated(E.FLOW_CONTROL_ERROR)],
        [goaway(E.FLOW_CONTROL_ERROR)],
        closed=True,
    ),
    Case(
        "stream window over 2**31 - 1",
        lambda p: p.window_update(1, (1 << 31) - 1),
        [reset(1, E.FLOW_CONTROL_ERROR)],
        [rst(1, E.FLOW_CONTROL_ERROR)],
    ),
    Case(
        "window update on an idle stream",
        lambda p: p.window_update(7, 1),
        [terminated(E.PROTOCOL_ERROR)],
        [goaway(E.PROTOCOL_ERROR)],
        closed=True,
    ),
    Case(
        "window update on a closed stream is ignored",
        lambda p: p.headers(1, RESPONSE, end_stream=True) + p.window_update(1, 1),
        [ResponseReceived(1, RESP, True)],
    ),
    Case(
        "window update of the wrong length",
        lambda p: raw(0x8, 0, 0, b"\0\0\0\x01\0"),
        [terminated(E.FRAME_SIZE_ERROR)],
        [goaway(E.FRAME_SIZE_ERROR)],
        closed=True,
    ),
    # Others ------------------------------------------------------------
    Case("priority is ignored", lambda p: p.priority(1) + p.priority(9), []),
    Case(
        "priority on stream 0",
        lambda p: raw(0x2, 0, 0, b"\0\0\0\0\x01"),
        [terminated(E.PROTOCOL_ERROR)],
        [goaway(E.PROTOCOL_ERROR)],
        closed=True,
    ),
    Case(
        "priority of the wrong length",
        lambda p: raw(0x2, 0, 1, b"\0\0\0\0"),
        [terminated(E.FRAME_SIZE_ERROR)],
        [goaway(E.FRAME_SIZE_ERROR)],
        closed=True,
    ),
    Case(
        "push promise",
        lambda p: raw(0x5, 0x4, 1, b"\0\0\0\x02\x88"),
        [terminated(E.PROTOCOL_ERROR)],
        [goaway(E.PROTOCOL_ERROR)],
        reason="PUSH_PROMISE",
        closed=True,
    ),
    Case("unknown frame type is ignored", lambda p: raw(0xEE, 0xFF, 1, b"whatever"), []),
    Case(
        "frame over our max frame size, refused on its header",
        lambda p: raw(0x0, 0, 1, b"", length=16385),
        [terminated(E.FRAME_SIZE_ERROR)],
        [goaway(E.FRAME_SIZE_ERROR)],
        reason="16385",
        closed=True,
    ),
    Case(
        "frames after a connection error are not processed",
        lambda p: raw(0x6, 0, 0, b"1") + p.headers(1, RESPONSE),
        [terminated(E.FRAME_SIZE_ERROR)],
        [goaway(E.FRAME_SIZE_ERROR)],
        closed=True,
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_client_frame(case: Case) -> None:
    conn = client()
    case.setup(conn)
    conn.data_to_send()
    peer = Peer()
    events = feed(conn, case.frames(peer))
    assert blank(events) == case.events
    assert describe(conn.data_to_send()) == case.output
    assert case.reason in reasons(events)
    assert conn.closed is case.closed


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_client_frame_byte_by_byte(case: Case) -> None:
    """The same bytes one at a time: the same events and the same answer."""
    conn = client()
    case.setup(conn)
    conn.data_to_send()
    data = case.frames(Peer())
    events = feed(conn, *(data[i : i + 1] for i in range(len(data))))
    assert blank(events) == case.events
    assert describe(conn.data_to_send()) == case.output


def test_first_frame_must_be_settings() -> None:
    conn = Connection(client_side=True)
    conn.data_to_send()
    events = conn.receive_data(Peer.ping(), 0.0)
    assert blank(events) == [terminated(E.PROTOCOL_ERROR)]
    assert "first frame" in reasons(events)


def test_a_first_frame_that_is_not_settings_is_refused_before_its_length() -> None:
    """Text from an HTTP/1 server read as a frame header: "not SETTINGS" (PROTOCOL_ERROR),
    not the frame size error its made-up length would give."""
    conn = Connection(client_side=True)
    conn.data_to_send()
    events = conn.receive_data(b"HTTP/1.0 400 Bad Request\r\n\r\n", 0.0)
    assert blank(events) == [terminated(E.PROTOCOL_ERROR)]
    assert "first frame is not SETTINGS" in reasons(events)


def test_handshake() -> None:
    conn = Connection(client_side=True, stream_window=1 << 20, connection_window=16 << 20)
    out = conn.data_to_send()
    assert out.startswith(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
    assert describe(out[24:]) == [
        ("Settings", 0, (), {2: 0, 4: 1 << 20, 6: 16384}),
        ("WindowUpdate", 0, (), (16 << 20) - 65535),
    ]
    before = (conn.handshake_complete, conn.settings_acknowledged)
    events = conn.receive_data(Peer.settings({3: 10}) + Peer.settings(ack=True), 0.0)
    assert events == [RemoteSettingsChanged({3: 10}), SettingsAcknowledged()]
    assert before == (False, False)
    assert (conn.handshake_complete, conn.settings_acknowledged) == (True, True)
    assert conn.peer_max_concurrent_streams == 10
    assert describe(conn.data_to_send()) == [("Settings", 0, ("ACK",), {})]
