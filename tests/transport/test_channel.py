"""The anyio gRPC channel against real servers over loopback, on both backends.

Every test here runs on asyncio and trio, and the interop tests run against
two independent server implementations (grpclib and grpcio's C core), each
serving the generated ``sepp.v1.QueueService`` with the small test behaviour
of ``tests/support/servers.py``.
"""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import pytest
import trustme
from h2.settings import SettingCodes

from sepp_anyio import StatusCode
from sepp_anyio._grpc import GrpcError
from sepp_anyio._proto.sepp import v1 as pb
from sepp_anyio._transport import Channel, default_ssl_context
from tests.support.servers import (
    CallEvent,
    GrpcioTestServer,
    GrpclibTestServer,
    MiB,
    RawH2Server,
    TLSMaterial,
    checksum_id,
    goaway,
    http_status,
    make_tls,
    pattern_bytes,
    silent_peer,
)

pytestmark = pytest.mark.anyio

Server = GrpclibTestServer | GrpcioTestServer


def _make_server(kind: str, **kwargs: Any) -> Server:
    if kind == "grpclib":
        return GrpclibTestServer(**kwargs)
    return GrpcioTestServer(max_message_size=64 * MiB, **kwargs)


@pytest.fixture(scope="module", params=["grpclib", "grpcio"])
def shared_server(request: pytest.FixtureRequest) -> Iterator[Server]:
    """One server of each kind for the tests that don't stop or reconfigure it."""
    with _make_server(request.param) as server:
        yield server


@pytest.fixture
def server(shared_server: Server) -> Server:
    shared_server.clear_events()
    return shared_server


@pytest.fixture(params=["grpclib", "grpcio"])
def own_server(request: pytest.FixtureRequest) -> Iterator[Server]:
    """A fresh server per test, for tests that stop or restart it."""
    server = _make_server(request.param)
    server.start()
    try:
        yield server
    finally:
        server.stop()


@asynccontextmanager
async def open_stub(
    server: Server | RawH2Server, **kwargs: Any
) -> AsyncIterator[tuple[Channel, pb.QueueServiceStub]]:
    kwargs.setdefault("max_receive_message_bytes", 64 * MiB)
    async with Channel("127.0.0.1", server.port, **kwargs) as channel:
        yield channel, pb.QueueServiceStub(channel)


def action(*steps: str) -> list[tuple[str, str | bytes]]:
    return [("x-test-action", step) for step in steps]


async def wait_for_call(server: Server, predicate: Any) -> CallEvent:
    """Block (in a worker thread) until the server has recorded a matching call."""
    event: CallEvent = await anyio.to_thread.run_sync(server.wait_for, predicate)
    return event


# ------------------------------------------------------------------ unary basics


async def test_unary_call_carries_metadata_including_binary_keys(server: Server) -> None:
    async with open_stub(server, metadata={"authorization": "Bearer k1"}) as (_, stub):
        reply = await stub.get_server_info(
            pb.GetServerInfoRequest(),
            metadata=[("x-trace", "abc def"), ("x-blob-bin", b"\x00\xff\x10"), ("x-trace", "2")],
        )
    assert reply.server_version == server.version
    assert reply.allowed_encodings == [
        "authorization=Bearer k1",
        "x-trace=abc def",
        "x-blob-bin=00ff10",
        "x-trace=2",
    ]


async def test_user_agent_names_the_library(server: Server) -> None:
    async with open_stub(server) as (_, stub):
        await stub.ack(pb.AckRequest(job_id="ua", attempt=1))
    event = await wait_for_call(server, lambda e: e.method == "Ack")
    assert event.user_agent is not None
    assert "sepp-anyio/" in event.user_agent


async def test_many_sequential_calls_share_one_connection(server: Server) -> None:
    async with open_stub(server) as (_, stub):
        for i in range(20):
            reply = await stub.ack(pb.AckRequest(job_id=f"j{i}", attempt=1))
            assert reply.job_id == f"j{i}"
    peers = {e.peer for e in server.events}
    assert len(peers) == 1


# ------------------------------------------------------------------ status


async def test_error_status_and_message_from_trailers_only_response(server: Server) -> None:
    async with open_stub(server) as (_, stub):
        with pytest.raises(GrpcError) as caught:
            await stub.ack(
                pb.AckRequest(job_id="x", attempt=1),
                metadata=action("fail:NOT_FOUND:job not found"),
            )
    assert caught.value.code is StatusCode.NOT_FOUND
    assert caught.value.message == "job not found"


