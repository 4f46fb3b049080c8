"""``sepp_anyio.connect`` over real HTTP/2 against grpclib and grpcio servers, both backends.

Target forms and TLS, eager connection and ConnectError, the API key (its header, its
validation before any I/O, the plaintext warning), deadlines on the wire and locally, the
retry policy over the real transport, and the receive size limit.
"""

from __future__ import annotations

import logging
import ssl
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import anyio
import pytest
import trustme

import sepp_anyio
from sepp_anyio import (
    ConnectError,
    EnqueueAck,
    EnqueueRequest,
    InvalidApiKeyError,
    JobCtx,
    OverloadedError,
    Payload,
    RetryPolicy,
    StatusCode,
    TransportError,
)
from sepp_anyio._proto.sepp import v1 as pb
from tests.support.servers import (
    CallEvent,
    GrpcioTestServer,
    GrpclibTestServer,
    ScriptedGrpclibServer,
    TLSMaterial,
    checksum_id,
    make_tls,
)

pytestmark = pytest.mark.anyio

Server = GrpclibTestServer | GrpcioTestServer
DATA = Payload(b"hello", "application/octet-stream")
CTX = JobCtx(
    id="0b1c4a8e-7d2c-4f3e-9a61-3c5b2d1e0f9a",
    queue="q",
    job_type="t",
    priority=0,
    attempt=3,
    max_attempts=5,
    enqueued_at=datetime(2026, 1, 1, tzinfo=UTC),
    scheduled_at=None,
    lease_expires_at=datetime(2026, 1, 1, tzinfo=UTC),
    worker_id="w-7",
)


def _server(kind: str, **kwargs: Any) -> Server:
    return GrpclibTestServer(**kwargs) if kind == "grpclib" else GrpcioTestServer(**kwargs)


@pytest.fixture(scope="module")
def tls() -> TLSMaterial:
    return make_tls()


@pytest.fixture(scope="module", params=["grpclib", "grpcio"])
def plain_server(request: pytest.FixtureRequest) -> Iterator[Server]:
    with _server(request.param) as server:
        yield server


@pytest.fixture(scope="module", params=["grpclib", "grpcio"])
def tls_server(request: pytest.FixtureRequest, tls: TLSMaterial) -> Iterator[Server]:
    with _server(request.param, tls=tls) as server:
        yield server


@pytest.fixture
def server(plain_server: Server) -> Server:
    plain_server.clear_events()
    return plain_server


@pytest.fixture(scope="module")
def shared_scripted() -> Iterator[ScriptedGrpclibServer]:
    with ScriptedGrpclibServer() as server:
        yield server


@pytest.fixture
def scripted(shared_scripted: ScriptedGrpclibServer) -> ScriptedGrpclibServer:
    shared_scripted.script()
    return shared_scripted


async def enqueue_works(client: sepp_anyio.Client) -> None:
    ack = await client.enqueue(EnqueueRequest("q", "t", payload=DATA))
    assert ack == EnqueueAck(checksum_id(DATA.data))


async def wait_for_call(server: Server, method: str) -> CallEvent:
    event: CallEvent = await anyio.to_thread.run_sync(
        server.wait_for, lambda e: e.method == method and e.finished
    )
    return event


# ------------------------------------------------------------------------------ target forms


@pytest.mark.parametrize("form", ["{addr}", "http://{addr}", "http://{addr}/", "HTTP://{addr}"])
async def test_plaintext_target_forms(server: Server, form: str) -> None:
    async with sepp_anyio.connect(form.format(addr=server.address)) as client:
        await enqueue_works(client)
    assert [e.method for e in server.events] == ["EnqueueBatch"]


def test_the_port_defaults_to_50051() -> None:
    connector = sepp_anyio.connect("127.0.0.1")
    assert connector._address == "127.0.0.1:50051"


