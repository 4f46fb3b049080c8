"""Command line of the reference server: ``python -m sepp_anyio.server``.

::

    python -m sepp_anyio.server                      # ./sepp-data.sqlite3 on 127.0.0.1:50051
    python -m sepp_anyio.server --memory --port 0    # in memory, on a free port
    python -m sepp_anyio.server --config sepp.toml --api-key s3cret \
        --tls-cert cert.pem --tls-key key.pem

Where each setting comes from, first match wins:

* address: ``--host`` / ``--port``; else ``[server] listen_addr`` if the config sets it to
  something other than the real server's default (``0.0.0.0:50051``); else
  ``127.0.0.1:50051``.  A development server listens on loopback unless told otherwise.
* storage: ``--memory`` (nothing survives a restart) or ``--db PATH``; else
  ``[server] db_path`` if the config sets it to something other than the real server's
  default (``./sepp-data``, a fjall directory there); else ``./sepp-data.sqlite3``.
  ``[storage] persist_mode`` picks SQLite's ``synchronous``: ``buffer`` is NORMAL, the others
  FULL (fsync before every reply).
* API keys: ``--api-key`` (repeatable) replaces ``[auth] api_keys``.
* dead letters: ``--dead-letter-retention SECONDS`` replaces ``[storage]
  dead_letter_retention_ms`` (default 0: a dead-lettered job is deleted, and ``sepp-anyio dlq
  drain`` finds nothing).
* TLS: ``--tls-cert`` and ``--tls-key`` (both or neither); else ``[server] tls_cert_path`` and
  ``tls_key_path``.
* everything else: the config file (``--config``, else ``SEPP_CONFIG``, else ``./sepp.toml`` if
  it exists) with ``SEPP_<SECTION>__<FIELD>`` environment overrides on top.

Once listening, one line ``queue server listening on HOST:PORT`` (the real port, also for
``--port 0``) is logged to stderr, whatever ``--log-level`` says.  SIGINT or SIGTERM stops the
server gracefully (parked reserves answer empty; calls in progress get ``--shutdown-grace``
seconds) and the process exits 0; a second signal during that stop kills it at once.

Exit status: 0 after a signal, 2 for bad arguments or configuration (the message names the
key), 1 when the server cannot run (address in use, unusable database).  Every failure is
one line on stderr, ``<prog>: error: ...``; for an address in use it names the address and
``--port``.
"""

from __future__ import annotations

import argparse
import dataclasses
import errno
import logging
import math
import os
import re
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from functools import partial
from types import TracebackType
from typing import Any, Final, Self, final

import anyio

from .._version import __version__
from ._config._config import ServerConfig
from ._config._sections import I64_MAX, ApiKey, AuthConfig, ServerSection
from ._errors import ConfigError
from ._network._network import DEFAULT_SHUTDOWN_GRACE, LISTENING_LOGGER, default_backend, serve
from ._store._memory import MemoryStore
from ._store._sqlite import SqliteStore
from ._store._store import Store

__all__ = [
    "DEFAULT_DB_PATH",
    "DEFAULT_HOST",
    "DEFAULT_PORT",
    "ServerProcess",
    "build_parser",
    "main",
]

logger = logging.getLogger("sepp_anyio.server")

DEFAULT_HOST: Final = "127.0.0.1"
DEFAULT_PORT: Final = 50051
DEFAULT_DB_PATH: Final = "./sepp-data.sqlite3"
_PROG: Final = "python -m sepp_anyio.server"
_LOG_FORMAT: Final = "%(asctime)s %(levelname)s %(name)s: %(message)s"
_LOG_LEVELS: Final = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


def _port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {text!r}") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"must be 0-65535 (0 = any free port), not {value}")
    return value


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, not {text}")
    return value


