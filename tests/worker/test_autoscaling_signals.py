"""The autoscaling signals on a worker's ``/metrics`` text, parsed with prometheus_client's
parser: ``sepp_job_queue_wait_seconds`` (reserve time minus the later of enqueue and
schedule), ``sepp_worker_saturation`` (time-weighted since the previous scrape) and
``sepp_worker_idle_reserves_total``. In-process server, virtual time, both backends."""

from __future__ import annotations

from typing import Any

import anyio
import pytest
from prometheus_client.parser import text_string_to_metric_families

import sepp_anyio as sepp
from sepp_anyio._health._saturation import Saturation
from sepp_anyio.testing import open_in_memory_client

pytestmark = pytest.mark.anyio

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape(worker: sepp.Worker[Any]) -> Samples:
    """What ``/metrics`` serves (the registry's render, from the event loop), parsed."""
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(worker.metrics.render())
        for sample in family.samples
    }


LANE = (("lane", "default"),)


async def test_queue_wait_counts_from_the_later_of_enqueue_and_schedule() -> None:
    async with open_in_memory_client() as (client, _):
        await client.enqueue(sepp.EnqueueRequest("q", "waited"))
        # Scheduled for 20 s from now: its wait starts then, not at its enqueue.
        await client.enqueue(sepp.EnqueueRequest("q", "scheduled", delay=20.0))
        await anyio.sleep(7.0)  # the first job waits 7 s for a worker
        worker = sepp.Worker(client, ["q"], wait=1.0)
        handled = 0
        both = anyio.Event()

        @worker.catch_all
        async def handle(payload: sepp.Payload | None, ctx: sepp.JobCtx) -> None:
            nonlocal handled
            handled += 1
            if handled == 2:
                both.set()

        async with worker:
            with anyio.fail_after(60):
                await both.wait()
            values = scrape(worker)
    key = (("queue", "q"),)
    assert values[("sepp_job_queue_wait_seconds_count", key)] == 2
    # 7 s for the first; the scheduled one reserved within a second of its time (the
    # worker's long poll of 1 s), so both together well under 7 + 1.
    assert 7.0 <= values[("sepp_job_queue_wait_seconds_sum", key)] <= 8.0
    assert values[("sepp_job_queue_wait_seconds_bucket", (("le", "1.0"), *key))] == 1
    assert values[("sepp_job_queue_wait_seconds_bucket", (("le", "5.0"), *key))] == 1
    assert values[("sepp_job_queue_wait_seconds_bucket", (("le", "10.0"), *key))] == 2


async def test_saturation_is_the_time_weighted_share_since_the_previous_scrape() -> None:
    async with open_in_memory_client() as (client, _):
        started, release, done = anyio.Event(), anyio.Event(), anyio.Event()

        async def settled(ctx: sepp.JobCtx, outcome: sepp.Outcome, error: object) -> None:
            done.set()

        worker = sepp.Worker(client, ["q"], wait=1.0, max_in_flight=2, on_outcome=settled)

        @worker.handler("hold")
        async def hold(payload: sepp.Payload | None, ctx: sepp.JobCtx) -> None:
            started.set()
            await release.wait()

        async with worker:
            assert scrape(worker)[("sepp_worker_saturation", LANE)] == 0
            await client.enqueue(sepp.EnqueueRequest("q", "hold"))
            with anyio.fail_after(60):
                await started.wait()
            # The reserve and the start take no virtual time: one of two slots is held
            # for all of the next 6 s, so the average since the first scrape is 1/2.
            await anyio.sleep(6.0)
            busy = scrape(worker)[("sepp_worker_saturation", LANE)]
            assert busy == pytest.approx(0.5, abs=0.02)
            # A second scrape at the same instant reports the share in use right now.
            assert scrape(worker)[("sepp_worker_saturation", LANE)] == 0.5
            # Half of the next 4 s busy (1 slot of 2), half idle: 0.25.
            await anyio.sleep(2.0)
            release.set()
            with anyio.fail_after(60):
                await done.wait()
            await anyio.sleep(2.0)
            assert scrape(worker)[("sepp_worker_saturation", LANE)] == pytest.approx(0.25, abs=0.02)
            # Idle since: 0.
            await anyio.sleep(3.0)
            assert scrape(worker)[("sepp_worker_saturation", LANE)] == 0


async def test_idle_reserves_count_the_reserves_that_returned_no_job() -> None:
    async with open_in_memory_client() as (client, _):
        worker = sepp.Worker(client, ["q"], wait=1.0)
        handled = anyio.Event()

        @worker.handler("one")
        async def one(payload: sepp.Payload | None, ctx: sepp.JobCtx) -> None:
            handled.set()

        async with worker:
            idle = ("sepp_worker_idle_reserves_total", LANE)
            assert scrape(worker)[idle] == 0
            # Each empty long poll returns after wait = 1 s: five of them in 5.5 s.
            await anyio.sleep(5.5)
            quiet = scrape(worker)[idle]
            assert quiet == 5
            await client.enqueue(sepp.EnqueueRequest("q", "one"))
            with anyio.fail_after(60):
                await handled.wait()
            # The reserve that brought the job is not idle.
            assert scrape(worker)[idle] == quiet
            stats = worker.statistics()
        assert stats.reserves >= quiet + 1


def test_saturation_windows_are_independent_and_exact() -> None:
    saturation = Saturation(4)
    saturation.start(0.0)
    prometheus, otel = saturation.window(), saturation.window()
    saturation.change(2, 1.0)  # 2 of 4 from t=1
    saturation.change(-1, 3.0)  # 1 of 4 from t=3
    # 0..4: 0*1 + 2*2 + 1*1 = 5 slot-seconds of 16.
    assert prometheus.sample(4.0) == pytest.approx(5 / 16)
    # 4..6: 1 slot of 4 all along.
    assert prometheus.sample(6.0) == pytest.approx(0.25)
    # The other reader's first interval is still the whole 0..6: 7 slot-seconds of 24.
    assert otel.sample(6.0) == pytest.approx(7 / 24)
    # No time since: the share in use now.
    assert otel.sample(6.0) == 0.25


def test_saturation_outside_the_event_loop_follows_the_real_clock() -> None:
    # No event loop in this thread (an OpenTelemetry exporter's): anyio time is told from
    # the monotonic clock, anchored at the start.
    saturation = Saturation(2)
    assert saturation.now() is None  # not started: nothing to anchor on
    assert saturation.window().sample() == 0
    saturation.start(100.0)
    saturation.change(1, 100.0)
    now = saturation.now()
    assert now is not None and 100.0 <= now < 160.0
    # One slot of two all along since the start, whenever "now" is.
    assert saturation.window().sample() == pytest.approx(0.5)
