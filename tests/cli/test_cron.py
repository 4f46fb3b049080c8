"""``sepp-anyio cron TARGET``: the target contract, the signal, bad input. Real subprocesses
against the reference server on loopback. (Slots themselves are minutes apart in real time;
what the scheduler enqueues is tested on virtual time in tests/cron.)"""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from sepp_anyio.server import ServerProcess

from ._util import CliProcess, assert_one_line_error, run_cli

SCHEDULES = """
import sepp_anyio as sepp


class JsonTask:
    job_type = "tick"
    def request(self, value, *, scheduled_at, idempotency_key):
        return sepp.EnqueueRequest("ticks", "tick", payload=sepp.Payload.from_json(value),
                                   scheduled_at=scheduled_at, idempotency_key=idempotency_key)

one = sepp.Cron("*/5 * * * *", JsonTask(), lambda slot: {"slot": slot.isoformat()})
crons = [one, sepp.Cron("0 7 * * MON", JsonTask(), lambda slot: {}, name="weekly",
                        timezone="Europe/Berlin")]
same_name = [one, sepp.Cron("@daily", JsonTask(), lambda slot: {})]
not_crons = [one, 42]
empty = []
number = 42
"""


@pytest.fixture
def schedules_dir(tmp_path: Path) -> Path:
    (tmp_path / "user_schedules.py").write_text(SCHEDULES)
    return tmp_path


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_cron_runs_until_sigterm_and_exits_0(
    server: ServerProcess, schedules_dir: Path, backend: str
) -> None:
    args = ("cron", "user_schedules:crons", "--path", str(schedules_dir))
    with CliProcess.sepp_anyio(*args, "--address", server.address, "--backend", backend) as process:
        process.wait_for(r"ready: cron scheduler for tick \(\*/5 \* \* \* \*, UTC\), weekly")
        process.signal(signal.SIGTERM)
        assert process.wait() == 0, process.output
    assert "SIGTERM received: cron scheduler stopping" in process.output
    assert "Traceback" not in process.output


@pytest.mark.parametrize(
    ("attribute", "needle"),
    [
        ("same_name", "two crons are named 'tick'"),
        ("not_crons", "item 1 is a int, not a sepp_anyio.Cron"),
        ("empty", "the list of crons is empty"),
        ("number", "is a int, not a sepp_anyio.Cron or a list of them"),
        ("missing", "has no attribute 'missing'"),
    ],
)
def test_bad_targets_are_one_line_and_exit_2(
    schedules_dir: Path, attribute: str, needle: str
) -> None:
    result = run_cli("cron", f"user_schedules:{attribute}", "--path", str(schedules_dir))
    assert_one_line_error(result, 2, needle)


def test_a_file_path_target_names_the_module_to_use(schedules_dir: Path) -> None:
    result = run_cli("cron", "user_schedules.py:crons", "--path", str(schedules_dir))
    assert_one_line_error(result, 2, "use user_schedules:crons")
