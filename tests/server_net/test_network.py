"""The network server through our client, on real loopback sockets.

One in-process server (``ServerThread``) is shared by the module; tests use their own queue
names.  Servers with other settings (auth, TLS, limits) are started where needed.
"""

from __future__ import annotations

import socket
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import anyio
import anyio.to_thread
import grpc
import pytest

import sepp_anyio as sepp
from sepp_anyio._proto.sepp import v1 as pb
from sepp_anyio.server import (
    ApiKey,
    AuthConfig,
    ConfigError,
    Engine,
    LimitsConfig,
    NetworkServer,
    ServerConfig,
    ServerThread,
    StorageConfig,
    serve,
)
from sepp_anyio.server._network._auth import MISSING_KEY, WRONG_KEY
from sepp_anyio.server._network._service import HealthCheckRequest, HealthCheckResponse
from tests.server_net._util import (
    NOT_SERVING,
    SERVING,
    health_check,
    poll,
    raw_unary,
    write_tls_files,
)
from tests.support.servers import make_tls

pytestmark = pytest.mark.anyio

QUEUE_SERVICE = "sepp.v1.QueueService"


@pytest.fixture(scope="module")
def server() -> Iterator[ServerThread]:
    config = ServerConfig(storage=StorageConfig(dead_letter_retention_ms=3_600_000))
    with ServerThread(config) as running:
        yield running


@pytest.fixture
def queue(request: pytest.FixtureRequest) -> str:
    """A queue name of this test's own (the module's server is shared)."""
    return f"{request.node.name}-{uuid.uuid4().hex[:8]}"


def _request(queue: str, data: bytes = b"x", **kwargs: object) -> sepp.EnqueueRequest:
    return sepp.EnqueueRequest(
        queue,
        "t",
        payload=sepp.Payload(data, "text/plain"),
        **kwargs,  # type: ignore[arg-type]
    )


# --------------------------------------------------------------------------- the 8 RPCs


async def test_enqueue_reserve_ack(server: ServerThread, queue: str) -> None:
    async with sepp.connect(server.address) as client:
        ack = await client.enqueue(_request(queue, b"hello", priority=3))
        jobs = await client.reserve([queue], lease=30.0, wait=5.0)
        assert [job.ctx.id for job in jobs] == [ack.job_id]
        (job,) = jobs
        assert job.payload == sepp.Payload(b"hello", "text/plain")
        assert (job.ctx.queue, job.ctx.priority, job.ctx.attempt) == (queue, 3, 1)
        await client.ack(job.ctx)
        with pytest.raises(sepp.JobNotFoundError) as info:
            await client.ack(job.ctx)
        assert info.value.status_message == "job not found"
        assert await client.reserve([queue], lease=30.0, wait=0.0) == []


async def test_enqueue_batch_mixes_acks_and_rejections(server: ServerThread, queue: str) -> None:
    async with sepp.connect(server.address) as client:
        results = await client.enqueue_batch(
            [
                _request(queue, idempotency_key="k"),
                _request(queue, priority=None, idempotency_key="k"),
                sepp.EnqueueRequest(queue, "t", payload=sepp.Payload(b"x", "a/b")),
                _request(queue, scheduled_at=datetime.now(UTC) + timedelta(days=400)),
            ]
        )
        first, second, third, fourth = results
        assert isinstance(first, sepp.EnqueueAck) and not first.deduplicated
        assert second == sepp.EnqueueAck(first.job_id, deduplicated=True)
        assert isinstance(third, sepp.EnqueueAck)
        assert isinstance(fourth, sepp.ScheduledTooFar)


async def test_enqueue_atomic(server: ServerThread, queue: str) -> None:
    async with sepp.connect(server.address) as client:
        acks = await client.enqueue_atomic([_request(queue), _request(queue)])
        assert len({ack.job_id for ack in acks}) == 2
        with pytest.raises(sepp.BatchValidationError) as info:
            await client.enqueue_atomic([_request(queue), _request(queue, b"y" * (2 << 20))])
        (error,) = info.value.errors
        assert error.index == 1
        assert isinstance(error.rejection, sepp.PayloadTooLarge)
        jobs = await client.reserve([queue], lease=30.0, wait=0.0, max_jobs=10)
        assert sorted(job.ctx.id for job in jobs) == sorted(ack.job_id for ack in acks)


