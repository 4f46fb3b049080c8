"""The OpenTelemetry hooks notice an SDK provider however and whenever it is installed.

Each case runs in a fresh interpreter: OpenTelemetry allows setting the global
providers once per process.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

import sepp_anyio

# Instruments are made (and recorded into) before the SDK is installed, then recorded
# into again after: only what came after may reach the SDK's reader.
_CHECK = """
from opentelemetry import metrics
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from sepp_anyio import _otel

class Busy:
    _in_flight = 3

api = _otel._api()
instruments = _otel.metrics()
busy = Busy()
instruments.count_in_flight(busy)
tracing_before = _otel._tracing(api)
instruments.processed.add(5, {{"job_type": "early"}})
reader = InMemoryMetricReader()
{install}
instruments.processed.add(1, {{"job_type": "late"}})
points = {{}}
data = reader.get_metrics_data()
for resource in data.resource_metrics if data else ():
    for scope in resource.scope_metrics:
        for metric in scope.metrics:
            for point in metric.data.data_points:
                points[metric.name, tuple(sorted(point.attributes.items()))] = point.value
print(tracing_before, _otel._tracing(api), sorted(points.items()))
"""

_BY_CODE = """
from opentelemetry import trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.trace import TracerProvider
trace.set_tracer_provider(TracerProvider())
metrics.set_meter_provider(MeterProvider(metric_readers=[reader]))
"""

_RECORDED = (
    "[(('sepp.jobs.in_flight', ()), 3), (('sepp.jobs.processed', (('job_type', 'late'),)), 1)]"
)


def _run(install: str, **env: str) -> str:
    environment = {key: value for key, value in os.environ.items() if not key.startswith("OTEL_")}
    environment.update(env)
    out = subprocess.run(
        [sys.executable, "-c", _CHECK.format(install=install)],
        capture_output=True,
        text=True,
        env=environment,
        check=True,
        timeout=60,
    )
    return out.stdout.strip()


@pytest.mark.parametrize(
    ("install", "env", "expected"),
    [
        ("", {}, "False False []"),
        (_BY_CODE, {}, f"False True {_RECORDED}"),
        # Loaded by the API from the environment: tracing is on from the first call (this
        # provider has no reader to look at).
        ("", {"OTEL_PYTHON_TRACER_PROVIDER": "sdk_tracer_provider"}, "True True []"),
    ],
    ids=["nothing", "set-in-code-later", "environment"],
)
def test_sdk_providers_are_detected(install: str, env: dict[str, str], expected: str) -> None:
    assert _run(install, **env) == expected


def test_only_the_public_opentelemetry_api_is_used() -> None:
    """No private name of OpenTelemetry's is imported or read (a private module, a
    leading-underscore attribute of one of its modules)."""
    source = Path(sepp_anyio.__file__).with_name("_otel.py").read_text()
    tree = ast.parse(source)
    imported: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("opentelemetry"):
            imported.append(node.module or "")
            imported.extend(alias.name for alias in node.names)
    assert imported, "the check found no OpenTelemetry import to look at"
    assert not [name for name in imported if any(p.startswith("_") for p in name.split("."))]
    # Attributes read off the API's modules (``api.trace._X``) and getattr by name.
    private_reads = [
        node.attr
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute)
        and node.attr.startswith("_")
        and not node.attr.startswith("__")
        and isinstance(node.value, ast.Attribute)
        and node.value.attr in {"trace", "metrics", "context"}
    ]
    by_name = [
        node.args[1].value
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and getattr(node.func, "id", None) == "getattr"
        and len(node.args) > 1
        and isinstance(node.args[1], ast.Constant)
    ]
    assert not private_reads and not by_name, (private_reads, by_name)


# A reserve asks once, for its jobs too: the job reserved before the SDK is installed has no
# spans; the one reserved after has its process span and its ack's span.
_WORKER = """
import sys
import anyio
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
import sepp_anyio as sepp
from sepp_anyio.testing import open_in_memory_client

spans = InMemorySpanExporter()

async def main():
    async with open_in_memory_client() as (client, _):
        # One in flight: the second reserve goes out only once the first handler is done.
        worker = sepp.Worker(client, ["q"], wait=1.0, max_in_flight=1)
        handled = []
        more = anyio.Event()

        @worker.handler("t")
        async def handle(payload, ctx):
            handled.append(ctx.id)
            if len(handled) == 1:
                provider = TracerProvider()
                provider.add_span_processor(SimpleSpanProcessor(spans))
                trace.set_tracer_provider(provider)
                more.set()
            else:
                worker.shutdown()

        await client.enqueue(sepp.EnqueueRequest("q", "t"))
        async with anyio.create_task_group() as tg:
            await tg.start(worker.run)
            await more.wait()
            await client.enqueue(sepp.EnqueueRequest("q", "t"))
    names = sorted(span.name for span in spans.get_finished_spans()
                   if span.name in ("sepp.process", "sepp.ack"))
    ids = {span.attributes.get("messaging.message.id") for span in spans.get_finished_spans()
           if span.name == "sepp.process"}
    print(names, ids == {handled[1]})

anyio.run(main, backend=sys.argv[1])
"""


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_a_running_worker_traces_from_its_next_reserve(backend: str) -> None:
    environment = {key: value for key, value in os.environ.items() if not key.startswith("OTEL_")}
    out = subprocess.run(
        [sys.executable, "-c", _WORKER, backend],
        capture_output=True,
        text=True,
        env=environment,
        check=True,
        timeout=60,
    )
    assert out.stdout.strip() == "['sepp.ack', 'sepp.process'] True"