def _retention(text: str) -> int:
    """``--dead-letter-retention SECONDS``: finite seconds >= 0, as whole milliseconds."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not (math.isfinite(value) and value >= 0):
        raise argparse.ArgumentTypeError(f"must be a finite number of seconds >= 0, not {text}")
    ms = round(value * 1000)
    if ms > I64_MAX:
        raise argparse.ArgumentTypeError(f"must be at most {I64_MAX // 1000} seconds, not {text}")
    if value > 0 and ms == 0:
        raise argparse.ArgumentTypeError(f"must be 0 (off) or at least 0.001 s, not {text}")
    return ms


def _duration_ms(*, zero: bool) -> Callable[[str], int]:
    """An option's type: finite seconds as whole milliseconds, at least 0.001 s (or 0 when
    ``zero`` means off)."""

    def parse(text: str) -> int:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
        if not (math.isfinite(value) and value >= 0):
            raise argparse.ArgumentTypeError(f"must be a finite number of seconds >= 0, not {text}")
        ms = round(value * 1000)
        if ms > I64_MAX:
            raise argparse.ArgumentTypeError(
                f"must be at most {I64_MAX // 1000} seconds, not {text}"
            )
        if ms == 0 and not (zero and value == 0):
            least = "0 (off) or at least 0.001 s" if zero else "at least 0.001 s"
            raise argparse.ArgumentTypeError(f"must be {least}, not {text}")
        return ms

    return parse


def _connections(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


def _add_connection_options(parser: argparse.ArgumentParser) -> None:
    """The options of idle and slow connections and the caps (each replaces its
    ``[server]`` key; the defaults are the keys')."""
    defaults = ServerSection()
    group = parser.add_argument_group(
        "connections",
        "idle and slow connections, and the connection caps (each option replaces its "
        "[server] key)",
    )
    group.add_argument(
        "--handshake-timeout",
        type=_duration_ms(zero=False),
        metavar="SECONDS",
        dest="handshake_timeout_ms",
        help="close a connection whose HTTP/2 preface and first SETTINGS have not all "
        "arrived this long after accept, however they trickle in ([server] "
        f"handshake_timeout_ms; default: {defaults.handshake_timeout_ms / 1000:g})",
    )
    group.add_argument(
        "--idle-timeout",
        type=_duration_ms(zero=True),
        metavar="SECONDS",
        dest="idle_timeout_ms",
        help="GOAWAY and close a connection without calls this long; 0: never ([server] "
        f"idle_timeout_ms; default: {defaults.idle_timeout_ms / 1000:g})",
    )
    group.add_argument(
        "--max-connections",
        type=_connections,
        metavar="N",
        help=f"connections at once ([server] max_connections; default: {defaults.max_connections})",
    )
    group.add_argument(
        "--max-connections-per-ip",
        type=_connections,
        metavar="N",
        help="connections at once from one client address ([server] "
        f"max_connections_per_ip; default: {defaults.max_connections_per_ip})",
    )
    group.add_argument(
        "--evict-when-full",
        action=argparse.BooleanOptionalAction,
        help="when a cap is full, admit the newcomer and evict the connection that has done "
        "least (one still in its handshake, else the one idle longest; never one with a "
        "call running); --no-evict-when-full refuses the newcomer instead ([server] "
        f"evict_when_full; default: {'on' if defaults.evict_when_full else 'off'})",
    )


#: The ``[server]`` keys the connection options replace (their ``dest`` is the key).
_CONNECTION_KEYS: Final = (
    "handshake_timeout_ms",
    "idle_timeout_ms",
    "max_connections",
    "max_connections_per_ip",
    "evict_when_full",
)


def build_parser(prog: str | None = None) -> argparse.ArgumentParser:
    """The argument parser (``prog`` is the command name shown in usage and errors)."""
    parser = argparse.ArgumentParser(
        prog=prog or _PROG,
        description=(
            "Run the sepp reference server (sepp.v1.QueueService and grpc.health.v1 over "
            "gRPC). Env overrides SEPP_<SECTION>__<FIELD> apply on top of the config file."
        ),
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    parser.add_argument(
        "--config",
        metavar="FILE",
        help="TOML config ([server] [auth] [limits] [storage] [[queues]]); "
        "default: $SEPP_CONFIG, else ./sepp.toml if it exists",
    )
    parser.add_argument(
        "--host", help=f"address to listen on (default: {DEFAULT_HOST}, or server.listen_addr)"
    )
    parser.add_argument(
        "--port",
        type=_port,
        help=f"TCP port, 0 for any free one (default: {DEFAULT_PORT}, or server.listen_addr)",
    )
    storage = parser.add_mutually_exclusive_group()
    storage.add_argument(
        "--db",
        metavar="PATH",
        help=f"SQLite database file (default: {DEFAULT_DB_PATH}, or server.db_path)",
    )
    storage.add_argument(
        "--memory", action="store_true", help="keep everything in memory (lost on exit)"
    )
    parser.add_argument(
        "--api-key",
        action="append",
        metavar="KEY",
        dest="api_keys",
        help="accept this API key (repeatable; replaces [auth] api_keys)",
    )
    parser.add_argument(
        "--dead-letter-retention",
        type=_retention,
        metavar="SECONDS",
        dest="dead_letter_retention_ms",
        help="keep dead letters this long, for 'sepp-anyio dlq drain' (replaces [storage] "
        "dead_letter_retention_ms; default 0: a dead-lettered job is deleted)",
    )
    parser.add_argument("--tls-cert", metavar="PEM", help="TLS certificate chain (with --tls-key)")
    parser.add_argument("--tls-key", metavar="PEM", help="TLS private key (with --tls-cert)")
    parser.add_argument(
        "--shutdown-grace",
        type=_seconds,
        default=DEFAULT_SHUTDOWN_GRACE,
        metavar="SECONDS",
        help=f"time calls in progress get to finish on shutdown (default: "
        f"{DEFAULT_SHUTDOWN_GRACE:g})",
    )
    parser.add_argument(
        "--backend",
        choices=("asyncio", "trio"),
        default=default_backend(),
        help="event loop to run on (default: $SEPP_SERVER_BACKEND, else asyncio; trio must "
        "be installed for trio)",
    )
    parser.add_argument(
        "--log-level",
        type=str.upper,
        choices=_LOG_LEVELS,
        default="INFO",
        help="logging level (default: INFO)",
    )
    _add_connection_options(parser)
    return parser


@dataclasses.dataclass(frozen=True, kw_only=True)
class _Settings:
    config: ServerConfig
    host: str
    port: int
    db_path: str | None  # None: memory
    tls_cert: str | None
    tls_key: str | None
    shutdown_grace: float

    def store(self) -> Store:
        if self.db_path is None:
            return MemoryStore()
        return SqliteStore(self.db_path, synchronous=self.config.storage.sqlite_synchronous)


def _split_listen_addr(value: str) -> tuple[str, int]:
    host, sep, port_text = value.rpartition(":")
    if not sep or not host or not port_text.isdigit() or int(port_text) > 65535:
        raise ConfigError("server.listen_addr", f"must be HOST:PORT, not {value!r}")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return host, int(port_text)


def _resolve(args: argparse.Namespace, env: Mapping[str, str]) -> _Settings:
    """Merge flags, config file and environment (see the module docstring).

    Raises:
        ConfigError: the configuration is invalid; the message names the key.
    """
    config = ServerConfig.from_sources(args.config, env)
    if args.api_keys is not None:
        auth = AuthConfig(api_keys=tuple(ApiKey(key) for key in args.api_keys))
        config = dataclasses.replace(config, auth=auth)
    if args.dead_letter_retention_ms is not None:
        storage = dataclasses.replace(
            config.storage, dead_letter_retention_ms=args.dead_letter_retention_ms
        )
        config = dataclasses.replace(config, storage=storage)
    flags = {key: getattr(args, key) for key in _CONNECTION_KEYS if getattr(args, key) is not None}
    if flags:
        config = dataclasses.replace(config, server=dataclasses.replace(config.server, **flags))
    defaults = ServerSection()
    section = config.server

    host, port = DEFAULT_HOST, DEFAULT_PORT
    if section.listen_addr != defaults.listen_addr:
        host, port = _split_listen_addr(section.listen_addr)
    host = args.host if args.host is not None else host
    port = args.port if args.port is not None else port

    db_path: str | None = DEFAULT_DB_PATH
    if args.memory:
        db_path = None
    elif args.db is not None:
        db_path = args.db
    elif section.db_path != defaults.db_path:
        db_path = section.db_path

    tls_cert, tls_key = args.tls_cert, args.tls_key
    if (tls_cert is None) != (tls_key is None):
        given, missing = (
            ("--tls-cert", "--tls-key") if tls_key is None else ("--tls-key", "--tls-cert")
        )
        raise ConfigError(missing, f"is required with {given}")
    if tls_cert is None:
        tls_cert, tls_key = section.tls_cert_path, section.tls_key_path
    return _Settings(
        config=config,
        host=host,
        port=port,
        db_path=db_path,
        tls_cert=tls_cert,
        tls_key=tls_key,
        shutdown_grace=args.shutdown_grace,
    )


def _configure_logging(level: str) -> None:
    root = logging.getLogger()
    if not root.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter(_LOG_FORMAT))
        root.addHandler(handler)
    root.setLevel(level)
    # Tests and tools wait for the listening line: it is printed at any --log-level.
    logging.getLogger(LISTENING_LOGGER).setLevel(logging.INFO)


def _signals() -> AbstractContextManager[Any]:
    try:
        return anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM)
    except NotImplementedError:  # Windows: Ctrl-C arrives as KeyboardInterrupt instead
        return nullcontext(None)


