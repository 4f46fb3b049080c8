"""The reference server on the network: grpclib over an engine, with graceful shutdown.

::

    serve(config, host=..., port=..., store=...)      runs until cancelled
      async with Engine(config, store)                 the semantics (anyio)
        async with NetworkServer(engine, ...)          grpclib server: QueueService + Health
          task_status.started(port)
          sleep_forever()
        # cancelled -> NetworkServer's graceful stop, then the engine closes its store

Graceful stop (shielded, bounded by ``shutdown_grace``), mirroring the real server (§3.14):

1. ``engine.shutdown()``: every parked Reserve answers empty at once, later ones too;
2. new connections are closed as soon as they are accepted;
3. calls in progress get up to ``shutdown_grace`` seconds to send their replies;
4. every connection then gets an HTTP/2 GOAWAY (NO_ERROR, last stream 2^31-1), and clients
   get up to a second to hang up by themselves.  The GOAWAY comes only after the replies:
   h2-based clients (ours, grpclib's) read frames that follow a GOAWAY in the same packet
   as a protocol error.  Letting the client hang up spares it from seeing the connection
   drop before it has read its last reply;
5. grpclib's ``close()`` stops listening and cancels what is left; every remaining
   connection is closed (buffered replies are flushed first); transports that do not close
   within a second (a TLS peer ignoring close_notify) are aborted.

grpclib's server is asyncio-only, so everything here needs the asyncio backend
(``anyio.run(..., backend="asyncio")`` or ``asyncio.run``).  :class:`ServerThread` runs a
server in a background thread with its own event loop, for tests and scripts on any backend.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import os
import socket
import ssl
import threading
from collections.abc import AsyncGenerator
from contextlib import asynccontextmanager
from functools import partial
from types import TracebackType
from typing import Any, Self, final

import anyio
import grpclib.config
import grpclib.server
from anyio.abc import TaskStatus
from grpclib.const import Status
from grpclib.metadata import decode_timeout
from grpclib.protocol import H2Protocol

from sepp_anyio._transport._h2quiet import install_quiet_frames

from ._clock import Clock
from ._config import ServerConfig
from ._engine import Engine
from ._errors import ConfigError
from ._service import HealthService, MessageCodec, QueueService
from ._store import Store

__all__ = [
    "DEFAULT_SHUTDOWN_GRACE",
    "LISTENING_LOGGER",
    "NetworkServer",
    "ServerThread",
    "serve",
    "server_ssl_context",
]

logger = logging.getLogger("sepp_anyio.server")
#: The logger of the one "queue server listening on HOST:PORT" line (INFO).  The CLI keeps
#: it at INFO whatever ``--log-level`` says, because tests and tools wait for that line.
LISTENING_LOGGER = "sepp_anyio.server.listening"

#: Seconds that calls in progress get to finish when the server stops.
DEFAULT_SHUTDOWN_GRACE = 10.0
# Seconds that clients get to hang up after their last reply, and that closing connections
# get before their transports are aborted.
_CLOSE_TIMEOUT = 1.0
# HTTP/2 GOAWAY, NO_ERROR, last stream id 2^31-1: the first frame of a graceful shutdown
# (RFC 9113 section 6.8).  Hand-encoded: grpclib keeps its h2 connection private.
_GOAWAY = (
    (8).to_bytes(3, "big")  # payload length
    + b"\x07\x00"  # type GOAWAY, no flags
    + (0).to_bytes(4, "big")  # stream 0
    + (2**31 - 1).to_bytes(4, "big")  # last stream id
    + (0).to_bytes(4, "big")  # NO_ERROR
)


def _require_asyncio() -> asyncio.AbstractEventLoop:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        raise RuntimeError(
            "the network server runs on grpclib, which needs the asyncio backend; "
            "use anyio.run(..., backend='asyncio') or sepp_anyio.server.ServerThread"
        ) from None


def server_ssl_context(
    cert_path: str | os.PathLike[str], key_path: str | os.PathLike[str]
) -> ssl.SSLContext:
    """A server TLS context from PEM files, offering ALPN ``h2`` (TLS 1.2 or newer).

    Raises:
        ConfigError: a file is missing or unreadable, or the key does not match the
            certificate (the message names ``server.tls_cert_path``).
    """
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(os.fspath(cert_path), os.fspath(key_path))
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(
            "server.tls_cert_path",
            f"cannot be loaded with server.tls_key_path ({cert_path}, {key_path}): {exc}",
        ) from None
    # gRPC clients insist on HTTP/2 being negotiated by ALPN.
    context.set_alpn_protocols(["h2"])
    return context


async def _listening_socket(host: str, port: int) -> socket.socket:
    # The socket is made here rather than by asyncio so that the bound port is known (port 0
    # asks for an ephemeral one) without reaching into grpclib's server object.
    # No AI_ADDRCONFIG: it hides loopback addresses on hosts whose only interface is lo.
    infos = await anyio.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    if not infos:
        raise OSError(errno.EADDRNOTAVAIL, f"cannot resolve {host!r}")
    family, type_, proto, _, address = infos[0]
    sock = socket.socket(family, type_, proto)
    try:
        if os.name == "posix":
            # Lets a restarted server bind its port while old connections sit in TIME_WAIT
            # (on POSIX this does not allow two live listeners on one port).
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(128)
        sock.setblocking(False)
    except BaseException:
        sock.close()
        raise
    return sock


def _format_address(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


class _Connection(H2Protocol):
    """grpclib's HTTP/2 connection, registered with the server so that stop can close it."""

    def __init__(self, inner: H2Protocol, server: _GrpcServer, *, refuse: bool) -> None:
        super().__init__(inner.handler, inner.config, inner.h2_config)
        self._server = server
        self._refuse = refuse
        self.transport: asyncio.BaseTransport | None = None
        self.lost = asyncio.Event()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport
        super().connection_made(transport)
        # Before any data arrives: h2 would format a repr of every received frame.
        install_quiet_frames(self.connection._connection)
        self._server.connections.add(self)
        if self._refuse:
            # Shutting down: no new connections (the listener is still open until grpclib's
            # close(), which would also cancel the calls we are letting finish).
            self.close()

    def connection_lost(self, exc: BaseException | None) -> None:
        try:
            super().connection_lost(exc)
        finally:
            self._server.connections.discard(self)
            self.lost.set()

    def goaway(self) -> None:
        """Tell the client we are going away (see ``_GOAWAY``); the connection stays usable.

        Safe between grpclib's writes: grpclib hands h2's output to the transport whole,
        frame by frame, so a frame written here never splits another one.
        """
        if isinstance(self.transport, asyncio.WriteTransport) and not self.transport.is_closing():
            self.transport.write(_GOAWAY)

    def close(self) -> None:
        """Close the connection: pending writes are flushed, then FIN (TLS: close_notify)."""
        if self.transport is not None and not self.transport.is_closing():
            self.processor.close("server shutting down")

    def abort(self) -> None:
        if isinstance(self.transport, asyncio.WriteTransport):
            self.transport.abort()


