"""Transport benchmark: unary calls/s and client CPU against one grpclib server.

Usage: ``python benchmarks/transport.py [--calls N] [--rounds R]``

Compares, in one run and against the same grpclib server (its own process):

* ``sepp-anyio/asyncio`` and ``sepp-anyio/trio``: our anyio + h2 channel with
  the unchanged betterproto2 stub;
* ``grpclib``: grpclib's own asyncio Channel with the same stub;
* ``grpcio-aio``: grpcio's C-core asyncio channel with protobuf messages.

Each client runs in a fresh subprocess per round (so CPU time is its own);
rounds interleave the clients so that machine noise hits all of them alike,
and the best round of each client is reported. Columns: sequential calls/s,
calls/s with 32 and with 256 concurrent callers, and client CPU seconds per
10,000 sequential calls; ratios are against grpclib.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import socket
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Coroutine
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
CLIENTS = ["grpclib", "sepp-anyio/asyncio", "sepp-anyio/trio", "grpcio-aio"]
CONCURRENCY = (32, 256)


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def _measure(call: Callable[[], Awaitable[Any]], calls: int, spawn: Any) -> dict[str, float]:
    for _ in range(200):  # warm up: connection, caches
        await call()
    started, cpu = time.perf_counter(), _cpu()
    for _ in range(calls):
        await call()
    elapsed, cpu_used = time.perf_counter() - started, _cpu() - cpu
    result = {"seq": calls / elapsed, "cpu_per_10k": cpu_used / calls * 10_000}
    for concurrency in CONCURRENCY:
        per_task = max(1, calls // concurrency)

        async def worker(per_task: int = per_task) -> None:
            for _ in range(per_task):
                await call()

        started = time.perf_counter()
        await spawn(worker, concurrency)
        result[f"c{concurrency}"] = per_task * concurrency / (time.perf_counter() - started)
    return result


async def _spawn_anyio(worker: Callable[[], Coroutine[Any, Any, None]], n: int) -> None:
    import anyio

    async with anyio.create_task_group() as tg:
        for _ in range(n):
            tg.start_soon(worker)


async def _spawn_asyncio(worker: Callable[[], Coroutine[Any, Any, None]], n: int) -> None:
    await asyncio.gather(*(worker() for _ in range(n)))


def run_client(kind: str, port: int, calls: int) -> dict[str, float]:
    if kind.startswith("sepp-anyio"):
        import anyio

        from sepp_anyio._proto.sepp import v1 as pb
        from sepp_anyio._transport import Channel

        async def ours() -> dict[str, float]:
            async with Channel("127.0.0.1", port) as channel:
                stub = pb.QueueServiceStub(channel)
                request = pb.AckRequest(job_id="bench", attempt=1)
                return await _measure(lambda: stub.ack(request, timeout=30.0), calls, _spawn_anyio)

        return anyio.run(ours, backend=kind.split("/")[1])
    if kind == "grpclib":
        from grpclib.client import Channel as GrpclibChannel

        from sepp_anyio._proto.sepp import v1 as pb

        async def theirs() -> dict[str, float]:
            channel = GrpclibChannel("127.0.0.1", port)
            try:
                stub = pb.QueueServiceStub(channel)
                request = pb.AckRequest(job_id="bench", attempt=1)
                return await _measure(
                    lambda: stub.ack(request, timeout=30.0), calls, _spawn_asyncio
                )
            finally:
                channel.close()

        return asyncio.run(theirs())
    if kind == "grpcio-aio":
        import grpc
        from sepp.v1 import queue_pb2, queue_pb2_grpc

        async def grpcio() -> dict[str, float]:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
                stub = queue_pb2_grpc.QueueServiceStub(channel)  # type: ignore[no-untyped-call]
                request = queue_pb2.AckRequest(job_id="bench", attempt=1)  # type: ignore[attr-defined]
                return await _measure(
                    lambda: stub.Ack(request, timeout=30.0), calls, _spawn_asyncio
                )

        return asyncio.run(grpcio())
    raise ValueError(kind)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--client", help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.client:
        print(json.dumps(run_client(args.client, args.port, args.calls)))
        return

    port = _free_port()
    server = subprocess.Popen(
        [sys.executable, str(HERE / "_grpclib_server.py"), str(port)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stdout is not None
        assert server.stdout.readline().strip() == "ready"
        best: dict[str, dict[str, float]] = {}
        for round_no in range(args.rounds):
            for kind in CLIENTS:
                out = subprocess.run(
                    [
                        sys.executable,
                        __file__,
                        "--client",
                        kind,
                        "--port",
                        str(port),
                        "--calls",
                        str(args.calls),
                    ],
                    check=True,
                    capture_output=True,
                    text=True,
                    env=dict(os.environ),
                )
                result = json.loads(out.stdout)
                print(
                    f"round {round_no + 1} {kind:20s} "
                    + " ".join(f"{k}={v:.2f}" for k, v in result.items()),
                    file=sys.stderr,
                )
                prev = best.get(kind)
                if prev is None:
                    best[kind] = result
                else:
                    best[kind] = {
                        k: (min(prev[k], v) if k == "cpu_per_10k" else max(prev[k], v))
                        for k, v in result.items()
                    }
    finally:
        server.kill()
        server.wait()

    base = best["grpclib"]
    columns = ["seq", "c32", "c256", "cpu_per_10k"]
    titles = ["seq calls/s", "32 conc calls/s", "256 conc calls/s", "CPU s / 10k calls"]
    print(
        f"\nunary Ack against a grpclib server, best of {args.rounds} rounds of "
        f"{args.calls} calls (ratio vs grpclib; CPU ratio < 1 is better)\n"
    )
    print("| client | " + " | ".join(titles) + " |")
    print("|---|" + "---|" * len(columns))
    for kind in CLIENTS:
        cells = []
        for column in columns:
            value, ratio = best[kind][column], best[kind][column] / base[column]
            fmt = f"{value:.2f}" if column == "cpu_per_10k" else f"{value:.0f}"
            cells.append(f"{fmt} ({ratio:.2f}x)")
        print(f"| {kind} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
