"""``sepp-anyio demo``: the library doing its main job, with nothing installed but itself.

Unless ``--address`` names a server, it starts the reference server in this process (in a
background thread, on loopback, with a SQLite database in a temporary directory that is
deleted at exit), enqueues a mixed workload and runs a :class:`~sepp_anyio.Worker` on the
chosen backend with a live progress line, then prints a summary table.

The workload (fractions of ``--jobs``), each kind a job type with its own handler:

* ``resize_image`` (most): a few milliseconds of work, acked;
* ``send_email`` (10 %): fails on its first attempt (``HandlerError.retry_after``) and
  succeeds on the retry;
* ``generate_report`` (5 %): runs 1.5 leases long, so only auto-extension keeps the job;
* ``charge_card`` (4 %): refused for good (``HandlerError.permanent``): dead-lettered at
  once;
* ``sync_inventory`` (2 %): fails on every attempt: dead-lettered after its 3 attempts.

A tenth of the jobs are also sent twice with the same idempotency key; the server
deduplicates the second copy.
"""

from __future__ import annotations

import argparse
import collections
import logging
import random
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

import anyio

from .._client import Client
from .._model._dead_letters import DeadLetterCause
from .._model._enqueue import EnqueueAck, EnqueueRequest
from .._model._errors import HandlerError
from .._model._job import JobCtx
from .._model._payload import Payload
from .._worker import Worker
from ._common import (
    EXIT_FAILURE,
    CliError,
    Parser,
    add_backend_option,
    add_connection_options,
    add_log_level_option,
    configure_logging,
    error_line,
    open_client,
    parse,
    port_number,
    positive_int,
    positive_seconds,
    run_async,
    table,
)

__all__ = ["build_parser", "main"]

logger = logging.getLogger("sepp_anyio.cli")

_MAX_ATTEMPTS = 3
_RETRY_DELAY = 0.5
_DOOMED_RETRY_DELAY = 0.2
_DEAD_LETTER_RETENTION_MS = 3_600_000
_ENQUEUE_CHUNK = 256

# (job type, share of the jobs); the rest are resize_image.
_MIX = (
    ("send_email", 0.10),
    ("generate_report", 0.05),
    ("charge_card", 0.04),
    ("sync_inventory", 0.02),
)
_KIND_LABEL = {
    "resize_image": "quick: a few ms of work",
    "send_email": "flaky: fail once, succeed on the retry",
    "generate_report": "slow: outlive their lease, auto-extended",
    "charge_card": "rejected: dead-lettered at once",
    "sync_inventory": f"doomed: fail all {_MAX_ATTEMPTS} attempts, then dead-lettered",
}


def build_parser(prog: str) -> Parser:
    """The ``demo`` subcommand's argument parser."""
    parser = Parser(
        prog=prog,
        description="Run a mixed workload through a Worker and show what happens: retries, "
        "dead letters, lease extension, deduplication. Starts an embedded reference server "
        "(in this process, with a temporary SQLite database) unless --address is given.",
    )
    parser.add_argument(
        "--jobs", "-n", type=positive_int, default=200, metavar="N", help="jobs (default: 200)"
    )
    parser.add_argument(
        "--concurrency",
        "-c",
        type=positive_int,
        default=32,
        metavar="N",
        help="the worker's max_in_flight (default: 32)",
    )
    parser.add_argument(
        "--lease",
        type=positive_seconds,
        default=2.0,
        metavar="SECONDS",
        help="lease per job; slow jobs run 1.5 times as long (default: 2)",
    )
    parser.add_argument(
        "--timeout",
        type=positive_seconds,
        default=300.0,
        metavar="SECONDS",
        help="give up if the jobs are not all done by then (default: 300)",
    )
    parser.add_argument(
        "--ui-port",
        type=port_number,
        default=0,
        metavar="PORT",
        help="the embedded server's web console port (default: 0, any free one; needs "
        "sepp-anyio[ui]; its address is printed)",
    )
    parser.add_argument(
        "--seed", type=int, default=None, metavar="N", help="seed of the quick jobs' durations"
    )
    add_backend_option(parser)
    add_connection_options(parser, address_help="(default: start an embedded server)")
    add_log_level_option(parser, default="ERROR")
    return parser


