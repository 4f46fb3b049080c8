"""Traces and metrics of a producer and a worker, printed to the console.

Needs the ``otel`` extra (``pip install "sepp-anyio[otel]"``). Runs against an
in-process reference server, so nothing else is needed::

    python examples/otel_console.py            # asyncio
    python examples/otel_console.py trio

You will see, per job, a ``sepp.enqueue`` CLIENT span under the producer's
span, and a ``sepp.process`` CONSUMER span *linked* to it, with the ack as its
child; then the worker's metrics (``sepp.jobs.processed`` and friends).
"""

from __future__ import annotations

import logging
import sys

import anyio
from opentelemetry import metrics, trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import ConsoleMetricExporter, PeriodicExportingMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import ConsoleSpanExporter, SimpleSpanProcessor

import sepp_anyio as sepp
from sepp_anyio.testing import open_in_memory_client

JOBS = 3


def setup_telemetry() -> MeterProvider:
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(ConsoleSpanExporter()))
    trace.set_tracer_provider(tracer_provider)
    reader = PeriodicExportingMetricReader(ConsoleMetricExporter(), export_interval_millis=60_000)
    meter_provider = MeterProvider(metric_readers=[reader])
    metrics.set_meter_provider(meter_provider)
    return meter_provider


async def main() -> None:
    tracer = trace.get_tracer("example.producer")
    async with open_in_memory_client() as (client, _server):
        with tracer.start_as_current_span("signup"):
            for user in range(JOBS):
                await client.enqueue(
                    sepp.EnqueueRequest("emails", "welcome", payload=sepp.Payload.from_json(user))
                )

        worker = sepp.Worker(client, ["emails"], wait=1.0)
        done = anyio.Event()
        handled = 0

        @worker.handler("welcome")
        async def welcome(payload: sepp.Payload | None, ctx: sepp.JobCtx) -> None:
            nonlocal handled
            # Job id, type, attempt and worker id are on this record too.
            logging.getLogger("example").info("welcoming user %s", payload and payload.json())
            handled += 1
            if handled == JOBS:
                done.set()

        async with worker:
            await done.wait()


if __name__ == "__main__":
    logging.basicConfig(
        level=logging.INFO,
        format="%(levelname)s %(name)s [job=%(sepp_job_id)s attempt=%(sepp_attempt)s] %(message)s",
    )
    meter_provider = setup_telemetry()
    anyio.run(main, backend=sys.argv[1] if len(sys.argv) > 1 else "asyncio")
    meter_provider.shutdown()  # flushes the metrics to the console
