"""One gRPC call on a served HTTP/2 connection, as the service layer sees it.

:class:`ServerCall` is what a handler of ``_service`` gets: the request's ``metadata``,
:meth:`ServerCall.read_request` (the request message: its announced size checked on its
5-byte prefix before any of it is buffered, a second message refused, then decoded),
:meth:`ServerCall.send_message` and :meth:`ServerCall.send_trailing_metadata`.  Nothing
here is grpclib's: :class:`~sepp_anyio._grpc.GrpcError` carries the statuses, and the
message prefix is read by the one rule of :mod:`sepp_anyio._grpc` (its compressed flag and
the size limit, checked before any of the message is buffered).

Receiving: the connection's reader hands DATA to :meth:`ServerCall.on_data`.  Bytes are
acknowledged (flow-control credit handed back) only while a reader is assembling a message
that they belong to, as they leave the buffer, or when the call ends: a request nobody reads
yet (before its API key is checked) holds at most the stream's window, and a message
announced over the limit is refused on its 5-byte prefix with the rest never acknowledged.
The bytes a call buffers count against its connection's and the server's budgets
(:mod:`._reqbytes`): over either, acknowledging bytes that stay buffered waits until the
connection resumes the call (:meth:`ServerCall.resume_refunds`).

Sending goes through the connection (:class:`CallLink`), which honours flow control and
the bound on queued output.  If the stream is gone (the client reset it, the connection
closed) a send raises :class:`CallGone`, which the connection's call runner swallows.
"""

from __future__ import annotations

from typing import Any, Final, Protocol, TypeVar

import anyio

from sepp_anyio._grpc import (
    PREFIX_SIZE,
    CompressedMessageError,
    GrpcError,
    MessageTooLargeError,
    read_prefix,
)
from sepp_anyio._io._native import Native
from sepp_anyio._model._error_root import StatusCode

from ._service import MessageCodec

__all__ = ["CallGone", "CallLink", "ServerCall"]

_T = TypeVar("_T")


class CallGone(Exception):
    """The call's stream or connection went away; there is nobody left to answer."""


class CallLink(Protocol):
    """What a call needs from its connection."""

    @property
    def native(self) -> Native:
        """The running backend's own primitives (see :mod:`sepp_anyio._io._native`)."""

    async def send_message(self, call: ServerCall, payload: bytes) -> None:
        """Send one length-prefixed message (response headers first if not sent yet)."""

    def send_trailers(self, call: ServerCall, status: int, message: str | None) -> None:
        """End the call with its status (trailers-only if no headers were sent)."""

    def acknowledge(self, call: ServerCall, length: int) -> None:
        """Hand ``length`` received bytes of the call's stream back to flow control."""

    def buffered(self, call: ServerCall, delta: int) -> None:
        """The call's buffered request bytes grew (or, negative, shrank) by ``delta``."""

    def may_refund(self, call: ServerCall) -> bool:
        """Whether bytes that stay buffered may be acknowledged now; if not, the
        connection calls :meth:`ServerCall.resume_refunds` once they may."""


class _CutShort(Exception):
    """The request body ended part-way through a message."""


_CUT_SHORT: Final = "failed to decode Protobuf message: the request is cut short"
_COMPRESSED: Final = (
    "protocol error: received message with compressed-flag but no grpc-encoding was specified"
)
_SECOND_MESSAGE: Final = "a unary call takes one request message; the client sent a second"


