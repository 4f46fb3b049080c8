"""One gRPC call on a served HTTP/2 connection, as the service layer sees it.

:class:`ServerCall` offers what ``_service`` uses of a call (the shape of grpclib's server
stream, which the service layer was written against): ``metadata``, ``recv_message``,
``send_message`` and ``send_trailing_metadata``, plus the ``_stream.recv_data`` /
``_codec`` / ``_dispatch.recv_message`` / ``_recv_type`` hooks its own request reader
uses to check a message's announced size before reading it.  Nothing here touches grpclib.

Receiving: the connection's reader hands DATA to :meth:`ServerCall.on_data`.  Bytes are
acknowledged (flow-control credit handed back) only while a reader is assembling a message
that they belong to, or when the call ends: a request nobody reads yet (before its API key
is checked) holds at most the stream's window, and a message announced over the limit is
refused on its 5-byte prefix with the rest never acknowledged.

Sending goes through the connection (:class:`CallLink`), which honours flow control and
the bound on queued output.  If the stream is gone (the client reset it, the connection
closed) a send raises :class:`CallGone`, which the connection's call runner swallows.
"""

from __future__ import annotations

from typing import Any, Final, Protocol

import anyio
from grpclib.const import Handler, Status
from grpclib.exceptions import GRPCError

from ._service import MessageCodec

__all__ = ["CallGone", "CallLink", "ServerCall"]


class CallGone(Exception):
    """The call's stream or connection went away; there is nobody left to answer."""


class CallLink(Protocol):
    """What a call needs from its connection."""

    async def send_message(self, call: ServerCall, payload: bytes) -> None:
        """Send one length-prefixed message (response headers first if not sent yet)."""

    def send_trailers(self, call: ServerCall, status: int, message: str | None) -> None:
        """End the call with its status (trailers-only if no headers were sent)."""

    def acknowledge(self, call: ServerCall, length: int) -> None:
        """Hand ``length`` received bytes of the call's stream back to flow control."""


class _Dispatch:
    """The service layer's per-message hook: the message, unchanged, in a 1-tuple."""

    __slots__ = ()

    async def recv_message(self, message: Any) -> tuple[Any]:
        return (message,)


_DISPATCH: Final = _Dispatch()
_CUT_SHORT: Final = "failed to decode Protobuf message: the request is cut short"


class ServerCall:
    """A unary call being served.

    Args:
        link: the connection.
        stream_id: the HTTP/2 stream.
        metadata: the request's non-pseudo headers, decoded (printable ASCII checked).
        handler: the route's handler (its request and reply types are used).
        codec: the message codec with the size limit.
        ended: the request ended with its headers already.
    """

    __slots__ = (
        "_arrived",
        "_buffer",
        "_codec",
        "_dispatch",
        "_link",
        "_recv_type",
        "_send_type",
        "_stream",
        "_taken",
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
        handler: Handler,
        codec: MessageCodec,
        *,
        ended: bool,
    ) -> None:
        self._link = link
        self.stream_id = stream_id
        self.metadata = metadata
        self._codec = codec
        self._dispatch = _DISPATCH
        self._recv_type = handler.request_type
        self._send_type = handler.reply_type
        # The service layer reads the body through ``_stream.recv_data``.
        self._stream = self
        self._buffer = bytearray()
        self._unacked = 0
        self._wanted = 0
        self._taken = 0
        self._arrived: anyio.Event | None = None
        #: The client's side of the stream ended.
        self.ended = ended
        #: Our side ended (trailers sent).
        self.finished = False
        #: The stream was reset or the connection closed: nothing more can be sent.
        self.gone = False
        self.headers_sent = False
        #: The handler's task has started running.
        self.started = False
        #: The handler's cancel scope (set by the call runner).
        self.scope: anyio.CancelScope | None = None

    # ------------------------------------------------------------ from the connection

    def on_data(self, data: bytes, flow_controlled_length: int, end_stream: bool) -> None:
        """DATA arrived (synchronous: called by the connection's reader)."""
        padding = flow_controlled_length - len(data)
        if padding:
            self._link.acknowledge(self, padding)
        if data:
            self._buffer += data
            self._unacked += len(data)
            if len(self._buffer) <= self._wanted:
                # Part of the message being read: let more of it come.
                self._acknowledge_all()
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

    def release(self) -> int:
        """The call is over: return the bytes received and never acknowledged."""
        unacked, self._unacked = self._unacked, 0
        self._buffer.clear()
        return unacked

    def _wake(self) -> None:
        arrived = self._arrived
        if arrived is not None:
            self._arrived = None
            arrived.set()

    def _acknowledge_all(self) -> None:
        if self._unacked:
            unacked, self._unacked = self._unacked, 0
            self._link.acknowledge(self, unacked)

    # ------------------------------------------------------------ the service layer's side

    async def recv_data(self, size: int) -> bytes:
        """Exactly ``size`` bytes of the request body, waiting for them.

        Returns b"" when the body ended before any of it was read.

        Raises:
            AssertionError: the body ended part-way (the service layer's "cut short").
        """
        buffer = self._buffer
        if len(buffer) < size:
            self._wanted = size
            try:
                while len(buffer) < size and not self.ended:
                    self._acknowledge_all()
                    arrived = self._arrived = anyio.Event()
                    await arrived.wait()
            finally:
                self._wanted = 0
            if len(buffer) < size:
                if not buffer and not self._taken:
                    return b""
                raise AssertionError(_CUT_SHORT)
        data = bytes(buffer[:size])
        del buffer[:size]
        self._taken += size
        taken = min(size, self._unacked)
        if taken:
            self._unacked -= taken
            self._link.acknowledge(self, taken)
        return data

    async def recv_message(self) -> Any:
        """The request message (None if the client sent none), its size checked on its
        5-byte prefix before it is read.

        Raises:
            GRPCError: OUT_OF_RANGE (over the limit), INTERNAL (compressed, cut short,
                undecodable).
        """
        try:
            prefix = await self.recv_data(5)
            if not prefix:
                return None
            if prefix[0]:
                raise GRPCError(
                    Status.INTERNAL,
                    "protocol error: received message with compressed-flag but no "
                    "grpc-encoding was specified",
                )
            size = int.from_bytes(prefix[1:], "big")
            self._codec.check_size(size)
            data = await self.recv_data(size)
        except AssertionError:
            raise GRPCError(Status.INTERNAL, _CUT_SHORT) from None
        return self._codec.decode(data, self._recv_type)

    async def send_message(self, message: Any) -> None:
        """Send the reply message.

        Raises:
            CallGone: the stream is gone.
            TypeError: not the reply type.
        """
        data = self._codec.encode(message, self._send_type)
        await self._link.send_message(self, b"\x00" + len(data).to_bytes(4, "big") + data)

    async def send_trailing_metadata(
        self, *, status: Status = Status.OK, status_message: str | None = None
    ) -> None:
        """End the call with ``status`` (a checkpoint, then synchronous).

        Raises:
            CallGone: the stream is gone.
        """
        self._link.send_trailers(self, status.value, status_message)
        await anyio.lowlevel.checkpoint()