async def test_non_ascii_status_message_is_percent_decoded(server: Server) -> None:
    text = "fail:INVALID_ARGUMENT:queue “café” is 100% full"
    async with open_stub(server) as (_, stub):
        with pytest.raises(GrpcError) as caught:
            await stub.ack(
                pb.AckRequest(job_id="x", attempt=1),
                metadata=[("x-test-action-bin", text.encode())],
            )
    assert caught.value.code is StatusCode.INVALID_ARGUMENT
    assert caught.value.message == "queue “café” is 100% full"


async def test_error_status_in_trailers_after_a_message(server: Server) -> None:
    async with open_stub(server) as (_, stub):
        with pytest.raises(GrpcError) as caught:
            await stub.ack(
                pb.AckRequest(job_id="x", attempt=1),
                metadata=action("trailers-after-data:ABORTED:try later"),
            )
    assert caught.value.code is StatusCode.ABORTED
    assert caught.value.message == "try later"


async def test_status_details_bin_is_ignored_gracefully(server: Server) -> None:
    async with open_stub(server) as (_, stub):
        with pytest.raises(GrpcError) as caught:
            await stub.ack(
                pb.AckRequest(job_id="x", attempt=1),
                metadata=action("fail-details:FAILED_PRECONDITION:attempt mismatch"),
            )
        assert caught.value.code is StatusCode.FAILED_PRECONDITION
        assert caught.value.message == "attempt mismatch"
        # The connection is unaffected.
        assert (await stub.ack(pb.AckRequest(job_id="after", attempt=1))).job_id == "after"


async def test_non_grpc_http_status_maps_to_grpc_status() -> None:
    with RawH2Server(http_status(503)) as raw:
        async with open_stub(raw) as (_, stub):
            with pytest.raises(GrpcError) as caught:
                await stub.ack(pb.AckRequest(job_id="x", attempt=1))
    assert caught.value.code is StatusCode.UNAVAILABLE
    assert "HTTP status 503" in (caught.value.message or "")


# ------------------------------------------------------------------ deadlines


def _sent_timeout(reply: pb.GetServerInfoResponse) -> float | None:
    text = reply.supported_protocol_versions[1]
    assert text.startswith("timeout=")
    value = text.removeprefix("timeout=")
    return None if value == "none" else float(value)


async def test_grpc_timeout_is_sent_from_explicit_timeout(server: Server) -> None:
    async with open_stub(server) as (_, stub):
        sent = _sent_timeout(await stub.get_server_info(pb.GetServerInfoRequest(), timeout=7.0))
        assert sent is not None
        assert 6.0 < sent <= 7.0
        assert _sent_timeout(await stub.get_server_info(pb.GetServerInfoRequest())) is None


async def test_a_long_timeout_is_sent_in_whole_seconds_and_indexed_once(server: Server) -> None:
    """From 10 s up, grpc-timeout is whole seconds rounded up: the same value on every call,
    so it enters the HPACK table once and is a one-byte reference from then on."""
    async with open_stub(server) as (channel, stub):
        for _ in range(20):
            sent = _sent_timeout(
                await stub.get_server_info(pb.GetServerInfoRequest(), timeout=30.0)
            )
            assert sent is not None
            assert 29.0 < sent <= 30.0
            sent = _sent_timeout(
                await stub.get_server_info(pb.GetServerInfoRequest(), timeout=12.5)
            )
            assert sent is not None
            assert 12.0 < sent <= 13.0  # never less than the client's, at most 1 s more
        conn = channel._conn
        assert conn is not None
        entries = [v for n, v in conn.h2.encoder_table if n == b"grpc-timeout"]
        assert sorted(entries) == [b"13S", b"30S"]


async def test_grpc_timeout_is_sent_from_ambient_anyio_deadline(server: Server) -> None:
    async with open_stub(server) as (_, stub):
        with anyio.fail_after(9.0):
            sent = _sent_timeout(await stub.get_server_info(pb.GetServerInfoRequest()))
        assert sent is not None
        assert 8.0 < sent <= 9.0
        # The nearer of the two wins.
        with anyio.fail_after(20.0):
            sent = _sent_timeout(await stub.get_server_info(pb.GetServerInfoRequest(), timeout=3.0))
        assert sent is not None
        assert 2.0 < sent <= 3.0


