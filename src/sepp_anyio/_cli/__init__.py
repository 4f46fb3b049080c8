"""The ``sepp-anyio`` command (also ``python -m sepp_anyio``).

A dispatcher: each subcommand lives in its own module, parses its own arguments (and its
own ``--help``) and returns the exit status. ``sepp-anyio server ...`` is exactly
``python -m sepp_anyio.server ...``. Modules are imported only when their subcommand
runs, so ``sepp-anyio --help`` stays fast.

Exit status, for every subcommand: 0 on success, 1 when the work fails (an unreachable
server, a refusal), 2 for bad input on the command line (an unknown command too: the line
lists the commands and suggests the nearest); a failure is one line on stderr. When the
reader of stdout goes away (``sepp-anyio info | head -1``) the command stops quietly with
status 141, 128 + SIGPIPE (see ``_pipe.stdout_closed``).
"""

from __future__ import annotations

import argparse
import difflib
import sys
from collections.abc import Sequence
from typing import NoReturn

from .._model._groups import unwrap
from .._version import __version__
from ._pipe import EXIT_BROKEN_PIPE, stdout_closed

__all__ = ["main"]

PROG = "sepp-anyio"


def _server(argv: Sequence[str]) -> int:
    from ._server import main as server_main

    return server_main(argv, prog=f"{PROG} server")


def _worker(argv: Sequence[str]) -> int:
    from ._worker import main as worker_main

    return worker_main(argv, prog=f"{PROG} worker")


def _cron(argv: Sequence[str]) -> int:
    from ._cron import main as cron_main

    return cron_main(argv, prog=f"{PROG} cron")


def _enqueue(argv: Sequence[str]) -> int:
    from ._producer import enqueue_main

    return enqueue_main(argv, prog=f"{PROG} enqueue")


def _info(argv: Sequence[str]) -> int:
    from ._producer import info_main

    return info_main(argv, prog=f"{PROG} info")


def _dlq(argv: Sequence[str]) -> int:
    from ._producer import dlq_main

    return dlq_main(argv, prog=f"{PROG} dlq")


def _demo(argv: Sequence[str]) -> int:
    from ._demo import main as demo_main

    return demo_main(argv, prog=f"{PROG} demo")


_COMMANDS = {
    "demo": (_demo, "run a mixed workload through a Worker on an embedded server"),
    "worker": (_worker, "run a Worker: sepp-anyio worker module:handlers --queue Q"),
    "cron": (_cron, "run cron schedules: sepp-anyio cron module:crons"),
    "enqueue": (_enqueue, "enqueue one job"),
    "info": (_info, "show the server's version and limits"),
    "dlq": (_dlq, "drain dead letters, optionally re-enqueueing them"),
    "server": (_server, "run the reference server (python -m sepp_anyio.server)"),
}


class _Parser(argparse.ArgumentParser):
    """Usage errors as one line (``_common.Parser`` would import the client: slow)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see '{self.prog} --help')\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog=PROG,
        description="Client, worker and reference server for the sepp job queue. "
        "Run 'sepp-anyio COMMAND --help' for a command's options.",
    )
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (_, summary) in _COMMANDS.items():
        # Each subcommand parses its own arguments (and its own --help).
        commands.add_parser(name, help=summary, add_help=False)
    return parser


def _unknown_command(name: str) -> str:
    """The one error line for an unknown command: the nearest command, and all of them."""
    near = difflib.get_close_matches(name, list(_COMMANDS), n=1, cutoff=0.6)
    hint = f"; did you mean {near[0]!r}?" if near else ""
    return (
        f"{PROG}: error: unknown command {name!r}{hint} "
        f"(commands: {', '.join(_COMMANDS)}; see '{PROG} --help')"
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the exit status.

    ``--help`` and ``--version`` of the dispatcher itself exit (SystemExit), as argparse
    does; everything else returns the status.
    """
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        status = _dispatch(args)
        # Flushed here, inside the try: buffered output to a closed pipe fails now, not in
        # the interpreter's exit flush (where it would print "Exception ignored ...").
        sys.stdout.flush()
    except SystemExit as exit_:
        try:
            sys.stdout.flush()
        except BrokenPipeError:
            stdout_closed()
            raise SystemExit(EXIT_BROKEN_PIPE) from None
        raise exit_ from None
    except BaseException as raw:  # a closed stdout arrives bare or in exception groups
        if isinstance(unwrap(raw), BrokenPipeError):
            return stdout_closed()
        raise
    return status


def _dispatch(args: list[str]) -> int:
    parser = build_parser()
    if not args or args[0] not in _COMMANDS:
        if args and not args[0].startswith("-"):
            print(_unknown_command(args[0]), file=sys.stderr)
            return 2
        parser.parse_args(args)  # --help / --version exit here
        parser.print_help(sys.stderr)
        return 2
    handler, _ = _COMMANDS[args[0]]
    return handler(args[1:])
