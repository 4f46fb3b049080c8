"""Optional OpenTelemetry integration (the ``otel`` extra); a no-op without it.

OpenTelemetry is imported lazily, the first time it could matter, so the core
never pays for it and never fails when it is absent: every function here has
a cheap path that does nothing when the API package is not installed.

What it provides:

* CLIENT spans per RPC (``sepp.enqueue``, ``sepp.reserve``, ...), with the
  OpenTelemetry messaging attributes that apply, and error status on failure
  (never on cancellation: a cancelled call is not an error of the call);
* W3C ``traceparent``/``tracestate`` metadata on every RPC, taken inside that
  RPC's span, so the server's span becomes its child;
* the same context stamped into enqueued jobs that carry none;
* a CONSUMER span ``sepp.process`` per job, *linked* (not parented) to the
  job's trace context, and the worker's metrics.

Metric instrument names are the official Python client's (``sepp.jobs.*``,
``sepp.reserves.*``) so dashboards carry over; the meter is ``sepp_anyio``.
"""

from __future__ import annotations

import contextlib
import threading
import weakref
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager
from functools import cache
from typing import Any, Protocol

from ._version import __version__

__all__ = [
    "Metrics",
    "TraceCarrier",
    "attach_trace_context",
    "available",
    "client_span",
    "current_trace_context",
    "metrics",
    "process_span",
    "trace_metadata",
    "tracing",
]

SYSTEM = "sepp"


class TraceCarrier(Protocol):
    """A W3C trace context as plain strings (``sepp_anyio.TraceContext`` is one).

    A protocol rather than the model's class: this module is a leaf under the model.
    """

    @property
    def traceparent(self) -> str:
        """The ``traceparent`` header value."""
        ...

    @property
    def tracestate(self) -> str | None:
        """The ``tracestate`` header value, if any."""
        ...


@cache
def _api() -> Any:
    """The ``opentelemetry`` namespace modules, or None when not installed."""
    try:
        from opentelemetry import context, metrics, trace
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
    except ImportError:
        return None

    class Api:
        pass

    api = Api()
    # Providers that mean "no SDK installed": spans would be discarded, so the span
    # helpers skip them (making a non-recording span is not free).
    api.idle_tracer_providers = (trace.ProxyTracerProvider, trace.NoOpTracerProvider)  # type: ignore[attr-defined]
    # Set once an SDK tracer provider has been seen: the API lets a process set its
    # provider only once, so from then on the answer cannot change.
    api.tracing = False  # type: ignore[attr-defined]
    api.trace = trace  # type: ignore[attr-defined]
    api.context = context  # type: ignore[attr-defined]
    api.metrics = metrics  # type: ignore[attr-defined]
    # A fixed W3C propagator, not the global one: the sepp protocol carries
    # exactly traceparent/tracestate, whatever the application configured.
    api.propagator = TraceContextTextMapPropagator()  # type: ignore[attr-defined]
    return api


def available() -> bool:
    """Whether the OpenTelemetry API is importable."""
    return _api() is not None


def _tracing(api: Any) -> bool:
    """Whether an SDK tracer provider is installed.

    Asked on every use until one is (the application may install it after our first
    call, or have it loaded from ``OTEL_PYTHON_TRACER_PROVIDER``, which the API's own
    getter does); after that, remembered.
    """
    if api.tracing:
        return True
    api.tracing = not isinstance(api.trace.get_tracer_provider(), api.idle_tracer_providers)
    return bool(api.tracing)


def _tracer() -> Any:
    # Looked up per use (cheap): the application may install its provider
    # after our first call.
    return _api().trace.get_tracer("sepp_anyio", __version__)


def trace_metadata() -> list[tuple[str, str]]:
    """``traceparent`` (and ``tracestate``) of the current span, as gRPC metadata.

    Empty without OpenTelemetry or without a valid current span.
    """
    api = _api()
    if api is None:
        return []
    context = api.trace.get_current_span().get_span_context()
    if not context.is_valid:
        return []
    # The W3C format directly: cheaper than the propagator, on every RPC.
    metadata = [
        (
            "traceparent",
            f"00-{context.trace_id:032x}-{context.span_id:016x}-{int(context.trace_flags):02x}",
        )
    ]
    if context.trace_state:
        metadata.append(("tracestate", context.trace_state.to_header()))
    return metadata


def current_trace_context() -> tuple[str, str | None] | None:
    """The current span's ``(traceparent, tracestate)``, or None.

    None without OpenTelemetry or without a valid current span; the caller validates.
    """
    metadata = dict(trace_metadata())
    traceparent = metadata.get("traceparent")
    if not traceparent:
        return None
    return traceparent, metadata.get("tracestate") or None


def _span_context_of(trace_context: TraceCarrier | None) -> Any:
    """The OpenTelemetry SpanContext a trace context describes, or None."""
    api = _api()
    if api is None or trace_context is None:
        return None
    carrier = {"traceparent": trace_context.traceparent}
    if trace_context.tracestate:
        carrier["tracestate"] = trace_context.tracestate
    ctx = api.propagator.extract(carrier)
    span_context = api.trace.get_current_span(ctx).get_span_context()
    return span_context if span_context.is_valid else None


