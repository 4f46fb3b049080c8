"""Test support: an in-process reference server and pytest fixtures.

* :func:`open_in_memory_client` runs the reference server's engine inside the
  caller's event loop and gives back a real :class:`~sepp_anyio.Client`
  talking to it (trio's ``MockClock`` then drives leases and schedules).
* The pytest plugin (registered as ``sepp_anyio`` under ``pytest11``) adds
  fixtures; see :mod:`sepp_anyio.testing.pytest_plugin`.
"""

from __future__ import annotations

from ._in_memory import open_in_memory_client as open_in_memory_client
from ._memory_channel import MemoryChannel as MemoryChannel

__all__ = ["MemoryChannel", "open_in_memory_client"]