#: A call whose ``grpc-timeout`` is shorter than this is not run: it is answered
#: DEADLINE_EXCEEDED when its deadline passes (see ``_Handler``).
_MIN_CALL_TIMEOUT = 0.001


async def _deadline_exceeded(stream: Any, release_stream: Any, remaining: float) -> None:
    try:
        # Never before the deadline: the client must see its own deadline pass first.
        await asyncio.sleep(remaining)
        await grpclib.server._abort(stream, 200, Status.DEADLINE_EXCEEDED, "Deadline exceeded")
    except Exception as exc:  # the client went away meanwhile
        logger.debug("could not answer a call with an expired deadline: %r", exc)
    finally:
        release_stream()


class _Handler(grpclib.server.Handler):
    """grpclib's per-connection call handler, for calls whose deadline is (all but) over
    when they arrive.

    grpclib 0.4.9 restarts the clock of ``grpc-timeout`` when the call's task starts and, if
    nothing is left of it by then (``1n``, a few microseconds), reports the deadline as an
    application error: it logs a traceback and answers UNKNOWN "Internal Server Error".
    Such a call is not run at all here; it is answered DEADLINE_EXCEEDED once its deadline
    has passed.
    """

    def accept(self, stream: Any, headers: Any, release_stream: Any) -> None:
        try:
            timeout = min(
                (decode_timeout(value) for key, value in headers if key == "grpc-timeout"),
                default=None,
            )
        except ValueError:
            timeout = None  # grpclib answers a malformed grpc-timeout itself
        if timeout is not None and timeout < _MIN_CALL_TIMEOUT:
            self.__gc_step__()
            self._tasks[stream] = self.loop.create_task(
                _deadline_exceeded(stream, release_stream, timeout)
            )
            return
        super().accept(stream, headers, release_stream)


