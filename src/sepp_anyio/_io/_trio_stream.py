"""A TCP byte stream on trio's own low-level socket waits.

On trio, :func:`anyio.connect_tcp` gives anyio's wrapper of ``trio.SocketStream``, whose
every send and every receive is a full trio checkpoint: the task yields to the scheduler
even when the kernel took the bytes at once, and a receive first tries ``recv`` (which
fails with ``EAGAIN`` when the connection's reader has just drained the socket) before it
waits. For a gRPC client that writes a few hundred bytes and waits for a few hundred back,
those extra scheduler turns and system calls are a large part of its CPU per call.

:class:`TrioStream` is the same :class:`anyio.abc.ByteStream` contract on the connected
socket (anyio's public ``SocketAttribute.raw_socket``) and trio's public
``trio.lowlevel.wait_readable`` / ``wait_writable``: a send writes at once and waits only
while the kernel's buffer is full; a receive that follows a short read (the socket was
drained) waits for readability first instead of asking the kernel in vain. anyio's stream
keeps owning the socket: closing goes through it, so trio is told the socket is closing.
TLS goes on top of it through :class:`anyio.streams.tls.TLSStream`. Only used when the
running backend is trio.

Both this stream and :class:`~._asyncio_stream.AsyncioStream` offer :meth:`write_now`,
which lets the connection's flush write without an await (and so without the cancel
scope that shields an await) whenever the kernel takes the bytes at once, and ``pump``,
which hands every read to the connection's parser as it comes (here from the reader's
own loop: trio has no read callbacks), without a return to the reader's loop per read.
"""

from __future__ import annotations

import socket
from typing import TYPE_CHECKING, Any

import anyio
import anyio.abc
import trio

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Mapping

__all__ = ["TrioStream", "connect_trio_tcp"]

# Receives in a row that found data at once; after this many, one yields to the scheduler
# so that a peer that keeps the socket full cannot starve the other tasks.
_MAX_EAGER_RECEIVES = 16
# What one read of :meth:`TrioStream.pump` takes at most (the connection's own read size).
_PUMP_READ = 1 << 16


