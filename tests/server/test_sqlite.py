"""SqliteStore: round trip of every field, restart recovery, group commit, SIGKILL safety."""

from __future__ import annotations

import math
import os
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import anyio
import anyio.to_thread
import pytest

import sepp_anyio
from sepp_anyio._proto.sepp import v1 as pb
from sepp_anyio.server import (
    Engine,
    JobState,
    ManualClock,
    ServerConfig,
    SqliteStore,
    StorageConfig,
)
from sepp_anyio.server._engine._engine import rpc_of

from ._helpers import T0, enqueue, job, nack, reserve, running, ts

pytestmark = pytest.mark.anyio

RETAIN = ServerConfig(storage=StorageConfig(dead_letter_retention_ms=60_000))


async def test_every_field_round_trips(tmp_path: Path) -> None:
    path = tmp_path / "db.sqlite3"
    custom = {
        "s": pb.PrimitiveValue(string_value="héllo"),
        "one_int": pb.PrimitiveValue(int_value=1),
        "one_float": pb.PrimitiveValue(double_value=1.0),
        "true": pb.PrimitiveValue(bool_value=True),
        "big": pb.PrimitiveValue(int_value=-(2**63)),
        "nan": pb.PrimitiveValue(double_value=math.nan),
        "inf": pb.PrimitiveValue(double_value=-math.inf),
    }
    clock = ManualClock(T0)
    async with running(store=SqliteStore(path), clock=clock) as engine:
        [job_id] = await enqueue(
            engine,
            job(
                "q",
                "type",
                payload=pb.Payload(data=b"\x00\xff", encoding="application/octet-stream"),
                priority=3,
                max_attempts=7,
                trace_context=pb.TraceContext(traceparent="00-a-b-01", tracestate="x=y"),
                custom=custom,
                scheduled_at=ts(T0 - 5),
            ),
        )
        before = engine.snapshot_job(job_id)
    async with running(store=SqliteStore(path), clock=clock) as engine:
        after = engine.snapshot_job(job_id)
        assert after is not None and before is not None
        assert repr(after) == repr(before)  # NaN != NaN, so compare reprs
        assert [type(v) for _, v in after.custom] == [type(v) for _, v in before.custom]
        [leased] = await reserve(engine)
        assert leased.payload.data == b"\x00\xff"
        assert leased.custom["true"].bool_value is True
        assert leased.custom["one_int"].int_value == 1
        assert leased.custom["one_float"].double_value == 1.0


async def test_restart_recovers_everything(tmp_path: Path) -> None:
    path = tmp_path / "db.sqlite3"
    clock = ManualClock(T0)
    async with running(RETAIN, SqliteStore(path), clock) as engine:
        ready, scheduled, inflight, expiring, dead = await enqueue(
            engine,
            job(priority=1),
            job(scheduled_at=ts(T0 + 5000)),
            job(priority=9, idempotency_key="key"),
            job(priority=8),
            job("dl", payload=b"{}"),
        )
        leased = {j.id: j for j in await reserve(engine, lease=30, max_jobs=1)}
        [short] = await reserve(engine, lease=2)
        [doomed] = await reserve(engine, "dl")
        await nack(engine, doomed, dead_letter=True, reason="no")
        assert set(leased) == {inflight} and short.id == expiring
    await clock.advance(3)  # the short lease expires while the server is down
    async with running(RETAIN, SqliteStore(path), clock) as engine:
        await clock.settle()
        states = {
            i: s.state
            for i in (ready, scheduled, inflight, expiring)
            if (s := engine.snapshot_job(i))
        }
        assert states == {
            ready: JobState.READY,
            scheduled: JobState.SCHEDULED,
            inflight: JobState.INFLIGHT,
            expiring: JobState.READY,  # expired lease handled right away, attempt + 1
        }
        snap = engine.snapshot_job(expiring)
        assert snap is not None and snap.attempt == 2
        [record] = engine.dead_letters()
        assert (record.job.id, record.last_reason, record.job.payload_data) == (dead, "no", b"{}")
        results = await rpc_of(engine).enqueue_batch(
            pb.EnqueueBatchRequest(jobs=[job(idempotency_key="key")])
        )
        assert results.results[0].success == pb.EnqueueResponse(job_id=inflight, deduplicated=True)
        await clock.advance(27)  # the recovered lease expires on time: T0 + 30 s
        snap = engine.snapshot_job(inflight)
        assert snap is not None and (snap.state, snap.attempt) == (JobState.READY, 2)


