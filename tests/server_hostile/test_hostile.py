"""Hostile clients against the reference server: each defence keeps its bound, and the
bound breaks with that defence switched off (``limit_on=False`` sets it huge).

Every attack runs on its own raw connection while a canary (our client) on a second
connection must finish its calls, each within ``CANARY_MAX_LATENCY``.  The numbers come
from ``http2-hardening.md``.  The connection timeouts (handshake, slowloris, idle, SETTINGS
ACK, write, dead peer) are tested on virtual time at their defaults, in
``test_timeouts_virtual.py``.
"""

from __future__ import annotations

import contextlib
import logging

import anyio
import anyio.lowlevel
import pytest
from hyperframe.frame import (
    DataFrame,
    GoAwayFrame,
    HeadersFrame,
    PingFrame,
    RstStreamFrame,
    SettingsFrame,
)

from sepp_anyio.server import Engine, NetworkServer
from tests.http2._support import Peer, raw
from tests.reliability._wait import eventually

from ._harness import (
    CANARY_MAX_LATENCY,
    GRPC_REQUEST,
    Attacker,
    canary,
    decode_headers,
    hostile_server,
)

pytestmark = pytest.mark.anyio

HUGE = 1 << 40
CALM = 0xB
SERVER_INFO = GRPC_REQUEST()


def _data_on(attacker: Attacker, stream_id: int) -> list[DataFrame]:
    return [f for f in attacker.frames if isinstance(f, DataFrame) and f.stream_id == stream_id]


def _calm(goaway: GoAwayFrame | None) -> bytes:
    assert goaway is not None, "the server did not end the connection"
    assert goaway.error_code == CALM, goaway.error_code
    return bytes(goaway.additional_data)


# --------------------------------------------------------------------------- rapid reset


@pytest.mark.parametrize("limit_on", [True, False])
async def test_rapid_reset(limit_on: bool) -> None:
    """10,000 HEADERS (a call waiting for its body) + RST_STREAM pairs: GOAWAY CALM
    ``too_many_resets`` long before the last; handlers started stay within 100 + the
    budget; the canary is served meanwhile."""
    settings = {} if limit_on else {"http2_reset_budget": 1 << 30}
    async with hostile_server(**settings) as server:
        async with Attacker.connect(server.port) as attacker:
            peer = attacker.peer
            sent = 0
            async with anyio.create_task_group() as tg:
                latency: list[float] = []

                async def run_canary() -> None:
                    latency.append(await canary(server.address))

                tg.start_soon(run_canary)
                for batch in range(50):
                    chunk = b"".join(
                        peer.headers(sid, SERVER_INFO) + Peer.rst(sid, 8)
                        for sid in range(batch * 400 + 1, batch * 400 + 400, 2)
                    )
                    if not await attacker.send(chunk):
                        break
                    sent += 200
                    # Collect the server's frames as they come (a GOAWAY must not be lost
                    # to a TCP reset once the server closes).
                    await attacker.read(0.001)
                    if attacker.error_goaway() is not None:
                        break
                    connection = server.connections
                    if connection:
                        assert connection[0].peak_calls <= 100
            goaway = await attacker.read_until_goaway(seconds=2.0 if limit_on else 0.5)
            started = sum(connection.calls_started for connection in server.connections)
        assert latency and latency[0] < CANARY_MAX_LATENCY
    if limit_on:
        assert _calm(goaway) == b"too_many_resets"
        assert goaway is not None and goaway.last_stream_id < 2 * (100 + 200 + 200) + 1
    else:
        assert goaway is None and sent == 10_000 and started >= 0


# --------------------------------------------------------------------------- headers


