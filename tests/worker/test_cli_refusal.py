"""``sepp-anyio worker`` with a worker of several lanes and a wrong API key: one error line
naming the fix, exit 1, however many lanes are refused (it printed an 80-line exception
group of one ``UnauthenticatedError`` per lane about half the time). The real command in a
subprocess against a network reference server that wants a key."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from sepp_anyio.server import ApiKey, AuthConfig, ServerConfig, ServerThread

from ..cli._util import run_cli

JOBS = """
import sepp_anyio as sepp

async def work(payload, ctx):
    raise AssertionError("no job can be reserved")

def make_worker(client):
    lanes = [sepp.Lane([f"q{n}"]) for n in range(5)]
    return sepp.Worker(client, lanes, wait=5.0).handle("t", work)
"""


@pytest.fixture(scope="module")
def keyed_server() -> Iterator[ServerThread]:
    with ServerThread(ServerConfig(auth=AuthConfig(api_keys=(ApiKey("right"),)))) as running:
        yield running


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_five_lanes_refused_are_one_error_line(
    keyed_server: ServerThread, tmp_path: Path, backend: str
) -> None:
    (tmp_path / "lane_jobs.py").write_text(JOBS)
    args = ["worker", "lane_jobs:make_worker", "--path", str(tmp_path), "--api-key", "nope"]
    args += ["--address", keyed_server.address, "--backend", backend]
    # Without the fix, 4 of 5 runs of a five-lane worker printed a group: four runs in a row
    # of one line each would happen by chance once in hundreds.
    for _run in range(4):
        result = run_cli(*args)
        assert result.returncode == 1, (result.returncode, result.stderr)
        assert "Traceback" not in result.stderr and "ExceptionGroup" not in result.stderr
        lines = result.stderr.strip().splitlines()
        errors = [line for line in lines if ": error: " in line]
        assert errors == [lines[-1]], result.stderr
        assert "UNAUTHENTICATED" in errors[0] and "--api-key" in errors[0], errors[0]
