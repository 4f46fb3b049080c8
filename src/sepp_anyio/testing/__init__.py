"""Test support: an in-process reference server and pytest fixtures.

* :class:`Harness` is that server with what a test asserts about it: run a worker until
  its queues are settled (:meth:`Harness.run_until_settled`, bounded, on virtual time for
  scheduled jobs), and read what is queued, dead-lettered and sent as results, with typed
  payloads where a :class:`~sepp_anyio.Task` is given.
* :func:`open_in_memory_client` runs the reference server's engine inside the
  caller's event loop and gives back a real :class:`~sepp_anyio.Client`
  talking to it (trio's ``MockClock`` then drives leases and schedules).
* :class:`ServerThread` runs a network server in a background thread (its own
  asyncio loop), usable from tests on any backend; :class:`ServerProcess` runs
  ``python -m sepp_anyio.server`` in a subprocess.  Both are re-exported from
  :mod:`sepp_anyio.server`.
* The pytest plugin (registered as ``sepp_anyio`` under ``pytest11``) adds
  fixtures (``sepp_server``, ``sepp_client``, ``sepp_in_memory``, ``sepp_harness``); see
  :mod:`sepp_anyio.testing.pytest_plugin`.  It is not imported here, so this
  package does not need pytest.
"""

from __future__ import annotations

import contextlib as _contextlib

from ..server import ServerProcess as ServerProcess
from ..server import ServerThread as ServerThread
from ._harness import Harness as Harness
from ._harness import NotSettledError as NotSettledError
from ._in_memory import open_in_memory_client as open_in_memory_client
from ._memory_channel import MemoryChannel as MemoryChannel
from ._records import DeadLetteredJob as DeadLetteredJob
from ._records import QueuedJob as QueuedJob
from ._records import ResultMessage as ResultMessage

__all__ = [
    "DeadLetteredJob",
    "Harness",
    "MemoryChannel",
    "NotSettledError",
    "QueuedJob",
    "ResultMessage",
    "ServerProcess",
    "ServerThread",
    "open_in_memory_client",
]

# Public names report this package in reprs, tracebacks and pickles (see sepp_anyio's).
for _name in __all__:
    _obj = globals()[_name]
    if getattr(_obj, "__module__", "").startswith(__name__ + "._"):
        with _contextlib.suppress(AttributeError, TypeError):
            _obj.__module__ = __name__
del _name, _obj
