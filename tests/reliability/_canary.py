"""A well-behaved client in a process of its own: ``python _canary.py HOST:PORT``.

It enqueues, reserves and acks one job after another until its stdin is closed, then
prints ``{"rounds": n, "errors": [...]}`` and exits. Before that it prints ``served`` once,
as its first round has been served (the test waits for it: a test run whose share of the
hostile tests is short could otherwise be over before the canary had even started).

A process rather than a thread, so that nothing it does (its random numbers, say) can
disturb the test process.
"""

from __future__ import annotations

import json
import sys
import threading
import uuid

import anyio

import sepp_anyio


async def main(address: str, stop: threading.Event) -> tuple[int, list[str]]:
    queue = f"canary-{uuid.uuid4().hex[:8]}"
    rounds = 0
    served = False
    errors: list[str] = []
    async with sepp_anyio.connect(address, rpc_timeout=10.0) as client:
        while not stop.is_set():
            try:
                ack = await client.enqueue(
                    sepp_anyio.EnqueueRequest(queue, "t", payload=sepp_anyio.Payload.from_json(1))
                )
                [job] = await client.reserve([queue], lease=10.0, wait=0.0)
                assert job.ctx.id == ack.job_id, (job.ctx.id, ack.job_id)
                await client.ack(job.ctx)
            except Exception as exc:
                errors.append(repr(exc))
            else:
                if not served:
                    served = True
                    print("served", flush=True)
            rounds += 1
            await anyio.sleep(0.01)
    return rounds, errors


if __name__ == "__main__":
    stop = threading.Event()

    def wait_for_eof() -> None:
        sys.stdin.read()
        stop.set()

    threading.Thread(target=wait_for_eof, daemon=True).start()
    rounds, errors = anyio.run(main, sys.argv[1], stop)
    print(json.dumps({"rounds": rounds, "errors": errors}), flush=True)