async def test_nack_extend_and_drain(server: ServerThread, queue: str) -> None:
    async with sepp.connect(server.address) as client:
        ack = await client.enqueue(_request(queue, max_attempts=2))
        (job,) = await client.reserve([queue], lease=30.0, wait=5.0)
        before = job.ctx.lease_expires_at
        expiry = await job.ctx.extend(60.0)
        assert expiry > before
        assert job.ctx.lease_expires_at == expiry
        assert await client.nack(job.ctx, reason="busy") is False
        (again,) = await client.reserve([queue], lease=30.0, wait=5.0)
        assert (again.ctx.id, again.ctx.attempt) == (ack.job_id, 2)
        with pytest.raises(sepp.AttemptMismatchError):
            await client.ack(job.ctx)
        assert await client.nack(again.ctx, sepp.RetryDirective.dead_letter(), "bad") is True
        (record,) = await client.drain_dead_letters(queue=queue, max=10)
        assert (record.job_id, record.cause, record.final_attempt, record.last_reason) == (
            ack.job_id,
            sepp.DeadLetterCause.REJECTED,
            2,
            "bad",
        )
        assert await client.drain_dead_letters(queue=queue, max=10) == []


async def test_server_info(server: ServerThread) -> None:
    async with sepp.connect(server.address) as client:
        info = await client.server_info()
    assert info.version == sepp.__version__
    assert info.supported_protocol_versions == ("v1",)
    assert info.dead_letter_retention_enabled is True
    assert abs((info.server_time - datetime.now(UTC)).total_seconds()) < 60


async def test_invalid_argument_carries_the_engine_message(server: ServerThread) -> None:
    async with sepp.connect(server.address) as client:
        with pytest.raises(sepp.InvalidRequestError) as info:
            await client.reserve([f"q{i}" for i in range(40)], lease=1.0, wait=0.0)
    assert info.value.status_message == "reserve exceeds max_reserve_queues (32)"


async def test_unknown_method_is_unimplemented(server: ServerThread) -> None:
    with pytest.raises(grpc.RpcError) as info:
        await anyio.to_thread.run_sync(
            lambda: raw_unary(server.address, "/sepp.v1.QueueService/Nope", b"")
        )
    assert info.value.code() is grpc.StatusCode.UNIMPLEMENTED


# --------------------------------------------------------------------------- health


@pytest.mark.parametrize("service", ["", QUEUE_SERVICE])
def test_health_serving(server: ServerThread, service: str) -> None:
    assert health_check(server.address, service) == SERVING


def test_health_unknown_service_is_not_found(server: ServerThread) -> None:
    with pytest.raises(grpc.RpcError) as info:
        health_check(server.address, "no.such.Service")
    assert info.value.code() is grpc.StatusCode.NOT_FOUND


@pytest.mark.parametrize("service", ["", QUEUE_SERVICE, "é" * 200])
def test_health_messages_match_protobuf(service: str) -> None:
    from tests.server_net._util import health_pb2

    request = health_pb2.HealthCheckRequest(service=service)
    assert HealthCheckRequest.FromString(request.SerializeToString()).service == service
    assert HealthCheckRequest(service).SerializeToString() == request.SerializeToString()
    for status in (0, SERVING, NOT_SERVING, 3):
        reply = health_pb2.HealthCheckResponse(status=status)
        assert HealthCheckResponse(status).SerializeToString() == reply.SerializeToString()
        assert HealthCheckResponse.FromString(reply.SerializeToString()).status == status


def test_health_messages_skip_unknown_fields_and_refuse_garbage() -> None:
    # field 2 varint, field 3 fixed64, field 4 bytes, field 5 fixed32, then field 1.
    extra = b"\x10\x96\x01" + b"\x19" + bytes(8) + b"\x22\x02ab" + b"\x2d" + bytes(4)
    assert HealthCheckRequest.FromString(extra + b"\x0a\x01x").service == "x"
    assert HealthCheckResponse.FromString(extra + b"\x08\x02").status == NOT_SERVING
    for garbage in (b"\x0a\x05ab", b"\x08", b"\x0b", b"\x19\x00"):
        with pytest.raises(ValueError):  # noqa: PT011 (several messages)
            HealthCheckRequest.FromString(garbage)


def test_health_garbage_request_is_internal(server: ServerThread) -> None:
    with pytest.raises(grpc.RpcError) as info:
        raw_unary(server.address, "/grpc.health.v1.Health/Check", b"\x0a\x05ab")
    assert info.value.code() is grpc.StatusCode.INTERNAL
    assert "failed to decode" in (info.value.details() or "")


# --------------------------------------------------------------------------- auth


@pytest.fixture(scope="module")
def keyed_server() -> Iterator[ServerThread]:
    config = ServerConfig(auth=AuthConfig(api_keys=(ApiKey("k1"), ApiKey("k2", name="second"))))
    with ServerThread(config) as running:
        yield running


async def test_no_keys_configured_ignores_the_header(server: ServerThread) -> None:
    async with sepp.connect(server.address, api_key="anything") as client:
        await client.server_info()


