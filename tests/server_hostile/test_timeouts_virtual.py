"""The server's connection timeouts on virtual time, against raw scripted peers: each ends
the connection at its default (``http2-hardening.md`` §6), and with the timeout switched
off (0, or huge where 0 is not allowed) the connection stays.

The handshake (preface and first SETTINGS: 5 s from accept), slowloris (the preface a byte a
second: closed at the same 5 s),
the idle timeout (5 min without a call, PINGs do not count), our SETTINGS unacknowledged
(10 s: GOAWAY SETTINGS_TIMEOUT), the write timeout (30 s without write progress), and dead
peers (a PING after 60 s of silence, closed 20 s later without its ACK).
"""

from __future__ import annotations

import contextlib
import datetime
from typing import Any

import anyio
import pytest
from hyperframe.frame import SettingsFrame

import sepp_anyio as sepp
from sepp_anyio._proto.sepp.v1 import ReserveRequest
from tests.http2._support import PREFACE, Peer

from ._harness import CANARY_MAX_LATENCY, GRPC_REQUEST, Attacker, canary, hostile_server
from ._vclock import VIRTUAL_BACKENDS, Timeline, virtual_backend

pytestmark = pytest.mark.anyio

#: Where 0 is not allowed, "off" is this long (ms): far beyond any test's horizon.
NEVER_MS = 10**12
SETTINGS_TIMEOUT = 0x4
#: The close after a timeout: the final frames flushed, then ``close_linger`` (1 s).
CLOSE_SLACK = 1.5
#: The default deadline for the client's preface and first SETTINGS, from accept (s).
HANDSHAKE = 5.0


@pytest.fixture(params=VIRTUAL_BACKENDS)
def anyio_backend(request: pytest.FixtureRequest) -> tuple[str, dict[str, Any]]:
    return virtual_backend(request)


# --------------------------------------------------------------------------- handshake


@pytest.mark.parametrize("limit_on", [True, False])
@pytest.mark.parametrize("sends", ["nothing", "preface only"])
async def test_handshake_timeout(limit_on: bool, sends: str) -> None:
    """No preface, or a preface without SETTINGS: closed 5 s after accept (the default).
    Switched off, still open at 100 s."""
    # (Our SETTINGS unacknowledged would end it at 10 s too: that timeout is off here.)
    settings = {"settings_ack_timeout_ms": NEVER_MS}
    if not limit_on:
        settings["handshake_timeout_ms"] = NEVER_MS
    async with (
        hostile_server(**settings) as server,
        Attacker.connect(server.port, handshake=False) as attacker,
    ):
        opened = anyio.current_time()
        if sends == "preface only":
            assert await attacker.send(PREFACE)
        timeline = Timeline(attacker, ack_pings=False)
        await timeline.run_until(opened + 100.0)
    if limit_on:
        assert timeline.eof_at is not None
        assert HANDSHAKE <= timeline.eof_at - opened <= HANDSHAKE + CLOSE_SLACK
        [(_, goaway)] = timeline.goaways()
        assert b"preface" in bytes(goaway.additional_data)
    else:
        assert timeline.eof_at is None and not timeline.goaways()


@pytest.mark.parametrize("limit_on", [True, False])
async def test_slowloris_handshake(limit_on: bool) -> None:
    """The preface one byte a second: closed at the handshake timeout (5 s from accept,
    however the bytes trickle in; then the linger), long before it is complete; the canary
    is served meanwhile.  Switched off, the whole preface goes through and the connection
    stays."""
    settings = {"settings_ack_timeout_ms": NEVER_MS}
    if not limit_on:
        settings["handshake_timeout_ms"] = NEVER_MS
    async with (
        hostile_server(**settings) as server,
        Attacker.connect(server.port, handshake=False) as attacker,
    ):
        opened = anyio.current_time()
        sent = 0
        for byte in PREFACE:
            if not await attacker.send(bytes([byte])):
                break
            sent += 1
            if not await attacker.read(1.0):  # the pace: a byte a (virtual) second
                break
        closed_at = anyio.current_time()
        assert await canary(server.address, calls=5) < CANARY_MAX_LATENCY
    if limit_on:
        assert attacker.eof and HANDSHAKE <= sent < len(PREFACE)
        assert HANDSHAKE <= closed_at - opened <= HANDSHAKE + CLOSE_SLACK + 1.0
    else:
        assert not attacker.eof and sent == len(PREFACE)


