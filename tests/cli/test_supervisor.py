"""``sepp-anyio worker --workers N`` / ``--max-jobs-per-child`` / ``--reload`` /
``--health-port``: real supervisor and worker processes against the reference server on
loopback, signals sent with ``os.kill``, log lines as the only synchronisation."""

from __future__ import annotations

import os
import re
import signal
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

import sepp_anyio as sepp
from sepp_anyio.server import ServerProcess

from ._util import CliProcess, retention_server, with_client

#: Real processes (a supervisor and its children, each starting Python): seconds each.
pytestmark = pytest.mark.slow

JOBS = """
import os
import sys
import anyio

async def work(payload, ctx):
    seconds = payload.json()["seconds"] if payload else 0
    print(f"started {ctx.id} in {os.getpid()}", file=sys.stderr, flush=True)
    await anyio.sleep(seconds)
    print(f"finished {ctx.id}", file=sys.stderr, flush=True)

async def forever(payload, ctx):
    print(f"started {ctx.id} in {os.getpid()}", file=sys.stderr, flush=True)
    await anyio.sleep_forever()

async def crash(payload, ctx):
    print(f"crashing {ctx.id}", file=sys.stderr, flush=True)
    os._exit(3)

async def crash_once(payload, ctx):
    if ctx.attempt == 1:
        print(f"crashing {ctx.id}", file=sys.stderr, flush=True)
        os._exit(3)
    print(f"finished {ctx.id} on attempt {ctx.attempt}", file=sys.stderr, flush=True)

handlers = {"work": work, "forever": forever, "crash": crash, "crash_once": crash_once}
"""


@pytest.fixture
def jobs_dir(tmp_path: Path) -> Path:
    (tmp_path / "sup_jobs.py").write_text(JOBS)
    return tmp_path


def _worker_cli(server: ServerProcess, jobs_dir: Path, queue: str, *args: str) -> CliProcess:
    return CliProcess.sepp_anyio(
        "worker",
        "sup_jobs:handlers",
        "--path",
        str(jobs_dir),
        "--address",
        server.address,
        "-q",
        queue,
        "--wait",
        "1",
        *args,
    )


def _enqueue(
    server: ServerProcess, queue: str, job_type: str, count: int = 1, **json: float
) -> list[str]:
    async def call(client: sepp.Client) -> list[str]:
        payload = sepp.Payload.from_json(json or {"seconds": 0})
        requests = [sepp.EnqueueRequest(queue, job_type, payload=payload) for _ in range(count)]
        results = await client.enqueue_batch(requests)
        return [r.job_id for r in results if isinstance(r, sepp.EnqueueAck)]

    return with_client(server.address, call)


def _kill(process: CliProcess, signum: signal.Signals) -> None:
    os.kill(process.process.pid, signum)


def test_n_children_with_numbered_ids_drain_on_one_signal_and_exit_0(
    server: ServerProcess, jobs_dir: Path, queue: str
) -> None:
    with _worker_cli(server, jobs_dir, queue, "--workers", "2", "--worker-id", "w") as sup:
        sup.wait_for(r"ready: worker w-1 reserving")
        sup.wait_for(r"ready: worker w-2 reserving")
        [job_id] = _enqueue(server, queue, "work", seconds=0.5)
        sup.wait_for(f"started {job_id}")
        _kill(sup, signal.SIGTERM)
        assert sup.wait() == 0, sup.output
    output = sup.output
    assert f"finished {job_id}" in output  # drained, not cancelled
    assert output.count("SIGTERM received: no new jobs; draining") == 2
    assert output.count("drained and stopped") == 2
    assert "supervisor: SIGTERM received; forwarding it to the children (drain)" in output


