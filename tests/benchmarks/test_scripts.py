"""The benchmark scripts still run: nothing else imports them, so a change elsewhere (the
transport leaving h2, say) could break one unnoticed until somebody measures.

Each runs as a user would run it, shrunk to a few calls: the HTTP/2 codec, transport,
worker and server benchmarks whole (the server's with its hostile scenarios), and the worker
benchmark's measuring child for every client against a reference server on loopback, with
the server's CPU watched as ``worker.py`` watches it.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from sepp_anyio.server import ServerProcess

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
TIMEOUT = 50


def _run(script: str, *args: str, timeout: float = TIMEOUT) -> str:
    """Run ``benchmarks/<script>`` with ``args``; its standard output, once it exited 0."""
    command = [sys.executable, str(BENCHMARKS / script), *args]
    result = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout


def test_http2_codec_benchmark_reports_every_role_and_batch() -> None:
    out = _run("http2_codec.py", "--calls", "64", "--rounds", "1", "--batch", "1", "8")
    rows = [line.split("|")[1:-1] for line in out.splitlines()[2:]]
    assert [(role.strip(), batch.strip()) for role, batch, *_ in rows] == [
        ("client", "1"),
        ("client", "8"),
        ("server", "1"),
        ("server", "8"),
    ]
    for _, _, ours, theirs, ratio in rows:
        assert float(ours) > 0 and float(theirs) > 0 and float(ratio) > 0


@pytest.fixture(scope="module")
def server() -> Iterator[ServerProcess]:
    process = ServerProcess("--memory", "--port", "0", "--log-level", "WARNING")
    process.start()
    try:
        yield process
    finally:
        process.stop()


@pytest.mark.parametrize(
    "kind", ["sepp-py", "sepp-anyio/asyncio", "sepp-anyio/trio", "floor/asyncio", "floor/trio"]
)
def test_worker_benchmark_child_measures_each_client(server: ServerProcess, kind: str) -> None:
    spec = {
        "kind": kind,
        "address": server.address,
        "scenario": "throughput",
        # (jobs, max_in_flight, handler sleep): a no-op row and a sleeping one
        "rows": [(24, 4, 0.0), (6, 2, 0.002)],
        "watch": {"server": server.pid},
    }
    noop, sleeping = json.loads(_run("_worker_child.py", json.dumps(spec)))
    for row in (noop, sleeping):
        assert row["jobs_per_s"] > 0 and row["jobs_per_reserve"] >= 1
        assert row["cpu_ms"] >= 0 and row["server_cpu_ms"] >= 0
    assert noop["handler_ms"] == 0
    assert sleeping["handler_ms"] >= 2.0  # the handler's own measured sleep
    assert noop["reserve_ms"] > 0  # the unloaded round trip, for the ceiling
    # and the same after idling as long as the sleeping row's handler
    assert noop["reserve_idle_ms"] > 0


def test_connection_slots_benchmark_serves_every_fresh_client() -> None:
    out = _run(
        "connection_slots.py",
        "--idle", "150", "--slow", "20", "--clients", "1", "--calls", "3",
        "--backend", "asyncio",
    )  # fmt: skip
    rows = [line for line in out.splitlines() if line.startswith("| client")]
    assert len(rows) == 1 and "failed" not in rows[0], out


def test_transport_benchmark_reports_every_client_and_the_floor() -> None:
    out = _run("transport.py", "--calls", "20", "--rounds", "1", timeout=4 * TIMEOUT)
    table = [line for line in out.splitlines() if line.startswith("| ")][1:]
    kinds = [row.split("|")[1].strip() for row in table]
    assert kinds == [
        "grpclib",
        "sepp-anyio/asyncio",
        "sepp-anyio/trio",
        "grpcio-aio",
        "floor/asyncio",
        "floor/trio",
        "connection/asyncio",
        "connection/trio",
        "ceiling/blocking",
    ]
    ceiling = [cell.strip() for cell in table[-1].split("|")[1:-1]]
    assert float(ceiling[1].split()[0]) > 0 and ceiling[2:4] == ["-", "-"]
    assert "as a share of the ceiling" in out
    assert "above the floor" in out
    assert "stub and Stream" in out


def test_worker_benchmark_reports_every_table() -> None:
    """The whole worker benchmark, shrunk: every table, with every client (and the floors)
    in the throughput rows."""
    args = ("--scale", "0.01", "--rounds", "1", "--latency", "0")
    out = _run("worker.py", *args, timeout=4 * TIMEOUT)
    rows = [line for line in out.splitlines() if line.startswith("| 0 ms |")]
    # throughput (6), ceiling of the sleeping rows (3), floor (6), CPU of every process (6)
    assert len(rows) == 21, out
    cells = [len(row.split("|")) - 2 for row in rows]
    assert cells == [5] * 6 + [6] * 3 + [7] * 6 + [5] * 6, out
    for heading in ("Ceiling of the rows", "The floor:", "CPU ms per job", "Enqueue-to-handler"):
        assert heading in out
    assert "Memory with 100 jobs in flight" in out
    clients = [line.split("|")[1].strip() for line in out.splitlines() if line.startswith("| sepp")]
    # pickup latency and memory: one row per client each
    assert clients == ["sepp-py", "sepp-anyio/asyncio", "sepp-anyio/trio"] * 2, out


# Its hostile part waits on each scenario's connection (about 20 s in all, longer on a
# loaded machine), over the suite's default per-test bound.
@pytest.mark.timeout(4 * TIMEOUT + 10)
def test_server_benchmark_reports_every_rate_and_the_hostile_table() -> None:
    """The whole server benchmark, shrunk, with its hostile scenarios (RSS after each)."""
    args = ("--clients", "1", "--seconds", "0.2", "--rounds", "1", "--acks", "4")
    out = _run("server.py", *args, "--pipelines", "1", timeout=4 * TIMEOUT)
    starts = ("| no-op", "| GetServer", "| jobs")
    rates = [line for line in out.splitlines() if line.startswith(starts)]
    assert len(rates) == 6, out
    assert all(float(row.split("|")[2].split()[0].replace(",", "")) > 0 for row in rates), out
    assert "targets:" in out
    hostile = [line for line in out.splitlines() if line.endswith("% |")]
    assert len(hostile) == 9, out
