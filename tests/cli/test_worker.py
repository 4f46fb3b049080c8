"""``sepp-anyio worker TARGET``: the target contract, signals, and bad input.

Every test runs the real command in a subprocess against a reference server on loopback.
"""

from __future__ import annotations

import signal
import subprocess
from collections.abc import Iterator
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

def sync_work(payload, ctx):
    import threading
    where = "event loop" if threading.current_thread() is threading.main_thread() else "thread"
    print(f"sync {ctx.id} in a {where}", file=sys.stderr, flush=True)

def gc_state(payload, ctx):
    import gc
    frozen = gc.get_freeze_count() > 0
    print(f"gc threshold {gc.get_threshold()[0]} frozen {frozen}", file=sys.stderr, flush=True)

handlers = {"work": work, "forever": forever, "gc_state": gc_state}
sync_handlers = {"sync_work": sync_work}

async def takes_one(payload):
    return None

bad_signature = {"work": work, "broken": takes_one}

def bad_factory(client):
    return sepp.Worker(client, [os.environ["TEST_QUEUE"]]).handle("broken", takes_one)

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


def test_burst_processes_what_is_ready_and_exits_0(
    server: ServerProcess, jobs_dir: Path, queue: str
) -> None:
    job_ids = [_enqueue(server, queue, "work") for _ in range(3)]
    with _worker(
        server, jobs_dir, "user_jobs:handlers", "--queue", queue, "--burst", queue=queue
    ) as worker:
        try:
            code = worker.wait(8)
        except subprocess.TimeoutExpired:
            worker.signal(signal.SIGINT)
            worker.wait()
            raise AssertionError(worker.output) from None
        assert code == 0, worker.output
    for job_id in job_ids:
        assert f"finished {job_id}" in worker.output
    assert "worker drained and stopped: 3 acked" in worker.output
    assert _reserve(server, queue, wait=0.0) == []


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
    # The code after the yield is the worker's lifespan teardown: it runs inside run(),
    # after the drain (the job is finished), before run() returns and the summary is logged.
    teardown = output.index("factory: teardown")
    assert output.index(f"finished {job_id}") < teardown
    assert teardown < output.index("worker drained and stopped: 1 acked")


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
        ("user_jobs:handlers", ("--queue", "a,,b"), "--queue/-q: a queue name must not be empty"),
        (
            "user_jobs:bad_signature",
            ("--queue", "q"),
            "the handler for job type 'broken' cannot be called as handler(payload: Payload "
            "| None, ctx: JobCtx) -> None: its signature is takes_one(payload)",
        ),
        ("user_jobs.py:handlers", (), "names a file, not a module: use user_jobs:handlers"),
        ("./user_jobs.py:handlers", (), "use user_jobs:handlers"),
        ("pkg/jobs.py:handlers", (), "names a file, not a module: use pkg.jobs:handlers"),
        ("/srv/app/jobs.py:handlers", (), "use jobs:handlers --path /srv/app"),
        ("../jobs.py:handlers", (), "use jobs:handlers --path .."),
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


def test_a_factory_that_registers_a_bad_handler_is_one_line_and_exit_2(
    server: ServerProcess, jobs_dir: Path, queue: str
) -> None:
    result = run_cli(
        "worker",
        "user_jobs:bad_factory",
        "--path",
        str(jobs_dir),
        "-a",
        server.address,
        "--log-level",
        "WARNING",
        env={"TEST_QUEUE": queue},
    )
    assert_one_line_error(
        result, 2, "the factory registered a handler that cannot work", "job type 'broken'"
    )


