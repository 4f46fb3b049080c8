"""Reference servers for the reliability scenarios.

* :func:`durable_server`: ``python -m sepp_anyio.server --db FILE`` in a subprocess (SQLite,
  fsync before every reply), dead-letter retention on: killable with SIGKILL, restartable
  on the same database.
* :class:`FaultServer`: the same engine and network server in a thread of this process,
  with hooks the subprocess cannot offer: answer the next calls with a chosen status
  (RESOURCE_EXHAUSTED, UNAVAILABLE) before they reach the engine, and send GOAWAY on
  every connection.

Both keep their jobs in a SQLite file, which the accounting reads (``_ledger``).
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import TracebackType
from typing import Any, Self

import anyio
import anyio.lowlevel

from sepp_anyio import StatusCode
from sepp_anyio.server import (
    Engine,
    EngineError,
    NetworkServer,
    ServerConfig,
    ServerProcess,
    SqliteStore,
    StorageConfig,
)
from sepp_anyio.server._engine._engine import rpc_of
from sepp_anyio.server._network._network import call_soon_threadsafe, default_backend

__all__ = ["RETENTION_ENV", "FaultServer", "durable_server", "start_process"]

#: Keep dead letters for an hour (off by default), so the accounting can see them.
RETENTION_ENV = {"SEPP_STORAGE__DEAD_LETTER_RETENTION_MS": "3600000"}

_METHODS = (
    "enqueue_batch",
    "enqueue_atomic",
    "reserve",
    "ack",
    "nack",
    "extend",
    "drain_dead_letters",
    "get_server_info",
)


def start_process(db: Path, *, port: int = 0, env: dict[str, str] | None = None) -> ServerProcess:
    """Start the server on ``db`` (blocking); dead-letter retention on."""
    server = ServerProcess(
        "--db",
        str(db),
        "--port",
        str(port),
        "--log-level",
        "WARNING",
        "--shutdown-grace",
        "1",
        env={**os.environ, **RETENTION_ENV, **(env or {})},
    )
    server.start()
    return server


@contextmanager
def durable_server(db: Path, *, env: dict[str, str] | None = None) -> Iterator[ServerProcess]:
    server = start_process(db, env=env)
    try:
        yield server
    finally:
        server.stop()


def _inject_faults(engine: Engine, owner: FaultServer) -> None:
    """Put ``owner``'s scripted failures in front of every RPC handler of ``engine``."""
    rpc = rpc_of(engine)
    for name in _METHODS:
        setattr(rpc, name, _faulty(owner, name, getattr(rpc, name)))


def _faulty(
    owner: FaultServer, name: str, method: Callable[[Any], Awaitable[Any]]
) -> Callable[[Any], Awaitable[Any]]:
    async def call(request: Any) -> Any:
        owner._maybe_fail(name)
        return await method(request)

    return call


class FaultServer:
    """A network reference server in a background thread, with fault hooks.

    ``fail_next(n, status)``: the next ``n`` QueueService calls (any RPC) are answered with
    ``status`` without reaching the engine.  ``goaway_all()``: an HTTP/2 GOAWAY (NO_ERROR,
    every stream processed) on every open connection; the connections stay up, clients are
    expected to move to new ones.  All methods are thread-safe.
    """

    def __init__(self, db: Path, config: ServerConfig | None = None) -> None:
        self.db = db
        self.config = config or ServerConfig(
            storage=StorageConfig(dead_letter_retention_ms=3_600_000)
        )
        self.port = 0
        self.failed: Counter[str] = Counter()
        self.goaways = 0
        self._lock = threading.Lock()
        self._fail_left = 0
        self._fail_status = StatusCode.UNAVAILABLE
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._token: anyio.lowlevel.EventLoopToken | None = None
        self._stop: anyio.Event | None = None
        self._server: NetworkServer | None = None
        self._error: BaseException | None = None
        self._exhausted = threading.Event()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    # ------------------------------------------------------------------ faults

    def fail_next(self, count: int, status: StatusCode) -> None:
        with self._lock:
            self._fail_left = count
            self._fail_status = status
            self._exhausted.clear()

    def wait_failures_done(self, timeout: float = 30.0) -> None:
        """Block until the scripted failures have all been served."""
        if not self._exhausted.wait(timeout):
            raise TimeoutError(f"the scripted failures were not all served within {timeout}s")

    def _maybe_fail(self, method: str) -> None:
        with self._lock:
            if self._fail_left <= 0:
                return
            self._fail_left -= 1
            status = self._fail_status
            self.failed[method] += 1
            if not self._fail_left:
                self._exhausted.set()
        raise EngineError(status, f"injected {status.name}")

    def goaway_all(self) -> int:
        """GOAWAY on every connection; returns how many got one."""
        token, server = self._token, self._server
        assert token is not None and server is not None

        done = threading.Event()
        count = [0]

        def send() -> None:
            connections = server.connections
            for connection in connections:
                connection.goaway()
            count[0] = len(connections)
            done.set()

        call_soon_threadsafe(token, send)
        if not done.wait(10):
            raise TimeoutError("the server's loop did not run the GOAWAY")
        self.goaways += count[0]
        return count[0]

    def connections(self) -> int:
        server = self._server
        return 0 if server is None else len(server.connections)

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="fault-server", daemon=True)
        self._thread.start()
        if not self._ready.wait(30):
            raise RuntimeError("the fault server did not start")
        if self._error is not None:
            raise self._error

    def stop(self) -> None:
        thread, token, stop = self._thread, self._token, self._stop
        if thread is None:
            return
        if token is not None and stop is not None:
            with contextlib.suppress(RuntimeError):
                call_soon_threadsafe(token, stop.set)
        thread.join(30)
        self._thread = None
        if self._error is not None:
            raise self._error

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

    def _run(self) -> None:
        try:
            anyio.run(self._main, backend=default_backend())
        except BaseException as exc:
            self._error = exc
        finally:
            self._ready.set()

    async def _main(self) -> None:
        self._token = anyio.lowlevel.current_token()
        self._stop = anyio.Event()
        async with Engine(self.config, SqliteStore(str(self.db))) as engine:
            _inject_faults(engine, self)
            async with NetworkServer(engine, port=0, shutdown_grace=1.0) as server:
                self.port = server.port
                self._server = server
                self._ready.set()
                try:
                    await self._stop.wait()
                finally:
                    self._server = None
