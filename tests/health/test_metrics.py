"""The metrics registry: updates, rendering, escaping and validation; every rendering is
checked with prometheus_client's own text parser."""

from __future__ import annotations

import math

import pytest
from prometheus_client.parser import text_string_to_metric_families

from sepp_anyio._health import DURATION_BUCKETS, MetricsRegistry, WorkerMetrics


def _parse(text: str) -> dict[str, list[tuple[str, dict[str, str], float]]]:
    """Family name -> its samples, as the Prometheus client library reads them."""
    return {
        family.name: [(s.name, s.labels, s.value) for s in family.samples]
        for family in text_string_to_metric_families(text)
    }


def test_counters_gauges_and_histograms_render_and_parse() -> None:
    registry = MetricsRegistry()
    jobs = registry.counter("jobs_total", "Jobs.", ("kind",))
    jobs.labels("a").inc()
    jobs.labels("a").inc(2)
    jobs.labels("b").inc(0.5)
    level = registry.gauge("level", "A level.")
    level.set(3)
    level.labels().dec(1.5)
    took = registry.histogram("took_seconds", "Durations.", ("kind",), buckets=(0.1, 1, 10))
    for value in (0.05, 0.1, 0.5, 5, 50):
        took.labels("a").observe(value)

    parsed = _parse(registry.render())
    assert parsed["jobs"] == [
        ("jobs_total", {"kind": "a"}, 3.0),
        ("jobs_total", {"kind": "b"}, 0.5),
    ]
    assert parsed["level"] == [("level", {}, 1.5)]
    assert parsed["took_seconds"] == [
        # Cumulative, and a value equal to a bound counts in that bound's bucket.
        ("took_seconds_bucket", {"kind": "a", "le": "0.1"}, 2.0),
        ("took_seconds_bucket", {"kind": "a", "le": "1.0"}, 3.0),
        ("took_seconds_bucket", {"kind": "a", "le": "10.0"}, 4.0),
        ("took_seconds_bucket", {"kind": "a", "le": "+Inf"}, 5.0),
        ("took_seconds_sum", {"kind": "a"}, 55.65),
        ("took_seconds_count", {"kind": "a"}, 5.0),
    ]


def test_the_text_has_help_and_type_lines_in_order() -> None:
    registry = MetricsRegistry()
    registry.counter("a_total", "First.").inc()
    registry.gauge("b", "Second.", ("x",))
    assert registry.render() == (
        "# HELP a_total First.\n# TYPE a_total counter\na_total 1\n"
        "# HELP b Second.\n# TYPE b gauge\n"
    )
    assert MetricsRegistry().render() == ""


@pytest.mark.parametrize(
    "value",
    ['say "hi"', "back\\slash", "line\nbreak", "tab\tand ünïcödé ✓", "", "trailing\\"],
)
def test_label_values_are_escaped(value: str) -> None:
    registry = MetricsRegistry()
    registry.counter("c_total", "Help with a \\ backslash\nand a newline.", ("v",)).labels(
        value
    ).inc()
    [family] = text_string_to_metric_families(registry.render())
    assert family.documentation == "Help with a \\ backslash\nand a newline."
    assert [(s.labels, s.value) for s in family.samples] == [({"v": value}, 1.0)]


def test_special_values_render_as_the_format_spells_them() -> None:
    registry = MetricsRegistry()
    gauge = registry.gauge("g", "G.", ("k",))
    gauge.labels("inf").set(math.inf)
    gauge.labels("-inf").set(-math.inf)
    gauge.labels("nan").set(math.nan)
    text = registry.render()
    assert 'g{k="inf"} +Inf\n' in text and 'g{k="-inf"} -Inf\n' in text
    assert 'g{k="nan"} NaN\n' in text
    values = {
        s.labels["k"]: s.value for s in next(iter(text_string_to_metric_families(text))).samples
    }
    assert values["inf"] == math.inf and values["-inf"] == -math.inf and math.isnan(values["nan"])


def test_an_update_reuses_the_series_object() -> None:
    registry = MetricsRegistry()
    counter = registry.counter("c_total", "C.", ("a", "b"))
    series = counter.labels("x", "y")
    assert counter.labels("x", "y") is series
    series.inc()
    assert counter.labels("x", "y").value == 1


