"""WorkerHealth and its lane probes: the readiness and liveness rules, on explicit times."""

from __future__ import annotations

import pytest

from sepp_anyio._health import WorkerHealth


def test_lifecycle_readiness_and_liveness() -> None:
    health = WorkerHealth(wait=5.0, margin=1.0)
    lane = health.lane("main")
    assert (health.readiness(), health.liveness(0.0)) == (False, (True, "not started yet"))
    health.mark_started(now=100.0)
    assert health.readiness()
    lane.reserving(100.0)
    assert health.liveness(105.5) == (True, "lane main: reserving")
    lane.between(105.5)
    lane.reserving(105.6)
    health.mark_shutting_down()
    assert not health.readiness()
    # Draining: live, however long since the last reserve.
    assert health.liveness(10_000.0) == (True, "draining")
    health.mark_stopped()
    assert (health.readiness(), health.liveness(10_000.0)) == (
        False,
        (False, "the worker has stopped"),
    )
    # A second run.
    health.mark_started(now=20_000.0)
    assert health.readiness() and health.liveness(20_001.0)[0]


def test_a_reserve_loop_past_wait_plus_margin_is_not_live() -> None:
    health = WorkerHealth(wait=5.0, margin=1.0)
    lane = health.lane("main")
    health.mark_started(now=0.0)
    assert health.liveness(6.0)[0]  # not reserved yet, but within the limit
    assert health.liveness(6.5) == (
        False,
        "lane main: no reserve 6.5s after the start (more than wait + margin = 6s)",
    )
    lane.reserving(10.0)
    assert health.liveness(16.0)[0]
    assert health.liveness(16.5) == (
        False,
        "lane main: a reserve has been running for 6.5s (more than wait + margin = 6s)",
    )
    lane.between(16.5)
    assert health.liveness(22.5)[0]
    assert health.liveness(23.0) == (
        False,
        "lane main: no reserve for 6.5s (more than wait + margin = 6s)",
    )


def test_waiting_for_capacity_is_live_for_any_time() -> None:
    health = WorkerHealth(wait=5.0)
    lane = health.lane("main")
    health.mark_started(now=0.0)
    lane.waiting_for_capacity(1.0)
    assert health.liveness(1e6) == (True, "lane main: waiting for capacity")


def test_every_lane_must_be_live() -> None:
    health = WorkerHealth(wait=1.0, margin=1.0)
    fast, slow = health.lane("fast"), health.lane("slow")
    assert health.lane("fast") is fast
    health.mark_started(now=0.0)
    fast.reserving(10.0)
    slow.between(5.0)
    assert health.liveness(10.0) == (
        False,
        "lane slow: no reserve for 5.0s (more than wait + margin = 2s)",
    )
    slow.waiting_for_capacity(10.0)
    assert health.liveness(10.0) == (
        True,
        "lane fast: reserving; lane slow: waiting for capacity",
    )


def test_lanes_get_metric_series_and_the_registry_is_shared() -> None:
    health = WorkerHealth(wait=1.0)
    health.lane("bulk")
    assert health.metrics is health.worker_metrics.registry
    assert 'sepp_jobs_in_flight{lane="bulk"} 0' in health.metrics.render()


@pytest.mark.parametrize(
    ("options", "error"),
    [
        ({"wait": -1.0}, ValueError),
        ({"wait": float("inf")}, ValueError),
        ({"wait": float("nan")}, ValueError),
        ({"wait": 1.0, "margin": -0.5}, ValueError),
        ({"wait": "5"}, TypeError),
        ({"wait": True}, TypeError),
        ({"wait": 1.0, "unready_after": -1.0}, ValueError),
        ({"wait": 1.0, "unready_after": "5"}, TypeError),
    ],
)
def test_bad_arguments(options: dict[str, object], error: type[Exception]) -> None:
    with pytest.raises(error, match=r"wait|margin|unready_after"):
        WorkerHealth(**options)  # type: ignore[arg-type]


def test_reserves_failing_for_unready_after_make_the_worker_unready_until_one_succeeds() -> None:
    health = WorkerHealth(wait=5.0, unready_after=5.0)
    main, other = health.lane("main"), health.lane("other")
    health.mark_started(now=0.0)
    assert health.ready_at(100.0)
    main.reserve_failed(100.0)
    assert main.failing and not other.failing
    main.reserve_failed(101.0)
    # Counted from the streak's first failure, whether or not another has failed since.
    assert health.ready_at(104.9)
    assert not health.ready_at(105.0)
    assert not health.ready_at(1000.0)
    assert main.failing_for(105.0) == 5.0 and other.failing_for(105.0) == 0.0
    # One success ends the streak: its count and length, once.
    assert main.reserve_succeeded(106.5) == (2, 6.5)
    assert main.reserve_succeeded(107.0) is None
    assert health.ready_at(107.0) and health.readiness()
    # One lane failing is enough; a new run starts with no streak.
    other.reserve_failed(200.0)
    assert not health.ready_at(205.0)
    health.mark_started(now=300.0)
    assert health.ready_at(305.0) and not other.failing
    # Shutting down is not ready, failing or not.
    health.mark_shutting_down()
    assert not health.ready_at(300.0) and not health.readiness()


def test_unready_after_zero_is_not_ready_from_the_first_failure() -> None:
    health = WorkerHealth(wait=5.0, unready_after=0.0)
    lane = health.lane("main")
    health.mark_started(now=0.0)
    lane.reserve_failed(10.0)
    assert not health.ready_at(10.0)