@pytest.mark.parametrize("backend", BACKENDS)
def test_sync_handlers_of_a_registry_run_in_threads(
    server: ServerProcess, jobs_dir: Path, queue: str, backend: str
) -> None:
    args = ("user_jobs:sync_handlers", "-q", queue, "--backend", backend)
    with _worker(server, jobs_dir, *args, queue=queue) as worker:
        worker.wait_for("ready: worker")
        job_id = _enqueue(server, queue, "sync_work")
        worker.wait_for(f"sync {job_id} in a thread")
        worker.signal(signal.SIGTERM)
        assert worker.wait() == 0, worker.output
    assert "worker drained and stopped: 1 acked" in worker.output


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_second_signal_is_the_reason_of_the_nack(
    server: ServerProcess, jobs_dir: Path, queue: str, backend: str
) -> None:
    """The job is on its last attempt, so its nack dead-letters it, and the dead letter
    keeps the nack's reason: the signal, not a drain_timeout nobody set."""

    async def enqueue_last_attempt(client: sepp.Client) -> str:
        ack = await client.enqueue(sepp.EnqueueRequest(queue, "forever", max_attempts=1))
        return ack.job_id

    job_id = with_client(server.address, enqueue_last_attempt)
    args = ("user_jobs:handlers", "-q", queue, "--backend", backend)
    with _worker(server, jobs_dir, *args, queue=queue) as worker:
        worker.wait_for(f"started {job_id}")
        worker.signal(signal.SIGINT)
        worker.wait_for("draining 1 in flight")
        worker.signal(signal.SIGINT)
        assert worker.wait() == 128 + signal.SIGINT, worker.output

    async def dead_letters(client: sepp.Client) -> list[sepp.DeadLetterRecord]:
        return await client.drain_dead_letters(queue=queue, max=10)

    [record] = with_client(server.address, dead_letters)
    assert record.job_id == job_id
    reason = "worker shut down before the handler finished (SIGINT received again)"
    assert record.last_reason == reason
    assert reason in worker.output
    assert "drain_timeout" not in worker.output


@pytest.fixture(scope="module")
def guarded_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """A server that wants an API key and serves only the queues it declares."""
    directory = tmp_path_factory.mktemp("guarded-server")
    config = directory / "sepp.toml"
    config.write_text(
        '[auth]\napi_keys = ["right"]\n[server]\nstrict_queues = true\n'
        '[[queues]]\nname = "declared"\n'
    )
    process = ServerProcess(
        "--memory", "--port", "0", "--config", str(config), "--log-level", "ERROR", cwd=directory
    )
    process.start()
    try:
        yield process
    finally:
        process.stop()


def _refused(result: subprocess.CompletedProcess[str], *needles: str) -> None:
    """Exit 1 with one error line, the last one, naming the fix (and no retrying)."""
    assert result.returncode == 1, (result.returncode, result.stderr)
    assert "Traceback" not in result.stderr
    assert "retrying" not in result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("sepp-anyio worker: error: "), last
    assert sum(": error: " in line for line in result.stderr.splitlines()) == 1
    for needle in needles:
        assert needle in last, (needle, last)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("key", [None, "wrong"], ids=["no-key", "wrong-key"])
def test_a_refused_api_key_exits_1_naming_the_option(
    guarded_server: ServerProcess, jobs_dir: Path, backend: str, key: str | None
) -> None:
    """It used to log "ready", then retry every second forever (and exit 0 on SIGTERM)."""
    args = ["worker", "user_jobs:handlers", "-q", "declared", "--path", str(jobs_dir)]
    args += ["-a", guarded_server.address, "--backend", backend]
    env = {} if key is None else {"SEPP_API_KEY": key}
    result = run_cli(*args, env=env)
    _refused(result, "UNAUTHENTICATED", "--api-key", "$SEPP_API_KEY")


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_undeclared_queue_of_a_strict_server_exits_1_naming_the_fix(
    guarded_server: ServerProcess, jobs_dir: Path, backend: str
) -> None:
    args = ["worker", "user_jobs:handlers", "-q", "declared,typo", "--path", str(jobs_dir)]
    args += ["-a", guarded_server.address, "--api-key", "right", "--backend", backend]
    result = run_cli(*args)
    _refused(result, "strict mode", "queues (declared, typo)", '"typo"', "declare them")


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


@pytest.mark.parametrize("tuning", [True, False], ids=["gc-tuned", "no-gc-tuning"])
def test_the_command_tunes_its_own_garbage_collector_unless_asked_not_to(
    server: ServerProcess, jobs_dir: Path, queue: str, tuning: bool
) -> None:
    _enqueue(server, queue, "gc_state")
    args = ["user_jobs:handlers", "--queue", queue, "--burst"]
    if not tuning:
        args.append("--no-gc-tuning")
    with _worker(server, jobs_dir, *args, queue=queue) as worker:
        assert worker.wait(8) == 0, worker.output
    if tuning:
        assert "gc threshold 10000 frozen True" in worker.output
    else:
        assert "gc threshold 700 frozen False" in worker.output
