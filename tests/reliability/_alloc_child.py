"""Child process of ``test_allocations``: counts what calls and jobs leave for the collector.

Run as ``python -m tests.reliability._alloc_child ADDRESS BACKEND``; prints one JSON object,
``{"per_call": ..., "per_job": ...}``. A process of its own, because the collector's count
is the whole interpreter's: in the test process, other tests' server threads, loggers and
tracer providers would allocate while it measures.
"""

from __future__ import annotations

import gc
import json
import sys

import anyio

import sepp_anyio as sepp

CALLS = 1000
JOBS = 2000
_PAYLOAD = sepp.Payload(b'{"user": 42}', "application/json")


class _Net:
    """Container objects allocated minus freed inside ``with``, with the collector off."""

    def __enter__(self) -> _Net:
        gc.collect()
        gc.disable()
        self._start = gc.get_count()[0]
        self.count = 0
        return self

    def __exit__(self, *exc: object) -> None:
        self.count = gc.get_count()[0] - self._start
        gc.enable()


async def _per_call(client: sepp.Client, backend: str) -> float:
    request = sepp.EnqueueRequest(f"alloc-calls-{backend}", "t", payload=_PAYLOAD)
    for _ in range(200):  # warm up: connection, caches, interned headers
        await client.enqueue(request)
    with _Net() as net:
        for _ in range(CALLS):
            await client.enqueue(request)
    return net.count / CALLS


async def _per_job(client: sepp.Client, backend: str) -> float:
    queue = f"alloc-jobs-{backend}"
    request = sepp.EnqueueRequest(queue, "t", payload=_PAYLOAD)
    for _ in range((500 + JOBS) // 250):
        await client.enqueue_batch([request] * 250)
    handled = 0

    def worker() -> sepp.Worker:
        made = sepp.Worker(client, [queue], max_in_flight=16)

        @made.handler("t")
        async def handle(payload: object, ctx: sepp.JobCtx) -> None:
            nonlocal handled
            handled += 1

        return made

    await worker().run(job_limit=500)  # warm up: the first worker's imports and caches
    measured = worker()
    with _Net() as net:
        await measured.run(job_limit=JOBS)
    if handled != 500 + JOBS:
        raise RuntimeError(f"{handled} jobs handled, not {500 + JOBS}")
    return net.count / JOBS


async def _main(address: str, backend: str) -> None:
    async with sepp.connect(address) as client:
        result = {
            "per_call": await _per_call(client, backend),
            "per_job": await _per_job(client, backend),
        }
    print(json.dumps(result))


if __name__ == "__main__":
    anyio.run(_main, sys.argv[1], sys.argv[2], backend=sys.argv[2])
