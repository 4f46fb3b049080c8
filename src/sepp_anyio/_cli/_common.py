"""Pieces shared by the ``sepp-anyio`` subcommands: options, logging, errors, running.

Every subcommand follows the same rules:

* exit status 0 on success, 2 for bad input on the command line (an unknown target, bad
  JSON, a value out of range: detected before anything is sent), 1 when the work itself
  fails (the server is unreachable, refuses the request, ...);
* a failure is reported as **one line** on stderr, ``<prog>: error: <what>``, never as a
  traceback (a traceback is printed only for an exception raised by the user's own code,
  where it is the useful part);
* connection options are the same everywhere (``--address``, ``--api-key``, ``--tls``, ...),
  with ``SEPP_ADDR`` and ``SEPP_API_KEY`` as environment defaults;
* when the reader of stdout goes away (``sepp-anyio info | head -1``), the command stops
  quietly with status 141 (128 + SIGPIPE, what a shell reports for a command killed by
  SIGPIPE), after pointing stdout at ``os.devnull`` as the Python documentation's note on
  SIGPIPE recommends, so the interpreter's last flush cannot fail again.
"""

from __future__ import annotations

import argparse
import importlib.util
import logging
import os
import ssl
import sys
from collections.abc import Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Final, NoReturn

import anyio

from .._client import Client, check_api_key, connect
from .._model._checks import Minimum, check_queue_name, check_str, seconds_problem
from .._model._errors import (
    ConnectError,
    InvalidArgumentError,
    JobRejectedError,
    SeppError,
    UnauthenticatedError,
)
from .._model._groups import unwrap
from .._model._retries import RetryPolicy
from .._transport._target import parse_target
from ._pipe import EXIT_BROKEN_PIPE, stdout_closed

__all__ = [
    "BACKENDS",
    "DEFAULT_ADDRESS",
    "EXIT_BROKEN_PIPE",
    "EXIT_FAILURE",
    "EXIT_USAGE",
    "CliError",
    "Parser",
    "add_backend_option",
    "add_connection_options",
    "add_log_level_option",
    "check_backend",
    "check_connection_options",
    "configure_logging",
    "describe",
    "error_line",
    "lease_seconds",
    "nonempty_text",
    "nonnegative_seconds",
    "open_client",
    "parse",
    "port_number",
    "positive_int",
    "positive_seconds",
    "queue_name",
    "queue_names",
    "run_async",
    "stdout_closed",
    "table",
]

EXIT_FAILURE: Final = 1
EXIT_USAGE: Final = 2
DEFAULT_ADDRESS: Final = "127.0.0.1:50051"
BACKENDS: Final = ("asyncio", "trio")
LOG_LEVELS: Final = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
_LOG_FORMAT: Final = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class CliError(Exception):
    """A failure to report as one line (``<prog>: error: <message>``) and an exit status."""

    def __init__(self, message: str, code: int = EXIT_FAILURE) -> None:
        super().__init__(message)
        self.message = message
        self.code = code


class Parser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose usage errors raise :class:`CliError` (status 2).

    argparse would print the (possibly long) usage and exit by itself; raising instead
    keeps the report to one line and lets ``main`` return the status (so the dispatcher
    and the tests can call it).
    """

    def error(self, message: str) -> NoReturn:
        raise CliError(f"{message} (see '{self.prog} --help')", EXIT_USAGE)


def error_line(prog: str, message: str) -> None:
    """Print ``<prog>: error: <message>`` (one line, whatever the message holds)."""
    text = " ".join(str(message).split())
    print(f"{prog}: error: {text}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------- argument types


def positive_int(text: str) -> int:
    """argparse type: an integer >= 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, not {value}")
    return value


