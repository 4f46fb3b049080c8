"""Spans, links and propagation across the reference server (in-process)."""

from __future__ import annotations

import anyio
import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanKind, StatusCode

import sepp_anyio as sepp
from sepp_anyio.testing import open_in_memory_client

from .conftest import Telemetry

pytestmark = pytest.mark.anyio


def _by_name(spans: tuple[ReadableSpan, ...], name: str) -> list[ReadableSpan]:
    return [span for span in spans if span.name == name]


async def _run_until(worker: sepp.Worker, done: anyio.Event) -> None:
    async with anyio.create_task_group() as tg:
        await tg.start(worker.run)
        with anyio.fail_after(120):
            await done.wait()
        worker.shutdown()


async def test_enqueue_reserve_process_span_tree_and_link(telemetry: Telemetry) -> None:
    tracer = trace.get_tracer("test")
    async with open_in_memory_client() as (client, _):
        with tracer.start_as_current_span("producer") as producer:
            await client.enqueue(
                sepp.EnqueueRequest("emails", "send", payload=sepp.Payload.from_json(1))
            )
        worker = sepp.Worker(client, ["emails"], wait=1.0, worker_id="w-1")
        done = anyio.Event()
        seen: list[sepp.JobCtx] = []

        @worker.handler("send")
        async def send(payload: sepp.Payload | None, ctx: sepp.JobCtx) -> None:
            seen.append(ctx)
            # The handler runs inside the process span.
            assert trace.get_current_span().get_span_context().is_valid
            done.set()

        await _run_until(worker, done)

    spans = telemetry.spans.get_finished_spans()
    (enqueue,) = _by_name(spans, "sepp.enqueue")
    assert enqueue.kind is SpanKind.CLIENT
    assert enqueue.parent is not None
    assert enqueue.parent.span_id == producer.get_span_context().span_id
    assert enqueue.attributes is not None
    assert enqueue.attributes["messaging.system"] == "sepp"
    assert enqueue.attributes["messaging.destination.name"] == "emails"
    assert enqueue.attributes["messaging.batch.message_count"] == 1

    # The job carries the enqueue span's context, stamped inside that span.
    (ctx,) = seen
    assert ctx.trace_context is not None
    assert ctx.trace_context.trace_id == format(enqueue.context.trace_id, "032x")
    assert ctx.trace_context.span_id == format(enqueue.context.span_id, "016x")

    (process,) = _by_name(spans, "sepp.process")
    assert process.kind is SpanKind.CONSUMER
    assert process.parent is None or process.parent.trace_id != enqueue.context.trace_id
    (link,) = process.links
    assert link.context.trace_id == enqueue.context.trace_id
    assert link.context.span_id == enqueue.context.span_id
    assert process.attributes is not None
    assert process.attributes["messaging.message.id"] == ctx.id
    assert process.attributes["sepp.job.type"] == "send"
    assert process.attributes["sepp.job.attempt"] == 1
    assert process.attributes["messaging.destination.name"] == "emails"
    assert process.attributes["messaging.client.id"] == "w-1"
    assert process.status.status_code is not StatusCode.ERROR

    # The ack is a CLIENT span under the process span.
    (ack,) = _by_name(spans, "sepp.ack")
    assert ack.kind is SpanKind.CLIENT
    assert ack.parent is not None
    assert ack.parent.span_id == process.context.span_id
    assert ack.attributes is not None
    assert ack.attributes["messaging.message.id"] == ctx.id
    reserves = _by_name(spans, "sepp.reserve")
    assert reserves
    assert all(r.kind is SpanKind.CLIENT for r in reserves)
    assert any(
        r.attributes and r.attributes.get("messaging.batch.message_count") == 1 for r in reserves
    )


