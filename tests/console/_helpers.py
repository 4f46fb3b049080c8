"""A console on a real loopback socket in the test's event loop, and a small HTTP/1.1 client
(h11 over anyio) that keeps the session cookie like a browser."""

from __future__ import annotations

import json
import urllib.parse
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import anyio
import h11

from sepp_anyio import Client
from sepp_anyio.server import Engine
from sepp_anyio.server._console import ConsoleServer, open_console
from sepp_anyio.testing import open_in_memory_client

QUEUE = "emails"
#: Keep dead letters (the console's dead-letter pages need some).
RETENTION = {"dead_letter_retention_ms": 600_000}
#: Bound on one exchange with the console (generous: a loaded 2-core machine).
TIMEOUT = 20.0


@dataclass
class Response:
    status: int
    headers: dict[str, str]
    body: bytes

    @property
    def text(self) -> str:
        return self.body.decode("utf-8")

    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class Browser:
    """Sends requests to the console and keeps its cookie (no JavaScript, no redirects)."""

    port: int
    cookies: dict[str, str] = field(default_factory=dict)

    async def raw(self, data: bytes) -> Response | None:
        """Send bytes as they are; the parsed response, or None if the server just closed."""
        with anyio.fail_after(TIMEOUT):
            async with await anyio.connect_tcp("127.0.0.1", self.port) as stream:
                await stream.send(data)
                conn = h11.Connection(h11.CLIENT)
                conn.send(h11.Request(method="GET", target="/", headers=[("host", "x")]))
                return await self._read(conn, stream)

    async def _read(self, conn: h11.Connection, stream: Any) -> Response | None:
        status, body = 0, b""
        headers: dict[str, str] = {}
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA:
                try:
                    data = await stream.receive()
                except (anyio.EndOfStream, anyio.BrokenResourceError):
                    data = b""
                conn.receive_data(data)
                continue
            if isinstance(event, h11.Response):
                status = event.status_code
                for name, value in event.headers:
                    headers.setdefault(name.decode(), value.decode())
                    if name == b"set-cookie":
                        self._keep(value.decode())
            elif isinstance(event, h11.Data):
                body += bytes(event.data)
            elif isinstance(event, h11.EndOfMessage):
                return Response(status, headers, body)
            elif isinstance(event, h11.ConnectionClosed):
                return None if status == 0 else Response(status, headers, body)

    def _keep(self, cookie: str) -> None:
        pair = cookie.split(";", 1)[0]
        name, _, value = pair.partition("=")
        if "Max-Age=0" in cookie:
            self.cookies.pop(name, None)
        else:
            self.cookies[name] = value

    async def request(
        self,
        method: str,
        target: str,
        *,
        form: Mapping[str, str] | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> Response:
        body = b"" if form is None else urllib.parse.urlencode(form).encode()
        extra = dict(headers or {})
        sent = [("host", extra.pop("host", f"127.0.0.1:{self.port}")), ("connection", "close")]
        if self.cookies:
            sent.append(("cookie", "; ".join(f"{k}={v}" for k, v in self.cookies.items())))
        if form is not None:
            sent.append(("content-type", "application/x-www-form-urlencoded"))
            sent.append(("content-length", str(len(body))))
        sent.extend(extra.items())
        with anyio.fail_after(TIMEOUT):
            async with await anyio.connect_tcp("127.0.0.1", self.port) as stream:
                conn = h11.Connection(h11.CLIENT)
                head = h11.Request(method=method, target=target, headers=sent)
                await stream.send(conn.send(head))
                if body:
                    await stream.send(conn.send(h11.Data(data=body)))
                await stream.send(conn.send(h11.EndOfMessage()))
                response = await self._read(conn, stream)
        assert response is not None
        return response

    async def get(self, target: str) -> Response:
        return await self.request("GET", target)

    async def post(self, target: str, form: Mapping[str, str]) -> Response:
        return await self.request("POST", target, form=form)


@asynccontextmanager
async def console(**sections: Any) -> AsyncIterator[tuple[Client, Engine, ConsoleServer]]:
    """An in-memory engine with a client, and its console on a free loopback port."""
    sections.setdefault("storage", RETENTION)
    async with (
        open_in_memory_client(**sections) as (client, engine),
        open_console(engine, "127.0.0.1", 0) as server,
    ):
        yield client, engine, server


def csrf_of(page: str) -> str:
    """The CSRF token in a page's form."""
    marker = 'name="csrf" value="'
    start = page.index(marker) + len(marker)
    return page[start : page.index('"', start)]
