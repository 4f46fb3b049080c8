"""One worker measurement in a fresh process, for ``benchmarks/worker.py``.

Usage: ``python benchmarks/_worker_child.py '<json spec>'``; prints one JSON object.

The spec names the client (``sepp-anyio/asyncio``, ``sepp-anyio/trio`` or ``sepp-py``; or
``floor/asyncio``, ``floor/trio``: not a worker but the least one on our client can do, for the
``throughput`` scenario only), the server address and the scenario:

* ``throughput``: for each of ``rows`` (``jobs``, ``max_in_flight``, handler ``sleep``):
  enqueue the jobs, then time a worker whose handler returns at once or awaits ``sleep``
  seconds, from its start until ``run()`` returns after the last job was handled and every
  ack was sent (the last handler asks for shutdown). One connection for all rows, after a
  warm-up. -> per row ``jobs_per_s``, ``cpu_ms`` (this process's CPU ms per job, over the
  worker's run only), the same for each process named in the spec's ``watch`` (name -> pid:
  ``server_cpu_ms``, ``proxy_cpu_ms``),
  ``jobs_per_reserve`` and ``handler_ms`` (the handler's own mean duration, as its event
  loop's timers make it: a 10 ms sleep lasts longer); and, once, ``reserve_ms``: the median
  round trip of a reserve of one ready job with nothing else on the connection (the least
  any reserve can take), for the ceiling ``worker.py`` computes; and ``reserve_idle_ms``,
  the same with the process idle before each reserve for as long as the longest handler
  sleep of the rows, as each reserve of such a row is (a machine that idles wakes up
  slower: every process on the path pays for it).
* ``latency``: an idle worker parked in its long poll; ``samples`` times, one job is
  enqueued (from a second connection in the same process) and the time from just before the
  enqueue call to the handler's first line is recorded. -> ``p50_ms``, ``p99_ms``.
* ``memory``: enqueue ``jobs`` jobs and let a worker with ``max_in_flight=jobs`` hold them all
  in flight at once. -> ``rss_mb`` (resident set size then), ``delta_mb`` (over the same
  process before the worker started), ``peak_mb`` (the process's peak RSS).
"""

from __future__ import annotations

import asyncio
import gc
import json
import os
import resource
import statistics
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any

BATCH = 256
WARMUP_JOBS = 200
RTT_SAMPLES = 40


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _proc_cpu(pid: int) -> float:
    """CPU seconds (user + system) of another process on this machine, from /proc."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class CpuMeter:
    """CPU seconds of this process and of the watched ones (the server, the proxy) over one
    worker run, so that a row's CPU excludes its enqueueing."""

    def __init__(self, watch: dict[str, int]) -> None:
        self.watch = watch
        self.spent: dict[str, float] = {}
        self._start: dict[str, float] = {}

    def _now(self) -> dict[str, float]:
        return {"worker": _cpu(), **{name: _proc_cpu(pid) for name, pid in self.watch.items()}}

    def start(self) -> None:
        self._start = self._now()

    def stop(self) -> None:
        now = self._now()
        self.spent = {name: now[name] - began for name, began in self._start.items()}

    def per_job_ms(self, jobs: int) -> dict[str, float]:
        return {f"{name}_cpu_ms": self.spent[name] / jobs * 1000 for name in self.watch}