class _GrpcServer(grpclib.server.Server):
    """grpclib's server, keeping hold of its connections.

    grpclib's ``close()`` cancels running calls but leaves connections open; the only place
    to learn about connections is the protocol factory.  grpclib is pinned exactly
    (``==0.4.9``), which is what makes overriding this internal hook acceptable.
    """

    def __init__(self, handlers: list[Any], *, codec: MessageCodec) -> None:
        super().__init__(
            handlers,
            codec=codec,
            # The real server pings idle-looking connections every 30 s and gives up after
            # 10 s without an answer (protocol §4.1).
            config=grpclib.config.Configuration(_keepalive_time=30.0, _keepalive_timeout=10.0),
        )
        self.connections: set[_Connection] = set()
        self.refusing = False

    def _protocol_factory(self) -> H2Protocol:
        # grpclib's own factory, with our handler.
        self.__gc_step__()
        handler = _Handler(
            self._mapping, self._codec, self._status_details_codec, self.__dispatch__
        )
        self._handlers.add(handler)
        inner = H2Protocol(handler, self._config, self._h2_config)
        return _Connection(inner, self, refuse=self.refusing)


@final
class NetworkServer(anyio.AsyncContextManagerMixin):
    """Serve a running engine over gRPC while inside ``async with``.

    Args:
        engine: the running engine (entered by the caller, left after this server).
        host: address to bind; a name binds its first address.
        port: TCP port; 0 picks a free one (read it back from :attr:`port`).
        ssl_context: TLS (see :func:`server_ssl_context`); None for plaintext.
        shutdown_grace: seconds calls in progress get to finish on exit.

    Entering binds and starts listening.  Leaving stops gracefully (see the module
    docstring), shielded from cancellation and bounded by ``shutdown_grace`` plus at
    most three seconds.  Needs the asyncio backend.

    Raises:
        RuntimeError: not on asyncio.
        OSError: the address cannot be bound (for example the port is in use).
    """

    def __init__(
        self,
        engine: Engine,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        ssl_context: ssl.SSLContext | None = None,
        shutdown_grace: float = DEFAULT_SHUTDOWN_GRACE,
    ) -> None:
        self._engine = engine
        self._host = host
        self._requested_port = port
        self._ssl_context = ssl_context
        self._grace = shutdown_grace
        self._service = QueueService(engine)
        self._bound: tuple[str, int] | None = None

    @property
    def host(self) -> str:
        """The bound address (after entering)."""
        if self._bound is None:
            raise RuntimeError("the server is not listening")
        return self._bound[0]

    @property
    def port(self) -> int:
        """The bound port (after entering; the real one when 0 was asked)."""
        if self._bound is None:
            raise RuntimeError("the server is not listening")
        return self._bound[1]

    @property
    def address(self) -> str:
        """``host:port`` (IPv6 hosts in brackets)."""
        return _format_address(self.host, self.port)

    @property
    def active_calls(self) -> int:
        """QueueService calls in progress."""
        return self._service.active_calls

    @asynccontextmanager
    async def __asynccontextmanager__(self) -> AsyncGenerator[Self]:
        _require_asyncio()
        codec = MessageCodec(self._engine.config.limits.max_message_bytes)
        server = _GrpcServer([self._service, HealthService(self._engine)], codec=codec)
        sock = await _listening_socket(self._host, self._requested_port)
        try:
            await server.start(sock=sock, ssl=self._ssl_context)
        except BaseException:
            sock.close()
            raise
        host, port = sock.getsockname()[:2]
        self._bound = (host, port)
        try:
            yield self
        finally:
            with anyio.CancelScope(shield=True):
                await self._stop(server)
            self._bound = None

    async def _stop(self, server: _GrpcServer) -> None:
        self._engine.shutdown()
        server.refusing = True
        with anyio.move_on_after(self._grace) as scope:
            await self._service.wait_idle()
        if scope.cancelled_caught:
            logger.warning(
                "%d call(s) still running after the %.1f s shutdown grace; cancelling them",
                self._service.active_calls,
                self._grace,
            )
        else:
            for connection in list(server.connections):
                connection.goaway()
            with anyio.move_on_after(_CLOSE_TIMEOUT):
                for connection in list(server.connections):
                    await connection.lost.wait()
        server.close()
        connections = list(server.connections)
        for connection in connections:
            connection.close()
        with anyio.move_on_after(_CLOSE_TIMEOUT):
            for connection in connections:
                await connection.lost.wait()
        for connection in list(server.connections):
            connection.abort()
        # Aborted transports report connection_lost on the next loop iteration.
        with anyio.move_on_after(_CLOSE_TIMEOUT):
            for connection in connections:
                await connection.lost.wait()
        # Cancelled handlers end at their next checkpoint; the bound is a backstop only.
        with anyio.move_on_after(_CLOSE_TIMEOUT) as scope:
            await server.wait_closed()
        if scope.cancelled_caught:
            logger.warning("some calls did not end after cancellation; leaving them behind")


