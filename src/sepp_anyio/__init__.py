"""sepp-anyio: structured-concurrency client and worker for the sepp job queue.

Runs on trio and asyncio (via anyio). Public names are re-exported here; the
underscored modules are private.
"""

from __future__ import annotations

from ._version import __version__ as __version__

__all__ = ["__version__"]
