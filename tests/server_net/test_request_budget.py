"""Request bytes being assembled are budgeted per connection and across the server.

Raw HTTP/2 peers (``tests/http2/_support``'s frames) each open a call announcing a large
message, send as much of it as the server's windows allow and stall.  The caps are set low
here (the defaults are 32 MiB and 256 MiB); the server's windows are the real ones
(1 MiB per stream), so a stalled call holds at most the cap plus one stream window, and
with the caps switched off (set huge) it holds all it sent.

Virtual time (trio's ``MockClock(autojump_threshold=0)``, asyncio's ``VirtualTimeLoop``):
the clock moves only when every task waits, so "read until nothing more comes" is a short
virtual timeout, and the calls' 5 s deadlines pass without real waiting.  The server,
the raw peers and our client share the test's event loop, on loopback.
"""

from __future__ import annotations

import dataclasses
import itertools
import weakref
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

import anyio
import pytest
import trio.testing
from hyperframe.frame import (
    HeadersFrame,
    PingFrame,
    RstStreamFrame,
    SettingsFrame,
    WindowUpdateFrame,
)

import sepp_anyio as sepp
from sepp_anyio.server import Engine, LimitsConfig, NetworkServer, ServerConfig
from sepp_anyio.server._config._sections import ServerSection
from sepp_anyio.server._network._netlimits import network_limits
from tests.http2._support import Peer
from tests.server_hostile._harness import GRPC_REQUEST, Attacker, decode_headers
from tests.worker._vtime import VirtualTimeLoop

pytestmark = pytest.mark.anyio

HUGE = 1 << 40
MiB = 1 << 20
KiB = 1 << 10
#: The server's receive window per stream, and the frame size it accepts.
STREAM_WINDOW = MiB
FRAME = 16_384
#: Each stalled call announces this much and tries to send ``PUSH`` of it.
MESSAGE = 8 * MiB
PUSH = 3 * MiB
DEADLINE = b"5S"
REFUSED_STREAM = 0x7
DEADLINE_EXCEEDED = "4"


@pytest.fixture(
    params=[
        pytest.param("asyncio", id="asyncio-vtime"),
        pytest.param("trio", id="trio-mockclock"),
    ]
)
def anyio_backend(request: pytest.FixtureRequest) -> tuple[str, dict[str, Any]]:
    if request.param == "trio":
        return "trio", {"clock": trio.testing.MockClock(autojump_threshold=0)}
    return "asyncio", {"loop_factory": VirtualTimeLoop}


@asynccontextmanager
async def budget_server(**server: Any) -> AsyncIterator[NetworkServer]:
    """A server taking messages of up to ``MESSAGE`` bytes, with these ``[server]`` keys
    (and PINGs allowed at any pace: :func:`settle` sends them)."""
    config = ServerConfig(
        server=dataclasses.replace(ServerSection(), keepalive_min_time_ms=0, **server),
        limits=LimitsConfig(max_message_bytes=MESSAGE),
    )
    async with Engine(config) as engine, NetworkServer(engine, port=0, shutdown_grace=1.0) as net:
        yield net


_PINGS = itertools.count(1)


async def _round_trip(attacker: Attacker) -> None:
    """A PING and its ACK: the server has read all we sent before the PING, and we have
    all it wrote before the ACK (one TCP stream keeps the order)."""
    payload = next(_PINGS).to_bytes(8, "big")
    seen = len(attacker.frames)
    assert await attacker.send(Peer.ping(payload))
    for _ in range(1000):
        for frame in attacker.frames[seen:]:
            if isinstance(frame, PingFrame) and bytes(frame.opaque_data) == payload:
                return
        seen = len(attacker.frames)
        assert await attacker.read(0.01), "the server closed the connection"
    raise AssertionError("no PING ACK")


async def settle(attacker: Attacker) -> None:
    """Until the server has nothing more to say: it has read what we sent (a PING round
    trip), every task of the test's event loop waits (a read that times out: on virtual
    time the clock only moves then), and what the server wrote meanwhile has arrived (a
    second round trip)."""
    await _round_trip(attacker)
    for _ in range(1000):
        before = (len(attacker.frames), len(attacker._buffer))
        assert await attacker.read(0.01), "the server closed the connection"
        if (len(attacker.frames), len(attacker._buffer)) == before:
            break
    else:
        raise AssertionError("the server kept sending")
    await _round_trip(attacker)


