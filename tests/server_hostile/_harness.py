"""Hostile HTTP/2 clients against the reference server, on loopback.

* :func:`hostile_server`: an engine and a :class:`NetworkServer` in the test's own event
  loop (asyncio or trio), with ``[server]`` settings overridden per test (a defence
  switched off by setting it huge);
* :class:`Attacker`: a raw TCP peer sending hand-built frames (``tests/http2/_support``'s
  scripted :class:`Peer`: hyperframe and hpack), reading the server's frames back;
* :func:`canary`: our client on a second connection, which must keep being served.

Every loop is bounded by a frame count and every wait by a deadline.
"""

from __future__ import annotations

import dataclasses
import socket
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import anyio.abc
from hyperframe.frame import Frame, GoAwayFrame

import sepp_anyio as sepp
from sepp_anyio.server import ApiKey, AuthConfig, Engine, NetworkServer, ServerConfig
from sepp_anyio.server._config._sections import ServerSection
from tests.http2._support import PREFACE, Peer

__all__ = [
    "CANARY_CALLS",
    "CANARY_MAX_LATENCY",
    "GRPC_REQUEST",
    "Attacker",
    "canary",
    "decode_headers",
    "hostile_server",
]

#: The canary's calls, and the slowest any of them may be (seconds; generous, the CPU is
#: shared with other test runs).
CANARY_CALLS = 20
CANARY_MAX_LATENCY = 2.0


def decode_headers(peer: Peer, block: bytes) -> dict[str, str]:
    """A header block the server sent, decoded with the peer's HPACK state."""
    return {str(name): str(value) for name, value in peer.decoder.decode(block)}


def GRPC_REQUEST(path: str = "/sepp.v1.QueueService/GetServerInfo") -> list[tuple[bytes, bytes]]:
    return [
        (b":method", b"POST"),
        (b":scheme", b"http"),
        (b":path", path.encode()),
        (b":authority", b"localhost"),
        (b"content-type", b"application/grpc"),
        (b"te", b"trailers"),
    ]


@asynccontextmanager
async def hostile_server(**server: Any) -> AsyncIterator[NetworkServer]:
    """A server with these ``[server]`` keys (the rest default); ``api_keys`` (a tuple of
    strings) turns on authentication."""
    api_keys = server.pop("api_keys", None)
    auth = AuthConfig(api_keys=None if api_keys is None else tuple(ApiKey(k) for k in api_keys))
    config = ServerConfig(server=dataclasses.replace(ServerSection(), **server), auth=auth)
    async with Engine(config) as engine, NetworkServer(engine, port=0, shutdown_grace=1.0) as net:
        yield net


class Attacker:
    """A raw HTTP/2 client on its own TCP connection."""

    def __init__(self, stream: anyio.abc.SocketStream) -> None:
        self.stream = stream
        self.peer = Peer()
        self._buffer = bytearray()
        self.frames: list[Frame] = []
        self.eof = False

    @classmethod
    @asynccontextmanager
    async def connect(
        cls, port: int, *, handshake: bool = True, rcvbuf: int | None = None
    ) -> AsyncIterator[Attacker]:
        stream = await anyio.connect_tcp("127.0.0.1", port)
        if rcvbuf is not None:
            sock = stream.extra(anyio.abc.SocketAttribute.raw_socket)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        async with stream:
            attacker = cls(stream)
            if handshake:
                await attacker.send(PREFACE + Peer.settings() + Peer.settings(ack=True))
            yield attacker

    async def send(self, data: bytes) -> bool:
        """Send; False if the server closed the connection."""
        try:
            await self.stream.send(data)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            return False
        return True

    async def read(self, seconds: float) -> bool:
        """Read what arrives within ``seconds`` once; False at EOF."""
        with anyio.move_on_after(seconds):
            try:
                data = await self.stream.receive(1 << 16)
            except (anyio.EndOfStream, anyio.BrokenResourceError, OSError):
                self.eof = True
                return False
            self._buffer += data
            self._parse()
        return True

    async def read_until_goaway(self, seconds: float = 10.0) -> GoAwayFrame | None:
        """Read until a GOAWAY with an error code, or EOF, or ``seconds`` have passed."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            goaway = self.error_goaway()
            if goaway is not None:
                return goaway
            if not await self.read(deadline - time.monotonic()):
                return self.error_goaway()
        return self.error_goaway()

    def error_goaway(self) -> GoAwayFrame | None:
        for frame in self.frames:
            if isinstance(frame, GoAwayFrame) and frame.error_code != 0:
                return frame
        return None

    def _parse(self) -> None:
        buffer = self._buffer
        while len(buffer) >= 9:
            length = int.from_bytes(buffer[:3], "big")
            if len(buffer) < 9 + length:
                return
            frame, _ = Frame.parse_frame_header(memoryview(bytes(buffer[:9])))
            frame.parse_body(memoryview(bytes(buffer[9 : 9 + length])))
            self.frames.append(frame)
            del buffer[: 9 + length]


async def canary(address: str, *, calls: int = CANARY_CALLS) -> float:
    """``calls`` GetServerInfo calls on a fresh connection; the slowest one's latency."""
    slowest = 0.0
    async with sepp.connect(address, connect_timeout=CANARY_MAX_LATENCY) as client:
        for _ in range(calls):
            started = time.monotonic()
            with anyio.fail_after(CANARY_MAX_LATENCY * 2):
                await client.server_info()
            slowest = max(slowest, time.monotonic() - started)
    return slowest
