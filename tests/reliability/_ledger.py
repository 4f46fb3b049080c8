"""Accounting for the reliability scenarios: what the client side saw, checked against the
server's durable state.

Every job of a scenario is enqueued with a *tag* (``<queue>/<n>``) as its payload and as its
idempotency key, so a retried enqueue can never create a second job for the same tag.  The
worker side records, through :meth:`Ledger.handler` and :meth:`Ledger.instrument`:

* every handler run (job id, attempt, start time, the lease expiry it started with and the
  last one it knew, how it ended);
* every ack and nack the worker sent, and whether the client call succeeded.

At the end, :meth:`Ledger.check` reads the server's SQLite database (``jobs`` and
``dead_letters``, filtered by the scenario's queue) and decides, for every tag:

* **acked**: the job is neither live nor dead-lettered.  That is only legitimate if the
  worker sent an ack for it (successful or not: a lost reply is still an ack); a job that is
  gone without any ack attempt *disappeared*.
* **dead-lettered**: its cause must be one the scenario expects for that tag.
* **live**: only where the scenario allows it.

and it checks the at-least-once rules: no job is acked twice (the client never sees two
successful acks for one job), an ack the client saw succeed is durable (the job is gone and
never redelivered), and every redelivery is justified: either the previous attempt was
nacked for retry, or its lease had really expired (the redelivered run starts after the
previous run's last known expiry, or the previous delivery never reached a handler because
its reply was lost).  Redeliveries are counted and reported.
"""

from __future__ import annotations

import dataclasses
import sqlite3
import time
from collections import Counter, defaultdict
from collections.abc import Awaitable, Callable, Collection, Mapping
from datetime import datetime

import anyio
import anyio.lowlevel

from sepp_anyio import (
    Client,
    EnqueueAck,
    EnqueueRequest,
    HandlerError,
    JobCtx,
    Payload,
    RetryDirective,
    SeppError,
)
from sepp_anyio.server import DeadLetterCause, JobState

__all__ = ["Ledger", "Report", "Run", "Settle", "count_live", "job_row", "read_server_state"]

# A redelivered run may start this much before the previous lease's expiry as the worker
# knew it: the two clocks are the same machine's, the server works in whole milliseconds.
_CLOCK_SLACK = 0.05

Handler = Callable[[Payload | None, JobCtx], Awaitable[None]]


@dataclasses.dataclass(eq=False)
class Run:
    """One handler run."""

    job_id: str
    tag: str
    attempt: int
    started: float  # time.time()
    expiry_at_start: float
    last_expiry: float
    outcome: str = "running"  # returned | raised | cancelled
    ended: float = 0.0


@dataclasses.dataclass(eq=False)
class Settle:
    """One ack or nack call as the worker made it."""

    job_id: str
    attempt: int
    kind: str  # ack | nack
    ok: bool
    dead_lettered: bool = False
    error: str = ""
    retry: bool = False  # a nack that asked for another attempt


@dataclasses.dataclass(frozen=True)
class ServerJob:
    job_id: str
    tag: str
    live: bool
    state: str  # ready | scheduled | inflight | dead
    attempt: int
    cause: DeadLetterCause | None = None
    reason: str | None = None


def _tag_of(payload: bytes | None) -> str:
    return payload.decode() if payload else ""


def read_server_state(db_path: str, queue: str) -> dict[str, ServerJob]:
    """The live jobs and dead letters of ``queue`` in the server's database, by job id.

    Opened read-only; safe while the server runs (SQLite WAL).
    """
    out: dict[str, ServerJob] = {}
    con = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True, timeout=10)
    try:
        for job_id, state, attempt, data in con.execute(
            "SELECT id, state, attempt, payload_data FROM jobs WHERE queue = ?", (queue,)
        ):
            out[job_id] = ServerJob(
                job_id, _tag_of(data), True, JobState(state).name.lower(), attempt
            )
        for job_id, cause, final_attempt, reason, data in con.execute(
            "SELECT id, cause, final_attempt, last_reason, payload_data FROM dead_letters"
            " WHERE queue = ?",
            (queue,),
        ):
            out[job_id] = ServerJob(
                job_id,
                _tag_of(data),
                False,
                "dead",
                final_attempt,
                DeadLetterCause(cause),
                reason,
            )
    finally:
        con.close()
    return out


