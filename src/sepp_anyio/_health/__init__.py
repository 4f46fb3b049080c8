"""Health, readiness and metrics over HTTP for workers (``serve_health``), with the metrics
registry it renders and the worker-side bookkeeping it reads.

* ``_server``: ``serve_health`` and its routes and connection cap;
* ``_http``: one HTTP/1.1 connection on h11, with its limits;
* ``_lag``: the event loop lag sampler;
* ``_source``: the :class:`HealthSource` protocol and :class:`WorkerHealth`;
* ``_metrics``: counters, gauges and histograms rendered as Prometheus text;
* ``_worker_metrics``: the worker's metric families under their public names.
"""

from __future__ import annotations

from ._metrics import Counter as Counter
from ._metrics import Gauge as Gauge
from ._metrics import Histogram as Histogram
from ._metrics import MetricsRegistry as MetricsRegistry
from ._server import HealthServer as HealthServer
from ._server import serve_health as serve_health
from ._source import HealthSource as HealthSource
from ._source import LaneProbe as LaneProbe
from ._source import WorkerHealth as WorkerHealth
from ._worker_metrics import DURATION_BUCKETS as DURATION_BUCKETS
from ._worker_metrics import LaneMetrics as LaneMetrics
from ._worker_metrics import WorkerMetrics as WorkerMetrics

__all__ = [
    "DURATION_BUCKETS",
    "Counter",
    "Gauge",
    "HealthServer",
    "HealthSource",
    "Histogram",
    "LaneMetrics",
    "LaneProbe",
    "MetricsRegistry",
    "WorkerHealth",
    "WorkerMetrics",
    "serve_health",
]
