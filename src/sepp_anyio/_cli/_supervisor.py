"""``sepp-anyio worker --workers N`` (and ``--max-jobs-per-child``, ``--reload``): a
supervisor of worker processes.

The supervisor runs no worker itself, whatever N (``--workers 1`` is one supervised child,
restarted when it crashes; without ``--workers``, ``--max-jobs-per-child`` and
``--reload`` the command's own process is the worker, unsupervised). It starts N
children, each ``python -m sepp_anyio worker`` with the very same command line (so each
has its own connection and event loop), told apart by the environment variable
:data:`CHILD_ENV` = its number, 1 to N. A child reads it (:func:`child_number`) and then

* uses ``ID-<n>`` as its worker id when ``--worker-id ID`` was given,
* serves its health endpoint on ``PORT + n - 1`` when ``--health-port PORT`` was given
  (``0`` stays 0: each child picks a free port and logs it),
* takes at most K jobs with ``--max-jobs-per-child K`` (``Worker.run(job_limit=K)``), then
  drains and exits 0.

Children are started in sessions of their own, so a Ctrl-C in a terminal reaches the
supervisor only, and every signal a child gets is one the supervisor forwarded:

* first SIGINT/SIGTERM: forwarded to every child (each stops reserving and drains); no
  child is started or restarted from then on;
* second: forwarded again (each cancels its running handlers, nacking their jobs);
* exit status: 0 when every child exited 0 after the signal, otherwise the first non-zero
  status a child exited with after it (in the order they exited; a child killed by a
  signal counts as 128 + its number).

Before any signal, a child that exits is replaced: at once when it exited 0 (it took its
``--max-jobs-per-child`` jobs and drained, or ``--reload`` drained it), after a backoff
when it crashed (0.5 s doubling to 30 s, reset once a child has run for a minute; the
crash is logged, and counts for the exit status only if that child fails again at
shutdown). A child that exits 2 (a usage error: a bad TARGET or option, which a restart
cannot fix) stops the supervisor: the others are drained and it exits 2.

``--reload`` watches ``--path`` (the current directory by default) for changes of Python
files, with watchfiles (``pip install "sepp-anyio[reload]"``); on a change every child is
sent the first-stage signal, drains (no job is cancelled mid-flight), and is replaced by a
new one, which imports the changed code. A child crashed at import (a syntax error being
typed) is restarted by the next change rather than after its backoff.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import signal
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field

import anyio
import anyio.abc

from ._common import EXIT_USAGE, CliError, port_number, positive_int

__all__ = [
    "CHILD_ENV",
    "Supervisor",
    "add_process_options",
    "check_health_host",
    "child_number",
    "supervise",
    "supervisor_gone",
    "wants_supervisor",
]

logger = logging.getLogger("sepp_anyio.supervisor")

#: Set by the supervisor in each child's environment: the child's number, 1 to N.
CHILD_ENV = "SEPP_ANYIO_SUPERVISED_CHILD"

_BACKOFF_FIRST = 0.5
_BACKOFF_MAX = 30.0
#: A child that ran this long before crashing starts the backoff from the beginning.
_BACKOFF_RESET_AFTER = 60.0
_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def add_process_options(parser: argparse.ArgumentParser) -> None:
    """The worker command's process options (health port, supervisor, reload)."""
    group = parser.add_argument_group("processes")
    group.add_argument(
        "--health-port",
        type=port_number,
        metavar="PORT",
        help="serve /livez, /readyz and /metrics on this port (0: any free one; with "
        "--workers N, child n uses PORT + n - 1)",
    )
    group.add_argument(
        "--health-host",
        default="127.0.0.1",
        metavar="HOST",
        help="address of the health endpoint (default: 127.0.0.1; 0.0.0.0 exposes it)",
    )
    group.add_argument(
        "--workers",
        type=positive_int,
        metavar="N",
        help="run N worker processes under a supervisor that forwards signals and "
        "restarts crashed ones (--workers 1: one supervised process; default: this "
        "process is the worker, with no supervisor)",
    )
    group.add_argument(
        "--max-jobs-per-child",
        type=positive_int,
        metavar="K",
        help="a worker process takes at most K jobs, then drains and is replaced "
        "(implies the supervisor)",
    )
    group.add_argument(
        "--reload",
        action="store_true",
        help="development: restart the worker (after draining it) when a Python file "
        "under --path changes (needs watchfiles; implies the supervisor)",
    )


