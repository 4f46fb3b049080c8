"""Soak: many jobs through one network reference server and several worker processes, with
failing, hanging and lease-losing handlers; nothing may be lost, and the workers must not
leak memory.

Usage::

    python benchmarks/soak.py                       # 100,000 jobs, 3 workers (minutes)
    python benchmarks/soak.py --jobs 20000 --workers 2 --report-every 2
    python benchmarks/soak.py --jobs 1500 --workers 2 --no-check-rss   # the test suite's run

What runs:

* one reference server, ``python -m sepp_anyio.server --db FILE`` (SQLite, dead letters kept
  so the accounting can see them);
* ``--workers`` worker processes (this script with ``--worker``), alternating the asyncio
  and trio backends, each a ``Worker`` with ``auto_extend`` and a ``job_timeout``;
* this process as the producer: it enqueues ``--jobs`` tagged jobs (the tag is the payload
  and the idempotency key) while the workers run, keeping at most ``--backlog`` live.

Handlers, drawn per attempt from a seeded random generator: 20 % raise a ``HandlerError``
of a random kind (retry, retry_after, permanent), 2 % hang past ``job_timeout``, 0.5 % lose
their lease (they cut it to 50 ms with ``ctx.extend`` and keep working: the server expires
it, the heartbeat finds out and cancels them); the rest return after up to 5 ms.  On top of
that, every ``--pause-every`` seconds one worker process is stopped (SIGSTOP) for longer
than a lease and then resumed: every job it held is redelivered elsewhere, and its late
acks must not count.

Printed: settled jobs and throughput per interval while it runs; at the end, the accounting
of ``tests/reliability/_ledger.py`` (every job acked exactly once, or dead-lettered with an
allowed cause; every redelivery justified) and each worker's RSS after warm-up and at the
end.  Exit status 1 if the accounting fails or (with ``--check-rss``) a worker's RSS grew
more than 10 % after warm-up.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any, TextIO

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

FAIL = 0.20
HANG = 0.02
LOSE_LEASE = 0.005
MAX_ATTEMPTS = 4


def _rss_kb() -> int:
    with open("/proc/self/statm") as statm:
        pages = int(statm.read().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE") // 1024


# --------------------------------------------------------------------------- a worker process


def worker_main(args: argparse.Namespace) -> None:
    import logging

    import anyio

    # The worker's warnings (lease lost, settle errors) go next to its records.
    logging.basicConfig(
        filename=f"{args.out}.log",
        level=logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    anyio.run(_worker, args, backend=args.backend)


async def _worker(args: argparse.Namespace) -> None:
    import anyio
    import anyio.abc

    import sepp_anyio
    from sepp_anyio import HandlerError, JobCtx, Payload, RetryDirective, RetryPolicy, Worker

    # Written from the event loop, buffered: a record costs a memory copy, not a syscall.
    out: TextIO = open(args.out, "w", buffering=1 << 16)  # noqa: ASYNC230, SIM115
    runs = 0
    warm_rss: int | None = None
    warm_at = args.warmup_runs

    def record(record_type: str, **fields: Any) -> None:
        out.write(json.dumps({"type": record_type, **fields}) + "\n")

    async def handle(payload: Payload | None, ctx: JobCtx) -> None:
        nonlocal runs, warm_rss
        tag = payload.data.decode() if payload is not None else ""
        expiry = ctx.lease_expires_at.timestamp()
        run: dict[str, Any] = {
            "job_id": ctx.id,
            "tag": tag,
            "attempt": ctx.attempt,
            "started": time.time(),
            "expiry_at_start": expiry,
            "last_expiry": expiry,
            "outcome": "running",
        }
        runs += 1
        if warm_rss is None and runs >= warm_at:
            gc.collect()
            warm_rss = _rss_kb()
        rng = random.Random(f"{args.seed}:{ctx.id}:{ctx.attempt}")
        draw = rng.random()
        try:
            if draw < FAIL:
                kind = rng.choice(["retry", "retry_after", "permanent"])
                if kind == "retry":
                    raise HandlerError.retry("soak: retry")
                if kind == "retry_after":
                    raise HandlerError.retry_after("soak: retry later", rng.uniform(0.05, 0.3))
                raise HandlerError.permanent("soak: permanent")
            if draw < FAIL + HANG:
                await anyio.sleep_forever()  # job_timeout cancels it
            if draw < FAIL + HANG + LOSE_LEASE:
                await ctx.extend(0.05)  # the lease runs out under our feet
                await anyio.sleep(args.job_timeout * 0.9)
            await anyio.sleep(rng.uniform(0.0, 0.005))
        except anyio.get_cancelled_exc_class():
            run["outcome"] = "cancelled"
            raise
        except BaseException:
            run["outcome"] = "raised"
            raise
        else:
            run["outcome"] = "returned"
        finally:
            run["ended"] = time.time()
            run["last_expiry"] = ctx.lease_expires_at.timestamp()
            record("run", **run)

    retry = RetryPolicy(max_attempts=5, initial_backoff=0.05, max_backoff=1.0)
    async with sepp_anyio.connect(args.address, retry=retry) as client:
        real_ack, real_nack = client.ack, client.nack

        async def ack(ctx: JobCtx) -> None:
            try:
                await real_ack(ctx)
            except sepp_anyio.SeppError as exc:
                record(
                    "settle",
                    job_id=ctx.id,
                    attempt=ctx.attempt,
                    kind="ack",
                    ok=False,
                    error=type(exc).__name__,
                )
                raise
            record("settle", job_id=ctx.id, attempt=ctx.attempt, kind="ack", ok=True)

        async def nack(ctx: JobCtx, retry: RetryDirective | None = None, reason: str = "") -> bool:
            again = retry is None or retry.kind != "dead_letter"
            try:
                dead = await real_nack(ctx, retry, reason)
            except sepp_anyio.SeppError as exc:
                record(
                    "settle",
                    job_id=ctx.id,
                    attempt=ctx.attempt,
                    kind="nack",
                    ok=False,
                    retry=again,
                    error=type(exc).__name__,
                )
                raise
            record(
                "settle",
                job_id=ctx.id,
                attempt=ctx.attempt,
                kind="nack",
                ok=True,
                dead_lettered=dead,
                retry=not dead,
            )
            return dead

        client.ack = ack  # type: ignore[method-assign]
        client.nack = nack  # type: ignore[method-assign]
        worker = Worker(
            client,
            [args.queue],
            lease=args.lease,
            auto_extend=True,
            max_in_flight=args.max_in_flight,
            wait=5.0,
            job_timeout=args.job_timeout,
            reserve_error_backoff=0.1,
        )
        worker.handle("t", handle)
        async with anyio.create_task_group() as tg:
            await tg.start(worker.run)
            with anyio.open_signal_receiver(signal.SIGTERM) as signals:
                async for _ in signals:
                    break
            gc.collect()
            end_rss = _rss_kb()
            worker.shutdown()
    out.close()
    stats = worker.statistics()
    print(
        json.dumps(
            {
                "backend": args.backend,
                "runs": runs,
                "warm_rss_kb": warm_rss,
                "end_rss_kb": end_rss,
                "processed": stats.processed,
                "nacked_retry": stats.nacked_retry,
                "nacked_dead_letter": stats.nacked_dead_letter,
                "lease_lost": stats.lease_lost,
                "settle_errors": stats.settle_errors,
                "reserve_errors": stats.reserve_errors,
            }
        ),
        flush=True,
    )


# --------------------------------------------------------------------------- the conductor


def _count(db: str, queue: str) -> tuple[int, int]:
    import sqlite3

    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30)
    try:
        (live,) = con.execute("SELECT COUNT(*) FROM jobs WHERE queue = ?", (queue,)).fetchone()
        (dead,) = con.execute(
            "SELECT COUNT(*) FROM dead_letters WHERE queue = ?", (queue,)
        ).fetchone()
    finally:
        con.close()
    return int(live), int(dead)


def conductor(args: argparse.Namespace) -> int:
    import anyio
    from tests.reliability._ledger import Ledger, Run, Settle

    from sepp_anyio.server import ServerProcess

    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="sepp-soak-"))
    db = str(workdir / "soak.sqlite3")
    queue = f"soak-{uuid.uuid4().hex[:8]}"
    env = {
        **os.environ,
        "SEPP_STORAGE__DEAD_LETTER_RETENTION_MS": "86400000",
        "SEPP_STORAGE__PERSIST_MODE": args.persist_mode,
    }
    server = ServerProcess("--db", db, "--port", "0", "--log-level", "WARNING", env=env)
    server.start()
    print(
        f"soak: {args.jobs} jobs, {args.workers} worker processes, server {server.address},"
        f" persist_mode={args.persist_mode}, db {db}",
        flush=True,
    )
    workers: list[subprocess.Popen[str]] = []
    outs: list[Path] = []
    backends = ["asyncio", "trio"]
    warmup = max(50, args.jobs // (5 * args.workers))
    for index in range(args.workers):
        out = workdir / f"worker-{index}.jsonl"
        outs.append(out)
        command = [
            sys.executable, str(Path(__file__).resolve()), "--worker",
            "--address", server.address, "--queue", queue, "--out", str(out),
            "--backend", backends[index % 2], "--seed", str(args.seed + index),
            "--lease", str(args.lease), "--job-timeout", str(args.job_timeout),
            "--max-in-flight", str(args.max_in_flight), "--warmup-runs", str(warmup),
        ]  # fmt: skip
        workers.append(subprocess.Popen(command, stdout=subprocess.PIPE, text=True))

    ledger = Ledger(queue)
    started = time.monotonic()
    stop_pauses = threading.Event()
    pauses: list[int] = []

    def pauser() -> None:
        rng = random.Random(args.seed)
        while not stop_pauses.wait(args.pause_every):
            victim = rng.randrange(len(workers))
            workers[victim].send_signal(signal.SIGSTOP)
            pauses.append(victim)
            stop_pauses.wait(args.lease + 1.0)
            workers[victim].send_signal(signal.SIGCONT)

    async def produce_and_watch() -> None:
        import sepp_anyio

        async with sepp_anyio.connect(server.address) as client:
            produced = 0
            last_t, last_settled = time.monotonic(), 0
            next_report = last_t + args.report_every
            while True:
                live, dead = await anyio.to_thread.run_sync(_count, db, queue)
                if produced < args.jobs and live < args.backlog:
                    chunk = min(args.jobs - produced, 2048, args.backlog - live)
                    await ledger.enqueue(client, chunk, max_attempts=MAX_ATTEMPTS, batch=256)
                    produced += chunk
                    continue
                now = time.monotonic()
                settled = produced - live
                if now >= next_report or (produced == args.jobs and not live):
                    rate = (settled - last_settled) / max(now - last_t, 1e-9)
                    print(
                        f"t={now - started:7.1f}s  enqueued {produced:7d}  settled {settled:7d}"
                        f"  ({rate:7.0f} jobs/s)  live {live:6d}  dead letters {dead:6d}",
                        flush=True,
                    )
                    last_t, last_settled = now, settled
                    next_report = now + args.report_every
                if produced == args.jobs and not live:
                    return
                for index, proc in enumerate(workers):
                    if proc.poll() is not None:
                        raise RuntimeError(f"worker {index} exited early ({proc.returncode})")
                if now - started > args.timeout:
                    raise TimeoutError(f"not done after {args.timeout:g}s")
                await anyio.sleep(0.1)

    pause_thread = threading.Thread(target=pauser, daemon=True)
    if args.pause_every > 0:
        pause_thread.start()
    try:
        anyio.run(produce_and_watch)
    finally:
        stop_pauses.set()
        if pause_thread.is_alive():
            pause_thread.join()
        for proc in workers:
            proc.send_signal(signal.SIGCONT)
            proc.send_signal(signal.SIGTERM)
        reports = []
        for proc in workers:
            stdout, _ = proc.communicate(timeout=120)
            line = stdout.strip().splitlines()[-1] if stdout.strip() else "{}"
            reports.append(json.loads(line))
        server.stop()
    elapsed = time.monotonic() - started

    for out in outs:
        with out.open() as lines:
            for line in lines:
                item = json.loads(line)
                if item.pop("type") == "run":
                    ledger.runs.append(Run(**item))
                else:
                    ledger.settles.append(Settle(**item))
    from sepp_anyio.server import DeadLetterCause

    report = ledger.check(
        db,
        f"soak ({args.jobs} jobs, {args.workers} workers, {len(pauses)} SIGSTOP pauses)",
        default_dead=(
            DeadLetterCause.REJECTED,
            DeadLetterCause.ATTEMPTS_EXHAUSTED,
            DeadLetterCause.LEASE_EXPIRED,
        ),
    )
    print(f"\n{report.summary()}")
    print(f"elapsed {elapsed:.1f}s, {args.jobs / elapsed:.0f} jobs/s overall")
    ok = not report.violations
    for line in report.violations[:20]:
        print(f"  VIOLATION {line}")
    for index, worker_report in enumerate(reports):
        warm, end = worker_report.get("warm_rss_kb"), worker_report.get("end_rss_kb")
        growth = (end / warm - 1) * 100 if warm and end else float("nan")
        print(
            f"worker {index} ({worker_report.get('backend')}): {worker_report.get('runs')} runs,"
            f" processed {worker_report.get('processed')}, lease lost"
            f" {worker_report.get('lease_lost')}, settle errors"
            f" {worker_report.get('settle_errors')}; RSS after warm-up"
            f" {(warm or 0) / 1024:.1f} MiB, at the end {(end or 0) / 1024:.1f} MiB"
            f" ({growth:+.1f}%)"
        )
        if args.check_rss and not (warm and end and end <= warm * 1.10):
            print(f"  RSS of worker {index} grew by more than 10% after warm-up")
            ok = False
    print("soak: OK" if ok else "soak: FAILED")
    return 0 if ok else 1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--max-in-flight", type=int, default=32)
    parser.add_argument("--lease", type=float, default=2.0)
    parser.add_argument("--job-timeout", type=float, default=1.0)
    parser.add_argument("--backlog", type=int, default=10_000, help="most live jobs at once")
    parser.add_argument("--pause-every", type=float, default=20.0, help="0: no SIGSTOP pauses")
    parser.add_argument("--report-every", type=float, default=5.0)
    parser.add_argument("--persist-mode", default="buffer", choices=["sync_all", "buffer"])
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--timeout", type=float, default=3600.0, help="give up after this")
    parser.add_argument("--workdir", help="where the database and worker logs go")
    parser.add_argument("--check-rss", action=argparse.BooleanOptionalAction, default=True)
    # worker mode (internal)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--address", help=argparse.SUPPRESS)
    parser.add_argument("--queue", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    parser.add_argument("--backend", default="asyncio", help=argparse.SUPPRESS)
    parser.add_argument("--warmup-runs", type=int, default=1000, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker_main(args)
        return
    sys.exit(conductor(args))


if __name__ == "__main__":
    main()