def test_a_crashed_child_is_restarted_and_the_crash_does_not_set_the_status(
    server: ServerProcess, jobs_dir: Path, queue: str
) -> None:
    with _worker_cli(server, jobs_dir, queue, "--workers", "2", "--worker-id", "c") as sup:
        sup.wait_for(r"ready: worker c-1 ")
        sup.wait_for(r"ready: worker c-2 ")
        [crash_id] = _enqueue(server, queue, "crash")
        sup.wait_for(f"crashing {crash_id}")
        sup.wait_for(
            r"supervisor: child \d \(pid \d+\) crashed with status 3 after [\d.]+s; "
            r"restarting it in 0.5s"
        )
        number = re.search(r"child (\d) \(pid \d+\) crashed", sup.output)
        assert number is not None
        # The replacement comes up under the same id.
        sup.wait_for(rf"ready: worker c-{number.group(1)} ", count=2)
        _kill(sup, signal.SIGINT)
        assert sup.wait() == 0, sup.output


def test_workers_1_is_one_supervised_child_restarted_after_a_crash(
    server: ServerProcess, jobs_dir: Path, queue: str
) -> None:
    """``--workers 1`` used to run the worker in the command's own process: the crash
    ended the command with status 3."""
    args = ("--workers", "1", "--worker-id", "one", "--lease", "1")
    with _worker_cli(server, jobs_dir, queue, *args) as sup:
        sup.wait_for(r"supervisor \(pid \d+\): 1 worker process\(es\)")
        sup.wait_for(r"ready: worker one-1 reserving")
        [job_id] = _enqueue(server, queue, "crash_once")
        sup.wait_for(f"crashing {job_id}")
        sup.wait_for(r"supervisor: child 1 \(pid \d+\) crashed with status 3 after [\d.]+s; ")
        # The replacement takes the job again once the crashed child's 1 s lease is over.
        sup.wait_for(r"ready: worker one-1 reserving", count=2)
        sup.wait_for(f"finished {job_id} on attempt 2")
        _kill(sup, signal.SIGTERM)
        assert sup.wait() == 0, sup.output
    assert "supervisor: SIGTERM received; forwarding it to the children (drain)" in sup.output


def test_without_workers_the_command_is_the_worker_and_a_crash_ends_it(
    server: ServerProcess, jobs_dir: Path, queue: str
) -> None:
    with _worker_cli(server, jobs_dir, queue, "--lease", "1") as worker:
        worker.wait_for(r"ready: worker \S+ reserving")
        [job_id] = _enqueue(server, queue, "crash_once")
        assert worker.wait() == 3, worker.output
    assert f"crashing {job_id}" in worker.output
    assert "supervisor" not in worker.output


def test_the_second_signal_is_forwarded_and_the_status_is_the_childs(
    server: ServerProcess, jobs_dir: Path, queue: str
) -> None:
    with _worker_cli(server, jobs_dir, queue, "--workers", "2") as sup:
        sup.wait_for(r"ready: worker \S+ reserving", count=2)
        [job_id] = _enqueue(server, queue, "forever")
        sup.wait_for(f"started {job_id}")
        _kill(sup, signal.SIGINT)
        sup.wait_for("draining 1 in flight")
        # The idle child drains at once (exit 0); the busy one waits for its job.
        sup.wait_for(r"supervisor: child \d \(pid \d+\) exited with status 0")
        _kill(sup, signal.SIGTERM)
        # The busy child cancels its job (exit 128 + SIGTERM): the first non-zero status,
        # the supervisor's.
        assert sup.wait() == 128 + signal.SIGTERM, sup.output
    assert "SIGTERM received again: cancelling 1 running handler(s)" in sup.output
    assert "forwarding it to the children (cancel their handlers)" in sup.output


def test_max_jobs_per_child_recycles_children(
    server: ServerProcess, jobs_dir: Path, queue: str
) -> None:
    ids = _enqueue(server, queue, "work", count=5)
    with _worker_cli(server, jobs_dir, queue, "--max-jobs-per-child", "2", "-c", "4") as sup:
        for job_id in ids:
            sup.wait_for(f"finished {job_id}")
        sup.wait_for(r"ready: worker \S+ reserving", count=3)
        _kill(sup, signal.SIGTERM)
        assert sup.wait() == 0, sup.output
    output = sup.output
    pids = re.findall(r"started \S+ in (\d+)", output)
    assert sorted(pids.count(pid) for pid in set(pids)) == [1, 2, 2]
    assert output.count("drained and exited; replacing it") == 2
    assert output.count("took its job_limit of jobs; draining and stopping") == 2


