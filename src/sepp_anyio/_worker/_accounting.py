"""One accounting sink per lane: every count the worker keeps goes through here.

A worker's events (a reserve made, failed or answered; a job started, acked, nacked,
lost, settled or not) feed three sinks: the lane's own counters (:class:`LaneRun`, read by
:meth:`Worker.statistics`), its Prometheus series (:class:`~sepp_anyio._health.LaneMetrics`,
``/metrics``) and the OpenTelemetry instruments (``_otel.metrics()``, when a meter
provider is configured). :class:`LaneAccounts` has one method per event and updates each
sink that counts it, so that no event is counted in one sink and forgotten in another.

Hot path: each method is a few additions; the OpenTelemetry labels are built only when
its metrics are enabled.

The autoscaling signals come through here too: each reserved job's queue wait (from the
reserve's answer, on the client's wall clock, the server's as far as it knows), the slots
taken and given back (the lane's saturation, ``_health._saturation``) and the reserves that
came back empty.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import anyio

from .. import _otel
from .._client import Client, wall_clock_of
from .._health import LaneMetrics
from .._health._saturation import loop_clock
from .._health._worker_metrics import queue_wait
from .._model._job import Job
from ._lane import LaneRun
from ._outcome import Settled

__all__ = ["LaneAccounts"]


class LaneAccounts:
    """The accounting of one lane (see the module docstring); never raises."""

    __slots__ = ("_client", "_clock", "_lane", "_prometheus", "_saturation", "lease_extended")

    def __init__(self, lane: LaneRun, prometheus: LaneMetrics, client: Client) -> None:
        self._lane = lane
        self._prometheus = prometheus
        self._saturation = prometheus.saturation
        # Its wall clock is "now" on the server's clock as the client knows it (for queue
        # waits); looked up at each reserve, as the lease code does.
        self._client = client
        # anyio's clock, read twice per job: the loop's own once run() has started.
        self._clock: Callable[[], float] = anyio.current_time
        #: A lease of this lane's jobs was extended (the heartbeat's callback).
        self.lease_extended = prometheus.lease_extended

    def run_started(self) -> None:
        """The worker's ``run()`` starts reserving (called in its event loop): the lane's
        saturation clock starts, and OpenTelemetry (when enabled) observes it."""
        self._clock = loop_clock()
        self._saturation.start(self._clock())
        metrics = _otel.metrics()
        if metrics.enabled:
            metrics.observe_saturation(self._prometheus.lane, self._saturation)

    def run_stopped(self) -> None:
        """``run()`` returned: a stopped worker's lane is no capacity OpenTelemetry should
        count (``/metrics`` goes on rendering its last values)."""
        metrics = _otel.metrics()
        if metrics.enabled:
            metrics.forget_saturation(self._saturation)

    def slot_taken(self) -> None:
        """A job took one of the lane's ``max_in_flight`` slots."""
        self._saturation.change(1, self._clock())

    def slot_given_back(self) -> None:
        """A job gave its slot back (its outcome decided, or it ended)."""
        self._saturation.change(-1, self._clock())

    def reserve_started(self) -> None:
        self._lane.reserves += 1

    def reserve_failed(self) -> None:
        self._lane.reserve_errors += 1
        self._prometheus.reserve_failed()
        metrics = _otel.metrics()
        if metrics.enabled:
            metrics.reserves_failed.add(1)

    def reserve_answered(self, jobs: Sequence[Job]) -> None:
        """A reserve returned ``jobs`` (none: an idle reserve); each one's queue wait is
        observed."""
        prometheus = self._prometheus
        prometheus.reserve_answered(len(jobs))
        metrics = _otel.metrics()
        if jobs:
            now = wall_clock_of(self._client)()
            for job in jobs:
                ctx = job.ctx
                waited = queue_wait(ctx.enqueued_at, ctx.scheduled_at, now)
                prometheus.job_reserved(ctx.queue, waited)
                if metrics.enabled:
                    metrics.queue_wait.record(waited, {"queue": ctx.queue})
        if metrics.enabled:
            metrics.reserves_completed.add(1, {"jobs": "some" if jobs else "empty"})
            if not jobs:
                metrics.idle_reserves.add(1, {"lane": prometheus.lane})

    def job_started(self) -> None:
        self._prometheus.job_started()

    def job_finished(self, job_type: str, outcome: Settled, seconds: float) -> None:
        """A job's task is over with ``outcome`` (after its settle), ``seconds`` after its
        start."""
        self._prometheus.job_finished(job_type, outcome, seconds)
        metrics = _otel.metrics()
        if metrics.enabled:
            metrics.duration.record(seconds, {"job_type": job_type, "outcome": outcome})

    def acked(self, job_type: str) -> None:
        self._lane.processed += 1
        metrics = _otel.metrics()
        if metrics.enabled:
            metrics.processed.add(1, {"job_type": job_type})

    def nacked(self, job_type: str, *, dead: bool) -> None:
        """A nack was answered: the job dead-lettered (``dead``) or due for a retry."""
        if dead:
            self._lane.nacked_dead += 1
        else:
            self._lane.nacked_retry += 1
        metrics = _otel.metrics()
        if metrics.enabled:
            outcome = Settled.DEAD_LETTER if dead else Settled.RETRY
            metrics.nacked.add(1, {"job_type": job_type, "outcome": outcome})

    def expired(self, job_type: str) -> None:
        """An expired job's dead-lettering nack was answered: counted as dead-lettered and
        as expired (Prometheus counts it in job_finished, with outcome ``expired``)."""
        self._lane.nacked_dead += 1
        self._lane.expired += 1
        metrics = _otel.metrics()
        if metrics.enabled:
            metrics.nacked.add(1, {"job_type": job_type, "outcome": Settled.EXPIRED})

    def lease_lost(self, job_type: str) -> None:
        self._lane.lease_lost += 1
        metrics = _otel.metrics()
        if metrics.enabled:
            metrics.lease_lost.add(1, {"job_type": job_type})

    def settle_failed(self) -> None:
        """An ack or nack failed or timed out (Prometheus counts it in job_finished)."""
        self._lane.settle_errors += 1