async def test_a_trace_context_set_by_the_caller_is_never_overwritten(telemetry: Telemetry) -> None:
    mine = sepp.TraceContext("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
    tracer = trace.get_tracer("test")
    async with open_in_memory_client() as (client, _):
        with tracer.start_as_current_span("producer"):
            acks = await client.enqueue_batch(
                [sepp.EnqueueRequest("q", "t", trace_context=mine), sepp.EnqueueRequest("q", "t")]
            )
        jobs = await client.reserve(["q"], lease=30, wait=0, max_jobs=2)
    ids = [ack.job_id for ack in acks if isinstance(ack, sepp.EnqueueAck)]
    contexts = {job.ctx.id: job.ctx.trace_context for job in jobs}
    assert contexts[ids[0]] == mine
    assert contexts[ids[1]] is not None
    assert contexts[ids[1]] != mine


async def test_no_span_no_stamp(telemetry: Telemetry) -> None:
    async with open_in_memory_client() as (client, _):
        await client.enqueue(sepp.EnqueueRequest("q", "t"))
        (job,) = await client.reserve(["q"], lease=30, wait=0)
    # The client's own span is current while stamping, so the job is linked
    # to it even without an application span.
    (enqueue,) = _by_name(telemetry.spans.get_finished_spans(), "sepp.enqueue")
    assert job.ctx.trace_context is not None
    assert job.ctx.trace_context.span_id == format(enqueue.context.span_id, "016x")


async def test_failing_handler_marks_the_process_span_as_error(telemetry: Telemetry) -> None:
    async with open_in_memory_client() as (client, _):
        await client.enqueue(sepp.EnqueueRequest("q", "boom"))
        worker = sepp.Worker(client, ["q"], wait=1.0)
        done = anyio.Event()

        @worker.handler("boom")
        async def boom(payload: sepp.Payload | None, ctx: sepp.JobCtx) -> None:
            done.set()
            raise sepp.HandlerError.permanent("bad input")

        await _run_until(worker, done)
        # Let the settle finish: run() has returned, so it has.
    (process,) = _by_name(telemetry.spans.get_finished_spans(), "sepp.process")
    assert process.status.status_code is StatusCode.ERROR
    assert "bad input" in (process.status.description or "")
    assert [event.name for event in process.events] == ["exception"]
    (nack,) = _by_name(telemetry.spans.get_finished_spans(), "sepp.nack")
    assert nack.parent is not None
    assert nack.parent.span_id == process.context.span_id


async def test_lost_lease_adds_an_event_to_the_process_span(telemetry: Telemetry) -> None:
    async with open_in_memory_client() as (client, _):
        await client.enqueue(sepp.EnqueueRequest("q", "slow"))
        # No auto-extension, and the job may not outlive its lease.
        worker = sepp.Worker(client, ["q"], wait=1.0, lease=2.0, max_lease_time=1.0)
        done = anyio.Event()

        @worker.handler("slow")
        async def slow(payload: sepp.Payload | None, ctx: sepp.JobCtx) -> None:
            try:
                await anyio.sleep(60)
            finally:
                done.set()

        await _run_until(worker, done)
    (process,) = _by_name(telemetry.spans.get_finished_spans(), "sepp.process")
    assert [event.name for event in process.events] == ["sepp.lease_lost"]
    assert process.status.status_code is StatusCode.ERROR
    assert not _by_name(telemetry.spans.get_finished_spans(), "sepp.ack")


async def test_failed_rpc_span_is_error_and_cancelled_one_is_not(telemetry: Telemetry) -> None:
    async with open_in_memory_client() as (client, _):
        await client.enqueue(sepp.EnqueueRequest("q", "t"))
        (reserved,) = await client.reserve(["q"], lease=30, wait=0)
        await client.ack(reserved.ctx)
        with pytest.raises(sepp.JobNotFoundError):
            await client.ack(reserved.ctx)
        with anyio.move_on_after(1):
            await client.reserve(["empty"], lease=30, wait=30)
    acks = _by_name(telemetry.spans.get_finished_spans(), "sepp.ack")
    assert [a.status.status_code for a in acks] == [StatusCode.UNSET, StatusCode.ERROR]
    cancelled = _by_name(telemetry.spans.get_finished_spans(), "sepp.reserve")[-1]
    assert cancelled.status.status_code is StatusCode.UNSET


async def test_attach_makes_a_job_context_the_parent(telemetry: Telemetry) -> None:
    tracer = trace.get_tracer("test")
    context = sepp.TraceContext("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
    with context.attach(), tracer.start_as_current_span("child") as child:
        assert sepp.TraceContext.from_current() is not None
    assert format(child.get_span_context().trace_id, "032x") == context.trace_id
    (finished,) = _by_name(telemetry.spans.get_finished_spans(), "child")
    assert finished.parent is not None
    assert format(finished.parent.span_id, "016x") == context.span_id
    assert sepp.TraceContext.from_current() is None
