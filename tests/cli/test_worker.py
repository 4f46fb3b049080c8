"""``sepp-anyio worker TARGET``: the target contract, signals, and bad input.

Every test runs the real command in a subprocess against a reference server on loopback.
"""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

import sepp_anyio as sepp
from sepp_anyio.server import ServerProcess

from ._util import CliProcess, assert_one_line_error, closed_port, run_cli, with_client

BACKENDS = ["asyncio", "trio"]

#: The user's module: a registry, factories, and things that are neither. It prints to
#: stderr, where the command logs, so the two keep their order.
JOBS = """
import os
import sys
import anyio
import sepp_anyio as sepp

async def work(payload, ctx):
    seconds = payload.json()["seconds"] if payload else 0
    print(f"started {ctx.id}", file=sys.stderr, flush=True)
    await anyio.sleep(seconds)
    print(f"finished {ctx.id}", file=sys.stderr, flush=True)

async def forever(payload, ctx):
    print(f"started {ctx.id}", file=sys.stderr, flush=True)
    await anyio.sleep_forever()

handlers = {"work": work, "forever": forever}

class Registry:
    handlers = {"work": work}

async def make_worker(client):
    worker = sepp.Worker(client, [os.environ["TEST_QUEUE"]], lease=5.0, wait=5.0)
    worker.handle("work", work)
    print("factory: setup", file=sys.stderr, flush=True)
    yield worker
    print("factory: teardown", file=sys.stderr, flush=True)

def sync_factory(client):
    return sepp.Worker(client, [os.environ["TEST_QUEUE"]]).handle("work", work)

def not_a_worker(client):
    return 42

def two_arguments(client, other):
    return None

number = 42
empty = {}
bad_key = {1: work}
a_worker = sepp.Worker(object(), ["q"])
"""


@pytest.fixture
def jobs_dir(tmp_path: Path) -> Path:
    (tmp_path / "user_jobs.py").write_text(JOBS)
    (tmp_path / "broken_jobs.py").write_text("raise RuntimeError('boom at import')\n")
    (tmp_path / "needs_missing.py").write_text("import no_such_dependency_xyz\n")
    return tmp_path


def _worker(server: ServerProcess, jobs_dir: Path, *args: str, queue: str) -> CliProcess:
    return CliProcess.sepp_anyio(
        "worker",
        *args,
        "--path",
        str(jobs_dir),
        "--address",
        server.address,
        env={"TEST_QUEUE": queue},
    )


def _enqueue(server: ServerProcess, queue: str, job_type: str, seconds: float = 0.0) -> str:
    async def call(client: sepp.Client) -> str:
        payload = sepp.Payload.from_json({"seconds": seconds})
        ack = await client.enqueue(sepp.EnqueueRequest(queue, job_type, payload=payload))
        return ack.job_id

    return with_client(server.address, call)


def _reserve(server: ServerProcess, queue: str, wait: float) -> list[sepp.Job]:
    async def call(client: sepp.Client) -> list[sepp.Job]:
        return await client.reserve([queue], lease=30.0, wait=wait)

    return with_client(server.address, call)


@pytest.mark.parametrize("backend", BACKENDS)
def test_sigterm_mid_job_drains_acks_and_exits_0(
    server: ServerProcess, jobs_dir: Path, queue: str, backend: str
) -> None:
    job_id = _enqueue(server, queue, "work", seconds=1.0)
    # Leases are still extended while draining: the 1 s job outlives its 1 s lease.
    args = ["user_jobs:handlers", "-q", queue, "--lease", "1", "--auto-extend", "--backend"]
    args.append(backend)
    with _worker(server, jobs_dir, *args, queue=queue) as worker:
        worker.wait_for(r"ready: worker \S+ reserving from " + queue)
        worker.wait_for(f"started {job_id}")
        worker.signal(signal.SIGTERM)
        assert worker.wait() == 0, worker.output
    output = worker.output
    assert f"finished {job_id}" in output
    assert "SIGTERM received: no new jobs; draining 1 in flight" in output
    assert "worker drained and stopped: 1 acked, 0 nacked for retry" in output
    # Acked, not abandoned: a job left unsettled would be handed out again once its 1 s
    # lease ran out.
    assert _reserve(server, queue, wait=1.5) == []


@pytest.mark.parametrize("backend", BACKENDS)
def test_second_signal_cancels_the_handlers(
    server: ServerProcess, jobs_dir: Path, queue: str, backend: str
) -> None:
    job_id = _enqueue(server, queue, "forever")
    args = ("user_jobs:handlers", "-q", queue, "--backend", backend)
    with _worker(server, jobs_dir, *args, queue=queue) as worker:
        worker.wait_for(f"started {job_id}")
        worker.signal(signal.SIGINT)
        worker.wait_for("draining 1 in flight")
        worker.signal(signal.SIGTERM)
        assert worker.wait() == 128 + signal.SIGTERM, worker.output
    assert "SIGTERM received again: cancelling 1 running handler(s)" in worker.output
    assert "worker cancelled: 0 acked" in worker.output
    assert "Traceback" not in worker.output