class Pusher:
    """One raw connection's call sending a large message as far as the windows allow."""

    def __init__(self, attacker: Attacker, stream_id: int) -> None:
        self.attacker = attacker
        self.stream_id = stream_id
        self.sent = 0
        self._seen = 0
        self._initial = 65_535
        self._connection_window = 65_535
        self._stream_window = 65_535

    @classmethod
    async def open(
        cls, attacker: Attacker, stream_id: int = 1, path: str = "/sepp.v1.QueueService/Ack"
    ) -> Pusher:
        """Start the call (after reading the server's SETTINGS and window)."""
        await settle(attacker)
        pusher = cls(attacker, stream_id)
        headers = [*GRPC_REQUEST(path), (b"grpc-timeout", DEADLINE)]
        await attacker.send(attacker.peer.headers(stream_id, headers))
        return pusher

    def _account(self) -> None:
        for frame in self.attacker.frames[self._seen :]:
            if isinstance(frame, SettingsFrame) and "ACK" not in frame.flags:
                initial = frame.settings.get(SettingsFrame.INITIAL_WINDOW_SIZE)
                if initial is not None:
                    self._stream_window += initial - self._initial
                    self._initial = initial
            elif isinstance(frame, WindowUpdateFrame):
                if frame.stream_id == 0:
                    self._connection_window += frame.window_increment
                elif frame.stream_id == self.stream_id:
                    self._stream_window += frame.window_increment
        self._seen = len(self.attacker.frames)

    async def push(self, total: int = PUSH) -> int:
        """Send up to ``total`` bytes of the message (its prefix first); stop when the
        windows stay shut.  Returns the bytes sent so far."""
        for _ in range(1000):
            self._account()
            room = min(self._connection_window, self._stream_window, total - self.sent)
            if room <= 0:
                await settle(self.attacker)
                if self.sent >= total:
                    return self.sent
                self._account()
                if min(self._connection_window, self._stream_window) <= 0:
                    return self.sent  # stalled
                continue
            body = bytearray(b"z" * room)
            if not self.sent:
                body[:5] = b"\x00" + MESSAGE.to_bytes(4, "big")
            frames = b"".join(
                Peer.data(self.stream_id, bytes(body[i : i + FRAME])) for i in range(0, room, FRAME)
            )
            assert await self.attacker.send(frames)
            self.sent += room
            self._connection_window -= room
            self._stream_window -= room
        raise AssertionError("the push did not end")

    def answer(self) -> dict[str, str] | None:
        """The headers that ended the call, if they came."""
        return answer(self.attacker, self.stream_id)


# Each connection's header blocks, decoded once and in order (HPACK keeps state):
# attacker -> (frames decoded so far, stream id -> the headers that ended it).
_ENDS: weakref.WeakKeyDictionary[Attacker, tuple[int, dict[int, dict[str, str]]]] = (
    weakref.WeakKeyDictionary()
)


def answer(attacker: Attacker, stream_id: int) -> dict[str, str] | None:
    """The headers that ended ``stream_id`` on ``attacker``'s connection, if they came."""
    seen, ends = _ENDS.get(attacker, (0, {}))
    for frame in attacker.frames[seen:]:
        if isinstance(frame, HeadersFrame):
            headers = decode_headers(attacker.peer, bytes(frame.data))
            if "END_STREAM" in frame.flags:
                ends[frame.stream_id] = headers
    _ENDS[attacker] = (len(attacker.frames), ends)
    return ends.get(stream_id)


def buffered(server: NetworkServer) -> list[int]:
    return [connection.request_bytes.buffered for connection in server.connections]


def server_total(server: NetworkServer) -> int:
    totals = {connection.request_bytes.server.buffered for connection in server.connections}
    assert len(totals) == 1  # one count, shared
    return totals.pop()


async def _served(address: str, calls: int = 3) -> None:
    """Our client on its own connection: ``calls`` calls, each served."""
    async with sepp.connect(address) as client:
        for _ in range(calls):
            with anyio.fail_after(5):
                await client.server_info()


async def _reaped(server: NetworkServer, pushers: list[Pusher]) -> None:
    """Past the calls' deadline: each ended DEADLINE_EXCEEDED, nothing stays buffered."""
    await anyio.sleep(6)
    for pusher in pushers:
        await settle(pusher.attacker)
        answer = pusher.answer()
        assert answer is not None and answer["grpc-status"] == DEADLINE_EXCEEDED, answer
    assert all(connection.active_calls == 0 for connection in server.connections)
    assert buffered(server) == [0] * len(server.connections)
    assert server_total(server) == 0


# --------------------------------------------------------------------------- per connection


@pytest.mark.parametrize("limit_on", [True, False])
async def test_stalled_calls_stay_within_the_connection_budget(limit_on: bool) -> None:
    """Three connections each push 3 MiB of an 8 MiB message.  With a 256 KiB cap per
    connection each stalls holding at most the cap plus one stream window; switched off,
    each holds all 3 MiB.  Our client is served meanwhile; the deadlines reap the calls."""
    cap = 256 * KiB
    settings = {
        "max_buffered_request_bytes_per_connection": cap if limit_on else HUGE,
        "max_buffered_request_bytes": HUGE,
    }
    async with budget_server(**settings) as server, AsyncExitStack() as stack:
        pushers = []
        for _ in range(3):
            attacker = await stack.enter_async_context(Attacker.connect(server.port))
            pushers.append(await Pusher.open(attacker))
        for pusher in pushers:
            await pusher.push()
        held = buffered(server)
        assert len(held) == 3 and server_total(server) == sum(held)
        await _served(server.address)
        if limit_on:
            assert all(pusher.sent < PUSH for pusher in pushers)
            assert max(held) <= cap + STREAM_WINDOW + FRAME, held
        else:
            assert all(pusher.sent == PUSH for pusher in pushers)
            assert min(held) == PUSH - 5 > cap + STREAM_WINDOW + FRAME, held
        await _reaped(server, pushers)
        await _served(server.address)


