"""docs/reference/telemetry.rst names every span, span attribute, metric instrument and
metric attribute the library emits, and each span and instrument it names is emitted: a
workload that reaches every RPC and every worker outcome is compared with its tables."""

from __future__ import annotations

import re
from pathlib import Path

import anyio
import pytest

import sepp_anyio as sepp
from sepp_anyio.testing import open_in_memory_client

from .conftest import Telemetry

pytestmark = pytest.mark.anyio

PAGE = Path(__file__).resolve().parents[2] / "docs" / "reference" / "telemetry.rst"
_KEY = re.compile(r"``([a-z_]+(?:\.[a-z_]+)*)``")


def _tables() -> list[list[list[str]]]:
    """The page's list-tables, as rows of cells (without the header rows)."""
    tables: list[list[list[str]]] = []
    rows: list[list[str]] | None = None
    for line in PAGE.read_text().splitlines():
        if line.startswith(".. list-table::"):
            rows = []
            tables.append(rows)
        elif rows is not None and line.startswith("   * - "):
            rows.append([line[len("   * - ") :]])
        elif rows is not None and (line.startswith("     - ") or line == "     -"):
            rows[-1].append(line[len("     - ") :])
        elif rows is not None and line.startswith("       ") and rows:
            rows[-1][-1] += " " + line.strip()
        elif rows is not None and line and not line.startswith(" "):
            rows = None
    return [table[1:] for table in tables]


def documented_spans() -> dict[str, set[str]]:
    spans_table = _tables()[0]
    spans: dict[str, set[str]] = {}
    for names, _kind, attributes in spans_table:
        keys = set(_KEY.findall(attributes)) | {"messaging.system"}
        for name in _KEY.findall(names):
            spans[name] = keys
    for keys in spans.values():  # "as ``sepp.enqueue``": that span's attributes too
        for other in [k for k in keys if k in spans]:
            keys |= spans[other]
    return spans


def documented_metrics() -> dict[str, set[str]]:
    return {
        _KEY.findall(name)[0]: set(_KEY.findall(attributes))
        for name, _kind, _unit, attributes, _meaning in _tables()[1]
    }


async def _workload() -> None:
    """Every RPC and every worker outcome: ack, retry, dead letter, lease extension."""
    async with open_in_memory_client(storage={"dead_letter_retention_ms": 3_600_000}) as (
        client,
        _,
    ):
        await client.enqueue(sepp.EnqueueRequest("q", "ok"))
        await client.enqueue_batch([sepp.EnqueueRequest("q", "flaky")])
        await client.enqueue_atomic(
            [sepp.EnqueueRequest("q", "doomed"), sepp.EnqueueRequest("q", "slow")]
        )
        worker = sepp.Worker(client, ["q"], lease=3.0, auto_extend=True, wait=1.0)
        settled = 0
        done = anyio.Event()

        def one_more() -> None:
            nonlocal settled
            settled += 1
            if settled == 4:
                done.set()

        @worker.handler("ok")
        async def ok(payload: sepp.Payload | None, ctx: sepp.JobCtx) -> None:
            one_more()

        @worker.handler("flaky")
        async def flaky(payload: sepp.Payload | None, ctx: sepp.JobCtx) -> None:
            if ctx.attempt == 1:
                raise sepp.HandlerError.retry("once")
            one_more()

        @worker.handler("doomed")
        async def doomed(payload: sepp.Payload | None, ctx: sepp.JobCtx) -> None:
            one_more()
            raise sepp.HandlerError.permanent("never")

        @worker.handler("slow")
        async def slow(payload: sepp.Payload | None, ctx: sepp.JobCtx) -> None:
            await anyio.sleep(2.5)  # (virtual time) past an extension, a third of 3 s
            one_more()

        async with worker:
            with anyio.fail_after(60):
                await done.wait()
        await client.drain_dead_letters("q", max=10)
        await client.server_info()


async def test_the_reference_names_every_span_and_attribute(telemetry: Telemetry) -> None:
    await _workload()
    documented = documented_spans()
    seen: dict[str, set[str]] = {}
    for span in telemetry.spans.get_finished_spans():
        if span.instrumentation_scope is None or span.instrumentation_scope.name != "sepp_anyio":
            continue
        keys = seen.setdefault(span.name, set())
        keys |= set(span.attributes or {})
        for event in span.events:
            keys |= {event.name} | set(event.attributes or {})
    assert set(seen) == set(documented), (set(seen), set(documented))
    for name, keys in seen.items():
        assert keys <= documented[name], f"{name}: undocumented {keys - documented[name]}"


async def test_the_reference_names_every_instrument_and_attribute(
    telemetry: Telemetry,
) -> None:
    await _workload()
    documented = documented_metrics()
    seen: dict[str, set[str]] = {}
    for (name, attributes), _value in telemetry.points().items():
        seen.setdefault(name, set()).update(key for key, _ in attributes)
    assert set(seen) <= set(documented), set(seen) - set(documented)
    # Lease loss needs a lost lease (tests/otel/test_metrics.py), and saturation is
    # observed only while a worker runs (tests/otel/test_autoscaling.py); every other one
    # is here.
    assert set(documented) - set(seen) <= {
        "sepp.jobs.lease_lost",
        "sepp.reserves.failed",
        "sepp.worker.saturation",
    }
    for name, keys in seen.items():
        assert keys <= documented[name], f"{name}: undocumented {keys - documented[name]}"
