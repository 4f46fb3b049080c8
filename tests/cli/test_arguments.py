"""Every subcommand checks its command line before connecting: a bad option is one error
line naming the option, status 2, whatever is (or is not) listening at the address.

Each command here is given the address of a port nothing listens on: one that tried to
connect would fail there with status 1 ("could not connect"), so status 2 and the
option's name in the line show that the check came first. The worker's target module
prints a line when imported, which must not appear either: the options are checked
before the user's code runs (and before a supervisor starts any child).
"""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from sepp_anyio.server import ServerProcess

from ._util import assert_one_line_error, closed_port, run_cli

MODULE = """
import sys
print("the target module was imported", file=sys.stderr, flush=True)

async def work(payload, ctx):
    return None

handlers = {"work": work}
crons = []
"""

MALFORMED = "127.0.0.1:50051:9"


@pytest.fixture
def module_dir(tmp_path: Path) -> Path:
    (tmp_path / "arg_jobs.py").write_text(MODULE)
    return tmp_path


def _nowhere() -> str:
    return f"127.0.0.1:{closed_port()}"


def _worker(module_dir: Path, *args: str) -> tuple[str, ...]:
    return ("worker", "arg_jobs:handlers", "--path", str(module_dir), *args)


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        # It used to connect first, then exit 1 with "InvalidArgumentError: queues[0]
        # must not contain '/'" (the Python parameter's name).
        (("-q", "emails/eu"), "argument --queue/-q: queue name must not contain '/', got"),
        (("--queue", "emails,eu/x"), "argument --queue/-q: queue name must not contain '/'"),
        (("-q", "ok", "-q", ".."), "argument --queue/-q: queue name must not be '..'"),
        (("-q", "a\x01b"), "argument --queue/-q: queue name must not contain control"),
        (("-q", "a", "--lease", "0.0001"), "argument --lease: must be at least 0.001 seconds"),
        (("-q", "a", "--worker-id", ""), "argument --worker-id: the value must not be empty"),
        (("-q", "a", "--unready-after", "-1"), "argument --unready-after: must be"),
        # With a supervisor too: it starts no child for a command line that cannot work.
        (("-q", "emails/eu", "--workers", "2"), "argument --queue/-q: queue name must not"),
        (("-q", "a", "--workers", "1", "--address", MALFORMED), "--address"),
        (("-q", "a", "--health-port", "0", "--health-host", ""), "--health-host must not be"),
    ],
)
def test_worker_options_are_checked_before_connecting(
    module_dir: Path, args: tuple[str, ...], needle: str
) -> None:
    result = run_cli(*_worker(module_dir, "--address", _nowhere(), *args))
    assert_one_line_error(result, 2, needle)
    assert "imported" not in result.stderr


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (("-q", "emails/eu", "-t", "t"), "argument --queue/-q: queue name must not contain '/'"),
        (("-q", "q", "-t", ""), "argument --type/-t: the value must not be empty"),
        (("-q", "q", "-t", "t", "-k", ""), "argument --idempotency-key/-k: the value must not"),
        (
            ("-q", "q", "-t", "t", "--max-attempts", "99999999999"),
            "--max-attempts must be between 1 and 4294967295",
        ),
    ],
)
def test_enqueue_options_name_the_option(args: tuple[str, ...], needle: str) -> None:
    result = run_cli("enqueue", "--address", _nowhere(), *args)
    assert_one_line_error(result, 2, needle)


def test_dlq_drain_checks_its_queue_name_before_connecting() -> None:
    result = run_cli("dlq", "drain", "--address", _nowhere(), "-q", "emails/eu")
    assert_one_line_error(result, 2, "argument --queue/-q: queue name must not contain '/'")


def _every_command(module_dir: Path) -> list[tuple[str, ...]]:
    return [
        _worker(module_dir, "-q", "emails"),
        ("cron", "arg_jobs:crons", "--path", str(module_dir)),
        ("enqueue", "-q", "emails", "-t", "t"),
        ("info",),
        ("dlq", "drain"),
    ]


@pytest.mark.parametrize("command", range(5), ids=["worker", "cron", "enqueue", "info", "dlq"])
def test_a_malformed_address_is_refused_naming_the_option(module_dir: Path, command: int) -> None:
    """It was taken for an IPv6 host: "cannot connect to [127.0.0.1:50051:9]:50051"."""
    args = _every_command(module_dir)[command]
    result = run_cli(*args, "--address", MALFORMED)
    line = assert_one_line_error(
        result, 2, f"--address '{MALFORMED}' is malformed: expected host, host:port"
    )
    assert "connect" not in line
    assert "imported" not in result.stderr


@pytest.mark.parametrize("command", range(5), ids=["worker", "cron", "enqueue", "info", "dlq"])
def test_a_malformed_sepp_addr_is_refused_too(module_dir: Path, command: int) -> None:
    args = _every_command(module_dir)[command]
    result = run_cli(*args, env={"SEPP_ADDR": "::1:8080"})
    assert_one_line_error(result, 2, "--address '::1:8080' is ambiguous: write [::1]:8080")


@pytest.mark.parametrize("command", range(5), ids=["worker", "cron", "enqueue", "info", "dlq"])
def test_connection_options_are_checked_before_connecting(
    module_dir: Path, tmp_path: Path, command: int
) -> None:
    args = _every_command(module_dir)[command] + ("--address", _nowhere())
    key = run_cli(*args, "--api-key", "has space")
    assert_one_line_error(key, 2, "--api-key", "spaces or control characters")
    # An unusable CA file was a traceback (ssl.SSLError out of connect()).
    pem = tmp_path / "not-a-ca.pem"
    pem.write_text("not a certificate\n")
    ca = run_cli(*args, "--tls-ca-cert", str(pem))
    assert_one_line_error(ca, 2, "--tls-ca-cert", "holds no usable PEM certificate")
    assert "imported" not in key.stderr + ca.stderr


def test_a_health_port_that_is_taken_is_one_line(server: ServerProcess, module_dir: Path) -> None:
    """It was a traceback (an OSError out of the task group)."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = run_cli(
            *_worker(module_dir, "-q", "emails", "--address", server.address),
            "--health-port",
            str(port),
            "--log-level",
            "WARNING",
        )
    assert result.returncode == 1, result.stderr
    lines = result.stderr.strip().splitlines()
    assert lines[0] == "the target module was imported", lines  # it runs, then fails
    assert len(lines) == 2, lines
    assert lines[1].startswith(
        f"sepp-anyio worker: error: --health-host/--health-port: cannot listen on "
        f"127.0.0.1:{port} ("
    ), lines