async def _run(settings: _Settings) -> None:
    config = settings.config
    keys = config.auth.api_keys
    retention_ms = config.storage.dead_letter_retention_ms
    logger.info(
        "storage: %s; dead letters: %s; auth: %s; tls: %s",
        "memory (lost on exit)"
        if settings.db_path is None
        else f"sqlite {settings.db_path} (synchronous={config.storage.sqlite_synchronous})",
        f"kept {retention_ms / 1000:g} s"
        if retention_ms
        else "not kept (--dead-letter-retention SECONDS keeps them)",
        "off" if keys is None else f"{len(keys)} key(s)" if keys else "on, no keys: refusing all",
        "on" if settings.tls_cert is not None else "off",
    )
    async with anyio.create_task_group() as tg:
        # The receiver is open before the server starts, so an early SIGTERM is a graceful stop
        # too.  Leaving the `with` restores the default handlers: a second signal kills.
        with _signals() as signals:
            await tg.start(
                partial(
                    serve,
                    config,
                    host=settings.host,
                    port=settings.port,
                    store=settings.store(),
                    tls_cert=settings.tls_cert,
                    tls_key=settings.tls_key,
                    shutdown_grace=settings.shutdown_grace,
                )
            )
            if signals is None:
                await anyio.sleep_forever()
            async for signum in signals:
                logger.info("%s received; shutting down", signal.Signals(signum).name)
                break
        tg.cancel_scope.cancel()
    logger.info("queue server stopped")