# --------------------------------------------------------------------------- the workload


@dataclass
class _Tally:
    """What the handlers saw (the worker's own statistics cover the rest)."""

    recovered: int = 0  # acked on a later attempt
    extended: int = 0  # slow jobs whose lease was extended while they ran


@dataclass
class _Plan:
    """The workload: the job type of each of ``jobs`` jobs, in enqueue order."""

    jobs: int
    lease: float
    kinds: list[str] = field(default_factory=list)

    def expected(self) -> collections.Counter[str]:
        """Jobs per job type."""
        return collections.Counter(self.kinds)


def _plan(jobs: int, lease: float) -> _Plan:
    """Split ``jobs`` between the kinds by their shares (the rest are quick jobs)."""
    counts = {kind: round(jobs * share) for kind, share in _MIX}
    total = sum(counts.values())
    if total > jobs:  # tiny --jobs: keep what fits, in the order of _MIX
        for kind, _ in reversed(_MIX):
            while total > jobs and counts[kind]:
                counts[kind] -= 1
                total -= 1
    counts = {"resize_image": jobs - total, **counts}
    # Spread each kind evenly over the run (a Bresenham-like interleave), so the progress
    # line shows every kind of outcome from the start, not one kind after another.
    slots: list[tuple[float, str]] = []
    for kind, count in counts.items():
        slots.extend(((i + 0.5) / count, kind) for i in range(count))
    slots.sort()
    return _Plan(jobs=jobs, lease=lease, kinds=[kind for _, kind in slots])


def _register(worker: Worker, plan: _Plan, tally: _Tally, rng: random.Random) -> None:
    """The demo's handlers: ordinary handlers of the public API."""

    @worker.handler("resize_image")
    async def resize_image(payload: Payload | None, ctx: JobCtx) -> None:
        await anyio.sleep(rng.uniform(0.002, 0.02))

    @worker.handler("send_email")
    async def send_email(payload: Payload | None, ctx: JobCtx) -> None:
        if ctx.attempt == 1:
            raise HandlerError.retry_after("SMTP connection reset (demo)", _RETRY_DELAY)
        await anyio.sleep(0.01)
        tally.recovered += 1

    @worker.handler("generate_report")
    async def generate_report(payload: Payload | None, ctx: JobCtx) -> None:
        granted = ctx.lease_expires_at
        await anyio.sleep(plan.lease * 1.5)  # longer than the lease: needs auto_extend
        if ctx.lease_expires_at > granted:
            tally.extended += 1

    @worker.handler("charge_card")
    async def charge_card(payload: Payload | None, ctx: JobCtx) -> None:
        raise HandlerError.permanent("card declined (demo)")

    @worker.handler("sync_inventory")
    async def sync_inventory(payload: Payload | None, ctx: JobCtx) -> None:
        raise HandlerError.retry_after("upstream still down (demo)", _DOOMED_RETRY_DELAY)


# --------------------------------------------------------------------------- progress


