"""The asyncio-native TCP stream the channel uses on asyncio, over loopback.

The stream itself exists only on asyncio, so its own tests run there; the
trio half checks that ``dial`` gives trio its own stream (test_trio_stream.py), and the
whole channel suite (test_channel.py and the interop, fault and hostile suites)
runs on both.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
import struct
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
import anyio.abc
import anyio.lowlevel
import pytest
import trustme
from anyio.streams.tls import TLSAttribute, TLSStream

from sepp_anyio._io._asyncio_stream import (
    _HIGH_WATER,
    _READ_BUFFER,
    AsyncioStream,
    connect_asyncio_tcp,
)
from sepp_anyio._io._trio_stream import TrioStream
from sepp_anyio._transport._dial import dial
from tests.reliability._wait import eventually
from tests.support.servers import pattern_bytes
from tests.transport._pumping import pump_one_then_stop

pytestmark = pytest.mark.anyio

asyncio_only = pytest.mark.parametrize("anyio_backend", ["asyncio"])


@asynccontextmanager
async def connected_pair() -> AsyncIterator[tuple[AsyncioStream, anyio.abc.SocketStream]]:
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
            ours = await connect_asyncio_tcp("127.0.0.1", port)
        (peer,) = accepted
        try:
            yield ours, peer
        finally:
            with anyio.CancelScope(shield=True):
                await ours.aclose()
                await peer.aclose()


async def _receive_all(stream: anyio.abc.ByteStream, size: int) -> bytes:
    data = bytearray()
    with anyio.fail_after(10):
        while len(data) < size:
            data += await stream.receive()
    return bytes(data)


@asyncio_only
async def test_bytes_both_ways_in_order_and_max_bytes_kept() -> None:
    async with connected_pair() as (ours, peer):
        await ours.send(b"hello")
        assert await _receive_all(peer, 5) == b"hello"
        payload = pattern_bytes(300_000)
        await peer.send(payload)
        received = bytearray()
        with anyio.fail_after(10):
            while len(received) < len(payload):
                chunk = await ours.receive(1000)
                assert 0 < len(chunk) <= 1000
                received += chunk
        assert bytes(received) == payload
        assert ours.extra(anyio.abc.SocketAttribute.remote_address) == peer.extra(
            anyio.abc.SocketAttribute.local_address
        )


@asyncio_only
async def test_end_of_stream_after_the_last_bytes() -> None:
    async with connected_pair() as (ours, peer):
        await peer.send(b"last words")
        await peer.aclose()
        assert await _receive_all(ours, 10) == b"last words"
        with anyio.fail_after(10), pytest.raises(anyio.EndOfStream):
            await ours.receive()


@asyncio_only
async def test_a_cancelled_receive_loses_nothing() -> None:
    async with connected_pair() as (ours, peer):
        with anyio.move_on_after(0.01):
            await ours.receive()
        await peer.send(b"after the cancel")
        assert await _receive_all(ours, 16) == b"after the cancel"


@asyncio_only
async def test_unread_input_is_bounded_and_none_is_lost() -> None:
    """A peer that sends while we do not read fills at most the high-water mark
    (plus one read) before the transport stops reading; reading resumes it."""
    total = 6 * _HIGH_WATER
    payload = pattern_bytes(total)
    async with connected_pair() as (ours, peer):
        async with anyio.create_task_group() as tg:
            tg.start_soon(peer.send, payload)
            await eventually(
                lambda: ours.unread_bytes >= _HIGH_WATER, within=10, what="the input to pile up"
            )
            held = ours.unread_bytes
            assert held <= _HIGH_WATER + _READ_BUFFER
            assert ours.reading_paused
            # The peer is still sending (the kernel's buffers take some of it), but
            # nothing more reaches us while we do not read.
            await anyio.sleep(0.05)
            assert ours.unread_bytes == held
            received = await _receive_all(ours, total)
        assert received == payload
        assert not ours.reading_paused


@asynccontextmanager
async def silent_peer() -> AsyncIterator[AsyncioStream]:
    """Our stream, connected to a plain socket that is never read (anyio's own streams
    read ahead into memory, so they are no good as a peer that does not read)."""
    with socket.socket() as listener:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        ours = await connect_asyncio_tcp("127.0.0.1", listener.getsockname()[1])
        peer, _ = listener.accept()  # already connected: the kernel completed it
        try:
            yield ours
        finally:
            with anyio.CancelScope(shield=True):
                await ours.aclose()
            peer.close()


@asyncio_only
async def test_close_ends_a_send_blocked_on_a_peer_that_does_not_read() -> None:
    async with silent_peer() as ours:
        failures: list[BaseException] = []

        async def flood() -> None:
            try:
                with anyio.fail_after(10):
                    while True:
                        await ours.send(bytes(1 << 20))
            except anyio.ClosedResourceError as exc:
                # Ended by the close itself, not by the connection's loss when the
                # close gives up waiting for the peer and aborts.
                assert not ours._protocol.lost
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


@asyncio_only
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


@asyncio_only
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


async def test_dial_picks_the_backends_stream(anyio_backend: str) -> None:
    async with await anyio.create_tcp_listener(local_host="127.0.0.1") as multi:
        port = multi.listeners[0].extra(anyio.abc.SocketAttribute.local_port)
        stream = await dial("127.0.0.1", port, None, "127.0.0.1")
        try:
            assert isinstance(stream, AsyncioStream) is (anyio_backend == "asyncio")
            assert isinstance(stream, TrioStream) is (anyio_backend == "trio")
            assert isinstance(stream, anyio.abc.ByteStream)
        finally:
            await stream.aclose()


@asyncio_only
async def test_pump_hands_input_to_the_handler_in_asyncios_callback() -> None:
    """Input goes to the handler as it is read, outside any task; once the handler says
    stop, pump returns and what comes later waits for the next receive."""
    async with connected_pair() as (ours, peer):
        seen: list[tuple[bytes, bool]] = []

        def handler(data: bytes) -> bool:
            seen.append((data, asyncio.current_task() is None))
            return data != b"stop"

        await pump_one_then_stop(ours, peer, handler, seen)
        assert seen == [(b"one", True), (b"stop", True)]
        await peer.send(b"later")
        assert await _receive_all(ours, 5) == b"later"
        assert len(seen) == 2


@asyncio_only
async def test_pump_gives_queued_input_first_and_raises_what_the_handler_raised() -> None:
    async with connected_pair() as (ours, peer):
        await peer.send(b"queued")
        await eventually(lambda: ours.unread_bytes == 6, within=10, what="the input")
        seen: list[bytes] = []

        def handler(data: bytes) -> bool:
            seen.append(data)
            if data == b"boom":
                raise LookupError("from the handler")
            return True

        async with anyio.create_task_group() as tg:

            async def send_boom() -> None:
                await eventually(lambda: len(seen) == 1, within=10, what="the queued input")
                await peer.send(b"boom")

            tg.start_soon(send_boom)
            with anyio.fail_after(10), pytest.raises(LookupError, match="from the handler"):
                await ours.pump(handler)
        assert seen == [b"queued", b"boom"]


@asyncio_only
async def test_pump_ends_with_the_connection() -> None:
    async with connected_pair() as (ours, peer):
        await peer.aclose()
        with anyio.fail_after(10), pytest.raises(anyio.EndOfStream):
            await ours.pump(lambda data: True)


@asyncio_only
async def test_receives_that_find_input_waiting_yield_now_and_then() -> None:
    """A peer that keeps the socket full must not starve the other tasks: a run of
    receives that never wait yields to the loop every few of them."""
    payload = pattern_bytes(_HIGH_WATER)
    async with connected_pair() as (ours, peer):
        await peer.send(payload)
        await eventually(
            lambda: ours.unread_bytes == len(payload), within=10, what="the input to arrive"
        )
        ticks = 0
        stop = False

        async def other_task() -> None:
            nonlocal ticks
            while not stop:
                ticks += 1
                await anyio.lowlevel.checkpoint()

        async with anyio.create_task_group() as tg:
            tg.start_soon(other_task)
            await anyio.lowlevel.checkpoint()
            before = ticks
            received = 0
            for _ in range(64):  # 64 receives of 1 KiB, all of them waiting in memory
                received += len(await ours.receive(1024))
            during = ticks - before
            stop = True
        assert received == 64 * 1024
        assert 2 <= during <= 8