@pytest.mark.parametrize("limit_on", [True, False])
async def test_settings_never_acknowledged(limit_on: bool) -> None:
    """A peer that sends its preface and SETTINGS but never ACKs ours: GOAWAY
    SETTINGS_TIMEOUT 10 s after accept, then the close.  Switched off (huge), still open
    at 100 s with no GOAWAY."""
    settings = {} if limit_on else {"settings_ack_timeout_ms": NEVER_MS}
    async with (
        hostile_server(**settings) as server,
        Attacker.connect(server.port, handshake=False) as attacker,
    ):
        opened = anyio.current_time()
        assert await attacker.send(PREFACE + Peer.settings())
        timeline = Timeline(attacker, ack_pings=True)
        await timeline.run_until(opened + 100.0)
    # The server's SETTINGS, and the ACK of ours, came at once.
    assert any(isinstance(f, SettingsFrame) and "ACK" in f.flags for _, f in timeline.arrivals)
    if limit_on:
        [(at, goaway)] = timeline.goaways()
        assert goaway.error_code == SETTINGS_TIMEOUT
        assert at - opened == pytest.approx(10.0, abs=0.5)
        assert timeline.eof_at is not None and timeline.eof_at - at <= CLOSE_SLACK
    else:
        assert not timeline.goaways() and timeline.eof_at is None


# --------------------------------------------------------------------------- idle


@pytest.mark.parametrize("limit_on", [True, False])
async def test_many_idle_connections(limit_on: bool) -> None:
    """50 connections that finish the handshake, then only answer the server's PINGs:
    the canary is served meanwhile; at the idle timeout (5 min, the default; PINGs do not
    count) each gets GOAWAY ``idle`` and is closed.  Switched off, all are open at 10 min,
    their PINGs answered."""
    settings: dict[str, object] = {"max_connections_per_ip": 1000}
    if not limit_on:
        settings["idle_timeout_ms"] = 0
    async with hostile_server(**settings) as server, contextlib.AsyncExitStack() as stack:
        attackers = [
            await stack.enter_async_context(Attacker.connect(server.port)) for _ in range(50)
        ]
        opened = anyio.current_time()
        timelines = [Timeline(attacker, ack_pings=True) for attacker in attackers]
        assert await canary(server.address, calls=5) < CANARY_MAX_LATENCY
        async with anyio.create_task_group() as tg:
            for timeline in timelines:
                tg.start_soon(timeline.run_until, opened + 600.0)
    for timeline in timelines:
        # The server kept the peers alive with its PINGs (one a minute of silence).
        assert timeline.pings()
        if limit_on:
            [(at, goaway)] = timeline.goaways()
            assert (goaway.error_code, bytes(goaway.additional_data)) == (0, b"idle")
            assert 300.0 <= at - opened <= 302.0
            assert timeline.eof_at is not None and timeline.eof_at - at <= CLOSE_SLACK
        else:
            assert not timeline.goaways() and timeline.eof_at is None
            assert len(timeline.pings()) >= 8


# --------------------------------------------------------------------------- dead peer


@pytest.mark.parametrize("peer", ["silent", "acks pings", "silent, keepalive off"])
async def test_dead_peer(peer: str) -> None:
    """A peer that goes silent after the handshake (sends nothing, ACKs nothing) is sent a
    PING 60 s after the last bytes it sent and closed 20 s later.  A peer that ACKs stays
    (a PING a minute); with ``keepalive_time_ms`` 0 a silent peer stays too (until the idle
    timeout at 5 min, beyond this test's 4 min)."""
    settings = {"keepalive_time_ms": 0} if peer == "silent, keepalive off" else {}
    async with hostile_server(**settings) as server, Attacker.connect(server.port) as attacker:
        opened = anyio.current_time()
        timeline = Timeline(attacker, ack_pings=peer == "acks pings")
        await timeline.run_until(opened + 240.0)
    pings = [at - opened for at, _ in timeline.pings()]
    if peer == "silent":
        assert pings == [pytest.approx(60.0, abs=0.5)]
        assert timeline.eof_at is not None
        assert 80.0 <= timeline.eof_at - opened <= 80.0 + CLOSE_SLACK
        [(_, goaway)] = timeline.goaways()
        assert b"PING" in bytes(goaway.additional_data)
    elif peer == "acks pings":
        assert timeline.eof_at is None and not timeline.goaways()
        assert (
            pings == [pytest.approx(t, abs=1.0) for t in (60.0, 120.0, 180.0, 240.0)][: len(pings)]
        )
        assert len(pings) >= 3
    else:
        assert not pings and timeline.eof_at is None


