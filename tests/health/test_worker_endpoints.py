"""``sepp_anyio.serve_health`` over a real Worker (in-process server, real loopback sockets and
clocks, both backends): the probes flip at start, at the shutdown signal and at the drain's
end, a blocked event loop fails /livez, and /metrics parses with prometheus_client."""

from __future__ import annotations

import time
from typing import Any

import anyio
import pytest
from prometheus_client.parser import text_string_to_metric_families

import sepp_anyio
from sepp_anyio import EnqueueRequest, JobCtx, Payload, Worker
from sepp_anyio.testing import open_in_memory_client

from ._client import get

pytestmark = pytest.mark.anyio


async def test_probes_flip_at_start_shutdown_and_drain_end() -> None:
    started, gate = anyio.Event(), anyio.Event()

    async def held(payload: Payload | None, ctx: JobCtx) -> None:
        started.set()
        await gate.wait()

    async with open_in_memory_client() as (client, _engine):
        worker = Worker(client, ["q"], wait=1.0)
        worker.handle("t", held)
        stopped = anyio.Event()

        async def run(*, task_status: Any) -> None:
            await worker.run(task_status=task_status)
            stopped.set()

        async with anyio.create_task_group() as tg:
            port = await tg.start(sepp_anyio.serve_health, worker)
            # Before run(): live, not ready.
            assert (await get(port, "/livez")).status == 200
            assert (await get(port, "/readyz")).status == 503
            await tg.start(run)
            assert (await get(port, "/readyz")).status == 200
            assert (await get(port, "/livez")).status == 200
            await client.enqueue(EnqueueRequest("q", "t"))
            await started.wait()
            worker.shutdown()  # what the CLI does at the first signal
            ready, live = await get(port, "/readyz"), await get(port, "/livez")
            assert (ready.status, live.status, live.text) == (503, 200, "ok\n")
            gate.set()
            await stopped.wait()
            live = await get(port, "/livez")
            assert (live.status, live.text) == (503, "the worker has stopped\n")
            assert (await get(port, "/readyz")).status == 503
            tg.cancel_scope.cancel()


async def test_a_blocked_loop_fails_livez_of_a_running_worker() -> None:
    async with open_in_memory_client() as (client, _engine):
        worker = Worker(client, ["q"], wait=1.0)
        worker.handle("t", lambda payload, ctx: None)
        async with anyio.create_task_group() as tg:
            port = await tg.start(
                lambda **kw: sepp_anyio.serve_health(
                    worker, max_loop_lag=0.1, lag_interval=0.02, lag_window=5.0, **kw
                )
            )
            await tg.start(worker.run)
            assert (await get(port, "/livez")).status == 200
            time.sleep(0.3)  # noqa: ASYNC251 (blocking the loop is the point of the test)
            blocked = await get(port, "/livez")
            assert blocked.status == 503 and "event loop lag" in blocked.text
            assert "event loop lag" in blocked.text
            tg.cancel_scope.cancel()


async def test_metrics_of_a_worker_parse_with_prometheus_client() -> None:
    done = anyio.Event()
    count = 0

    async def handler(payload: Payload | None, ctx: JobCtx) -> None:
        nonlocal count
        count += 1
        if count == 3:
            done.set()

    async with open_in_memory_client() as (client, _engine):
        worker = Worker(client, ["q"], wait=1.0)
        worker.handle("send", handler)
        stopped = anyio.Event()

        async def run(*, task_status: Any) -> None:
            await worker.run(task_status=task_status)
            stopped.set()

        async with anyio.create_task_group() as tg:
            port = await tg.start(sepp_anyio.serve_health, worker)
            await tg.start(run)
            await client.enqueue_batch([EnqueueRequest("q", "send") for _ in range(3)])
            await done.wait()
            # The third job's ack may still be on its way: the drain waits for it.
            worker.shutdown()
            await stopped.wait()
            response = await get(port, "/metrics")
            tg.cancel_scope.cancel()
    families = {f.name: f for f in text_string_to_metric_families(response.text)}
    assert {
        "sepp_jobs",
        "sepp_jobs_in_flight",
        "sepp_job_duration_seconds",
        "sepp_reserve_errors",
        "sepp_lease_extensions",
        "sepp_settle_failures",
        "sepp_job_queue_wait_seconds",
        "sepp_worker_saturation",
        "sepp_worker_idle_reserves",
    } <= set(families)
    assert families["sepp_job_duration_seconds"].type == "histogram"
    values = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for f in families.values()
        for s in f.samples
    }
    key = (("job_type", "send"), ("lane", "default"))
    assert values[("sepp_job_duration_seconds_count", key)] == 3
    assert values[("sepp_jobs_total", (*key, ("outcome", "acked")))] == 3
    assert values[("sepp_jobs_in_flight", (("lane", "default"),))] == 0
    assert values[("sepp_reserve_errors_total", (("lane", "default"),))] == 0
    assert values[("sepp_job_queue_wait_seconds_count", (("queue", "q"),))] == 3
    assert 0 <= values[("sepp_worker_saturation", (("lane", "default"),))] <= 1