@pytest.mark.parametrize("key", ["k1", "k2"])
async def test_listed_keys_are_accepted(keyed_server: ServerThread, key: str, queue: str) -> None:
    async with sepp.connect(keyed_server.address, api_key=key) as client:
        await client.enqueue(_request(queue))


@pytest.mark.parametrize(("key", "message"), [(None, MISSING_KEY), ("k3", WRONG_KEY)])
async def test_missing_or_wrong_key_is_refused(
    keyed_server: ServerThread, key: str | None, message: str, queue: str
) -> None:
    assert MISSING_KEY == "missing API key; expected an `authorization: Bearer <key>` header"
    assert WRONG_KEY == "invalid API key"
    async with sepp.connect(keyed_server.address, api_key=key) as client:
        with pytest.raises(sepp.UnauthenticatedError) as info:
            await client.enqueue(_request(queue))
        assert info.value.status_message == message
        with pytest.raises(sepp.UnauthenticatedError):
            await client.reserve([queue], lease=1.0, wait=0.0)
        with pytest.raises(sepp.UnauthenticatedError):
            await client.server_info()


@pytest.mark.parametrize(
    ("header", "message"),
    [("bearer k1", MISSING_KEY), ("k1", MISSING_KEY), ("Bearer  k1", WRONG_KEY)],
)
def test_bearer_prefix_is_exact(keyed_server: ServerThread, header: str, message: str) -> None:
    method = "/sepp.v1.QueueService/GetServerInfo"
    assert raw_unary(keyed_server.address, method, b"", metadata=[("authorization", "Bearer k2")])
    with pytest.raises(grpc.RpcError) as info:
        raw_unary(keyed_server.address, method, b"", metadata=[("authorization", header)])
    assert info.value.code() is grpc.StatusCode.UNAUTHENTICATED
    assert info.value.details() == message


def test_undecodable_request(server: ServerThread, keyed_server: ServerThread) -> None:
    method = "/sepp.v1.QueueService/Reserve"
    garbage = b"\x0a\x02\xff\xfe"  # queues[0] is not UTF-8
    with pytest.raises(grpc.RpcError) as info:
        raw_unary(server.address, method, garbage)
    assert info.value.code() is grpc.StatusCode.INTERNAL
    assert (info.value.details() or "").startswith("failed to decode Protobuf message")
    # Authentication comes first, as in the real server's interceptor.
    with pytest.raises(grpc.RpcError) as info:
        raw_unary(keyed_server.address, method, garbage)
    assert info.value.code() is grpc.StatusCode.UNAUTHENTICATED


def test_health_needs_no_key(keyed_server: ServerThread) -> None:
    assert health_check(keyed_server.address, QUEUE_SERVICE) == SERVING


@pytest.mark.parametrize(("key", "message"), [(None, MISSING_KEY), ("k1", WRONG_KEY)])
async def test_empty_key_list_refuses_everything(key: str | None, message: str) -> None:
    with ServerThread(ServerConfig(auth=AuthConfig(api_keys=()))) as running:
        async with sepp.connect(running.address, api_key=key) as client:
            with pytest.raises(sepp.UnauthenticatedError) as info:
                await client.server_info()
            assert info.value.status_message == message


# --------------------------------------------------------------------------- TLS, limits


async def test_tls(tmp_path: Path, queue: str) -> None:
    tls = make_tls()
    cert, key = write_tls_files(tls, tmp_path)
    with ServerThread(tls_cert=cert, tls_key=key) as running:
        async with sepp.connect(running.address, tls_ca_cert=tls.ca_pem) as client:
            ack = await client.enqueue(_request(queue))
            (job,) = await client.reserve([queue], lease=5.0, wait=5.0)
            assert job.ctx.id == ack.job_id
        credentials = grpc.ssl_channel_credentials(root_certificates=tls.ca_pem)
        status = await anyio.to_thread.run_sync(
            lambda: health_check(running.address, "", credentials=credentials)
        )
        assert status == SERVING
        # A plaintext client cannot talk to a TLS server.
        with pytest.raises(sepp.ConnectError):
            async with sepp.connect(running.address, connect_timeout=2.0):
                pass


def test_tls_bad_files_name_the_key(tmp_path: Path) -> None:
    (tmp_path / "cert.pem").write_text("not a certificate")
    (tmp_path / "key.pem").write_text("not a key")
    server = ServerThread(tls_cert=tmp_path / "cert.pem", tls_key=tmp_path / "key.pem")
    with pytest.raises(ConfigError) as info:
        server.start()
    assert info.value.key == "server.tls_cert_path"