class TrioStream(anyio.abc.ByteStream):
    """A connected TCP stream on trio's low-level socket waits.

    One task receives and one sends at a time (the connection's reader and its flusher);
    unlike anyio's streams, concurrent use is not diagnosed.
    """

    def __init__(self, owner: anyio.abc.SocketStream) -> None:
        self._owner = owner
        self._sock: socket.socket = owner.extra(anyio.abc.SocketAttribute.raw_socket)
        self._pending: memoryview | None = None
        # Whether the last receive drained the socket (it returned less than asked).
        self._drained = True
        self._eager = 0
        self._closed = False

    @property
    def writing_paused(self) -> bool:
        """Whether bytes wait for room in the kernel's send buffer (see :meth:`drained`)."""
        return self._pending is not None

    def _failed(self, exc: OSError) -> Exception:
        """The stream's error for a failed system call (after a close: closed)."""
        if self._closed:
            return anyio.ClosedResourceError()
        return anyio.BrokenResourceError()

    async def _wait(self, wait: Callable[[socket.socket], Awaitable[None]]) -> None:
        """``trio.lowlevel.wait_readable`` / ``wait_writable`` on the socket, with trio's
        "closed while waiting" as anyio's error."""
        try:
            await wait(self._sock)
        except trio.ClosedResourceError:
            raise anyio.ClosedResourceError from None

    async def receive(self, max_bytes: int = 65536) -> bytes:
        """The next bytes from the peer, at most ``max_bytes``.

        Raises:
            anyio.EndOfStream: the peer closed the connection.
            anyio.BrokenResourceError: the connection failed.
            anyio.ClosedResourceError: this stream was closed.

        On cancellation nothing is lost: no bytes are read while waiting.
        """
        received: list[bytes] = []

        def take(data: bytes) -> bool:
            received.append(data)
            return False

        await self.pump(take, max_bytes)
        return received[0]

    async def pump(self, handler: Callable[[bytes], bool], max_bytes: int = _PUMP_READ) -> None:
        """Hand the input to ``handler`` as it arrives (at most ``max_bytes`` a read), until
        ``handler`` returns False.

        A reader that parses every read at once saves the frames of a :meth:`receive` call
        and its return to the reader's loop on every read (two per unary call).
        ``handler`` must not await. Returns once ``handler`` has returned False.

        Raises:
            anyio.EndOfStream: the peer closed the connection.
            anyio.BrokenResourceError: the connection failed.
            anyio.ClosedResourceError: this stream was closed.
            BaseException: what ``handler`` raised.

        On cancellation nothing is lost: no bytes are read while waiting.
        """
        sock = self._sock
        while True:
            if self._closed:
                raise anyio.ClosedResourceError
            if self._drained or self._eager >= _MAX_EAGER_RECEIVES:
                self._eager = 0
                try:  # (not _wait: a reader's task resumes here on every read)
                    await trio.lowlevel.wait_readable(sock)
                except trio.ClosedResourceError:
                    raise anyio.ClosedResourceError from None
            try:
                data = sock.recv(max_bytes)
            except BlockingIOError:
                self._drained = True
                continue
            except OSError as exc:
                raise self._failed(exc) from exc
            if not data:
                raise anyio.EndOfStream
            self._drained = len(data) < max_bytes
            self._eager += 1
            if not handler(data):
                return

    def write_now(self, data: bytes) -> bool:
        """Write ``data`` as far as the kernel takes it now; True when all of it went.

        What is left is written by the next :meth:`drained` (or :meth:`send`), before any
        later bytes.

        Raises:
            anyio.BrokenResourceError: the connection failed.
            anyio.ClosedResourceError: this stream was closed.
        """
        if self._closed:
            raise anyio.ClosedResourceError
        if self._pending is not None:
            self._pending = memoryview(bytes(self._pending) + data)
            return False
        try:
            sent = self._sock.send(data)
        except BlockingIOError:
            sent = 0
        except OSError as exc:
            raise self._failed(exc) from exc
        if sent == len(data):
            return True
        self._pending = memoryview(data)[sent:]
        return False

    async def drained(self) -> None:
        """Wait until what :meth:`write_now` left is written.

        Raises:
            anyio.BrokenResourceError: the connection failed.
            anyio.ClosedResourceError: this stream was closed.

        Cancelled, the rest stays pending for the next write.
        """
        sock = self._sock
        while self._pending is not None:
            await self._wait(trio.lowlevel.wait_writable)
            if self._closed:
                raise anyio.ClosedResourceError
            view = self._pending
            try:
                sent = sock.send(view)
            except BlockingIOError:
                continue
            except OSError as exc:
                raise self._failed(exc) from exc
            self._pending = view[sent:] if sent < len(view) else None

    async def send(self, item: bytes) -> None:
        """Write ``item``; waits only while the kernel's send buffer is full.

        Raises:
            anyio.BrokenResourceError: the connection failed.
            anyio.ClosedResourceError: this stream was closed.

        Cancelled while waiting, the rest of the bytes stays pending for the next write.
        """
        if not self.write_now(item):
            await self.drained()

    async def send_eof(self) -> None:
        await self._owner.send_eof()

    async def aclose(self) -> None:
        """Close the socket (through anyio's stream, which tells trio first)."""
        self._closed = True
        self._pending = None
        await self._owner.aclose()

    @property
    def extra_attributes(self) -> Mapping[Any, Callable[[], Any]]:
        return self._owner.extra_attributes


async def connect_trio_tcp(host: str, port: int) -> TrioStream:
    """Connect to ``host:port`` (with :func:`anyio.connect_tcp`: Happy Eyeballs,
    TCP_NODELAY) and return the stream on trio's low-level waits.

    Raises:
        OSError: no address could be connected.

    Cancellation abandons the attempt and closes any socket it opened.
    """
    return TrioStream(await anyio.connect_tcp(host, port))