def _leaf(error: BaseException) -> BaseException:
    # A lone exception may arrive wrapped in task-group exception groups.
    while isinstance(error, BaseExceptionGroup) and len(error.exceptions) == 1:
        error = error.exceptions[0]
    return error


def main(argv: Sequence[str] | None = None, *, prog: str | None = None) -> int:
    """Run the server as the command line says; return the exit status.

    Blocks until SIGINT/SIGTERM (then 0).  Returns 2 for bad arguments or configuration, 1
    when the server cannot run.  ``--help`` and ``--version`` print and return 0.  Meant to
    be delegated to by other commands (``prog`` names them in messages).
    """
    parser = build_parser(prog)
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, --version, or a usage error (already printed)
        return exc.code if isinstance(exc.code, int) else 2
    _configure_logging(args.log_level)
    try:
        settings = _resolve(args, os.environ)
    except ConfigError as bad:
        return _config_error(parser, bad)
    try:
        anyio.run(_run, settings, backend=args.backend)
    except KeyboardInterrupt:
        return 130
    except BaseException as raw:
        error = _leaf(raw)
        if isinstance(error, ConfigError):  # unusable TLS files
            return _config_error(parser, error)
        if isinstance(error, KeyboardInterrupt):
            return 130
        if isinstance(error, sqlite3.Error):
            return _cannot_run(parser, f"database {settings.db_path}: {error}")
        if isinstance(error, OSError) and error.errno == errno.EADDRINUSE:
            address = f"[{settings.host}]" if ":" in settings.host else settings.host
            return _cannot_run(
                parser,
                f"cannot listen on {address}:{settings.port}: the address is already in use "
                "(another server is running there?); choose another port with --port PORT, "
                "or --port 0 for any free one",
            )
        if isinstance(error, OSError | RuntimeError):
            return _cannot_run(parser, str(error))
        raise
    return 0


def _error_line(parser: argparse.ArgumentParser, message: str) -> None:
    text = " ".join(message.split())
    print(f"{parser.prog}: error: {text}", file=sys.stderr, flush=True)


def _config_error(parser: argparse.ArgumentParser, error: ConfigError) -> int:
    _error_line(parser, str(error))
    return 2


def _cannot_run(parser: argparse.ArgumentParser, message: str) -> int:
    _error_line(parser, f"the server cannot run: {message}")
    return 1


# --------------------------------------------------------------------------- subprocess helper

_LISTENING = re.compile(
    r"queue server listening on (?:\[(?P<v6>[^\]]+)\]|(?P<host>[^\s:]+)):(?P<port>\d+)"
)