async def test_oversized_request_is_out_of_range(queue: str) -> None:
    config = ServerConfig(limits=LimitsConfig(max_message_bytes=2048, max_payload_bytes=1024))
    with ServerThread(config) as running:
        async with sepp.connect(running.address) as client:
            with pytest.raises(sepp.RequestTooLargeError) as info:
                await client.enqueue(_request(queue, b"z" * 4096))
            assert info.value.code == sepp.StatusCode.OUT_OF_RANGE
            assert info.value.limit == 2048
            assert "decoded message length too large" in (info.value.status_message or "")
            # The connection is still fine for calls under the limit.
            result = await client.enqueue_batch([_request(queue, b"z" * 1500)])
            assert isinstance(result[0], sepp.PayloadTooLarge)


# --------------------------------------------------------------------------- lifecycle


async def test_stop_answers_a_parked_reserve_at_once(queue: str) -> None:
    running = ServerThread(shutdown_grace=30.0)
    running.start()
    try:
        async with sepp.connect(running.address) as client:
            result: list[sepp.Job] | None = None

            async def park() -> None:
                nonlocal result
                result = await client.reserve([queue], lease=5.0, wait=30.0)

            async with anyio.create_task_group() as tg:
                tg.start_soon(park)
                await anyio.to_thread.run_sync(
                    lambda: poll(lambda: running.active_calls == 1, what="a parked reserve")
                )
                with anyio.fail_after(5):
                    await anyio.to_thread.run_sync(running.stop)
            assert result == []
    finally:
        running.stop()


async def test_restart_on_the_same_port() -> None:
    running = ServerThread()
    with running:
        port = running.port
    with running:
        assert running.port == port
        async with sepp.connect(running.address) as client:
            await client.server_info()


def test_port_in_use_is_an_os_error() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        with pytest.raises(OSError, match="in use"):
            ServerThread(port=taken.getsockname()[1]).start()


async def test_serve_reports_its_port_and_stops_on_cancel() -> None:
    # On the test's own backend: the server runs on asyncio and trio alike.
    async with anyio.create_task_group() as tg:
        port = await tg.start(lambda task_status: serve(port=0, task_status=task_status))
        async with sepp.connect(f"127.0.0.1:{port}") as client:
            assert (await client.server_info()).version == sepp.__version__
        tg.cancel_scope.cancel()
    with pytest.raises(sepp.ConnectError):
        async with sepp.connect(f"127.0.0.1:{port}", connect_timeout=1.0):
            pass


def test_engine_and_proto_types_line_up() -> None:
    # The adapter's table must name real engine methods and generated types.
    from sepp_anyio.server._network._service import _RPCS

    assert {rpc.name for rpc in _RPCS} == {
        "EnqueueBatch",
        "EnqueueAtomic",
        "Reserve",
        "Ack",
        "Nack",
        "Extend",
        "DrainDeadLetters",
        "GetServerInfo",
    }
    assert _RPCS[0].request_type is pb.EnqueueBatchRequest


async def test_network_server_over_a_running_engine(queue: str) -> None:
    # NetworkServer serves an engine the caller owns; engine shutdown turns health to
    # NOT_SERVING and makes reserves answer empty at once while the network stays up.
    async with Engine() as engine, NetworkServer(engine, port=0) as network:
        assert network.address == f"127.0.0.1:{network.port}"
        status = await anyio.to_thread.run_sync(lambda: health_check(network.address, ""))
        assert status == SERVING
        async with sepp.connect(network.address) as client:
            await client.enqueue(_request(queue))
            engine.shutdown()
            status = await anyio.to_thread.run_sync(lambda: health_check(network.address, ""))
            assert status == NOT_SERVING
            with anyio.fail_after(5):
                assert await client.reserve([queue], lease=5.0, wait=30.0) == []
            # Other RPCs keep working until the engine is left.
            assert (await client.server_info()).version == sepp.__version__


async def test_connections_are_served_on_the_backends_own_streams(
    anyio_backend: str, queue: str
) -> None:
    """Accepted connections run on the streams of ``sepp_anyio._io`` (what makes the
    server's reads and writes cheap), and stopping ends the accept waiting for the next."""
    from sepp_anyio._io import EagerStream
    from sepp_anyio._io._asyncio_stream import AsyncioStream
    from sepp_anyio._io._trio_stream import TrioStream

    async with Engine() as engine, NetworkServer(engine, port=0) as network:
        async with sepp.connect(network.address) as client:
            await client.enqueue(_request(queue))
            (connection,) = network.connections
            stream = connection._stream
            assert isinstance(stream, EagerStream)
            assert isinstance(stream, AsyncioStream) is (anyio_backend == "asyncio")
            assert isinstance(stream, TrioStream) is (anyio_backend == "trio")
            assert connection._fair_reads
        port = network.port
    # The listening socket is closed: a new connection is refused.
    with pytest.raises(ConnectionRefusedError), socket.create_connection(("127.0.0.1", port), 1):
        pass