def test_async_generator_factory_sets_up_and_tears_down(
    server: ServerProcess, jobs_dir: Path, queue: str
) -> None:
    with _worker(server, jobs_dir, "user_jobs:make_worker", queue=queue) as worker:
        worker.wait_for("ready: worker")
        job_id = _enqueue(server, queue, "work")
        worker.wait_for(f"finished {job_id}")
        worker.signal(signal.SIGINT)
        assert worker.wait() == 0, worker.output
    output = worker.output
    assert output.index("factory: setup") < output.index("ready: worker")
    assert output.index("worker drained and stopped: 1 acked") < output.index("factory: teardown")


@pytest.mark.parametrize("target", ["user_jobs:sync_factory", "user_jobs:Registry"])
def test_other_target_shapes(
    server: ServerProcess, jobs_dir: Path, queue: str, target: str
) -> None:
    args: tuple[str, ...] = (target,)
    if not target.endswith("factory"):
        args += ("--queue", queue)
    with _worker(server, jobs_dir, *args, queue=queue) as worker:
        worker.wait_for("ready: worker")
        job_id = _enqueue(server, queue, "work")
        worker.wait_for(f"finished {job_id}")
        worker.signal(signal.SIGTERM)
        assert worker.wait() == 0, worker.output


@pytest.mark.parametrize(
    ("target", "extra", "needle"),
    [
        ("no_such_module:handlers", (), "no module named 'no_such_module'"),
        ("user_jobs:missing", (), "'user_jobs' has no attribute 'missing'"),
        ("user_jobs", (), "must be module:attribute"),
        (":handlers", (), "must be module:attribute"),
        ("user_jobs:number", (), "is a int, not a handler registry"),
        ("user_jobs:empty", (), "the handler registry is empty"),
        ("user_jobs:bad_key", (), "registry key 1 is not a job type"),
        ("user_jobs:a_worker", (), "is a Worker"),
        ("user_jobs:two_arguments", (), "a factory must take one argument"),
        ("user_jobs:make_worker", ("--queue", "q"), "leave out --queue"),
        ("user_jobs:make_worker", ("--lease", "3", "-c", "2"), "leave out --lease, --concurrency"),
        ("user_jobs:handlers", ("--queue", "q", "--concurrency", "0"), "must be >= 1"),
        ("user_jobs:handlers", ("--queue", "q", "--lease", "nan"), "--lease"),
        ("user_jobs:handlers", ("--queue", "q", "--backend", "curio"), "invalid choice"),
        ("user_jobs:handlers", ("--queue", "q", "--address", "ftp://x"), "unsupported scheme"),
        ("user_jobs:handlers", ("--queue", "q", "--tls-ca-cert", "/no/ca.pem"), "cannot read"),
        ("user_jobs:handlers", (), "--queue is required"),
        ("user_jobs:handlers", ("--queue", "a,,b"), "--queue is required"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(
    jobs_dir: Path, target: str, extra: tuple[str, ...], needle: str
) -> None:
    result = run_cli("worker", target, "--path", str(jobs_dir), *extra)
    assert_one_line_error(result, 2, needle)


def test_a_module_that_needs_a_missing_dependency_is_not_a_missing_target(
    jobs_dir: Path,
) -> None:
    result = run_cli("worker", "needs_missing:handlers", "-q", "q", "--path", str(jobs_dir))
    assert result.returncode == 1
    # The user's own code failed: its traceback helps, and the last line sums it up.
    assert "Traceback" in result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert "importing 'needs_missing' raised ModuleNotFoundError" in last


def test_a_module_that_raises_at_import(jobs_dir: Path) -> None:
    result = run_cli("worker", "broken_jobs:handlers", "-q", "q", "--path", str(jobs_dir))
    assert result.returncode == 1
    assert "RuntimeError: boom at import" in result.stderr.strip().splitlines()[-1]


def test_a_factory_returning_something_else(server: ServerProcess, jobs_dir: Path) -> None:
    result = run_cli(
        "worker",
        "user_jobs:not_a_worker",
        "--path",
        str(jobs_dir),
        "-a",
        server.address,
        "--log-level",
        "WARNING",
    )
    assert_one_line_error(result, 2, "the factory returned a int, not a Worker")


@pytest.mark.parametrize("backend", BACKENDS)
def test_unreachable_server_is_one_line_and_exit_1(jobs_dir: Path, backend: str) -> None:
    address = f"127.0.0.1:{closed_port()}"
    result = run_cli(
        "worker",
        "user_jobs:handlers",
        "-q",
        "q",
        "--path",
        str(jobs_dir),
        "--address",
        address,
        "--backend",
        backend,
    )
    assert_one_line_error(result, 1, f"could not connect to the sepp server at {address}")


def test_help_explains_the_target_contract() -> None:
    result = run_cli("worker", "--help")
    assert result.returncode == 0
    for text in (
        "module:attribute",
        "handler registry",
        "factory",
        "--queue",
        "--lease",
        "--concurrency",
        "--auto-extend",
        "--drain-timeout",
        "--backend",
        "--api-key",
        "--tls",
        "--log-level",
        "SIGTERM",
    ):
        assert text in result.stdout, text