async def test_local_deadline_expiry_raises_deadline_exceeded(server: Server) -> None:
    async with open_stub(server) as (channel, stub):
        # Connect first: the deadline is to cover the call alone. A server that sees a call only
        # after its deadline (grpcio drops those before its handler runs) records nothing, so the
        # connection handshake, and a busy machine's dispatch, must not eat the budget.
        await stub.ack(pb.AckRequest(job_id="warm", attempt=1))
        with pytest.raises(GrpcError) as caught:
            await stub.ack(
                pb.AckRequest(job_id="slow", attempt=1), timeout=0.5, metadata=action("sleep:30")
            )
        assert caught.value.code is StatusCode.DEADLINE_EXCEEDED
        event = await wait_for_call(server, lambda e: e.method == "Ack" and e.cancelled)
        assert event.request.job_id == "slow"
        # Still the same healthy connection.
        conn = channel._conn
        assert (await stub.ack(pb.AckRequest(job_id="next", attempt=1))).job_id == "next"
        assert channel._conn is conn


async def test_expired_timeout_fails_without_sending(server: Server) -> None:
    async with open_stub(server) as (_, stub):
        with pytest.raises(GrpcError) as caught:
            await stub.ack(pb.AckRequest(job_id="late", attempt=1), timeout=0.0)
    assert caught.value.code is StatusCode.DEADLINE_EXCEEDED
    assert not any(e.method == "Ack" for e in server.events)


@pytest.mark.parametrize("kind", ["grpclib", "grpcio"])
async def test_a_timeout_bounds_the_wait_for_a_stream_slot(kind: str) -> None:
    """Waiting for a free stream slot is bounded by the call's own timeout too (the
    response wait is the deadline task's; this wait has its own scope)."""
    with _make_server(kind, max_concurrent_streams=1) as server:
        async with open_stub(server) as (channel, stub):
            await stub.ack(pb.AckRequest(job_id="warm", attempt=1))
            async with anyio.create_task_group() as tg:
                tg.start_soon(
                    lambda: stub.ack(
                        pb.AckRequest(job_id="hold", attempt=1), metadata=action("sleep:30")
                    )
                )
                await wait_for_call(server, lambda e: e.request.job_id == "hold")
                with anyio.fail_after(10), pytest.raises(GrpcError) as caught:
                    await stub.ack(pb.AckRequest(job_id="queued", attempt=1), timeout=0.3)
                tg.cancel_scope.cancel()
            assert caught.value.code is StatusCode.DEADLINE_EXCEEDED
            assert not any(e.request.job_id == "queued" for e in server.events)
            assert channel._conn is not None
            assert not channel._conn.calls


# ------------------------------------------------------------------ cancellation


async def test_cancelled_call_resets_stream_and_server_observes_it(server: Server) -> None:
    async with open_stub(server) as (channel, stub):
        await stub.ack(pb.AckRequest(job_id="warm", attempt=1))
        conn = channel._conn
        with anyio.CancelScope() as scope:
            async with anyio.create_task_group() as tg:

                async def call() -> None:
                    await stub.ack(
                        pb.AckRequest(job_id="doomed", attempt=1), metadata=action("sleep:30")
                    )

                tg.start_soon(call)
                await wait_for_call(server, lambda e: e.request.job_id == "doomed")
                scope.cancel()
        event = await wait_for_call(server, lambda e: e.request.job_id == "doomed" and e.cancelled)
        assert event.cancel_reason == "client"
        assert (await stub.ack(pb.AckRequest(job_id="after", attempt=1))).job_id == "after"
        assert channel._conn is conn
        assert conn is not None
        assert conn.failure is None
        assert not conn.calls


async def test_cancellation_at_any_point_never_corrupts_the_shared_connection(
    server: Server,
) -> None:
    """Calls with 1 MiB bodies are cancelled after 0..30 checkpoints, i.e. in
    every phase (queued for a slot, mid-send, waiting for the reply); the
    connection must survive all of it."""
    payload = pb.Payload(data=pattern_bytes(MiB), encoding="bytes")
    request = pb.EnqueueBatchRequest(
        jobs=[pb.EnqueueRequest(queue="q", job_type="t", payload=payload)]
    )
    async with open_stub(server) as (channel, stub):
        await stub.ack(pb.AckRequest(job_id="warm", attempt=1))
        conn = channel._conn

        async def doomed(checkpoints: int) -> None:
            with anyio.CancelScope() as scope:
                async with anyio.create_task_group() as tg:
                    tg.start_soon(stub.enqueue_batch, request)
                    for _ in range(checkpoints):
                        await anyio.lowlevel.checkpoint()
                    scope.cancel()

        async with anyio.create_task_group() as tg:
            for checkpoints in range(30):
                tg.start_soon(doomed, checkpoints)
        reply = await stub.enqueue_batch(request)
        assert reply.results[0].success.job_id == checksum_id(payload.data)
        assert channel._conn is conn
        assert conn is not None
        assert conn.failure is None