def port_number(text: str) -> int:
    """argparse type: a TCP port, 0 to 65535 (0: any free port)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {text!r}") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"must be 0-65535 (0 = any free port), not {value}")
    return value


def _seconds(text: str, minimum: Minimum) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    problem = seconds_problem(value, minimum)
    if problem is not None:
        raise argparse.ArgumentTypeError(f"{problem}, not {text}")
    return value


def positive_seconds(text: str) -> float:
    """argparse type: finite seconds > 0."""
    return _seconds(text, "positive")


def nonnegative_seconds(text: str) -> float:
    """argparse type: finite seconds >= 0."""
    return _seconds(text, "zero")


def lease_seconds(text: str) -> float:
    """argparse type: finite seconds >= 0.001 (a duration sent to the server, which counts
    whole milliseconds: a lease)."""
    return _seconds(text, "millisecond")


# The argument types below apply the library's own rules (``_model._checks``), so that
# the command refuses, before connecting, exactly what the client or the worker would
# refuse after; argparse names the option in front of the rule's phrase.


def _refused(exc: ValueError | TypeError) -> argparse.ArgumentTypeError:
    return argparse.ArgumentTypeError(str(exc))


def queue_name(value: str) -> str:
    """argparse type: one queue name the server accepts (no '/', not '.' or '..', ...)."""
    try:
        return check_queue_name(value, "queue name")
    except (InvalidArgumentError, TypeError) as exc:
        raise _refused(exc) from None


def queue_names(value: str) -> list[str]:
    """argparse type: queue names separated by commas (``emails,reports``), each one a
    :func:`queue_name`; none may be empty."""
    names = [name.strip() for name in value.split(",")]
    if not all(names):
        raise argparse.ArgumentTypeError(f"a queue name must not be empty, got {value!r}")
    return [queue_name(name) for name in names]


def nonempty_text(value: str) -> str:
    """argparse type: a non-empty string the protocol can carry (UTF-8)."""
    try:
        return check_str(value, "the value")
    except (InvalidArgumentError, TypeError) as exc:
        raise _refused(exc) from None


# --------------------------------------------------------------------------- shared options


def add_connection_options(
    parser: argparse.ArgumentParser, *, address_help: str | None = None
) -> None:
    """``--address``, ``--api-key``, ``--tls``, ``--tls-ca-cert``, ``--tls-server-name``,
    ``--connect-timeout``.

    With ``address_help``, ``--address`` has no default (None) and that help text.
    """
    group = parser.add_argument_group("connection")
    group.add_argument(
        "--address",
        "-a",
        default=os.environ.get("SEPP_ADDR") or DEFAULT_ADDRESS if address_help is None else None,
        metavar="ADDR",
        help="server address: host:port, http://host:port, or https://host:port for TLS "
        + (f"(default: $SEPP_ADDR, else {DEFAULT_ADDRESS})" if address_help is None else "")
        + (address_help or ""),
    )
    group.add_argument(
        "--api-key",
        default=os.environ.get("SEPP_API_KEY") or None,
        metavar="KEY",
        help="API key, sent as 'authorization: Bearer KEY' (default: $SEPP_API_KEY)",
    )
    group.add_argument("--tls", action="store_true", help="use TLS with the system's trusted roots")
    group.add_argument(
        "--tls-ca-cert",
        metavar="PEM",
        help="trust this CA certificate file instead of the system roots (turns TLS on)",
    )
    group.add_argument(
        "--tls-server-name",
        metavar="NAME",
        help="verify the server's certificate against this name (turns TLS on)",
    )
    group.add_argument(
        "--connect-timeout",
        type=positive_seconds,
        default=5.0,
        metavar="SECONDS",
        help="give up connecting after this long (default: 5)",
    )


def add_backend_option(parser: argparse.ArgumentParser, *, default: str = "asyncio") -> None:
    """``--backend trio|asyncio``."""
    parser.add_argument(
        "--backend",
        choices=BACKENDS,
        default=default,
        help=f"event loop to run on (default: {default}; trio must be installed for trio)",
    )


def add_log_level_option(parser: argparse.ArgumentParser, *, default: str) -> None:
    """``--log-level``."""
    parser.add_argument(
        "--log-level",
        type=str.upper,
        choices=LOG_LEVELS,
        default=default,
        metavar="LEVEL",
        help=f"logging level: {', '.join(LOG_LEVELS)} (default: {default})",
    )


def check_backend(backend: str) -> None:
    """Raise a usage error if ``backend`` cannot run here (trio not installed)."""
    if backend == "trio" and importlib.util.find_spec("trio") is None:
        raise CliError("--backend trio needs trio: pip install trio", EXIT_USAGE)


# --------------------------------------------------------------------------- logging


class _ReportedByTheCli(logging.Filter):
    """Drops the client's own "could not connect" log record: the command reports that
    failure itself, as its one error line, and the same message twice is noise."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (
            record.name == "sepp_anyio"
            and isinstance(record.msg, str)
            and record.msg.startswith("could not connect to the sepp server")
        )


def configure_logging(level: str) -> None:
    """Log to stderr at ``level`` (unless the application configured logging already)."""
    root = logging.getLogger()
    if not root.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter(_LOG_FORMAT))
        handler.addFilter(_ReportedByTheCli())
        root.addHandler(handler)
    root.setLevel(level)


# --------------------------------------------------------------------------- connecting


def _read_ca(path: str) -> str:
    try:
        return Path(path).read_text(encoding="ascii")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise CliError(f"--tls-ca-cert: cannot read {path!r}: {reason}", EXIT_USAGE) from None


