"""Await a job's result: a typed task with a result type (``Task[Spec, Report]``), a
producer's reply queue (``sepp.Results``) and ``handle.result()``, a worker in the same
process (to keep the example in one file), and a failure reported back.

::

    python examples/results.py [trio]

The worker sends each result to the queue the producer named (custom field
``sepp.reply_to``) before it acks the job, with the job's id as idempotency key: a
redelivered job cannot send two results.
"""

from __future__ import annotations

import dataclasses
import os
import sys

import anyio

import sepp_anyio as sepp


@dataclasses.dataclass
class Spec:
    title: str
    pages: int


@dataclasses.dataclass
class Report:
    title: str
    words: int


render = sepp.Task("reports", "render", Spec, result=Report)  # a Task[Spec, Report]


async def main() -> None:
    address = os.environ.get("SEPP_ADDR", "127.0.0.1:50051")
    async with sepp.connect(address) as client:
        worker = sepp.Worker(client, ["reports"], wait=1.0)

        @worker.task(render)
        async def render_report(spec: Spec, ctx: sepp.JobCtx) -> Report:
            if spec.pages == 0:
                raise ValueError(f"{spec.title!r} has no pages")
            return Report(spec.title, words=250 * spec.pages)

        async with (
            anyio.create_task_group() as tg,
            sepp.Results(client, queue="results.web-1") as results,
        ):
            await tg.start(worker.run)
            handle = await render.enqueue(client, Spec("annual", 12), reply_to=results)
            report: Report = await handle.result(timeout=30)
            print(f"report {report.title!r}: {report.words} words")

            empty = await render.enqueue(client, Spec("empty", 0), reply_to=results, max_attempts=1)
            try:
                await empty.result(timeout=30)
            except sepp.JobFailedError as exc:
                print(f"job failed: {exc.error_type}: {exc.error_message}")
            worker.shutdown()
        print(f"results received: {results.received}")


if __name__ == "__main__":
    anyio.run(main, backend=sys.argv[1] if len(sys.argv) > 1 else "asyncio")
