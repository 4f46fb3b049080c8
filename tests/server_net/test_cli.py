"""``python -m sepp_anyio.server``: flags, config errors, env overrides, signals.

Each test that needs a running server starts a subprocess (``ServerProcess`` waits for the
listening line); bad invocations are run to completion with ``subprocess.run``.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import anyio
import anyio.to_thread
import pytest

import sepp_anyio as sepp
from sepp_anyio._cli._server import _resolve, build_parser, main
from sepp_anyio.server import ServerProcess, ServerSection

pytestmark = pytest.mark.anyio

_RUN_TIMEOUT = 30


def _run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sepp_anyio.server", *args],
        capture_output=True,
        text=True,
        timeout=_RUN_TIMEOUT,
        env=env,
        stdin=subprocess.DEVNULL,
        check=False,
    )


def test_help() -> None:
    result = _run("--help")
    assert result.returncode == 0
    for flag in ("--host", "--port", "--db", "--memory", "--config", "--api-key", "--tls-cert"):
        assert flag in result.stdout
    assert result.stdout.startswith("usage: python -m sepp_anyio.server")


def test_main_is_callable_for_delegation(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--help"], prog="sepp-anyio server") == 0
    assert capsys.readouterr().out.startswith("usage: sepp-anyio server")
    assert main(["--db", "x", "--memory"]) == 2
    assert "not allowed with argument" in capsys.readouterr().err
    assert build_parser().parse_args(["--port", "0"]).port == 0


async def test_listening_line_has_the_real_port() -> None:
    server = ServerProcess("--memory", "--port", "0")
    await anyio.to_thread.run_sync(server.start)
    try:
        assert server.port > 0
        lines = [line for line in server.output.splitlines() if "listening" in line]
        assert len(lines) == 1
        assert lines[0].endswith(f"queue server listening on 127.0.0.1:{server.port}")
        async with sepp.connect(server.address) as client:
            await client.server_info()
    finally:
        await anyio.to_thread.run_sync(server.stop)


@pytest.mark.parametrize("level", ["ERROR", "warning"])
def test_listening_line_is_printed_at_any_log_level(level: str) -> None:
    with ServerProcess("--memory", "--port", "0", "--log-level", level) as server:
        assert server.port > 0


@pytest.mark.parametrize(
    ("toml", "key"),
    [
        ("[limits]\nmax_payload_bytes = 'big'\n", "limits.max_payload_bytes"),
        ("[limits]\nno_such_limit = 1\n", "limits.no_such_limit"),
        ("[[queues]]\nname = 'a/b'\n", "queues[0].name"),
        ("[auth]\napi_keys = ['has space']\n", "auth.api_keys[0]"),
        ("not toml at all [", "config"),
    ],
)
def test_bad_config_names_the_key_and_exits_2(tmp_path: Path, toml: str, key: str) -> None:
    path = tmp_path / "sepp.toml"
    path.write_text(toml)
    result = _run("--memory", "--port", "0", "--config", str(path))
    assert result.returncode == 2, result.stderr
    assert f"error: {key} " in result.stderr
    assert "listening" not in result.stderr


def test_bad_env_override_names_the_key() -> None:
    env = {**os.environ, "SEPP_STORAGE__DEAD_LETTER_RETENTION_MS": "-5"}
    result = _run("--memory", "--port", "0", env=env)
    assert result.returncode == 2
    assert "storage.dead_letter_retention_ms must be >= 0" in result.stderr


def test_missing_config_file_exits_2(tmp_path: Path) -> None:
    result = _run("--memory", "--config", str(tmp_path / "absent.toml"))
    assert result.returncode == 2
    assert "config file not found" in result.stderr


@pytest.mark.parametrize(
    "args",
    [["--db", "x.sqlite3", "--memory"], ["--port", "70000"], ["--tls-cert", "c.pem"]],
)
def test_bad_flags_exit_2(args: list[str]) -> None:
    result = _run(*args)
    assert result.returncode == 2
    assert "error:" in result.stderr


def test_unusable_database_exits_1(tmp_path: Path) -> None:
    result = _run("--port", "0", "--db", str(tmp_path / "no" / "such" / "dir.sqlite3"))
    assert result.returncode == 1
    assert "unable to open database file" in result.stderr


async def test_env_override_applies() -> None:
    env = {**os.environ, "SEPP_LIMITS__MAX_PAYLOAD_BYTES": "10"}
    server = ServerProcess("--memory", "--port", "0", env=env)
    await anyio.to_thread.run_sync(server.start)
    try:
        async with sepp.connect(server.address) as client:
            (result,) = await client.enqueue_batch(
                [sepp.EnqueueRequest("cli-env", "t", payload=sepp.Payload(b"x" * 20, "a/b"))]
            )
            assert result == sepp.PayloadTooLarge(limit=10, actual=20)
            assert (await client.server_info()).max_payload_bytes == 10
    finally:
        await anyio.to_thread.run_sync(server.stop)


async def test_config_file_and_api_key_flag(tmp_path: Path) -> None:
    path = tmp_path / "sepp.toml"
    path.write_text("[auth]\napi_keys = ['from-file']\n[server]\nstrict_queues = true\n")
    server = ServerProcess("--memory", "--port", "0", "--config", str(path), "--api-key", "flag")
    await anyio.to_thread.run_sync(server.start)
    try:
        assert "TLS is off" in server.output
        async with sepp.connect(server.address, api_key="from-file") as client:
            with pytest.raises(sepp.UnauthenticatedError):
                await client.server_info()
        async with sepp.connect(server.address, api_key="flag") as client:
            assert (await client.server_info()).strict_queues is True
    finally:
        await anyio.to_thread.run_sync(server.stop)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
async def test_signal_stops_gracefully_with_exit_0(signum: signal.Signals) -> None:
    server = ServerProcess("--memory", "--port", "0")
    await anyio.to_thread.run_sync(server.start)
    try:
        async with sepp.connect(server.address) as client:
            result: list[sepp.Job] | None = None

            async def park() -> None:
                nonlocal result
                result = await client.reserve(["cli-signal"], lease=5.0, wait=30.0)

            async with anyio.create_task_group() as tg:
                tg.start_soon(park)
                # The reserve is on the wire once its task blocks.  A later call on the same
                # connection being answered then shows the server has started handling the
                # reserve (grpclib starts handlers in stream order), so the stop waits for it.
                await anyio.wait_all_tasks_blocked()
                await client.server_info()
                os.kill(server.pid, signum)
                status = await anyio.to_thread.run_sync(lambda: server.wait(10))
            assert result == []
        assert status == 0
        assert re.search(rf"{signum.name} received; shutting down", server.output)
    finally:
        await anyio.to_thread.run_sync(server.stop)


@pytest.mark.parametrize(
    ("args", "enabled"),
    [
        ((), False),  # the default, as the real server: dead letters are deleted
        (("--dead-letter-retention", "86400"), True),
        (("--dead-letter-retention", "0.5"), True),
        (("--dead-letter-retention", "0"), False),
    ],
)
async def test_dead_letter_retention_flag(
    tmp_path: Path, args: tuple[str, ...], enabled: bool
) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SEPP_")}
    server = ServerProcess("--memory", "--port", "0", *args, env=env, cwd=tmp_path)
    await anyio.to_thread.run_sync(server.start)
    try:
        assert ("dead letters: kept" in server.output) is enabled
        async with sepp.connect(server.address) as client:
            assert (await client.server_info()).dead_letter_retention_enabled is enabled
            await client.enqueue(sepp.EnqueueRequest("cli-dlq", "t"))
            (job,) = await client.reserve(["cli-dlq"], lease=5.0, wait=1.0)
            assert await client.nack(job.ctx, sepp.RetryDirective.dead_letter(), "no")
            drained = await client.drain_dead_letters("cli-dlq", max=10)
            assert [record.job_id for record in drained] == ([job.ctx.id] if enabled else [])
    finally:
        await anyio.to_thread.run_sync(server.stop)


async def test_dead_letter_retention_flag_overrides_the_config(tmp_path: Path) -> None:
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("SEPP_")},
        "SEPP_STORAGE__DEAD_LETTER_RETENTION_MS": "60000",
    }
    args = ("--memory", "--port", "0", "--dead-letter-retention", "0")
    server = ServerProcess(*args, env=env, cwd=tmp_path)
    await anyio.to_thread.run_sync(server.start)
    try:
        async with sepp.connect(server.address) as client:
            assert (await client.server_info()).dead_letter_retention_enabled is False
    finally:
        await anyio.to_thread.run_sync(server.stop)


@pytest.mark.parametrize(
    ("value", "needle"),
    [
        ("-1", "must be a finite number of seconds >= 0"),
        ("inf", "must be a finite number of seconds >= 0"),
        ("nan", "must be a finite number of seconds >= 0"),
        ("soon", "not a number of seconds"),
        ("0.0001", "must be 0 (off) or at least 0.001 s"),
        ("1e300", "must be at most"),
    ],
)
def test_bad_dead_letter_retention_exits_2(value: str, needle: str) -> None:
    result = _run("--memory", "--port", "0", f"--dead-letter-retention={value}")
    assert result.returncode == 2, result.stderr
    assert f"argument --dead-letter-retention: {needle}" in result.stderr
    assert "listening" not in result.stderr


@pytest.mark.parametrize("value", ["inf", "nan", "-1", "soon"])
def test_shutdown_grace_must_be_finite_seconds(
    value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--shutdown-grace`` takes the seconds every command takes (``_cli._common``): an
    infinite grace would make the bounded stop unbounded."""
    with pytest.raises(SystemExit) as raised:
        build_parser().parse_args(["--memory", f"--shutdown-grace={value}"])
    assert raised.value.code == 2
    assert "argument --shutdown-grace: " in capsys.readouterr().err


