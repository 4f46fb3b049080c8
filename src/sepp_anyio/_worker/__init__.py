"""The worker: reserve jobs, run their handlers, settle them (``sepp_anyio.Worker``).

The package's modules, one idea each: :mod:`._facade` (the :class:`Worker` users build and
run), the lanes and their token buckets (:mod:`._lane`), a job's lease and heartbeats
(:mod:`._lease`, :mod:`._heartbeat_timer`), the lifespan (:mod:`._lifespan`), middleware
(:mod:`._middleware`), the outcome hook (:mod:`._outcome`) and batch handlers
(:mod:`._batch`, :mod:`._batch_item`). Everything public is
re-exported by ``sepp_anyio`` itself.
"""

from __future__ import annotations

from ._facade import Handler as Handler
from ._facade import HandlerSignatureError as HandlerSignatureError
from ._facade import ShutdownHandle as ShutdownHandle
from ._facade import Worker as Worker
from ._facade import WorkerStatistics as WorkerStatistics
from ._facade import check_handler as check_handler
from ._facade import enclose_lifespan as enclose_lifespan

__all__ = [
    "Handler",
    "HandlerSignatureError",
    "ShutdownHandle",
    "Worker",
    "WorkerStatistics",
    "check_handler",
    "enclose_lifespan",
]