# ------------------------------------------------------------------ flow control and sizes


async def test_8_mib_messages_in_both_directions(server: Server) -> None:
    big = pattern_bytes(8 * MiB)
    async with open_stub(server) as (_, stub):
        reply = await stub.enqueue_batch(
            pb.EnqueueBatchRequest(
                jobs=[pb.EnqueueRequest(queue="q", job_type="t", payload=pb.Payload(big, "bytes"))]
            )
        )
        assert reply.results[0].success.job_id == checksum_id(big)
        reserved = await stub.reserve(pb.ReserveRequest(queues=["q"], worker_id=str(8 * MiB)))
        assert reserved.jobs[0].payload.data == big


async def test_several_large_messages_concurrently(server: Server) -> None:
    sizes = [3 * MiB, 2 * MiB + 1, 5 * MiB - 7]
    async with open_stub(server) as (_, stub):
        results: dict[int, bytes] = {}

        async def fetch(size: int) -> None:
            reply = await stub.reserve(pb.ReserveRequest(queues=["q"], worker_id=str(size)))
            results[size] = reply.jobs[0].payload.data

        async with anyio.create_task_group() as tg:
            for size in sizes:
                tg.start_soon(fetch, size)
    assert results == {size: pattern_bytes(size) for size in sizes}


async def test_message_over_max_receive_size_fails_clearly(server: Server) -> None:
    async with open_stub(server, max_receive_message_bytes=MiB) as (channel, stub):
        with pytest.raises(GrpcError) as caught:
            await stub.reserve(pb.ReserveRequest(queues=["q"], worker_id=str(2 * MiB)))
        assert caught.value.code is StatusCode.RESOURCE_EXHAUSTED
        assert "exceeds max_receive_message_bytes=1048576" in (caught.value.message or "")
        # Exactly at the limit is fine (the job's framing adds a few bytes).
        ok = await stub.reserve(pb.ReserveRequest(queues=["q"], worker_id=str(MiB - 64)))
        assert len(ok.jobs[0].payload.data) == MiB - 64
        assert channel._conn is not None
        assert channel._conn.failure is None


# ------------------------------------------------------------------ concurrency


@pytest.mark.parametrize("kind", ["grpclib", "grpcio"])
async def test_more_concurrent_calls_than_max_concurrent_streams(kind: str) -> None:
    with _make_server(kind, max_concurrent_streams=8) as server:
        async with open_stub(server) as (channel, stub):
            replies: list[str] = []

            async def call(i: int) -> None:
                replies.append((await stub.ack(pb.AckRequest(job_id=str(i), attempt=1))).job_id)

            with anyio.fail_after(30):
                async with anyio.create_task_group() as tg:
                    for i in range(500):
                        tg.start_soon(call, i)
            assert sorted(replies, key=int) == [str(i) for i in range(500)]
            assert channel._conn is not None
            assert not channel._conn.calls
        assert max(e.concurrent for e in server.events) <= 8


async def test_stream_limit_of_one_from_a_raw_server_is_respected() -> None:
    """A server announcing MAX_CONCURRENT_STREAMS=1 gets one stream at a time."""
    with RawH2Server(http_status(200), settings={SettingCodes.MAX_CONCURRENT_STREAMS: 1}) as raw:
        async with open_stub(raw) as (_, stub):
            errors: list[GrpcError] = []

            async def call() -> None:
                try:
                    await stub.ack(pb.AckRequest(job_id="x", attempt=1))
                except GrpcError as exc:
                    errors.append(exc)

            with anyio.fail_after(10):
                async with anyio.create_task_group() as tg:
                    for _ in range(5):
                        tg.start_soon(call)
    # http_status(200) has no gRPC headers, so each call fails, but one at a
    # time and without a protocol error (h2 would close the connection).
    assert len(errors) == 5
    assert not [e for e in raw.events if e.kind == "protocol_error"]