class _Progress:
    """One updating line on a terminal; a plain line a second otherwise."""

    def __init__(self, out: TextIO, total: int) -> None:
        self._out = out
        self._tty = out.isatty()
        self._total = total
        self._samples: collections.deque[tuple[float, int]] = collections.deque()
        self._last_plain = -1.0

    @property
    def interval(self) -> float:
        return 0.1 if self._tty else 0.25

    def show(self, worker: Worker, *, final: bool = False) -> None:
        stats = worker.statistics()
        done = stats.processed + stats.nacked_dead_letter
        now = time.monotonic()
        self._samples.append((now, done))
        while len(self._samples) > 2 and now - self._samples[0][0] > 1.0:
            self._samples.popleft()
        then, done_then = self._samples[0]
        rate = (done - done_then) / (now - then) if now > then else 0.0
        width = 20
        filled = min(width, done * width // self._total)
        line = (
            f"  [{'#' * filled}{'.' * (width - filled)}] {done}/{self._total} done"
            f" | {rate:6.1f} jobs/s | {stats.in_flight:3d} in flight"
            f" | {stats.nacked_retry} retries | {stats.nacked_dead_letter} dead letters"
        )
        if self._tty:
            self._out.write(f"\r\x1b[K{line}" + ("\n" if final else ""))
            self._out.flush()
        elif final or now - self._last_plain >= 1.0:
            self._last_plain = now
            print(line, file=self._out, flush=True)


# --------------------------------------------------------------------------- the run


async def _enqueue(client: Client, plan: _Plan, queue: str, run_id: str) -> tuple[int, float]:
    """Enqueue the workload; then resend a tenth with the same keys. Returns
    ``(deduplicated, seconds)``."""
    info = await client.server_info()
    chunk = max(1, min(_ENQUEUE_CHUNK, info.max_enqueue_batch))
    requests = [
        EnqueueRequest(
            queue,
            kind,
            payload=Payload.from_json({"n": n, "kind": kind}),
            idempotency_key=f"demo-{run_id}-{n}",
            max_attempts=_MAX_ATTEMPTS,
            priority=5 if kind == "generate_report" else None,  # start the slow ones early
        )
        for n, kind in enumerate(plan.kinds)
    ]
    started = time.monotonic()
    for start in range(0, len(requests), chunk):
        for result in await client.enqueue_batch(requests[start : start + chunk]):
            if not isinstance(result, EnqueueAck):
                raise CliError(f"the server rejected a demo job: {result}")
    elapsed = time.monotonic() - started
    deduplicated = 0
    resend = requests[::10]
    for start in range(0, len(resend), chunk):
        for result in await client.enqueue_batch(resend[start : start + chunk]):
            if isinstance(result, EnqueueAck) and result.deduplicated:
                deduplicated += 1
    return deduplicated, elapsed


async def _demo(
    args: argparse.Namespace, address: str, where: str, out: TextIO, console: str | None = None
) -> int:
    plan = _plan(args.jobs, args.lease)
    run_id = uuid.uuid4().hex[:8]
    queue = f"demo-{run_id}"
    expected = plan.expected()
    rng = random.Random(args.seed)
    args.address = address
    async with open_client(args) as client:
        print(f"sepp-anyio demo: {plan.jobs} jobs through a Worker on {args.backend}", file=out)
        print(f"  server: {where}", file=out)
        if console is not None:
            print(f"  console: {console}", file=out)
        print(f"  queue:  {queue}", file=out)
        for kind, count in expected.most_common():
            print(f"  {count:6d} x {kind:<16} {_KIND_LABEL[kind]}", file=out)
        deduplicated, enqueue_time = await _enqueue(client, plan, queue, run_id)
        print(
            f"enqueued {plan.jobs} jobs in {enqueue_time:.2f} s; resent "
            f"{len(plan.kinds[::10])} with the same idempotency keys: {deduplicated} "
            "deduplicated",
            file=out,
        )
        tally = _Tally()
        worker = Worker(
            client,
            [queue],
            lease=args.lease,
            max_in_flight=args.concurrency,
            auto_extend=True,
            wait=1.0,
        )
        _register(worker, plan, tally, rng)
        progress = _Progress(out, plan.jobs)
        started = time.monotonic()
        timed_out = False
        async with anyio.create_task_group() as tg:
            await tg.start(worker.run)
            with anyio.move_on_after(args.timeout) as deadline:
                while True:
                    progress.show(worker)
                    stats = worker.statistics()
                    if stats.processed + stats.nacked_dead_letter >= plan.jobs:
                        break
                    await anyio.sleep(progress.interval)
            timed_out = deadline.cancelled_caught
            worker.shutdown()
        elapsed = time.monotonic() - started
        progress.show(worker, final=True)
        stats = worker.statistics()
        causes: collections.Counter[DeadLetterCause] = collections.Counter()
        retention = (await client.server_info()).dead_letter_retention_enabled
        if retention:
            while records := await client.drain_dead_letters(queue, 256):
                causes.update(record.cause for record in records)

    doomed = expected["charge_card"] + expected["sync_inventory"]
    rows = [
        ("enqueued", str(plan.jobs), ""),
        ("  resent with a used key", str(deduplicated), "deduplicated by the server"),
        ("acked", str(stats.processed), f"expected {plan.jobs - doomed}"),
        ("  after a retry", str(tally.recovered), f"expected {expected['send_email']}"),
        ("  kept by auto-extend", str(tally.extended), f"expected {expected['generate_report']}"),
        ("nacked for retry", str(stats.nacked_retry), "then delivered again"),
        ("dead-lettered", str(stats.nacked_dead_letter), f"expected {doomed}"),
    ]
    if retention:
        for cause in (DeadLetterCause.REJECTED, DeadLetterCause.ATTEMPTS_EXHAUSTED):
            note = "drained from the dead-letter queue"
            rows.append((f"  {cause.value}", str(causes[cause]), note))
    else:
        rows.append(("  drained", "-", "this server keeps no dead letters"))
    rows.append(("lease lost", str(stats.lease_lost), "expected 0"))
    print(file=out)
    print(table(("outcome", "jobs", "note"), rows), file=out)
    done = stats.processed + stats.nacked_dead_letter
    rate = done / elapsed if elapsed else 0.0
    print(
        f"\n{done} jobs settled in {elapsed:.2f} s ({rate:.0f} jobs/s), at most "
        f"{stats.max_in_flight_seen} in flight at once, on {args.backend}",
        file=out,
    )
    if timed_out:
        raise CliError(f"only {done} of {plan.jobs} jobs were settled within --timeout")
    return 0


def main(argv: Sequence[str], *, prog: str = "sepp-anyio demo") -> int:
    """Run the ``demo`` subcommand; return the exit status."""
    args = parse(build_parser(prog), argv)
    if isinstance(args, int):
        return args
    configure_logging(args.log_level)
    out = sys.stdout
    if args.address is not None:

        async def remote() -> int:
            return await _demo(args, args.address, f"{args.address} (given by --address)", out)

        return run_async(prog, remote, backend=args.backend)

    from ..server import ServerConfig, ServerThread, SqliteStore, StorageConfig
    from ..server._config._sections import UiConfig
    from ..server._console import require_jinja2
    from ..server._errors import ConfigError

    ui = UiConfig(port=args.ui_port)
    try:
        require_jinja2()
    except ConfigError:
        ui = UiConfig()  # no console without the extra; the line below says how to get it
    config = ServerConfig(
        storage=StorageConfig(dead_letter_retention_ms=_DEAD_LETTER_RETENTION_MS), ui=ui
    )
    with tempfile.TemporaryDirectory(prefix="sepp-demo-") as tmp:
        database = Path(tmp) / "demo.sqlite3"
        server = ServerThread(config, store=SqliteStore(database), backend=args.backend)
        try:
            server.start()
        except Exception as exc:
            error_line(prog, f"the embedded server did not start: {exc}")
            return EXIT_FAILURE
        where = (
            f"embedded reference server on {server.address}, SQLite database {database} "
            "(deleted at exit)"
        )

        console = server.console_url or "not available (pip install 'sepp-anyio[ui]')"

        async def embedded() -> int:
            return await _demo(args, server.address, where, out, console)

        try:
            return run_async(prog, embedded, backend=args.backend)
        finally:
            server.stop()
