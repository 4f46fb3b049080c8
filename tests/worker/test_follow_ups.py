"""Follow-ups (``ctx.enqueue``, ``ctx.enqueue_atomic``): a child's idempotency key is derived
from its parent's id and its key, so a redelivered parent never creates a second child; the
child continues the parent's trace; bad keys are refused. Both backends, virtual time."""

from __future__ import annotations

import dataclasses
import json

import pytest

from sepp_anyio import (
    Client,
    EnqueueAck,
    InvalidArgumentError,
    InvalidArgumentTypeError,
    Job,
    JobCtx,
    StatusCode,
    Task,
    TraceContext,
    Worker,
    _otel,
)
from sepp_anyio.server import EngineError
from sepp_anyio.testing import open_in_memory_client

from ._helpers import EngineSpy, running

pytestmark = pytest.mark.anyio

TRACE = TraceContext("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")


@dataclasses.dataclass
class Order:
    id: int


@dataclasses.dataclass
class Step:
    order: int
    name: str


place = Task("orders", "place", Order)
ship = Task("steps", "ship", Step)


async def _children(client: Client, queue: str = "steps") -> list[Job]:
    return await client.reserve([queue], lease=600.0, wait=0.0, max_jobs=100)


def _lose_first_ack(spy: EngineSpy) -> None:
    """The first attempt's ack is lost: the parent is redelivered when its lease expires."""
    spy.reject["ack"] = lambda request: (
        EngineError(StatusCode.NOT_FOUND, "lost ack") if request.attempt == 1 else None
    )


async def test_a_redelivered_parent_enqueues_its_follow_up_once() -> None:
    acks: list[tuple[int, EnqueueAck]] = []
    async with open_in_memory_client() as (client, engine):
        spy = EngineSpy(engine)
        _lose_first_ack(spy)
        worker = Worker(client, ["orders"], lease=5.0)

        @worker.task(place)
        async def handle(order: Order, ctx: JobCtx) -> None:
            ack = await ctx.enqueue(ship, Step(order.id, f"attempt {ctx.attempt}"), key="ship")
            acks.append((ctx.attempt, ack))

        parent = await place.enqueue(client, Order(7), max_attempts=5)
        async with running(worker):
            await spy.wait_until(lambda: any(c.ok for c in spy.of("ack")))
        children = await _children(client)
        # The derived key, as documented.
        same = await ship.enqueue(
            client, Step(0, "x"), idempotency_key=f"follow-up:{parent.job_id}:ship"
        )
    assert [attempt for attempt, _ in acks] == [1, 2]
    [(_, first), (_, second)] = acks
    assert not first.deduplicated
    assert second.deduplicated and second.job_id == first.job_id
    [child] = children
    assert child.ctx.id == first.job_id == same.job_id and same.deduplicated
    assert ship.decode(child.payload) == Step(7, "attempt 1")
    assert child.ctx.job_type == "ship"


async def test_a_redelivered_parent_enqueues_its_fan_out_once() -> None:
    batches: list[list[EnqueueAck]] = []
    async with open_in_memory_client() as (client, engine):
        spy = EngineSpy(engine)
        _lose_first_ack(spy)
        worker = Worker(client, ["orders"], lease=5.0)

        @worker.task(place)
        async def handle(order: Order, ctx: JobCtx) -> None:
            requests = [
                ship.request(Step(order.id, name), idempotency_key=name)
                for name in ("pack", "label", "send")
            ]
            batches.append(await ctx.enqueue_atomic(requests))

        await place.enqueue(client, Order(8), max_attempts=5)
        async with running(worker):
            await spy.wait_until(lambda: any(c.ok for c in spy.of("ack")))
        children = await _children(client)
    first, second = batches
    assert [ack.job_id for ack in second] == [ack.job_id for ack in first]
    assert all(ack.deduplicated for ack in second)
    assert sorted(ship.decode(job.payload).name for job in children) == ["label", "pack", "send"]


async def test_the_key_is_derived_from_the_parent_id_and_the_child_continues_its_trace() -> None:
    async with open_in_memory_client() as (client, engine):
        spy = EngineSpy(engine)
        worker = Worker(client, ["orders"])
        parents: list[str] = []

        @worker.task(place)
        async def handle(order: Order, ctx: JobCtx) -> None:
            parents.append(ctx.id)
            await ctx.enqueue(ship, Step(order.id, "one"), key="one")
            await ctx.enqueue_atomic([ship.request(Step(order.id, "two"), idempotency_key="two")])

        await place.enqueue(client, Order(1), trace_context=TRACE)
        # Two parents with the same keys: each gets its own children.
        await place.enqueue(client, Order(2), trace_context=TRACE)
        async with running(worker):
            await spy.wait_for("ack", 2)
        children = await _children(client)
        # The same key under another parent is another child.
        again = await ship.enqueue(
            client, Step(0, "x"), idempotency_key=f"follow-up:{parents[0]}:one"
        )
    assert len(children) == 4
    assert again.deduplicated
    # The child continues the parent's trace: without an OpenTelemetry SDK it carries the
    # parent's own context; with one (another test of this process may have installed it)
    # the parent's process span: one trace per parent, shared by its children.
    if not _otel.tracing():
        assert {job.ctx.trace_context for job in children} == {TRACE}
    else:
        traces: dict[int | None, set[str]] = {}
        for job in children:
            context = job.ctx.trace_context
            assert context is not None
            order = json.loads(job.payload.data)["order"] if job.payload else None
            traces.setdefault(order, set()).add(context.traceparent.split("-")[1])
        assert sorted(len(ids) for ids in traces.values()) == [1, 1]


async def test_bad_follow_ups_are_refused_before_anything_is_sent() -> None:
    errors: list[BaseException] = []
    async with open_in_memory_client() as (client, engine):
        spy = EngineSpy(engine)
        worker = Worker(client, ["orders"])

        @worker.task(place)
        async def handle(order: Order, ctx: JobCtx) -> None:
            attempts = [
                ctx.enqueue(ship, Step(1, "a"), key=""),
                ctx.enqueue_atomic([ship.request(Step(1, "a"))]),
                ctx.enqueue_atomic(
                    [
                        ship.request(Step(1, "a"), idempotency_key="k"),
                        ship.request(Step(1, "b"), idempotency_key="k"),
                    ]
                ),
                ctx.enqueue_atomic(["not a request"]),  # type: ignore[list-item]
            ]
            for attempt in attempts:
                try:
                    await attempt
                except Exception as exc:
                    errors.append(exc)

        await place.enqueue(client, Order(1))
        async with running(worker):
            await spy.wait_for("ack")
        assert await _children(client) == []
    empty, keyless, repeated, wrong = errors
    assert isinstance(empty, InvalidArgumentError) and "key" in str(empty)
    assert isinstance(keyless, InvalidArgumentError)
    assert "requests[0] has no idempotency_key" in str(keyless)
    assert isinstance(repeated, InvalidArgumentError)
    assert "requests[1] repeats the idempotency_key 'k'" in str(repeated)
    assert isinstance(wrong, InvalidArgumentTypeError) and "requests[0]" in str(wrong)


async def test_a_context_that_did_not_come_through_a_worker_cannot_enqueue() -> None:
    async with open_in_memory_client() as (client, _):
        await place.enqueue(client, Order(1))
        [job] = await client.reserve(["orders"], lease=10.0, wait=0.0)
        with pytest.raises(RuntimeError, match="only the contexts a Worker gives"):
            await job.ctx.enqueue(ship, Step(1, "a"), key="a")
