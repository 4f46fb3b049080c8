"""Sans-IO pieces of gRPC over HTTP/2: message framing, timeouts, status.

Nothing here does I/O or touches an event loop, so all of it is tested with
hypothesis directly (tests/transport/test_framing.py).

Message framing: every gRPC message on an HTTP/2 stream is a 5-byte prefix
(one compressed-flag byte, then the body length as a big-endian uint32)
followed by the body. A DATA frame may hold part of a message or several
messages, so the decoder is fed arbitrary chunks.
"""

from __future__ import annotations

import math
import struct
from collections import deque
from urllib.parse import quote, unquote

from grpclib.const import Status

__all__ = [
    "CompressedMessageError",
    "ExtraMessageError",
    "MessageDecoder",
    "MessageTooLargeError",
    "decode_grpc_message",
    "decode_timeout",
    "encode_grpc_message",
    "encode_message",
    "encode_timeout",
    "status_from_http",
]

_PREFIX = struct.Struct(">BI")
PREFIX_SIZE = _PREFIX.size  # 5


def encode_message(body: bytes) -> bytes:
    """Prefix ``body`` with the uncompressed gRPC message header."""
    return _PREFIX.pack(0, len(body)) + body


class MessageTooLargeError(Exception):
    """A peer announced a message longer than the configured receive limit."""

    def __init__(self, length: int, limit: int) -> None:
        super().__init__(
            f"received message of {length} bytes exceeds max_receive_message_bytes={limit}"
        )
        self.length = length
        self.limit = limit


class CompressedMessageError(Exception):
    """A peer sent a compressed message; we never advertise compression."""


class ExtraMessageError(Exception):
    """A peer sent more messages than the call allows (a unary response has one)."""

    def __init__(self, allowed: int) -> None:
        super().__init__(
            f"the server sent more than {allowed} message(s) in a unary response"
            if allowed == 1
            else f"the server sent more than {allowed} messages"
        )
        self.allowed = allowed


class MessageDecoder:
    """Incremental decoder of length-prefixed gRPC messages.

    ``feed()`` accepts any split of the byte stream and queues every message it
    completes; ``pop()`` hands them out in order. The announced length is
    checked against ``max_message_size`` as soon as the prefix is complete, so
    an oversized message is refused before its body is buffered.

    With ``max_messages`` (1 for a unary response), a byte arriving after that
    many whole messages is refused at once, before it is buffered. Together
    the two bound what one call can make us hold: ``max_messages`` times
    ``max_message_size`` plus their 5-byte prefixes, whatever the peer sends.
    """

    __slots__ = ("_allowed", "_buffer", "_max", "_max_messages", "_need", "messages")

    def __init__(self, max_message_size: int, max_messages: int | None = None) -> None:
        self._buffer = bytearray()
        self._max = max_message_size
        # Body length of the message being assembled, or -1 while the prefix
        # itself is still incomplete.
        self._need = -1
        self.messages: deque[bytes] = deque()
        self._max_messages = max_messages
        # Messages still allowed to complete; -1 for no limit.
        self._allowed = -1 if max_messages is None else max_messages

    @property
    def buffered(self) -> int:
        """Bytes received that do not yet form a whole message (prefix included)."""
        return len(self._buffer) + (PREFIX_SIZE if self._need >= 0 else 0)

    @property
    def held(self) -> int:
        """Bytes held in all: queued messages and the partial one (prefix included)."""
        return sum(len(message) for message in self.messages) + self.buffered

    def feed(self, data: bytes) -> None:
        """Add received bytes.

        Raises:
            MessageTooLargeError: a prefix announced more than the limit.
            CompressedMessageError: a prefix had the compressed flag set.
            ExtraMessageError: a byte arrived after ``max_messages`` messages.
        """
        if not data:
            return
        allowed = self._allowed
        if allowed == 0:
            raise ExtraMessageError(self._max_messages or 0)
        buf = self._buffer
        if not buf and self._need < 0 and len(data) >= PREFIX_SIZE:
            # Fast path: the common unary reply arrives as one whole frame.
            flag, length = _PREFIX.unpack_from(data)
            if flag == 0 and length <= self._max and len(data) == PREFIX_SIZE + length:
                self.messages.append(data[PREFIX_SIZE:])
                if allowed > 0:
                    self._allowed = allowed - 1
                return
        buf += data
        while True:
            if self._need < 0:
                if not buf:
                    return
                if self._allowed == 0:
                    # Dropped rather than kept: the caller fails the call.
                    buf.clear()
                    raise ExtraMessageError(self._max_messages or 0)
                if len(buf) < PREFIX_SIZE:
                    return
                flag, length = _PREFIX.unpack_from(buf)
                if flag != 0:
                    raise CompressedMessageError(
                        "received a compressed message, but no compression was negotiated"
                    )
                if length > self._max:
                    raise MessageTooLargeError(length, self._max)
                del buf[:PREFIX_SIZE]
                self._need = length
            if len(buf) < self._need:
                return
            self.messages.append(bytes(buf[: self._need]))
            del buf[: self._need]
            self._need = -1
            if self._allowed > 0:
                self._allowed -= 1

    def pop(self) -> bytes | None:
        """The next complete message, or None."""
        return self.messages.popleft() if self.messages else None


