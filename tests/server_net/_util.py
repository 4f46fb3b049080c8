"""Helpers shared by the network-server tests."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc
from grpclib.health.v1 import health_pb2 as _health_pb2

from tests.support.servers import TLSMaterial

# The generated protobuf module has no type stubs.
health_pb2: Any = _health_pb2

SERVING = 1
NOT_SERVING = 2


def poll(condition: Callable[[], bool], *, timeout: float = 10.0, what: str = "condition") -> None:
    """Block until ``condition()`` is true; fail after ``timeout`` seconds.

    For conditions that no event reports (a counter in another thread); the interval is
    short and the bound explicit.
    """
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.005)


def write_tls_files(tls: TLSMaterial, directory: Path) -> tuple[Path, Path]:
    """The server certificate chain and key as PEM files: ``(cert, key)``."""
    cert = directory / "server.pem"
    key = directory / "server.key"
    cert.write_bytes(tls.cert_chain_pem)
    key.write_bytes(tls.private_key_pem)
    return cert, key


def health_check(
    address: str,
    service: str,
    *,
    credentials: grpc.ChannelCredentials | None = None,
) -> int:
    """``grpc.health.v1.Health/Check`` with grpcio (protobuf-encoded, independent of ours).

    Returns the serving status; a failed call raises ``grpc.RpcError``.
    """
    if credentials is None:
        channel = grpc.insecure_channel(address)
    else:
        channel = grpc.secure_channel(
            address, credentials, options=[("grpc.ssl_target_name_override", "localhost")]
        )
    with channel:
        check = channel.unary_unary(
            "/grpc.health.v1.Health/Check",
            request_serializer=health_pb2.HealthCheckRequest.SerializeToString,
            response_deserializer=health_pb2.HealthCheckResponse.FromString,
        )
        reply = check(health_pb2.HealthCheckRequest(service=service), timeout=10)
        return int(reply.status)


def raw_unary(
    address: str,
    method: str,
    request: bytes,
    *,
    metadata: list[tuple[str, str]] | None = None,
) -> bytes:
    """A grpcio unary call with raw bytes in and out (for headers our client won't send)."""
    with grpc.insecure_channel(address) as channel:
        call = channel.unary_unary(
            method, request_serializer=lambda b: b, response_deserializer=lambda b: b
        )
        reply: bytes = call(request, timeout=10, metadata=metadata)
        return reply
