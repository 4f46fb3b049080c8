"""``ServerProcess``: the reference server's command line in a subprocess.

It only spawns ``python -m sepp_anyio.server`` and reads the child's stderr, so it needs
nothing of the command line's code (``sepp_anyio._cli._server``) and stays importable from
``sepp_anyio.server`` (a tier below ``_cli``).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from types import TracebackType
from typing import Self, final

__all__ = ["ServerProcess"]

_LISTENING = re.compile(
    r"queue server listening on (?:\[(?P<v6>[^\]]+)\]|(?P<host>[^\s:]+)):(?P<port>\d+)"
)


@final
class ServerProcess:
    """This command line in a subprocess, for tests, benchmarks and scripts.

    ::

        with ServerProcess("--memory", "--port", "0") as server:
            async with sepp_anyio.connect(server.address) as client: ...

    Args:
        args: command-line arguments (give ``--port 0`` for a free port).
        env: the child's environment (default: this process's).
        python: the interpreter (default: this one).
        cwd: the child's working directory (default: this one); it decides whether a
            ``./sepp.toml`` is read and where relative paths point.

    :meth:`start` returns once the child has logged its listening line (its stderr is read
    by a thread and kept in :attr:`output`).  :meth:`stop` sends SIGTERM (a graceful stop)
    and returns the exit status; :meth:`kill` sends SIGKILL.  All methods block: from an
    event loop call them through ``anyio.to_thread.run_sync``.
    """

    def __init__(
        self,
        *args: str,
        env: Mapping[str, str] | None = None,
        python: str = sys.executable,
        cwd: str | os.PathLike[str] | None = None,
    ) -> None:
        self.args = list(args)
        self.env = dict(os.environ if env is None else env)
        self.python = python
        self.cwd = cwd
        self.process: subprocess.Popen[bytes] | None = None
        self.host = ""
        self.port = 0
        self._lines: list[str] = []
        self._changed = threading.Condition()
        self._reader: threading.Thread | None = None

    @property
    def address(self) -> str:
        """``host:port`` of the listening server."""
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"

    @property
    def pid(self) -> int:
        if self.process is None:
            raise RuntimeError("the server process is not running")
        return self.process.pid

    @property
    def output(self) -> str:
        """Everything the child wrote to stderr so far."""
        with self._changed:
            return "".join(self._lines)

    def start(self, timeout: float = 30.0) -> None:
        """Start the child; return once it listens.

        Raises:
            RuntimeError: it exited first, or did not listen within ``timeout`` seconds (the
                message has its output).
        """
        if self.process is not None:
            raise RuntimeError("the server process is already running")
        with self._changed:
            self._lines.clear()
        self.process = subprocess.Popen(
            [self.python, "-m", "sepp_anyio.server", *self.args],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            env=self.env,
            cwd=self.cwd,
        )
        self._reader = threading.Thread(
            target=self._read, args=(self.process,), name="sepp-server-stderr", daemon=True
        )
        self._reader.start()
        try:
            line = self.wait_for_line(_LISTENING.pattern, timeout)
        except BaseException:
            self.kill()
            raise
        match = _LISTENING.search(line)
        assert match is not None
        self.host = match["v6"] or match["host"]
        self.port = int(match["port"])

    def wait_for_line(self, pattern: str, timeout: float = 30.0) -> str:
        """Block until a line of stderr matches the regular expression; return it.

        Raises:
            RuntimeError: the child exited first, or ``timeout`` seconds passed.
        """
        regex = re.compile(pattern)
        deadline = time.monotonic() + timeout
        seen = 0
        with self._changed:
            while True:
                for line in self._lines[seen:]:
                    if regex.search(line):
                        return line
                seen = len(self._lines)
                reader = self._reader
                if reader is None or not reader.is_alive():
                    raise RuntimeError(
                        f"the server process ended without logging /{pattern}/; "
                        f"its output:\n{''.join(self._lines)}"
                    )
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise RuntimeError(
                        f"no line matching /{pattern}/ within {timeout} s; "
                        f"output so far:\n{''.join(self._lines)}"
                    )
                self._changed.wait(remaining)

    def _read(self, process: subprocess.Popen[bytes]) -> None:
        assert process.stderr is not None
        try:
            for raw in process.stderr:
                with self._changed:
                    self._lines.append(raw.decode("utf-8", "replace"))
                    self._changed.notify_all()
        finally:
            with self._changed:
                self._changed.notify_all()

    def stop(self, timeout: float = 30.0) -> int:
        """SIGTERM (graceful stop) and wait; SIGKILL after ``timeout`` s.  Returns the status."""
        process = self.process
        if process is None:
            return 0
        if process.poll() is None:
            process.terminate()
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        return self._reap()

    def wait(self, timeout: float | None = None) -> int:
        """Wait for the child to exit by itself; return its status.

        Raises:
            subprocess.TimeoutExpired: still running after ``timeout`` seconds.
        """
        process = self.process
        if process is None:
            return 0
        process.wait(timeout)
        return self._reap()

    def kill(self) -> int:
        """SIGKILL (no shutdown at all) and wait.  Returns the status."""
        process = self.process
        if process is None:
            return 0
        if process.poll() is None:
            process.kill()
        process.wait()
        return self._reap()

    def _reap(self) -> int:
        process, self.process = self.process, None
        assert process is not None
        if self._reader is not None:
            self._reader.join()
            self._reader = None
        if process.stderr is not None:
            process.stderr.close()
        return process.returncode

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
