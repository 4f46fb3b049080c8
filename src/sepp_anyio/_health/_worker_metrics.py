"""The worker's metrics under their public names, on one :class:`MetricsRegistry`.

=================================  =========  =========================
name                               type       labels
=================================  =========  =========================
``sepp_jobs_total``                counter    job_type, outcome, lane
``sepp_jobs_in_flight``            gauge      lane
``sepp_job_duration_seconds``      histogram  job_type, lane
``sepp_reserve_errors_total``      counter    lane
``sepp_lease_extensions_total``    counter    lane
``sepp_settle_failures_total``     counter    lane
=================================  =========  =========================

``outcome`` is how the job ended for this worker: ``acked``, ``retried`` (nacked for a
retry, which includes a handler that timed out or was cut short by a shutdown),
``dead_lettered``, ``expired`` (reserved past its ``sepp.expires_at`` deadline, dead-lettered
without running), ``lease_lost`` (not settled here; the lease was gone), ``settle_failed``
(the ack or nack failed; the job is redelivered) or ``cancelled`` (the worker was cancelled
with the job running; left to lease expiry). The registry takes any str.
"""

from __future__ import annotations

from ._metrics import Counter, Gauge, Histogram, MetricsRegistry

__all__ = ["DURATION_BUCKETS", "OUTCOMES", "LaneMetrics", "WorkerMetrics"]

#: Handler durations from 5 ms to an hour: short jobs resolve in the low buckets, and a
#: long batch job still lands below +Inf.
DURATION_BUCKETS = (
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
    120.0,
    300.0,
    600.0,
    1800.0,
    3600.0,
)


#: The worker's outcome names (``Worker._handle``'s) to the metric's ``outcome`` label.
OUTCOMES = {
    "ack": "acked",
    "retry": "retried",
    "dead_letter": "dead_lettered",
    "expired": "expired",
    "lease_lost": "lease_lost",
    "settle_failed": "settle_failed",
    "cancelled": "cancelled",
}


class WorkerMetrics:
    """The six worker metric families, registered on ``registry`` (a new one by default).

    The hot path keeps series objects, e.g. ``in_flight = metrics.in_flight.labels(lane)``
    once per lane, then ``in_flight.inc()``; per job,
    ``metrics.jobs.labels(job_type, outcome, lane).inc()`` is one dict lookup and an add.
    """

    __slots__ = (
        "duration",
        "in_flight",
        "jobs",
        "lease_extensions",
        "registry",
        "reserve_errors",
        "settle_failures",
    )

    def __init__(self, registry: MetricsRegistry | None = None) -> None:
        self.registry = registry if registry is not None else MetricsRegistry()
        r = self.registry
        self.jobs: Counter = r.counter(
            "sepp_jobs_total",
            "Jobs finished by this worker, by job type, outcome and lane.",
            ("job_type", "outcome", "lane"),
        )
        self.in_flight: Gauge = r.gauge(
            "sepp_jobs_in_flight", "Jobs being handled right now, by lane.", ("lane",)
        )
        self.duration: Histogram = r.histogram(
            "sepp_job_duration_seconds",
            "Time from a job's start to its outcome (handler and middleware), in seconds.",
            ("job_type", "lane"),
            buckets=DURATION_BUCKETS,
        )
        self.reserve_errors: Counter = r.counter(
            "sepp_reserve_errors_total", "Reserve calls that failed, by lane.", ("lane",)
        )
        self.lease_extensions: Counter = r.counter(
            "sepp_lease_extensions_total", "Lease extensions granted, by lane.", ("lane",)
        )
        self.settle_failures: Counter = r.counter(
            "sepp_settle_failures_total",
            "Acks and nacks that failed (the job is redelivered), by lane.",
            ("lane",),
        )

    def lane(self, lane: str) -> LaneMetrics:
        """The hooks of one reserve loop, its series created at 0."""
        return LaneMetrics(self, lane)

    def add_lane(self, lane: str) -> None:
        """Create the per-lane series at 0, so that a scrape shows them before any event
        (a rate over a series that appears late misses its first increase)."""
        self.in_flight.labels(lane)
        self.reserve_errors.labels(lane)
        self.lease_extensions.labels(lane)
        self.settle_failures.labels(lane)


class LaneMetrics:
    """The metric updates of one lane, as one call per event on the worker's hot path.

    Keeps the lane's own series, so that an update is an add; only the per-job-type series
    are looked up (one dict lookup each).
    """

    __slots__ = (
        "_duration",
        "_in_flight",
        "_jobs",
        "_lease_extensions",
        "_reserve_errors",
        "_settle_failures",
        "lane",
    )

    def __init__(self, metrics: WorkerMetrics, lane: str) -> None:
        metrics.add_lane(lane)
        self.lane = lane
        self._jobs = metrics.jobs
        self._duration = metrics.duration
        self._in_flight = metrics.in_flight.labels(lane)
        self._reserve_errors = metrics.reserve_errors.labels(lane)
        self._lease_extensions = metrics.lease_extensions.labels(lane)
        self._settle_failures = metrics.settle_failures.labels(lane)

    def job_started(self) -> None:
        self._in_flight.inc()

    def job_finished(self, job_type: str, outcome: str, seconds: float) -> None:
        """A job of this lane ended with ``outcome`` (a key of :data:`OUTCOMES`, or the
        label itself) after ``seconds`` from its start."""
        label = OUTCOMES.get(outcome, outcome)
        self._in_flight.dec()
        self._jobs.labels(job_type, label, self.lane).inc()
        self._duration.labels(job_type, self.lane).observe(seconds)
        if label == "settle_failed":
            self._settle_failures.inc()

    def reserve_failed(self) -> None:
        self._reserve_errors.inc()

    def lease_extended(self) -> None:
        self._lease_extensions.inc()
