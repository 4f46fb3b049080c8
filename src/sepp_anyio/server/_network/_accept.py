"""Accepting connections as streams on the running backend's own primitives.

anyio's socket streams cost a served connection more per read and per write than the rest
of a small call does: on asyncio every receive resumes and pauses the transport's reading
and every send yields to the loop first; on trio every send and receive is a full
checkpoint even when the kernel had the bytes at once.  The client moved to the streams of
:mod:`sepp_anyio._io` for that reason; :class:`Acceptor` gives the server the same:
:class:`~sepp_anyio._io._asyncio_stream.AsyncioStream` on asyncio (accepted with asyncio's
``sock_accept``), :class:`~sepp_anyio._io._trio_stream.TrioStream` on trio (over anyio's
accepted stream), anyio's own stream on any other backend.  Every one of them offers
``write_now``/``drained`` (:class:`~sepp_anyio._io.EagerStream`) except the last.
"""

from __future__ import annotations

import abc
import asyncio
import socket
from typing import TYPE_CHECKING

import anyio
import anyio.abc
import anyio.lowlevel
from anyio.abc import SocketListener

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["Acceptor", "open_acceptor"]


class Acceptor(abc.ABC):
    """The connections of one listening socket, as byte streams.

    Each stream answers ``extra(SocketAttribute.remote_address)`` and closes its socket.
    """

    @abc.abstractmethod
    async def accept(self) -> anyio.abc.ByteStream:
        """The next connection.

        Raises:
            anyio.ClosedResourceError: :meth:`aclose` was called.
            OSError: accepting failed (EMFILE and the like); the listener stays usable.

        Cancellation: a plain cancellation point; nothing is accepted and lost.
        """

    @abc.abstractmethod
    async def aclose(self) -> None:
        """Stop listening (the socket is closed); a pending :meth:`accept` raises
        :class:`anyio.ClosedResourceError`."""


class _AsyncioAcceptor(Acceptor):
    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._closed = False
        # The scope of the accept in progress: aclose cancels it, and the socket is closed
        # once asyncio has stopped watching it (closing it under a registered reader would
        # leave the selector holding a dead descriptor).
        self._scope: anyio.CancelScope | None = None

    def _closing(self) -> bool:
        # A method, not the attribute: aclose() sets it while accept() awaits, which a
        # type checker's narrowing of the attribute would not see.
        return self._closed

    async def accept(self) -> anyio.abc.ByteStream:
        from sepp_anyio._io._asyncio_stream import accept_asyncio_tcp

        if self._closing():
            raise anyio.ClosedResourceError
        with anyio.CancelScope() as scope:
            self._scope = scope
            try:
                stream = await accept_asyncio_tcp(self._sock)
            finally:
                self._scope = None
                if self._closing():
                    self._sock.close()
        if scope.cancelled_caught:
            raise anyio.ClosedResourceError  # cancelled by aclose
        return stream

    async def aclose(self) -> None:
        self._closed = True
        if self._scope is not None:
            self._scope.cancel()
        else:
            self._sock.close()
        await anyio.lowlevel.checkpoint()


class _ListenerAcceptor(Acceptor):
    def __init__(
        self,
        listener: SocketListener,
        wrap: Callable[[anyio.abc.SocketStream], anyio.abc.ByteStream] | None,
    ) -> None:
        self._listener = listener
        self._wrap = wrap

    async def accept(self) -> anyio.abc.ByteStream:
        raw = await self._listener.accept()
        return raw if self._wrap is None else self._wrap(raw)

    async def aclose(self) -> None:
        await self._listener.aclose()


async def open_acceptor(sock: socket.socket) -> Acceptor:
    """An :class:`Acceptor` of the listening, non-blocking ``sock`` for the running backend
    (it owns the socket from now on).

    Raises:
        OSError: anyio could not take the socket.
    """
    loop = anyio.lowlevel.current_token().native_token
    if isinstance(loop, asyncio.AbstractEventLoop):
        return _AsyncioAcceptor(sock)
    listener = await SocketListener.from_socket(sock)
    if type(loop).__module__.partition(".")[0] == "trio":  # a trio.lowlevel.TrioToken
        # Imported here: trio is an optional dependency.
        from sepp_anyio._io._trio_stream import TrioStream

        return _ListenerAcceptor(listener, TrioStream)
    return _ListenerAcceptor(listener, None)
