"""README.md stays true: CI runs its test command, its Python blocks compile, the Quick
start's server, producer and worker run as shown (stopped by a signal, every job handled),
its test example passes on both backends (run with the example suite, in
``test_examples.py``), and its reference tables name every subcommand,
example and statistics field."""

from __future__ import annotations

import ast
import dataclasses
import os
import re
import shlex
import signal
import subprocess
import sys
import tomllib
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from packaging.requirements import Requirement

import sepp_anyio as sepp
from sepp_anyio._cli import _COMMANDS
from sepp_anyio.server import ServerProcess
from sepp_anyio.testing import open_in_memory_client
from tests.cli._util import CliProcess, with_client

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()
TIMEOUT = 60
QUICK_START_ADDRESS = "127.0.0.1:50051"


def _blocks(language: str, text: str = README) -> list[str]:
    return re.findall(rf"^```{language}\n(.*?)^```", text, flags=re.DOTALL | re.MULTILINE)


def _section(title: str) -> str:
    """The text of the ``## title`` section (up to the next ``## ``)."""
    return README.split(f"\n## {title}\n", 1)[1].split("\n## ", 1)[0]


def file_block(name: str) -> str:
    """The Python block whose first line is ``# name``."""
    (block,) = [b for b in _blocks("python") if b.startswith(f"# {name}\n")]
    return block


def test_ci_runs_exactly_the_readme_test_command() -> None:
    ci = (ROOT / ".ci" / "run").read_text().strip().splitlines()[-1]
    assert ci in _blocks("sh")[1]
    assert ci == (
        'python3 -m venv .venv && .venv/bin/pip install -q -e ".[test]" '
        "&& .venv/bin/python -m pytest"
    )


def test_the_first_command_runs_the_demo() -> None:
    first = _blocks("sh")[0].strip()
    assert first.startswith("python3 -m venv .venv && .venv/bin/pip install")
    assert first.endswith(".venv/bin/sepp-anyio demo --backend trio")


