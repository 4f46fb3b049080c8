"""Helpers of the command-line tests: run ``sepp-anyio`` in subprocesses, read their output
while they run, and talk to the server they talk to."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

import anyio

import sepp_anyio as sepp
from sepp_anyio.server import ServerProcess

__all__ = [
    "CliProcess",
    "assert_one_line_error",
    "closed_port",
    "retention_server",
    "run_cli",
    "run_cli_into_closed_pipe",
    "with_client",
]

T = TypeVar("T")
RUN_TIMEOUT = 30.0
#: Dead letters are kept (the server default is not to), so ``dlq drain`` has records.
RETENTION_ENV = {"SEPP_STORAGE__DEAD_LETTER_RETENTION_MS": "3600000"}


def _env(extra: Mapping[str, str] | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SEPP_")}
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra or {})
    return env


def retention_server(
    cwd: Path, *, log_level: str = "ERROR", retention: bool = True
) -> ServerProcess:
    """A reference server (memory) that keeps dead letters (unless ``retention`` is
    False); the caller starts and stops it."""
    return ServerProcess(
        "--memory",
        "--port",
        "0",
        "--log-level",
        log_level,
        env=_env(RETENTION_ENV if retention else None),
        cwd=cwd,
    )


def run_cli(
    *args: str,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    stdin: bytes | None = None,
    timeout: float = RUN_TIMEOUT,
) -> subprocess.CompletedProcess[str]:
    """``python -m sepp_anyio ARGS`` to completion."""
    result = subprocess.run(
        [sys.executable, "-m", "sepp_anyio", *args],
        input=stdin.decode() if stdin is not None else None,
        stdin=None if stdin is not None else subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=_env(env),
        cwd=cwd,
        check=False,
    )
    return result


def run_cli_into_closed_pipe(
    *args: str,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    timeout: float = RUN_TIMEOUT,
) -> subprocess.CompletedProcess[str]:
    """``python -m sepp_anyio ARGS`` with stdout a pipe nobody reads: its read end is closed
    before the command starts, so its first write to stdout fails (EPIPE), as in
    ``sepp-anyio info | head -1`` once ``head`` has exited. stdout is None."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        return subprocess.run(
            [sys.executable, "-m", "sepp_anyio", *args],
            stdin=subprocess.DEVNULL,
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
            timeout=timeout,
            env=_env(env),
            cwd=cwd,
            check=False,
        )
    finally:
        os.close(write_end)


def assert_one_line_error(
    result: subprocess.CompletedProcess[str], code: int, *needles: str
) -> str:
    """The command failed with ``code`` and one stderr line (no traceback) holding
    ``needles``; returns that line."""
    assert result.returncode == code, (result.returncode, result.stdout, result.stderr)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.stderr
    (line,) = lines
    assert ": error: " in line, line
    for needle in needles:
        assert needle in line, (needle, line)
    return line


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


def with_client(address: str, call: Callable[[sepp.Client], Awaitable[T]]) -> T:
    """Connect to ``address`` and run ``call(client)`` (from a synchronous test)."""

    async def main() -> T:
        async with sepp.connect(address) as client:
            return await call(client)

    return anyio.run(main)


class CliProcess:
    """A command running in the background, its stdout and stderr collected line by line.

    ``wait_for(pattern)`` blocks until a line matches; ``signal``, ``wait`` and ``kill``
    control the process. Use as a context manager: leaving kills it if still running.
    """

    def __init__(
        self,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
    ) -> None:
        self.process = subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=_env(env),
            cwd=cwd,
        )
        self._lines: list[str] = []
        self._changed = threading.Condition()
        self._readers = [
            threading.Thread(target=self._read, args=(stream,), daemon=True)
            for stream in (self.process.stdout, self.process.stderr)
        ]
        for reader in self._readers:
            reader.start()

    @classmethod
    def sepp_anyio(cls, *args: str, **kwargs: Any) -> CliProcess:
        """``python -m sepp_anyio ARGS`` in the background."""
        return cls([sys.executable, "-m", "sepp_anyio", *args], **kwargs)

    def _read(self, stream: Any) -> None:
        for line in stream:
            with self._changed:
                self._lines.append(line)
                self._changed.notify_all()
        with self._changed:
            self._changed.notify_all()

    @property
    def output(self) -> str:
        """Everything written so far (stdout and stderr interleaved by arrival)."""
        with self._changed:
            return "".join(self._lines)

    def count(self, pattern: str) -> int:
        """Lines so far matching ``pattern``."""
        regex = re.compile(pattern)
        with self._changed:
            return sum(1 for line in self._lines if regex.search(line))

    def wait_for(self, pattern: str, *, count: int = 1, timeout: float = RUN_TIMEOUT) -> None:
        """Block until ``count`` lines match ``pattern``."""
        regex = re.compile(pattern)
        deadline = time.monotonic() + timeout
        with self._changed:
            while sum(1 for line in self._lines if regex.search(line)) < count:
                left = deadline - time.monotonic()
                if left <= 0 or (
                    self.process.poll() is not None
                    and not any(reader.is_alive() for reader in self._readers)
                ):
                    raise AssertionError(
                        f"no {count} line(s) matching /{pattern}/; output:\n{''.join(self._lines)}"
                    )
                self._changed.wait(min(left, 0.5))

    def signal(self, signum: signal.Signals = signal.SIGTERM) -> None:
        self.process.send_signal(signum)

    def wait(self, timeout: float = RUN_TIMEOUT) -> int:
        """Wait for the exit; return the status (output fully collected)."""
        code = self.process.wait(timeout)
        for reader in self._readers:
            reader.join(timeout)
        return code

    def __enter__(self) -> CliProcess:
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.wait()
        for stream in (self.process.stdout, self.process.stderr):
            if stream is not None:
                stream.close()
