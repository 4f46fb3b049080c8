"""The protobuf wire format's primitives, for the compiled codecs.

The generated encoders and decoders (``_codecs_generated``, written by
``proto/codecgen.py``) call these: varints, skipping unknown fields, the errors that
name a field, and the Timestamp/Duration arithmetic of the generated well-known types,
written out so that no intermediate message is built.
"""

from __future__ import annotations

import datetime

__all__ = [
    "MASK32",
    "MASK64",
    "DecodeError",
    "OutOfRangeError",
    "UnencodableError",
    "duration_fields",
    "duration_value",
    "not_utf8",
    "out_of_range",
    "read_varint",
    "skip",
    "timestamp_fields",
    "timestamp_value",
    "truncated",
    "varint",
    "wrong_wire_type",
]


class DecodeError(ValueError):
    """The bytes are not a valid encoding of the message type; the message names the
    field (``Job.id has the wrong wire type``, ``Job.queue: invalid UTF-8``)."""


class OutOfRangeError(DecodeError, OverflowError):
    """A well-formed Timestamp or Duration outside the range of ``datetime`` /
    ``timedelta`` (``Job.scheduled_at: timestamp out of range``). Also an
    ``OverflowError``, which is what betterproto2 raises for it."""


_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
_ONE_MICROSECOND = datetime.timedelta(microseconds=1)
MASK32 = (1 << 32) - 1
MASK64 = (1 << 64) - 1


class UnencodableError(ValueError):
    """A value the wire cannot carry (an integer beyond 64 bits, a naive datetime): a
    ``ValueError``, as betterproto2 raises for the same values."""


def varint(value: int) -> bytes:
    """Encode ``value`` as betterproto2 does: negatives as their 64-bit two's complement."""
    if value < 0:
        if value < -(1 << 63):
            raise UnencodableError(
                "Negative value is not representable as a 64-bit integer - "
                "unable to encode a varint within 10 bytes."
            )
        value += 1 << 64
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def read_varint(data: bytes, pos: int, end: int) -> tuple[int, int]:
    """Read a varint of at most ten bytes at ``pos``; return it and the next position."""
    result = 0
    shift = 0
    while True:
        if pos >= end:
            raise DecodeError("truncated varint")
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, pos
        shift += 7
        if shift >= 70:
            raise DecodeError("varint longer than 10 bytes")


def skip(data: bytes, pos: int, end: int, tag: int) -> int:
    """Return the position after the value of an unknown field with ``tag``."""
    wire_type = tag & 7
    if tag >> 3 == 0:
        raise DecodeError("field number 0")
    if wire_type == 0:
        return read_varint(data, pos, end)[1]
    if wire_type == 2:
        length, pos = read_varint(data, pos, end)
        stop = pos + length
    elif wire_type == 1:
        stop = pos + 8
    elif wire_type == 5:
        stop = pos + 4
    else:
        raise DecodeError(f"unsupported wire type {wire_type} (field {tag >> 3})")
    if stop > end:
        raise DecodeError(f"truncated field {tag >> 3}")
    return stop


def wrong_wire_type(where: str) -> DecodeError:
    return DecodeError(f"{where} has the wrong wire type")


def truncated(where: str) -> DecodeError:
    return DecodeError(f"{where} is truncated")


def not_utf8(where: str) -> DecodeError:
    return DecodeError(f"{where}: invalid UTF-8")


def out_of_range(where: str, what: str) -> OutOfRangeError:
    return OutOfRangeError(f"{where}: {what} out of range")


# ------------------------------------------------------------ well-known wrapped types
# The arithmetic is the generated Timestamp/Duration's own (from_datetime, to_datetime,
# from_timedelta, to_timedelta), written out so that no intermediate message is built.


def timestamp_fields(value: datetime.datetime) -> tuple[int, int]:
    if not value.tzinfo:
        raise UnencodableError("datetime must be timezone aware")
    offset = value.astimezone(datetime.UTC) - _EPOCH
    offset_us = (offset.days * 86400 + offset.seconds) * 10**6 + offset.microseconds
    seconds, micros = divmod(offset_us, 10**6)
    return seconds, micros * 1000


def timestamp_value(seconds: int, nanos: int) -> datetime.datetime:
    return _EPOCH + datetime.timedelta(seconds=seconds, microseconds=nanos // 1000)


def duration_fields(value: datetime.timedelta) -> tuple[int, int]:
    total_us = value // _ONE_MICROSECOND
    return int(total_us / 1e6), int((total_us % 1e6) * 1e3)


def duration_value(seconds: int, nanos: int) -> datetime.timedelta:
    return datetime.timedelta(seconds=seconds, microseconds=nanos / 1e3)
