"""Worker benchmark: jobs/s, pickup latency and memory, against one network reference server.

Usage: ``python benchmarks/worker.py [--rounds R] [--scale S] [--latency MS ...]``
(defaults take ~4 min)

Starts one reference server (``python -m sepp_anyio.server --memory``, its own process) and
measures, in the same run and against that server:

* ``sepp-anyio/asyncio`` and ``sepp-anyio/trio``: this library's Worker on each backend;
* ``sepp-py``: the official asyncio client's Worker (grpcio), the baseline of every ratio.

Every measurement runs in a fresh process (``_worker_child.py``), so CPU time and memory are
its own; the clients take turns, round after round, and the best round of each is kept
(memory is measured in the first round only).
Reported:

* throughput (jobs/s; enqueueing is not timed) for a handler that returns at once and one
  that awaits 10 ms, with ``max_in_flight`` 1, 16 and 128, and the worker process's CPU ms
  per job; once per network latency (``--latency``, default 0, 1 and 2.5 ms each way):
  every client then talks to the server through the same forwarding proxy on loopback
  (``_latency_proxy.py``, its own process) that delays each direction by that much, so a
  round trip costs twice the delay more, as between two machines (0 ms still goes through
  the proxy, for the same hop);
* for the rows whose handler sleeps, the ceiling of each client: no worker that reserves
  only the capacity it has free can beat ``max_in_flight / (handler + reserve)`` jobs/s,
  where ``handler`` is how long the handler's sleep really lasts on that client's event
  loop and ``reserve`` the round trip of an unloaded one-job reserve through the same
  proxy, both measured in the same run (a token is held from the reserve that brings its
  job until the handler is over; Little's law does the rest). Where 1.2 times sepp-py's
  rate is above that ceiling, no reserve loop can reach 1.2x there. The round trip is
  taken twice: back to back, and after the process idled as long as the handler sleeps
  before each reserve, as it does in those rows (on a machine that idles, every process
  on the path wakes up slower; that second ceiling is the one a row can reach);
* for every row, the CPU per job of each process on the machine (the worker, the server,
  the proxy; over the worker's run only, so enqueueing is not counted) and the machine's
  cores divided by their sum: the most jobs/s the machine could carry at that cost (the
  server is one process, so no client gets all of it). Where the clients run at the same
  share of that bound, their ratio is the inverse ratio of their CPU per job, and a client
  gains only by costing less of it, its own or the server's;
* the floor, at every latency: for each backend, the same rows run by the least a
  worker on our client can do (``floor/asyncio``, ``floor/trio``: reserve what is free, run
  each job on a task of its own, give its slot back, ack it; no handler registry, log
  context, span, accounting or shielded settle), so the CPU per job of the Worker can be
  read against what the protocol costs on our client, as the transport benchmark's floor
  row does for a call;
* enqueue-to-handler-start latency (p50/p99) of an idle worker parked in its long poll;
* memory with 10,000 jobs in flight at once (RSS then, and its growth over the same process
  before the worker started).

The server is a Python process on the same machine: where it is the bottleneck, a ratio
reads "as fast as the server allows", and on a machine with few cores the client's CPU per
job decides how much is left for the server.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from sepp_anyio.testing import ServerProcess

PROXY = Path(__file__).resolve().parent / "_latency_proxy.py"

HERE = Path(__file__).resolve().parent
CHILD = HERE / "_worker_child.py"
KINDS = ["sepp-py", "sepp-anyio/asyncio", "sepp-anyio/trio"]
# Not workers: the least a worker on our client can do (reserve what is free, a task per
# job, ack it; see _worker_child.floor_loop), measured at every latency.
FLOORS = ["floor/asyncio", "floor/trio"]
BASELINE = "sepp-py"
# (label, jobs at scale 1, max_in_flight, handler sleep)
THROUGHPUT_ROWS = [
    ("no-op, max_in_flight 1", 500, 1, 0.0),
    ("no-op, max_in_flight 16", 1500, 16, 0.0),
    ("no-op, max_in_flight 128", 2000, 128, 0.0),
    ("10 ms, max_in_flight 1", 80, 1, 0.01),
    ("10 ms, max_in_flight 16", 1000, 16, 0.01),
    ("10 ms, max_in_flight 128", 2000, 128, 0.01),
]
DELAYS_MS = [0.0, 1.0, 2.5]
LATENCY_SAMPLES = 200
MEMORY_JOBS = 10_000


def run_child(spec: dict[str, Any]) -> Any:
    out = subprocess.run(
        [sys.executable, str(CHILD), json.dumps(spec)],
        check=False,
        capture_output=True,
        text=True,
        timeout=300,
    )
    if out.returncode != 0:
        raise RuntimeError(f"{spec['kind']} {spec['scenario']} failed:\n{out.stderr}")
    return json.loads(out.stdout)


class Proxy:
    """``_latency_proxy.py`` in its own process, delaying each direction by ``delay_ms``."""

    def __init__(self, target: str, delay_ms: float) -> None:
        self.process = subprocess.Popen(
            [sys.executable, str(PROXY), target, str(delay_ms)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.process.stdout is not None
        self.address = f"127.0.0.1:{int(self.process.stdout.readline())}"

    def stop(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()  # the proxy exits when its stdin closes
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def _best(runs: list[dict[str, float]], key: str, *, lower: bool = False) -> float:
    return (min if lower else max)(run[key] for run in runs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=2, help="runs per cell, best kept")
    parser.add_argument(
        "--scale",
        type=float,
        default=1.0,
        help="multiply the job counts (throughput rows, pickup samples, jobs held for memory)",
    )
    parser.add_argument(
        "--latency",
        type=float,
        nargs="+",
        default=DELAYS_MS,
        metavar="MS",
        help="delays each way through the proxy, one throughput table each (default: 0 1 2.5)",
    )
    args = parser.parse_args()

    started = time.perf_counter()
    rows = [
        (max(1, round(jobs * args.scale)), max_in_flight, sleep)
        for _, jobs, max_in_flight, sleep in THROUGHPUT_ROWS
    ]
    delays: list[float] = args.latency
    latency_samples = max(10, round(LATENCY_SAMPLES * args.scale))
    memory_jobs = max(100, round(MEMORY_JOBS * args.scale))
    # throughput[delay][kind]: one list of row results per round
    throughput: dict[float, dict[str, list[list[dict[str, float]]]]] = {
        delay: {kind: [] for kind in KINDS + FLOORS} for delay in delays
    }
    latency: dict[str, list[dict[str, float]]] = {kind: [] for kind in KINDS}
    memory: dict[str, list[dict[str, float]]] = {kind: [] for kind in KINDS}
    server = ServerProcess("--memory", "--port", "0", "--log-level", "WARNING")
    server.start()
    print(f"server at {server.address}", file=sys.stderr)
    try:
        for round_no in range(1, args.rounds + 1):
            for delay in delays:
                proxy = Proxy(server.address, delay)
                try:
                    watch = {"server": server.pid, "proxy": proxy.process.pid}
                    for kind in KINDS + FLOORS:
                        where = {"kind": kind, "address": proxy.address, "watch": watch}
                        results = run_child({**where, "scenario": "throughput", "rows": rows})
                        throughput[delay][kind].append(results)
                        for (label, *_), result in zip(THROUGHPUT_ROWS, results, strict=True):
                            print(
                                f"round {round_no} {delay:g} ms {kind:19s} {label:25s} "
                                f"{result['jobs_per_s']:6.0f} jobs/s  "
                                f"{result['cpu_ms'] * 1000:.0f} us CPU/job  "
                                f"{result['jobs_per_reserve']:.1f} jobs/reserve",
                                file=sys.stderr,
                            )
                finally:
                    proxy.stop()
            for kind in KINDS:
                base = {"kind": kind, "address": server.address}
                spec = {**base, "scenario": "latency", "samples": latency_samples}
                latency[kind].append(run_child(spec))
                print(f"round {round_no} {kind:19s} latency {latency[kind][-1]}", file=sys.stderr)
                if round_no == 1:  # steady from run to run: once is enough
                    spec = {**base, "scenario": "memory", "jobs": memory_jobs}
                    memory[kind].append(run_child(spec))
                    print(f"round 1 {kind:19s} memory {memory[kind][-1]}", file=sys.stderr)
    finally:
        server.stop()

    print(
        f"\nWorker throughput against one network reference server, through a proxy adding "
        f"the latency shown each way: jobs/s (ratio vs {BASELINE}; worker process CPU us "
        f"per job, and its ratio), best of {args.rounds}\n"
    )
    print("| latency | handler, max_in_flight | " + " | ".join(KINDS) + " |")
    print("|---|---|" + "---|" * len(KINDS))
    for delay in delays:
        for index, (label, *_) in enumerate(THROUGHPUT_ROWS):
            per_kind = {kind: [runs[index] for runs in throughput[delay][kind]] for kind in KINDS}
            rate = {kind: _best(runs, "jobs_per_s") for kind, runs in per_kind.items()}
            cpu = {kind: _best(runs, "cpu_ms", lower=True) for kind, runs in per_kind.items()}
            cells = [
                f"{rate[kind]:.0f} ({rate[kind] / rate[BASELINE]:.2f}x; {cpu[kind] * 1000:.0f} us, "
                f"{cpu[kind] / cpu[BASELINE]:.2f}x)"
                for kind in KINDS
            ]
            print(f"| {delay:g} ms | {label} | " + " | ".join(cells) + " |")

    print(
        "\nCeiling of the rows whose handler sleeps: max_in_flight / (handler + reserve), "
        "jobs/s, from each client's own mean handler duration and unloaded one-job reserve "
        "round trip in its best round, that round trip taken back to back, and (after the "
        "slash) taken after the process idled as long as the handler sleeps, as each reserve "
        f"of these rows does; and 1.2 times {BASELINE}'s rate (its best round)\n"
    )
    print("| latency | handler, max_in_flight | " + " | ".join(KINDS) + " | 1.2x sepp-py |")
    print("|---|---|" + "---|" * (len(KINDS) + 1))
    for delay in delays:
        for index, (label, _, max_in_flight, sleep) in enumerate(THROUGHPUT_ROWS):
            if not sleep:
                continue
            cells = []
            for kind in KINDS:
                best = max(throughput[delay][kind], key=lambda runs: runs[index]["jobs_per_s"])
                handler_ms, reserve_ms = best[index]["handler_ms"], best[0]["reserve_ms"]
                idle_ms = best[0]["reserve_idle_ms"]
                ceiling = max_in_flight / (handler_ms + reserve_ms) * 1000
                after_idle = max_in_flight / (handler_ms + idle_ms) * 1000
                cells.append(
                    f"{ceiling:.0f} / {after_idle:.0f} ({handler_ms:.2f} + {reserve_ms:.2f}"
                    f" / {idle_ms:.2f} ms)"
                )
            baseline = max(runs[index]["jobs_per_s"] for runs in throughput[delay][BASELINE])
            print(f"| {delay:g} ms | {label} | " + " | ".join(cells) + f" | {1.2 * baseline:.0f} |")

    print(
        "\nThe floor: worker process CPU us per job of each worker and of the least a worker "
        "on our client can do (reserve what is free, a task per job, ack it), best of "
        f"{args.rounds}; ratio vs {BASELINE}'s worker\n"
    )
    shown = KINDS + FLOORS
    print("| latency | handler, max_in_flight | " + " | ".join(shown) + " |")
    print("|---|---|" + "---|" * len(shown))
    for delay in delays:
        for index, (label, *_) in enumerate(THROUGHPUT_ROWS):
            cpu_us = {
                kind: 1000
                * _best([r[index] for r in throughput[delay][kind]], "cpu_ms", lower=True)
                for kind in shown
            }
            sepp_py_us = cpu_us[BASELINE]
            cells = [f"{cpu_us[kind]:.0f} ({cpu_us[kind] / sepp_py_us:.2f}x)" for kind in shown]
            print(f"| {delay:g} ms | {label} | " + " | ".join(cells) + " |")

    cores = os.cpu_count() or 1
    print(
        f"\nCPU ms per job of every process on the machine's {cores} cores, worker + server + "
        f"proxy (best round's), and {cores} cores / that sum: the most jobs/s the machine "
        "could carry at that cost, whatever the reserve loop does\n"
    )
    print("| latency | handler, max_in_flight | " + " | ".join(KINDS) + " |")
    print("|---|---|" + "---|" * len(KINDS))
    for delay in delays:
        for index, (label, *_) in enumerate(THROUGHPUT_ROWS):
            cells = []
            for kind in KINDS:
                best = max(throughput[delay][kind], key=lambda runs: runs[index]["jobs_per_s"])
                row = best[index]
                parts = [row["cpu_ms"], row["server_cpu_ms"], row["proxy_cpu_ms"]]
                total = sum(parts)
                cells.append(
                    f"{total:.2f} = "
                    + " + ".join(f"{part:.2f}" for part in parts)
                    + f" ({cores / total * 1000:.0f}/s)"
                )
            print(f"| {delay:g} ms | {label} | " + " | ".join(cells) + " |")

    print(
        f"\nEnqueue-to-handler-start latency of an idle worker in long poll, ms "
        f"({latency_samples} jobs one at a time; ratio vs {BASELINE})\n"
    )
    print("| client | p50 | p99 |")
    print("|---|---|---|")
    p50 = {kind: _best(latency[kind], "p50_ms", lower=True) for kind in KINDS}
    p99 = {kind: _best(latency[kind], "p99_ms", lower=True) for kind in KINDS}
    for kind in KINDS:
        print(
            f"| {kind} | {p50[kind]:.2f} ({p50[kind] / p50[BASELINE]:.2f}x) "
            f"| {p99[kind]:.2f} ({p99[kind] / p99[BASELINE]:.2f}x) |"
        )

    print(f"\nMemory with {memory_jobs:,} jobs in flight, MiB (ratio vs {BASELINE})\n")
    print("| client | RSS then | growth over idle | peak RSS of the process |")
    print("|---|---|---|---|")
    rss = {kind: _best(memory[kind], "rss_mb", lower=True) for kind in KINDS}
    delta = {kind: _best(memory[kind], "delta_mb", lower=True) for kind in KINDS}
    peak = {kind: _best(memory[kind], "peak_mb", lower=True) for kind in KINDS}
    for kind in KINDS:
        print(
            f"| {kind} | {rss[kind]:.1f} | {delta[kind]:.1f} "
            f"({delta[kind] / delta[BASELINE]:.2f}x) | {peak[kind]:.1f} |"
        )
    print(f"\ntotal {time.perf_counter() - started:.0f} s", file=sys.stderr)


if __name__ == "__main__":
    main()
