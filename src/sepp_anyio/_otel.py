"""Optional OpenTelemetry integration (the ``otel`` extra); a no-op without it.

OpenTelemetry is imported lazily, the first time it could matter, so the core
never pays for it and never fails when it is absent.
"""

from __future__ import annotations

from functools import cache
from typing import Any

__all__ = ["trace_metadata"]


@cache
def _propagator() -> Any:
    try:
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
    except ImportError:
        return None
    # A fixed W3C propagator, not the global one: the sepp protocol carries
    # exactly traceparent/tracestate, whatever the application configured.
    return TraceContextTextMapPropagator()


def trace_metadata() -> list[tuple[str, str]]:
    """``traceparent`` (and ``tracestate``) of the current span, as gRPC metadata.

    Empty without OpenTelemetry or without a valid current span.
    """
    propagator = _propagator()
    if propagator is None:
        return []
    carrier: dict[str, str] = {}
    propagator.inject(carrier)
    return [(key, value) for key, value in carrier.items() if key in ("traceparent", "tracestate")]
