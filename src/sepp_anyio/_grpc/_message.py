"""``grpc-message``: the status message, percent-encoded UTF-8.

The gRPC HTTP/2 spec: bytes outside printable ASCII (0x20-0x7E), and ``%`` itself, are
sent as ``%XX``; a receiver decodes what it can and keeps the rest, since a status must
never be lost to its message.
"""

from __future__ import annotations

from typing import Final
from urllib.parse import unquote_to_bytes

__all__ = ["decode_grpc_message", "encode_grpc_message"]

_SAFE: Final = frozenset(range(0x20, 0x7F)) - {ord("%")}


def encode_grpc_message(message: str) -> bytes:
    """``message`` as a ``grpc-message`` value (a lone surrogate becomes ``?``)."""
    raw = message.encode("utf-8", "replace")
    if all(byte in _SAFE for byte in raw):
        return raw
    return b"".join(bytes((byte,)) if byte in _SAFE else b"%%%02X" % byte for byte in raw)


def decode_grpc_message(value: bytes) -> str:
    """A received ``grpc-message`` as text; bytes that are not UTF-8 become U+FFFD, and a
    ``%`` not followed by two hex digits stays as it is."""
    return unquote_to_bytes(value).decode("utf-8", "replace")