@asynccontextmanager
async def _open_server(
    config: ServerConfig,
    *,
    host: str,
    port: int,
    store: Store | None,
    tls_cert: str | os.PathLike[str] | None,
    tls_key: str | os.PathLike[str] | None,
    clock: Clock | None,
    shutdown_grace: float,
) -> AsyncGenerator[tuple[Engine, NetworkServer]]:
    """Engine + network server, listening on entry; the body of :func:`serve`."""
    _require_asyncio()
    if (tls_cert is None) != (tls_key is None):
        missing = "server.tls_key_path" if tls_key is None else "server.tls_cert_path"
        raise ConfigError(missing, "must be given too: TLS needs both a certificate and a key")
    ssl_context = None
    if tls_cert is not None and tls_key is not None:
        ssl_context = server_ssl_context(tls_cert, tls_key)
    if config.auth.api_keys is not None and ssl_context is None:
        logger.warning(
            "API-key authentication is on but TLS is off: keys travel in plaintext "
            "(set both TLS paths to enable TLS)"
        )
    async with (
        Engine(config, store, clock) as engine,
        NetworkServer(
            engine, host=host, port=port, ssl_context=ssl_context, shutdown_grace=shutdown_grace
        ) as server,
    ):
        logging.getLogger(LISTENING_LOGGER).info("queue server listening on %s", server.address)
        yield engine, server


