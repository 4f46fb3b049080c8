"""The ``sepp-anyio`` command (also ``python -m sepp_anyio``).

Subcommands are thin: each delegates to the module that owns the feature, so
``sepp-anyio server ...`` is exactly ``python -m sepp_anyio.server ...``.
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


_COMMANDS = {
    "server": (_server, "run the reference server (python -m sepp_anyio.server)"),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Client, worker and reference server for the sepp job queue.",
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
