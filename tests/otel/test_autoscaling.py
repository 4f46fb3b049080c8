"""The autoscaling signals through OpenTelemetry: ``sepp.job.queue_wait``,
``sepp.worker.saturation`` and ``sepp.worker.idle_reserves`` (in-process server, virtual
time; the SDK's in-memory reader collects on the event loop's thread)."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

import sepp_anyio as sepp
from sepp_anyio.testing import open_in_memory_client

from .conftest import Telemetry

pytestmark = pytest.mark.anyio


def _points(telemetry: Telemetry, name: str) -> dict[tuple[tuple[str, Any], ...], Any]:
    data = telemetry.reader.get_metrics_data()
    out: dict[tuple[tuple[str, Any], ...], Any] = {}
    if data is None:  # nothing recorded yet in this process
        return out
    for resource in data.resource_metrics:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                if metric.name == name:
                    for point in metric.data.data_points:
                        out[tuple(sorted((point.attributes or {}).items()))] = point
    return out


async def test_queue_wait_saturation_and_idle_reserves(telemetry: Telemetry) -> None:
    # A stopped worker is no longer observed: this lane label is this run's only.
    lane = sepp.Lane(["otel-scale"], max_in_flight=4)
    # The SDK's sums are cumulative over the session: compare with what was there before.
    key = (("queue", "otel-scale"),)
    before = _points(telemetry, "sepp.job.queue_wait").get(key)
    count_before, sum_before = (0, 0.0) if before is None else (before.count, before.sum)
    idle_before = _points(telemetry, "sepp.worker.idle_reserves").get((("lane", "otel-scale"),))
    idle_count_before = 0 if idle_before is None else idle_before.value
    async with open_in_memory_client() as (client, _):
        await client.enqueue(sepp.EnqueueRequest("otel-scale", "hold"))
        await anyio.sleep(3.0)  # waits 3 s for a worker
        started, release = anyio.Event(), anyio.Event()
        worker = sepp.Worker(client, [lane], wait=1.0)

        @worker.handler("hold")
        async def hold(payload: sepp.Payload | None, ctx: sepp.JobCtx) -> None:
            started.set()
            await release.wait()

        async with worker:
            try:
                with anyio.fail_after(60):
                    await started.wait()
                _points(telemetry, "sepp.worker.saturation")  # this reader's interval starts
                await anyio.sleep(8.0)
                saturations = _points(telemetry, "sepp.worker.saturation")
            finally:
                release.set()
        # One slot of four held all along.
        assert saturations[(("lane", "otel-scale"),)].value == pytest.approx(0.25, abs=0.01)
        assert list(saturations) == [(("lane", "otel-scale"),)]
        # Once the worker has stopped, its lane is not observed.
        assert _points(telemetry, "sepp.worker.saturation") == {}
        wait = _points(telemetry, "sepp.job.queue_wait")[key]
        assert wait.count - count_before == 1
        assert 3.0 <= wait.sum - sum_before <= 3.5
        idle = _points(telemetry, "sepp.worker.idle_reserves")[(("lane", "otel-scale"),)]
        # Long polls of 1 s with three slots free, over the 8 s the job was held.
        assert 7 <= idle.value - idle_count_before <= 9
