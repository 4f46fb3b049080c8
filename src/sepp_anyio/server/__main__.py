"""``python -m sepp_anyio.server``: run the reference server (see ``_cli.py`` for the flags)."""

from __future__ import annotations

import sys

from ._cli import main

if __name__ == "__main__":
    sys.exit(main())