@contextlib.contextmanager
def attach_trace_context(trace_context: TraceCarrier | None) -> Iterator[None]:
    """Make ``trace_context`` the current (remote parent) context in the block.

    A no-op without OpenTelemetry or with an unusable context.
    """
    api = _api()
    span_context = _span_context_of(trace_context)
    if api is None or span_context is None:
        yield
        return
    ctx = api.trace.set_span_in_context(api.trace.NonRecordingSpan(span_context))
    token = api.context.attach(ctx)
    try:
        yield
    finally:
        api.context.detach(token)


# Without an SDK the span helpers hand out this one reusable no-op context (a
# generator-based context manager would cost a few microseconds a call for nothing).
_NO_SPAN: contextlib.nullcontext[None] = contextlib.nullcontext(None)


def tracing() -> bool:
    """Whether spans are made: the OpenTelemetry API is installed, and an SDK tracer
    provider with it.

    Asking costs about a microsecond while no SDK is installed (the API's getter looks
    the environment up), so a reserve asks once, for itself and for the spans of the
    jobs it brings (``_model._job.set_traced``).
    """
    api = _api()
    return api is not None and _tracing(api)


def client_span(
    name: str,
    attributes: Mapping[str, Any] | Callable[[], Mapping[str, Any]],
    traced: bool | None = None,
) -> AbstractContextManager[Any]:
    """A CLIENT span around one RPC (None inside when OpenTelemetry is absent).

    ``attributes`` may be a function that builds them, called only when a span
    is made (the hot RPCs pass one: without an SDK nothing is built).
    ``traced`` is :func:`tracing`'s answer when the caller has it (None: ask).
    An ``Exception`` marks the span as error and is recorded; cancellation
    and other ``BaseException``s end the span without an error status.
    """
    if traced is None:
        traced = tracing()
    if not traced:
        return _NO_SPAN
    api = _api()
    if callable(attributes):
        attributes = attributes()
    return _client_span(api, name, attributes)


@contextlib.contextmanager
def _client_span(api: Any, name: str, attributes: Mapping[str, Any]) -> Iterator[Any]:
    with _tracer().start_as_current_span(
        name,
        kind=api.trace.SpanKind.CLIENT,
        attributes={"messaging.system": SYSTEM, **attributes},
        record_exception=False,
        set_status_on_exception=False,
    ) as span:
        try:
            yield span
        except Exception as exc:
            span.record_exception(exc)
            span.set_status(api.trace.Status(api.trace.StatusCode.ERROR, str(exc)))
            raise


def process_span(
    traced: bool | None,
    trace_context: TraceCarrier | None,
    attributes: Callable[..., Mapping[str, Any]],
    *args: Any,
) -> AbstractContextManager[Any]:
    """The CONSUMER span ``sepp.process`` of one job, linked to its producer.

    A link rather than a parent: the job may run long after, and many times
    for, the trace that enqueued it. Yields the span (None without OTel);
    the caller sets its status, since it knows the job's outcome. The span's
    attributes are ``attributes(*args)``, called only when a span is made (a
    function and its arguments rather than a closure: nothing is built per job
    when tracing is off). ``traced`` is :func:`tracing`'s answer (None: ask).
    """
    if traced is None:
        traced = tracing()
    if not traced:
        return _NO_SPAN
    return _process_span(_api(), trace_context, attributes(*args))


@contextlib.contextmanager
def _process_span(
    api: Any, trace_context: TraceCarrier | None, attributes: Mapping[str, Any]
) -> Iterator[Any]:
    span_context = _span_context_of(trace_context)
    links = [api.trace.Link(span_context)] if span_context is not None else []
    with _tracer().start_as_current_span(
        "sepp.process",
        kind=api.trace.SpanKind.CONSUMER,
        links=links,
        attributes={
            "messaging.system": SYSTEM,
            "messaging.operation.type": "process",
            **attributes,
        },
        record_exception=False,
        set_status_on_exception=False,
    ) as span:
        yield span


def mark_error(span: Any, description: str, exc: BaseException | None = None) -> None:
    """Set error status on ``span`` (a no-op for None)."""
    if span is None:
        return
    api = _api()
    if exc is not None:
        span.record_exception(exc)
    span.set_status(api.trace.Status(api.trace.StatusCode.ERROR, description))


def add_event(span: Any, name: str, attributes: Mapping[str, Any] | None = None) -> None:
    if span is not None:
        span.add_event(name, attributes=dict(attributes or {}))


class _InFlight(Protocol):
    """What the in-flight gauge reads: a worker's count of the jobs it is handling."""

    _in_flight: int


class _SaturationSource(Protocol):
    """What ``sepp.worker.saturation`` reads: a lane's ``_health.Saturation``."""

    capacity: int

    def window(self) -> Any:
        """A reader of its own (``sample()`` returns the average since the last one)."""
        ...


