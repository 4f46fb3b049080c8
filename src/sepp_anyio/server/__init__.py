"""The sepp reference server's core: the engine (all server semantics) and its stores.

>>> async with Engine(ServerConfig(), SqliteStore("sepp.sqlite3")) as engine:
...     async with NetworkServer(engine, port=50051):
...         await anyio.sleep_forever()  # serves until cancelled

The network server and the in-process channel of :mod:`sepp_anyio.testing` both
serve an engine's calls; authentication is theirs, everything else is the
engine's (its per-RPC handlers speak the wire's messages and are internal).

On the network: :func:`serve` (runs until cancelled, asyncio only), :class:`NetworkServer`
(serve a running engine inside ``async with``), :class:`ServerThread` (a server in a
background thread, for any backend) and :class:`ServerProcess` (``python -m
sepp_anyio.server`` in a subprocess); :func:`server_ssl_context` builds the TLS context a
:class:`NetworkServer` takes, and :data:`LISTENING_LOGGER` names the logger of the
"listening" line.
"""

from __future__ import annotations

import contextlib

from ._config._config import ServerConfig as ServerConfig
from ._config._sections import ApiKey as ApiKey
from ._config._sections import AuthConfig as AuthConfig
from ._config._sections import LimitsConfig as LimitsConfig
from ._config._sections import QueueConfig as QueueConfig
from ._config._sections import QueueLimits as QueueLimits
from ._config._sections import ServerSection as ServerSection
from ._config._sections import StorageConfig as StorageConfig
from ._config._sections import UiConfig as UiConfig
from ._engine._clock import Clock as Clock
from ._engine._clock import ManualClock as ManualClock
from ._engine._console_ops import DeadLetterPage as DeadLetterPage
from ._engine._console_ops import JobPage as JobPage
from ._engine._engine import Engine as Engine
from ._errors import ConfigError as ConfigError
from ._errors import EngineError as EngineError
from ._network._network import LISTENING_LOGGER as LISTENING_LOGGER
from ._network._network import NetworkServer as NetworkServer
from ._network._network import ServerThread as ServerThread
from ._network._network import serve as serve
from ._network._network import server_ssl_context as server_ssl_context
from ._process import ServerProcess as ServerProcess
from ._store._memory import MemoryStore as MemoryStore
from ._store._records import DeadLetter as DeadLetter
from ._store._records import DeadLetterCause as DeadLetterCause
from ._store._records import JobState as JobState
from ._store._records import QueueStats as QueueStats
from ._store._records import StoreContents as StoreContents
from ._store._records import StoredJob as StoredJob
from ._store._sqlite import SqliteStore as SqliteStore
from ._store._store import Store as Store

__all__ = [
    "LISTENING_LOGGER",
    "ApiKey",
    "AuthConfig",
    "Clock",
    "ConfigError",
    "DeadLetter",
    "DeadLetterCause",
    "DeadLetterPage",
    "Engine",
    "EngineError",
    "JobPage",
    "JobState",
    "LimitsConfig",
    "ManualClock",
    "MemoryStore",
    "NetworkServer",
    "QueueConfig",
    "QueueLimits",
    "QueueStats",
    "ServerConfig",
    "ServerProcess",
    "ServerSection",
    "ServerThread",
    "SqliteStore",
    "StorageConfig",
    "Store",
    "StoreContents",
    "StoredJob",
    "UiConfig",
    "serve",
    "server_ssl_context",
]

# Public names report this package in reprs, tracebacks and pickles (see sepp_anyio's).
for _name in __all__:
    _obj = globals()[_name]
    if getattr(_obj, "__module__", "").startswith(__name__ + "._"):
        with contextlib.suppress(AttributeError, TypeError):
            _obj.__module__ = __name__
del _name, _obj
