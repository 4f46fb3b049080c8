"""What the health server reads (:class:`HealthSource`), and the worker's implementation of
it (:class:`WorkerHealth`, one :class:`LaneProbe` per reserve loop).

The probes' rules:

* **ready** from the moment the worker is reserving until the first shutdown signal; not
  before ``run()`` (setup may still be running) and not while draining, so a load balancer
  or Kubernetes stops counting on a worker that is going away; and not while a lane's
  reserves have been failing for ``unready_after`` seconds or more (the server gone,
  unreachable, refusing the key), counted from the first failure of the streak, until one
  succeeds again;
* **live** while every reserve loop is alive: inside a reserve (for at most ``wait`` +
  ``margin``), waiting for free capacity (a worker whose slots are all busy is healthy), or
  past its last reserve by at most ``wait`` + ``margin``. Also live before ``run()`` and
  while draining (a drain must not be cut short by a restart), not live once ``run()`` has
  returned. The server adds its own condition: the event loop's lag under a threshold.

``margin`` must cover what the loop does between two reserves: handing out the jobs, the
pause after a failed reserve (``reserve_error_backoff``), a rate limit's wait if it is not
reported as a wait for capacity.
"""

from __future__ import annotations

from typing import Protocol

import anyio

from .._model._checks import check_seconds
from ._metrics import MetricsRegistry
from ._worker_metrics import WorkerMetrics

__all__ = ["DEFAULT_MARGIN", "DEFAULT_UNREADY_AFTER", "HealthSource", "LaneProbe", "WorkerHealth"]

#: Slack on top of ``wait`` before a reserve loop counts as stuck: the client's own reserve
#: deadline is ``wait`` + 10 s, so a healthy loop is always back within this.
DEFAULT_MARGIN = 15.0
#: Seconds of failing reserves before the worker is not ready: long enough that one failed
#: reserve and its retry (a server restart, a dropped connection) do not flap the probe,
#: short enough that an outage shows within a probe period or two.
DEFAULT_UNREADY_AFTER = 5.0


class HealthSource(Protocol):
    """The server's view of a worker. Called from the event loop; must not block."""

    def readiness(self) -> bool:
        """Whether the worker takes jobs (``/readyz``)."""
        ...

    def liveness(self, now: float) -> tuple[bool, str]:
        """Whether the worker is alive at ``now`` (``anyio.current_time()``), and why not."""
        ...

    @property
    def metrics(self) -> MetricsRegistry:
        """The registry ``/metrics`` renders."""
        ...


_STARTING = "starting"
_RESERVING = "reserving"
_WAITING = "waiting for capacity"
_BETWEEN = "between reserves"


class LaneProbe:
    """The state of one reserve loop, reported by the loop itself (a few attribute writes
    per reserve; ``now`` is ``anyio.current_time()``, which the loop reads anyway), and
    its streak of failed reserves, if one is on (for readiness)."""

    __slots__ = ("_failing_since", "_failures", "_limit", "_phase", "_since", "name")

    def __init__(self, name: str, limit: float) -> None:
        self.name = name
        self._limit = limit
        self._phase = _STARTING
        self._since = 0.0
        # The streak of failed reserves: when its first one failed (None: no streak), and
        # how many failed.
        self._failing_since: float | None = None
        self._failures = 0

    def reserving(self, now: float) -> None:
        """A reserve call starts."""
        self._phase, self._since = _RESERVING, now

    def waiting_for_capacity(self, now: float) -> None:
        """The loop waits for a free slot (or a rate-limit token) before reserving."""
        self._phase, self._since = _WAITING, now

    def between(self, now: float) -> None:
        """A reserve returned (or failed); the loop hands out jobs or backs off."""
        self._phase, self._since = _BETWEEN, now

    def reserve_failed(self, now: float) -> None:
        """A reserve failed (any error); the first of a streak starts its clock."""
        if self._failing_since is None:
            self._failing_since = now
        self._failures += 1

    def reserve_succeeded(self, now: float) -> tuple[int, float] | None:
        """A reserve succeeded: ends the streak of failures, if any, and returns its count
        and how long it lasted (from its first failure to ``now``), for the log."""
        since = self._failing_since
        if since is None:
            return None
        failures, self._failing_since, self._failures = self._failures, None, 0
        return failures, now - since

    @property
    def failing(self) -> bool:
        """Whether the last reserve failed (a streak is on)."""
        return self._failing_since is not None

    def failing_for(self, now: float) -> float:
        """How long the reserves have been failing at ``now`` (0 when they are not)."""
        since = self._failing_since
        return 0.0 if since is None else now - since

    def _restart(self, now: float) -> None:
        self._phase, self._since = _STARTING, now
        self._failing_since, self._failures = None, 0

    def liveness(self, now: float) -> tuple[bool, str]:
        """Alive, and the loop's state in words."""
        phase, elapsed = self._phase, now - self._since
        if phase == _WAITING:
            return True, f"lane {self.name}: {phase}"
        if elapsed <= self._limit:
            return True, f"lane {self.name}: {phase}"
        if phase == _RESERVING:
            why = f"a reserve has been running for {elapsed:.1f}s"
        elif phase == _STARTING:
            why = f"no reserve {elapsed:.1f}s after the start"
        else:
            why = f"no reserve for {elapsed:.1f}s"
        return False, f"lane {self.name}: {why} (more than wait + margin = {self._limit:g}s)"


