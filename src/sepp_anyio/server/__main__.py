"""``python -m sepp_anyio.server``: run the reference server.

The command line itself is ``sepp_anyio._cli._server`` (see it for the flags), beside the
other commands whose helpers it shares. This module is an entry point, run and never
imported by the package, so it may reach up to ``_cli`` (tests/test_import_graph.py says
so explicitly).
"""

from __future__ import annotations

import sys

from sepp_anyio._cli._server import main

if __name__ == "__main__":
    sys.exit(main())
