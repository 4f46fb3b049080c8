"""The ``sepp-anyio`` command (also ``python -m sepp_anyio``).

A dispatcher: each subcommand lives in its own module, parses its own arguments (and its
own ``--help``) and returns the exit status. ``sepp-anyio server ...`` is exactly
``python -m sepp_anyio.server ...``. Modules are imported only when their subcommand
runs, so ``sepp-anyio --help`` stays fast.

Exit status, for every subcommand: 0 on success, 1 when the work fails (an unreachable
server, a refusal), 2 for bad input on the command line; a failure is one line on stderr.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from ._version import __version__

__all__ = ["main"]

PROG = "sepp-anyio"


def _server(argv: Sequence[str]) -> int:
    from .server._cli import main as server_main

    return server_main(argv, prog=f"{PROG} server")


def _worker(argv: Sequence[str]) -> int:
    from ._cli_worker import main as worker_main

    return worker_main(argv, prog=f"{PROG} worker")


def _enqueue(argv: Sequence[str]) -> int:
    from ._cli_producer import enqueue_main

    return enqueue_main(argv, prog=f"{PROG} enqueue")


def _info(argv: Sequence[str]) -> int:
    from ._cli_producer import info_main

    return info_main(argv, prog=f"{PROG} info")


def _dlq(argv: Sequence[str]) -> int:
    from ._cli_producer import dlq_main

    return dlq_main(argv, prog=f"{PROG} dlq")


def _demo(argv: Sequence[str]) -> int:
    from ._cli_demo import main as demo_main

    return demo_main(argv, prog=f"{PROG} demo")


_COMMANDS = {
    "demo": (_demo, "run a mixed workload through a Worker on an embedded server"),
    "worker": (_worker, "run a Worker: sepp-anyio worker module:handlers --queue Q"),
    "enqueue": (_enqueue, "enqueue one job"),
    "info": (_info, "show the server's version and limits"),
    "dlq": (_dlq, "drain dead letters, optionally re-enqueueing them"),
    "server": (_server, "run the reference server (python -m sepp_anyio.server)"),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
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


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the exit status."""
    args = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    if not args or args[0] not in _COMMANDS:
        if args and not args[0].startswith("-"):
            parser.print_usage(sys.stderr)
            print(f"{PROG}: error: unknown command {args[0]!r}", file=sys.stderr)
            return 2
        parser.parse_args(args)  # --help / --version exit here
        parser.print_help(sys.stderr)
        return 2
    handler, _ = _COMMANDS[args[0]]
    return handler(args[1:])
