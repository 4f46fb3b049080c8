"""A scripted HTTP/2 peer for the codec's tests: hyperframe builds and parses the frames,
hpack keeps the peer's own compression state, so nothing of ours checks ourselves."""

from __future__ import annotations

import struct
from collections.abc import Iterable, Sequence
from typing import Any

import hpack
from hyperframe.frame import (
    ContinuationFrame,
    DataFrame,
    Frame,
    GoAwayFrame,
    HeadersFrame,
    PingFrame,
    PriorityFrame,
    RstStreamFrame,
    SettingsFrame,
    WindowUpdateFrame,
)

from sepp_anyio._http2 import Connection, Event, Limits

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

REQUEST = [
    (b":method", b"POST"),
    (b":scheme", b"http"),
    (b":path", b"/svc/Method"),
    (b":authority", b"localhost"),
    (b"content-type", b"application/grpc"),
    (b"te", b"trailers"),
]
RESPONSE = [(b":status", b"200"), (b"content-type", b"application/grpc")]
TRAILERS = [(b"grpc-status", b"0")]


def raw(
    kind: int, flags: int, stream_id: int, payload: bytes = b"", length: int | None = None
) -> bytes:
    """A frame built by hand (for frames hyperframe refuses to build)."""
    size = len(payload) if length is None else length
    return (
        struct.pack(">I", size)[1:] + bytes((kind, flags)) + struct.pack(">I", stream_id) + payload
    )


def parse(data: bytes) -> list[Frame]:
    """The frames in ``data`` (which must hold whole frames only)."""
    frames: list[Frame] = []
    view = memoryview(data)
    while view:
        frame, length = Frame.parse_frame_header(view[:9])
        frame.parse_body(view[9 : 9 + length])
        frames.append(frame)
        view = view[9 + length :]
    return frames


def describe(data: bytes) -> list[tuple[Any, ...]]:
    """Our output as comparable tuples: (type name, stream id, sorted flags, details)."""
    out: list[tuple[Any, ...]] = []
    for frame in parse(data):
        name = type(frame).__name__.removesuffix("Frame")
        flags = tuple(sorted(frame.flags))
        if isinstance(frame, RstStreamFrame):
            out.append((name, frame.stream_id, flags, frame.error_code))
        elif isinstance(frame, GoAwayFrame):
            out.append((name, frame.stream_id, flags, frame.last_stream_id, frame.error_code))
        elif isinstance(frame, WindowUpdateFrame):
            out.append((name, frame.stream_id, flags, frame.window_increment))
        elif isinstance(frame, PingFrame):
            out.append((name, frame.stream_id, flags, bytes(frame.opaque_data)))
        elif isinstance(frame, SettingsFrame):
            out.append((name, frame.stream_id, flags, dict(frame.settings)))
        elif isinstance(frame, DataFrame):
            out.append((name, frame.stream_id, flags, bytes(frame.data)))
        else:
            out.append((name, frame.stream_id, flags))
    return out


