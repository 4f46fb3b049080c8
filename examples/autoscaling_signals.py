"""The autoscaling signals on a worker's ``/metrics``: queue wait, saturation, idle reserves.

::

    python examples/autoscaling_signals.py    # the server: $SEPP_ADDR, default 127.0.0.1:50051

A burst of 40 short jobs waits in a queue for a worker of four slots; the worker serves its
health endpoint on a free port, and the script scrapes ``/metrics`` as Prometheus would:
once while the worker is busy, once after it has been idle for two seconds. What a KEDA
``ScaledObject`` or an HPA scales on (docs/howto/deploying.rst, "Autoscaling"):

* ``sepp_job_queue_wait_seconds``: how long jobs waited for a worker (here, up to the
  burst's length);
* ``sepp_worker_saturation``: the share of the four slots in use, averaged since the
  previous scrape (close to 1 while the burst lasts, low after two idle seconds: that
  interval still holds the burst's end);
* ``sepp_worker_idle_reserves_total``: reserves that found nothing (they grow while idle).
"""

from __future__ import annotations

import os

import anyio

import sepp_anyio as sepp

QUEUE = "scaling-demo"
JOBS = 40


async def scrape(port: int) -> dict[str, float]:
    """GET /metrics over HTTP/1.1; the samples of the three signals, by series name."""
    async with await anyio.connect_tcp("127.0.0.1", port) as stream:
        await stream.send(b"GET /metrics HTTP/1.1\r\nHost: worker\r\nConnection: close\r\n\r\n")
        response = b""
        with anyio.fail_after(10):
            async for chunk in stream:
                response += chunk
    body = response.split(b"\r\n\r\n", 1)[1].decode()
    samples: dict[str, float] = {}
    for line in body.splitlines():
        if line.startswith(
            (
                "sepp_job_queue_wait_seconds_count",
                "sepp_job_queue_wait_seconds_sum",
                "sepp_worker_saturation",
                "sepp_worker_idle_reserves_total",
            )
        ):
            name, value = line.rsplit(" ", 1)
            samples[name] = float(value)
    return samples


def show(when: str, samples: dict[str, float]) -> None:
    count = samples[f'sepp_job_queue_wait_seconds_count{{queue="{QUEUE}"}}']
    total = samples[f'sepp_job_queue_wait_seconds_sum{{queue="{QUEUE}"}}']
    saturation = samples['sepp_worker_saturation{lane="default"}']
    idle = samples['sepp_worker_idle_reserves_total{lane="default"}']
    mean = total / count if count else 0.0
    print(f"{when}: {count:.0f} jobs reserved, mean queue wait {mean:.2f}s")
    print(f"{when}: saturation since the last scrape {saturation:.2f}")
    print(f"{when}: idle reserves so far {idle:.0f}")


async def main() -> None:
    address = os.environ.get("SEPP_ADDR", "127.0.0.1:50051")
    async with sepp.connect(address) as client:
        await client.enqueue_batch([sepp.EnqueueRequest(QUEUE, "work") for _ in range(JOBS)])
        done = anyio.Event()
        handled = 0

        async def work(payload: sepp.Payload | None, ctx: sepp.JobCtx) -> None:
            nonlocal handled
            await anyio.sleep(0.05)
            handled += 1
            if handled == JOBS:
                done.set()

        worker = sepp.Worker(client, [QUEUE], max_in_flight=4, wait=0.5)
        worker.handle("work", work)
        async with anyio.create_task_group() as tg:
            port = await tg.start(sepp.serve_health, worker)
            async with worker:  # runs in the background; leaving the block drains it
                await anyio.sleep(0.2)
                show("busy", await scrape(port))
                with anyio.fail_after(30):
                    await done.wait()
                await anyio.sleep(2.0)
                show("idle", await scrape(port))
            tg.cancel_scope.cancel()  # the health server runs until cancelled


if __name__ == "__main__":
    anyio.run(main)
