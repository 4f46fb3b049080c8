"""Opening the byte stream a connection runs on, on whichever backend is running."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

import anyio
import anyio.abc
import anyio.lowlevel
from anyio.streams.tls import TLSStream

from .._io._asyncio_stream import connect_asyncio_tcp

if TYPE_CHECKING:
    import ssl

__all__ = ["dial"]


async def dial(
    host: str, port: int, ssl_context: ssl.SSLContext | None, tls_hostname: str
) -> anyio.abc.ByteStream:
    """A connected stream to ``host:port``, wrapped in TLS when ``ssl_context`` is given.

    On asyncio the stream is :class:`~sepp_anyio._io._asyncio_stream.AsyncioStream` (asyncio's
    own transport, much cheaper per read and write), on trio
    :class:`~sepp_anyio._io._trio_stream.TrioStream` (trio's low-level socket waits, for the same
    reason); on any other backend it is :func:`anyio.connect_tcp`'s. TLS is
    :class:`anyio.streams.tls.TLSStream` on all of them, without the close_notify
    exchange (gRPC frames its own messages, and servers often drop the link without
    one).

    Raises:
        OSError: the TCP connection failed.
        ssl.SSLError: the TLS handshake failed.
        anyio.BrokenResourceError: the peer closed the link during the handshake.

    Cancellation closes whatever was opened.
    """
    stream: anyio.abc.ByteStream
    loop = anyio.lowlevel.current_token().native_token
    if isinstance(loop, asyncio.AbstractEventLoop):
        stream = await connect_asyncio_tcp(host, port)
    elif type(loop).__module__.partition(".")[0] == "trio":  # a trio.lowlevel.TrioToken
        # Imported here: trio is an optional dependency.
        from .._io._trio_stream import connect_trio_tcp

        stream = await connect_trio_tcp(host, port)
    else:
        stream = await anyio.connect_tcp(host, port)
    if ssl_context is None:
        return stream
    try:
        return await TLSStream.wrap(
            stream,
            hostname=tls_hostname,
            ssl_context=ssl_context,
            standard_compatible=False,
        )
    except BaseException:
        with anyio.CancelScope(shield=True):
            await stream.aclose()
        raise
