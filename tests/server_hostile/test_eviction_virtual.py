"""Eviction when a connection cap is full, on virtual time, against raw scripted peers.

The order (``_admission``): a connection still in its handshake first (closed, no GOAWAY),
then an established one without a call in progress, those that never started a call
before those that did, the one idle longest first (GOAWAY NO_ERROR ``evicted``, then the
close); a connection with a call in progress never.  Only when nothing is evictable does
a cap refuse: per address the newcomer is closed at once, in total accepting pauses until
a connection closes or becomes idle.  With ``evict_when_full`` off the caps refuse as
before.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

import anyio
import pytest
from hyperframe.frame import GoAwayFrame, HeadersFrame, SettingsFrame

from sepp_anyio.server import NetworkServer
from tests.http2._support import Peer
from tests.reliability._wait import eventually

from ._harness import GRPC_REQUEST, Attacker, hostile_server
from ._vclock import VIRTUAL_BACKENDS, virtual_backend

pytestmark = pytest.mark.anyio

#: The empty request message of GetServerInfo (its 5-byte gRPC prefix).
EMPTY = b"\x00\x00\x00\x00\x00"
#: Far beyond every wait of these tests (virtual seconds).
WAIT = 60.0


@pytest.fixture(params=VIRTUAL_BACKENDS)
def anyio_backend(request: pytest.FixtureRequest) -> tuple[str, dict[str, Any]]:
    return virtual_backend(request)


async def read_until(attacker: Attacker, done: Callable[[], bool], within: float = WAIT) -> None:
    """Read until ``done()``, EOF, or ``within`` virtual seconds have passed."""
    deadline = anyio.current_time() + within
    while not done() and not attacker.eof:
        now = anyio.current_time()
        if now >= deadline:
            return
        await attacker.read(deadline - now)


def _settings_acked(attacker: Attacker) -> bool:
    return any(isinstance(f, SettingsFrame) and "ACK" in f.flags for f in attacker.frames)


def _answered(attacker: Attacker, stream_id: int) -> bool:
    return any(
        isinstance(f, HeadersFrame) and f.stream_id == stream_id and "END_STREAM" in f.flags
        for f in attacker.frames
    )


def _goaways(attacker: Attacker) -> list[tuple[int, bytes]]:
    return [
        (f.error_code, bytes(f.additional_data))
        for f in attacker.frames
        if isinstance(f, GoAwayFrame)
    ]


def _calls(server: NetworkServer) -> int:
    return sum(connection.active_calls for connection in server.connections)


class Client:
    """A raw peer that has shaken hands (the server acknowledged its SETTINGS)."""

    def __init__(self, attacker: Attacker) -> None:
        self.attacker = attacker
        self.next_stream = 1

    @classmethod
    async def open(cls, stack: contextlib.AsyncExitStack, port: int) -> Client:
        client = cls(await stack.enter_async_context(Attacker.connect(port)))
        await read_until(client.attacker, lambda: _settings_acked(client.attacker))
        assert _settings_acked(client.attacker)
        return client

    async def call(self) -> None:
        """One whole GetServerInfo call, answered."""
        stream_id = self._stream()
        peer = self.attacker.peer
        assert await self.attacker.send(
            peer.headers(stream_id, GRPC_REQUEST()) + Peer.data(stream_id, EMPTY, end_stream=True)
        )
        await read_until(self.attacker, lambda: _answered(self.attacker, stream_id))
        assert _answered(self.attacker, stream_id)

    async def start_call(self) -> int:
        """A call whose handler waits for its request body (in progress until ended)."""
        stream_id = self._stream()
        assert await self.attacker.send(self.attacker.peer.headers(stream_id, GRPC_REQUEST()))
        return stream_id

    async def end_call(self, stream_id: int) -> None:
        assert await self.attacker.send(Peer.data(stream_id, EMPTY, end_stream=True))
        await read_until(self.attacker, lambda: _answered(self.attacker, stream_id))
        assert _answered(self.attacker, stream_id)

    async def closed(self) -> bool:
        """Read until EOF (or the wait is over); True at EOF."""
        await read_until(self.attacker, lambda: False)
        return self.attacker.eof

    def _stream(self) -> int:
        stream_id = self.next_stream
        self.next_stream += 2
        return stream_id


async def test_the_connection_that_has_done_least_is_evicted_first() -> None:
    """Four connections per address allowed: A with a call in progress, B that made a call,
    C that never did, D that never sent a byte.  Each newcomer (which makes a call) evicts
    in turn D (closed: no GOAWAY), C (never called), B (idle longest of those that did),
    then the first newcomer; A is never evicted.  With every one busy, the next newcomer is
    closed at once; once A's call ends, A is the one evicted."""
    async with (
        hostile_server(max_connections_per_ip=4) as server,
        contextlib.AsyncExitStack() as stack,
    ):
        a = await Client.open(stack, server.port)
        a_call = await a.start_call()
        await eventually(lambda: _calls(server) == 1, within=WAIT, what="A's call")
        b = await Client.open(stack, server.port)
        await b.call()
        await anyio.sleep(10.0)  # virtual: B idle since t0, C connects at t0 + 10
        c = await Client.open(stack, server.port)
        await anyio.sleep(1.0)
        d = await stack.enter_async_context(Attacker.connect(server.port, handshake=False))
        await read_until(d, lambda: bool(d.frames))  # the server's SETTINGS: it is served
        assert server.admission.open == 4 and server.admission.evictions == 0

        newcomers: list[Client] = []
        for _ in range(4):
            await anyio.sleep(1.0)
            newcomer = await Client.open(stack, server.port)
            await newcomer.call()
            newcomers.append(newcomer)

        await read_until(d, lambda: False)
        assert d.eof and not any(isinstance(f, GoAwayFrame) for f in d.frames)
        for evicted in (c, b, newcomers[0]):
            assert await evicted.closed()
            assert _goaways(evicted.attacker) == [(0, b"evicted")]
        for kept in (a, *newcomers[1:]):
            assert not kept.attacker.eof and not _goaways(kept.attacker)
        assert server.admission.evictions == 4 and server.admission.open == 4

        # Every one busy: the next newcomer is refused (closed before it is served).
        for client in newcomers[1:]:
            await client.start_call()
        await eventually(lambda: _calls(server) == 4, within=WAIT, what="four calls")
        refused = await stack.enter_async_context(Attacker.connect(server.port))
        await read_until(refused, lambda: False)
        assert refused.eof and not refused.frames
        assert server.admission.refusals == 1

        # A's call ends: A may be evicted now, and is the only one that may.
        await a.end_call(a_call)
        last = await Client.open(stack, server.port)
        await last.call()
        assert await a.closed()
        assert _goaways(a.attacker)[-1] == (0, b"evicted")
        assert not any(client.attacker.eof for client in newcomers[1:])
        assert server.admission.peak_open == 4


