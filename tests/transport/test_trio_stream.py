"""The trio-native TCP stream the channel uses on trio, over loopback.

The stream exists only on trio, so its own tests run there (its asyncio twin has
test_asyncio_stream.py); the whole channel suite (test_channel.py and the interop, fault
and hostile suites) runs on both backends.
"""

from __future__ import annotations

import socket
import ssl
import struct
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
import anyio.abc
import pytest
import trustme
from anyio.streams.tls import TLSAttribute, TLSStream

from sepp_anyio._io._trio_stream import TrioStream, connect_trio_tcp
from tests.reliability._wait import eventually
from tests.support.servers import pattern_bytes
from tests.transport._pumping import pump_one_then_stop

pytestmark = [pytest.mark.anyio, pytest.mark.parametrize("anyio_backend", ["trio"])]


@asynccontextmanager
async def connected_pair() -> AsyncIterator[tuple[TrioStream, anyio.abc.SocketStream]]:
    """Our stream, connected to a plain anyio peer listening in this test."""
    async with await anyio.create_tcp_listener(local_host="127.0.0.1") as multi:
        listener = multi.listeners[0]
        assert isinstance(listener, anyio.abc.SocketListener)
        port = listener.extra(anyio.abc.SocketAttribute.local_port)
        async with anyio.create_task_group() as tg:
            accepted: list[anyio.abc.SocketStream] = []

            async def accept() -> None:
                accepted.append(await listener.accept())

            tg.start_soon(accept)
            ours = await connect_trio_tcp("127.0.0.1", port)
        (peer,) = accepted
        try:
            yield ours, peer
        finally:
            with anyio.CancelScope(shield=True):
                await ours.aclose()
                await peer.aclose()


async def _receive_all(stream: anyio.abc.ByteStream, size: int, chunk: int = 65536) -> bytes:
    data = bytearray()
    with anyio.fail_after(10):
        while len(data) < size:
            data += await stream.receive(chunk)
    return bytes(data)


async def test_bytes_both_ways_in_order_and_max_bytes_kept() -> None:
    async with connected_pair() as (ours, peer):
        await ours.send(b"hello")
        assert await _receive_all(peer, 5) == b"hello"
        payload = pattern_bytes(300_000)
        async with anyio.create_task_group() as tg:
            tg.start_soon(peer.send, payload)
            received = bytearray()
            with anyio.fail_after(10):
                while len(received) < len(payload):
                    chunk = await ours.receive(1000)
                    assert 0 < len(chunk) <= 1000
                    received += chunk
        assert received == payload


async def test_end_of_stream_after_the_last_bytes() -> None:
    async with connected_pair() as (ours, peer):
        await peer.send(b"last words")
        await peer.aclose()
        assert await _receive_all(ours, 10) == b"last words"
        with anyio.fail_after(10), pytest.raises(anyio.EndOfStream):
            await ours.receive()


async def test_a_cancelled_receive_loses_nothing() -> None:
    async with connected_pair() as (ours, peer):
        with anyio.move_on_after(0.01):
            await ours.receive()
        await peer.send(b"after the cancel")
        assert await _receive_all(ours, 16) == b"after the cancel"


async def test_a_peer_that_keeps_the_socket_full_does_not_starve_other_tasks() -> None:
    """Receives that find data at once still yield every few calls."""
    payload = pattern_bytes(1 << 20)
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await anyio.lowlevel.checkpoint()

    async with connected_pair() as (ours, peer), anyio.create_task_group() as tg:
        tg.start_soon(peer.send, payload)
        tg.start_soon(ticker)
        received = await _receive_all(ours, len(payload), chunk=512)
        tg.cancel_scope.cancel()
    assert received == payload
    assert ticks > 0


async def test_pump_hands_each_read_to_the_handler_until_it_says_stop() -> None:
    """What comes after the handler said stop waits for the next receive."""
    async with connected_pair() as (ours, peer):
        seen: list[bytes] = []

        def handler(data: bytes) -> bool:
            seen.append(data)
            return not data.endswith(b"stop")

        await pump_one_then_stop(ours, peer, handler, seen)
        assert seen == [b"one", b"stop"]
        await peer.send(b"later")
        assert await _receive_all(ours, 5) == b"later"
        assert len(seen) == 2


async def test_pump_raises_what_the_handler_raised_and_ends_with_the_connection() -> None:
    async with connected_pair() as (ours, peer):

        def handler(data: bytes) -> bool:
            raise LookupError(f"from the handler: {data!r}")

        await peer.send(b"boom")
        with anyio.fail_after(10), pytest.raises(LookupError, match="b'boom'"):
            await ours.pump(handler)
        await peer.aclose()
        with anyio.fail_after(10), pytest.raises(anyio.EndOfStream):
            await ours.pump(lambda data: True)