def check_health_host(args: argparse.Namespace) -> None:
    """With ``--health-port``, check that ``--health-host`` is an address to listen on
    (an IP address, or a name that resolves): before connecting, rather than as a
    traceback once the worker runs.

    Raises:
        CliError: status 2, naming the option.
    """
    if args.health_port is None:
        return
    host = args.health_host
    if not host or not host.strip():
        raise CliError("--health-host must not be empty", EXIT_USAGE)
    try:
        socket.getaddrinfo(host, args.health_port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except (OSError, UnicodeError) as exc:
        reason = getattr(exc, "strerror", None) or str(exc)
        raise CliError(
            f"--health-host {host!r} is not an address to listen on ({reason})", EXIT_USAGE
        ) from None


def child_number() -> int | None:
    """This process's number when a supervisor started it, else None."""
    value = os.environ.get(CHILD_ENV)
    if value is None:
        return None
    try:
        number = int(value)
    except ValueError:
        raise CliError(f"${CHILD_ENV} must be a child number, got {value!r}", EXIT_USAGE) from None
    if number < 1:
        raise CliError(f"${CHILD_ENV} must be >= 1, got {number}", EXIT_USAGE)
    return number


async def supervisor_gone() -> None:
    """In a child: return once the supervisor has gone (its end of our stdin closed)."""
    fd = sys.stdin.fileno()
    while True:
        await anyio.wait_readable(fd)
        try:
            data = os.read(fd, 4096)
        except BlockingIOError:  # pragma: no cover (woken without data)
            continue
        if not data:
            return


def wants_supervisor(args: argparse.Namespace) -> bool:
    """Whether the command line asks for a supervisor (and this is not one of its children)."""
    if child_number() is not None:
        return False
    # --workers 1 given explicitly is one supervised child (restarted when it crashes);
    # only without --workers (and the two options below) is the worker this process.
    return bool(args.workers is not None or args.max_jobs_per_child or args.reload)


def _status(returncode: int) -> int:
    """A child's exit status as a shell reports it (killed by signal N: 128 + N)."""
    return 128 - returncode if returncode < 0 else returncode


@dataclass(eq=False)
class _Child:
    number: int
    process: anyio.abc.Process | None = None
    #: Crashes in a row (the exponent of the restart backoff).
    crashes: int = 0
    #: Set to wake a child slot out of its crash backoff (a file changed).
    wake: anyio.Event = field(default_factory=anyio.Event)
    #: The reload generation the current process was started in.
    generation: int = 0


class Supervisor:
    """Keeps ``workers`` children running ``command`` (see the module docs).

    Args:
        command: the child's argv (``python -m sepp_anyio worker ...``).
        workers: how many children.
        reload_paths: directories to watch for ``--reload``; None: no reload.
    """

    def __init__(
        self, command: Sequence[str], workers: int, reload_paths: Sequence[str] | None = None
    ) -> None:
        self.command = list(command)
        self.children = [_Child(n) for n in range(1, workers + 1)]
        self.reload_paths = None if reload_paths is None else list(reload_paths)
        #: Signals received (and forwarded), in order.
        self.signals: list[signal.Signals] = []
        #: Exit statuses of children that ended after the first signal, in exit order.
        self.final: list[int] = []
        self.fatal: int | None = None
        self._generation = 0
        self._stop = anyio.Event()

    def stopping(self) -> bool:
        """Whether a signal (or a fatal child status) has stopped the supervisor."""
        return self._stop.is_set()

    async def run(self) -> int:
        """Run until every child has ended after a signal (or a fatal child status);
        return the exit status."""
        with anyio.open_signal_receiver(*_SIGNALS) as signals:
            async with anyio.create_task_group() as tg:
                tg.start_soon(self._watch_signals, signals)
                if self.reload_paths is not None:
                    await tg.start(self._watch_files)
                async with anyio.create_task_group() as slots:
                    for child in self.children:
                        slots.start_soon(self._keep, child, name=f"sepp child {child.number}")
                tg.cancel_scope.cancel()  # every child has ended: stop watching
        if self.fatal is not None:
            return self.fatal
        return next((status for status in self.final if status != 0), 0)

    # ------------------------------------------------------------ signals

    async def _watch_signals(self, signals: AsyncIterator[signal.Signals]) -> None:
        async for signum in signals:
            sig = signal.Signals(signum)
            self.signals.append(sig)
            stage = "drain" if len(self.signals) == 1 else "cancel their handlers"
            logger.info(
                "supervisor: %s received; forwarding it to the children (%s)", sig.name, stage
            )
            self._stop.set()
            for child in self.children:
                child.wake.set()
                self._send(child, sig)

    def _send(self, child: _Child, sig: signal.Signals) -> None:
        process = child.process
        if process is not None and process.returncode is None:
            # It may have exited in between: its wait() reports that.
            with contextlib.suppress(ProcessLookupError):
                process.send_signal(sig)

    def _stop_all(self, status: int) -> None:
        """A fatal child status: drain the others and exit with it."""
        if self.fatal is None:
            self.fatal = status
        if not self.stopping():
            self.signals.append(signal.SIGTERM)
            self._stop.set()
            for child in self.children:
                child.wake.set()
                self._send(child, signal.SIGTERM)

    # ------------------------------------------------------------ reload

    async def _watch_files(self, *, task_status: anyio.abc.TaskStatus[None]) -> None:
        try:
            from watchfiles import PythonFilter, awatch
        except ImportError:
            raise CliError(
                '--reload needs watchfiles: pip install "sepp-anyio[reload]"', EXIT_USAGE
            ) from None
        paths = self.reload_paths or ["."]
        logger.info("supervisor: watching %s for changes (--reload)", ", ".join(paths))
        task_status.started()
        async for changes in awatch(*paths, watch_filter=PythonFilter()):
            if self.stopping():
                return
            names = sorted({path for _, path in changes})
            logger.info(
                "supervisor: %s changed; draining the worker(s) and starting new ones",
                ", ".join(names[:5]) + (", ..." if len(names) > 5 else ""),
            )
            self._generation += 1
            for child in self.children:
                child.wake.set()
                if child.generation < self._generation:
                    self._send(child, signal.SIGTERM)

    # ------------------------------------------------------------ one child slot

    async def _keep(self, child: _Child) -> None:
        while not self.stopping():
            child.wake = anyio.Event()
            started = anyio.current_time()
            child.generation = self._generation
            env = {**os.environ, CHILD_ENV: str(child.number)}
            # The child's stdin is a pipe nobody writes to: it sees its end when the
            # supervisor is gone, however it went (even SIGKILL), and then drains.
            process = await anyio.open_process(
                self.command,
                stdin=subprocess.PIPE,
                stdout=None,
                stderr=None,
                env=env,
                start_new_session=True,
            )
            child.process = process
            # A signal that came while it was being started: replay it.
            for sig in self.signals:
                self._send(child, sig)
            logger.info("supervisor: started child %d (pid %d)", child.number, process.pid)
            try:
                returncode = await process.wait()
            finally:
                child.process = None
                if process.returncode is None:  # cancelled (never, but bounded if so)
                    with anyio.CancelScope(shield=True), anyio.move_on_after(5):
                        process.kill()
                        await process.wait()
                await process.aclose()
            status = _status(returncode)
            if self.stopping():
                self.final.append(status)
                logger.info(
                    "supervisor: child %d (pid %d) exited with status %d",
                    child.number,
                    process.pid,
                    status,
                )
                return
            if status == EXIT_USAGE and self.reload_paths is None:
                logger.error(
                    "supervisor: child %d exited with status 2 (a usage error, which a "
                    "restart cannot fix); stopping",
                    child.number,
                )
                self._stop_all(EXIT_USAGE)
                return
            if child.generation < self._generation:
                logger.info("supervisor: child %d drained for the reload", child.number)
                continue
            if status == 0:
                logger.info(
                    "supervisor: child %d (pid %d) drained and exited; replacing it",
                    child.number,
                    process.pid,
                )
                child.crashes = 0
                continue
            ran = anyio.current_time() - started
            if ran >= _BACKOFF_RESET_AFTER:
                child.crashes = 0
            delay = min(_BACKOFF_FIRST * 2**child.crashes, _BACKOFF_MAX)
            child.crashes += 1
            logger.warning(
                "supervisor: child %d (pid %d) crashed with status %d after %.1fs; "
                "restarting it in %gs",
                child.number,
                process.pid,
                status,
                ran,
                delay,
            )
            with anyio.move_on_after(delay):
                await child.wake.wait()


def supervise(argv: Sequence[str], args: argparse.Namespace) -> int:
    """Run the supervisor for the worker command line ``argv``; return the exit status."""
    if args.reload:
        try:
            import watchfiles  # noqa: F401
        except ImportError:
            raise CliError(
                '--reload needs watchfiles: pip install "sepp-anyio[reload]"', EXIT_USAGE
            ) from None
    command = [sys.executable, "-m", "sepp_anyio", "worker", *argv]
    supervisor = Supervisor(
        command, args.workers or 1, reload_paths=[args.path] if args.reload else None
    )
    logger.info(
        "supervisor (pid %d): %d worker process(es)%s%s",
        os.getpid(),
        len(supervisor.children),
        f", each taking at most {args.max_jobs_per_child} job(s)"
        if args.max_jobs_per_child
        else "",
        ", reloading on changes" if args.reload else "",
    )

    async def main() -> int:
        return await supervisor.run()

    try:
        return anyio.run(main, backend="asyncio")
    except KeyboardInterrupt:  # pragma: no cover (signals are received, not raised)
        return 130
