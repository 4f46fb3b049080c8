"""The worker: reserve jobs, run their handlers, settle them (``sepp_anyio.Worker``).

The package's modules, one idea each: :mod:`._facade` (the :class:`Worker` users build and
run), the handler registry and its checks (:mod:`._registry`), the reserve loop
(:mod:`._reserving`), where job tasks start (:mod:`._spawn`), the job: its run, verdict,
hand-off and settle (:mod:`._job`), a lane's settle slots (:mod:`._slots`), the one
accounting sink for statistics, Prometheus and OpenTelemetry (:mod:`._accounting`,
:mod:`._statistics`), the lanes (:mod:`._lane`), a job's lease and heartbeats
(:mod:`._lease`, :mod:`._heartbeat_timer`), the lifespan (:mod:`._lifespan`), middleware
(:mod:`._middleware`), the outcome hook (:mod:`._outcome`), batch handlers
(:mod:`._batch`, :mod:`._batch_item`), crons (:mod:`._crons`) and results sent to a producer
(:mod:`._replies`).
Everything public is re-exported by ``sepp_anyio`` itself.
"""

from __future__ import annotations

from ._facade import Handler as Handler
from ._facade import HandlerSignatureError as HandlerSignatureError
from ._facade import ShutdownHandle as ShutdownHandle
from ._facade import Worker as Worker
from ._facade import check_handler as check_handler
from ._facade import enclose_lifespan as enclose_lifespan
from ._statistics import WorkerStatistics as WorkerStatistics

__all__ = [
    "Handler",
    "HandlerSignatureError",
    "ShutdownHandle",
    "Worker",
    "WorkerStatistics",
    "check_handler",
    "enclose_lifespan",
]
