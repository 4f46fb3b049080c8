"""A real worker as a health source: its readiness and liveness through run(), shutdown and
the drain, and its metrics per outcome, job type and lane. Both backends, virtual time (the
HTTP side, on real sockets, is in tests/health/test_worker_endpoints.py)."""

from __future__ import annotations

import logging
from typing import Any

import anyio
import pytest
from prometheus_client.parser import text_string_to_metric_families

from sepp_anyio import HandlerError, JobCtx, Payload, RetryDirective, Worker
from sepp_anyio.testing import open_in_memory_client

from ._helpers import QUEUE, EngineSpy, Probe, enqueue, running, unavailable

pytestmark = pytest.mark.anyio

#: wait + the worker's margin (15 s + the longest reserve backoff, 30 s) for wait=5.
LIMIT = 5.0 + 15.0 + 30.0


def samples(worker: Worker) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """The worker's metrics as Prometheus parses them: (name, sorted labels) -> value."""
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(worker.metrics.render())
        for s in family.samples
    }


def jobs_total(job_type: str, outcome: str) -> tuple[str, tuple[tuple[str, str], ...]]:
    return (
        "sepp_jobs_total",
        (("job_type", job_type), ("lane", "default"), ("outcome", outcome)),
    )


LANE = (("lane", "default"),)


async def test_probes_follow_run_shutdown_and_the_drain() -> None:
    gate, probe = anyio.Event(), Probe()

    async def held(payload: Payload | None, ctx: JobCtx) -> None:
        await gate.wait()

    async with open_in_memory_client() as (client, _engine):
        worker = Worker(client, [QUEUE], wait=5.0)
        worker.handle("t", probe.handler(held))
        # Before run(): live (setup may be running), not ready.
        assert not worker.readiness()
        assert worker.liveness(anyio.current_time()) == (True, "not started yet")
        stopped = anyio.Event()

        async def run_then_mark(*, task_status: Any) -> None:
            await worker.run(task_status=task_status)
            stopped.set()

        async with anyio.create_task_group() as tg:
            await tg.start(run_then_mark)
            assert worker.readiness()
            assert worker.liveness(anyio.current_time())[0]
            await enqueue(client)
            await probe.wait_starts(1)
            worker.shutdown()
            # From the first shutdown signal: not ready, but live through the drain however
            # long it takes.
            assert not worker.readiness()
            assert worker.liveness(anyio.current_time() + 10 * LIMIT) == (True, "draining")
            gate.set()
            await stopped.wait()
            assert not worker.readiness()
            assert worker.liveness(anyio.current_time()) == (False, "the worker has stopped")


async def test_shutdown_before_run_is_never_ready() -> None:
    async with open_in_memory_client() as (client, _engine):
        worker = Worker(client, [QUEUE])
        worker.shutdown()
        await worker.run()
        assert not worker.readiness()
        assert not worker.liveness(anyio.current_time())[0]


async def test_a_stuck_reserve_is_not_live_and_a_busy_worker_is() -> None:
    async with open_in_memory_client() as (client, engine):
        spy = EngineSpy(engine)
        spy.stall["reserve"].append(float("inf"))  # the first reserve is never answered
        worker = Worker(client, [QUEUE], wait=5.0, max_in_flight=1)
        gate, probe = anyio.Event(), Probe()

        async def held(payload: Payload | None, ctx: JobCtx) -> None:
            await gate.wait()

        worker.handle("t", probe.handler(held))
        async with running(worker):
            await spy.wait_until(lambda: len(spy.of("reserve")) == 1)
            now = anyio.current_time()
            assert worker.liveness(now + LIMIT - 1) == (True, "lane default: reserving")
            live, reason = worker.liveness(now + LIMIT + 1)
            assert not live
            assert reason.startswith("lane default: a reserve has been running for 5")
            # The client's own deadline (wait + 10 s) ends the stalled reserve; the next one
            # gets the job, and with its only slot busy the worker waits for capacity: live
            # however long the handler takes.
            await enqueue(client)
            await probe.wait_starts(1)
            await spy.wait_until(lambda: len(spy.of("reserve")) >= 2)
            await anyio.wait_all_tasks_blocked()
            assert worker.liveness(anyio.current_time() + 100 * LIMIT) == (
                True,
                "lane default: waiting for capacity",
            )
            gate.set()


async def test_metrics_count_outcomes_per_job_type_and_lane() -> None:
    async def handler(payload: Payload | None, ctx: JobCtx) -> None:
        assert payload is not None
        kind = payload.json()["n"]
        if kind == 1:
            raise HandlerError("later", RetryDirective.after(60))
        if kind == 2:
            raise HandlerError("never", RetryDirective.dead_letter())
        if kind == 3:
            await anyio.sleep(1.5)  # a few lease extensions (lease 1 s)

    async with open_in_memory_client() as (client, engine):
        spy = EngineSpy(engine)
        worker = Worker(client, [QUEUE], wait=5.0, lease=1.0, auto_extend=True)
        worker.handle("a", handler)
        worker.handle("b", handler)
        # Before any job: the lane's series exist at 0.
        before = samples(worker)
        assert before[("sepp_jobs_in_flight", LANE)] == 0
        assert before[("sepp_reserve_errors_total", LANE)] == 0
        spy.fail("reserve", unavailable())
        async with running(worker):
            await spy.wait_for("reserve", 1, ok=False)
            for n in range(4):
                await enqueue(client, job_type="a", first=n)
            await enqueue(client, job_type="b")
            await spy.wait_until(lambda: len(spy.of("ack", ok=True)) == 3)
            await spy.wait_until(lambda: len(spy.of("nack", ok=True)) == 2)
        got = samples(worker)
    assert got[jobs_total("a", "acked")] == 2
    assert got[jobs_total("a", "retried")] == 1
    assert got[jobs_total("a", "dead_lettered")] == 1
    assert got[jobs_total("b", "acked")] == 1
    assert got[("sepp_jobs_in_flight", LANE)] == 0
    assert got[("sepp_reserve_errors_total", LANE)] == 1
    assert got[("sepp_lease_extensions_total", LANE)] == len(spy.of("extend", ok=True)) > 0
    assert got[("sepp_settle_failures_total", LANE)] == 0
    count = ("sepp_job_duration_seconds_count", (("job_type", "a"), ("lane", "default")))
    assert got[count] == 4
    slow = (
        "sepp_job_duration_seconds_bucket",
        (("job_type", "a"), ("lane", "default"), ("le", "1.0")),
    )
    assert got[slow] == 3  # the 1.5 s job is above 1 s