@pytest.mark.parametrize("ca_form", ["bytes", "str"])
async def test_an_https_target_turns_tls_on(
    tls_server: Server, tls: TLSMaterial, ca_form: str
) -> None:
    ca = tls.ca_pem if ca_form == "bytes" else tls.ca_pem.decode()
    async with sepp_anyio.connect(f"https://{tls_server.address}", tls_ca_cert=ca) as client:
        await enqueue_works(client)


@pytest.mark.parametrize("how", ["tls=True", "ca_only", "context"])
async def test_tls_on_a_bare_target(tls_server: Server, tls: TLSMaterial, how: str) -> None:
    table: dict[str, dict[str, Any]] = {
        "tls=True": {"tls": True, "tls_ca_cert": tls.ca_pem},
        "ca_only": {"tls_ca_cert": tls.ca_pem},  # a CA alone implies TLS
        "context": {"tls": tls.client_ssl_context()},
    }
    options = table[how]
    async with sepp_anyio.connect(tls_server.address, **options) as client:
        await enqueue_works(client)


async def test_tls_server_name_overrides_the_name_checked_in_the_certificate() -> None:
    ca = trustme.CA()
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("sepp.internal").configure_cert(context)
    context.set_alpn_protocols(["h2"])
    ca_pem = ca.cert_pem.bytes()
    with GrpclibTestServer(tls=context) as server:
        async with sepp_anyio.connect(
            f"https://{server.address}", tls_ca_cert=ca_pem, tls_server_name="sepp.internal"
        ) as client:
            await enqueue_works(client)
        with pytest.raises(ConnectError) as caught:
            async with sepp_anyio.connect(f"https://{server.address}", tls_ca_cert=ca_pem):
                pytest.fail("connected with a certificate for another name")
    assert "TLS handshake" in caught.value.reason


async def test_https_with_an_untrusted_certificate_fails_to_connect(tls_server: Server) -> None:
    with pytest.raises(ConnectError) as caught:
        async with sepp_anyio.connect(f"https://{tls_server.address}"):
            pytest.fail("connected to an untrusted server")  # system roots lack the test CA
    assert "certificate verify failed" in caught.value.reason


async def test_https_to_a_plaintext_server_fails_to_connect(server: Server) -> None:
    with pytest.raises(ConnectError):
        async with sepp_anyio.connect(f"https://{server.address}", connect_timeout=2):
            pytest.fail("TLS to a plaintext server")


async def test_plaintext_to_a_tls_server_fails_to_connect(tls_server: Server) -> None:
    with pytest.raises(ConnectError):
        async with sepp_anyio.connect(tls_server.address, connect_timeout=2):
            pytest.fail("plaintext to a TLS server")


@pytest.mark.parametrize(
    ("target", "options", "match"),
    [
        ("ftp://127.0.0.1:1", {}, "unsupported scheme"),
        ("127.0.0.1:1/path", {}, "a path is not allowed"),
        ("127.0.0.1:99999", {}, "outside 1-65535"),
        (":50051", {}, "the host is empty"),
        ("https://127.0.0.1:1", {"tls": False}, "contradicts an https:// target"),
        ("127.0.0.1:1", {"tls": False, "tls_ca_cert": b"x"}, "need TLS"),
        ("127.0.0.1:1", {"connect_timeout": 0}, "connect_timeout"),
        ("127.0.0.1:1", {"rpc_timeout": -1}, "rpc_timeout"),
    ],
)
def test_bad_targets_and_options_are_refused_before_any_io(
    target: str, options: dict[str, Any], match: str
) -> None:
    with pytest.raises(ValueError, match=match):
        sepp_anyio.connect(target, **options)


# ------------------------------------------------------------------------------ eager connect


async def test_connect_fails_eagerly_with_connect_error_when_nothing_listens() -> None:
    with GrpclibTestServer() as gone:
        target = f"http://{gone.address}"
    body_ran = False
    with pytest.raises(ConnectError) as caught:
        async with sepp_anyio.connect(target):
            body_ran = True
    assert not body_ran
    assert caught.value.addr == target
    assert "cannot connect" in caught.value.reason
    assert caught.value.reason in str(caught.value)
    assert isinstance(caught.value, sepp_anyio.ClientError)


