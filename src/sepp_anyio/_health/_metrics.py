"""A small metrics registry that renders the Prometheus text exposition format (0.0.4).

No OpenTelemetry SDK or prometheus_client needed. The worker updates it on its hot path, so an
update is a dict lookup (the label values to their series, created on first use) and an add::

    jobs = registry.counter("sepp_jobs_total", "Jobs finished.", ("job_type", "outcome"))
    jobs.labels("send", "acked").inc()          # or keep the series and call .inc() on it

Not thread-safe: update it from the event loop's thread (the worker's bookkeeping runs
there, sync handlers' threads do not touch it). Rendering reads a consistent-enough
snapshot: an update between two lines of one scrape shows up in the next.
"""

from __future__ import annotations

import itertools
import logging
import math
import re
from bisect import bisect_left
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Generic, TypeVar

from .._model._error_root import InvalidArgumentError, InvalidArgumentTypeError

__all__ = [
    "Counter",
    "CounterSeries",
    "Gauge",
    "GaugeSeries",
    "Histogram",
    "HistogramSeries",
    "MetricsRegistry",
]

_METRIC_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*\Z")
_LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*\Z")
logger = logging.getLogger("sepp_anyio.health")

#: Most distinct label combinations one family keeps: a label fed from outside (a job type
#: a producer made up) cannot grow the registry, and the scrape, without bound.
DEFAULT_MAX_SERIES = 2_000
#: The label value of every label of the series that takes the updates of combinations
#: past ``max_series``, so that they are still counted, together.
OVERFLOW_LABEL_VALUE = "_overflow"


def _format_value(value: float) -> str:
    if isinstance(value, int):
        return str(value)
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(value)


def _escape_label_value(value: str) -> str:
    # The text format escapes exactly these three in label values.
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _escape_help(text: str) -> str:
    # HELP text escapes backslash and line feed (a quote is literal there).
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def _label_block(names: Sequence[str], values: Sequence[str], extra: str = "") -> str:
    parts = [f'{n}="{_escape_label_value(v)}"' for n, v in zip(names, values, strict=True)]
    if extra:
        parts.append(extra)
    return "{" + ",".join(parts) + "}" if parts else ""


S = TypeVar("S")


class _Family(Generic[S]):
    """Series of one metric, one per combination of label values."""

    _type = ""

    def __init__(self, name: str, help: str, labelnames: Sequence[str], max_series: int) -> None:
        self.name = name
        self.help = help
        self.labelnames = tuple(labelnames)
        self._max_series = max_series
        self._series: dict[tuple[str, ...], S] = {}
        if not self.labelnames:
            self._series[()] = self._new()

    def _new(self) -> S:
        raise NotImplementedError

    def labels(self, *values: str) -> S:
        """The series for these label values (in ``labelnames`` order), created at 0.

        Past ``max_series`` combinations, a new one gets the shared series whose every label
        is ``"_overflow"`` (logged once per family): counted, but not apart.

        Raises:
            ValueError: the wrong number of values.
            TypeError: a value that is not a str.
        """
        series = self._series.get(values)
        if series is not None:
            return series
        return self._add(values)

    def _add(self, values: tuple[str, ...]) -> S:
        if len(values) != len(self.labelnames):
            raise InvalidArgumentError(
                f"{self.name} has labels {self.labelnames}, got {len(values)} value(s)"
            )
        for name, value in zip(self.labelnames, values, strict=True):
            if not isinstance(value, str):
                raise InvalidArgumentTypeError(
                    f"{self.name}: label {name} must be a str, got {value!r}"
                )
        if len(self._series) >= self._max_series:
            overflow = (OVERFLOW_LABEL_VALUE,) * len(values)
            series = self._series.get(overflow)
            if series is None:
                logger.warning(
                    "metric %s reached %d label combinations (max_series); further ones"
                    " are counted under %s=%r",
                    self.name,
                    self._max_series,
                    "/".join(self.labelnames),
                    OVERFLOW_LABEL_VALUE,
                )
                # One past the bound, so the overflow series itself always fits.
                series = self._series[overflow] = self._new()
            return series
        series = self._series[values] = self._new()
        return series

    def _samples(self) -> Iterator[str]:
        raise NotImplementedError

    def render(self) -> Iterator[str]:
        yield f"# HELP {self.name} {_escape_help(self.help)}"
        yield f"# TYPE {self.name} {self._type}"
        yield from self._samples()


