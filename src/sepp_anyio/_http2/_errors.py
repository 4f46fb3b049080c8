"""HTTP/2 error codes, and the exceptions the connection raises at its caller.

Errors come in two directions, as in h11:

* Trouble caused by the *peer* never raises: :meth:`Connection.receive_data` turns it
  into events. A stream error (RFC 9113 section 5.4.2) resets that stream
  (:class:`~._events.StreamReset` with ``remote=False``) and the connection goes on; a
  connection error (section 5.4.1) queues GOAWAY with the code and closes the connection
  (:class:`~._events.ConnectionTerminated`). Inside the connection both travel as
  :class:`ProtocolViolation`, which never leaves the package.
* Misuse by the *caller* (sending on a stream that is closed, opening more streams than
  the peer allows, running out of stream ids) raises a :class:`LocalProtocolError`
  subclass and changes nothing.
"""

from __future__ import annotations

from enum import IntEnum

__all__ = [
    "ConnectionClosedError",
    "ErrorCode",
    "HeaderListTooLargeError",
    "LimitsError",
    "LocalProtocolError",
    "ProtocolViolation",
    "StreamClosedError",
    "StreamIdsExhaustedError",
    "TooManyStreamsError",
]


class ErrorCode(IntEnum):
    """The error codes of RFC 9113 section 7."""

    NO_ERROR = 0x0
    PROTOCOL_ERROR = 0x1
    INTERNAL_ERROR = 0x2
    FLOW_CONTROL_ERROR = 0x3
    SETTINGS_TIMEOUT = 0x4
    STREAM_CLOSED = 0x5
    FRAME_SIZE_ERROR = 0x6
    REFUSED_STREAM = 0x7
    CANCEL = 0x8
    COMPRESSION_ERROR = 0x9
    CONNECT_ERROR = 0xA
    ENHANCE_YOUR_CALM = 0xB
    INADEQUATE_SECURITY = 0xC
    HTTP_1_1_REQUIRED = 0xD


def error_code(code: int) -> ErrorCode | int:
    """``code`` as an :class:`ErrorCode` when it is one; unknown codes stay plain ints
    (RFC 9113 section 7: they must not trigger special behaviour)."""
    try:
        return ErrorCode(code)
    except ValueError:
        return code


class ProtocolViolation(Exception):
    """The peer broke the protocol in a way that ends the connection.

    Raised and caught inside :class:`~._connection.Connection` only; the caller sees a
    :class:`~._events.ConnectionTerminated` event instead.
    """

    def __init__(self, code: ErrorCode, reason: str) -> None:
        super().__init__(reason)
        self.code = code
        self.reason = reason


class LimitsError(ValueError):
    """A :class:`Limits` value (or an argument) outside what HTTP/2 allows."""


class LocalProtocolError(Exception):
    """The caller asked for something HTTP/2 does not allow in the current state."""


class StreamClosedError(LocalProtocolError):
    """The stream is not open for what was asked (sending on a closed stream, say)."""

    def __init__(self, stream_id: int, what: str) -> None:
        super().__init__(f"stream {stream_id} is closed for {what}")
        self.stream_id = stream_id


class ConnectionClosedError(LocalProtocolError):
    """The connection is closed (a GOAWAY was sent or received, or a connection error)."""


class TooManyStreamsError(LocalProtocolError):
    """Opening a stream would exceed the peer's SETTINGS_MAX_CONCURRENT_STREAMS."""


class StreamIdsExhaustedError(LocalProtocolError):
    """No stream id is left on this connection (they end at 2**31 - 1): open a new one."""


class HeaderListTooLargeError(LocalProtocolError):
    """A header list to send exceeds the peer's SETTINGS_MAX_HEADER_LIST_SIZE."""
