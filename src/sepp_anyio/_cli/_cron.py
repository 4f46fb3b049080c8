"""``sepp-anyio cron TARGET``: run cron schedulers alone (no worker), until a signal.

TARGET is ``module:attribute`` naming a :class:`~sepp_anyio.Cron` or a list (or tuple) of
them, imported as the ``worker`` command imports its target (the current directory, or
``--path``, first on ``sys.path``). Any number of these processes, and of workers running
the same crons (``worker.cron(...)``), may run at once: each slot is enqueued once (the
server deduplicates its idempotency key).

Lifecycle: connect, start every cron, log ``ready``; the first SIGINT or SIGTERM stops the
schedulers (an enqueue in progress is abandoned, which cannot duplicate a slot) and the
process exits 0. A bad target is one error line and exit status 2.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from collections.abc import Sequence
from typing import Any

import anyio
import anyio.abc

from .._cron import Cron, run_cron
from .._model._retries import RetryPolicy
from ._common import (
    EXIT_USAGE,
    CliError,
    Parser,
    add_backend_option,
    add_connection_options,
    add_log_level_option,
    check_connection_options,
    configure_logging,
    error_line,
    open_client,
    parse,
    run_async,
)
from ._import import import_target_module
from ._worker import _module_for_path, _signal_receiver, logger

__all__ = ["build_parser", "load_crons", "main"]

_RETRY = RetryPolicy(max_attempts=3)

_DESCRIPTION = """\
Run cron schedules until SIGINT or SIGTERM: each slot of each cron is enqueued with
scheduled_at = the slot and idempotency key cron:<name>:<slot>, so any number of these
processes (and workers running the same crons) enqueue each slot once, without a leader.
A process that starts also enqueues the newest slots it missed (each Cron's catch_up, from
the last catch_up_window seconds, 1 h by default); those another replica already enqueued
are deduplicated by the server, so restarts and deploys lose no slot and duplicate none.

TARGET is module:attribute (the current directory, or --path, is searched first) naming a
sepp_anyio.Cron or a list of them:
    crons = [sepp_anyio.Cron("*/5 * * * *", cleanup, lambda slot: {}),
             sepp_anyio.Cron("0 7 * * MON", report, make_report, timezone="Europe/Berlin")]
"""


def build_parser(prog: str) -> Parser:
    """The ``cron`` subcommand's argument parser."""
    parser = Parser(
        prog=prog, description=_DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("target", metavar="TARGET", help="module:attribute (see above)")
    parser.add_argument(
        "--path",
        default=".",
        metavar="DIR",
        help="directory put first on sys.path to import TARGET from (default: .)",
    )
    add_connection_options(parser)
    add_backend_option(parser)
    add_log_level_option(parser, default="INFO")
    return parser


def load_crons(spec: str, path: str = ".") -> list[Cron[Any]]:
    """Import ``module:attribute`` and check that it is a Cron or a list of them.

    Call it inside the command's event loop (see ``_import``: a module that starts an
    event loop when imported is reported as such).

    Raises:
        CliError: status 2 for a malformed, missing or unusable target (or two crons of
            one name, a module that starts an event loop when imported, or whose import
            the library refuses an argument of: a bad cron expression); status 1 when
            importing the module raised otherwise.
    """

    def bad(message: str) -> CliError:
        return CliError(f"TARGET {spec!r}: {message}", EXIT_USAGE)

    module_name, colon, attribute = spec.partition(":")
    module_name, attribute = module_name.strip(), attribute.strip()
    if not colon or not module_name or not attribute:
        raise bad("must be module:attribute, for example myapp.schedules:crons")
    hint = _module_for_path(module_name, attribute)
    if hint is not None:
        raise bad(f"names a file, not a module: use {hint}")
    directory = os.path.abspath(path)
    if directory not in sys.path:
        sys.path.insert(0, directory)
    obj: Any = import_target_module(spec, module_name, directory)
    for part in attribute.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise bad(f"{module_name!r} has no attribute {attribute!r}") from None
    if isinstance(obj, Cron):
        return [obj]
    if not isinstance(obj, list | tuple):
        raise bad(f"is a {type(obj).__name__}, not a sepp_anyio.Cron or a list of them")
    if not obj:
        raise bad("the list of crons is empty")
    names: set[str] = set()
    for index, item in enumerate(obj):
        if not isinstance(item, Cron):
            raise bad(f"item {index} is a {type(item).__name__}, not a sepp_anyio.Cron")
        if item.name in names:
            raise bad(
                f"two crons are named {item.name!r}: their idempotency keys would collide "
                "(give one of them another name=)"
            )
        names.add(item.name)
    return list(obj)


async def _serve(crons: list[Cron[Any]], args: argparse.Namespace) -> int:
    with _signal_receiver() as signals:
        async with open_client(args, retry=_RETRY) as client, anyio.create_task_group() as tg:
            await tg.start(run_cron, client, crons)
            logger.info(
                "ready: cron scheduler for %s at %s (%s backend)",
                ", ".join(f"{c.name} ({c.expr}, {c.timezone})" for c in crons),
                args.address,
                args.backend,
            )
            if signals is None:  # pragma: no cover (Windows: Ctrl-C ends it)
                return 0
            async for signum in signals:
                logger.info("%s received: cron scheduler stopping", signal.Signals(signum).name)
                break
            tg.cancel_scope.cancel()
    return 0


def main(argv: Sequence[str], *, prog: str = "sepp-anyio cron") -> int:
    """Run the ``cron`` subcommand; return the exit status."""
    parser = build_parser(prog)
    args = parse(parser, argv)
    if isinstance(args, int):
        return args
    configure_logging(args.log_level)
    try:
        check_connection_options(args)
    except CliError as exc:
        error_line(prog, exc.message)
        return exc.code

    async def serve() -> int:
        # Imported in the loop (see _import), before connecting.
        return await _serve(load_crons(args.target, args.path), args)

    return run_async(prog, serve, backend=args.backend)