# ------------------------------------------------------------------ connection loss


async def test_server_stop_fails_inflight_calls_unavailable_and_restart_is_survived(
    own_server: Server,
) -> None:
    async with open_stub(own_server) as (channel, stub):
        await stub.ack(pb.AckRequest(job_id="before", attempt=1))
        first_conn = channel._conn
        failures: list[GrpcError] = []

        async def inflight() -> None:
            try:
                await stub.ack(
                    pb.AckRequest(job_id="inflight", attempt=1), metadata=action("sleep:30")
                )
            except GrpcError as exc:
                failures.append(exc)

        async with anyio.create_task_group() as tg:
            tg.start_soon(inflight)
            await wait_for_call(own_server, lambda e: e.request.job_id == "inflight")
            await anyio.to_thread.run_sync(own_server.restart, 0.0)
        assert [f.code for f in failures] == [StatusCode.UNAVAILABLE]
        # Same port, new server process state: the next call reconnects.
        reply = await stub.ack(pb.AckRequest(job_id="after", attempt=1))
        assert reply.job_id == "after"
        assert channel._conn is not first_conn


async def test_graceful_goaway_lets_the_call_finish_and_moves_to_a_new_connection() -> None:
    with GrpclibTestServer() as server:
        async with open_stub(server) as (channel, stub):
            await stub.ack(pb.AckRequest(job_id="a", attempt=1))
            first_conn = channel._conn
            assert first_conn is not None
            reply = await stub.ack(pb.AckRequest(job_id="b", attempt=1), metadata=action("goaway"))
            assert reply.job_id == "b"
            with anyio.fail_after(5):
                await first_conn.closed.wait()
            assert (await stub.ack(pb.AckRequest(job_id="c", attempt=1))).job_id == "c"
            assert channel._conn is not first_conn
        peers = [e.peer for e in server.events]
        assert peers[0] == peers[1] != peers[2]


async def test_goaway_above_the_stream_means_unprocessed_and_unavailable() -> None:
    with RawH2Server(goaway(last_stream_id=0)) as raw:
        async with open_stub(raw) as (_, stub):
            with pytest.raises(GrpcError) as caught:
                await stub.ack(pb.AckRequest(job_id="x", attempt=1))
    assert caught.value.code is StatusCode.UNAVAILABLE
    assert "not processed" in (caught.value.message or "")


async def test_refused_connection_is_unavailable_and_retried_after_jittered_backoff() -> None:
    with GrpclibTestServer() as server:
        port = server.port
    # Nothing listens on the port any more.
    async with Channel("127.0.0.1", port, reconnect_backoff=0.05) as channel:
        stub = pb.QueueServiceStub(channel)
        with pytest.raises(GrpcError) as caught:
            await stub.ack(pb.AckRequest(job_id="x", attempt=1))
        assert caught.value.code is StatusCode.UNAVAILABLE
        # The operating system's words, the same on both backends.
        assert caught.value.message == f"cannot connect to 127.0.0.1:{port}: Connection refused"
        pause = channel._next_attempt_at - anyio.current_time()
        assert 0.0 < pause <= 0.05 * 1.2
        with pytest.raises(GrpcError):
            await stub.ack(pb.AckRequest(job_id="x", attempt=1))
        # The second failure grows the backoff by 1.6x (jitter +/-20%).
        pause = channel._next_attempt_at - anyio.current_time()
        assert 0.05 * 1.6 * 0.7 < pause <= 0.05 * 1.6 * 1.2
        with GrpclibTestServer(port=port) as again:
            reply = await stub.ack(pb.AckRequest(job_id="back", attempt=1))
            assert reply.job_id == "back"
            assert again.events[0].request.job_id == "back"
        assert channel._failures == 0


async def test_connect_timeout_is_reported() -> None:
    # A listener that never completes the HTTP/2 handshake (no SETTINGS).
    with anyio.fail_after(10):
        listener = await anyio.create_tcp_listener(local_host="127.0.0.1")
        async with listener:
            port = listener.extra(anyio.abc.SocketAttribute.local_port)
            async with Channel("127.0.0.1", port, connect_timeout=0.2) as channel:
                with pytest.raises(GrpcError) as caught:
                    await channel.connect()
    assert caught.value.code is StatusCode.UNAVAILABLE
    assert "timed out after 0.2s connecting to 127.0.0.1" in (caught.value.message or "")


