"""One accounting sink per lane: every count the worker keeps goes through here.

A worker's events (a reserve made, failed or answered; a job started, acked, nacked,
lost, settled or not) feed three sinks: the lane's own counters (:class:`LaneRun`, read by
:meth:`Worker.statistics`), its Prometheus series (:class:`~sepp_anyio._health.LaneMetrics`,
``/metrics``) and the OpenTelemetry instruments (``_otel.metrics()``, when a meter
provider is configured). :class:`LaneAccounts` has one method per event and updates each
sink that counts it, so that no event is counted in one sink and forgotten in another.

Hot path: each method is a few additions; the OpenTelemetry labels are built only when
its metrics are enabled.
"""

from __future__ import annotations

from .. import _otel
from .._health import LaneMetrics
from ._lane import LaneRun
from ._outcome import Settled

__all__ = ["LaneAccounts"]


class LaneAccounts:
    """The accounting of one lane (see the module docstring); never raises."""

    __slots__ = ("_lane", "_prometheus", "lease_extended")

    def __init__(self, lane: LaneRun, prometheus: LaneMetrics) -> None:
        self._lane = lane
        self._prometheus = prometheus
        #: A lease of this lane's jobs was extended (the heartbeat's callback).
        self.lease_extended = prometheus.lease_extended

    def reserve_started(self) -> None:
        self._lane.reserves += 1

    def reserve_failed(self) -> None:
        self._lane.reserve_errors += 1
        self._prometheus.reserve_failed()
        metrics = _otel.metrics()
        if metrics.enabled:
            metrics.reserves_failed.add(1)

    def reserve_answered(self, jobs: int) -> None:
        metrics = _otel.metrics()
        if metrics.enabled:
            metrics.reserves_completed.add(1, {"jobs": "some" if jobs else "empty"})

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
