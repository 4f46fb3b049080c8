"""gRPC over HTTP/2, the server's side of the wire: request headers in, response headers out.

Pure functions and constants, no I/O:

* :func:`parse_timeout`: ``grpc-timeout`` with grpc-go's grammar (at most 8 digits and a unit
  out of ``HMSmun``), clamped to the server's longest call;
* :func:`metadata_problem`: a received header whose value is not a valid gRPC metadata value
  (non-``-bin`` values are printable ASCII); the answer names the key, never the value;
* :func:`response_headers`, :func:`trailers`: the header lists the server sends, with
  ``grpc-message`` percent-encoded as the gRPC spec asks.
"""

from __future__ import annotations

import binascii
from collections.abc import Sequence
from typing import Final

__all__ = [
    "RESPONSE_HEADERS",
    "metadata_problem",
    "parse_timeout",
    "percent_encode",
    "trailers",
    "trailers_only",
]

#: The response headers of every call that sends a message.
RESPONSE_HEADERS: Final = ((b":status", b"200"), (b"content-type", b"application/grpc"))

_UNITS: Final = {
    ord("H"): 3600.0,
    ord("M"): 60.0,
    ord("S"): 1.0,
    ord("m"): 1e-3,
    ord("u"): 1e-6,
    ord("n"): 1e-9,
}


def parse_timeout(value: bytes, ceiling: float) -> float:
    """Seconds of a ``grpc-timeout`` value, at most ``ceiling``.

    Raises:
        ValueError: not 1 to 8 ASCII digits followed by one of ``HMSmun``.
    """
    if not 2 <= len(value) <= 9:
        raise ValueError("grpc-timeout must be 1 to 8 digits and a unit")
    unit = _UNITS.get(value[-1])
    digits = value[:-1]
    if unit is None or not digits.isdigit():
        raise ValueError("grpc-timeout must be 1 to 8 digits and a unit out of HMSmun")
    seconds = int(digits) * unit
    return seconds if seconds < ceiling else ceiling


def metadata_problem(headers: Sequence[tuple[bytes, bytes]]) -> str | None:
    """Why a request's metadata is unusable, or None.

    Values of keys not ending in ``-bin`` must be printable ASCII (0x20-0x7E); ``-bin`` values
    must be base64 (padded or not).  The reason names the key, never the value (it may be a
    secret).
    """
    for name, value in headers:
        if name[:1] == b":":
            continue
        if name.endswith(b"-bin"):
            try:
                binascii.a2b_base64(value + b"=" * (-len(value) % 4), strict_mode=True)
            except binascii.Error:
                return f"metadata {name.decode('ascii', 'replace')!r}: value is not base64"
            continue
        if not value.isascii() or not all(0x20 <= byte <= 0x7E for byte in value):
            return f"metadata {name.decode('ascii', 'replace')!r}: value is not printable ASCII"
    return None


_SAFE: Final = frozenset(range(0x20, 0x7F)) - {ord("%")}


def percent_encode(message: str) -> bytes:
    """``grpc-message``'s encoding: UTF-8, bytes outside 0x20-0x7E and ``%`` as ``%XX``."""
    raw = message.encode("utf-8", "replace")
    if all(byte in _SAFE for byte in raw):
        return raw
    return b"".join(bytes((byte,)) if byte in _SAFE else b"%%%02X" % byte for byte in raw)


def _status(status: int, message: str | None) -> list[tuple[bytes, bytes]]:
    out = [(b"grpc-status", b"%d" % status)]
    if message:
        out.append((b"grpc-message", percent_encode(message)))
    return out


def trailers(status: int, message: str | None) -> list[tuple[bytes, bytes]]:
    """The trailers of a call that sent its response headers."""
    return _status(status, message)


def trailers_only(status: int, message: str | None) -> list[tuple[bytes, bytes]]:
    """A whole response in one HEADERS frame (gRPC's trailers-only form)."""
    return [*RESPONSE_HEADERS, *_status(status, message)]