@pytest.mark.parametrize("index", range(len(_blocks("python"))))
def test_python_blocks_compile(index: int) -> None:
    source = _blocks("python")[index]
    compile(source, f"README.md python block {index}", "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)


@pytest.mark.parametrize("name", ["producer.py", "worker.py"])
def test_the_quick_start_scripts_start_no_loop_when_imported(name: str) -> None:
    """``sepp-anyio worker worker:make_worker`` imports the Quick start's worker.py: a
    module that ran ``anyio.run`` at import would start a second worker beside the
    command's.  Every statement at module level that runs a loop sits under
    ``if __name__ == "__main__":``."""
    tree = ast.parse(file_block(name))
    guarded = [
        node
        for node in tree.body
        if isinstance(node, ast.If) and ast.unparse(node.test) == "__name__ == '__main__'"
    ]
    assert len(guarded) == 1, name
    unguarded = [node for node in tree.body if node not in guarded]
    calls = [
        ast.unparse(call.func)
        for node in unguarded
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        for call in ast.walk(node)
        if isinstance(call, ast.Call)
    ]
    assert not [call for call in calls if call.endswith(".run")], calls
    assert "anyio.run" in ast.unparse(guarded[0]), name


def test_the_quick_start_installs_its_extras_before_its_first_block() -> None:
    """The Quick start's code needs the ``trio`` and ``pydantic`` extras, which the first
    README command does not install (``pydantic``): the install command is a block of its
    own, before the first code block."""
    quick_start = _section("Quick start")
    first = re.search(r"^```(\w+)\n(.*?)^```", quick_start, flags=re.DOTALL | re.MULTILINE)
    assert first is not None
    assert first.group(1) == "sh"
    assert first.group(2).strip() == '.venv/bin/pip install -q -e ".[trio,pydantic]"'


def test_nox_is_run_from_the_virtual_environment() -> None:
    """``nox`` is not on PATH after the two commands: the README writes ``.venv/bin/nox``
    and says that the ``dev`` extra installs it."""
    commands = re.findall(r"(?:^|[\s`])((?:[^\s`]*/)?nox) -s ", README, flags=re.MULTILINE)
    assert commands
    assert set(commands) == {".venv/bin/nox"}, commands
    assert "`nox` comes with the `dev` extra" in README


def test_the_command_line_reference_names_every_subcommand() -> None:
    section = _section("The command line")
    for name in _COMMANDS:
        assert f"| `{name}" in section, name


# --------------------------------------------------------------------------- new users


def test_the_quick_start_says_to_use_the_virtual_environment() -> None:
    # Its commands are bare `sepp-anyio` / `python`: they need the venv of "Two commands".
    intro = _section("Quick start").split("```", 1)[0]
    assert ". .venv/bin/activate" in intro
    assert "`.venv/bin/sepp-anyio`" in intro


def test_depending_on_the_library_from_another_project() -> None:
    section = _section("Depending on sepp-anyio from your own project")
    (commands,) = _blocks("sh", section)
    installs = [line for line in commands.splitlines() if line.startswith("pip install ")]
    assert any("/path/to/sepp-anyio" in line for line in installs)  # a clone
    assert any("git+https://" in line for line in installs)  # a git URL
    assert any(".whl" in line for line in installs)  # a built wheel
    assert "pip wheel --no-deps -w dist" in commands
    (toml,) = _blocks("toml", section)
    dependencies = tomllib.loads(toml)["project"]["dependencies"]
    (requirements,) = _blocks("text", section)
    lines = [*dependencies, *requirements.split("\n")[:-1]]
    lines.append(re.search(r'"(sepp-anyio @ file://[^"]+)"', toml)[1])  # type: ignore[index]
    for line in lines:
        requirement = Requirement(line)  # valid PEP 508, as pip reads it
        assert requirement.name == "sepp-anyio", line
        assert requirement.url, line
    # The wheel's name is the one `pip wheel` builds for this version.
    assert f"dist/sepp_anyio-{sepp.__version__}-py3-none-any.whl" in commands


def test_every_example_is_listed() -> None:
    section = _section("Examples")
    for path in sorted((ROOT / "examples").glob("*.py")):
        assert f"| `{path.name}` |" in section, path.name


def test_every_statistics_field_is_documented() -> None:
    section = _section("Configuration").split("### Worker statistics", 1)[1]
    assert "worker.statistics()" in section
    for field in dataclasses.fields(sepp.WorkerStatistics):
        assert f"| `{field.name}` |" in section, field.name


def test_the_testing_section_says_asyncio_runs_in_real_time() -> None:
    section = _section("The reference server and testing")
    assert "asyncio has no such clock" in section
    assert "real time" in section
    block = file_block("test_jobs.py")
    assert '@pytest.fixture(params=["trio", "asyncio"])' in block
    assert "MockClock(autojump_threshold=0)" in block


# --------------------------------------------------------------------------- running the blocks


def _quick_start_server_args() -> list[str]:
    """The Quick start's server command, as ``python -m sepp_anyio.server`` arguments."""
    # The first block installs the extras; the second: "Start a server in one terminal".
    command = _blocks("sh", _section("Quick start"))[1]
    argv = shlex.split(command)
    assert argv[:2] == ["sepp-anyio", "server"], argv
    return argv[2:]


@pytest.fixture
def quick_start_server(tmp_path: Path) -> Iterator[ServerProcess]:
    """The Quick start's server, on a free port instead of 50051."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SEPP_")}
    server = ServerProcess(*_quick_start_server_args(), "--port", "0", env=env, cwd=tmp_path)
    server.start()
    try:
        yield server
    finally:
        server.stop()


def _script(tmp_path: Path, name: str, server: ServerProcess, *, last_line: str = "") -> Path:
    """The README's ``# name`` block as a file, talking to ``server``."""
    source = file_block(name)
    assert source.count(QUICK_START_ADDRESS) == 1, name
    source = source.replace(QUICK_START_ADDRESS, server.address)
    if last_line:
        # The last line is the guarded ``anyio.run(...)``: replaced at its indentation.
        *body, last = source.rstrip("\n").split("\n")
        indent = last[: len(last) - len(last.lstrip())]
        source = "\n".join([*body, indent + last_line, ""])
    path = tmp_path / name
    path.write_text(source)
    return path


@pytest.mark.parametrize(
    ("last_line", "signum", "backend"),
    [
        ("", signal.SIGINT, "trio"),  # as shown: Ctrl-C
        ("anyio.run(main)", signal.SIGTERM, "asyncio"),  # "only the last line changes"
    ],
    ids=["trio-SIGINT", "asyncio-SIGTERM"],
)
def test_the_quick_start_runs(
    quick_start_server: ServerProcess,
    tmp_path: Path,
    last_line: str,
    signum: signal.Signals,
    backend: str,
) -> None:
    server = quick_start_server
    info = with_client(server.address, lambda client: client.server_info())
    assert info.dead_letter_retention_enabled  # so `dlq drain` has something to show
    # The typed task both scripts import, beside them.
    (tmp_path / "tasks.py").write_text(file_block("tasks.py"))
    producer = _script(tmp_path, "producer.py", server)
    produced = subprocess.run(
        [sys.executable, str(producer)],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        cwd=tmp_path,
        stdin=subprocess.DEVNULL,
        check=False,
    )
    assert produced.returncode == 0, produced.stdout + produced.stderr
    enqueued = re.findall(r"^enqueued (\S+)", produced.stdout, flags=re.MULTILINE)
    assert len(enqueued) == 4, produced.stdout  # 1 send_welcome and 3 digests

    worker = _script(tmp_path, "worker.py", server, last_line=last_line)
    with CliProcess([sys.executable, str(worker)], cwd=tmp_path) as process:
        # Every job the producer enqueued is handled by the worker.
        process.wait_for(r"^welcome, user 42 \(attempt 1/3\)$", timeout=TIMEOUT)
        process.wait_for(r"^digest \S+ sent$", count=3, timeout=TIMEOUT)
        process.signal(signum)
        assert process.wait(TIMEOUT) == 0, process.output
    output = process.output
    assert "Traceback" not in output, output
    assert f"{signum.name}: draining" in output, output
    assert "processed=4, nacked_retry=0, nacked_dead_letter=0" in output, output
    assert sorted(re.findall(r"^digest (\S+) sent$", output, flags=re.MULTILINE)) == sorted(
        enqueued[1:]
    )

    async def left(client: sepp.Client) -> list[sepp.Job]:
        return await client.reserve(["emails"], lease=5.0, wait=0.2, max_jobs=10)

    assert with_client(server.address, left) == []  # all acked


def _readme_worker_module() -> dict[str, Any]:
    """The README's worker.py imported as a module (its ``__main__`` guard keeps its
    ``anyio.run`` from running)."""
    body = file_block("worker.py")
    namespace: dict[str, Any] = {"__name__": "readme_worker"}
    # Its ``from tasks import ...``: the README's tasks.py, as a module for the moment.
    tasks = types.ModuleType("tasks")
    exec(compile(file_block("tasks.py"), "README.md tasks.py", "exec"), tasks.__dict__)
    saved = sys.modules.get("tasks")
    sys.modules["tasks"] = tasks
    try:
        exec(compile(body, "README.md worker.py", "exec"), namespace)
    finally:
        if saved is None:
            del sys.modules["tasks"]
        else:
            sys.modules["tasks"] = saved
    return namespace


@pytest.mark.anyio
async def test_the_quick_start_worker_drains_then_cancels_on_a_second_signal(
    capsys: pytest.CaptureFixture[str],
) -> None:
    stop_on_signals = _readme_worker_module()["stop_on_signals"]
    started = anyio.Event()

    async def hangs(payload: sepp.Payload | None, ctx: sepp.JobCtx) -> None:
        started.set()
        await anyio.sleep_forever()

    async with open_in_memory_client() as (client, _engine):
        ack = await client.enqueue(sepp.EnqueueRequest("emails", "hangs"))
        worker = sepp.Worker(client, ["emails"], lease=30.0)
        worker.handle("hangs", hangs)
        with anyio.fail_after(TIMEOUT):
            # As the README's main() does it.
            async with anyio.create_task_group() as tg:
                await tg.start(stop_on_signals, worker)

                async def run() -> None:
                    await worker.run()
                    tg.cancel_scope.cancel()

                tg.start_soon(run)
                await started.wait()
                # Two different signals: a receiver may coalesce repeats of one signal.
                os.kill(os.getpid(), signal.SIGTERM)
                os.kill(os.getpid(), signal.SIGINT)
        stats = worker.statistics()
        assert (stats.processed, stats.nacked_retry, stats.lease_lost) == (0, 1, 0)
        # Nacked for an immediate retry: reservable again at once, as attempt 2.
        (again,) = await client.reserve(["emails"], lease=5.0, wait=1.0)
        assert (again.ctx.id, again.ctx.attempt) == (ack.job_id, 2)
    out = capsys.readouterr().out
    assert ": draining (again to cancel the jobs)" in out
    assert "cancelling the jobs in flight" in out