def _rss_mb() -> float:
    with open("/proc/self/statm") as statm:
        pages = int(statm.read().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20


def _peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def _queue() -> str:
    return f"bench-{uuid.uuid4().hex[:12]}"


def _percentiles(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]
    return {"p50_ms": statistics.median(ordered) * 1000, "p99_ms": p99 * 1000}


# --------------------------------------------------------------------------- sepp-anyio


async def _ours(spec: dict[str, Any]) -> Any:
    import anyio

    import sepp_anyio
    from sepp_anyio import Client, EnqueueRequest, JobCtx, Payload, Worker

    address: str = spec["address"]

    async def enqueue(client: Client, queue: str, count: int) -> None:
        for start in range(0, count, BATCH):
            size = min(BATCH, count - start)
            await client.enqueue_batch([EnqueueRequest(queue, "t") for _ in range(size)])

    async def handler_sleep(sleep: float) -> None:
        """A handler's work: ``sleep`` seconds, added to ``slept`` as its event loop times it."""
        began = time.perf_counter()
        await anyio.sleep(sleep)
        slept[0] += time.perf_counter() - began

    async def timed(run: Awaitable[None]) -> float:
        """Seconds ``run`` takes, with this process's CPU (and the watched ones') metered."""
        meter.start()
        started = time.perf_counter()
        await run
        elapsed = time.perf_counter() - started
        meter.stop()
        return elapsed

    async def floor_loop(
        client: Client, queue: str, jobs: int, max_in_flight: int, sleep: float
    ) -> None:
        """The floor, not a worker: the least a worker on this client can do for ``jobs``
        jobs at ``max_in_flight``: reserve what is free, run each job on a task of its own
        (the sleep, or nothing), give its slot back, ack it. No handler registry, log
        context, span, accounting, metrics, lease watch or shielded settle."""
        free = max_in_flight
        room = anyio.Event()

        async def one(job: sepp_anyio.Job) -> None:
            nonlocal free
            if sleep:
                await handler_sleep(sleep)
            free += 1
            room.set()
            await client.ack(job.ctx)

        async with anyio.create_task_group() as tg:
            taken = 0
            while taken < jobs:
                if not free:
                    room = anyio.Event()
                    await room.wait()
                batch = await client.reserve(
                    [queue], lease=30.0, wait=30.0, max_jobs=min(free, jobs - taken)
                )
                reserves[0] += 1
                free -= len(batch)
                taken += len(batch)
                for job in batch:
                    tg.start_soon(one, job)

    async def throughput(client: Client, jobs: int, max_in_flight: int, sleep: float) -> float:
        queue = _queue()
        await enqueue(client, queue, jobs)
        if spec["kind"].startswith("floor/"):
            reserves[0] = 0
            return await timed(floor_loop(client, queue, jobs, max_in_flight, sleep))
        worker = Worker(client, [queue], max_in_flight=max_in_flight, wait=30.0)
        handled = 0

        async def handler(payload: Payload | None, ctx: JobCtx) -> None:
            nonlocal handled
            if sleep:
                await handler_sleep(sleep)
            handled += 1
            if handled == jobs:
                worker.shutdown()

        worker.handle("t", handler)
        elapsed = await timed(worker.run())
        assert worker.statistics().processed == jobs, worker.statistics()
        reserves[0] = worker.statistics().reserves
        return elapsed

    async def bare_reserve_ms(client: Client, idle: float) -> float:
        queue = _queue()
        await enqueue(client, queue, RTT_SAMPLES)
        samples = []
        for _ in range(RTT_SAMPLES):
            if idle:
                await anyio.sleep(idle)
            began = time.perf_counter()
            jobs = await client.reserve([queue], lease=30.0, wait=1.0, max_jobs=1)
            samples.append(time.perf_counter() - began)
            for job in jobs:
                await client.ack(job.ctx)
        return statistics.median(samples) * 1000

    reserves = [0]
    slept = [0.0]
    meter = CpuMeter(spec.get("watch", {}))
    async with sepp_anyio.connect(address) as client:
        scenario = spec["scenario"]
        if scenario == "throughput":
            await throughput(client, WARMUP_JOBS, 16, 0.0)
            results = []
            for jobs, max_in_flight, sleep in spec["rows"]:
                slept[0] = 0.0
                elapsed = await throughput(client, jobs, max_in_flight, sleep)
                results.append(
                    {
                        "jobs_per_s": jobs / elapsed,
                        "cpu_ms": meter.spent["worker"] / jobs * 1000,
                        **meter.per_job_ms(jobs),
                        "jobs_per_reserve": jobs / reserves[0],
                        "handler_ms": slept[0] / jobs * 1000,
                    }
                )
            results[0]["reserve_ms"] = await bare_reserve_ms(client, 0.0)
            idle = max(sleep for _, _, sleep in spec["rows"])
            results[0]["reserve_idle_ms"] = await bare_reserve_ms(client, idle)
            return results

        if scenario == "latency":
            queue = _queue()
            worker = Worker(client, [queue], max_in_flight=16, wait=30.0)
            started_at: list[float] = []
            arrived = anyio.Event()

            async def record(payload: Payload | None, ctx: JobCtx) -> None:
                nonlocal arrived
                started_at.append(time.perf_counter())
                arrived.set()

            worker.handle("t", record)
            samples: list[float] = []
            async with sepp_anyio.connect(address) as producer, worker:
                await anyio.sleep(0.1)  # let the worker park its first reserve
                for _ in range(spec["samples"]):
                    arrived = anyio.Event()
                    before = time.perf_counter()
                    await producer.enqueue(EnqueueRequest(queue, "t"))
                    await arrived.wait()
                    samples.append(started_at[-1] - before)
                    await anyio.sleep(0.005)  # the ack goes out, the worker parks again
            return _percentiles(samples)

        if scenario == "memory":
            jobs = spec["jobs"]
            queue = _queue()
            await enqueue(client, queue, jobs)
            gc.collect()
            base = _rss_mb()
            worker = Worker(client, [queue], max_in_flight=jobs, wait=30.0)
            held = 0
            all_in, release = anyio.Event(), anyio.Event()

            async def hold(payload: Payload | None, ctx: JobCtx) -> None:
                nonlocal held
                held += 1
                if held == jobs:
                    all_in.set()
                await release.wait()

            worker.handle("t", hold)
            async with worker:
                await all_in.wait()
                rss = _rss_mb()
                release.set()
            return {"rss_mb": rss, "delta_mb": rss - base, "peak_mb": _peak_mb()}
    raise ValueError(spec["scenario"])


# --------------------------------------------------------------------------- sepp-py


async def _sepp_py(spec: dict[str, Any]) -> Any:
    import sepp
    from sepp.types import Job, JobCtx, Payload, ReserveOptions

    address: str = spec["address"]

    async def enqueue(client: sepp.SeppClient, queue: str, count: int) -> None:
        for start in range(0, count, BATCH):
            size = min(BATCH, count - start)
            await client.enqueue_batch([sepp.EnqueueRequest(queue, "t") for _ in range(size)])

    def make_worker(
        client: sepp.SeppClient,
        queue: str,
        max_in_flight: int,
        handler: Callable[[Payload | None, JobCtx], Awaitable[None]],
    ) -> sepp.Worker:
        worker = sepp.Worker(
            client,
            [queue],
            timedelta(seconds=30),
            wait_timeout=timedelta(seconds=30),
            max_in_flight=max_in_flight,
        )
        worker.handle("t", handler)
        return worker

    async def throughput(
        client: sepp.SeppClient, jobs: int, max_in_flight: int, sleep: float
    ) -> float:
        queue = _queue()
        await enqueue(client, queue, jobs)
        handled = 0
        stops: list[sepp.ShutdownHandle] = []

        async def handler(payload: Payload | None, ctx: JobCtx) -> None:
            nonlocal handled
            if sleep:
                began = time.perf_counter()
                await asyncio.sleep(sleep)
                slept[0] += time.perf_counter() - began
            handled += 1
            if handled == jobs:
                stops[0].shutdown()

        worker = make_worker(client, queue, max_in_flight, handler)
        stops.append(worker.shutdown_handle())
        meter.start()
        started = time.perf_counter()
        await worker.run()
        elapsed = time.perf_counter() - started
        meter.stop()
        assert handled == jobs
        return elapsed

    client = await sepp.SeppClient.connect(address)
    reserves = [0]
    real_reserve = client.reserve

    async def counted_reserve(options: ReserveOptions) -> list[Job] | None:
        reserves[0] += 1
        return await real_reserve(options)

    client.reserve = counted_reserve  # type: ignore[method-assign,assignment]

    async def bare_reserve_ms(idle: float) -> float:
        queue = _queue()
        await enqueue(client, queue, RTT_SAMPLES)
        options = ReserveOptions(
            [queue], timedelta(seconds=30), wait_timeout=timedelta(seconds=1), max_jobs=1
        )
        samples = []
        for _ in range(RTT_SAMPLES):
            if idle:
                await asyncio.sleep(idle)
            began = time.perf_counter()
            jobs = await real_reserve(options)
            samples.append(time.perf_counter() - began)
            for job in jobs or ():
                await client.ack(job.ctx)
        return statistics.median(samples) * 1000

    slept = [0.0]
    meter = CpuMeter(spec.get("watch", {}))
    try:
        scenario = spec["scenario"]
        if scenario == "throughput":
            await throughput(client, WARMUP_JOBS, 16, 0.0)
            results = []
            for jobs, max_in_flight, sleep in spec["rows"]:
                reserves[0] = 0
                slept[0] = 0.0
                elapsed = await throughput(client, jobs, max_in_flight, sleep)
                results.append(
                    {
                        "jobs_per_s": jobs / elapsed,
                        "cpu_ms": meter.spent["worker"] / jobs * 1000,
                        **meter.per_job_ms(jobs),
                        "jobs_per_reserve": jobs / reserves[0],
                        "handler_ms": slept[0] / jobs * 1000,
                    }
                )
            results[0]["reserve_ms"] = await bare_reserve_ms(0.0)
            idle = max(sleep for _, _, sleep in spec["rows"])
            results[0]["reserve_idle_ms"] = await bare_reserve_ms(idle)
            return results

        if scenario == "latency":
            queue = _queue()
            started_at: list[float] = []
            arrived = asyncio.Event()

            async def record(payload: Payload | None, ctx: JobCtx) -> None:
                started_at.append(time.perf_counter())
                arrived.set()

            worker = make_worker(client, queue, 16, record)
            producer = await sepp.SeppClient.connect(address)
            task = asyncio.create_task(worker.run())
            samples: list[float] = []
            try:
                await asyncio.sleep(0.1)
                for _ in range(spec["samples"]):
                    arrived.clear()
                    before = time.perf_counter()
                    await producer.enqueue(sepp.EnqueueRequest(queue, "t"))
                    await arrived.wait()
                    samples.append(started_at[-1] - before)
                    await asyncio.sleep(0.005)
            finally:
                worker.shutdown_handle().shutdown()
                await task
                await producer.close()
            return _percentiles(samples)

        if scenario == "memory":
            jobs = spec["jobs"]
            queue = _queue()
            await enqueue(client, queue, jobs)
            gc.collect()
            base = _rss_mb()
            held = 0
            all_in, release = asyncio.Event(), asyncio.Event()

            async def hold(payload: Payload | None, ctx: JobCtx) -> None:
                nonlocal held
                held += 1
                if held == jobs:
                    all_in.set()
                await release.wait()

            worker = make_worker(client, queue, jobs, hold)
            task = asyncio.create_task(worker.run())
            await all_in.wait()
            rss = _rss_mb()
            release.set()
            worker.shutdown_handle().shutdown()
            await task
            return {"rss_mb": rss, "delta_mb": rss - base, "peak_mb": _peak_mb()}
    finally:
        await client.close()
    raise ValueError(spec["scenario"])


def measure(spec: dict[str, Any]) -> Any:
    kind = spec["kind"]
    if kind == "sepp-py":
        return asyncio.run(_sepp_py(spec))
    if kind.startswith(("sepp-anyio/", "floor/")):
        import anyio

        return anyio.run(_ours, spec, backend=kind.split("/", 1)[1])
    raise ValueError(kind)


if __name__ == "__main__":
    print(json.dumps(measure(json.loads(sys.argv[1]))))