class CounterSeries:
    """One counter series; only goes up."""

    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value: float = 0

    def inc(self, amount: float = 1) -> None:
        """Add ``amount`` (>= 0; not checked here, this is the hot path)."""
        self.value += amount


class Counter(_Family[CounterSeries]):
    """A monotonically increasing count; the name should end in ``_total``."""

    _type = "counter"

    def _new(self) -> CounterSeries:
        return CounterSeries()

    def inc(self, amount: float = 1) -> None:
        """Increment the unlabelled series."""
        self.labels().inc(amount)

    def _samples(self) -> Iterator[str]:
        for values, series in list(self._series.items()):
            labels = _label_block(self.labelnames, values)
            yield f"{self.name}{labels} {_format_value(series.value)}"


class GaugeSeries:
    """One gauge series; goes up and down."""

    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value: float = 0

    def inc(self, amount: float = 1) -> None:
        self.value += amount

    def dec(self, amount: float = 1) -> None:
        self.value -= amount

    def set(self, value: float) -> None:
        self.value = value


class Gauge(_Family[GaugeSeries]):
    """A value that goes up and down (jobs in flight)."""

    _type = "gauge"

    def _new(self) -> GaugeSeries:
        return GaugeSeries()

    def set(self, value: float) -> None:
        """Set the unlabelled series."""
        self.labels().set(value)

    def _samples(self) -> Iterator[str]:
        for values, series in list(self._series.items()):
            labels = _label_block(self.labelnames, values)
            yield f"{self.name}{labels} {_format_value(series.value)}"


class HistogramSeries:
    """One histogram series: a count per bucket (not cumulative: an observation touches one
    bucket), their sum and total."""

    __slots__ = ("_bounds", "count", "counts", "sum")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self._bounds = bounds
        self.counts = [0] * (len(bounds) + 1)  # the last one is +Inf
        self.count = 0
        self.sum = 0.0

    def observe(self, value: float) -> None:
        """Record one observation: a binary search over the bounds and three adds."""
        # bisect_left: a value equal to a bound belongs to that bound's bucket (le is <=).
        self.counts[bisect_left(self._bounds, value)] += 1
        self.count += 1
        self.sum += value


class Histogram(_Family[HistogramSeries]):
    """Observations counted into buckets with upper bounds (``le``) plus ``+Inf``."""

    _type = "histogram"

    def __init__(
        self,
        name: str,
        help: str,
        labelnames: Sequence[str],
        max_series: int,
        buckets: Iterable[float],
    ) -> None:
        bounds = tuple(float(b) for b in buckets)
        if bounds and math.isinf(bounds[-1]) and bounds[-1] > 0:
            bounds = bounds[:-1]  # +Inf is always there
        if not bounds:
            raise InvalidArgumentError(
                f"{name}: a histogram needs at least one finite bucket bound"
            )
        if any(math.isnan(b) or math.isinf(b) for b in bounds):
            raise InvalidArgumentError(f"{name}: bucket bounds must be finite, got {bounds}")
        if any(a >= b for a, b in itertools.pairwise(bounds)):
            raise InvalidArgumentError(
                f"{name}: bucket bounds must increase strictly, got {bounds}"
            )
        if "le" in labelnames:
            raise InvalidArgumentError(
                f"{name}: 'le' is reserved for the bucket bound in a histogram"
            )
        self.buckets = bounds
        self._les = [_format_value(b) for b in bounds] + ["+Inf"]
        super().__init__(name, help, labelnames, max_series)

    def _new(self) -> HistogramSeries:
        return HistogramSeries(self.buckets)

    def observe(self, value: float) -> None:
        """Observe into the unlabelled series."""
        self.labels().observe(value)

    def _samples(self) -> Iterator[str]:
        for values, series in list(self._series.items()):
            cumulative = 0
            for le, count in zip(self._les, list(series.counts), strict=True):
                cumulative += count
                labels = _label_block(self.labelnames, values, f'le="{le}"')
                yield f"{self.name}_bucket{labels} {cumulative}"
            labels = _label_block(self.labelnames, values)
            yield f"{self.name}_sum{labels} {_format_value(series.sum)}"
            # The count is the +Inf bucket's, so the two always agree within one scrape.
            yield f"{self.name}_count{labels} {cumulative}"


