"""What importing TARGET can go wrong with, as ``sepp-anyio worker`` and ``cron`` report it.

* A module that starts an event loop when imported (a ``worker.py`` ending in
  ``anyio.run(main)`` with no ``if __name__ == "__main__":`` guard, as the README's Quick
  start once did) used to run its own worker from inside the command's import, silently,
  with its own settings. The command imports TARGET inside its own event loop, where
  that call fails at once: it says so in one line, status 2, on both backends.
* The library refusing something the module or its factory gave it (a handler that is no
  function, a cron expression out of range, a typed task's handler of one parameter, a
  queue name with '/') is one line naming the place, status 2, not a traceback.

Real subprocesses; the module's own program would connect to a port nothing listens on,
so no test here can hang on it.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from sepp_anyio.server import ServerProcess

from ._util import assert_one_line_error, closed_port, run_cli

BACKENDS = ["asyncio", "trio"]

LOOP_JOBS = """
import asyncio
import os

import anyio

import sepp_anyio as sepp


async def work(payload, ctx):
    return None


def make_worker(client):
    return sepp.Worker(client, ["emails"]).handle("work", work)


crons = []


async def main():
    async with sepp.connect(os.environ["TEST_ADDR"]) as client:
        await make_worker(client).run()


RUN = os.environ["TEST_RUN"]
if RUN == "anyio-asyncio":
    anyio.run(main)  # call: anyio-asyncio
elif RUN == "anyio-trio":
    anyio.run(main, backend="trio")  # call: anyio-trio
elif RUN == "asyncio":
    asyncio.run(main())  # call: asyncio
elif RUN == "trio":
    import trio

    trio.run(main)  # call: trio
"""

GUARDED_JOBS = LOOP_JOBS.replace(
    'RUN = os.environ["TEST_RUN"]',
    'if __name__ == "__main__":\n    RUN = "anyio-asyncio"\nelse:\n    RUN = ""',
)

REFUSED = """
import os

import sepp_anyio as sepp


async def work(payload, ctx):
    return None


class Tick:
    job_type = "tick"

    def request(self, value, *, scheduled_at, idempotency_key):
        return sepp.EnqueueRequest("ticks", "tick", scheduled_at=scheduled_at,
                                   idempotency_key=idempotency_key)


not_callable = {"work": 42}

if os.environ.get("TEST_BAD_CRON"):
    crons = [sepp.Cron("61 * * * *", Tick(), lambda slot: {})]  # the bad cron

welcome = sepp.Task("emails", "welcome", dict)


async def one_parameter(value):
    return None


def typed_factory(client):
    worker = sepp.Worker(client, ["emails"])
    worker.task(welcome)(one_parameter)  # the bad handler
    return worker


def slash_factory(client):
    return sepp.Worker(client, ["emails/eu"])  # the bad queue
"""


@pytest.fixture
def module_dir(tmp_path: Path) -> Path:
    (tmp_path / "loop_jobs.py").write_text(LOOP_JOBS)
    (tmp_path / "guarded_jobs.py").write_text(GUARDED_JOBS)
    (tmp_path / "refused_jobs.py").write_text(REFUSED)
    return tmp_path


def _line_of(source: str, marker: str) -> int:
    """The line number of the line of ``source`` holding ``marker``."""
    return next(n for n, line in enumerate(source.splitlines(), 1) if marker in line)


CASES = [
    # anyio refuses to start a loop in a thread running one, whichever the two backends.
    ("asyncio", "anyio-asyncio"),
    ("asyncio", "anyio-trio"),
    ("trio", "anyio-asyncio"),
    ("trio", "anyio-trio"),
    # asyncio and trio refuse a second loop of their own kind.
    ("asyncio", "asyncio"),
    ("trio", "trio"),
]


@pytest.mark.parametrize(("backend", "run"), CASES)
@pytest.mark.parametrize("command", ["worker", "cron"])
def test_a_module_that_starts_an_event_loop_at_import_is_refused(
    module_dir: Path, backend: str, run: str, command: str
) -> None:
    target = "loop_jobs:make_worker" if command == "worker" else "loop_jobs:crons"
    result = run_cli(
        command,
        target,
        "--path",
        str(module_dir),
        "--backend",
        backend,
        env={"TEST_RUN": run, "TEST_ADDR": f"127.0.0.1:{closed_port()}"},
    )
    where = f"{module_dir / 'loop_jobs.py'}, line {_line_of(LOOP_JOBS, f'# call: {run}')}"
    line = assert_one_line_error(
        result,
        2,
        f"TARGET {target!r}: importing 'loop_jobs' starts an event loop ({where}:",
        "if __name__ == '__main__':",
    )
    assert "could not connect" not in line  # the module's own program never ran


def test_a_guarded_module_runs_as_the_commands_worker(
    server: ServerProcess, module_dir: Path
) -> None:
    result = run_cli(
        "worker",
        "guarded_jobs:make_worker",
        "--path",
        str(module_dir),
        "--address",
        server.address,
        "--burst",
        env={"TEST_ADDR": f"127.0.0.1:{closed_port()}"},
    )
    assert result.returncode == 0, result.stderr
    assert re.search(r"ready: worker \S+ reserving from emails", result.stderr), result.stderr


def test_a_registry_entry_that_is_not_callable_is_one_line(module_dir: Path) -> None:
    result = run_cli("worker", "refused_jobs:not_callable", "-q", "q", "--path", str(module_dir))
    assert_one_line_error(result, 2, "TARGET 'refused_jobs:not_callable': ", "job type 'work'")


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_cron_the_library_refuses_at_import_is_one_line_naming_the_place(
    module_dir: Path, backend: str
) -> None:
    """It was a traceback and status 1 (which a supervisor restarts for ever)."""
    result = run_cli(
        "cron",
        "refused_jobs:crons",
        "--path",
        str(module_dir),
        "--backend",
        backend,
        "--address",
        f"127.0.0.1:{closed_port()}",
        env={"TEST_BAD_CRON": "1"},
    )
    where = f"{module_dir / 'refused_jobs.py'}, line {_line_of(REFUSED, '# the bad cron')}"
    assert_one_line_error(
        result,
        2,
        "TARGET 'refused_jobs:crons': importing 'refused_jobs' failed:",
        "61 * * * *",
        f"({where})",
    )


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(
    ("factory", "marker", "needle"),
    [
        # Was a traceback (a plain TypeError out of the user's factory).
        ("typed_factory", "# the bad handler", "one_parameter"),
        # Was status 1, "InvalidArgumentError: queues[0] must not contain '/'", no place.
        ("slash_factory", "# the bad queue", "queues[0] must not contain '/'"),
    ],
)
def test_an_argument_a_factory_passes_the_library_is_one_line_naming_the_place(
    server: ServerProcess,
    module_dir: Path,
    backend: str,
    factory: str,
    marker: str,
    needle: str,
) -> None:
    result = run_cli(
        "worker",
        f"refused_jobs:{factory}",
        "--path",
        str(module_dir),
        "--address",
        server.address,
        "--backend",
        backend,
        "--log-level",
        "WARNING",
    )
    where = f"{module_dir / 'refused_jobs.py'}, line {_line_of(REFUSED, marker)}"
    assert_one_line_error(
        result, 2, f"TARGET 'refused_jobs:{factory}': the factory failed:", needle, f"({where})"
    )
