"""What connecting reports: once, without crying wolf, and naming the likely fix.

* A failed ``connect()`` is raised as ``ConnectError``, not also logged.
* An API key over plaintext is warned about, except to a loopback address.
* A plaintext client to a TLS server, and a TLS client to a plaintext server, fail with a
  ``ConnectError`` saying which scheme (or ``tls=``) to use; against real TLS and
  plaintext servers (grpclib, grpcio's C core, and the reference server).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

import sepp_anyio
from sepp_anyio import ConnectError
from sepp_anyio._client._connect import _is_loopback
from sepp_anyio.server import ServerThread
from tests.support.servers import GrpcioTestServer, GrpclibTestServer, TLSMaterial, make_tls

pytestmark = pytest.mark.anyio


async def _call(client: sepp_anyio.Client) -> None:
    [ack] = await client.enqueue_batch([sepp_anyio.EnqueueRequest("q", "t")])
    assert isinstance(ack, sepp_anyio.EnqueueAck)


def _sepp_records(caplog: pytest.LogCaptureFixture, level: int) -> list[str]:
    return [
        record.getMessage()
        for record in caplog.records
        if record.name.startswith("sepp_anyio") and record.levelno >= level
    ]


# ------------------------------------------------------------------ reported once


async def test_a_failed_connect_is_raised_not_logged(caplog: pytest.LogCaptureFixture) -> None:
    """Regression: the failure was logged at ERROR and then raised, so a program that
    reports the error (the CLI does) showed it twice."""
    caplog.set_level(logging.DEBUG, logger="sepp_anyio")
    with GrpclibTestServer() as gone:
        target = gone.address
    with pytest.raises(ConnectError, match="could not connect to the sepp server"):
        async with sepp_anyio.connect(target):
            pytest.fail("connected to nothing")  # pragma: no cover
    assert _sepp_records(caplog, logging.WARNING) == []


# ------------------------------------------------------------------ plaintext key warning


def _plaintext_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [m for m in _sepp_records(caplog, logging.WARNING) if "without TLS" in m]


@pytest.fixture(scope="module")
def plain_grpclib() -> Iterator[GrpclibTestServer]:
    with GrpclibTestServer() as server:
        yield server


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost", "LOCALHOST"])
async def test_no_plaintext_key_warning_to_a_loopback_address(
    plain_grpclib: GrpclibTestServer, host: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="sepp_anyio")
    async with sepp_anyio.connect(f"{host}:{plain_grpclib.port}", api_key="k1") as client:
        await _call(client)
    assert _plaintext_warnings(caplog) == []


@pytest.mark.parametrize("host", ["127.8.9.10", "[::1]"])
async def test_no_plaintext_key_warning_to_any_loopback_address(
    plain_grpclib: GrpclibTestServer, host: str, caplog: pytest.LogCaptureFixture
) -> None:
    # Nothing listens there (the test server binds 127.0.0.1 only): the warning would
    # have come before the attempt.
    caplog.set_level(logging.INFO, logger="sepp_anyio")
    with pytest.raises(ConnectError):
        async with sepp_anyio.connect(f"{host}:{plain_grpclib.port}", api_key="k1"):
            pytest.fail("nothing listens there")  # pragma: no cover
    assert _plaintext_warnings(caplog) == []


async def test_a_plaintext_key_warning_to_an_address_that_is_not_loopback(
    plain_grpclib: GrpclibTestServer, caplog: pytest.LogCaptureFixture
) -> None:
    # 0.0.0.0 reaches this machine (so the test stays on it), but it is not a loopback
    # address by name: what a client cannot tell apart from a remote host.
    caplog.set_level(logging.INFO, logger="sepp_anyio")
    target = f"0.0.0.0:{plain_grpclib.port}"
    async with sepp_anyio.connect(target, api_key="k1") as client:
        await _call(client)
    assert _plaintext_warnings(caplog) == [
        f"API key configured without TLS; it is sent in plaintext to {target}"
    ]


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("localhost", True),
        ("LocalHost.", True),
        ("api.localhost", True),
        ("127.0.0.1", True),
        ("127.255.255.254", True),
        ("::1", True),
        ("::ffff:127.0.0.1", True),
        ("fe80::1%lo", False),
        ("0.0.0.0", False),
        ("128.0.0.1", False),
        ("10.0.0.1", False),
        ("::", False),
        ("localhost.example.com", False),
        ("mylocalhost", False),
        ("sepp.internal", False),
    ],
)
def test_what_counts_as_loopback(host: str, loopback: bool) -> None:
    assert _is_loopback(host) is loopback


# ------------------------------------------------------------------ TLS on one side only


@pytest.fixture(scope="module")
def tls() -> TLSMaterial:
    return make_tls()


def _reference_server(tls: TLSMaterial | None, tmp: Path) -> ServerThread:
    if tls is None:
        return ServerThread()
    cert, key = tmp / "cert.pem", tmp / "key.pem"
    cert.write_bytes(tls.cert_chain_pem)
    key.write_bytes(tls.private_key_pem)
    return ServerThread(tls_cert=cert, tls_key=key)


@pytest.fixture(scope="module", params=["grpclib", "grpcio", "reference"])
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(scope="module")
def tls_server(
    kind: str, tls: TLSMaterial, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Any]:
    server: Any
    if kind == "grpclib":
        server = GrpclibTestServer(tls=tls)
    elif kind == "grpcio":
        server = GrpcioTestServer(tls=tls)
    else:
        server = _reference_server(tls, tmp_path_factory.mktemp("tls"))
    with server:
        yield server


@pytest.fixture(scope="module")
def plain_server(kind: str) -> Iterator[Any]:
    server: Any
    if kind == "grpclib":
        server = GrpclibTestServer()
    elif kind == "grpcio":
        server = GrpcioTestServer()
    else:
        server = _reference_server(None, Path())
    with server:
        yield server


async def test_plaintext_to_a_tls_server_says_to_use_https(tls_server: Any) -> None:
    with anyio.fail_after(10), pytest.raises(ConnectError) as caught:
        async with sepp_anyio.connect(tls_server.address, connect_timeout=5):
            pytest.fail("plaintext to a TLS server")  # pragma: no cover
    assert f"use https://{tls_server.address} or tls=True" in str(caught.value)


async def test_tls_to_a_plaintext_server_says_to_use_http(
    plain_server: Any, tls: TLSMaterial
) -> None:
    with anyio.fail_after(10), pytest.raises(ConnectError) as caught:
        async with sepp_anyio.connect(
            f"https://{plain_server.address}", tls_ca_cert=tls.ca_pem, connect_timeout=5
        ):
            pytest.fail("TLS to a plaintext server")  # pragma: no cover
    message = str(caught.value)
    assert f"the server does not speak TLS; use http://{plain_server.address} or tls=False" in (
        message
    )


async def test_both_sides_agreeing_connects(
    tls_server: Any, plain_server: Any, tls: TLSMaterial
) -> None:
    async with sepp_anyio.connect(f"https://{tls_server.address}", tls_ca_cert=tls.ca_pem) as c:
        await _call(c)
    async with sepp_anyio.connect(f"http://{plain_server.address}") as c:
        await _call(c)


def _answer_with_a_tls_alert(listener: Any, stop: threading.Event) -> None:
    """A peer that answers anything with a TLS alert record (protocol_version), as a TLS
    server may to bytes that are not a ClientHello, then closes."""
    listener.settimeout(0.05)
    while not stop.is_set():
        try:
            sock, _ = listener.accept()
        except TimeoutError:
            continue
        with sock:
            sock.settimeout(5)
            sock.recv(1024)
            sock.sendall(bytes([21, 3, 3, 0, 2, 2, 70]))


async def test_plaintext_to_a_peer_answering_with_tls_says_it_speaks_tls() -> None:
    import socket

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    stop = threading.Event()
    thread = threading.Thread(target=_answer_with_a_tls_alert, args=(listener, stop))
    thread.start()
    address = f"127.0.0.1:{listener.getsockname()[1]}"
    try:
        with anyio.fail_after(10), pytest.raises(ConnectError) as caught:
            async with sepp_anyio.connect(address, connect_timeout=5):
                pytest.fail("connected to a TLS alert")  # pragma: no cover
    finally:
        stop.set()
        await anyio.to_thread.run_sync(thread.join)
        listener.close()
    assert f"the server speaks TLS; use https://{address} or tls=True" in str(caught.value)