class ServerCall:
    """A unary call being served.

    Args:
        link: the connection.
        stream_id: the HTTP/2 stream.
        metadata: the request's non-pseudo headers, decoded (printable ASCII checked).
        codec: the message codec with the size limit.
        reply_type: the type :meth:`send_message` takes.
        ended: the request ended with its headers already.
    """

    __slots__ = (
        "_arrived",
        "_buffer",
        "_codec",
        "_link",
        "_send_type",
        "_unacked",
        "_wanted",
        "ended",
        "finished",
        "gone",
        "headers_sent",
        "metadata",
        "scope",
        "started",
        "stream_id",
    )

    def __init__(
        self,
        link: CallLink,
        stream_id: int,
        metadata: dict[str, str],
        codec: MessageCodec,
        reply_type: type[Any],
        *,
        ended: bool,
    ) -> None:
        self._link = link
        self.stream_id = stream_id
        #: The request's metadata (non-pseudo headers; ``-bin`` keys left out).
        self.metadata = metadata
        self._codec = codec
        self._send_type = reply_type
        self._buffer = bytearray()
        self._unacked = 0
        self._wanted = 0
        self._arrived: anyio.Event | None = None
        #: The client's side of the stream ended.
        self.ended = ended
        #: Our side ended (trailers sent).
        self.finished = False
        #: The stream was reset or the connection closed: nothing more can be sent.
        self.gone = False
        self.headers_sent = False
        #: The handler has started running (on a call runner).
        self.started = False
        #: The handler's cancel scope (set by the call runner).
        self.scope: anyio.CancelScope | None = None

    # ------------------------------------------------------------ from the connection

    def on_data(self, data: bytes, flow_controlled_length: int, end_stream: bool) -> None:
        """DATA arrived (synchronous: called by the connection's reader)."""
        padding = flow_controlled_length - len(data)
        if padding:
            # Never buffered: refunding it gives back only credit spent on nothing held.
            self._link.acknowledge(self, padding)
        if data:
            self._buffer += data
            self._unacked += len(data)
            self._link.buffered(self, len(data))
            if len(self._buffer) <= self._wanted:
                # Part of the message being read: let more of it come.
                self._refund_buffered()
        if end_stream:
            self.ended = True
        self._wake()

    def on_end(self) -> None:
        """The client ended its side (trailers, or the connection went away)."""
        self.ended = True
        self._wake()

    def on_gone(self) -> None:
        """The stream was reset or the connection closed: cancel the handler."""
        self.gone = True
        self.ended = True
        if self.scope is not None:
            self.scope.cancel()
        self._wake()

    def resume_refunds(self) -> None:
        """The connection is under its budgets again: acknowledge the bytes of the message
        being assembled that were held back."""
        if self._wanted and len(self._buffer) <= self._wanted:
            self._refund_buffered()

    def release(self) -> int:
        """The call is over: drop what is buffered; return the bytes received and never
        acknowledged (for the connection to refund)."""
        unacked, self._unacked = self._unacked, 0
        if self._buffer:
            self._link.buffered(self, -len(self._buffer))
            self._buffer.clear()
        return unacked

    def _wake(self) -> None:
        arrived = self._arrived
        if arrived is not None:
            self._arrived = None
            arrived.set()

    def _refund_buffered(self) -> None:
        """Acknowledge what arrived and stays buffered, if the budgets allow it now."""
        if self._unacked and self._link.may_refund(self):
            unacked, self._unacked = self._unacked, 0
            self._link.acknowledge(self, unacked)

    async def _wait(self) -> None:
        arrived = self._arrived = anyio.Event()
        await arrived.wait()

    async def _take(self, size: int) -> bytes:
        """Exactly ``size`` bytes of the request body, waiting for them.

        Returns b"" when the body ended before any byte of it arrived (only asked for at a
        message boundary).

        Raises:
            _CutShort: the body ended with fewer than ``size`` bytes.
        """
        buffer = self._buffer
        if len(buffer) < size:
            self._wanted = size
            try:
                while len(buffer) < size and not self.ended:
                    self._refund_buffered()
                    await self._wait()
            finally:
                self._wanted = 0
            if len(buffer) < size:
                if not buffer:
                    return b""
                raise _CutShort
        data = bytes(buffer[:size])
        del buffer[:size]
        self._link.buffered(self, -size)
        # Leaving the buffer: refunded whatever the budgets say.
        taken = min(size, self._unacked)
        if taken:
            self._unacked -= taken
            self._link.acknowledge(self, taken)
        return data

    # ------------------------------------------------------------ the service layer's side

    async def read_request(self, message_type: type[_T]) -> _T | None:
        """The request message, or None if the client sent none.

        Reads the 5-byte gRPC prefix and checks the announced size against the codec's
        limit before any of the message is buffered; then the message; then waits for the
        client to end its side, because a unary call carries one message: any byte after
        it is refused.  Only then is the message decoded, so the handler never acts on a
        request that turns out to be malformed.

        Args:
            message_type: the request type (decoded with the codec).

        Returns:
            The decoded message; None if the body ended without any byte of one.

        Raises:
            GrpcError: OUT_OF_RANGE (announced over the limit, with both sizes), INTERNAL
                (compressed without an encoding, cut short, a second message,
                undecodable).

        Cancellation: a plain cancellation point (the connection cancels the handler when
        the stream is reset, the deadline passes or the connection ends); what is still
        buffered is dropped, and refunded, when the call is released.
        """
        try:
            prefix = await self._take(PREFIX_SIZE)
            if not prefix:
                return None
            size = read_prefix(prefix, self._codec.max_message_bytes)
            data = await self._take(size) if size else b""
            if len(data) < size:
                raise _CutShort
        except _CutShort:
            raise GrpcError(StatusCode.INTERNAL, _CUT_SHORT) from None
        except CompressedMessageError:
            raise GrpcError(StatusCode.INTERNAL, _COMPRESSED) from None
        except MessageTooLargeError as exc:
            raise self._codec.too_large(exc.length) from None
        while not self._buffer and not self.ended:
            await self._wait()
        if self._buffer:
            raise GrpcError(StatusCode.INTERNAL, _SECOND_MESSAGE)
        message: _T = self._codec.decode(data, message_type)
        return message

    async def send_message(self, message: Any) -> None:
        """Send the reply message.

        Raises:
            CallGone: the stream is gone.
            TypeError: not the reply type.
        """
        data = self._codec.encode(message, self._send_type)
        await self._link.send_message(self, b"\x00" + len(data).to_bytes(4, "big") + data)

    async def send_trailing_metadata(
        self, *, status: StatusCode = StatusCode.OK, status_message: str | None = None
    ) -> None:
        """End the call with ``status`` (a checkpoint, then synchronous).

        Raises:
            CallGone: the stream is gone.
        """
        link = self._link
        link.send_trailers(self, status.value, status_message)
        await link.native.checkpoint()
