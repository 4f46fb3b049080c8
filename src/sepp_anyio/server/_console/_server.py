"""The console's listener: accepts connections and serves each with ``_http`` and the app.

Bounded so that it can never hurt the queue server it watches: at most
:data:`MAX_CONNECTIONS` connections (further ones are accepted and closed at once), the
per-connection limits of ``_http``, and every page is synchronous work on the engine's
memory (only the dead-letter actions wait, for their commit, like an RPC).
"""

from __future__ import annotations

import errno
import ipaddress
import logging
from collections.abc import AsyncGenerator
from contextlib import asynccontextmanager
from typing import Final

import anyio
import anyio.abc
from anyio.abc import SocketAttribute

from .._engine._engine import Engine
from ._app import ConsoleApp
from ._http import serve_connection
from ._render import Templates

__all__ = ["ConsoleServer", "open_console"]

logger = logging.getLogger("sepp_anyio.server.console")

MAX_CONNECTIONS: Final = 32
REQUEST_TIMEOUT_S: Final = 10.0
MAX_HEADER_BYTES: Final = 8192
MAX_BODY_BYTES: Final = 16384
MAX_REQUESTS_PER_CONNECTION: Final = 100
_RESOURCE_ERRNOS = frozenset(
    {errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM, errno.ECONNABORTED}
)
_ACCEPT_PAUSE = 0.1
#: ``server.LISTENING_LOGGER`` (named here: ``_network`` imports this package, not back).
_LISTENING_LOGGER: Final = "sepp_anyio.server.listening"


def is_loopback(host: str) -> bool:
    """True for a loopback address or ``localhost``."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def format_url(host: str, port: int) -> str:
    return f"http://[{host}]:{port}/" if ":" in host else f"http://{host}:{port}/"


class ConsoleServer:
    """A running console: :attr:`port` and :attr:`url` once listening."""

    def __init__(self, app: ConsoleApp, host: str) -> None:
        self.app = app
        self.host = host
        self.port = 0
        self.connections = 0
        self.refused = 0

    @property
    def url(self) -> str:
        return format_url(self.host, self.port)

    async def _accept_loop(
        self, listener: anyio.abc.Listener[anyio.abc.SocketStream], tg: anyio.abc.TaskGroup
    ) -> None:
        assert isinstance(listener, anyio.abc.SocketListener)
        while True:
            try:
                stream = await listener.accept()
            except OSError as exc:
                if exc.errno not in _RESOURCE_ERRNOS:
                    raise
                logger.warning("console: accept failed (%s); pausing", exc)
                await anyio.sleep(_ACCEPT_PAUSE)
                continue
            if self.connections >= MAX_CONNECTIONS:
                self.refused += 1
                await stream.aclose()
                continue
            self.connections += 1
            tg.start_soon(self._connection, stream)

    async def _connection(self, stream: anyio.abc.SocketStream) -> None:
        try:
            await serve_connection(
                stream,
                self.app.handle,
                timeout=REQUEST_TIMEOUT_S,
                max_header_bytes=MAX_HEADER_BYTES,
                max_body_bytes=MAX_BODY_BYTES,
                max_requests=MAX_REQUESTS_PER_CONNECTION,
            )
        finally:
            self.connections -= 1


@asynccontextmanager
async def open_console(engine: Engine, host: str, port: int) -> AsyncGenerator[ConsoleServer]:
    """Serve the console of *engine* on ``host:port`` (0: a free port) inside the block.

    Logs ``console listening on http://HOST:PORT/``; warns when bound to a non-loopback
    address while the server has no API keys (anybody who reaches it can requeue and purge).

    Raises:
        ConfigError: Jinja2 (the extra ``sepp-anyio[ui]``) is not installed.
        OSError: the address cannot be bound.

    Cancellation: leaving the block (however) closes the listener and every connection.
    """
    app = ConsoleApp(engine, Templates(), loopback=is_loopback(host))
    server = ConsoleServer(app, host)
    listener = await anyio.create_tcp_listener(local_host=host, local_port=port)
    async with listener, anyio.create_task_group() as tg:
        server.port = int(listener.extra(SocketAttribute.local_port))
        for sub in listener.listeners:
            tg.start_soon(server._accept_loop, sub, tg)
        if not is_loopback(host) and engine.config.auth.accepted_keys is None:
            logger.warning(
                "the console on %s is reachable from other hosts and the server has no API "
                "keys: anybody who reaches it can requeue and purge dead letters "
                "(set [auth] api_keys or --api-key, or bind to 127.0.0.1)",
                server.url,
            )
        # On the server's listening logger, which the command line shows at any log level.
        logging.getLogger(_LISTENING_LOGGER).info("console listening on %s", server.url)
        try:
            yield server
        finally:
            tg.cancel_scope.cancel()


@asynccontextmanager
async def open_configured_console(
    engine: Engine, host: str
) -> AsyncGenerator[ConsoleServer | None]:
    """The console ``[ui] port`` asks for, on the server's *host*; None when it is unset."""
    port = engine.config.ui.port
    if port is None:
        yield None
        return
    async with open_console(engine, host, port) as console:
        yield console
