"""The header lists a gRPC server sends: response headers, trailers, trailers-only."""

from __future__ import annotations

from typing import Final

from ._message import encode_grpc_message

__all__ = ["OK_TRAILERS", "RESPONSE_HEADERS", "trailers", "trailers_only"]

#: The response headers of every call that sends a message.
RESPONSE_HEADERS: Final = ((b":status", b"200"), (b"content-type", b"application/grpc"))
#: The trailers of a call that succeeded with nothing to say: ``trailers(0, None)``, the
#: same on almost every call (a constant, so the HPACK encoder can keep its encoding).
OK_TRAILERS: Final = ((b"grpc-status", b"0"),)


def trailers(status: int, message: str | None) -> list[tuple[bytes, bytes]]:
    """The trailers of a call that sent its response headers: ``grpc-status`` and, if
    there is one, the percent-encoded ``grpc-message``."""
    out = [(b"grpc-status", b"%d" % status)]
    if message:
        out.append((b"grpc-message", encode_grpc_message(message)))
    return out


def trailers_only(status: int, message: str | None) -> list[tuple[bytes, bytes]]:
    """A whole response in one HEADERS frame (gRPC's trailers-only form)."""
    return [*RESPONSE_HEADERS, *trailers(status, message)]
