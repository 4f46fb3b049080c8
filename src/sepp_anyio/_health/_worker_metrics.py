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
``sepp_job_queue_wait_seconds``    histogram  queue
``sepp_worker_saturation``         gauge      lane
``sepp_worker_idle_reserves_total`` counter   lane
=================================  =========  =========================

The last three are the autoscaling signals: how long jobs waited for a worker (reserve time
minus the later of their enqueue and schedule times, on the server's clock as the client
knows it), how much of a lane's capacity was busy (a time-weighted average since the
previous scrape: ``_saturation``), and how many reserves found nothing to do.

``outcome`` is how the job ended for this worker: ``acked``, ``retried`` (nacked for a
retry, which includes a handler that timed out or was cut short by a shutdown),
``dead_lettered``, ``expired`` (reserved past its ``sepp.expires_at`` deadline, dead-lettered
without running), ``lease_lost`` (not settled here; the lease was gone), ``settle_failed``
(the ack or nack failed; the job is redelivered) or ``cancelled`` (the worker was cancelled
with the job running; left to lease expiry). The registry takes any str.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from ._metrics import Counter, Gauge, Histogram, HistogramSeries, MetricsRegistry
from ._saturation import Saturation

__all__ = [
    "DURATION_BUCKETS",
    "OUTCOMES",
    "QUEUE_WAIT_BUCKETS",
    "LaneMetrics",
    "WorkerMetrics",
    "queue_wait",
]

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

#: Queue waits from 5 ms to a day: a backlog that builds over hours still resolves.
QUEUE_WAIT_BUCKETS = (*DURATION_BUCKETS, 7200.0, 21600.0, 86400.0)


def queue_wait(enqueued_at: datetime, scheduled_at: datetime | None, now: datetime) -> float:
    """Seconds a job waited for a worker: ``now`` (its reserve) minus the later of its
    enqueue and schedule times; 0 rather than negative (clocks a little apart)."""
    ready = enqueued_at if scheduled_at is None or scheduled_at < enqueued_at else scheduled_at
    return max(0.0, (now - ready).total_seconds())


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
        "idle_reserves",
        "in_flight",
        "jobs",
        "lease_extensions",
        "queue_wait",
        "registry",
        "reserve_errors",
        "saturation",
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
        self.queue_wait: Histogram = r.histogram(
            "sepp_job_queue_wait_seconds",
            "Time from a job being ready (the later of its enqueue and schedule times) to"
            " its reserve by this worker, in seconds, by queue.",
            ("queue",),
            buckets=QUEUE_WAIT_BUCKETS,
        )
        self.saturation: Gauge = r.gauge(
            "sepp_worker_saturation",
            "Share of the lane's max_in_flight slots in use, time-weighted over the interval"
            " since the previous scrape (0 to 1), by lane.",
            ("lane",),
        )
        self.idle_reserves: Counter = r.counter(
            "sepp_worker_idle_reserves_total",
            "Reserve calls that returned no job, by lane.",
            ("lane",),
        )

    def lane(self, lane: str, *, capacity: int = 1, queues: Sequence[str] = ()) -> LaneMetrics:
        """The hooks of one reserve loop of ``capacity`` slots (``max_in_flight``) over
        ``queues``, its series created at 0."""
        return LaneMetrics(self, lane, capacity=capacity, queues=queues)

    def add_lane(self, lane: str) -> None:
        """Create the per-lane series at 0, so that a scrape shows them before any event
        (a rate over a series that appears late misses its first increase)."""
        self.in_flight.labels(lane)
        self.reserve_errors.labels(lane)
        self.lease_extensions.labels(lane)
        self.settle_failures.labels(lane)
        self.idle_reserves.labels(lane)
        self.saturation.labels(lane)


class LaneMetrics:
    """The metric updates of one lane, as one call per event on the worker's hot path.

    Keeps the lane's own series, so that an update is an add; only the per-job-type series
    are looked up (one dict lookup each).
    """

    __slots__ = (
        "_duration",
        "_idle_reserves",
        "_in_flight",
        "_jobs",
        "_lease_extensions",
        "_queue_wait",
        "_queue_waits",
        "_reserve_errors",
        "_settle_failures",
        "lane",
        "saturation",
    )

    def __init__(
        self, metrics: WorkerMetrics, lane: str, *, capacity: int = 1, queues: Sequence[str] = ()
    ) -> None:
        metrics.add_lane(lane)
        self.lane = lane
        self._jobs = metrics.jobs
        self._duration = metrics.duration
        self._in_flight = metrics.in_flight.labels(lane)
        self._reserve_errors = metrics.reserve_errors.labels(lane)
        self._lease_extensions = metrics.lease_extensions.labels(lane)
        self._settle_failures = metrics.settle_failures.labels(lane)
        self._idle_reserves = metrics.idle_reserves.labels(lane)
        self._queue_wait = metrics.queue_wait
        # The lane's own queues' series, created at 0 (a job only comes from one of them).
        self._queue_waits: dict[str, HistogramSeries] = {
            queue: metrics.queue_wait.labels(queue) for queue in queues
        }
        #: Slots in use over time (shared with the OpenTelemetry gauge, which reads it
        #: through a window of its own).
        self.saturation = Saturation(capacity)
        window = self.saturation.window()
        series = metrics.saturation.labels(lane)

        def update() -> None:
            series.set(window.sample())

        metrics.registry.before_render(update)

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

    def reserve_answered(self, jobs: int) -> None:
        """A reserve returned ``jobs`` jobs (0: an idle reserve)."""
        if not jobs:
            self._idle_reserves.inc()

    def job_reserved(self, queue: str, waited: float) -> None:
        """A job of ``queue`` was reserved ``waited`` seconds after it was ready."""
        series = self._queue_waits.get(queue)
        if series is None:
            series = self._queue_waits[queue] = self._queue_wait.labels(queue)
        series.observe(waited)

    def lease_extended(self) -> None:
        self._lease_extensions.inc()