def test_reload_drains_the_running_job_before_starting_the_new_child(
    server: ServerProcess, jobs_dir: Path, queue: str
) -> None:
    with _worker_cli(server, jobs_dir, queue, "--reload") as sup:
        sup.wait_for(r"ready: worker \S+ reserving")
        sup.wait_for(r"supervisor: watching .* for changes")
        [job_id] = _enqueue(server, queue, "work", seconds=1.0)
        sup.wait_for(f"started {job_id}")
        (jobs_dir / "sup_jobs.py").write_text(JOBS + "\n# edited\n")
        sup.wait_for("sup_jobs.py changed; draining")
        sup.wait_for(r"ready: worker \S+ reserving", count=2)
        _kill(sup, signal.SIGTERM)
        assert sup.wait() == 0, sup.output
    output = sup.output
    # The job finished (and was acked: it never started again) before the new child.
    finished = output.index(f"finished {job_id}")
    second_ready = [m.start() for m in re.finditer(r"ready: worker", output)][1]
    assert finished < second_ready
    assert output.count(f"started {job_id}") == 1
    assert "drained for the reload" in output


def test_a_usage_error_of_the_children_stops_the_supervisor_with_2(
    server: ServerProcess, jobs_dir: Path, queue: str
) -> None:
    process = CliProcess.sepp_anyio(
        "worker",
        "sup_jobs:nothing",
        "--path",
        str(jobs_dir),
        "--address",
        server.address,
        "-q",
        queue,
        "--workers",
        "2",
    )
    with process:
        assert process.wait() == 2, process.output
    assert "has no attribute 'nothing'" in process.output
    assert "a restart cannot fix" in process.output


def test_health_port_serves_the_probes_of_a_worker_process(
    server: ServerProcess, jobs_dir: Path, queue: str
) -> None:
    with _worker_cli(server, jobs_dir, queue, "--health-port", "0") as worker:
        worker.wait_for(r"health: http://127.0.0.1:\d+/livez")
        worker.wait_for(r"ready: worker \S+ reserving")
        found = re.search(r"health: http://127.0.0.1:(\d+)/livez", worker.output)
        assert found is not None
        base = f"http://127.0.0.1:{found.group(1)}"
        for path in ("/livez", "/readyz"):
            with urllib.request.urlopen(base + path, timeout=5) as response:
                assert response.status == 200
        with urllib.request.urlopen(base + "/metrics", timeout=5) as response:
            assert b'sepp_jobs_in_flight{lane="default"} 0' in response.read()
        _kill(worker, signal.SIGTERM)
        assert worker.wait() == 0, worker.output


def _readyz(base: str) -> int:
    try:
        with urllib.request.urlopen(base + "/readyz", timeout=5) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


def test_unready_after_turns_readyz_503_once_the_server_is_gone(
    tmp_path: Path, jobs_dir: Path, queue: str
) -> None:
    """``--unready-after 0``: the first failed reserve after the server went away turns
    ``/readyz`` to 503 (the default waits 5 s of failures; the Worker's own tests check
    that on virtual time)."""
    server = retention_server(tmp_path)
    server.start()
    try:
        with _worker_cli(
            server, jobs_dir, queue, "--health-port", "0", "--unready-after", "0"
        ) as worker:
            worker.wait_for(r"ready: worker \S+ reserving")
            found = re.search(r"health: http://127.0.0.1:(\d+)/livez", worker.output)
            assert found is not None
            base = f"http://127.0.0.1:{found.group(1)}"
            assert _readyz(base) == 200
            server.stop()
            # The worker's reserve (a 1 s long poll) fails once the server is gone; each
            # look is an HTTP request to the worker process, bounded in count and time.
            deadline = time.monotonic() + 30
            while _readyz(base) != 503:
                assert time.monotonic() < deadline, worker.output
                time.sleep(0.1)
            _kill(worker, signal.SIGTERM)
            assert worker.wait() == 0, worker.output
    finally:
        server.stop()