def check_connection_options(args: argparse.Namespace) -> None:
    """Check the connection options before anything else happens (no I/O but reading the
    ``--tls-ca-cert`` file), by the rules ``connect`` applies.

    Raises:
        CliError: status 2, naming the option: a malformed ``--address`` (or
            ``$SEPP_ADDR``), an ``--api-key`` a header cannot carry, a ``--tls-ca-cert``
            that cannot be read or holds no certificate, an empty ``--tls-server-name``.
    """
    try:
        parse_target(args.address, name="--address")
    except InvalidArgumentError as exc:
        raise CliError(str(exc), EXIT_USAGE) from None
    if args.api_key is not None:
        try:
            check_api_key(args.api_key)
        except InvalidArgumentError as exc:
            raise CliError(f"--api-key (or $SEPP_API_KEY): {exc}", EXIT_USAGE) from None
    if args.tls_server_name is not None and not args.tls_server_name.strip():
        raise CliError("--tls-server-name must not be empty", EXIT_USAGE)
    if args.tls_ca_cert is not None:
        pem = _read_ca(args.tls_ca_cert)
        try:
            # What connect() does with it; an unusable file would fail there as an
            # ssl.SSLError, a traceback rather than an error line.
            ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cadata=pem)
        except (ssl.SSLError, ValueError) as exc:
            raise CliError(
                f"--tls-ca-cert: {args.tls_ca_cert!r} holds no usable PEM certificate "
                f"({getattr(exc, 'reason', None) or exc})",
                EXIT_USAGE,
            ) from None


def open_client(
    args: argparse.Namespace, *, retry: RetryPolicy | None = None
) -> AbstractAsyncContextManager[Client]:
    """``connect(...)`` from the connection options; bad options are usage errors.

    Call it inside the event loop; entering the result connects (a
    :class:`~sepp_anyio.ConnectError` is reported by :func:`run_async`).
    """
    ca = None if args.tls_ca_cert is None else _read_ca(args.tls_ca_cert)
    try:
        return connect(
            args.address,
            api_key=args.api_key,
            tls=True if args.tls else None,
            tls_ca_cert=ca,
            tls_server_name=args.tls_server_name,
            connect_timeout=args.connect_timeout,
            retry=retry,
        )
    except ValueError as exc:  # a malformed address or API key (InvalidApiKeyError)
        raise CliError(str(exc), EXIT_USAGE) from None


# --------------------------------------------------------------------------- output


def table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A plain-text table: a header, a rule, and the rows, columns padded to fit."""
    widths = [len(h) for h in headers]
    for row in rows:
        widths = [max(w, len(cell)) for w, cell in zip(widths, row, strict=True)]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(cell.ljust(w) for cell, w in zip(cells, widths, strict=True)).rstrip()

    return "\n".join([line(headers), line(["-" * w for w in widths]), *map(line, rows)])


# --------------------------------------------------------------------------- running


#: What an UNAUTHENTICATED refusal needs: the key, given one of the two ways.
_API_KEY_HINT: Final = "pass the server's API key with --api-key KEY or set $SEPP_API_KEY"


def describe(error: SeppError) -> str:
    """A one-line description of a client error (its class says what kind it is).

    The client's own message is used once, as it is (a :class:`ConnectError` already
    says where and why); an :class:`UnauthenticatedError` also names the options that fix
    it.
    """
    if isinstance(error, ConnectError | JobRejectedError):
        return str(error)
    text = f"{type(error).__name__}: {error}"
    if isinstance(error, UnauthenticatedError):
        text += f" ({_API_KEY_HINT})"
    return text


def run_async(prog: str, main: Callable[[], Awaitable[int]], *, backend: str = "asyncio") -> int:
    """Run ``main`` on ``backend``; return its status, or report a failure in one line.

    :class:`CliError` and :class:`~sepp_anyio.SeppError` (alone or as the only member of
    exception groups) become one error line and status 1 (or the CliError's code);
    Ctrl-C that nobody handled is status 130; a closed stdout (``BrokenPipeError``) is
    status 141, silently (see :func:`stdout_closed`). Anything else propagates (a bug, or
    the user's own code failing, where the traceback is what helps).
    """
    try:
        check_backend(backend)
        return anyio.run(main, backend=backend)
    except KeyboardInterrupt:
        return 130
    except BaseException as raw:
        error = unwrap(raw)
        if isinstance(error, KeyboardInterrupt):
            return 130
        if isinstance(error, BrokenPipeError):
            return stdout_closed()
        if isinstance(error, CliError):
            error_line(prog, error.message)
            return error.code
        if isinstance(error, SeppError):
            error_line(prog, describe(error))
            return EXIT_FAILURE
        raise


def parse(parser: Parser, argv: Sequence[str]) -> argparse.Namespace | int:
    """Parse ``argv``; an int is the status to return at once (``--help``: 0; a usage
    error, already reported in argparse's form: 2)."""
    try:
        return parser.parse_args(argv)
    except SystemExit as exc:  # --help / --version
        return exc.code if isinstance(exc.code, int) else 0
    except CliError as exc:
        error_line(parser.prog, exc.message)
        return exc.code