@pytest.mark.parametrize("limit_on", [True, False])
async def test_continuation_flood(limit_on: bool) -> None:
    """HEADERS without END_HEADERS, then 1000 CONTINUATIONs of 10 bytes: CALM after the
    9th; switched off, the server keeps buffering."""
    settings = (
        {}
        if limit_on
        else {"http2_max_continuations": 1 << 30, "http2_max_header_block_bytes": 1 << 30}
    )
    async with hostile_server(**settings) as server, Attacker.connect(server.port) as attacker:
        block = attacker.peer.block(SERVER_INFO)
        frames = Peer.headers_block(1, block, end_headers=False) + b"".join(
            Peer.continuation(1, b"\x00" * 10, end_headers=False) for _ in range(1000)
        )
        await attacker.send(frames)
        goaway = await attacker.read_until_goaway(seconds=2.0 if limit_on else 0.5)
        buffered = [c.h2.buffered_header_bytes for c in server.connections]
        assert await canary(server.address, calls=5) < CANARY_MAX_LATENCY
    if limit_on:
        assert b"CONTINUATION" in _calm(goaway) or goaway is not None
        assert not buffered or max(buffered) <= 48 << 10
    else:
        assert goaway is None and buffered and max(buffered) >= 10_000


@pytest.mark.parametrize("limit_on", [True, False])
async def test_hpack_bomb(limit_on: bool) -> None:
    """Index a 4 KiB header, then refer to it 4000 times (16 MiB decoded from 4 KiB of
    references): CALM; switched off, the list is decoded whole (then refused as too
    large)."""
    settings = {} if limit_on else {"http2_max_decoded_header_bytes": 1 << 30}
    async with hostile_server(**settings) as server, Attacker.connect(server.port) as attacker:
        peer = attacker.peer
        cookie = [(b"cookie", b"c" * 4096)]
        first = peer.headers(1, [*SERVER_INFO, *cookie], end_stream=True)
        # 0xbe: the first dynamic entry (62), the cookie, as an indexed field.
        bomb = Peer.headers_block(3, peer.block(SERVER_INFO) + b"\xbe" * 4000, end_stream=True)
        await attacker.send(first + bomb)
        goaway = await attacker.read_until_goaway(seconds=2.0 if limit_on else 1.0)
        assert await canary(server.address, calls=5) < CANARY_MAX_LATENCY
    if limit_on:
        _calm(goaway)
    else:
        assert goaway is None
        answered = [f for f in attacker.frames if isinstance(f, HeadersFrame) and f.stream_id == 3]
        assert answered, "the bomb was not decoded and answered"


# --------------------------------------------------------------------------- floods


@pytest.mark.parametrize("limit_on", [True, False])
async def test_ping_flood_with_reading(limit_on: bool) -> None:
    """PINGs back to back, 200 at a time, reading the ACKs: the third strike ends it
    (``too_many_pings``)."""
    settings = {} if limit_on else {"keepalive_max_strikes": 1 << 30}
    async with hostile_server(**settings) as server, Attacker.connect(server.port) as attacker:
        for batch in range(10):
            pings = b"".join(Peer.ping(b"%08d" % (batch * 200 + i)) for i in range(200))
            if not await attacker.send(pings):
                break
            await attacker.read(0.05)
        goaway = await attacker.read_until_goaway(seconds=2.0 if limit_on else 1.0)
        assert await canary(server.address, calls=5) < CANARY_MAX_LATENCY
    if limit_on:
        assert _calm(goaway) == b"too_many_pings"
    else:
        assert goaway is None
        assert sum(isinstance(f, PingFrame) and "ACK" in f.flags for f in attacker.frames) > 100


