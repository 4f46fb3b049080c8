"""The benchmark scripts still run: nothing else imports them, so a change elsewhere (the
transport leaving h2, say) could break one unnoticed until somebody measures.

Each runs as a user would run it, shrunk to a few calls: the HTTP/2 codec benchmark whole,
and the worker benchmark's measuring child for every client against a reference server on
loopback, with the server's CPU watched as ``worker.py`` watches it.
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


def test_http2_codec_benchmark_reports_every_role_and_batch() -> None:
    command = [
        sys.executable,
        str(BENCHMARKS / "http2_codec.py"),
        "--calls", "64", "--rounds", "1", "--batch", "1", "8",
    ]  # fmt: skip
    result = subprocess.run(command, capture_output=True, text=True, timeout=TIMEOUT)
    assert result.returncode == 0, result.stderr[-3000:]
    rows = [line.split("|")[1:-1] for line in result.stdout.splitlines()[2:]]
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
    command = [sys.executable, str(BENCHMARKS / "_worker_child.py"), json.dumps(spec)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=TIMEOUT)
    assert result.returncode == 0, result.stderr[-3000:]
    noop, sleeping = json.loads(result.stdout)
    for row in (noop, sleeping):
        assert row["jobs_per_s"] > 0 and row["jobs_per_reserve"] >= 1
        assert row["cpu_ms"] >= 0 and row["server_cpu_ms"] >= 0
    assert noop["handler_ms"] == 0
    assert sleeping["handler_ms"] >= 2.0  # the handler's own measured sleep
    assert noop["reserve_ms"] > 0  # the unloaded round trip, for the ceiling
    # and the same after idling as long as the sleeping row's handler
    assert noop["reserve_idle_ms"] > 0


def test_connection_slots_benchmark_serves_every_fresh_client() -> None:
    command = [
        sys.executable,
        str(BENCHMARKS / "connection_slots.py"),
        "--idle", "150", "--slow", "20", "--clients", "1", "--calls", "3",
        "--backend", "asyncio",
    ]  # fmt: skip
    result = subprocess.run(command, capture_output=True, text=True, timeout=TIMEOUT)
    assert result.returncode == 0, result.stderr[-3000:]
    rows = [line for line in result.stdout.splitlines() if line.startswith("| client")]
    assert len(rows) == 1 and "failed" not in rows[0], result.stdout


def test_transport_benchmark_reports_every_client_and_the_floor() -> None:
    command = [sys.executable, str(BENCHMARKS / "transport.py"), "--calls", "20", "--rounds", "1"]
    result = subprocess.run(command, capture_output=True, text=True, timeout=4 * TIMEOUT)
    assert result.returncode == 0, result.stderr[-3000:]
    table = [line for line in result.stdout.splitlines() if line.startswith("| ")][1:]
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
    assert "as a share of the ceiling" in result.stdout
    assert "above the floor" in result.stdout
    assert "stub and Stream" in result.stdout
