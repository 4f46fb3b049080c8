"""The ``sepp-anyio`` command's dispatcher (subcommands have their own tests)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from sepp_anyio._cli import main

SUBCOMMANDS = ["demo", "worker", "enqueue", "info", "dlq", "server"]


def test_help_lists_the_subcommands(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--help"])
    assert exited.value.code == 0
    out = capsys.readouterr().out
    for name in SUBCOMMANDS:
        assert f"    {name} " in out, name


@pytest.mark.parametrize(
    "argv", [[name, "--help"] for name in SUBCOMMANDS] + [["dlq", "drain", "-h"]]
)
def test_every_subcommand_has_help(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: sepp-anyio {' '.join(argv[:-1])}")


def test_no_command_prints_help_and_fails(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 2
    assert "COMMAND" in capsys.readouterr().err


def test_unknown_command_is_one_line_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["frobnicate"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    (line,) = captured.err.splitlines()  # no usage line, no traceback
    assert line == (
        "sepp-anyio: error: unknown command 'frobnicate' (commands: demo, worker, cron, enqueue, "
        "info, dlq, server; see 'sepp-anyio --help')"
    )


@pytest.mark.parametrize(
    ("typed", "meant"),
    [("sever", "server"), ("wroker", "worker"), ("enque", "enqueue"), ("dql", "dlq")],
)
def test_unknown_command_suggests_the_nearest(
    typed: str, meant: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([typed]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith(f"sepp-anyio: error: unknown command {typed!r}; did you mean {meant!r}?")
    assert "(commands: demo, worker, cron, enqueue, info, dlq, server;" in line


def test_unknown_option_is_one_line_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--frobnicate"])
    assert exited.value.code == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("sepp-anyio: error: unrecognized arguments: --frobnicate")


@pytest.mark.parametrize(("unbuffered", "status"), [("", 141), ("1", 0)])
def test_help_into_a_closed_stdout_is_quiet(unbuffered: str, status: int) -> None:
    """``sepp-anyio --help | head -0``, through the real script. Buffered, the help fails
    at the dispatcher's flush: 141. Unbuffered, argparse itself ignores the failed write
    (its own choice) and exits 0. Either way: nothing on stderr."""
    script = shutil.which("sepp-anyio", path=str(Path(sys.executable).parent))
    assert script is not None
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        result = subprocess.run(
            [script, "--help"],
            stdout=write_end,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            text=True,
            timeout=30,
            env={**os.environ, "PYTHONUNBUFFERED": unbuffered},
            check=False,
        )
    finally:
        os.close(write_end)
    assert (result.returncode, result.stderr) == (status, "")


def test_server_subcommand_delegates_to_the_server_cli(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["server", "--help"]) == 0
    assert "sepp-anyio server" in capsys.readouterr().out


def test_console_script_and_python_dash_m_run() -> None:
    script = shutil.which("sepp-anyio", path=str(Path(sys.executable).parent))
    assert script is not None, "the console script is installed with the package"
    for command in ([script, "--version"], [sys.executable, "-m", "sepp_anyio", "--version"]):
        out = subprocess.run(command, capture_output=True, text=True, timeout=30, check=True)
        assert out.stdout.startswith("sepp-anyio ")
    for command in ([script, "enqueue", "-h"], [sys.executable, "-m", "sepp_anyio", "info", "-h"]):
        out = subprocess.run(command, capture_output=True, text=True, timeout=30, check=True)
        assert out.stdout.startswith(f"usage: sepp-anyio {command[-2]}")


def test_server_subcommand_serves(tmp_path: Path) -> None:
    script = shutil.which("sepp-anyio", path=str(Path(sys.executable).parent))
    assert script is not None
    process = subprocess.Popen(
        [script, "server", "--memory", "--port", "0"],
        stderr=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
    )
    try:
        assert process.stderr is not None
        for _ in range(50):
            line = process.stderr.readline()
            if "queue server listening on 127.0.0.1:" in line:
                break
        else:
            pytest.fail("no listening line")
    finally:
        process.terminate()
        assert process.wait(timeout=20) == 0
        if process.stderr is not None:
            process.stderr.close()
