"""gRPC message framing: a 5-byte prefix (a compressed-flag byte, then the body length as
a big-endian uint32) before every message, in both directions.

A DATA frame may hold part of a message or several, so :class:`MessageDecoder` is fed
arbitrary chunks. The rules, for both roles: the announced length is checked against the
receive limit on the prefix, before any of the body is buffered; the compressed flag is
refused (no encoding is ever negotiated); a unary call carries one message.
"""

from __future__ import annotations

import struct
from collections import deque

__all__ = [
    "PREFIX_SIZE",
    "UNARY",
    "CompressedMessageError",
    "ExtraMessageError",
    "MessageDecoder",
    "MessageTooLargeError",
    "encode_message",
    "read_prefix",
]

_PREFIX = struct.Struct(">BI")
PREFIX_SIZE = _PREFIX.size  # 5


def encode_message(body: bytes) -> bytes:
    """Prefix ``body`` with the uncompressed gRPC message header."""
    return _PREFIX.pack(0, len(body)) + body


class MessageTooLargeError(Exception):
    """A peer announced a message longer than the receive limit (each role words its own
    answer from ``length`` and ``limit``)."""

    def __init__(self, length: int, limit: int) -> None:
        super().__init__(f"received message of {length} bytes exceeds the limit of {limit}")
        self.length = length
        self.limit = limit


class CompressedMessageError(Exception):
    """A peer sent a compressed message; we never advertise compression."""


class ExtraMessageError(Exception):
    """A peer sent more messages than the call allows: a unary request, and a unary
    response, carry exactly one."""

    def __init__(self, allowed: int) -> None:
        super().__init__(
            f"more than {allowed} message in a unary call"
            if allowed == 1
            else f"more than {allowed} messages"
        )
        self.allowed = allowed


def read_prefix(prefix: bytes, limit: int) -> int:
    """The body length a whole 5-byte prefix announces, checked before any of the body is
    buffered.

    Raises:
        CompressedMessageError: the compressed flag is set (we never negotiate an
            encoding).
        MessageTooLargeError: the length is over ``limit``.
    """
    flag, length = _PREFIX.unpack(prefix)
    if flag:
        raise CompressedMessageError(
            "received a compressed message, but no compression was negotiated"
        )
    if length > limit:
        raise MessageTooLargeError(length, limit)
    return int(length)


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
                length = read_prefix(bytes(buf[:PREFIX_SIZE]), self._max)
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


#: Messages in each direction of a unary call.
UNARY = 1