class WorkerHealth:
    """A worker's readiness, liveness and metrics: a :class:`HealthSource`.

    Args:
        wait: the reserve loops' long-poll window (``Worker(wait=...)``).
        margin: slack on top of ``wait`` (see the module docs).
        unready_after: seconds of failing reserves in a lane before the worker is not
            ready (``Worker(unready_after=...)``; 0: at the first failure).
        metrics: the worker metrics to serve; new ones by default.

    The worker calls :meth:`lane` once per reserve loop, :meth:`mark_started` when it is
    reserving, :meth:`mark_shutting_down` at the first shutdown signal and
    :meth:`mark_stopped` when ``run()`` returns; the loops report through their probes.
    """

    __slots__ = ("_lanes", "_limit", "_state", "_unready_after", "worker_metrics")

    def __init__(
        self,
        *,
        wait: float,
        margin: float = DEFAULT_MARGIN,
        unready_after: float = DEFAULT_UNREADY_AFTER,
        metrics: WorkerMetrics | None = None,
    ) -> None:
        for value, label in ((wait, "wait"), (margin, "margin"), (unready_after, "unready_after")):
            check_seconds(value, label)
        self._limit = float(wait) + float(margin)
        self._unready_after = float(unready_after)
        self._lanes: dict[str, LaneProbe] = {}
        self._state = "created"
        self.worker_metrics = metrics if metrics is not None else WorkerMetrics()

    @property
    def metrics(self) -> MetricsRegistry:
        return self.worker_metrics.registry

    def lane(self, name: str) -> LaneProbe:
        """The probe of the reserve loop of lane ``name`` (created once; its per-lane metric
        series are created at 0)."""
        probe = self._lanes.get(name)
        if probe is None:
            probe = self._lanes[name] = LaneProbe(name, self._limit)
            self.worker_metrics.add_lane(name)
        return probe

    def mark_started(self, now: float | None = None) -> None:
        """The worker is reserving: ready; every lane's clock starts at ``now`` (default
        ``anyio.current_time()``)."""
        if now is None:
            now = anyio.current_time()
        for probe in self._lanes.values():
            probe._restart(now)
        self._state = "running"

    def mark_shutting_down(self) -> None:
        """The first shutdown signal: not ready from now on, live through the drain."""
        if self._state == "running":
            self._state = "draining"

    def mark_stopped(self) -> None:
        """``run()`` returned: neither ready nor live."""
        self._state = "stopped"

    def readiness(self) -> bool:
        if self._state != "running":
            return False
        if not any(probe.failing for probe in self._lanes.values()):
            return True  # the usual case: no clock to read (callable outside an event loop)
        return self.ready_at(anyio.current_time())

    def ready_at(self, now: float) -> bool:
        """Whether the worker is ready at ``now`` (``anyio.current_time()``; see the module
        docs): running, and no lane's reserves failing for ``unready_after`` or more."""
        if self._state != "running":
            return False
        return all(probe.failing_for(now) < self._unready_after for probe in self._lanes.values())

    def liveness(self, now: float) -> tuple[bool, str]:
        state = self._state
        if state == "created":
            return True, "not started yet"
        if state == "draining":
            return True, "draining"
        if state == "stopped":
            return False, "the worker has stopped"
        reasons = []
        for probe in list(self._lanes.values()):
            live, reason = probe.liveness(now)
            if not live:
                return False, reason
            reasons.append(reason)
        return True, "; ".join(reasons) or "running"