async def test_a_cancelled_pump_loses_nothing() -> None:
    def handler(data: bytes) -> bool:
        raise AssertionError("no input was sent")

    async with connected_pair() as (ours, peer):
        with anyio.move_on_after(0.01):
            await ours.pump(handler)
        await peer.send(b"after the cancel")
        assert await _receive_all(ours, 16) == b"after the cancel"


@asynccontextmanager
async def silent_peer() -> AsyncIterator[TrioStream]:
    """Our stream, connected to a plain socket that is never read."""
    with socket.socket() as listener:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        ours = await connect_trio_tcp("127.0.0.1", listener.getsockname()[1])
        peer, _ = listener.accept()  # already connected: the kernel completed it
        try:
            yield ours
        finally:
            with anyio.CancelScope(shield=True):
                await ours.aclose()
            peer.close()


async def test_write_now_keeps_what_the_kernel_does_not_take_in_order() -> None:
    """A peer that reads nothing: write_now says so, and keeps the rest in order; once
    the peer reads, drained() writes it."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        ours = await connect_trio_tcp("127.0.0.1", listener.getsockname()[1])
        peer, _ = listener.accept()
        try:
            payload = pattern_bytes(64 << 20)
            assert not ours.write_now(payload)
            assert ours.writing_paused
            assert not ours.write_now(b"tail")  # queued after the rest
            received = bytearray()
            peer.setblocking(False)

            async def read_all() -> None:
                while len(received) < len(payload) + 4:
                    await anyio.wait_readable(peer)
                    received.extend(peer.recv(1 << 20))

            with anyio.fail_after(30):
                async with anyio.create_task_group() as tg:
                    tg.start_soon(read_all)
                    await ours.drained()
            assert ours.write_now(b"")  # nothing is left waiting
            assert bytes(received) == payload + b"tail"
        finally:
            with anyio.CancelScope(shield=True):
                await ours.aclose()
            peer.close()


async def test_close_ends_a_send_blocked_on_a_peer_that_does_not_read() -> None:
    async with silent_peer() as ours:
        failures: list[BaseException] = []

        async def flood() -> None:
            try:
                with anyio.fail_after(10):
                    while True:
                        await ours.send(bytes(1 << 20))
            except anyio.ClosedResourceError as exc:
                failures.append(exc)

        async with anyio.create_task_group() as tg:
            tg.start_soon(flood)
            await eventually(lambda: ours.writing_paused, within=10, what="the send to block")
            with anyio.fail_after(5):
                await ours.aclose()
        assert len(failures) == 1
        with pytest.raises(anyio.ClosedResourceError):
            await ours.send(b"x")
        with pytest.raises(anyio.ClosedResourceError):
            await ours.receive()


async def test_send_to_a_reset_connection_is_broken() -> None:
    async with connected_pair() as (ours, peer):
        sock = peer.extra(anyio.abc.SocketAttribute.raw_socket)
        # SO_LINGER 0: close with RST.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        await peer.aclose()
        with anyio.fail_after(10), pytest.raises((anyio.BrokenResourceError, anyio.EndOfStream)):
            await ours.receive()
        with pytest.raises(anyio.BrokenResourceError):
            await ours.send(b"x")


async def test_tls_on_top_negotiates_alpn() -> None:
    ca = trustme.CA()
    cert = ca.issue_cert("localhost")
    server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    cert.configure_cert(server_context)
    server_context.set_alpn_protocols(["h2"])
    client_context = ssl.create_default_context()
    ca.configure_trust(client_context)
    client_context.set_alpn_protocols(["h2"])
    async with connected_pair() as (ours, peer):
        async with anyio.create_task_group() as tg:
            wrapped: list[TLSStream] = []

            async def serve() -> None:
                wrapped.append(
                    await TLSStream.wrap(
                        peer,
                        server_side=True,
                        ssl_context=server_context,
                        standard_compatible=False,
                    )
                )

            tg.start_soon(serve)
            tls = await TLSStream.wrap(
                ours, hostname="localhost", ssl_context=client_context, standard_compatible=False
            )
        assert tls.extra(TLSAttribute.alpn_protocol) == "h2"
        await tls.send(b"over TLS")
        assert await _receive_all(wrapped[0], 8) == b"over TLS"
        assert ours.extra(anyio.abc.SocketAttribute.remote_address)[0] == "127.0.0.1"