class MetricsRegistry:
    """Metric families by name, rendered in registration order.

    Args:
        max_series: the default bound on label combinations per family.
    """

    def __init__(self, *, max_series: int = DEFAULT_MAX_SERIES) -> None:
        if max_series < 1:
            raise InvalidArgumentError(f"max_series must be >= 1, got {max_series}")
        self._max_series = max_series
        self._families: dict[str, _Family[object]] = {}
        self._before_render: list[Callable[[], None]] = []

    def _check(self, name: str, labelnames: Sequence[str]) -> None:
        if not _METRIC_NAME.match(name):
            raise InvalidArgumentError(f"{name!r} is not a valid metric name")
        if name in self._families:
            raise InvalidArgumentError(f"a metric named {name!r} is already registered")
        if isinstance(labelnames, str):
            raise InvalidArgumentTypeError("labelnames must be a sequence of names, not one str")
        for label in labelnames:
            if not isinstance(label, str) or not _LABEL_NAME.match(label):
                raise InvalidArgumentError(f"{name}: {label!r} is not a valid label name")
            if label.startswith("__"):
                raise InvalidArgumentError(f"{name}: label names starting with '__' are reserved")
        if len(set(labelnames)) != len(labelnames):
            raise InvalidArgumentError(f"{name}: duplicate label names in {tuple(labelnames)}")

    def counter(self, name: str, help: str, labelnames: Sequence[str] = ()) -> Counter:
        """Register a counter.

        Raises:
            ValueError: an invalid or already registered name, or invalid label names.
        """
        self._check(name, labelnames)
        family = Counter(name, help, labelnames, self._max_series)
        self._families[name] = family  # type: ignore[assignment]
        return family

    def gauge(self, name: str, help: str, labelnames: Sequence[str] = ()) -> Gauge:
        """Register a gauge (raises as :meth:`counter`)."""
        self._check(name, labelnames)
        family = Gauge(name, help, labelnames, self._max_series)
        self._families[name] = family  # type: ignore[assignment]
        return family

    def histogram(
        self, name: str, help: str, labelnames: Sequence[str] = (), *, buckets: Iterable[float]
    ) -> Histogram:
        """Register a histogram with these bucket upper bounds (``+Inf`` is implied).

        Raises:
            ValueError: as :meth:`counter`, or bounds that are empty, not finite or not
                strictly increasing, or a label named ``le``.
        """
        self._check(name, labelnames)
        family = Histogram(name, help, labelnames, self._max_series, buckets)
        self._families[name] = family  # type: ignore[assignment]
        return family

    def before_render(self, update: Callable[[], None]) -> None:
        """Call ``update()`` at the start of every :meth:`render`, in the order added: for a
        gauge whose value is computed per scrape (``sepp_worker_saturation``, an average
        since the previous scrape). ``update`` must not raise."""
        self._before_render.append(update)

    def render(self) -> str:
        """Every family in the text exposition format 0.0.4 (ends with a newline)."""
        for update in list(self._before_render):
            update()
        lines: list[str] = []
        for family in list(self._families.values()):
            lines.extend(family.render())
        return "\n".join(lines) + "\n" if lines else ""