def count_live(db_path: str, queue: str) -> int:
    con = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True, timeout=10)
    try:
        (count,) = con.execute("SELECT COUNT(*) FROM jobs WHERE queue = ?", (queue,)).fetchone()
    finally:
        con.close()
    return int(count)


def job_row(db_path: str, job_id: str) -> tuple[int, int] | None:
    """``(state, lease_expires_at_ms)`` of a live job, or None once it is gone."""
    con = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True, timeout=10)
    try:
        row = con.execute(
            "SELECT state, lease_expires_at_ms FROM jobs WHERE id = ?", (job_id,)
        ).fetchone()
    finally:
        con.close()
    return None if row is None else (int(row[0]), int(row[1]))


@dataclasses.dataclass
class Report:
    """The outcome of :meth:`Ledger.check`."""

    scenario: str
    jobs: int = 0
    acked: int = 0
    dead: Counter[str] = dataclasses.field(default_factory=Counter)
    live: int = 0
    runs: int = 0
    redelivered_after_nack: int = 0
    redelivered_after_lease_expiry: int = 0
    lost_deliveries: int = 0  # attempts the server handed out that no handler ever saw
    settle_errors: int = 0
    violations: list[str] = dataclasses.field(default_factory=list)

    def summary(self) -> str:
        dead = ", ".join(f"{k}={v}" for k, v in sorted(self.dead.items())) or "0"
        return (
            f"{self.scenario}: {self.jobs} jobs -> acked {self.acked}, dead {dead},"
            f" live {self.live}; {self.runs} handler runs; redeliveries: after nack"
            f" {self.redelivered_after_nack}, after lease expiry"
            f" {self.redelivered_after_lease_expiry} (of which never seen by a handler:"
            f" {self.lost_deliveries}); settle errors {self.settle_errors};"
            f" violations {len(self.violations)}"
        )

    def assert_ok(self) -> None:
        assert not self.violations, self.summary() + "\n" + "\n".join(self.violations[:30])


def _ts(value: datetime) -> float:
    return value.timestamp()