async def test_dead_letters_purged_when_restarted_without_retention(tmp_path: Path) -> None:
    path = tmp_path / "db.sqlite3"
    async with running(RETAIN, SqliteStore(path)) as engine:
        await enqueue(engine, job())
        [leased] = await reserve(engine)
        await nack(engine, leased, dead_letter=True)
    async with running(None, SqliteStore(path)) as engine:
        await engine.clock.settle()  # type: ignore[attr-defined]
        assert engine.dead_letters() == []
    async with running(RETAIN, SqliteStore(path)) as engine:
        assert engine.dead_letters() == []


async def test_group_commit_shares_transactions(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "db.sqlite3")
    async with running(store=store) as engine:
        before = store.transactions
        ids: list[str] = []

        async def one() -> None:
            ids.extend(await enqueue(engine, job()))

        async with anyio.create_task_group() as tg:
            for _ in range(100):
                tg.start_soon(one)
        used = store.transactions - before
        assert len(ids) == 100
        assert 1 <= used <= 5, used
    async with running(store=SqliteStore(tmp_path / "db.sqlite3")) as engine:
        assert engine.stats()["q"].ready == 100


async def test_foreign_schema_version_refused(tmp_path: Path) -> None:
    path = tmp_path / "db.sqlite3"
    with sqlite3.connect(path) as conn:
        conn.execute("PRAGMA user_version = 99")
    conn.close()
    with pytest.raises(RuntimeError, match="version 99"):
        async with Engine(store=SqliteStore(path)):
            pass


# The schema of version 1 as it was written (a database of that version must still open).
_V1_JOB_COLUMNS = """id TEXT PRIMARY KEY NOT NULL, queue TEXT NOT NULL, job_type TEXT NOT NULL,
    state INTEGER NOT NULL, priority INTEGER NOT NULL, enqueued_at_ms INTEGER NOT NULL,
    attempt INTEGER NOT NULL, max_attempts INTEGER NOT NULL, due_ms INTEGER NOT NULL,
    lease_expires_at_ms INTEGER NOT NULL, scheduled_at_ms INTEGER, payload_data BLOB,
    payload_encoding TEXT, traceparent TEXT, tracestate TEXT, custom TEXT NOT NULL"""
_V1_SCHEMA = f"""
CREATE TABLE jobs ({_V1_JOB_COLUMNS});
CREATE TABLE dead_letters ({_V1_JOB_COLUMNS}, cause INTEGER NOT NULL,
    failed_at_ms INTEGER NOT NULL, final_attempt INTEGER NOT NULL, last_reason TEXT);
CREATE TABLE dedup (queue TEXT NOT NULL, key TEXT NOT NULL, job_id TEXT NOT NULL,
    enqueued_at_ms INTEGER NOT NULL, deadline_ms INTEGER NOT NULL, PRIMARY KEY (queue, key));
PRAGMA user_version = 1;
"""


def _write_v1_database(path: Path, job_ids: list[str], dead: list[tuple[str, str]]) -> None:
    """Ready jobs of queue q and dead letters ``(queue, id)``, all of the millisecond T0."""
    conn = sqlite3.connect(path)
    try:
        conn.executescript(_V1_SCHEMA)
        row = "?, ?, 't', ?, 0, ?, 1, 3, 0, 0, NULL, NULL, NULL, NULL, NULL, '{}'"
        conn.executemany(f"INSERT INTO jobs VALUES ({row})", [(i, "q", 0, T0) for i in job_ids])
        conn.executemany(
            f"INSERT INTO dead_letters VALUES ({row}, 2, ?, 1, 'r')",
            [(i, queue, 2, T0, T0) for queue, i in dead],
        )
        conn.commit()
    finally:
        conn.close()