async def test_connect_is_bounded_by_connect_timeout() -> None:
    # A listener that accepts TCP but never speaks HTTP/2 (no SETTINGS).
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1")
    async with listener:
        port = listener.extra(anyio.abc.SocketAttribute.local_port)
        start = anyio.current_time()
        with anyio.fail_after(10), pytest.raises(ConnectError) as caught:
            async with sepp_anyio.connect(f"127.0.0.1:{port}", connect_timeout=0.25):
                pytest.fail("connected to a silent peer")
        elapsed = anyio.current_time() - start
    assert "timed out after 0.25s" in caught.value.reason
    assert 0.2 <= elapsed < 5


async def test_the_connection_is_made_once_and_shared_by_every_call(server: Server) -> None:
    async with sepp_anyio.connect(server.address) as client:
        async with anyio.create_task_group() as tg:
            for _ in range(5):
                tg.start_soon(enqueue_works, client)
        await client.ack(CTX)
    assert len({event.peer for event in server.events}) == 1
    assert len(server.events) == 6


# ------------------------------------------------------------------------------ API key


async def test_the_api_key_is_sent_as_a_bearer_header_on_every_call(server: Server) -> None:
    async with sepp_anyio.connect(server.address, api_key="s3cret-k3y") as client:
        await enqueue_works(client)
        await client.ack(CTX)
        assert await client.reserve(["q"], lease=30, wait=0, max_jobs=1) == []
    assert len(server.events) == 3
    for event in server.events:
        assert ("authorization", "Bearer s3cret-k3y") in event.metadata


async def test_without_an_api_key_no_authorization_header_is_sent(server: Server) -> None:
    async with sepp_anyio.connect(server.address) as client:
        await enqueue_works(client)
    assert all(key != "authorization" for key, _ in server.events[0].metadata)


@pytest.mark.parametrize(
    ("key", "reason"),
    [
        ("abc\r\ndef", "line break"),
        ("abc\ndef", "line break"),
        ("abc\rdef", "line break"),
        ("ключ", "non-ASCII"),
        ("caf\xe9", "non-ASCII"),
        ("", "empty"),
        ("two words", "spaces or control characters"),
        ("tab\there", "spaces or control characters"),
        ("nul\x00", "spaces or control characters"),
    ],
)
def test_an_unusable_api_key_is_refused_before_any_io(key: str, reason: str) -> None:
    # connect() is synchronous: raising here means nothing was sent anywhere.
    with pytest.raises(InvalidApiKeyError, match=reason) as caught:
        sepp_anyio.connect("127.0.0.1:1", api_key=key)
    assert isinstance(caught.value, ValueError)
    assert isinstance(caught.value, sepp_anyio.ClientError)
    if key:
        assert key not in str(caught.value)


def test_a_non_string_api_key_is_a_type_error() -> None:
    with pytest.raises(TypeError, match="api_key must be a str"):
        sepp_anyio.connect("127.0.0.1:1", api_key=b"bytes")  # type: ignore[arg-type]


def _plaintext_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        record.getMessage()
        for record in caplog.records
        if record.name == "sepp_anyio"
        and record.levelno == logging.WARNING
        and "without TLS" in record.getMessage()
    ]


async def test_an_api_key_over_plaintext_logs_a_warning(
    server: Server, caplog: pytest.LogCaptureFixture
) -> None:
    # Not to a loopback address (no warning there, test_connect_messages.py): 0.0.0.0
    # reaches this machine but is not loopback by name.
    caplog.set_level(logging.INFO, logger="sepp_anyio")
    address = f"0.0.0.0:{server.port}"
    async with sepp_anyio.connect(f"http://{address}", api_key="k1") as client:
        await enqueue_works(client)
    [warning] = _plaintext_warnings(caplog)
    assert warning == f"API key configured without TLS; it is sent in plaintext to {address}"
    assert "k1" not in caplog.text


