"""``sepp-anyio demo``: the embedded server on both backends, an external server, bad input."""

from __future__ import annotations

import re

import pytest

from sepp_anyio.server import ServerProcess

from ._util import assert_one_line_error, closed_port, run_cli

#: Short leases make the slow jobs short too (they run 1.5 leases long).
FAST = ("--jobs", "50", "--lease", "1")


def _summary(stdout: str) -> dict[str, tuple[int, str]]:
    """The summary table: outcome -> (jobs, note)."""
    rows: dict[str, tuple[int, str]] = {}
    for line in stdout.splitlines():
        match = re.fullmatch(r"(\s*[a-z_ -]+?)\s{2,}(\d+)(?:\s{2,}(.*))?", line)
        if match:
            rows[match[1].strip()] = (int(match[2]), match[3] or "")
    return rows


def _assert_everything_as_expected(stdout: str, jobs: int) -> None:
    rows = _summary(stdout)
    assert rows["enqueued"][0] == jobs
    for outcome in ("acked", "after a retry", "kept by auto-extend", "dead-lettered"):
        count, note = rows[outcome]
        assert note == f"expected {count}", (outcome, rows)
    assert rows["lease lost"] == (0, "expected 0")
    assert rows["resent with a used key"][0] == len(range(0, jobs, 10))
    assert rows["acked"][0] + rows["dead-lettered"][0] == jobs
    assert rows["rejected"][0] + rows["attempts_exhausted"][0] == rows["dead-lettered"][0]
    assert rows["attempts_exhausted"][0] >= 1 and rows["rejected"][0] >= 1
    assert f"{jobs} jobs settled in" in stdout


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_demo_on_the_embedded_server(backend: str) -> None:
    result = run_cli("demo", "--backend", backend, *FAST)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    assert f"50 jobs through a Worker on {backend}" in result.stdout
    assert "embedded reference server on 127.0.0.1:" in result.stdout
    assert "SQLite database" in result.stdout
    # The embedded server's web console, on a free loopback port.
    assert re.search(r"^  console: http://127\.0\.0\.1:\d+/$", result.stdout, re.M), result.stdout
    # Not a terminal: progress comes as whole lines, the last one complete.
    progress = [line for line in result.stdout.splitlines() if "jobs/s |" in line]
    assert progress and "50/50 done" in progress[-1]
    assert "\r" not in result.stdout
    _assert_everything_as_expected(result.stdout, 50)


def test_demo_against_a_given_server(server: ServerProcess) -> None:
    result = run_cli("demo", "--address", server.address, "--backend", "trio", *FAST)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"server: {server.address} (given by --address)" in result.stdout
    _assert_everything_as_expected(result.stdout, 50)


@pytest.mark.parametrize(
    ("args", "code", "needle"),
    [
        (("--jobs", "0"), 2, "argument --jobs/-n: must be >= 1"),
        (("--backend", "twisted"), 2, "invalid choice: 'twisted'"),
        (("--lease", "0"), 2, "argument --lease"),
        (("--address", "127.0.0.1:0"), 2, "port 0 is outside 1-65535"),
    ],
)
def test_demo_bad_input(args: tuple[str, ...], code: int, needle: str) -> None:
    assert_one_line_error(run_cli("demo", *args), code, needle)


def test_demo_unreachable_server() -> None:
    address = f"127.0.0.1:{closed_port()}"
    result = run_cli("demo", "--address", address)
    assert_one_line_error(result, 1, f"could not connect to the sepp server at {address}")