# --------------------------------------------------------------------------- server-wide


@pytest.mark.parametrize("limit_on", [True, False])
async def test_stalled_calls_stay_within_the_server_budget(limit_on: bool) -> None:
    """Three connections open a call each, then push in turn, with a 512 KiB cap for the
    server (none per connection): once over it, every connection holds refunds back (the total stays
    within the cap plus a stream window per call) and new streams are refused with
    REFUSED_STREAM, on a new connection and on a busy one; switched off, the total passes
    the bound and new calls are served.  Past the deadlines, our client is served."""
    cap = 512 * KiB
    settings = {
        "max_buffered_request_bytes_per_connection": HUGE,
        "max_buffered_request_bytes": cap if limit_on else HUGE,
    }
    async with budget_server(**settings) as server, AsyncExitStack() as stack:
        pushers = []
        for _ in range(3):
            attacker = await stack.enter_async_context(Attacker.connect(server.port))
            pushers.append(await Pusher.open(attacker))
        for pusher in pushers:
            await pusher.push()
        total = server_total(server)
        assert total == sum(buffered(server))
        bound = cap + len(pushers) * (STREAM_WINDOW + FRAME)
        if limit_on:
            assert all(pusher.sent < PUSH for pusher in pushers)
            assert total <= bound, total
        else:
            assert total == 3 * (PUSH - 5) > bound
        # New calls: on a fresh connection, and next to a stalled call.
        fresh = await stack.enter_async_context(Attacker.connect(server.port))
        await settle(fresh)
        request = GRPC_REQUEST("/sepp.v1.QueueService/GetServerInfo")
        empty = b"\x00\x00\x00\x00\x00"
        for attacker, stream_id in ((fresh, 1), (pushers[0].attacker, 3)):
            await attacker.send(
                attacker.peer.headers(stream_id, request)
                + Peer.data(stream_id, empty, end_stream=True)
            )
            await settle(attacker)
            resets = [
                f.error_code
                for f in attacker.frames
                if isinstance(f, RstStreamFrame) and f.stream_id == stream_id
            ]
            answered = answer(attacker, stream_id)
            if limit_on:
                assert resets == [REFUSED_STREAM] and answered is None
            else:
                assert not resets and answered is not None and answered["grpc-status"] == "0"
        await _reaped(server, pushers)
        await _served(server.address)


# --------------------------------------------------------------------------- resuming


@pytest.mark.parametrize("scope", ["connection", "server"])
async def test_held_back_calls_resume_when_bytes_leave(scope: str) -> None:
    """A call held back because its connection (or the server) is over budget gets its
    credit once another call's bytes leave: the first call is reset by its client, and
    the second one's message can then be sent further.  (The second call holds less than
    the cap: the first one, holding more, put the budget over it.)"""
    cap = 1536 * KiB
    settings = {
        "max_buffered_request_bytes_per_connection": cap if scope == "connection" else HUGE,
        "max_buffered_request_bytes": cap if scope == "server" else HUGE,
    }
    async with budget_server(**settings) as server, AsyncExitStack() as stack:
        first = await stack.enter_async_context(Attacker.connect(server.port))
        if scope == "connection":
            second = first
        else:
            second = await stack.enter_async_context(Attacker.connect(server.port))
        # Both calls open before the budget is over (new ones are refused then).
        stuck = await Pusher.open(first, 1)
        held = await Pusher.open(second, 3)
        await stuck.push()
        await held.push()
        assert stuck.sent < PUSH and held.sent == STREAM_WINDOW  # nothing refunded
        before = held.sent
        await first.send(Peer.rst(1, 8))  # CANCEL
        await settle(first)
        assert await held.push() > before


# --------------------------------------------------------------------------- config


def test_budget_keys_and_their_defaults() -> None:
    section = ServerSection()
    assert section.max_buffered_request_bytes_per_connection == 32 * MiB
    assert section.max_buffered_request_bytes == 256 * MiB
    net = network_limits(
        dataclasses.replace(
            section, max_buffered_request_bytes_per_connection=5, max_buffered_request_bytes=7
        )
    )
    assert (net.max_buffered_request_bytes_per_connection, net.max_buffered_request_bytes) == (
        5,
        7,
    )
    assert network_limits(section).max_buffered_request_bytes == 256 * MiB