# ------------------------------------------------------------------ keepalive


async def test_keepalive_detects_a_dead_peer_during_a_call() -> None:
    with RawH2Server(silent_peer) as raw:
        async with open_stub(raw, keepalive_interval=0.1, keepalive_timeout=0.1) as (_, stub):
            with anyio.fail_after(10), pytest.raises(GrpcError) as caught:
                await stub.ack(pb.AckRequest(job_id="x", attempt=1))
    assert caught.value.code is StatusCode.UNAVAILABLE
    assert "keepalive PING not acknowledged" in (caught.value.message or "")


async def test_keepalive_detects_a_dead_peer_while_idle() -> None:
    with RawH2Server(silent_peer) as raw:
        async with open_stub(raw, keepalive_interval=0.1, keepalive_timeout=0.1) as (channel, _):
            await channel.connect()
            conn = channel._conn
            assert conn is not None
            with anyio.fail_after(10):
                await conn.closed.wait()
            assert conn.failure is not None
            assert "keepalive" in (conn.failure.message or "")


async def test_keepalive_pings_a_live_peer_while_idle_and_keeps_the_connection() -> None:
    import h2.events

    with RawH2Server(http_status(200)) as raw:
        async with open_stub(raw, keepalive_interval=0.05, keepalive_timeout=5.0) as (channel, _):
            await channel.connect()
            conn = channel._conn
            pings = 0

            def second_ping(event: Any) -> bool:
                nonlocal pings
                pings += isinstance(event.event, h2.events.PingReceived)
                return pings >= 3

            await anyio.to_thread.run_sync(raw.wait_for, second_ping)
            assert channel._conn is conn
            assert conn is not None
            assert conn.failure is None


# ------------------------------------------------------------------ TLS


@pytest.fixture(scope="module")
def tls() -> TLSMaterial:
    return make_tls()


@pytest.mark.parametrize("kind", ["grpclib", "grpcio"])
async def test_tls_with_custom_ca_and_alpn_h2(kind: str, tls: TLSMaterial) -> None:
    with _make_server(kind, tls=tls) as server:
        async with open_stub(server, ssl_context=tls.client_ssl_context()) as (channel, stub):
            assert (await stub.ack(pb.AckRequest(job_id="tls", attempt=1))).job_id == "tls"
            assert channel._scheme == b"https"


async def test_tls_server_name_override() -> None:
    ca = trustme.CA()
    cert = ca.issue_cert("sepp.internal")
    server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    cert.configure_cert(server_context)
    server_context.set_alpn_protocols(["h2"])
    client_context = default_ssl_context(cadata=ca.cert_pem.bytes().decode())
    with GrpclibTestServer(tls=server_context) as server:
        async with open_stub(
            server, ssl_context=client_context, server_hostname="sepp.internal"
        ) as (_, stub):
            assert (await stub.ack(pb.AckRequest(job_id="sni", attempt=1))).job_id == "sni"
        # Without the override the name (127.0.0.1) doesn't match the certificate.
        async with open_stub(server, ssl_context=client_context) as (_, stub):
            with pytest.raises(GrpcError) as caught:
                await stub.ack(pb.AckRequest(job_id="sni", attempt=1))
        assert "TLS handshake with 127.0.0.1" in (caught.value.message or "")


async def test_tls_with_the_wrong_ca_fails_clearly(tls: TLSMaterial) -> None:
    other_ca = trustme.CA()
    with GrpclibTestServer(tls=tls) as server:
        wrong = default_ssl_context(cadata=other_ca.cert_pem.bytes().decode())
        async with open_stub(server, ssl_context=wrong) as (_, stub):
            with pytest.raises(GrpcError) as caught:
                await stub.ack(pb.AckRequest(job_id="x", attempt=1))
        # System roots don't know the test CA either.
        async with open_stub(server, ssl_context=default_ssl_context()) as (_, stub):
            with pytest.raises(GrpcError) as system_roots:
                await stub.ack(pb.AckRequest(job_id="x", attempt=1))
    for error in (caught.value, system_roots.value):
        assert error.code is StatusCode.UNAVAILABLE
        assert "certificate verify failed" in (error.message or "")


async def test_plaintext_client_against_tls_server_fails_cleanly(tls: TLSMaterial) -> None:
    with GrpclibTestServer(tls=tls) as server:
        async with open_stub(server, connect_timeout=2.0) as (_, stub):
            with pytest.raises(GrpcError) as caught:
                await stub.ack(pb.AckRequest(job_id="x", attempt=1))
    assert caught.value.code is StatusCode.UNAVAILABLE