async def test_version_1_database_is_migrated_keeping_its_order(tmp_path: Path) -> None:
    path = tmp_path / "db.sqlite3"
    # Ids out of sorted order on purpose: version 1 ordered ties by id, so must the migration.
    job_ids = [f"{n:08x}-0000-4000-8000-000000000000" for n in (5, 1, 4, 2, 3)]
    dead = [("b", job_ids[0]), ("a", job_ids[1]), ("b", job_ids[2]), ("a", job_ids[3])]
    dead = [(q, i.replace("-0000-4", "-1111-4")) for q, i in dead]
    _write_v1_database(path, job_ids, dead)
    v1_dead_order = [i for _, i in sorted(dead)]
    clock = ManualClock(T0)
    async with running(RETAIN, SqliteStore(path), clock) as engine:
        assert [r.job.id for r in engine.dead_letters()] == v1_dead_order
        # New rows of the same millisecond come after every migrated one.
        [new_job] = await enqueue(engine, job())
        [first] = await reserve(engine)
        assert first.id == sorted(job_ids)[0]
        await nack(engine, first, dead_letter=True)
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA user_version").fetchone() == (2,)
    conn.close()
    # Reopened (now at version 2): the order holds.
    async with running(RETAIN, SqliteStore(path), clock) as engine:
        assert [r.job.id for r in engine.dead_letters()] == [*v1_dead_order, first.id]
        jobs = await reserve(engine, max_jobs=10)
        assert [j.id for j in jobs] == [*sorted(job_ids)[1:], new_job]


async def test_failed_migration_leaves_version_1(tmp_path: Path) -> None:
    path = tmp_path / "db.sqlite3"
    _write_v1_database(path, [], [])
    with sqlite3.connect(path) as conn:
        # A column of that name already there: the migration's ALTER TABLE fails.
        conn.execute("ALTER TABLE jobs ADD COLUMN enqueue_seq INTEGER")
    conn.close()
    with pytest.raises(sqlite3.OperationalError, match="enqueue_seq"):
        async with Engine(store=SqliteStore(path)):
            pass
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA user_version").fetchone() == (1,)
        columns = [r[1] for r in conn.execute("PRAGMA table_info(dead_letters)")]
        assert "failure_seq" not in columns
    conn.close()


def test_synchronous_level_checked() -> None:
    with pytest.raises(ValueError, match="synchronous"):
        SqliteStore("x", synchronous="SOMETIMES")  # type: ignore[arg-type]


CHILD = Path(__file__).with_name("_crash_child.py")
SRC = Path(sepp_anyio.__file__).resolve().parent.parent


async def test_acknowledged_writes_survive_sigkill(tmp_path: Path, anyio_backend_name: str) -> None:
    path = tmp_path / "crash.sqlite3"
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")]),
    }

    def run_child() -> tuple[list[str], dict[str, int]]:
        enqueued: list[str] = []
        reserved: dict[str, int] = {}
        with subprocess.Popen(
            [sys.executable, str(CHILD), str(path), anyio_backend_name],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        ) as proc:
            assert proc.stdout is not None and proc.stderr is not None
            try:
                # Kill while the child is busy writing, after plenty of acknowledged work.
                while len(enqueued) < 300 or len(reserved) < 30:
                    line = proc.stdout.readline()
                    if not line:
                        raise AssertionError(f"child exited early: {proc.stderr.read()}")
                    kind, job_id, *rest = line.split()
                    if kind == "E":
                        enqueued.append(job_id)
                    else:
                        reserved[job_id] = int(rest[0])
                os.kill(proc.pid, signal.SIGKILL)
            finally:
                if proc.poll() is None:
                    proc.kill()
                proc.wait()
            assert proc.returncode == -signal.SIGKILL
        return enqueued, reserved

    enqueued, reserved = await anyio.to_thread.run_sync(run_child)
    async with Engine(store=SqliteStore(path)) as engine:
        missing = [job_id for job_id in enqueued if engine.snapshot_job(job_id) is None]
        assert missing == []
        for job_id, attempt in reserved.items():
            snap = engine.snapshot_job(job_id)
            assert snap is not None
            assert (snap.state, snap.attempt) == (JobState.INFLIGHT, attempt)


async def test_wal_mode_synchronous_level_and_clean_close(tmp_path: Path) -> None:
    path = tmp_path / "db.sqlite3"
    store = SqliteStore(path, synchronous="NORMAL")
    async with running(store=store) as engine:
        await enqueue(engine, job())
        assert store._conn is not None
        assert store._conn.execute("PRAGMA synchronous").fetchone()[0] == 1  # NORMAL
    with pytest.raises(RuntimeError):  # closed with the engine
        await store.commit([])
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert conn.execute("SELECT count(*) FROM jobs").fetchone()[0] == 1
    conn.close()