@final
class ServerProcess:
    """This command line in a subprocess, for tests, benchmarks and scripts.

    ::

        with ServerProcess("--memory", "--port", "0") as server:
            async with sepp_anyio.connect(server.address) as client: ...

    Args:
        args: command-line arguments (give ``--port 0`` for a free port).
        env: the child's environment (default: this process's).
        python: the interpreter (default: this one).
        cwd: the child's working directory (default: this one); it decides whether a
            ``./sepp.toml`` is read and where relative paths point.

    :meth:`start` returns once the child has logged its listening line (its stderr is read
    by a thread and kept in :attr:`output`).  :meth:`stop` sends SIGTERM (a graceful stop)
    and returns the exit status; :meth:`kill` sends SIGKILL.  All methods block: from an
    event loop call them through ``anyio.to_thread.run_sync``.
    """

    def __init__(
        self,
        *args: str,
        env: Mapping[str, str] | None = None,
        python: str = sys.executable,
        cwd: str | os.PathLike[str] | None = None,
    ) -> None:
        self.args = list(args)
        self.env = dict(os.environ if env is None else env)
        self.python = python
        self.cwd = cwd
        self.process: subprocess.Popen[bytes] | None = None
        self.host = ""
        self.port = 0
        self._lines: list[str] = []
        self._changed = threading.Condition()
        self._reader: threading.Thread | None = None

    @property
    def address(self) -> str:
        """``host:port`` of the listening server."""
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"

    @property
    def pid(self) -> int:
        if self.process is None:
            raise RuntimeError("the server process is not running")
        return self.process.pid

    @property
    def output(self) -> str:
        """Everything the child wrote to stderr so far."""
        with self._changed:
            return "".join(self._lines)

    def start(self, timeout: float = 30.0) -> None:
        """Start the child; return once it listens.

        Raises:
            RuntimeError: it exited first, or did not listen within ``timeout`` seconds (the
                message has its output).
        """
        if self.process is not None:
            raise RuntimeError("the server process is already running")
        with self._changed:
            self._lines.clear()
        self.process = subprocess.Popen(
            [self.python, "-m", "sepp_anyio.server", *self.args],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            env=self.env,
            cwd=self.cwd,
        )
        self._reader = threading.Thread(
            target=self._read, args=(self.process,), name="sepp-server-stderr", daemon=True
        )
        self._reader.start()
        try:
            line = self.wait_for_line(_LISTENING.pattern, timeout)
        except BaseException:
            self.kill()
            raise
        match = _LISTENING.search(line)
        assert match is not None
        self.host = match["v6"] or match["host"]
        self.port = int(match["port"])

    def wait_for_line(self, pattern: str, timeout: float = 30.0) -> str:
        """Block until a line of stderr matches the regular expression; return it.

        Raises:
            RuntimeError: the child exited first, or ``timeout`` seconds passed.
        """
        regex = re.compile(pattern)
        deadline = time.monotonic() + timeout
        seen = 0
        with self._changed:
            while True:
                for line in self._lines[seen:]:
                    if regex.search(line):
                        return line
                seen = len(self._lines)
                reader = self._reader
                if reader is None or not reader.is_alive():
                    raise RuntimeError(
                        f"the server process ended without logging /{pattern}/; "
                        f"its output:\n{''.join(self._lines)}"
                    )
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise RuntimeError(
                        f"no line matching /{pattern}/ within {timeout} s; "
                        f"output so far:\n{''.join(self._lines)}"
                    )
                self._changed.wait(remaining)

    def _read(self, process: subprocess.Popen[bytes]) -> None:
        assert process.stderr is not None
        try:
            for raw in process.stderr:
                with self._changed:
                    self._lines.append(raw.decode("utf-8", "replace"))
                    self._changed.notify_all()
        finally:
            with self._changed:
                self._changed.notify_all()

    def stop(self, timeout: float = 30.0) -> int:
        """SIGTERM (graceful stop) and wait; SIGKILL after ``timeout`` s.  Returns the status."""
        process = self.process
        if process is None:
            return 0
        if process.poll() is None:
            process.terminate()
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        return self._reap()

    def wait(self, timeout: float | None = None) -> int:
        """Wait for the child to exit by itself; return its status.

        Raises:
            subprocess.TimeoutExpired: still running after ``timeout`` seconds.
        """
        process = self.process
        if process is None:
            return 0
        process.wait(timeout)
        return self._reap()

    def kill(self) -> int:
        """SIGKILL (no shutdown at all) and wait.  Returns the status."""
        process = self.process
        if process is None:
            return 0
        if process.poll() is None:
            process.kill()
        process.wait()
        return self._reap()

    def _reap(self) -> int:
        process, self.process = self.process, None
        assert process is not None
        if self._reader is not None:
            self._reader.join()
            self._reader = None
        if process.stderr is not None:
            process.stderr.close()
        return process.returncode

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