async def serve(
    config: ServerConfig | None = None,
    *,
    host: str = "127.0.0.1",
    port: int = 50051,
    store: Store | None = None,
    tls_cert: str | os.PathLike[str] | None = None,
    tls_key: str | os.PathLike[str] | None = None,
    clock: Clock | None = None,
    shutdown_grace: float = DEFAULT_SHUTDOWN_GRACE,
    task_status: TaskStatus[int] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Run the reference server until cancelled.

    Args:
        config: the server configuration (default: all defaults).  ``[server]``'s address,
            database path and TLS paths are *not* read here: pass ``host``, ``port``,
            ``store`` and the TLS paths (the CLI maps the config onto them).
        host, port: where to listen; port 0 picks a free one.
        store: the engine's store (default: a fresh :class:`MemoryStore`).
        tls_cert, tls_key: PEM files; both or neither.
        clock: the engine's clock (default: wall clock).
        shutdown_grace: seconds calls in progress get to finish on shutdown.
        task_status: ``started(port)`` with the bound port once listening.

    Once listening it logs ``queue server listening on HOST:PORT`` at INFO on the
    :data:`LISTENING_LOGGER` logger.  A warning is logged when API keys are configured
    without TLS.

    Cancellation is the way to stop it: the server stops gracefully (parked reserves answer
    empty, calls in progress get ``shutdown_grace`` seconds), then the engine closes its
    store.  Needs the asyncio backend.

    Raises:
        ConfigError: only one TLS path, or unusable TLS files.
        OSError: the address cannot be bound, or the store cannot be opened.
        RuntimeError: not running on asyncio.
    """
    async with _open_server(
        config if config is not None else ServerConfig(),
        host=host,
        port=port,
        store=store,
        tls_cert=tls_cert,
        tls_key=tls_key,
        clock=clock,
        shutdown_grace=shutdown_grace,
    ) as (_, server):
        task_status.started(server.port)
        await anyio.sleep_forever()


@final
class ServerThread:
    """A reference server in a background thread with its own asyncio event loop.

    For tests and scripts whatever their backend (trio included)::

        with ServerThread(ServerConfig()) as server:
            async with sepp_anyio.connect(server.address) as client: ...

    Args:
        config, store, tls_cert, tls_key, shutdown_grace: as for :func:`serve`.
        host, port: where to listen (default: 127.0.0.1 and a free port).

    :meth:`start` blocks until the server listens (or raises what stopped it from starting);
    :meth:`stop` stops it gracefully (up to ``shutdown_grace`` for calls in progress) and
    blocks until the thread is gone.  Both block the calling thread: from an event loop
    whose own calls are in progress against this server, run them with
    ``anyio.to_thread.run_sync``.
    """

    def __init__(
        self,
        config: ServerConfig | None = None,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        store: Store | None = None,
        tls_cert: str | os.PathLike[str] | None = None,
        tls_key: str | os.PathLike[str] | None = None,
        shutdown_grace: float = DEFAULT_SHUTDOWN_GRACE,
    ) -> None:
        self.config = config if config is not None else ServerConfig()
        self.host = host
        self.port = port
        self._open = partial(
            _open_server,
            self.config,
            host=host,
            store=store,
            tls_cert=tls_cert,
            tls_key=tls_key,
            clock=None,
            shutdown_grace=shutdown_grace,
        )
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._scope: anyio.CancelScope | None = None
        self._error: BaseException | None = None
        self._network: NetworkServer | None = None

    @property
    def address(self) -> str:
        """``host:port`` for :func:`sepp_anyio.connect`."""
        return _format_address(self.host, self.port)

    @property
    def running(self) -> bool:
        """True between :meth:`start` and :meth:`stop`."""
        return self._thread is not None

    @property
    def active_calls(self) -> int:
        """QueueService calls in progress (a snapshot, read from another thread)."""
        network = self._network
        return 0 if network is None else network.active_calls

    def start(self, timeout: float = 30.0) -> None:
        """Start serving; return once listening (on the same port again after a stop).

        Raises:
            RuntimeError: already running, or not listening within ``timeout`` seconds.
            Exception: whatever :func:`serve` raised while starting.
        """
        if self._thread is not None:
            raise RuntimeError("the server is already running")
        self._ready.clear()
        self._error = None
        self._thread = threading.Thread(
            target=self._run, name=f"sepp-server-{self.port}", daemon=True
        )
        self._thread.start()
        if not self._ready.wait(timeout):
            raise RuntimeError(f"the server did not start listening within {timeout} s")
        error = self._take_error()
        if error is not None:
            self._thread.join()
            self._thread = None
            raise error

    def stop(self, timeout: float = 60.0) -> None:
        """Stop gracefully (see :func:`serve`) and wait for the thread; no-op if stopped.

        Raises:
            RuntimeError: the thread did not end within ``timeout`` seconds.
            Exception: whatever made the server fail while it was running.
        """
        thread, loop, scope = self._thread, self._loop, self._scope
        if thread is None:
            return
        if loop is not None and scope is not None:
            # The loop may have ended by itself (a crash); then there is nothing to cancel.
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(scope.cancel)
        thread.join(timeout)
        if thread.is_alive():
            raise RuntimeError(f"the server thread did not stop within {timeout} s")
        self._thread = self._loop = self._scope = None
        error = self._take_error()
        if error is not None:
            raise error

    def _take_error(self) -> BaseException | None:
        error, self._error = self._error, None
        return error

    def _run(self) -> None:
        try:
            anyio.run(self._main, backend="asyncio")
        except BaseException as exc:  # handed to start() / stop(), which re-raise it
            self._error = exc
        finally:
            self._ready.set()

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        with anyio.CancelScope() as scope:
            self._scope = scope
            async with self._open(port=self.port) as (_, network):
                self._network = network
                self.port = network.port
                self._ready.set()
                try:
                    await anyio.sleep_forever()
                finally:
                    self._network = None

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