# grpc-timeout: "TimeoutValue TimeoutUnit", at most 8 ASCII digits.
_UNITS: tuple[tuple[str, float], ...] = (
    ("n", 1e-9),
    ("u", 1e-6),
    ("m", 1e-3),
    ("S", 1.0),
    ("M", 60.0),
    ("H", 3600.0),
)
_UNIT_SECONDS = dict(_UNITS)
_MAX_VALUE = 99_999_999


def encode_timeout(seconds: float) -> str:
    """Encode a timeout for the ``grpc-timeout`` header.

    Picks the finest unit whose value fits the protocol's 8 digits and rounds
    **up**, so the server never sees a deadline earlier than the client's. A
    non-positive timeout is sent as ``1n`` (already due); anything beyond the
    largest encodable value is capped at 99999999 hours.
    """
    if not seconds > 0:  # also catches NaN
        return "1n"
    for unit, scale in _UNITS:
        value = math.ceil(seconds / scale)
        if value <= _MAX_VALUE:
            return f"{value}{unit}"
    return f"{_MAX_VALUE}H"


# From this many seconds up, grpc-timeout is sent in whole seconds (see encode_stable_timeout).
STABLE_TIMEOUT_FROM = 10.0


def encode_stable_timeout(seconds: float) -> str | None:
    """A ``grpc-timeout`` value that is the same on every call made with the same timeout:
    whole seconds, rounded up, for timeouts of at least :data:`STABLE_TIMEOUT_FROM` seconds;
    None below that (use :func:`encode_timeout`).

    The finest unit changes with every call (the microseconds between computing the
    deadline and sending the header), so that value can only be sent as a literal, which
    every server decodes afresh. A whole-second value repeats, so it is indexed once in the
    HPACK table and then sent (and decoded) as a one-byte reference. The server gets at most
    one second (a tenth, at worst) more than the client, which enforces its own deadline.
    """
    if not seconds >= STABLE_TIMEOUT_FROM or seconds > _MAX_VALUE:
        return None
    return f"{math.ceil(seconds)}S"


def decode_timeout(value: str) -> float:
    """Parse a ``grpc-timeout`` header value into seconds.

    Raises:
        ValueError: not 1-8 digits followed by one of ``numSMH``.
    """
    if len(value) < 2 or len(value) > 9:
        raise ValueError(f"invalid grpc-timeout {value!r}")
    digits, unit = value[:-1], value[-1]
    if not digits.isascii() or not digits.isdigit() or unit not in _UNIT_SECONDS:
        raise ValueError(f"invalid grpc-timeout {value!r}")
    return int(digits) * _UNIT_SECONDS[unit]


# grpc-message is percent-encoded UTF-8; printable ASCII other than '%' is
# left as it is.
_SAFE = "".join(chr(c) for c in range(0x20, 0x7F) if c != 0x25)


def encode_grpc_message(message: str) -> str:
    """Percent-encode a status message for the ``grpc-message`` trailer."""
    return quote(message, safe=_SAFE, encoding="utf-8")


def decode_grpc_message(value: str) -> str:
    """Decode a ``grpc-message`` trailer; undecodable bytes become U+FFFD."""
    return unquote(value, encoding="utf-8", errors="replace")


# gRPC's mapping of HTTP statuses, for responses that carry no grpc-status
# (a proxy or a non-gRPC server answered).
_HTTP_TO_GRPC = {
    400: Status.INTERNAL,
    401: Status.UNAUTHENTICATED,
    403: Status.PERMISSION_DENIED,
    404: Status.UNIMPLEMENTED,
    429: Status.UNAVAILABLE,
    502: Status.UNAVAILABLE,
    503: Status.UNAVAILABLE,
    504: Status.UNAVAILABLE,
}


def status_from_http(http_status: int) -> Status:
    """The gRPC status implied by a non-200 HTTP status."""
    return _HTTP_TO_GRPC.get(http_status, Status.UNKNOWN)
