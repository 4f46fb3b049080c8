"""A TCP byte stream on asyncio's own transport and protocol API.

On asyncio, :func:`anyio.connect_tcp` gives a stream whose every receive
resumes the transport's reading and pauses it again afterwards (two
``epoll_ctl`` calls per wait), whose every send first yields to the event loop,
and whose transport reads with a 256 KiB ``recv`` (a fresh quarter-megabyte
buffer per read). For a gRPC client that sends a few hundred bytes and waits for
a few hundred back, those costs are a large part of its CPU per call.

:class:`AsyncioStream` is the same :class:`anyio.abc.ByteStream` contract on a
:class:`asyncio.BufferedProtocol`: the transport keeps reading into one
reusable buffer and is paused only when unread data passes a high-water mark;
a send writes at once and waits only while asyncio says the kernel's buffer is
full. TLS goes on top of it through :class:`anyio.streams.tls.TLSStream`, as
it does on anyio's own stream. Only used when the running backend is asyncio.

:meth:`AsyncioStream.pump` goes one step further for the HTTP/2 connection's
reader: input is handed to a function inside asyncio's own read callback, so the
frames of a reply are parsed, and the call waiting for them woken, in the loop
iteration that read them, without first waking the reader's task (a task switch
per read, a sizeable part of a small call's CPU).
"""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import anyio
import anyio.abc

if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = ["AsyncioStream", "accept_asyncio_tcp", "connect_asyncio_tcp"]

# The buffer the transport reads into: one read never takes more. 64 KiB is the
# largest size glibc still serves from its heap rather than with mmap.
_READ_BUFFER = 1 << 16
# One such buffer per thread, shared by every connection of the thread's event loop:
# asyncio fills it and calls buffer_updated in one synchronous step, which copies what
# it read before any other connection reads, so no connection needs one of its own. (A
# buffer each would be 64 KiB held by every idle connection a server has, which glibc's
# heap keeps after they close.)
_buffers = threading.local()


def _read_buffer() -> memoryview:
    """This thread's read buffer."""
    view: memoryview | None = getattr(_buffers, "view", None)
    if view is None:
        view = _buffers.view = memoryview(bytearray(_READ_BUFFER))
    return view


# Unread input above this pauses the transport's reading, so a peer can make
# us hold at most about this much (plus one read) before we consume it: the same
# bound as anyio's stream, which holds one 256 KiB read.
_HIGH_WATER = 1 << 18
_LOW_WATER = _HIGH_WATER // 4
# How long a close waits for asyncio to write what it still buffers.
_CLOSE_TIMEOUT = 1.0
# Receives in a row that found input waiting; after this many, one yields to the event
# loop, so that a peer that keeps the socket full cannot starve the other tasks.
_MAX_EAGER_RECEIVES = 16


