"""Command line of the reference server: ``python -m sepp_anyio.server``, ``sepp-anyio server``.

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
* web console: ``--ui-port PORT`` replaces ``[ui] port`` (default: none, no console); it
  listens on the server's host and needs the extra ``sepp-anyio[ui]`` (Jinja2).
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
import signal
import sqlite3
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from functools import partial
from typing import Any, Final

import anyio

from .._model._groups import unwrap
from .._version import __version__
from ..server._config._config import ServerConfig
from ..server._config._sections import I64_MAX, ApiKey, AuthConfig, ServerSection
from ..server._console import require_jinja2
from ..server._errors import ConfigError
from ..server._network._network import (
    DEFAULT_SHUTDOWN_GRACE,
    LISTENING_LOGGER,
    default_backend,
    serve,
)
from ..server._store._memory import MemoryStore
from ..server._store._sqlite import SqliteStore
from ..server._store._store import Store
from ._common import (
    BACKENDS,
    EXIT_FAILURE,
    EXIT_USAGE,
    LOG_LEVELS,
    configure_logging,
    error_line,
    nonnegative_seconds,
    port_number,
)

__all__ = [
    "DEFAULT_DB_PATH",
    "DEFAULT_HOST",
    "DEFAULT_PORT",
    "build_parser",
    "main",
]

logger = logging.getLogger("sepp_anyio.server")

DEFAULT_HOST: Final = "127.0.0.1"
DEFAULT_PORT: Final = 50051
DEFAULT_DB_PATH: Final = "./sepp-data.sqlite3"
_PROG: Final = "python -m sepp_anyio.server"


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
        type=port_number,
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
        type=_duration_ms(zero=True),
        metavar="SECONDS",
        dest="dead_letter_retention_ms",
        help="keep dead letters this long, for 'sepp-anyio dlq drain' (replaces [storage] "
        "dead_letter_retention_ms; default 0: a dead-lettered job is deleted)",
    )
    parser.add_argument(
        "--ui-port",
        type=port_number,
        metavar="PORT",
        help="serve the web console on this port of --host (0: any free one; replaces [ui] "
        "port; needs sepp-anyio[ui]); default: no console",
    )
    parser.add_argument("--tls-cert", metavar="PEM", help="TLS certificate chain (with --tls-key)")
    parser.add_argument("--tls-key", metavar="PEM", help="TLS private key (with --tls-cert)")
    parser.add_argument(
        "--shutdown-grace",
        type=nonnegative_seconds,
        default=DEFAULT_SHUTDOWN_GRACE,
        metavar="SECONDS",
        help=f"time calls in progress get to finish on shutdown (default: "
        f"{DEFAULT_SHUTDOWN_GRACE:g})",
    )
    parser.add_argument(
        "--backend",
        choices=BACKENDS,
        default=default_backend(),
        help="event loop to run on (default: $SEPP_SERVER_BACKEND, else asyncio; trio must "
        "be installed for trio)",
    )
    parser.add_argument(
        "--log-level",
        type=str.upper,
        choices=LOG_LEVELS,
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
    if args.ui_port is not None:
        config = dataclasses.replace(config, ui=dataclasses.replace(config.ui, port=args.ui_port))
    if config.ui.port is not None:
        require_jinja2()  # before anything starts: a missing extra is a usage error
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
    configure_logging(level)
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
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
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
        # A lone exception may arrive wrapped in task-group exception groups.
        error = unwrap(raw)
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


def _config_error(parser: argparse.ArgumentParser, error: ConfigError) -> int:
    error_line(parser.prog, str(error))
    return EXIT_USAGE


def _cannot_run(parser: argparse.ArgumentParser, message: str) -> int:
    error_line(parser.prog, f"the server cannot run: {message}")
    return EXIT_FAILURE