def test_port_in_use_is_one_line_naming_the_address_and_port_option(tmp_path: Path) -> None:
    with ServerProcess("--memory", "--port", "0", cwd=tmp_path) as first:
        result = _run("--memory", "--port", str(first.port), "--log-level", "WARNING")
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr
    (line,) = result.stderr.splitlines()
    assert line.startswith(
        f"python -m sepp_anyio.server: error: the server cannot run: cannot listen on "
        f"127.0.0.1:{first.port}: the address is already in use"
    ), line
    assert "--port PORT" in line and "--port 0" in line


# --------------------------------------------------------------------------- connections


def _server_section(*args: str, env: dict[str, str] | None = None) -> ServerSection:
    """The ``[server]`` section the command line would run with (no config file: the
    tests run in an empty directory)."""
    parsed = build_parser().parse_args(["--memory", *args])
    return _resolve(parsed, env or {}).config.server


def test_connection_flags_default_to_the_config_keys(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # no ./sepp.toml
    section = _server_section()
    assert section == ServerSection()
    assert (
        section.handshake_timeout_ms,
        section.idle_timeout_ms,
        section.max_connections,
        section.max_connections_per_ip,
        section.evict_when_full,
    ) == (5_000, 300_000, 1024, 128, True)
    env = {
        "SEPP_SERVER__HANDSHAKE_TIMEOUT_MS": "7000",
        "SEPP_SERVER__EVICT_WHEN_FULL": "false",
    }
    from_env = _server_section(env=env)
    assert (from_env.handshake_timeout_ms, from_env.evict_when_full) == (7000, False)


def test_connection_flags_replace_the_config_keys(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # no ./sepp.toml
    env = {"SEPP_SERVER__HANDSHAKE_TIMEOUT_MS": "7000", "SEPP_SERVER__EVICT_WHEN_FULL": "false"}
    section = _server_section(
        "--handshake-timeout",
        "2.5",
        "--idle-timeout",
        "0",
        "--max-connections",
        "10",
        "--max-connections-per-ip",
        "3",
        "--evict-when-full",
        env=env,
    )
    assert (
        section.handshake_timeout_ms,
        section.idle_timeout_ms,
        section.max_connections,
        section.max_connections_per_ip,
        section.evict_when_full,
    ) == (2_500, 0, 10, 3, True)
    assert _server_section("--no-evict-when-full").evict_when_full is False


@pytest.mark.parametrize(
    ("flag", "value", "needle"),
    [
        ("--handshake-timeout", "0", "must be at least 0.001 s"),
        ("--handshake-timeout", "-1", "must be a finite number of seconds >= 0"),
        ("--handshake-timeout", "soon", "not a number of seconds"),
        ("--idle-timeout", "inf", "must be a finite number of seconds >= 0"),
        ("--idle-timeout", "0.0001", "must be 0 (off) or at least 0.001 s"),
        ("--max-connections", "0", "must be at least 1"),
        ("--max-connections-per-ip", "many", "not a whole number"),
    ],
)
def test_bad_connection_flags_exit_2_naming_the_option(flag: str, value: str, needle: str) -> None:
    result = _run("--memory", "--port", "0", f"{flag}={value}")
    assert result.returncode == 2, result.stderr
    assert f"argument {flag}: {needle}" in result.stderr
    assert "listening" not in result.stderr


@pytest.mark.parametrize("evict", [True, False])
async def test_eviction_flags_reach_the_server(evict: bool) -> None:
    """``--max-connections-per-ip 1``: a second connection evicts the first (GOAWAY
    ``evicted``), or with ``--no-evict-when-full`` is closed at once."""
    from hyperframe.frame import GoAwayFrame, SettingsFrame

    from tests.server_hostile._harness import Attacker

    flags = ["--max-connections-per-ip", "1"] + ([] if evict else ["--no-evict-when-full"])
    server = ServerProcess("--memory", "--port", "0", *flags)
    await anyio.to_thread.run_sync(server.start)
    try:
        async with Attacker.connect(server.port) as first:
            with anyio.fail_after(10):
                while not any(
                    isinstance(f, SettingsFrame) and "ACK" in f.flags for f in first.frames
                ):
                    assert await first.read(1.0)
            async with Attacker.connect(server.port) as second:
                with anyio.fail_after(10):
                    closed, served = (first, second) if evict else (second, first)
                    while not closed.eof:
                        await closed.read(1.0)
                    assert not served.eof
                    while evict and not served.frames:
                        assert await served.read(1.0)
        goaways = [bytes(f.additional_data) for f in first.frames if isinstance(f, GoAwayFrame)]
        assert goaways == ([b"evicted"] if evict else [])
        assert bool(second.frames) is evict
    finally:
        await anyio.to_thread.run_sync(server.stop)