async def test_no_plaintext_warning_with_tls_or_without_a_key(
    server: Server, tls_server: Server, tls: TLSMaterial, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="sepp_anyio")
    target = f"https://{tls_server.address}"
    async with sepp_anyio.connect(target, api_key="k1", tls_ca_cert=tls.ca_pem) as client:
        await enqueue_works(client)
    async with sepp_anyio.connect(server.address) as client:
        await enqueue_works(client)
    assert _plaintext_warnings(caplog) == []
    assert any("connected to sepp server" in r.getMessage() for r in caplog.records)


# ------------------------------------------------------------------------------ deadlines


async def test_rpc_timeout_is_sent_as_the_deadline_of_every_call_but_reserve(
    server: Server,
) -> None:
    async with sepp_anyio.connect(server.address, rpc_timeout=7.5) as client:
        await enqueue_works(client)
        await client.ack(CTX)
        await client.reserve(["q"], lease=30, wait=2, max_jobs=1)
    timeouts = {event.method: event.timeout for event in server.events}
    assert timeouts["EnqueueBatch"] == pytest.approx(7.5, abs=0.5)
    assert timeouts["Ack"] == pytest.approx(7.5, abs=0.5)
    # The reserve's deadline is its wait plus 10 s of slack, whatever rpc_timeout is.
    assert timeouts["Reserve"] == pytest.approx(12.0, abs=0.5)


async def test_an_expired_rpc_timeout_is_deadline_exceeded_and_resets_the_call(
    scripted: ScriptedGrpclibServer,
) -> None:
    scripted.script(hang_first={"Ack": 1})
    async with sepp_anyio.connect(scripted.address, rpc_timeout=0.25) as client:
        with anyio.fail_after(10), pytest.raises(TransportError) as caught:
            await client.ack(CTX)
        event = await wait_for_call(scripted, "Ack")
        await client.ack(CTX)  # the shared connection survived
    assert caught.value.code is StatusCode.DEADLINE_EXCEEDED
    assert event.cancelled


async def test_a_local_deadline_expiry_is_retried_over_the_network(
    scripted: ScriptedGrpclibServer,
) -> None:
    scripted.script(hang_first={"Ack": 1})
    policy = RetryPolicy(max_attempts=2, initial_backoff=0)
    async with sepp_anyio.connect(scripted.address, rpc_timeout=0.25, retry=policy) as client:
        with anyio.fail_after(10):
            await client.ack(CTX)
    assert scripted.calls("Ack") == 2


async def test_an_ambient_deadline_is_not_converted(scripted: ScriptedGrpclibServer) -> None:
    scripted.script(hang_first={"Ack": 1})
    async with sepp_anyio.connect(scripted.address) as client:
        with pytest.raises(TimeoutError), anyio.fail_after(0.25):
            await client.ack(CTX)
        event = await wait_for_call(scripted, "Ack")
    assert event.cancelled
    assert event.timeout is not None and event.timeout <= 0.25


# ------------------------------------------------------------------------------ retries


@pytest.mark.parametrize(
    ("code", "attempts"),
    [
        ("UNAVAILABLE", 3),
        ("DEADLINE_EXCEEDED", 3),
        ("ABORTED", 3),
        ("RESOURCE_EXHAUSTED", 3),
        ("INVALID_ARGUMENT", 1),
        ("UNAUTHENTICATED", 1),
        ("INTERNAL", 1),
        ("CANCELLED", 1),
    ],
)
async def test_retries_over_the_network_are_counted_by_the_server(
    scripted: ScriptedGrpclibServer, code: str, attempts: int
) -> None:
    scripted.script(fail_first={"Ack": (2, code)})
    policy = RetryPolicy(max_attempts=5, initial_backoff=0)
    async with sepp_anyio.connect(scripted.address, retry=policy) as client:
        if attempts == 3:
            await client.ack(CTX)
        else:
            with pytest.raises(sepp_anyio.SeppError) as caught:
                await client.ack(CTX)
            assert caught.value.code is StatusCode[code]
    assert scripted.calls("Ack") == attempts