class Peer:
    """The other end, scripted: it builds frames and keeps its own HPACK state."""

    def __init__(self) -> None:
        self.encoder = hpack.Encoder()
        self.decoder = hpack.Decoder()

    def block(self, headers: Sequence[tuple[bytes, bytes]]) -> bytes:
        return self.encoder.encode(headers)

    def headers(
        self,
        stream_id: int,
        headers: Sequence[tuple[bytes, bytes]],
        *,
        end_stream: bool = False,
        end_headers: bool = True,
        pad: int | None = None,
        priority: bool = False,
        depends_on: int = 0,
    ) -> bytes:
        return self.headers_block(
            stream_id,
            self.block(headers),
            end_stream=end_stream,
            end_headers=end_headers,
            pad=pad,
            priority=priority,
            depends_on=depends_on,
        )

    @staticmethod
    def headers_block(
        stream_id: int,
        block: bytes,
        *,
        end_stream: bool = False,
        end_headers: bool = True,
        pad: int | None = None,
        priority: bool = False,
        depends_on: int = 0,
    ) -> bytes:
        flags = []
        if end_stream:
            flags.append("END_STREAM")
        if end_headers:
            flags.append("END_HEADERS")
        frame = HeadersFrame(stream_id, data=block, flags=flags)
        if pad is not None:
            frame.flags.add("PADDED")
            frame.pad_length = pad
        if priority:
            frame.flags.add("PRIORITY")
            frame.depends_on = depends_on
            frame.stream_weight = 15
        return bytes(frame.serialize())

    @staticmethod
    def continuation(stream_id: int, fragment: bytes, *, end_headers: bool = True) -> bytes:
        flags = ["END_HEADERS"] if end_headers else []
        return bytes(ContinuationFrame(stream_id, data=fragment, flags=flags).serialize())

    @staticmethod
    def data(
        stream_id: int, payload: bytes, *, end_stream: bool = False, pad: int | None = None
    ) -> bytes:
        frame = DataFrame(stream_id, data=payload, flags=["END_STREAM"] if end_stream else [])
        if pad is not None:
            frame.flags.add("PADDED")
            frame.pad_length = pad
        return bytes(frame.serialize())

    @staticmethod
    def settings(values: dict[int, int] | None = None, *, ack: bool = False) -> bytes:
        frame = SettingsFrame(0, settings=values or {}, flags=["ACK"] if ack else [])
        return bytes(frame.serialize())

    @staticmethod
    def settings_entries(entries: Sequence[tuple[int, int]]) -> bytes:
        """A SETTINGS frame with ``entries`` in this order, repeats included (hyperframe
        keeps them in a dict, so it cannot send an identifier twice)."""
        payload = b"".join(struct.pack(">HI", key, value) for key, value in entries)
        return raw(0x4, 0, 0, payload)

    @staticmethod
    def ping(payload: bytes = b"12345678", *, ack: bool = False) -> bytes:
        return bytes(PingFrame(0, opaque_data=payload, flags=["ACK"] if ack else []).serialize())

    @staticmethod
    def rst(stream_id: int, code: int) -> bytes:
        return bytes(RstStreamFrame(stream_id, error_code=code).serialize())

    @staticmethod
    def window_update(stream_id: int, increment: int) -> bytes:
        return bytes(WindowUpdateFrame(stream_id, window_increment=increment).serialize())

    @staticmethod
    def goaway(last_stream_id: int, code: int = 0, debug: bytes = b"") -> bytes:
        frame = GoAwayFrame(
            0, last_stream_id=last_stream_id, error_code=code, additional_data=debug
        )
        return bytes(frame.serialize())

    @staticmethod
    def priority(stream_id: int, depends_on: int = 0) -> bytes:
        return bytes(PriorityFrame(stream_id, depends_on=depends_on, stream_weight=1).serialize())


def client(
    limits: Limits | None = None, *, settings: dict[int, int] | None = None, **kwargs: Any
) -> Connection:
    """Our client after the handshake with a peer that sent ``settings``; output cleared."""
    conn = Connection(client_side=True, limits=limits or Limits(), **kwargs)
    conn.data_to_send()
    events = conn.receive_data(Peer.settings(settings) + Peer.settings(ack=True), 0.0)
    assert not conn.closed, events
    conn.data_to_send()
    return conn


def server(
    limits: Limits | None = None, *, settings: dict[int, int] | None = None, **kwargs: Any
) -> Connection:
    """Our server after the client's preface and ``settings``; output cleared."""
    conn = Connection(client_side=False, limits=limits or Limits(), **kwargs)
    conn.data_to_send()
    events = conn.receive_data(PREFACE + Peer.settings(settings) + Peer.settings(ack=True), 0.0)
    assert not conn.closed, events
    conn.data_to_send()
    return conn


def feed(conn: Connection, *chunks: bytes, now: float = 0.0) -> list[Event]:
    """Feed ``chunks`` one ``receive_data`` each; all the events."""
    events: list[Event] = []
    for chunk in chunks:
        events += conn.receive_data(chunk, now)
    return events


def split(data: bytes, sizes: Iterable[int]) -> list[bytes]:
    """``data`` cut into pieces of ``sizes`` (the rest in a last piece)."""
    pieces, pos = [], 0
    for size in sizes:
        pieces.append(data[pos : pos + size])
        pos += size
    pieces.append(data[pos:])
    return [piece for piece in pieces if piece]
