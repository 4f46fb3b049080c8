"""The HTTP/2 frame layout (RFC 9113 section 4 and 6): constants and serialisers.

Every frame starts with a 9-byte header: a 24-bit payload length, an 8-bit type, 8 bits
of flags and a 31-bit stream id (the top bit is reserved and ignored on receipt).
Parsing is done by the connection itself, straight from its input buffer with
:data:`HEADER` at an offset, because that loop is the hot path; this module holds what
both directions share and the functions that build frames to send. The builders return
``bytes`` (the connection keeps its output as a list of chunks and joins them once per
write).
"""

from __future__ import annotations

import struct

__all__ = [
    "ACK",
    "CLIENT_PREFACE",
    "CONTINUATION",
    "DATA",
    "END_HEADERS",
    "END_STREAM",
    "GOAWAY",
    "HEADER",
    "HEADERS",
    "PADDED",
    "PING",
    "PRIORITY",
    "PRIORITY_FLAG",
    "PUSH_PROMISE",
    "RST_STREAM",
    "SETTINGS",
    "SETTINGS_ACK",
    "WINDOW_UPDATE",
    "frame",
    "goaway",
    "ping",
    "rst_stream",
    "settings",
    "unpack_settings",
    "unpack_u32",
    "unpack_u32_pair",
    "window_update",
]

#: The 24 bytes a client sends first (RFC 9113 section 3.4).
CLIENT_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

#: The frame header: length as 16 + 8 bits, type, flags, stream id (with its reserved
#: bit, which the receiver masks off).
HEADER = struct.Struct(">HBBBL")

# Frame types (RFC 9113 section 6).
DATA = 0x0
HEADERS = 0x1
PRIORITY = 0x2
RST_STREAM = 0x3
SETTINGS = 0x4
PUSH_PROMISE = 0x5
PING = 0x6
GOAWAY = 0x7
WINDOW_UPDATE = 0x8
CONTINUATION = 0x9

# Flags. END_STREAM and ACK share a bit; which one it is depends on the frame type.
END_STREAM = 0x1
ACK = 0x1
END_HEADERS = 0x4
PADDED = 0x8
PRIORITY_FLAG = 0x20

_U32 = struct.Struct(">L")
_U32_PAIR = struct.Struct(">LL")
_SETTING = struct.Struct(">HL")
_PACK_HEADER = HEADER.pack


def frame(kind: int, flags: int, stream_id: int, payload: bytes = b"") -> bytes:
    """A whole frame: header and payload."""
    length = len(payload)
    return _PACK_HEADER(length >> 8, length & 0xFF, kind, flags, stream_id) + payload


def settings(values: dict[int, int]) -> bytes:
    """A SETTINGS frame carrying ``values`` (identifier -> value), in their order."""
    return frame(
        SETTINGS, 0, 0, b"".join(_SETTING.pack(key, value) for key, value in values.items())
    )


#: The SETTINGS frame that acknowledges the peer's.
SETTINGS_ACK = frame(SETTINGS, ACK, 0)


def ping(payload: bytes, *, ack: bool = False) -> bytes:
    """A PING (or PING ACK) frame; ``payload`` is exactly 8 bytes."""
    return frame(PING, ACK if ack else 0, 0, payload)


def rst_stream(stream_id: int, code: int) -> bytes:
    """An RST_STREAM frame."""
    return frame(RST_STREAM, 0, stream_id, _U32.pack(code))


def window_update(stream_id: int, increment: int) -> bytes:
    """A WINDOW_UPDATE frame (``stream_id`` 0 for the connection's window)."""
    return frame(WINDOW_UPDATE, 0, stream_id, _U32.pack(increment))


def goaway(last_stream_id: int, code: int, debug: bytes = b"") -> bytes:
    """A GOAWAY frame."""
    return frame(GOAWAY, 0, 0, _U32_PAIR.pack(last_stream_id, code) + debug)


def unpack_u32(data: bytes, offset: int) -> int:
    """The 32-bit big-endian integer at ``offset``."""
    value: int = _U32.unpack_from(data, offset)[0]
    return value


def unpack_u32_pair(data: bytes, offset: int) -> tuple[int, int]:
    """The two 32-bit big-endian integers at ``offset``."""
    first, second = _U32_PAIR.unpack_from(data, offset)
    return first, second


def unpack_settings(data: bytes, start: int, end: int) -> list[tuple[int, int]]:
    """The (identifier, value) pairs of a SETTINGS payload; its length is a multiple of 6."""
    return [_SETTING.unpack_from(data, offset) for offset in range(start, end, 6)]