async def test_a_failed_ack_counts_as_a_settle_failure() -> None:
    async def slow(payload: Payload | None, ctx: JobCtx) -> None:
        if ctx.attempt == 1:
            await anyio.sleep(3)  # outlives its 2 s lease: the late ack is refused

    async with open_in_memory_client() as (client, engine):
        spy = EngineSpy(engine)
        worker = Worker(client, [QUEUE], lease=2.0)
        worker.handle("t", slow)
        await enqueue(client)
        async with running(worker):
            await spy.wait_for("ack", 2, ok=False)
        got = samples(worker)
    assert got[jobs_total("t", "settle_failed")] == 1
    assert got[jobs_total("t", "acked")] == 1
    assert got[("sepp_settle_failures_total", LANE)] == 1


def _waited(call: Any) -> float:
    """A recorded reserve's long-poll window, in seconds (0 for a short poll)."""
    wait = call.request.wait_timeout
    return 0.0 if not wait else float(wait.total_seconds())


async def test_failing_reserves_make_the_worker_unready_and_the_recovery_is_logged_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The server gone for 7.5 s: /readyz stays 200 for ``unready_after`` (5 s) from the
    first failed reserve, then 503 until a reserve works again (it used to stay 200 for the
    whole outage); the first reserve after a failure is a short poll, so the recovery shows
    at once, in one INFO line."""
    outage = True
    probe = Probe()
    async with open_in_memory_client() as (client, engine):
        spy = EngineSpy(engine)
        spy.reject["reserve"] = lambda request: unavailable() if outage else None
        worker = Worker(client, [QUEUE], wait=5.0, reserve_error_backoff=1.0)
        worker.handle("t", probe.handler())
        with caplog.at_level(logging.INFO, "sepp_anyio.worker"):
            async with running(worker):
                await spy.wait_for("reserve", 1, ok=False)
                began = anyio.current_time()
                assert worker.readiness()
                await anyio.sleep_until(began + 4.5)
                assert worker.readiness()  # failing for 4.5 s: not yet
                await anyio.sleep_until(began + 5.5)
                assert not worker.readiness()
                await anyio.sleep_until(began + 7.5)
                assert not worker.readiness()
                # Failures at +0, +1, ..., +7 (a reserve each reserve_error_backoff).
                assert len(spy.of("reserve", ok=False)) == 8
                outage = False
                [recovered] = await spy.wait_for("reserve", 1)
                assert recovered.at == pytest.approx(began + 8.0)
                assert worker.readiness()
                # The short poll that found the server back, then long polls as before.
                await spy.wait_until(lambda: len(spy.of("reserve")) == 10)
                await enqueue(client)
                await probe.wait_starts(1)
                assert worker.readiness()
        reserves = spy.of("reserve")
        assert [_waited(c) for c in reserves[:10]] == [5.0] + [0.0] * 8 + [5.0]
    messages = [(r.levelno, r.getMessage()) for r in caplog.records if "again" in r.getMessage()]
    assert messages == [
        (
            logging.INFO,
            f"worker {worker.worker_id} reserving from {QUEUE} again after 8 failed attempts"
            " over 8.0s",
        )
    ]


async def test_a_short_outage_keeps_the_worker_ready_and_unready_after_is_its_setting() -> None:
    failures = 2
    async with open_in_memory_client() as (client, engine):
        spy = EngineSpy(engine)
        spy.fail("reserve", *(unavailable() for _ in range(failures)))
        worker = Worker(client, [QUEUE], wait=5.0, reserve_error_backoff=2.0, unready_after=3.5)
        worker.handle("t", Probe().handler())
        async with running(worker):
            await spy.wait_for("reserve", 1, ok=False)
            began = anyio.current_time()
            await anyio.sleep_until(began + 3.4)
            assert worker.readiness()
            # The second failure was at +2; the third reserve, at +4, works: never 3.5 s.
            await spy.wait_for("reserve", 1)
            assert anyio.current_time() == pytest.approx(began + 4.0)
            assert worker.readiness()

    async with open_in_memory_client() as (client, engine):
        spy = EngineSpy(engine)
        spy.fail("reserve", *(unavailable() for _ in range(failures)))
        worker = Worker(client, [QUEUE], wait=5.0, reserve_error_backoff=2.0, unready_after=1.0)
        worker.handle("t", Probe().handler())
        async with running(worker):
            await spy.wait_for("reserve", 1, ok=False)
            began = anyio.current_time()
            await anyio.sleep_until(began + 1.5)
            assert not worker.readiness()
            await spy.wait_for("reserve", 1)
            assert worker.readiness()
