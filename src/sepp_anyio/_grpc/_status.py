"""gRPC's status: our error value for both roles, and reading one off a response.

A call ends with a status: ``grpc-status`` (a decimal code) and an optional
``grpc-message`` in the trailers, or in the only HEADERS frame of a trailers-only
response.  A response that carries none (a proxy or a server that is not gRPC answered)
is judged by its HTTP status, with gRPC's own table.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from .._model._error_root import StatusCode
from ._message import decode_grpc_message

__all__ = ["GrpcError", "MalformedReplyError", "read_status", "status_from_http"]


class GrpcError(Exception):
    """A call that ended, or must end, with a non-OK gRPC status.

    The client's transport raises it for what the server answered (or for what went
    wrong on the way: a deadline, a lost connection); the server raises it inside a call
    to answer with that status.  The client layer turns it into the public
    :class:`~sepp_anyio.SeppError` tree; it never reaches users.

    Args:
        code: the status.
        message: the status message (``grpc-message``), if any.
    """

    __slots__ = ("code", "message")

    def __init__(self, code: StatusCode, message: str | None = None) -> None:
        super().__init__(code, message)
        self.code = code
        self.message = message

    def __str__(self) -> str:
        return f"{self.code.name}: {self.message}" if self.message else self.code.name

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.code!r}, {self.message!r})"


class MalformedReplyError(GrpcError):
    """The server's reply breaks the gRPC protocol, not just the call: a second message in
    a unary response, a ``grpc-status`` that is not a number.

    INTERNAL, so that code handling the transport's usual errors handles it; the client
    turns it into ``MalformedResponseError`` and never retries it (the same server would
    answer the same way).
    """

    def __init__(self, message: str) -> None:
        super().__init__(StatusCode.INTERNAL, message)


# gRPC's mapping of HTTP statuses, for responses that carry no grpc-status.
_HTTP_TO_GRPC: Final = {
    400: StatusCode.INTERNAL,
    401: StatusCode.UNAUTHENTICATED,
    403: StatusCode.PERMISSION_DENIED,
    404: StatusCode.UNIMPLEMENTED,
    429: StatusCode.UNAVAILABLE,
    502: StatusCode.UNAVAILABLE,
    503: StatusCode.UNAVAILABLE,
    504: StatusCode.UNAVAILABLE,
}


def status_from_http(http_status: int) -> StatusCode:
    """The gRPC status implied by a non-200 HTTP status (UNKNOWN for the rest)."""
    return _HTTP_TO_GRPC.get(http_status, StatusCode.UNKNOWN)


# A grpc-status is 1*DIGIT (the gRPC HTTP/2 spec); more digits than a uint32 has cannot
# be a real status, and a bound keeps int() away from huge inputs.
_MAX_STATUS_DIGITS: Final = 10
_CODES: Final = {code.value: code for code in StatusCode}


def _header(headers: Sequence[tuple[bytes, bytes]], name: bytes) -> bytes | None:
    for key, value in headers:
        if key == name:
            return value
    return None


def read_status(headers: Sequence[tuple[bytes, bytes]]) -> None:
    """Check the status a response ended with (its trailers, or its trailers-only headers).

    Returns if it is OK. ``grpc-status-details-bin`` is deliberately left undecoded: the
    sepp protocol defines no rich error details, and a malformed one must not mask the
    status itself.

    Raises:
        GrpcError: the status is not OK (UNKNOWN when there is none, or one this version
            of gRPC does not define, the number kept in the message).
        MalformedReplyError: the ``grpc-status`` is not a decimal number.
    """
    raw = None
    for key, value in headers:  # (inline: this runs once per call)
        if key == b"grpc-status":
            raw = value
            break
    if raw is None:
        raise GrpcError(StatusCode.UNKNOWN, "server response carries no grpc-status")
    if raw == b"0":
        return
    # Strictly ASCII digits (bytes.isdigit() is ASCII-only): int() alone would read " 14"
    # as UNAVAILABLE (and retry it) and "+0" as OK.
    if not raw.isdigit() or len(raw) > _MAX_STATUS_DIGITS:
        shown = raw[:40].decode("latin-1") + ("..." if len(raw) > 40 else "")
        raise MalformedReplyError(f"the server sent a malformed grpc-status {shown!r}")
    message_raw = _header(headers, b"grpc-message")
    message = decode_grpc_message(message_raw) if message_raw else None
    code = _CODES.get(int(raw))
    if code is None:
        detail = f"unknown grpc-status {raw.decode('latin-1')!r}"
        raise GrpcError(StatusCode.UNKNOWN, f"{detail}: {message}" if message else detail)
    raise GrpcError(code, message)
