"""A closed stdout (``sepp-anyio info | head -1``): stop quietly with status 141.

Its own module, importing nothing of the package, so that the dispatcher in ``__init__``
can use it without loading a subcommand's helpers.
"""

from __future__ import annotations

import os
import sys
from typing import Final

__all__ = ["EXIT_BROKEN_PIPE", "stdout_closed"]

#: 128 + SIGPIPE (13 on every POSIX system; Windows has no SIGPIPE, the number is kept).
EXIT_BROKEN_PIPE: Final = 141


def stdout_closed() -> int:
    """Stdout's reader went away: point stdout at ``os.devnull``; return 141.

    The recipe of the Python documentation (``signal``, "Note on SIGPIPE"): with stdout on
    devnull, the flush at interpreter exit cannot raise ``BrokenPipeError`` again (which
    would print "Exception ignored ..." and exit 120). Nothing is printed: the reader chose
    to stop reading, as with ``| head -1``.
    """
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(devnull, sys.stdout.fileno())
        finally:
            os.close(devnull)
    except (OSError, ValueError, AttributeError):  # no real stdout (replaced, or closed)
        pass
    return EXIT_BROKEN_PIPE
