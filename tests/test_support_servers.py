"""The test servers of tests/support/servers.py, exercised with grpcio's (sync) client."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import grpc
import h2.events
import pytest
import trustme
from h2.settings import SettingCodes
from sepp.v1 import queue_pb2 as _queue_pb2
from sepp.v1 import queue_pb2_grpc as _queue_pb2_grpc

from tests.support.servers import (
    CallEvent,
    GrpcioTestServer,
    GrpclibTestServer,
    MiB,
    RawH2Server,
    checksum_id,
    goaway,
    grpc_status,
    http_status,
    make_tls,
    pattern_bytes,
    raw_grpc_call,
    silent_peer,
    status_details,
    str_headers,
)

# The generated protobuf modules have no type stubs.
queue_pb2: Any = _queue_pb2
queue_pb2_grpc: Any = _queue_pb2_grpc

TestServer = GrpclibTestServer | GrpcioTestServer

_CHANNEL_OPTIONS: list[tuple[str, Any]] = [
    ("grpc.max_receive_message_length", 64 * MiB),
    ("grpc.max_send_message_length", 64 * MiB),
    ("grpc.initial_reconnect_backoff_ms", 50),
    # grpcio also takes this as the time a connection attempt may take (until the server's
    # SETTINGS): at 50 ms, a loaded machine failed calls with "connection attempt timed out
    # before receiving SETTINGS frame". The pause between attempts is the backoff above.
    ("grpc.min_reconnect_backoff_ms", 10_000),
    ("grpc.max_reconnect_backoff_ms", 200),
    # One connection per channel, not one shared through grpcio's global subchannel pool.
    ("grpc.use_local_subchannel_pool", 1),
]


@pytest.fixture(params=[GrpclibTestServer, GrpcioTestServer], ids=["grpclib", "grpcio"])
def server_cls(request: pytest.FixtureRequest) -> type[TestServer]:
    cls: type[TestServer] = request.param
    return cls


@pytest.fixture
def server(server_cls: type[TestServer]) -> Iterator[TestServer]:
    with server_cls(max_message_size=64 * MiB) as srv:
        yield srv


@contextmanager
def stub_for(
    address: str, credentials: Any = None, options: Sequence[tuple[str, Any]] = ()
) -> Iterator[Any]:
    opts = [*_CHANNEL_OPTIONS, *options]
    if credentials is None:
        channel = grpc.insecure_channel(address, options=opts)
    else:
        channel = grpc.secure_channel(address, credentials, options=opts)
    with channel:
        yield queue_pb2_grpc.QueueServiceStub(channel)


def action(*actions: str) -> list[tuple[str, str]]:
    return [("x-test-action", a) for a in actions]


INFO = queue_pb2.GetServerInfoRequest()
ACK = queue_pb2.AckRequest(job_id="job-1")


# --------------------------------------------------------------------------- behaviour


def test_metadata_and_timeout_echo(server: TestServer) -> None:
    metadata = [("x-foo", "bar"), ("x-foo", "baz"), ("x-blob-bin", b"\x00\xff\x10")]
    with stub_for(server.address) as stub:
        reply = stub.GetServerInfo(INFO, metadata=metadata, timeout=5)
        no_deadline = stub.GetServerInfo(INFO)

    assert reply.server_version == f"{server.kind}-test"
    assert list(reply.allowed_encodings) == ["x-foo=bar", "x-foo=baz", "x-blob-bin=00ff10"]
    assert reply.supported_protocol_versions[0] == "v1"
    key, _, seconds = reply.supported_protocol_versions[1].partition("=")
    assert key == "timeout"
    assert 4.0 < float(seconds) <= 5.1
    assert list(no_deadline.supported_protocol_versions) == ["v1", "timeout=none"]

    event = server.wait_for(lambda e: e.method == "GetServerInfo" and e.timeout is not None)
    assert event.metadata == metadata
    assert event.user_agent is not None
    assert event.user_agent.startswith("grpc-python/")
    assert event.finished
    assert event.status == "OK"
    if server.kind == "grpclib":
        assert event.grpc_timeout is not None  # the raw header, e.g. "4999m" or "5S"
    else:
        assert event.grpc_timeout is None


@pytest.mark.parametrize(
    ("metadata", "message"),
    [
        (action("fail:NOT_FOUND:job not found"), "job not found"),
        (action("fail:NOT_FOUND:a:b 100%"), "a:b 100%"),
        ([("x-test-action-bin", "fail:NOT_FOUND:café ✓ 100%".encode())], "café ✓ 100%"),
    ],
)
def test_fail(server: TestServer, metadata: list[tuple[str, Any]], message: str) -> None:
    with stub_for(server.address) as stub, pytest.raises(grpc.RpcError) as info:
        stub.Ack(ACK, metadata=metadata)
    assert info.value.code() == grpc.StatusCode.NOT_FOUND
    assert info.value.details() == message
    event = server.wait_for(lambda e: e.finished)
    assert (event.status, event.message, event.cancelled) == ("NOT_FOUND", message, False)


def test_fail_is_trailers_only(server: TestServer) -> None:
    request = ACK.SerializeToString()
    failed = raw_grpc_call(server.address, "Ack", request, metadata=action("fail:ABORTED:no"))
    assert failed.trailers_only
    assert ("grpc-status", "10") in failed.headers[0]
    ok = raw_grpc_call(server.address, "Ack", request)
    assert not ok.trailers_only
    assert queue_pb2.AckResponse.FromString(ok.data[5:]).job_id == "job-1"
    assert ("grpc-status", "0") in ok.headers[-1]


def test_fail_details(server: TestServer) -> None:
    with stub_for(server.address) as stub, pytest.raises(grpc.RpcError) as info:
        stub.Ack(ACK, metadata=action("fail-details:FAILED_PRECONDITION:lease lost"))
    assert info.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert info.value.details() == "lease lost"
    trailing = dict(info.value.trailing_metadata())
    assert trailing["grpc-status-details-bin"] == status_details(9, "lease lost")


def test_trailers_after_data(server: TestServer) -> None:
    raw = raw_grpc_call(
        server.address,
        "Ack",
        ACK.SerializeToString(),
        metadata=action("trailers-after-data:RESOURCE_EXHAUSTED"),
    )
    assert len(raw.headers) == 2
    assert raw.data  # the message was sent...
    assert ("grpc-status", "8") in raw.headers[1]  # ...and then a non-OK status
    with stub_for(server.address) as stub, pytest.raises(grpc.RpcError) as info:
        stub.Ack(ACK, metadata=action("trailers-after-data:UNAVAILABLE:later"))
    assert info.value.code() == grpc.StatusCode.UNAVAILABLE
    assert info.value.details() == "later"


def test_bad_action_and_unimplemented(server: TestServer) -> None:
    with stub_for(server.address) as stub:
        with pytest.raises(grpc.RpcError) as info:
            stub.Ack(ACK, metadata=action("explode"))
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        with pytest.raises(grpc.RpcError) as info:
            stub.Nack(queue_pb2.NackRequest(job_id="x"))
        assert info.value.code() == grpc.StatusCode.UNIMPLEMENTED


def test_sleep_then_answer(server: TestServer) -> None:
    with stub_for(server.address) as stub:
        started = time.monotonic()
        assert stub.Ack(ACK, metadata=action("sleep:0.2"), timeout=5).job_id == "job-1"
        assert time.monotonic() - started >= 0.2


def test_client_cancel_is_observed(server: TestServer) -> None:
    with stub_for(server.address) as stub:
        future = stub.Ack.future(ACK, metadata=action("sleep:30"))
        server.wait_for(lambda e: e.method == "Ack")
        future.cancel()
        event = server.wait_for(lambda e: e.cancelled, timeout=5)
    assert event.cancel_reason == "client"
    assert event.status == "CANCELLED"
    assert event.finished


def test_deadline_is_observed(server: TestServer) -> None:
    with stub_for(server.address) as stub:
        stub.Ack(ACK)  # connected before the deadline starts: it covers the call alone
        with pytest.raises(grpc.RpcError) as info:
            stub.Ack(ACK, metadata=action("sleep:30"), timeout=0.5)
    assert info.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    event = server.wait_for(lambda e: e.cancelled, timeout=5)
    assert event.cancel_reason in ("client", "deadline")


def test_large_request_and_response(server: TestServer) -> None:
    data = bytes(range(251)) * (8 * MiB // 251 + 1)
    data = data[: 8 * MiB]
    jobs = [
        queue_pb2.EnqueueRequest(
            queue="q", job_type="t", payload=queue_pb2.Payload(data=data, encoding="bytes")
        ),
        queue_pb2.EnqueueRequest(queue="q", job_type="t"),
    ]
    with stub_for(server.address) as stub:
        enqueued = stub.EnqueueBatch(queue_pb2.EnqueueBatchRequest(jobs=jobs), timeout=10)
        reserved = stub.Reserve(queue_pb2.ReserveRequest(worker_id=str(8 * MiB)), timeout=10)
        small = stub.Reserve(queue_pb2.ReserveRequest(max_jobs=3), timeout=10)
    assert [r.success.job_id for r in enqueued.results] == [checksum_id(data), checksum_id(b"")]
    assert reserved.jobs[0].id == "big"
    assert reserved.jobs[0].payload.data == pattern_bytes(8 * MiB)
    assert small.jobs[0].payload.data == pattern_bytes(3 * 1024)


def test_many_concurrent_acks(server: TestServer) -> None:
    with stub_for(server.address) as stub:
        futures = [stub.Ack.future(queue_pb2.AckRequest(job_id=str(i))) for i in range(300)]
        assert [f.result(timeout=10).job_id for f in futures] == [str(i) for i in range(300)]
    assert len([e for e in server.events if e.method == "Ack"]) == 300


# --------------------------------------------------------------------------- lifecycle


def test_restart_on_same_port(server: TestServer) -> None:
    port = server.port
    with stub_for(server.address) as stub:
        assert stub.Ack(ACK, timeout=5).job_id == "job-1"
        server.restart()
        assert server.port == port
        assert server.running
        # The same channel reconnects to the restarted server.
        assert stub.Ack(ACK, timeout=5, wait_for_ready=True).job_id == "job-1"
    peers = {e.peer for e in server.events}
    assert len(peers) == 2


def test_stop_is_refused_connection(server_cls: type[TestServer]) -> None:
    srv = server_cls()
    srv.start()
    address = srv.address
    srv.stop()
    with stub_for(address) as stub, pytest.raises(grpc.RpcError) as info:
        stub.Ack(ACK, timeout=2)
    assert info.value.code() == grpc.StatusCode.UNAVAILABLE


def test_stop_with_grace_lets_calls_finish(server: TestServer) -> None:
    with stub_for(server.address) as stub:
        future = stub.Ack.future(ACK, metadata=action("sleep:0.3"), timeout=5)
        server.wait_for(lambda e: e.method == "Ack")
        server.stop(grace=5)
        assert future.result().job_id == "job-1"
    event = server.wait_for(lambda e: e.finished)
    assert event.status == "OK"


def test_stop_without_grace_cancels_calls(server: TestServer) -> None:
    with stub_for(server.address) as stub:
        future = stub.Ack.future(ACK, metadata=action("sleep:30"), timeout=10)
        server.wait_for(lambda e: e.method == "Ack")
        started = time.monotonic()
        server.stop()
        assert time.monotonic() - started < 2
        with pytest.raises(grpc.RpcError) as info:
            future.result()
    assert info.value.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED)
    event = server.wait_for(lambda e: e.cancelled)
    assert event.cancel_reason == "server"


def test_tls(server_cls: type[TestServer]) -> None:
    ca = trustme.CA()
    tls = make_tls(ca)
    credentials = grpc.ssl_channel_credentials(root_certificates=ca.cert_pem.bytes())
    with server_cls(tls=tls) as srv:
        with stub_for(srv.address, credentials) as stub:
            assert stub.Ack(ACK, timeout=5).job_id == "job-1"
        # Another CA is not trusted.
        other = grpc.ssl_channel_credentials(root_certificates=trustme.CA().cert_pem.bytes())
        with stub_for(srv.address, other) as stub, pytest.raises(grpc.RpcError) as info:
            stub.Ack(ACK, timeout=5)
        assert info.value.code() == grpc.StatusCode.UNAVAILABLE
        srv.restart()
        with stub_for(srv.address, credentials) as stub:
            assert stub.Ack(ACK, timeout=5).job_id == "job-1"


def test_max_concurrent_streams(server_cls: type[TestServer]) -> None:
    with server_cls(max_concurrent_streams=1) as srv, stub_for(srv.address) as stub:
        stub.Ack(ACK, timeout=5)  # connect: the client learns the limit from SETTINGS
        futures = [stub.Ack.future(ACK, metadata=action("sleep:0.1"), timeout=5) for _ in range(3)]
        for future in futures:
            assert future.result().job_id == "job-1"
        assert max(e.concurrent for e in srv.events) == 1


def test_goaway_action_grpclib() -> None:
    with GrpclibTestServer() as srv:
        raw = raw_grpc_call(srv.address, "Ack", ACK.SerializeToString(), linger=0.3)
        assert raw.goaway is None
        raw = raw_grpc_call(
            srv.address, "Ack", ACK.SerializeToString(), metadata=action("goaway"), linger=0.3
        )
        assert ("grpc-status", "0") in raw.headers[-1]
        assert raw.goaway is not None
        assert raw.goaway.last_stream_id == 1
        with stub_for(srv.address) as stub:
            assert stub.Ack(ACK, metadata=action("goaway"), timeout=5).job_id == "job-1"
            assert stub.Ack(ACK, timeout=5, wait_for_ready=True).job_id == "job-1"
        peers = [e.peer for e in srv.events[-2:]]
        assert peers[0] != peers[1]  # the client moved to a new connection


def test_events_wait_for_times_out(server: TestServer) -> None:
    started = time.monotonic()
    with pytest.raises(TimeoutError):
        server.wait_for(lambda e: False, timeout=0.1)
    assert time.monotonic() - started < 1


def test_wait_for_wakes_up_from_another_thread(server: TestServer) -> None:
    found: list[CallEvent] = []
    waiter = threading.Thread(target=lambda: found.append(server.wait_for(lambda e: e.finished)))
    waiter.start()
    with stub_for(server.address) as stub:
        stub.Ack(ACK, timeout=5)
    waiter.join(5)
    assert found
    assert found[0].method == "Ack"


# --------------------------------------------------------------------------- raw HTTP/2 server


def test_raw_http_503_is_unavailable() -> None:
    with RawH2Server(http_status(503)) as srv, stub_for(srv.address) as stub:
        with pytest.raises(grpc.RpcError) as info:
            stub.Ack(ACK, timeout=5)
        assert info.value.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.UNKNOWN)
        request = srv.wait_for(lambda e: isinstance(e.event, h2.events.RequestReceived))
    assert isinstance(request.event, h2.events.RequestReceived)
    assert request.event.headers is not None
    assert (":path", "/sepp.v1.QueueService/Ack") in str_headers(request.event.headers)


def test_raw_grpc_status() -> None:
    with RawH2Server(grpc_status(5, "gone ✓")) as srv, stub_for(srv.address) as stub:
        with pytest.raises(grpc.RpcError) as info:
            stub.Ack(ACK, timeout=5)
        assert info.value.code() == grpc.StatusCode.NOT_FOUND
        assert info.value.details() == "gone ✓"


def test_raw_silent_peer() -> None:
    with RawH2Server(silent_peer) as srv, stub_for(srv.address) as stub:
        with pytest.raises(grpc.RpcError) as info:
            stub.Ack(ACK, timeout=0.5)
        assert info.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
        srv.wait_for(lambda e: isinstance(e.event, h2.events.RequestReceived))
        assert srv.connections == 1


def test_raw_settings_and_goaway() -> None:
    settings = {SettingCodes.MAX_CONCURRENT_STREAMS: 1}
    with RawH2Server(goaway(last_stream_id=0), settings=settings) as srv:
        raw = raw_grpc_call(srv.address, "Ack", ACK.SerializeToString(), linger=0.2)
        assert raw.goaway is not None
        assert raw.goaway.last_stream_id == 0
        changed = [e for e in raw.events if isinstance(e, h2.events.RemoteSettingsChanged)]
        assert changed[0].changed_settings[SettingCodes.MAX_CONCURRENT_STREAMS].new_value == 1
    assert any(e.kind == "closed" for e in srv.events)
