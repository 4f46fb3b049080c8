"""A small HTTP/1.1 client for the health tests (h11, on real loopback sockets), and raw-byte
helpers for requests h11 would refuse to send."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass

import anyio
import anyio.abc
import h11

HOST = "127.0.0.1"
#: Bound on every client operation of a test; the server's own timeouts are far shorter.
LIMIT = 5.0


@dataclass(frozen=True)
class Response:
    status: int
    headers: dict[str, str]
    body: bytes

    @property
    def text(self) -> str:
        return self.body.decode()


class Client:
    """One kept-alive connection."""

    def __init__(self, stream: anyio.abc.SocketStream) -> None:
        self.stream = stream
        self.conn = h11.Connection(h11.CLIENT)

    async def request(
        self, path: str, method: str = "GET", headers: Sequence[tuple[str, str]] = ()
    ) -> Response:
        with anyio.fail_after(LIMIT):
            if self.conn.our_state is h11.DONE:
                self.conn.start_next_cycle()
            request = h11.Request(method=method, target=path, headers=[("host", HOST), *headers])
            await self.stream.send(self.conn.send(request) + self.conn.send(h11.EndOfMessage()))
            status, head, body = 0, {}, b""
            while True:
                event = self.conn.next_event()
                if event is h11.NEED_DATA:
                    try:
                        data = await self.stream.receive()
                    except anyio.EndOfStream:
                        data = b""
                    self.conn.receive_data(data)
                elif isinstance(event, h11.Response):
                    status = event.status_code
                    head = {k.decode(): v.decode() for k, v in event.headers}
                elif isinstance(event, h11.Data):
                    body += event.data
                elif isinstance(event, h11.EndOfMessage):
                    return Response(status, head, body)
                else:
                    raise AssertionError(f"unexpected {event!r}")


@asynccontextmanager
async def connect(port: int) -> AsyncIterator[Client]:
    with anyio.fail_after(LIMIT):
        stream = await anyio.connect_tcp(HOST, port)
    async with stream:
        yield Client(stream)


async def get(port: int, path: str, method: str = "GET") -> Response:
    async with connect(port) as client:
        return await client.request(path, method)


async def read_to_end(stream: anyio.abc.SocketStream) -> bytes:
    """Everything the server sends until it closes (a reset counts as a close)."""
    data = b""
    with anyio.fail_after(LIMIT):
        while True:
            try:
                data += await stream.receive()
            except (anyio.EndOfStream, anyio.BrokenResourceError):
                return data


async def raw(port: int, data: bytes) -> bytes:
    """Send ``data`` on a new connection and return all the server answers."""
    with anyio.fail_after(LIMIT):
        stream = await anyio.connect_tcp(HOST, port)
    async with stream:
        await stream.send(data)
        return await read_to_end(stream)


def status_of(response: bytes) -> int:
    line = response.split(b"\r\n", 1)[0]
    assert line.startswith(b"HTTP/1.1 "), response[:200]
    return int(line.split()[1])