# --------------------------------------------------------------------------- write timeout

#: Jobs of this payload size make the replies that the peer never reads.
PAYLOAD_BYTES = 256 << 10
JOBS = 64


def _reserve(peer: Peer, stream_id: int, queue: str) -> bytes:
    message = bytes(
        ReserveRequest(queues=[queue], max_jobs=1, lease_duration=datetime.timedelta(minutes=5))
    )
    body = b"\x00" + len(message).to_bytes(4, "big") + message
    return peer.headers(stream_id, GRPC_REQUEST("/sepp.v1.QueueService/Reserve")) + Peer.data(
        stream_id, body, end_stream=True
    )


@pytest.mark.parametrize("limit_on", [True, False])
async def test_write_timeout(limit_on: bool) -> None:
    """A peer with a tiny receive buffer that opens its flow-control windows wide, asks for
    64 jobs of 256 KiB one Reserve at a time and never reads: the queued output stays
    within the 1 MiB at which reading and replying pause, plus one reply; the server
    closes the connection 30 s (the default write timeout) after its writes stalled.
    Switched off (0), the connection is still there at 5 min.  (Keepalive is off here, so
    that the dead-peer PING does not close it first.)"""
    settings: dict[str, object] = {"keepalive_time_ms": 0, "idle_timeout_ms": 0}
    if not limit_on:
        settings["write_timeout_ms"] = 0
    queue = "never-read"
    payload = sepp.Payload(b"x" * PAYLOAD_BYTES, "application/octet-stream")
    async with hostile_server(**settings) as server:
        async with sepp.connect(server.address) as client:
            for _ in range(JOBS // 8):
                await client.enqueue_batch(
                    [
                        sepp.EnqueueRequest(queue=queue, job_type="t", payload=payload)
                        for _ in range(8)
                    ]
                )
        async with Attacker.connect(server.port, handshake=False, rcvbuf=4096) as attacker:
            peer = attacker.peer
            window = (1 << 31) - 1
            assert await attacker.send(
                PREFACE
                + Peer.settings({0x4: window})  # SETTINGS_INITIAL_WINDOW_SIZE
                + Peer.settings(ack=True)
                + Peer.window_update(0, window - 65_535)
            )
            await attacker.read(1.0)  # the server's SETTINGS: the connection is up
            [connection] = server.connections
            opened = anyio.current_time()
            peaks: list[int] = []
            sent = 0
            for stream_id in range(1, 2 * JOBS, 2):
                with anyio.move_on_after(1.0):
                    if not await attacker.send(_reserve(peer, stream_id, queue)):
                        break
                    sent += 1
                peaks.append(connection.h2.pending_output_bytes)
                if connection.done.is_set():
                    break
            with anyio.move_on_after(300.0):
                while not connection.done.is_set():
                    peaks.append(connection.h2.pending_output_bytes)
                    await anyio.sleep(1.0)  # sampling the queue, not synchronising
            ended = anyio.current_time() - opened
            open_at_the_end = not connection.done.is_set()
    assert sent == JOBS
    # One reply past the 1 MiB at which reading (and replying) pauses, with its frames.
    assert max(peaks) <= (1 << 20) + PAYLOAD_BYTES + 4096
    if limit_on:
        assert connection.done.is_set()
        assert connection.ended_by == "no write progress for 30 s"
        assert 30.0 <= ended <= 31.0 + CLOSE_SLACK
    else:
        assert open_at_the_end and ended >= 300.0
