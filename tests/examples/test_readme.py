"""README.md stays true: CI runs its test command, its Python blocks compile, the Quick
start's server, producer and worker run as shown (the worker through ``sepp-anyio worker``,
stopped by a signal, its job handled), it stays a landing page whose links hold, and the
examples' own README lists every example."""

from __future__ import annotations

import ast
import os
import re
import shlex
import signal
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest
from packaging.requirements import Requirement

import sepp_anyio as sepp
from sepp_anyio.server import ServerProcess
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


@pytest.mark.parametrize("name", ["tasks.py", "producer.py", "worker.py"])
def test_the_quick_start_scripts_start_no_loop_when_imported(name: str) -> None:
    """``sepp-anyio worker worker:make_worker`` imports the Quick start's worker.py: a
    module that ran ``anyio.run`` at import would start a second worker beside the
    command's.  No statement at module level runs a loop, except under
    ``if __name__ == "__main__":`` (producer.py's ``anyio.run``)."""
    tree = ast.parse(file_block(name))
    guarded = [
        node
        for node in tree.body
        if isinstance(node, ast.If) and ast.unparse(node.test) == "__name__ == '__main__'"
    ]
    calls = [
        ast.unparse(call.func)
        for node in tree.body
        if node not in guarded and not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        for call in ast.walk(node)
        if isinstance(call, ast.Call)
    ]
    assert not [call for call in calls if call.endswith("run")], calls
    if name == "producer.py":
        (guard,) = guarded
        assert "anyio.run(main)" in ast.unparse(guard)


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


def test_every_relative_link_names_a_file() -> None:
    """The README is a landing page: the rest is a link away, and every link holds."""
    links = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", README)
    relative = [link for link in links if "://" not in link]
    assert len(relative) >= 10, relative
    for link in relative:
        assert (ROOT / link).is_file(), link


def test_the_readme_stays_a_landing_page() -> None:
    """What it is, the two commands, the Quick start, how to depend on it, and links: the
    reference, the benchmarks and the deployment guides live in the docs."""
    assert len(README.splitlines()) <= 250
    titles = re.findall(r"^## (.+)$", README, flags=re.MULTILINE)
    assert titles == [
        "Two commands",
        "Quick start",
        "Depending on sepp-anyio from your own project",
        "Documentation",
    ]


def test_every_example_is_listed() -> None:
    listing = (ROOT / "examples" / "README.md").read_text()
    for path in sorted((ROOT / "examples").glob("*.py")):
        assert f"| `{path.name}` |" in listing, path.name


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


def _script(tmp_path: Path, name: str, server: ServerProcess) -> Path:
    """The README's ``# name`` block as a file, talking to ``server``."""
    source = file_block(name)
    assert source.count(QUICK_START_ADDRESS) == 1, name
    path = tmp_path / name
    path.write_text(source.replace(QUICK_START_ADDRESS, server.address))
    return path


def _quick_start_commands() -> list[list[str]]:
    """The Quick start's "second terminal" commands."""
    (block,) = [b for b in _blocks("sh", _section("Quick start")) if "producer.py" in b]
    return [shlex.split(line) for line in block.strip().splitlines()]


@pytest.mark.parametrize(
    ("backend", "signum"),
    [("trio", signal.SIGINT), ("asyncio", signal.SIGTERM)],
    ids=["trio-SIGINT", "asyncio-SIGTERM"],
)
def test_the_quick_start_runs(
    quick_start_server: ServerProcess,
    tmp_path: Path,
    backend: str,
    signum: signal.Signals,
) -> None:
    """The producer enqueues the job; ``sepp-anyio worker worker:make_worker`` (as shown,
    on trio; and on asyncio) handles it, drains on the signal and exits 0."""
    server = quick_start_server
    (tmp_path / "tasks.py").write_text(file_block("tasks.py"))
    producer = _script(tmp_path, "producer.py", server)
    (tmp_path / "worker.py").write_text(file_block("worker.py"))
    produce, work = _quick_start_commands()
    assert produce == ["python", "producer.py"]
    assert work == ["sepp-anyio", "worker", "worker:make_worker", "--backend", "trio"]
    outputs = []
    for _ in range(2):  # the second run is deduplicated by the idempotency key
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
        outputs.append(produced.stdout)
    (job_id,) = re.findall(r"^enqueued (\S+) $", outputs[0], flags=re.MULTILINE)
    assert re.findall(r"^enqueued (\S+) \(again\)$", outputs[1], flags=re.MULTILINE) == [job_id]

    argv = [sys.executable, "-m", "sepp_anyio", *work[1:-1], backend, "--address", server.address]
    with CliProcess(argv, cwd=tmp_path) as process:
        process.wait_for(r"welcome, user 42 \(attempt 1/3\)", timeout=TIMEOUT)
        process.signal(signum)
        assert process.wait(TIMEOUT) == 0, process.output
    assert "Traceback" not in process.output, process.output

    async def left(client: sepp.Client) -> list[sepp.Job]:
        return await client.reserve(["emails"], lease=5.0, wait=0.2, max_jobs=10)

    assert with_client(server.address, left) == []  # acked, and enqueued only once