class _Protocol(asyncio.BufferedProtocol):
    """Collects input for :class:`AsyncioStream` and tracks the write side."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        # (Made by the event loop, in its thread, as are all its calls to us.)
        self._view = _read_buffer()
        self.chunks: list[bytes] = []
        self.size = 0
        self.reading_paused = False
        self.eof = False
        # Why the connection ended (None while it lives, or after a clean close).
        self.error: BaseException | None = None
        self.lost = False
        self.reader: asyncio.Future[None] | None = None
        self.writing_paused = False
        self.drain: asyncio.Future[None] | None = None
        self.closed: asyncio.Future[None] | None = None
        # While AsyncioStream.pump runs: the function input goes to, and what it raised.
        self.handler: Callable[[bytes], bool] | None = None
        self.handler_error: BaseException | None = None
        self.handler_stopped = False

    # -- asyncio's callbacks

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def get_buffer(self, sizehint: int) -> memoryview:
        return self._view

    def buffer_updated(self, nbytes: int) -> None:
        handler = self.handler
        if handler is not None and not self.chunks:
            try:
                keep = handler(bytes(self._view[:nbytes]))
            except BaseException as exc:  # re-raised by pump(), in its task
                self.handler_error = exc
                keep = False
            if not keep:
                self.handler = None
                self.handler_stopped = True
                self._wake_reader()
            return
        self.chunks.append(bytes(self._view[:nbytes]))
        self.size += nbytes
        if self.size > _HIGH_WATER and not self.reading_paused:
            assert self.transport is not None
            self.reading_paused = True
            self.transport.pause_reading()
        self._wake_reader()

    def eof_received(self) -> bool:
        self.eof = True
        self._wake_reader()
        # False: the transport closes itself; HTTP/2 has no use for a half-open link.
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        if exc is not None and self.error is None:
            self.error = exc
        self._wake_reader()
        self._wake_drain()
        if self.closed is not None and not self.closed.done():
            self.closed.set_result(None)

    def pause_writing(self) -> None:
        self.writing_paused = True

    def resume_writing(self) -> None:
        self.writing_paused = False
        self._wake_drain()

    # -- helpers for the stream

    def _wake_reader(self) -> None:
        reader = self.reader
        if reader is not None:
            self.reader = None
            if not reader.done():
                reader.set_result(None)

    def _wake_drain(self) -> None:
        drain = self.drain
        if drain is not None:
            self.drain = None
            if not drain.done():
                drain.set_result(None)

    def take(self, max_bytes: int) -> bytes:
        """Up to ``max_bytes`` of the unread input (there is some)."""
        chunks = self.chunks
        data = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        if len(data) > max_bytes:
            self.chunks = [data[max_bytes:]]
            data = data[:max_bytes]
        else:
            self.chunks = []
        self.size -= len(data)
        if self.reading_paused and self.size <= _LOW_WATER and not self.lost:
            assert self.transport is not None
            self.reading_paused = False
            self.transport.resume_reading()
        return data


class AsyncioStream(anyio.abc.ByteStream):
    """A connected TCP stream on an asyncio transport.

    One task receives and one sends at a time (the connection's reader and its
    flusher); unlike anyio's streams, concurrent use is not diagnosed.
    """

    def __init__(self, transport: asyncio.Transport, protocol: _Protocol) -> None:
        self._transport = transport
        self._protocol = protocol
        self._loop = asyncio.get_running_loop()
        self._closing = False
        self._eager = 0

    @property
    def unread_bytes(self) -> int:
        """Input received from the peer and not yet returned by :meth:`receive`."""
        return self._protocol.size

    @property
    def reading_paused(self) -> bool:
        """Whether the transport stopped reading because too much input is unread."""
        return self._protocol.reading_paused

    @property
    def writing_paused(self) -> bool:
        """Whether asyncio holds more output than the kernel takes (sends wait)."""
        return self._protocol.writing_paused

    async def receive(self, max_bytes: int = 65536) -> bytes:
        """The next bytes from the peer, at most ``max_bytes``.

        Raises:
            anyio.EndOfStream: the peer closed the connection.
            anyio.BrokenResourceError: the connection failed.
            anyio.ClosedResourceError: this stream was closed.

        On cancellation nothing is lost: unread input stays for the next call.
        """
        protocol = self._protocol
        if protocol.chunks:
            self._eager += 1
            if self._eager >= _MAX_EAGER_RECEIVES:
                self._eager = 0
                await asyncio.sleep(0)
        while not protocol.chunks:
            self._eager = 0
            if self._closing:
                raise anyio.ClosedResourceError
            if protocol.error is not None:
                raise anyio.BrokenResourceError from protocol.error
            if protocol.eof or protocol.lost:
                raise anyio.EndOfStream
            reader = protocol.reader = self._loop.create_future()
            await reader
        return protocol.take(max_bytes)

    async def pump(self, handler: Callable[[bytes], bool]) -> None:
        """Hand the input to ``handler`` as it arrives, until ``handler`` returns False.

        Input already received goes to ``handler`` first, from this task; then each
        read goes to it from asyncio's read callback, outside any task: ``handler``
        must not await, and must not need the current task.  Returns once ``handler``
        has returned False (the input after that stays for the next receive or pump).

        Raises:
            anyio.EndOfStream: the peer closed the connection.
            anyio.BrokenResourceError: the connection failed.
            anyio.ClosedResourceError: this stream was closed.
            BaseException: what ``handler`` raised, from this task.

        Cancellation: input stops going to ``handler`` and stays for the next call.
        """
        protocol = self._protocol
        while True:
            if protocol.chunks:
                if not handler(protocol.take(_HIGH_WATER)):
                    return
                continue
            if self._closing:
                raise anyio.ClosedResourceError
            if protocol.error is not None:
                raise anyio.BrokenResourceError from protocol.error
            if protocol.eof or protocol.lost:
                raise anyio.EndOfStream
            reader = protocol.reader = self._loop.create_future()
            protocol.handler = handler
            protocol.handler_stopped = False
            try:
                await reader
            finally:
                protocol.handler = None
            error = protocol.handler_error
            if error is not None:
                protocol.handler_error = None
                raise error
            if protocol.handler_stopped:
                return

    def write_now(self, data: bytes) -> bool:
        """Hand ``data`` to the transport; True unless asyncio now holds more output than
        the kernel takes (then :meth:`drained` waits for it to go).

        Raises:
            anyio.BrokenResourceError: the connection failed.
            anyio.ClosedResourceError: this stream was closed.
        """
        protocol = self._protocol
        if self._closing:
            raise anyio.ClosedResourceError
        if protocol.lost or self._transport.is_closing():
            raise anyio.BrokenResourceError from protocol.error
        self._transport.write(data)
        return not protocol.writing_paused

    async def drained(self) -> None:
        """Wait while asyncio holds more output than the kernel takes.

        Raises:
            anyio.BrokenResourceError: the connection failed.
            anyio.ClosedResourceError: this stream was closed.

        Cancelled while waiting, the bytes are still written once there is room.
        """
        protocol = self._protocol
        while protocol.writing_paused:
            if self._closing:
                raise anyio.ClosedResourceError
            if protocol.lost:
                raise anyio.BrokenResourceError from protocol.error
            drain = protocol.drain = self._loop.create_future()
            await drain

    async def send(self, item: bytes) -> None:
        """Write ``item``; waits only while the kernel's send buffer is full.

        Raises:
            anyio.BrokenResourceError: the connection failed.
            anyio.ClosedResourceError: this stream was closed.

        Cancelled while waiting, the bytes are still written once there is room.
        """
        if not self.write_now(item):
            await self.drained()

    async def send_eof(self) -> None:
        self._transport.write_eof()

    async def aclose(self) -> None:
        """Close the connection after writing what is buffered.

        Waits for that at most a second; cancelled (or timed out) it drops the
        connection at once.
        """
        self._closing = True
        protocol = self._protocol
        protocol._wake_reader()
        protocol._wake_drain()
        if protocol.lost:
            return
        closed = protocol.closed = self._loop.create_future()
        self._transport.close()
        try:
            with anyio.move_on_after(_CLOSE_TIMEOUT):
                await closed
        finally:
            if not protocol.lost:
                self._transport.abort()

    @property
    def extra_attributes(self) -> Mapping[Any, Callable[[], Any]]:
        sock: socket.socket = self._transport.get_extra_info("socket")
        return {
            anyio.abc.SocketAttribute.family: lambda: sock.family,
            anyio.abc.SocketAttribute.local_address: lambda: sock.getsockname(),
            anyio.abc.SocketAttribute.remote_address: lambda: sock.getpeername(),
            anyio.abc.SocketAttribute.raw_socket: lambda: sock,
        }


async def connect_asyncio_tcp(host: str, port: int) -> AsyncioStream:
    """Connect to ``host:port`` on the running asyncio loop.

    Tries every address the name resolves to, with RFC 8305 Happy Eyeballs
    (250 ms between attempts, as :func:`anyio.connect_tcp`). TCP_NODELAY is set
    (asyncio does it for every TCP transport).

    Raises:
        OSError: no address could be connected.

    Cancellation abandons the attempt and closes any socket it opened.
    """
    loop = asyncio.get_running_loop()
    transport, protocol = await loop.create_connection(
        _Protocol, host, port, happy_eyeballs_delay=0.25
    )
    assert isinstance(transport, asyncio.Transport)
    return AsyncioStream(transport, protocol)


async def accept_asyncio_tcp(listener: socket.socket) -> AsyncioStream:
    """Accept the next connection on the non-blocking listening socket ``listener``.

    TCP_NODELAY is set on it (asyncio does it for every TCP transport).

    Raises:
        OSError: accepting failed (EMFILE and the like).

    Cancellation: the pending accept is withdrawn; a connection accepted meanwhile is
    closed.
    """
    loop = asyncio.get_running_loop()
    sock, _ = await loop.sock_accept(listener)
    try:
        transport, protocol = await loop.connect_accepted_socket(_Protocol, sock)
    except BaseException:
        sock.close()
        raise
    assert isinstance(transport, asyncio.Transport)
    return AsyncioStream(transport, protocol)
