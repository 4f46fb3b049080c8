"""The reference server on the network: our HTTP/2 core over anyio, with graceful shutdown.

::

    serve(config, host=..., port=..., store=...)      runs until cancelled
      async with Engine(config, store)                 the semantics (anyio)
        async with NetworkServer(engine, ...)          QueueService + Health over HTTP/2
          task_status.started(port)
          sleep_forever()
        # cancelled -> NetworkServer's graceful stop, then the engine closes its store

The network side runs on asyncio and trio alike: a TCP listener (TLS with ALPN ``h2`` when
configured), one task group per connection (:mod:`._served`, on the server role of
:mod:`sepp_anyio._http2`), one cancel scope per call.  Calls are dispatched to the service
layer (:mod:`._service`) by ``:path``.

At most ``max_connections`` are open, and ``max_connections_per_ip`` from one address; when
a cap is full the newcomer is admitted and the connection that has done least is evicted
(one still in its handshake, else the one idle longest; never one with a call running), see
:mod:`._admission`.  Only when none can be evicted does a cap refuse: per address the
newcomer is closed at once, in total accepting pauses.  TLS handshakes have
``tls_handshake_timeout`` (all ``[server]`` keys, see :mod:`._netlimits`).

Graceful stop (shielded, bounded by ``shutdown_grace`` plus a few seconds), mirroring the
real server (§3.14) and grpc-go's graceful GOAWAY:

1. ``engine.shutdown()``: every parked Reserve answers empty at once, later ones too; the
   health service answers NOT_SERVING;
2. the listener closes: no new connections;
3. every connection gets GOAWAY(2^31-1) and a PING; on the PING's ACK (or after 5 s) a
   second GOAWAY naming the last request it will serve.  Requests sent in between are
   still served;
4. calls in progress get up to ``shutdown_grace`` seconds; each connection flushes and
   closes once its last call has ended, giving the client a second to hang up first;
5. what is left is cancelled.

:class:`ServerThread` runs a server in a background thread with its own event loop, for
tests and scripts whatever their backend.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import socket
import ssl
import threading
from collections.abc import AsyncGenerator, Callable, Mapping
from contextlib import asynccontextmanager
from functools import partial
from types import TracebackType
from typing import Any, Literal, Self, final

import anyio
import anyio.abc
import anyio.lowlevel
from anyio.abc import SocketAttribute, TaskGroup, TaskStatus
from anyio.streams.tls import TLSStream

from sepp_anyio._http2 import Limits
from sepp_anyio._io import EagerStream
from sepp_anyio._io._deadlines import Deadlines
from sepp_anyio._io._native import native

from .._config._config import ServerConfig
from .._console import open_configured_console
from .._engine._clock import Clock
from .._engine._engine import Engine
from .._errors import ConfigError
from .._store._store import Store
from ._accept import Acceptor, open_acceptor
from ._admission import Admission, Refusal, Slot
from ._netlimits import NetworkLimits, http2_limits, network_limits
from ._reqbytes import RequestBytes
from ._served import ServedConnection
from ._service import HealthService, MessageCodec, QueueService, Route

__all__ = [
    "BACKEND_ENV",
    "DEFAULT_SHUTDOWN_GRACE",
    "LISTENING_LOGGER",
    "Backend",
    "NetworkServer",
    "ServerThread",
    "default_backend",
    "serve",
    "server_ssl_context",
]

logger = logging.getLogger("sepp_anyio.server")
#: The logger of the one "queue server listening on HOST:PORT" line (INFO).  The CLI keeps
#: it at INFO whatever ``--log-level`` says, because tests and tools wait for that line.
LISTENING_LOGGER = "sepp_anyio.server.listening"

#: Seconds that calls in progress get to finish when the server stops.
DEFAULT_SHUTDOWN_GRACE = 10.0
# Seconds a closing connection gets before its transport is dropped.
_CLOSE_TIMEOUT = 1.0

#: The event loops the server runs on.
Backend = Literal["asyncio", "trio"]
#: The environment variable naming the default backend of the CLI and :class:`ServerThread`
#: (so a test suite can run every server it starts on trio).
BACKEND_ENV = "SEPP_SERVER_BACKEND"


def default_backend() -> Backend:
    """``$SEPP_SERVER_BACKEND`` if it is ``asyncio`` or ``trio``, else ``asyncio``."""
    return "trio" if os.environ.get(BACKEND_ENV, "").strip().lower() == "trio" else "asyncio"


def call_soon_threadsafe(token: anyio.lowlevel.EventLoopToken, func: Callable[[], None]) -> None:
    """Schedule ``func`` on the event loop of ``token`` from any thread, without waiting.

    (``anyio.from_thread.run_sync`` waits, and trio refuses it from a thread that runs a
    trio loop of its own: a test on trio stopping a server thread on trio.)

    Raises:
        RuntimeError: the loop has ended.
    """
    loop: Any = token.native_token
    if hasattr(loop, "call_soon_threadsafe"):  # asyncio
        loop.call_soon_threadsafe(func)
    else:  # trio
        loop.run_sync_soon(func)


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
    # The socket is made here (rather than by anyio.create_tcp_listener, which binds every
    # address a name resolves to) so that exactly one address is bound and its port is known
    # (port 0 asks for an ephemeral one).
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


async def _close_quietly(stream: anyio.abc.ByteStream) -> None:
    """Close a socket the server will not serve (shielded, bounded, errors ignored)."""
    with (
        anyio.CancelScope(shield=True),
        anyio.move_on_after(_CLOSE_TIMEOUT),
        contextlib.suppress(Exception),
    ):
        await stream.aclose()


def _format_address(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


@final
class NetworkServer(anyio.AsyncContextManagerMixin):
    """Serve a running engine over gRPC while inside ``async with``.

    Args:
        engine: the running engine (entered by the caller, left after this server).
        host: address to bind; a name binds its first address.
        port: TCP port; 0 picks a free one (read it back from :attr:`port`).
        ssl_context: TLS (see :func:`server_ssl_context`); None for plaintext.
        shutdown_grace: seconds calls in progress get to finish on exit.
        limits: the HTTP/2 defences (default: from ``engine.config.server``).
        network: timeouts and connection caps (default: from ``engine.config.server``).

    Entering binds and starts listening.  Leaving stops gracefully (see the module
    docstring), shielded from cancellation and bounded by ``shutdown_grace`` plus a few
    seconds.  Runs on asyncio and trio.

    Raises:
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
        limits: Limits | None = None,
        network: NetworkLimits | None = None,
    ) -> None:
        self._engine = engine
        self._host = host
        self._requested_port = port
        self._ssl_context = ssl_context
        self._grace = shutdown_grace
        section = engine.config.server
        self._limits = limits if limits is not None else http2_limits(section)
        self._net = network if network is not None else network_limits(section)
        self._service = QueueService(engine)
        # Request bytes being assembled, across all connections.
        self._request_bytes = RequestBytes(self._net.max_buffered_request_bytes)
        self._bound: tuple[str, int] | None = None
        self._connections: set[ServedConnection] = set()
        self._deadlines = Deadlines()
        self._admission = Admission(
            self._net.max_connections,
            self._net.max_connections_per_ip,
            evict=self._net.evict_when_full,
        )
        self._stopping = False
        self._scopes: set[anyio.CancelScope] = set()

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

    @property
    def connections(self) -> tuple[ServedConnection, ...]:
        """The connections being served (a snapshot)."""
        return tuple(self._connections)

    @property
    def admission(self) -> Admission:
        """The connection caps: connections open and closing, their peaks, evictions and
        refusals (read them; for tests and diagnostics)."""
        return self._admission

    @asynccontextmanager
    async def __asynccontextmanager__(self) -> AsyncGenerator[Self]:
        codec = MessageCodec(self._engine.config.limits.max_message_bytes)
        routes: dict[str, Route] = {
            **self._service.routes(),
            **HealthService(self._engine).routes(),
        }
        sock = await _listening_socket(self._host, self._requested_port)
        host, port = sock.getsockname()[:2]
        try:
            listener = await open_acceptor(sock)
        except BaseException:
            sock.close()
            raise
        self._bound = (host, port)
        self._stopping = False
        try:
            async with anyio.create_task_group() as tg:
                # The calls' deadlines, for every connection (one task, see _io._deadlines);
                # it ends last, after the stop below, and a fresh one serves a next run.
                self._deadlines = Deadlines()
                tg.start_soon(self._deadlines.run, native(), name="sepp server call deadlines")
                accept_scope = anyio.CancelScope()
                tg.start_soon(self._accept_loop, listener, accept_scope, tg, routes, codec)
                try:
                    yield self
                finally:
                    with anyio.CancelScope(shield=True):
                        await self._stop(listener, accept_scope)
                    tg.cancel_scope.cancel()
        finally:
            self._bound = None

    async def _accept_loop(
        self,
        listener: Acceptor,
        scope: anyio.CancelScope,
        tg: TaskGroup,
        routes: Mapping[str, Route],
        codec: MessageCodec,
    ) -> None:
        admission = self._admission
        with scope:
            while True:
                # Accepting pauses while every slot is taken by a connection with a call
                # running (the backlog holds the rest); otherwise a newcomer evicts one.
                await admission.wait_for_room()
                try:
                    raw = await listener.accept()
                except anyio.ClosedResourceError:  # stopping
                    return
                except OSError as exc:  # EMFILE and friends: back off, keep serving
                    logger.warning("accept failed: %s", exc)
                    await anyio.sleep(0.1)
                    continue
                try:
                    slot = await self._admit(raw)
                except BaseException:
                    await _close_quietly(raw)
                    raise
                if slot is None:
                    await _close_quietly(raw)
                    continue
                tg.start_soon(self._serve_one_shielded, raw, slot, routes, codec)

    async def _admit(self, raw: anyio.abc.ByteStream) -> Slot | None:
        """A slot for the accepted ``raw`` (evicting another connection if a cap is full),
        waiting while the server is full of busy connections; None if its address is."""
        address = raw.extra(SocketAttribute.remote_address)
        ip = str(address[0]) if isinstance(address, tuple) else str(address)
        while True:
            # Shielded from the server's stop like the rest of the connection's life: the
            # graceful stop cancels it (see _serve_one_shielded).
            verdict = self._admission.admit(ip, anyio.CancelScope(shield=True))
            if isinstance(verdict, Slot):
                return verdict
            if verdict is Refusal.PER_IP:
                logger.debug("refusing a connection from %s: too many from it", ip)
                return None
            # Full and nothing evictable (every connection has a call running), though
            # there was room before accept(): hold this one until a slot frees.
            await self._admission.wait_for_room()

    async def _serve_one_shielded(
        self,
        raw: anyio.abc.ByteStream,
        slot: Slot,
        routes: Mapping[str, Route],
        codec: MessageCodec,
    ) -> None:
        # Connections are shielded from the cancellation that stops the server: its graceful
        # stop decides when they end, and cancels their scopes once the grace is over.  An
        # eviction cancels the scope too (of a connection still in its handshake), maybe
        # before this task has started: then it only closes the socket.
        with slot.scope as scope:
            self._scopes.add(scope)
            try:
                await self._serve_one(raw, slot, routes, codec)
            finally:
                self._scopes.discard(scope)

    async def _serve_one(
        self,
        raw: anyio.abc.ByteStream,
        slot: Slot,
        routes: Mapping[str, Route],
        codec: MessageCodec,
    ) -> None:
        ip = slot.ip
        stream: anyio.abc.ByteStream = raw
        try:
            with contextlib.suppress(OSError):
                raw.extra(SocketAttribute.raw_socket).setsockopt(
                    socket.IPPROTO_TCP, socket.TCP_NODELAY, 1
                )
            if self._ssl_context is not None:
                with anyio.move_on_after(self._net.tls_handshake_timeout):
                    try:
                        stream = await TLSStream.wrap(
                            raw,
                            server_side=True,
                            ssl_context=self._ssl_context,
                            standard_compatible=False,
                        )
                    except (
                        ssl.SSLError,
                        OSError,
                        anyio.BrokenResourceError,
                        anyio.EndOfStream,
                    ) as exc:
                        logger.debug("TLS handshake with %s failed: %s", ip, exc)
                        return
                if stream is raw:
                    logger.debug("TLS handshake with %s timed out", ip)
                    return
            if self._stopping or slot.evicted:
                return
            connection = ServedConnection(
                stream,
                routes=routes,
                codec=codec,
                limits=self._limits,
                net=self._net,
                peer=ip,
                request_bytes=self._request_bytes,
                on_idle=self._admission.wake,
                fair_reads=isinstance(raw, EagerStream),
                deadlines=self._deadlines,
            )
            self._admission.attach(slot, connection)
            self._connections.add(connection)
            try:
                await connection.run()
            finally:
                self._connections.discard(connection)
        finally:
            if slot.evicted:
                logger.debug("connection from %s evicted to make room for a newer one", ip)
            self._admission.release(slot)
            with anyio.CancelScope(shield=True), anyio.move_on_after(_CLOSE_TIMEOUT):
                with contextlib.suppress(Exception):
                    await stream.aclose()
                with contextlib.suppress(Exception):
                    await raw.aclose()

    async def _stop(self, listener: Acceptor, accept_scope: anyio.CancelScope) -> None:
        self._engine.shutdown()
        self._stopping = True
        accept_scope.cancel()
        with contextlib.suppress(Exception):
            await listener.aclose()
        for connection in list(self._connections):
            connection.begin_shutdown()
        with anyio.move_on_after(self._grace + self._net.goaway_ping_timeout) as scope:
            for connection in list(self._connections):
                await connection.done.wait()
        if scope.cancelled_caught:
            logger.warning(
                "%d call(s) still running after the %.1f s shutdown grace; cancelling them",
                sum(connection.active_calls for connection in self._connections),
                self._grace,
            )
        for connection_scope in list(self._scopes):
            connection_scope.cancel()


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

    With ``config.ui.port`` set it also serves the web console on ``host`` at that port
    (Jinja2, the extra ``sepp-anyio[ui]``, must be installed: else ConfigError ``ui.port``)
    and logs ``console listening on http://HOST:PORT/``.

    Once listening it logs ``queue server listening on HOST:PORT`` at INFO on the
    :data:`LISTENING_LOGGER` logger.  A warning is logged when API keys are configured
    without TLS.

    Cancellation is the way to stop it: the server stops gracefully (parked reserves answer
    empty, calls in progress get ``shutdown_grace`` seconds), then the engine closes its
    store.  Runs on asyncio and trio.

    Raises:
        ConfigError: only one TLS path, or unusable TLS files.
        OSError: the address cannot be bound, or the store cannot be opened.
    """
    opened = _open_server(
        config if config is not None else ServerConfig(),
        host=host,
        port=port,
        store=store,
        tls_cert=tls_cert,
        tls_key=tls_key,
        clock=clock,
        shutdown_grace=shutdown_grace,
    )
    # The web console, when [ui] port asks for one, on the server's host.
    async with opened as (engine, server), open_configured_console(engine, host):
        task_status.started(server.port)
        await anyio.sleep_forever()


@final
class ServerThread:
    """A reference server in a background thread with its own event loop.

    For tests and scripts whatever their backend (trio included)::

        with ServerThread(ServerConfig()) as server:
            async with sepp_anyio.connect(server.address) as client: ...

    Args:
        config, store, tls_cert, tls_key, shutdown_grace: as for :func:`serve`.
        host, port: where to listen (default: 127.0.0.1 and a free port).
        backend: the thread's event loop, ``"asyncio"`` or ``"trio"`` (default:
            :func:`default_backend`).

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
        backend: Backend | None = None,
    ) -> None:
        self.config = config if config is not None else ServerConfig()
        self.host = host
        self.port = port
        self.backend: Backend = backend if backend is not None else default_backend()
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
        self._token: anyio.lowlevel.EventLoopToken | None = None
        self._scope: anyio.CancelScope | None = None
        self._error: BaseException | None = None
        self._network: NetworkServer | None = None
        #: The web console's address (``http://HOST:PORT/``) while running, when the
        #: config's ``[ui] port`` asks for one; else None.
        self.console_url: str | None = None

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
        thread, token, scope = self._thread, self._token, self._scope
        if thread is None:
            return
        if token is not None and scope is not None:
            # The loop may have ended by itself (a crash); then there is nothing to cancel.
            with contextlib.suppress(RuntimeError):
                call_soon_threadsafe(token, scope.cancel)
        thread.join(timeout)
        if thread.is_alive():
            raise RuntimeError(f"the server thread did not stop within {timeout} s")
        self._thread = self._token = self._scope = None
        error = self._take_error()
        if error is not None:
            raise error

    def _take_error(self) -> BaseException | None:
        error, self._error = self._error, None
        return error

    def _run(self) -> None:
        try:
            anyio.run(self._main, backend=self.backend)
        except BaseException as exc:  # handed to start() / stop(), which re-raise it
            self._error = exc
        finally:
            self._ready.set()

    async def _main(self) -> None:
        self._token = anyio.lowlevel.current_token()
        with anyio.CancelScope() as scope:
            self._scope = scope
            async with (
                self._open(port=self.port) as (engine, network),
                open_configured_console(engine, self.host) as console,
            ):
                self._network = network
                self.port = network.port
                self.console_url = None if console is None else console.url
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
