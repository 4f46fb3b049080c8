"""Follow-up jobs that a redelivery cannot duplicate: a handler enqueues its next steps
with ``ctx.enqueue(task, value, key=...)`` and a fan-out with ``ctx.enqueue_atomic``; each
child's idempotency key is derived from the parent's id and its key, so the parent's second
attempt (here: it fails after enqueueing, and is retried) finds the children already there.

::

    python examples/follow_ups.py [trio]
"""

from __future__ import annotations

import dataclasses
import os
import sys

import anyio

import sepp_anyio as sepp


@dataclasses.dataclass
class Order:
    id: int


@dataclasses.dataclass
class Step:
    order: int
    name: str


place = sepp.Task("shop", "place_order", Order)
step = sepp.Task("shop", "order_step", Step)
PARTS = ("pack", "label")
RETRY_NOW = sepp.RetryDirective.after(0)


async def main() -> None:
    address = os.environ.get("SEPP_ADDR", "127.0.0.1:50051")
    async with sepp.connect(address) as client:
        worker = sepp.Worker(client, ["shop"], wait=1.0)
        steps_run: list[str] = []
        done = anyio.Event()
        waiting_for = {"pack", "label", "ship", "attempt 2"}

        def finished(what: str) -> None:
            waiting_for.discard(what)
            if not waiting_for:
                done.set()

        @worker.task(place)
        async def place_order(order: Order, ctx: sepp.JobCtx) -> None:
            requests = [step.request(Step(order.id, name), idempotency_key=name) for name in PARTS]
            fan_out = await ctx.enqueue_atomic(requests)
            ship = await ctx.enqueue(step, Step(order.id, "ship"), key="ship")
            new = sum(not ack.deduplicated for ack in [*fan_out, ship])
            print(f"order {order.id}, attempt {ctx.attempt}: {new} new follow-up(s)")
            if ctx.attempt == 1:
                # As if the worker crashed after enqueueing: the order runs again.
                raise sepp.HandlerError("crashed after the follow-ups", RETRY_NOW)
            finished(f"attempt {ctx.attempt}")

        @worker.task(step)
        async def order_step(item: Step, ctx: sepp.JobCtx) -> None:
            steps_run.append(item.name)
            finished(item.name)

        async with anyio.create_task_group() as tg:
            await tg.start(worker.run)
            await place.enqueue(client, Order(1001))
            with anyio.fail_after(30):
                await done.wait()
            worker.shutdown()  # drains: the last jobs are acked before run() returns
        print(f"steps run: {', '.join(sorted(steps_run))}")  # each once


if __name__ == "__main__":
    anyio.run(main, backend=sys.argv[1] if len(sys.argv) > 1 else "asyncio")