class Ledger:
    """The client-side record of one scenario (see the module docstring)."""

    def __init__(self, queue: str) -> None:
        self.queue = queue
        self.tags: dict[str, str] = {}  # tag -> job id
        self.by_id: dict[str, str] = {}  # job id -> tag
        self.runs: list[Run] = []
        self.settles: list[Settle] = []
        self.acked_ok = 0
        self._ack_waiters: list[tuple[int, anyio.Event]] = []

    # ------------------------------------------------------------------ producing

    async def enqueue(
        self,
        client: Client,
        count: int,
        *,
        job_type: str = "t",
        max_attempts: int = 20,
        start: int | None = None,
        batch: int = 100,
    ) -> list[str]:
        """Enqueue ``count`` tagged jobs (retrying whole batches until each tag is acked).

        The tag is the idempotency key, so a retried batch never duplicates a job.
        """
        first = len(self.tags) if start is None else start
        tags = [f"{self.queue}/{job_type}/{first + i}" for i in range(count)]
        pending = list(tags)
        with anyio.fail_after(60):
            while pending:
                chunk = pending[:batch]
                requests = [
                    EnqueueRequest(
                        self.queue,
                        job_type,
                        payload=Payload(tag.encode(), "text/plain"),
                        idempotency_key=tag,
                        max_attempts=max_attempts,
                    )
                    for tag in chunk
                ]
                try:
                    results = await client.enqueue_batch(requests)
                except SeppError:
                    continue
                for tag, result in zip(chunk, results, strict=True):
                    assert isinstance(result, EnqueueAck), (tag, result)
                    known = self.tags.setdefault(tag, result.job_id)
                    assert known == result.job_id, f"{tag} got two job ids"
                    self.by_id[result.job_id] = tag
                pending = pending[batch:]
        return tags

    # ------------------------------------------------------------------ recording

    def handler(self, body: Handler | None = None) -> Handler:
        """A handler recording its runs; ``body`` decides the outcome (default: return)."""

        async def handle(payload: Payload | None, ctx: JobCtx) -> None:
            tag = payload.data.decode() if payload is not None else ""
            expiry = _ts(ctx.lease_expires_at)
            run = Run(ctx.id, tag, ctx.attempt, time.time(), expiry, expiry)
            self.runs.append(run)
            try:
                if body is not None:
                    await body(payload, ctx)
                else:
                    await anyio.lowlevel.checkpoint()
            except anyio.get_cancelled_exc_class():
                run.outcome = "cancelled"
                raise
            except BaseException:
                run.outcome = "raised"
                raise
            else:
                run.outcome = "returned"
            finally:
                run.ended = time.time()
                run.last_expiry = _ts(ctx.lease_expires_at)

        return handle

    def instrument(self, client: Client) -> Client:
        """Record every ack and nack this client sends (the worker's settle calls)."""
        real_ack, real_nack = client.ack, client.nack

        async def ack(ctx: JobCtx) -> None:
            try:
                await real_ack(ctx)
            except SeppError as exc:
                self.settles.append(Settle(ctx.id, ctx.attempt, "ack", False, error=repr(exc)))
                raise
            self.settles.append(Settle(ctx.id, ctx.attempt, "ack", True))
            self.acked_ok += 1
            for count, event in self._ack_waiters:
                if self.acked_ok >= count:
                    event.set()

        async def nack(ctx: JobCtx, retry: RetryDirective | None = None, reason: str = "") -> bool:
            again = retry is None or retry.kind != "dead_letter"
            try:
                dead = await real_nack(ctx, retry, reason)
            except SeppError as exc:
                self.settles.append(
                    Settle(ctx.id, ctx.attempt, "nack", False, error=repr(exc), retry=again)
                )
                raise
            self.settles.append(
                Settle(ctx.id, ctx.attempt, "nack", True, dead_lettered=dead, retry=not dead)
            )
            return dead

        client.ack = ack  # type: ignore[method-assign]
        client.nack = nack  # type: ignore[method-assign]
        return client

    async def wait_acked(self, count: int, *, within: float = 30.0) -> None:
        """Wait until the worker has seen ``count`` successful acks."""
        if self.acked_ok >= count:
            return
        event = anyio.Event()
        self._ack_waiters.append((count, event))
        with anyio.fail_after(within):
            await event.wait()

    # ------------------------------------------------------------------ checking

    def check(
        self,
        db_path: str,
        scenario: str,
        *,
        dead_causes: Mapping[str, Collection[DeadLetterCause]] | None = None,
        default_dead: Collection[DeadLetterCause] = (),
        allow_live: bool = False,
    ) -> Report:
        """Compare the record with the server's database (see the module docstring).

        ``dead_causes`` maps a tag prefix (``"<queue>/<job type>/"`` or a whole tag) to the
        dead-letter causes allowed for it; ``default_dead`` applies to every other tag.
        """
        server = read_server_state(db_path, self.queue)
        return self._judge(server, scenario, dead_causes or {}, default_dead, allow_live)

    def _allowed_dead(
        self,
        tag: str,
        dead_causes: Mapping[str, Collection[DeadLetterCause]],
        default: Collection[DeadLetterCause],
    ) -> Collection[DeadLetterCause]:
        best = ""
        for prefix in dead_causes:
            if tag.startswith(prefix) and len(prefix) > len(best):
                best = prefix
        return dead_causes[best] if best else default

    def _judge(
        self,
        server: Mapping[str, ServerJob],
        scenario: str,
        dead_causes: Mapping[str, Collection[DeadLetterCause]],
        default_dead: Collection[DeadLetterCause],
        allow_live: bool,
    ) -> Report:
        report = Report(scenario, jobs=len(self.tags), runs=len(self.runs))
        bad = report.violations.append

        runs: dict[str, list[Run]] = defaultdict(list)
        for run in self.runs:
            runs[run.job_id].append(run)
        settles: dict[str, list[Settle]] = defaultdict(list)
        for settle in self.settles:
            settles[settle.job_id].append(settle)
        report.settle_errors = sum(1 for s in self.settles if not s.ok)

        # Nothing on the server that we did not enqueue (a retried enqueue duplicating a job).
        for job_id, job in server.items():
            if job_id not in self.by_id:
                bad(f"unknown job {job_id} (tag {job.tag!r}) on the server")
            elif self.by_id[job_id] != job.tag:
                bad(f"job {job_id} carries tag {job.tag!r}, enqueued as {self.by_id[job_id]!r}")
        for run in self.runs:
            if run.job_id not in self.by_id:
                bad(f"a handler ran unknown job {run.job_id} ({run.tag!r})")

        for tag, job_id in self.tags.items():
            found = server.get(job_id)
            mine = sorted(runs.get(job_id, []), key=lambda r: (r.attempt, r.started))
            its = settles.get(job_id, [])
            acks_ok = [s for s in its if s.kind == "ack" and s.ok]
            if len(acks_ok) > 1:
                bad(f"{tag}: acked successfully {len(acks_ok)} times")
            if found is None:
                report.acked += 1
                if not any(s.kind == "ack" for s in its):
                    bad(f"{tag} ({job_id}) disappeared: gone from the server, never acked")
                self._judge_redeliveries(tag, mine, its, report)
                continue
            job = found
            if job.live:
                report.live += 1
                if not allow_live:
                    bad(f"{tag} ({job_id}) still live on the server ({job.state})")
                if acks_ok:
                    bad(f"{tag}: an ack the client saw succeed did not stick ({job.state})")
            else:
                assert job.cause is not None
                report.dead[job.cause.name] += 1
                allowed = self._allowed_dead(tag, dead_causes, default_dead)
                if job.cause not in allowed:
                    bad(
                        f"{tag}: dead-lettered as {job.cause.name} ({job.reason!r}), expected"
                        f" {sorted(c.name for c in allowed) or 'no dead letter'}"
                    )
                if acks_ok:
                    bad(f"{tag}: acked, yet dead-lettered as {job.cause.name}")
            self._judge_redeliveries(tag, mine, its, report)
        return report

    def _judge_redeliveries(
        self, tag: str, runs: list[Run], settles: list[Settle], report: Report
    ) -> None:
        bad = report.violations.append
        by_attempt: dict[int, list[Run]] = defaultdict(list)
        for run in runs:
            by_attempt[run.attempt].append(run)
        for attempt, same in by_attempt.items():
            if len(same) > 1:
                bad(f"{tag}: attempt {attempt} ran {len(same)} times")
        acked_attempts = {s.attempt for s in settles if s.kind == "ack" and s.ok}
        # A nack for retry whose reply was lost may have been applied: either way is legal.
        retried_attempts = {s.attempt for s in settles if s.kind == "nack" and s.retry}
        previous: Run | None = None
        for run in runs:
            if run.attempt == 1:
                previous = run
                continue
            if any(a < run.attempt for a in acked_attempts):
                bad(f"{tag}: redelivered as attempt {run.attempt} after a successful ack")
            before = run.attempt - 1
            if before in retried_attempts:
                report.redelivered_after_nack += 1
            else:
                report.redelivered_after_lease_expiry += 1
                if previous is None or previous.attempt != before:
                    # The server handed out that attempt but no handler here saw it (the
                    # reply was lost): its lease had to expire first.
                    report.lost_deliveries += 1
                elif run.started < previous.last_expiry - _CLOCK_SLACK:
                    bad(
                        f"{tag}: attempt {run.attempt} started"
                        f" {previous.last_expiry - run.started:.3f}s before attempt"
                        f" {previous.attempt}'s lease expired"
                    )
            previous = run


def outcomes(
    handler_body: Callable[[str, JobCtx], Awaitable[None]],
) -> Callable[[Payload | None, JobCtx], Awaitable[None]]:
    """Adapt ``body(tag, ctx)`` to a handler body."""

    async def body(payload: Payload | None, ctx: JobCtx) -> None:
        await handler_body(payload.data.decode() if payload is not None else "", ctx)

    return body


def handler_error(kind: str) -> HandlerError:
    """A HandlerError of one of the three kinds."""
    if kind == "retry":
        return HandlerError.retry("injected retry")
    if kind == "retry_after":
        return HandlerError.retry_after("injected retry_after", 0.05)
    return HandlerError.permanent("injected permanent failure")