# ------------------------------------------------------------------ lifetime


async def test_channel_lifetime_is_structured() -> None:
    with GrpclibTestServer() as server:
        channel = Channel("127.0.0.1", server.port)
        async with channel:
            await channel.connect()
            conn = channel._conn
            assert conn is not None
        # Leaving the block closed the connection and ended its tasks.
        assert conn.closed.is_set()
        with pytest.raises(RuntimeError, match="connection is closed"):
            channel.request("/x", None, pb.AckRequest, pb.AckResponse)  # type: ignore[arg-type]


async def test_body_exception_is_not_wrapped_in_an_exception_group() -> None:
    async def body(port: int) -> None:
        async with Channel("127.0.0.1", port) as channel:
            await channel.connect()
            raise KeyError("mine")

    with GrpclibTestServer() as server, pytest.raises(KeyError):
        await body(server.port)


def _goaway_then_reply(conn: Any, event: Any, send: Any) -> None:
    """Answer each request OK, but put a graceful GOAWAY naming that stream
    *in front of* the response frames, in the same write."""
    import h2.events
    from hyperframe.frame import GoAwayFrame

    if isinstance(event, h2.events.RequestReceived):
        stream_id = event.stream_id
        body = bytes(pb.AckResponse(job_id="done"))
        conn.send_headers(stream_id, [(":status", "200"), ("content-type", "application/grpc")])
        conn.send_data(stream_id, b"\x00" + len(body).to_bytes(4, "big") + body)
        conn.send_headers(stream_id, [("grpc-status", "0")], end_stream=True)
        reply = conn.data_to_send()
        goaway_frame = GoAwayFrame(0)
        goaway_frame.last_stream_id = stream_id
        goaway_frame.error_code = 0
        send(raw=goaway_frame.serialize() + reply)
    else:
        send()


async def test_graceful_goaway_in_the_same_read_as_the_reply_still_delivers_it() -> None:
    with RawH2Server(_goaway_then_reply) as raw:
        async with open_stub(raw) as (_, stub):
            first = await stub.ack(pb.AckRequest(job_id="x", attempt=1))
            assert first.job_id == "done"
            second = await stub.ack(pb.AckRequest(job_id="y", attempt=1))
            assert second.job_id == "done"
        assert raw.connections == 2
        assert not [e for e in raw.events if e.kind == "protocol_error"]


async def test_connection_closed_right_after_a_complete_reply_is_not_a_failure() -> None:
    """The server answers, then hangs up at once: the answer stands."""
    import h2.events

    def reply_and_hang_up(conn: Any, event: Any, send: Any) -> None:
        if isinstance(event, h2.events.RequestReceived):
            stream_id = event.stream_id
            body = bytes(pb.AckResponse(job_id="last words"))
            conn.send_headers(stream_id, [(":status", "200"), ("content-type", "application/grpc")])
            conn.send_data(stream_id, b"\x00" + len(body).to_bytes(4, "big") + body)
            conn.send_headers(stream_id, [("grpc-status", "0")], end_stream=True)
            conn.close_connection()
            send()
            raise ConnectionAbortedError("hang up")  # closes the socket
        send()

    with RawH2Server(reply_and_hang_up) as raw:
        async with open_stub(raw) as (_, stub):
            reply = await stub.ack(pb.AckRequest(job_id="x", attempt=1))
        assert reply.job_id == "last words"


async def test_per_call_headers_do_not_churn_the_hpack_table(server: Server) -> None:
    """grpc-timeout and per-call metadata change every call; indexing them would
    evict the constant headers from the HPACK table. The table must settle."""
    async with open_stub(server, metadata={"authorization": "Bearer secret"}) as (channel, stub):
        await stub.ack(pb.AckRequest(job_id="warm", attempt=1), timeout=10.0)
        conn = channel._conn
        assert conn is not None
        settled = conn.h2.encoder_table
        for i in range(30):
            await stub.ack(
                pb.AckRequest(job_id=str(i), attempt=1),
                timeout=5.0 + i / 7,
                metadata=[("traceparent", f"00-{i:032x}-{i + 1:016x}-01")],
            )
        assert conn.h2.encoder_table == settled
        assert all(name != b"authorization" for name, _ in settled)