@pytest.mark.parametrize(
    ("code", "keyed", "attempts"),
    [
        ("UNAVAILABLE", False, 2),
        ("RESOURCE_EXHAUSTED", False, 2),
        ("DEADLINE_EXCEEDED", False, 1),
        ("ABORTED", False, 1),
        ("DEADLINE_EXCEEDED", True, 2),
        ("ABORTED", True, 2),
    ],
)
async def test_the_keyless_enqueue_rule_over_the_network(
    scripted: ScriptedGrpclibServer, code: str, keyed: bool, attempts: int
) -> None:
    scripted.script(fail_first={"EnqueueBatch": (1, code)})
    policy = RetryPolicy(max_attempts=5, initial_backoff=0)
    request = EnqueueRequest("q", "t", payload=DATA, idempotency_key="k" if keyed else None)
    async with sepp_anyio.connect(scripted.address, retry=policy) as client:
        if attempts == 2:
            await client.enqueue(request)
        else:
            with pytest.raises(TransportError):
                await client.enqueue(request)
    assert scripted.calls("EnqueueBatch") == attempts


@pytest.mark.parametrize("method", ["Reserve", "DrainDeadLetters"])
async def test_reserve_and_drain_are_never_retried_over_the_network(
    scripted: ScriptedGrpclibServer, method: str
) -> None:
    scripted.script(fail_first={method: (1, "UNAVAILABLE")})
    policy = RetryPolicy(max_attempts=5, initial_backoff=0)
    async with sepp_anyio.connect(scripted.address, retry=policy) as client:
        call = (
            client.reserve(["q"], lease=30, wait=0)
            if method == "Reserve"
            else client.drain_dead_letters(max=3)
        )
        with pytest.raises(TransportError):
            await call
    assert scripted.calls(method) == 1


# ------------------------------------------------------------------------------ message size


async def test_a_reply_over_max_receive_message_bytes_is_an_overloaded_error(
    plain_server: Server,
) -> None:
    # The test servers' Reserve answers with a payload of int(worker_id) bytes.
    limit = 1 << 20
    async with sepp_anyio.connect(plain_server.address, max_receive_message_bytes=limit) as client:
        assert await client.reserve(["q"], lease=30, wait=0, worker_id=str(limit - 64)) == []
        with pytest.raises(OverloadedError) as caught:
            await client.reserve(["q"], lease=30, wait=0, worker_id=str(2 * limit))
        assert await client.reserve(["q"], lease=30, wait=0, worker_id="10") == []
    assert caught.value.code is StatusCode.RESOURCE_EXHAUSTED
    assert f"exceeds max_receive_message_bytes={limit}" in str(caught.value)


async def test_a_small_reply_over_the_receive_limit_is_an_overloaded_error(
    plain_server: Server,
) -> None:
    async with sepp_anyio.connect(plain_server.address, max_receive_message_bytes=4096) as client:
        with pytest.raises(OverloadedError):
            await client.reserve(["q"], lease=30, wait=0, worker_id="10000")


async def test_the_default_receive_limit_is_above_grpcs_4_mib(
    scripted: ScriptedGrpclibServer,
) -> None:
    big = pb.Payload(data=b"x" * (6 << 20), encoding="application/octet-stream")
    scripted.script(
        replies={
            "Reserve": pb.ReserveResponse(
                jobs=[
                    pb.Job(
                        id="j",
                        job_type="t",
                        payload=big,
                        enqueued_at=datetime(2026, 1, 1, tzinfo=UTC),
                        attempt=1,
                        lease_expires_at=datetime(2026, 1, 1, tzinfo=UTC),
                    )
                ]
            )
        }
    )
    async with sepp_anyio.connect(scripted.address) as client:
        [job] = await client.reserve(["q"], lease=30, wait=0)
    assert job.payload is not None and len(job.payload.data) == 6 << 20
