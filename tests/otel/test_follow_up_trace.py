"""A follow-up job (``ctx.enqueue``) continues its parent's span: the process span of the
job whose handler enqueued it."""

from __future__ import annotations

import anyio
import pytest

import sepp_anyio as sepp
from sepp_anyio.testing import open_in_memory_client

from .conftest import Telemetry

pytestmark = pytest.mark.anyio

step = sepp.Task("steps", "step", int)


async def test_a_follow_up_continues_the_parents_process_span(telemetry: Telemetry) -> None:
    async with open_in_memory_client() as (client, _):
        await client.enqueue(sepp.EnqueueRequest("orders", "place"))
        worker = sepp.Worker(client, ["orders"], wait=1.0)
        done = anyio.Event()

        @worker.handler("place")
        async def place(payload: sepp.Payload | None, ctx: sepp.JobCtx) -> None:
            await ctx.enqueue(step, 1, key="one")
            await ctx.enqueue_atomic([step.request(2, idempotency_key="two")])
            done.set()

        async with anyio.create_task_group() as tg:
            await tg.start(worker.run)
            with anyio.fail_after(120):
                await done.wait()
            worker.shutdown()
        children = await client.reserve(["steps"], lease=60.0, wait=0.0, max_jobs=10)
    [process] = [s for s in telemetry.spans.get_finished_spans() if s.name == "sepp.process"]
    context = process.get_span_context()
    assert context is not None
    flags = int(context.trace_flags)
    expected = f"00-{context.trace_id:032x}-{context.span_id:016x}-{flags:02x}"
    assert len(children) == 2
    for child in children:
        assert child.ctx.trace_context is not None
        assert child.ctx.trace_context.traceparent == expected