def test_label_combinations_past_the_bound_share_an_overflow_series(
    caplog: pytest.LogCaptureFixture,
) -> None:
    registry = MetricsRegistry(max_series=3)
    counter = registry.counter("c_total", "C.", ("job_type", "lane"))
    for n in range(10):
        counter.labels(f"type{n}", "main").inc()
    samples = next(iter(text_string_to_metric_families(registry.render()))).samples
    assert len(samples) == 4
    assert samples[-1].labels == {"job_type": "_overflow", "lane": "_overflow"}
    assert samples[-1].value == 7
    assert sum(s.value for s in samples) == 10  # nothing lost
    assert sum("max_series" in r.getMessage() for r in caplog.records) == 1


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda r: r.counter("9bad", "x"), "not a valid metric name"),
        (lambda r: r.counter("ok_total", "x", ("bad-label",)), "not a valid label name"),
        (lambda r: r.counter("ok_total", "x", ("__reserved",)), "reserved"),
        (lambda r: r.counter("ok_total", "x", ("a", "a")), "duplicate label"),
        (lambda r: r.histogram("h", "x", ("le",), buckets=(1,)), "'le' is reserved"),
        (lambda r: r.histogram("h", "x", buckets=()), "at least one finite"),
        (lambda r: r.histogram("h", "x", buckets=(2, 1)), "increase strictly"),
        (lambda r: r.histogram("h", "x", buckets=(1, math.nan)), "finite"),
    ],
)
def test_bad_definitions_are_refused(build: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        build(MetricsRegistry())  # type: ignore[operator]


def test_a_name_registers_once_and_labels_must_match() -> None:
    registry = MetricsRegistry()
    counter = registry.counter("c_total", "C.", ("a",))
    with pytest.raises(ValueError, match="already registered"):
        registry.gauge("c_total", "again")
    with pytest.raises(ValueError, match=r"has labels \('a',\), got 2 value"):
        counter.labels("x", "y")
    with pytest.raises(TypeError, match="label a must be a str"):
        counter.labels(3)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="not one str"):
        registry.counter("d_total", "D.", "ab")


def test_worker_metrics_have_the_public_names_and_types() -> None:
    metrics = WorkerMetrics()
    metrics.add_lane("default")
    metrics.jobs.labels("send", "acked", "default").inc()
    metrics.in_flight.labels("default").inc()
    metrics.duration.labels("send", "default").observe(0.2)
    metrics.reserve_errors.labels("default").inc()
    metrics.lease_extensions.labels("default").inc(3)
    metrics.settle_failures.labels("default").inc()
    families = {f.name: f for f in text_string_to_metric_families(metrics.registry.render())}
    # The parser names counter families without their _total suffix.
    assert {name: f.type for name, f in families.items()} == {
        "sepp_jobs": "counter",
        "sepp_jobs_in_flight": "gauge",
        "sepp_job_duration_seconds": "histogram",
        "sepp_reserve_errors": "counter",
        "sepp_lease_extensions": "counter",
        "sepp_settle_failures": "counter",
        "sepp_job_queue_wait_seconds": "histogram",
        "sepp_worker_saturation": "gauge",
        "sepp_worker_idle_reserves": "counter",
    }
    [job] = families["sepp_jobs"].samples
    assert (job.name, job.labels, job.value) == (
        "sepp_jobs_total",
        {"job_type": "send", "outcome": "acked", "lane": "default"},
        1.0,
    )
    buckets = [
        s for s in families["sepp_job_duration_seconds"].samples if s.name.endswith("_bucket")
    ]
    assert len(buckets) == len(DURATION_BUCKETS) + 1
    assert [s.labels["le"] for s in buckets][-1] == "+Inf"
    assert families["sepp_lease_extensions"].samples[0].value == 3


def test_add_lane_shows_zeros_before_any_event() -> None:
    metrics = WorkerMetrics()
    metrics.add_lane("bulk")
    values = {
        (s.name, s.labels.get("lane")): s.value
        for f in text_string_to_metric_families(metrics.registry.render())
        for s in f.samples
    }
    assert values == {
        ("sepp_jobs_in_flight", "bulk"): 0,
        ("sepp_reserve_errors_total", "bulk"): 0,
        ("sepp_lease_extensions_total", "bulk"): 0,
        ("sepp_settle_failures_total", "bulk"): 0,
        ("sepp_worker_idle_reserves_total", "bulk"): 0,
        ("sepp_worker_saturation", "bulk"): 0,
    }
