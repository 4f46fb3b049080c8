from __future__ import annotations

from typing import Any

import pytest
import trio.testing
from opentelemetry import metrics, trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from tests.worker._vtime import VirtualTimeLoop


class Telemetry:
    """The process-wide SDK providers (OpenTelemetry allows setting them once)."""

    def __init__(self) -> None:
        self.spans = InMemorySpanExporter()
        self.reader = InMemoryMetricReader()
        tracer_provider = TracerProvider()
        tracer_provider.add_span_processor(SimpleSpanProcessor(self.spans))
        trace.set_tracer_provider(tracer_provider)
        metrics.set_meter_provider(MeterProvider(metric_readers=[self.reader]))

    def points(self) -> dict[tuple[str, tuple[tuple[str, Any], ...]], float]:
        """Every metric point as (name, sorted attributes) -> value (sum or count)."""
        out: dict[tuple[str, tuple[tuple[str, Any], ...]], float] = {}
        data = self.reader.get_metrics_data()
        if data is None:
            return out
        for resource in data.resource_metrics:
            for scope in resource.scope_metrics:
                if scope.scope.name != "sepp_anyio":
                    continue
                for metric in scope.metrics:
                    for point in metric.data.data_points:
                        key = (metric.name, tuple(sorted((point.attributes or {}).items())))
                        value: Any = getattr(point, "value", None)
                        if value is None:
                            value = getattr(point, "count", 0)
                        out[key] = float(value)
        return out


_TELEMETRY: Telemetry | None = None


@pytest.fixture
def telemetry() -> Telemetry:
    global _TELEMETRY
    if _TELEMETRY is None:
        _TELEMETRY = Telemetry()
    _TELEMETRY.spans.clear()
    return _TELEMETRY


@pytest.fixture(
    params=[
        pytest.param(("asyncio", {"loop_factory": VirtualTimeLoop}), id="asyncio-vtime"),
        pytest.param(("trio", {}), id="trio-mockclock"),
    ]
)
def anyio_backend(request: pytest.FixtureRequest) -> tuple[str, dict[str, Any]]:
    """Both backends on virtual time, so lease expiry takes no real time."""
    backend, options = request.param
    if backend == "trio":
        options = {"clock": trio.testing.MockClock(autojump_threshold=0)}
    return backend, options