async def _flood_without_reading(attacker: Attacker, frame: bytes, count: int) -> int:
    """Send ``count`` frames without reading; how many were sent before the server
    stopped taking them (it stopped reading, or closed)."""
    sent = 0
    chunk = frame * 1000
    for _ in range(count // 1000):
        with anyio.move_on_after(1.0) as scope:
            ok = await attacker.send(chunk)
        if scope.cancelled_caught or not ok:
            break
        sent += 1000
    return sent


#: The queued output the PING-flood defence allows: its 1 MiB bound plus one frame.
BOUND = (1 << 20) + 17 * 1024
#: What 1000 queued PING ACKs (the control-frame cap) take: 17 bytes each.
CONTROL_BOUND = 1000 * 17


@pytest.mark.parametrize("limit_on", [True, False])
async def test_ping_flood_without_reading(limit_on: bool) -> None:
    """A peer that sends PINGs and never reads (keepalive enforcement off, to reach the
    queue bound): the server stops reading or closes once 1000 replies wait; its queued
    output stays under 1 MiB + a frame.  Switched off, the replies pile up."""
    settings: dict[str, object] = {"keepalive_max_strikes": 1 << 30}
    if not limit_on:
        settings.update(
            http2_max_queued_control_frames=1 << 30, http2_max_pending_output_bytes=1 << 40
        )
    async with (
        hostile_server(**settings) as server,
        Attacker.connect(server.port, rcvbuf=4096) as attacker,
    ):
        peaks: list[int] = []

        async def sample() -> None:
            for _ in range(400):
                peaks.extend(c.h2.pending_output_bytes for c in server.connections)
                await anyio.sleep(0.005)

        async with anyio.create_task_group() as tg:
            tg.start_soon(sample)
            await _flood_without_reading(attacker, Peer.ping(), 300_000)
            tg.cancel_scope.cancel()
        if not limit_on:
            # Switched off, the replies keep piling up while the server works through the
            # PINGs still in its socket buffer: sampled until they pass what the control-frame
            # cap allows (how far past it depends on the kernel's buffers).
            with anyio.move_on_after(5):
                while max(peaks, default=0) <= 10 * CONTROL_BOUND:
                    peaks.extend(c.h2.pending_output_bytes for c in server.connections)
                    await anyio.sleep(0.005)
        assert await canary(server.address, calls=5) < CANARY_MAX_LATENCY
    if limit_on:
        assert max(peaks, default=0) <= BOUND
    else:
        # Many times the 1000 queued PING ACKs (17 bytes each) the cap lets wait.
        assert max(peaks, default=0) > 10 * CONTROL_BOUND


@pytest.mark.parametrize("limit_on", [True, False])
async def test_settings_flood(limit_on: bool) -> None:
    """SETTINGS after the first are glitches: 2000 of them (200 at a time, reading the
    ACKs) end it with CALM."""
    settings = {} if limit_on else {"http2_glitch_burst": 1 << 30}
    async with hostile_server(**settings) as server, Attacker.connect(server.port) as attacker:
        for _ in range(10):
            if not await attacker.send(Peer.settings({4: 65535}) * 200):
                break
            await attacker.read(0.05)
        goaway = await attacker.read_until_goaway(seconds=2.0 if limit_on else 1.0)
        assert await canary(server.address, calls=5) < CANARY_MAX_LATENCY
    if limit_on:
        assert b"useless" in _calm(goaway)
    else:
        assert goaway is None


async def test_window_update_overflow() -> None:
    """WINDOW_UPDATE past 2^31-1: on a stream RST FLOW_CONTROL (the connection lives);
    on the connection GOAWAY FLOW_CONTROL."""
    async with hostile_server() as server, Attacker.connect(server.port) as attacker:
        peer = attacker.peer
        await attacker.send(peer.headers(1, SERVER_INFO) + Peer.window_update(1, (1 << 31) - 1))
        with anyio.fail_after(5):
            while not any(isinstance(f, RstStreamFrame) for f in attacker.frames):
                assert await attacker.read(1.0)
        [reset] = [f for f in attacker.frames if isinstance(f, RstStreamFrame)]
        assert reset.stream_id == 1 and reset.error_code == 3
        await attacker.send(Peer.window_update(0, (1 << 31) - 1))
        goaway = await attacker.read_until_goaway()
        assert goaway is not None and goaway.error_code == 3
        assert await canary(server.address, calls=5) < CANARY_MAX_LATENCY


@pytest.mark.parametrize("limit_on", [True, False])
async def test_oversized_frame_claim(limit_on: bool) -> None:
    """A frame header claiming 16 MiB: GOAWAY FRAME_SIZE on the header, nothing buffered;
    switched off (16 MiB frames allowed), the server buffers what follows."""
    settings = {} if limit_on else {"http2_max_frame_size": (1 << 24) - 1}
    async with hostile_server(**settings) as server, Attacker.connect(server.port) as attacker:
        await attacker.send(raw(0x0, 0, 1, b"", length=(1 << 24) - 1))
        for _ in range(16):
            if not await attacker.send(b"\x00" * 65536):
                break
        await anyio.lowlevel.checkpoint()
        buffered = [c.h2.buffered_input_bytes for c in server.connections]
        goaway = await attacker.read_until_goaway(seconds=2.0 if limit_on else 0.3)
    if limit_on:
        assert goaway is not None and goaway.error_code == 6
        assert max(buffered, default=0) == 0
    else:
        assert goaway is None and max(buffered) > 1 << 18


# --------------------------------------------------------------------------- connections


async def test_non_ascii_header_is_a_stream_error_without_traceback(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A header value with bytes outside printable ASCII: trailers-only INTERNAL naming the
    key (not the value), no traceback; the connection serves the next call."""
    async with hostile_server() as server, Attacker.connect(server.port) as attacker:
        peer = attacker.peer
        await attacker.send(
            peer.headers(1, [*SERVER_INFO, (b"x-note", "é".encode())], end_stream=True)
            + peer.headers(3, SERVER_INFO)
            + Peer.data(3, b"\x00\x00\x00\x00\x00", end_stream=True)
        )
        with anyio.fail_after(5):
            while not any(
                isinstance(f, HeadersFrame) and f.stream_id == 3 and "END_STREAM" in f.flags
                for f in attacker.frames
            ):
                assert await attacker.read(1.0)
        [answer] = [f for f in attacker.frames if isinstance(f, HeadersFrame) and f.stream_id == 1]
        headers = decode_headers(peer, bytes(answer.data))
        assert headers["grpc-status"] == "13"
        assert "x-note" in headers["grpc-message"] and "é" not in headers["grpc-message"]
        assert any(isinstance(f, DataFrame) and f.stream_id == 3 for f in attacker.frames)
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


async def test_oversized_unauthenticated_health_request() -> None:
    """A Health/Check announcing 256 MiB on a keyed server, without a key: OUT_OF_RANGE on
    the prefix, while the body is still coming; the server holds at most the stream's
    window of it."""
    async with (
        hostile_server(api_keys=("k1",)) as server,
        Attacker.connect(server.port) as attacker,
    ):
        peer = attacker.peer
        body = b"\x00" + (256 << 20).to_bytes(4, "big") + b"z" * 16_000
        await attacker.send(
            peer.headers(1, GRPC_REQUEST("/grpc.health.v1.Health/Check")) + Peer.data(1, body)
        )
        with anyio.fail_after(5):
            while not any(isinstance(f, HeadersFrame) for f in attacker.frames):
                assert await attacker.read(1.0)
        [answer] = [f for f in attacker.frames if isinstance(f, HeadersFrame)]
        headers = decode_headers(peer, bytes(answer.data))
        assert headers["grpc-status"] == "11", headers
        assert "found 268435456 bytes" in headers["grpc-message"]
        # The rest of a would-be 256 MiB: the stream is reset, the data refunded.
        for _ in range(64):
            if not await attacker.send(Peer.data(1, b"z" * 16_000)):
                break
        assert server.connections and all(
            c.h2.buffered_input_bytes < 1 << 20 for c in server.connections
        )


def _goaways(attacker: Attacker) -> list[tuple[int, bytes]]:
    return [
        (f.error_code, bytes(f.additional_data))
        for f in attacker.frames
        if isinstance(f, GoAwayFrame)
    ]


async def _until_settings_acked(attacker: Attacker) -> None:
    """Read until the server has acknowledged the peer's SETTINGS (its handshake is done)."""
    with anyio.fail_after(10):
        while not any(isinstance(f, SettingsFrame) and "ACK" in f.flags for f in attacker.frames):
            assert await attacker.read(1.0)


async def _until_eof(attacker: Attacker, seconds: float) -> None:
    with anyio.move_on_after(seconds):
        while not attacker.eof:
            await attacker.read(1.0)


@pytest.mark.parametrize("mode", ["evict", "busy", "evict off", "cap off"])
async def test_connections_per_ip(mode: str) -> None:
    """20 connections allowed per address, all handshaken and idle: the 21st and 22nd are
    served, and the two oldest get GOAWAY ``evicted`` and are closed.  With all 20 busy (a
    call in progress each), or with eviction off, the 21st and 22nd are closed at once
    instead; with the cap raised, nobody is closed."""
    settings: dict[str, object] = {"max_connections_per_ip": 1000 if mode == "cap off" else 20}
    if mode == "evict off":
        settings["evict_when_full"] = False
    async with hostile_server(**settings) as server, contextlib.AsyncExitStack() as stack:
        attackers: list[Attacker] = []
        for _ in range(22):
            attacker = await stack.enter_async_context(Attacker.connect(server.port))
            if len(attackers) < 20 or mode in ("evict", "cap off"):
                # Each handshake done before the next connection: the newcomer must not
                # be the one evicted for still being in its handshake.
                await _until_settings_acked(attacker)
            if len(attackers) < 20 and mode == "busy":  # a call waiting for its request body
                assert await attacker.send(attacker.peer.headers(1, SERVER_INFO))
            attackers.append(attacker)
        if mode == "busy":
            await eventually(
                lambda: sum(c.active_calls for c in server.connections) == 20,
                within=10,
                what="20 calls in progress",
            )
        expect_closed = {
            "evict": [True] * 2 + [False] * 20,
            "busy": [False] * 20 + [True] * 2,
            "evict off": [False] * 20 + [True] * 2,
            "cap off": [False] * 22,
        }[mode]
        for attacker, closes in zip(attackers, expect_closed, strict=True):
            if closes:
                await _until_eof(attacker, 5.0)
        # Those that must stay get a moment to show they do not (a loose negative check).
        with anyio.move_on_after(0.3):
            for attacker, closes in zip(attackers, expect_closed, strict=True):
                if not closes:
                    await attacker.read(0.01)
        closed = [attacker.eof for attacker in attackers]
    assert closed == expect_closed
    if mode == "evict":
        assert [_goaways(a) for a in attackers[:2]] == [[(0, b"evicted")]] * 2
        assert all(SettingsFrame in map(type, a.frames) for a in attackers[20:])
    elif mode != "cap off":
        assert all(not a.frames for a in attackers[20:])  # closed before being served
    assert server.admission.peak_open == (22 if mode == "cap off" else 20)


@pytest.mark.parametrize("evict", [True, False])
async def test_total_connections_full(evict: bool) -> None:
    """With 5 connections in total, all idle, a 6th is served at once and the one idle
    longest gets GOAWAY ``evicted``.  With eviction off, the 6th is not served (accepting
    pauses) until one of the first five closes.  (A server full of busy connections, and
    the idle timeout, on virtual time: ``test_eviction_virtual.py``.)"""
    settings = {"max_connections": 5, "evict_when_full": evict}
    async with hostile_server(**settings) as server, contextlib.AsyncExitStack() as stack:
        first = [await stack.enter_async_context(Attacker.connect(server.port)) for _ in range(5)]
        for attacker in first:
            await _until_settings_acked(attacker)
        sixth = await stack.enter_async_context(Attacker.connect(server.port))
        if evict:
            await _until_settings_acked(sixth)
            await _until_eof(first[0], 5.0)
            assert first[0].eof and _goaways(first[0]) == [(0, b"evicted")]
            assert not any(attacker.eof for attacker in first[1:])
        else:
            await sixth.read(0.3)
            assert not sixth.frames  # not even the server's SETTINGS
            await first[0].stream.aclose()
            await _until_settings_acked(sixth)
        assert server.admission.peak_open == 5


# --------------------------------------------------------------------------- shutdown


async def test_graceful_shutdown_sends_two_goaways_and_serves_the_streams_between() -> None:
    """Stop: GOAWAY(2^31-1) and a PING; a request sent before the client answers the PING
    is served; on the PING's ACK, GOAWAY(last stream); the call in flight finishes; health
    says NOT_SERVING meanwhile."""
    async with Engine() as engine, anyio.create_task_group() as tg:
        listening = anyio.Event()
        holder: dict[str, object] = {}
        stop = anyio.CancelScope()

        async def run() -> None:
            with stop:
                async with NetworkServer(engine, port=0, shutdown_grace=5.0) as net:
                    holder["port"] = net.port
                    listening.set()
                    await anyio.sleep_forever()

        tg.start_soon(run)
        await listening.wait()
        port = holder["port"]
        assert isinstance(port, int)
        async with Attacker.connect(port) as attacker:
            peer = attacker.peer
            # Stream 1: a call waiting for its body (in flight when the stop comes).
            await attacker.send(peer.headers(1, SERVER_INFO))
            with anyio.fail_after(5):
                while not attacker.frames:
                    assert await attacker.read(1.0)
            stop.cancel()
            with anyio.fail_after(5):
                while not any(isinstance(f, PingFrame) for f in attacker.frames):
                    assert await attacker.read(1.0)
            [first] = [f for f in attacker.frames if isinstance(f, GoAwayFrame)]
            assert first.last_stream_id == (1 << 31) - 1 and first.error_code == 0
            [ping] = [f for f in attacker.frames if isinstance(f, PingFrame)]
            # Stream 3, between the GOAWAYs: served (health: NOT_SERVING while stopping).
            empty = b"\x00\x00\x00\x00\x00"
            await attacker.send(
                peer.headers(3, GRPC_REQUEST("/grpc.health.v1.Health/Check"))
                + Peer.data(3, empty, end_stream=True)
            )
            with anyio.fail_after(5):
                while not any(
                    isinstance(f, DataFrame) and f.stream_id == 3 for f in attacker.frames
                ):
                    assert await attacker.read(1.0)
            [reply] = _data_on(attacker, 3)
            assert bytes(reply.data) == b"\x00\x00\x00\x00\x02\x08\x02"  # NOT_SERVING
            await attacker.send(Peer.ping(bytes(ping.opaque_data), ack=True))
            with anyio.fail_after(5):
                while len([f for f in attacker.frames if isinstance(f, GoAwayFrame)]) < 2:
                    assert await attacker.read(1.0)
            second = [f for f in attacker.frames if isinstance(f, GoAwayFrame)][1]
            assert second.last_stream_id == 3 and second.error_code == 0
            # Stream 1 still finishes.
            await attacker.send(Peer.data(1, empty, end_stream=True))
            with anyio.fail_after(5):
                while not any(
                    isinstance(f, HeadersFrame) and f.stream_id == 1 and "END_STREAM" in f.flags
                    for f in attacker.frames
                ):
                    assert await attacker.read(1.0)
            assert any(isinstance(f, DataFrame) and f.stream_id == 1 for f in attacker.frames)


# --------------------------------------------------------------------------- many connections


async def test_thousands_of_idle_connections_do_not_starve_the_canary() -> None:
    """2,000 connections that finish the handshake and then say nothing (caps raised so
    that all are admitted): each is served (its SETTINGS acknowledged), the canary's calls
    stay within ``CANARY_MAX_LATENCY``, and closing them all leaves the server with none.
    The caps themselves and the idle timeout that reaps such connections have their own
    tests (``test_connections_per_ip``, ``test_total_connections_pause_accepting``,
    ``test_timeouts_virtual.py``)."""
    count = 2000
    settings = {"max_connections": count + 10, "max_connections_per_ip": count + 10}
    async with hostile_server(**settings) as server:
        async with contextlib.AsyncExitStack() as stack:
            attackers = [
                await stack.enter_async_context(Attacker.connect(server.port)) for _ in range(count)
            ]
            await eventually(
                lambda: len(server.connections) >= count, within=30, what="every connection"
            )
            assert await canary(server.address, calls=5) < CANARY_MAX_LATENCY
            # Every one of them was served: the server's SETTINGS arrived on each.
            with anyio.fail_after(30):
                for attacker in attackers:
                    while not attacker.frames and await attacker.read(1.0):
                        pass
            assert all(attacker.frames and not attacker.eof for attacker in attackers)
        await eventually(lambda: not server.connections, within=30, what="every close")
