"""``serve_health``: the worker's ``/livez``, ``/readyz`` and ``/metrics`` over HTTP/1.1.

::

    async with anyio.create_task_group() as tg:
        port = await tg.start(serve_health, worker)     # before worker.run(): /readyz is 503
        await worker.run()

Bounded so that it can never hurt the worker it watches: loopback by default, at most
``max_connections`` connections (further ones are accepted and closed at once, so the
kernel's backlog never fills with them), the per-connection limits of ``_http``, and every
handler is plain synchronous work on data already in memory (no request waits on the worker).
The event loop's lag is measured by a task of its own (``_lag``), so a probe never adds
load to find out.
"""

from __future__ import annotations

import errno
import logging

import anyio
import anyio.abc
from anyio.abc import SocketAttribute

from .._model._checks import check_count, check_seconds
from ._http import Reply, serve_connection
from ._lag import LoopLag
from ._source import HealthSource

__all__ = ["HealthServer", "serve_health"]

logger = logging.getLogger("sepp_anyio.health")

_METRICS_TYPE = "text/plain; version=0.0.4; charset=utf-8"
#: accept() failures that mean "out of resources for now": wait and go on, as servers do,
#: rather than crash the worker's task group.
_RESOURCE_ERRNOS = frozenset(
    {errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM, errno.ECONNABORTED}
)
_ACCEPT_PAUSE = 0.1


def _positive(value: float, name: str) -> float:
    return check_seconds(value, name, minimum="positive")


def _count(value: int, name: str) -> int:
    return check_count(value, name)


class HealthServer:
    """The routes and limits of one health server (see :func:`serve_health` for the
    arguments); :meth:`serve` runs it."""

    def __init__(
        self,
        source: HealthSource,
        *,
        max_loop_lag: float = 5.0,
        lag_interval: float = 0.25,
        lag_window: float = 1.0,
        request_timeout: float = 10.0,
        max_connections: int = 32,
        max_header_bytes: int = 8192,
        max_requests_per_connection: int = 100,
    ) -> None:
        self.source = source
        self.max_loop_lag = _positive(max_loop_lag, "max_loop_lag")
        self.lag = LoopLag(
            _positive(lag_interval, "lag_interval"), _positive(lag_window, "lag_window")
        )
        self.request_timeout = _positive(request_timeout, "request_timeout")
        self.max_connections = _count(max_connections, "max_connections")
        self.max_header_bytes = _count(max_header_bytes, "max_header_bytes")
        self.max_requests = _count(max_requests_per_connection, "max_requests_per_connection")
        #: Connections being served, and those closed at once for being over the cap.
        self.connections = 0
        self.refused = 0

    # ------------------------------------------------------------ routes

    def liveness(self) -> tuple[bool, str]:
        """The loop-lag condition, then the source's."""
        now = anyio.current_time()
        lag = self.lag.lag(now)
        if lag > self.max_loop_lag:
            return False, f"event loop lag {lag:.3f}s is over {self.max_loop_lag:g}s"
        return self.source.liveness(now)

    def route(self, path: bytes) -> Reply:
        try:
            if path == b"/livez":
                live, reason = self.liveness()
                return Reply(200 if live else 503, f"{'ok' if live else reason}\n".encode())
            if path == b"/readyz":
                ready = self.source.readiness()
                return Reply(200 if ready else 503, b"ready\n" if ready else b"not ready\n")
            if path == b"/metrics":
                return Reply(200, self.source.metrics.render().encode(), _METRICS_TYPE)
        except Exception:
            logger.exception("health endpoint %s failed", path.decode("latin-1"))
            return Reply(500, b"internal error\n")
        return Reply(404, b"not found (/livez, /readyz, /metrics)\n")

    # ------------------------------------------------------------ serving

    async def serve(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        task_status: anyio.abc.TaskStatus[int] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        """Listen on ``host:port`` and serve until cancelled; reports the bound port.

        Raises:
            OSError: the address cannot be bound (before ``task_status.started``).
        """
        listener = await anyio.create_tcp_listener(local_host=host, local_port=port)
        async with listener, anyio.create_task_group() as tg:
            await tg.start(self.lag.run)
            for sub in listener.listeners:
                tg.start_soon(self._accept_loop, sub, tg)
            bound = int(listener.extra(SocketAttribute.local_port))
            logger.info("health server listening on %s port %d", host, bound)
            task_status.started(bound)

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
                logger.warning("health server: accept failed (%s); pausing", exc)
                await anyio.sleep(_ACCEPT_PAUSE)
                continue
            if self.connections >= self.max_connections:
                self.refused += 1
                logger.debug(
                    "health server: %d connections open; closing a new one", self.connections
                )
                await stream.aclose()
                continue
            self.connections += 1
            tg.start_soon(self._connection, stream)

    async def _connection(self, stream: anyio.abc.SocketStream) -> None:
        try:
            await serve_connection(
                stream,
                self.route,
                timeout=self.request_timeout,
                max_header_bytes=self.max_header_bytes,
                max_requests=self.max_requests,
            )
        finally:
            self.connections -= 1


async def serve_health(
    worker: HealthSource,
    host: str = "127.0.0.1",
    port: int = 0,
    *,
    max_loop_lag: float = 5.0,
    lag_interval: float = 0.25,
    lag_window: float = 1.0,
    request_timeout: float = 10.0,
    max_connections: int = 32,
    max_header_bytes: int = 8192,
    max_requests_per_connection: int = 100,
    task_status: anyio.abc.TaskStatus[int] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Serve ``GET /livez``, ``/readyz`` and ``/metrics`` for ``worker`` until cancelled.

    Start it with ``port = await task_group.start(serve_health, worker)``; it may start
    before ``worker.run()`` (``/readyz`` is then 503).

    * ``/livez``: 200 while the event loop's lag is at most ``max_loop_lag`` seconds and
      ``worker.liveness()`` holds, else 503 with the reason in the body;
    * ``/readyz``: 200 while ``worker.readiness()`` holds, else 503;
    * ``/metrics``: ``worker.metrics`` in the Prometheus text format 0.0.4.

    HEAD works like GET; other methods get 405, request bodies 413, headers over
    ``max_header_bytes`` 431, other paths 404.

    Args:
        worker: what to report on: a :class:`~sepp_anyio.Worker`, or any object with its
            ``readiness()``, ``liveness(now)`` and ``metrics``.
        host: address to bind; loopback by default. ``"0.0.0.0"`` or ``"::"`` expose it.
        port: TCP port; 0 picks a free one (reported through ``task_status``).
        max_loop_lag: seconds of event loop lag past which ``/livez`` fails.
        lag_interval: how often the lag is sampled.
        lag_window: how long a lag sample counts (``/livez`` reports the worst one of
            this window, so it stays 503 that long after the loop was blocked).
        request_timeout: bound on each request/response exchange of a connection, and on
            an idle kept-alive connection; past it the connection is closed.
        max_connections: connections served at once; more are closed at once.
        max_header_bytes: bound on a request's line and headers.
        max_requests_per_connection: exchanges per kept-alive connection.

    Raises:
        ValueError, TypeError: a bad limit.
        OSError: the address cannot be bound.

    Cancellation: the only way to stop it; open connections are closed.
    """
    server = HealthServer(
        worker,
        max_loop_lag=max_loop_lag,
        lag_interval=lag_interval,
        lag_window=lag_window,
        request_timeout=request_timeout,
        max_connections=max_connections,
        max_header_bytes=max_header_bytes,
        max_requests_per_connection=max_requests_per_connection,
    )
    await server.serve(host, port, task_status=task_status)
