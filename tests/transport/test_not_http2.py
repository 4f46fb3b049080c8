"""Connecting to something that is not an HTTP/2 server says so, and asks about the port.

Issue #29: ``sepp.connect`` to ``python -m http.server`` failed with ``frame of 3940676
bytes exceeds SETTINGS_MAX_FRAME_SIZE 16384``: the HTML page read as a frame header.
An HTTP/2 server's first frame is SETTINGS (RFC 9113 section 3.4); anything else (an
HTTP/1 reply, a page, another protocol's banner), whole or cut short, is reported as
"not an HTTP/2 (gRPC) server; is this the right port?" naming the address, through
``ConnectError``. A TLS record keeps its own advice (use TLS), and a real HTTP/2 server
that breaks the protocol keeps the protocol error.

Against the standard library's HTTP server (what the issue used) and scripted peers on
loopback, on both backends.
"""

from __future__ import annotations

import http.server
import threading
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager, suppress

import anyio
import anyio.abc
import pytest

import sepp_anyio
from sepp_anyio import ConnectError
from tests.http2._support import Peer, raw

pytestmark = pytest.mark.anyio

NOT_HTTP2 = "not an HTTP/2 (gRPC) server"
RIGHT_PORT = "is this the right port?"


@contextmanager
def stdlib_http_server() -> Iterator[str]:
    """``python -m http.server``'s server, in a thread; its address."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.BaseHTTPRequestHandler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    try:
        yield f"127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        thread.join(10)
        server.server_close()


@asynccontextmanager
async def answering(reply: bytes) -> AsyncIterator[str]:
    """A peer that answers a connection's first bytes with ``reply`` and ends its side,
    as an HTTP/1.0 server does; its address. It half-closes and reads until the client
    hangs up: closing with the client's bytes unread would reset the connection, and
    the reset could lose the reply."""

    async def handle(stream: anyio.abc.SocketStream) -> None:
        # (The client's EOF or reset ends it; neither is the test's business.)
        with suppress(anyio.EndOfStream, anyio.BrokenResourceError, OSError):
            async with stream:
                with anyio.move_on_after(10):
                    await stream.receive()
                    await stream.send(reply)
                    await stream.send_eof()
                    while True:
                        await stream.receive()

    listener = await anyio.create_tcp_listener(local_host="127.0.0.1")
    async with listener, anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, handle)
        yield f"127.0.0.1:{listener.extra(anyio.abc.SocketAttribute.local_port)}"
        tg.cancel_scope.cancel()


async def _connect_error(address: str) -> str:
    with anyio.fail_after(20), pytest.raises(ConnectError) as caught:
        async with sepp_anyio.connect(address, connect_timeout=10):
            pytest.fail("connected to a server that is not HTTP/2")  # pragma: no cover
    return str(caught.value)


async def test_the_standard_librarys_http_server() -> None:
    """Before the fix: ``frame of 3940676 bytes exceeds SETTINGS_MAX_FRAME_SIZE 16384``."""
    with stdlib_http_server() as address:
        message = await _connect_error(address)
    assert NOT_HTTP2 in message and RIGHT_PORT in message, message
    assert address in message
    assert "SETTINGS_MAX_FRAME_SIZE" not in message


@pytest.mark.parametrize(
    ("reply", "quoted"),
    [
        pytest.param(
            b"HTTP/1.0 400 Bad Request\r\nContent-Type: text/html\r\n\r\n<html>",
            '"HTTP/1.0 400 Bad Request"',
            id="an HTTP/1 reply",
        ),
        pytest.param(b"SSH-2.0-OpenSSH_9.6\r\n", '"SSH-2.0-OpenSSH_9.6"', id="a banner"),
        pytest.param(b"HTTP/", '"HTTP/"', id="cut short, then closed"),
        pytest.param(
            raw(0x7, 0, 0, b"\0\0\0\0\0\0\0\x01"), "b'\\x00\\x00\\x08\\x07", id="GOAWAY first"
        ),
    ],
)
async def test_a_first_reply_that_is_not_settings(reply: bytes, quoted: str) -> None:
    """Whatever the reply, a first frame that cannot be SETTINGS: the message names the
    address and quotes what came (before the fix: a frame size error, a protocol error
    or "connection closed by the server")."""
    async with answering(reply) as address:
        message = await _connect_error(address)
    assert NOT_HTTP2 in message and RIGHT_PORT in message, message
    assert f"(it answered {quoted}" in message, message
    assert address in message


async def test_a_tls_server_still_gets_the_tls_advice() -> None:
    """A TLS alert is not called "not HTTP/2": the advice is to use TLS."""
    async with answering(bytes([21, 3, 3, 0, 2, 2, 70])) as address:
        message = await _connect_error(address)
    assert f"the server speaks TLS; use https://{address} or tls=True" in message
    assert NOT_HTTP2 not in message


async def test_an_http2_server_breaking_the_protocol_keeps_its_error() -> None:
    """A SETTINGS frame first, with a value a server may not send: an HTTP/2 server
    after all, so the protocol error is what is reported."""
    async with answering(Peer.settings({2: 1})) as address:
        message = await _connect_error(address)
    assert "HTTP/2 protocol error from the server" in message, message
    assert "ENABLE_PUSH" in message
    assert NOT_HTTP2 not in message