class Metrics:
    """The worker's instruments, made once from the API's global meter; :attr:`enabled`
    is False (and they do not exist) without the OpenTelemetry API.

    They are recorded into without asking whether an SDK is installed: until one is, the
    API's meter hands out proxy instruments that drop what they are given, and forward
    to the SDK's from the moment its provider is set (OpenTelemetry's own contract for
    instruments made early). That costs less per job than checking for a provider.

    ``sepp.jobs.in_flight`` is observed rather than counted up and down: the SDK asks for
    it at each collection, and it reads the count of every worker it was given
    (:meth:`count_in_flight`). A +1 before an SDK is installed and its -1 after would
    otherwise leave the count off for good.

    ``sepp.worker.saturation`` is observed too, per lane label: each lane registered with
    :meth:`observe_saturation` gets a reader of its own (the average since the previous
    collection), and lanes of the same label (two workers in one process) are combined,
    weighted by their capacity.
    """

    enabled: bool
    processed: Any
    nacked: Any
    reserves_completed: Any
    reserves_failed: Any
    duration: Any
    lease_lost: Any
    queue_wait: Any
    idle_reserves: Any
    _observation: Any

    def __init__(self) -> None:
        # The SDK calls the observation callback from its exporter's thread.
        self._lock = threading.Lock()
        self._workers: weakref.WeakSet[_InFlight] = weakref.WeakSet()
        # Each lane's saturation, to its label and this reader's window on it.
        self._saturations: weakref.WeakKeyDictionary[_SaturationSource, tuple[str, Any]] = (
            weakref.WeakKeyDictionary()
        )
        api = _api()
        self.enabled = api is not None
        if api is not None:
            self._create(api)

    def count_in_flight(self, worker: _InFlight) -> None:
        """Add ``worker``'s jobs to ``sepp.jobs.in_flight`` for as long as it exists."""
        with self._lock:
            self._workers.add(worker)

    def observe_saturation(self, lane: str, saturation: _SaturationSource) -> None:
        """Report ``saturation`` as ``sepp.worker.saturation{lane}`` for as long as it
        exists (once per saturation; a second call changes nothing)."""
        with self._lock:
            if saturation not in self._saturations:
                self._saturations[saturation] = (lane, saturation.window())

    def forget_saturation(self, saturation: _SaturationSource) -> None:
        """Stop reporting ``saturation`` (its worker stopped; no error if not reported)."""
        with self._lock:
            self._saturations.pop(saturation, None)

    def _observe_saturation(self, options: Any) -> Iterator[Any]:
        with self._lock:
            sources = [(s.capacity, *entry) for s, entry in list(self._saturations.items())]
        # Per label: sum(average * capacity) / sum(capacity), the share of the whole.
        busy: dict[str, float] = {}
        capacity: dict[str, int] = {}
        for slots, lane, window in sources:
            busy[lane] = busy.get(lane, 0.0) + window.sample() * slots
            capacity[lane] = capacity.get(lane, 0) + slots
        for lane, value in busy.items():
            yield self._observation(value / capacity[lane], {"lane": lane})

    def _observe_in_flight(self, options: Any) -> Iterator[Any]:
        with self._lock:
            workers = list(self._workers)
        yield self._observation(sum(worker._in_flight for worker in workers))

    def _create(self, api: Any) -> None:
        meter = api.metrics.get_meter("sepp_anyio", __version__)
        self._observation = api.metrics.Observation
        self.processed = meter.create_counter(
            "sepp.jobs.processed", unit="{job}", description="Jobs acknowledged after processing"
        )
        self.nacked = meter.create_counter(
            "sepp.jobs.nacked", unit="{job}", description="Jobs negatively acknowledged"
        )
        meter.create_observable_up_down_counter(
            "sepp.jobs.in_flight",
            callbacks=[self._observe_in_flight],
            unit="{job}",
            description="Jobs currently being processed",
        )
        self.reserves_completed = meter.create_counter(
            "sepp.reserves.completed", unit="{call}", description="Reserve calls that succeeded"
        )
        self.reserves_failed = meter.create_counter(
            "sepp.reserves.failed", unit="{call}", description="Reserve calls that failed"
        )
        self.duration = meter.create_histogram(
            "sepp.job.duration", unit="s", description="Handler run time per job"
        )
        self.lease_lost = meter.create_counter(
            "sepp.jobs.lease_lost",
            unit="{job}",
            description="Jobs cancelled because their lease was lost",
        )
        self.queue_wait = meter.create_histogram(
            "sepp.job.queue_wait",
            unit="s",
            description="Time from a job being ready to its reserve, per queue",
        )
        self.idle_reserves = meter.create_counter(
            "sepp.worker.idle_reserves",
            unit="{call}",
            description="Reserve calls that returned no job, per lane",
        )
        meter.create_observable_gauge(
            "sepp.worker.saturation",
            callbacks=[self._observe_saturation],
            unit="1",
            description="Share of the lane's max_in_flight slots in use, time-weighted since"
            " the previous collection",
        )


@cache
def metrics() -> Metrics:
    """The process-wide instruments (made at the first call)."""
    return Metrics()