@pytest.mark.parametrize("evict", [True, False])
async def test_a_full_server_of_busy_connections_pauses_accepting(evict: bool) -> None:
    """Two connections in total, both with a call in progress: a third is accepted by the
    kernel but not served (not even the server's SETTINGS) for a minute.  Once one call
    ends, the third is served and the now idle connection evicted; with eviction off, the
    third waits until a connection closes."""
    async with (
        hostile_server(max_connections=2, evict_when_full=evict) as server,
        contextlib.AsyncExitStack() as stack,
    ):
        first, second = [await Client.open(stack, server.port) for _ in range(2)]
        first_call = await first.start_call()
        await second.start_call()
        await eventually(lambda: _calls(server) == 2, within=WAIT, what="two calls")
        third = await stack.enter_async_context(Attacker.connect(server.port))
        await read_until(third, lambda: bool(third.frames), within=60.0)
        assert not third.frames and not third.eof

        await first.end_call(first_call)
        await read_until(third, lambda: bool(third.frames), within=10.0)
        if evict:
            assert third.frames  # served
            assert await first.closed()
            assert _goaways(first.attacker) == [(0, b"evicted")]
        else:
            assert not third.frames and not first.attacker.eof
            await first.attacker.stream.aclose()
            await read_until(third, lambda: bool(third.frames), within=10.0)
            assert third.frames
        assert not second.attacker.eof
        assert server.admission.peak_open == 2


@pytest.mark.parametrize("evict", [True, False])
async def test_idle_connections_make_room_on_a_full_server(evict: bool) -> None:
    """Three connections in total, all idle: a fourth is served at once and the one idle
    longest gets GOAWAY ``evicted``; with eviction off, it waits until the idle timeout
    (5 min) has closed one.  (The peers do not answer PINGs: keepalive is off here, so
    that the dead-peer check does not close them first.)"""
    async with (
        hostile_server(max_connections=3, evict_when_full=evict, keepalive_time_ms=0) as server,
        contextlib.AsyncExitStack() as stack,
    ):
        clients = []
        for _ in range(3):
            clients.append(await Client.open(stack, server.port))
            await anyio.sleep(1.0)
        opened = anyio.current_time()
        fourth = await stack.enter_async_context(Attacker.connect(server.port))
        await read_until(fourth, lambda: _settings_acked(fourth), within=400.0)
        waited = anyio.current_time() - opened
        assert _settings_acked(fourth)
        if evict:
            assert waited < 1.0
            assert await clients[0].closed()
            assert _goaways(clients[0].attacker) == [(0, b"evicted")]
            assert not any(client.attacker.eof for client in clients[1:])
        else:
            assert 290.0 <= waited <= 302.0
            assert await clients[0].closed()
            assert _goaways(clients[0].attacker) == [(0, b"idle")]
        assert server.admission.peak_open == 3


async def test_an_evicted_connection_stops_counting_and_is_released_once() -> None:
    """A cap of one per address and a stream of newcomers that never send a byte: each
    evicts the one before; the counts of open and closing connections end at one and
    zero, and every connection is released exactly once (the admission's counts would go
    wrong otherwise)."""
    async with (
        hostile_server(max_connections_per_ip=1) as server,
        contextlib.AsyncExitStack() as stack,
    ):
        attackers = [
            await stack.enter_async_context(Attacker.connect(server.port, handshake=False))
            for _ in range(20)
        ]
        await eventually(
            lambda: server.admission.admitted == 20 and not server.admission.closing,
            within=WAIT,
            what="every newcomer admitted and every victim closed",
        )
        for attacker in attackers[:-1]:
            await read_until(attacker, lambda: False, within=10.0)
            assert attacker.eof
        assert server.admission.open == 1 and server.admission.evictions == 19
        assert server.admission.peak_open == 1
        last = attackers[-1]
        assert not last.eof
    await eventually(lambda: not server.connections, within=WAIT, what="every close")
