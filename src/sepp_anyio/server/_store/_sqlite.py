"""SqliteStore: the durable store of the reference server (stdlib ``sqlite3``, WAL mode).

Every blocking call runs in a worker thread (``anyio.to_thread.run_sync``) behind a limiter of
one, so the connection is used by one thread at a time and never on the event loop thread.
With ``synchronous="FULL"`` a commit returns only after the WAL has been fsynced, which is
what makes an acknowledged write survive ``kill -9`` and power loss; ``"NORMAL"`` survives
``kill -9`` but may lose the last transactions on power loss (the ``buffer`` persist mode).

A commit that raises (``database or disk is full``, an I/O error) has been rolled back, by
SQLite itself or by an explicit ``ROLLBACK``, and the connection stays usable: the engine
retries the same writes until they commit (``_committer.py``).

The schema version is kept in ``PRAGMA user_version``.  A database of an older version is
migrated when it is opened (in one transaction, so a failed migration leaves it as it was);
one of a newer or unknown version is refused rather than misread.

Versions: 1, the first; 2 adds the sequence numbers that break ties between rows of one
millisecond (``jobs.enqueue_seq``, ``dead_letters.enqueue_seq`` and
``dead_letters.failure_seq``; see ``_state.py``).  Migrating 1 to 2 numbers the existing
rows in the order version 1 gave them (jobs by ``enqueued_at_ms`` then id, dead letters by
``failed_at_ms``, queue, id), so nothing already stored changes place.
"""

from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import Callable, Sequence
from typing import Any, Literal, final

import anyio
import anyio.to_thread

from sepp_anyio._model._error_root import InvalidArgumentError, InvalidArgumentTypeError

from ._records import (
    CustomValue,
    DeadLetter,
    DeadLetterCause,
    DedupEntry,
    DeleteDeadLetter,
    DeleteDedup,
    DeleteJob,
    JobState,
    PutDeadLetter,
    PutDedup,
    PutJob,
    StoreContents,
    StoredJob,
    Write,
)

SCHEMA_VERSION = 2
Synchronous = Literal["OFF", "NORMAL", "FULL", "EXTRA"]

# The job columns, shared by the jobs table and the dead-letter snapshots.
_JOB_COLUMNS = (
    "id",
    "queue",
    "job_type",
    "state",
    "priority",
    "enqueued_at_ms",
    "attempt",
    "max_attempts",
    "due_ms",
    "lease_expires_at_ms",
    "scheduled_at_ms",
    "payload_data",
    "payload_encoding",
    "traceparent",
    "tracestate",
    "custom",
    "enqueue_seq",
)
_JOB_COLUMN_TYPES = """
    id TEXT PRIMARY KEY NOT NULL,
    queue TEXT NOT NULL,
    job_type TEXT NOT NULL,
    state INTEGER NOT NULL,
    priority INTEGER NOT NULL,
    enqueued_at_ms INTEGER NOT NULL,
    attempt INTEGER NOT NULL,
    max_attempts INTEGER NOT NULL,
    due_ms INTEGER NOT NULL,
    lease_expires_at_ms INTEGER NOT NULL,
    scheduled_at_ms INTEGER,
    payload_data BLOB,
    payload_encoding TEXT,
    traceparent TEXT,
    tracestate TEXT,
    custom TEXT NOT NULL,
    enqueue_seq INTEGER NOT NULL
"""
_SCHEMA = f"""
CREATE TABLE jobs ({_JOB_COLUMN_TYPES});
CREATE TABLE dead_letters ({_JOB_COLUMN_TYPES},
    cause INTEGER NOT NULL,
    failed_at_ms INTEGER NOT NULL,
    final_attempt INTEGER NOT NULL,
    last_reason TEXT,
    failure_seq INTEGER NOT NULL
);
CREATE TABLE dedup (
    queue TEXT NOT NULL,
    key TEXT NOT NULL,
    job_id TEXT NOT NULL,
    enqueued_at_ms INTEGER NOT NULL,
    deadline_ms INTEGER NOT NULL,
    PRIMARY KEY (queue, key)
);
PRAGMA user_version = {SCHEMA_VERSION};
"""
_INSERT_JOB = (
    f"INSERT OR REPLACE INTO jobs ({', '.join(_JOB_COLUMNS)}) "
    f"VALUES ({', '.join('?' * len(_JOB_COLUMNS))})"
)
_UPDATE_JOB = (
    "UPDATE jobs SET state = ?, attempt = ?, due_ms = ?, lease_expires_at_ms = ? WHERE id = ?"
)
_DL_COLUMNS = (
    *_JOB_COLUMNS,
    "cause",
    "failed_at_ms",
    "final_attempt",
    "last_reason",
    "failure_seq",
)
# Version 1 to 2, after which the rows are numbered (``_migrate_1_to_2``).  SQLite wants a
# default for a NOT NULL column added to a table with rows; every row gets a number at once.
_MIGRATE_1_TO_2 = """
ALTER TABLE jobs ADD COLUMN enqueue_seq INTEGER NOT NULL DEFAULT 0;
ALTER TABLE dead_letters ADD COLUMN enqueue_seq INTEGER NOT NULL DEFAULT 0;
ALTER TABLE dead_letters ADD COLUMN failure_seq INTEGER NOT NULL DEFAULT 0;
"""
_INSERT_DEAD_LETTER = (
    f"INSERT OR REPLACE INTO dead_letters ({', '.join(_DL_COLUMNS)}) "
    f"VALUES ({', '.join('?' * len(_DL_COLUMNS))})"
)


def _job_row(job: StoredJob) -> tuple[Any, ...]:
    return (
        job.id,
        job.queue,
        job.job_type,
        int(job.state),
        job.priority,
        job.enqueued_at_ms,
        job.attempt,
        job.max_attempts,
        job.due_ms,
        job.lease_expires_at_ms,
        job.scheduled_at_ms,
        job.payload_data,
        job.payload_encoding,
        job.traceparent,
        job.tracestate,
        # JSON keeps the four value types apart (true/1/1.0/"1"); NaN and infinities use
        # Python's JSON extensions, which json.loads reads back.
        json.dumps(dict(job.custom)),
        job.seq,
    )


def _job_from_row(row: Sequence[Any]) -> StoredJob:
    custom: dict[str, CustomValue] = json.loads(row[15])
    return StoredJob(
        id=row[0],
        queue=row[1],
        job_type=row[2],
        state=JobState(row[3]),
        priority=row[4],
        enqueued_at_ms=row[5],
        seq=row[16],
        attempt=row[6],
        max_attempts=row[7],
        due_ms=row[8],
        lease_expires_at_ms=row[9],
        scheduled_at_ms=row[10],
        payload_data=None if row[11] is None else bytes(row[11]),
        payload_encoding=row[12],
        traceparent=row[13],
        tracestate=row[14],
        custom=tuple(custom.items()),
    )


_DELETE_JOB = "DELETE FROM jobs WHERE id = ?"
_DELETE_DEAD_LETTER = "DELETE FROM dead_letters WHERE id = ?"
_PUT_DEDUP = "INSERT OR REPLACE INTO dedup VALUES (?, ?, ?, ?, ?)"
_DELETE_DEDUP = "DELETE FROM dedup WHERE queue = ? AND key = ?"


def _statement(write: Write) -> tuple[str, tuple[Any, ...]]:
    """The SQL statement (one of the module's constants: compared by identity) and its
    parameters for one write."""
    match write:
        case PutJob(job=job, new=True):
            return _INSERT_JOB, _job_row(job)
        case PutJob(job=job):
            return _UPDATE_JOB, (
                int(job.state),
                job.attempt,
                job.due_ms,
                job.lease_expires_at_ms,
                job.id,
            )
        case DeleteJob(job_id=job_id):
            return _DELETE_JOB, (job_id,)
        case PutDeadLetter(record=r):
            return _INSERT_DEAD_LETTER, (
                *_job_row(r.job),
                int(r.cause),
                r.failed_at_ms,
                r.final_attempt,
                r.last_reason,
                r.seq,
            )
        case DeleteDeadLetter(job_id=job_id):
            return _DELETE_DEAD_LETTER, (job_id,)
        case PutDedup(entry=e):
            return _PUT_DEDUP, (e.queue, e.key, e.job_id, e.enqueued_at_ms, e.deadline_ms)
        case DeleteDedup(queue=queue, key=key):
            return _DELETE_DEDUP, (queue, key)
    raise InvalidArgumentTypeError(f"unknown write {write!r}")


@final
class SqliteStore:
    """A durable :class:`~sepp_anyio.server.Store` in one SQLite file (WAL mode).

    Args:
        path: the database file; created with its schema if missing.
        synchronous: SQLite's ``synchronous`` level; ``"FULL"`` (the default) makes every
            acknowledged write durable, see the module docstring.

    One database must be used by one engine at a time.
    """

    def __init__(self, path: str | os.PathLike[str], *, synchronous: Synchronous = "FULL") -> None:
        if synchronous not in ("OFF", "NORMAL", "FULL", "EXTRA"):
            raise InvalidArgumentError(
                f"synchronous must be OFF, NORMAL, FULL or EXTRA, not {synchronous!r}"
            )
        self.path = os.fspath(path)
        self.synchronous: Synchronous = synchronous
        self._conn: sqlite3.Connection | None = None
        self._limiter: anyio.CapacityLimiter | None = None
        self._transactions = 0
        #: Test seam, not API: called in the commit's worker thread right after ``BEGIN``, so
        #: that a test can make SQLite itself fail the writes on a real database (for
        #: example ``PRAGMA max_page_count`` at the current size: "database or disk is full").
        self._in_transaction_hook: Callable[[sqlite3.Connection], object] | None = None

    @property
    def transactions(self) -> int:
        return self._transactions

    async def open(self) -> StoreContents:
        """Open (creating or migrating) the database and load it (see :meth:`Store.open`).

        Cancellation: the work runs in a worker thread and is not abandoned: the
        cancellation is delivered after it has finished, with the store then open (the
        engine closes it again).

        Raises:
            RuntimeError: the store is already open, or the database's format is not
                supported (or not in WAL mode).
            sqlite3.Error: the file is not a usable database.
        """
        if self._conn is not None:
            raise RuntimeError("this SqliteStore is already open")
        # One thread at a time on the connection; created here because a limiter belongs to
        # the running event loop.
        self._limiter = anyio.CapacityLimiter(1)
        return await anyio.to_thread.run_sync(self._open_sync, limiter=self._limiter)

    def _open_sync(self) -> StoreContents:
        # isolation_level=None: we issue BEGIN/COMMIT ourselves.  check_same_thread=False:
        # worker threads differ between calls, but the limiter serialises them.
        conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        try:
            mode = conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]
            if str(mode).lower() != "wal":
                raise RuntimeError(f"{self.path}: cannot switch SQLite to WAL mode (got {mode})")
            conn.execute(f"PRAGMA synchronous={self.synchronous}")
            conn.execute("PRAGMA busy_timeout=5000")
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            if version == 0:
                conn.executescript(f"BEGIN IMMEDIATE;{_SCHEMA}COMMIT;")
            elif version == 1:
                self._migrate_1_to_2(conn)
            elif version != SCHEMA_VERSION:
                raise RuntimeError(
                    f"{self.path}: database format version {version} is not supported "
                    f"(expected {SCHEMA_VERSION})"
                )
            contents = self._load(conn)
        except BaseException:
            conn.close()
            raise
        self._conn = conn
        return contents

    @staticmethod
    def _migrate_1_to_2(conn: sqlite3.Connection) -> None:
        conn.execute("BEGIN IMMEDIATE")
        try:
            for statement in _MIGRATE_1_TO_2.split(";"):
                if statement.strip():
                    conn.execute(statement)
            # One counter for both tables, as in the engine; the order is version 1's.
            jobs = conn.execute("SELECT id FROM jobs ORDER BY enqueued_at_ms, id").fetchall()
            conn.executemany(
                "UPDATE jobs SET enqueue_seq = ? WHERE id = ?",
                [(seq, job_id) for seq, (job_id,) in enumerate(jobs, start=1)],
            )
            dead = conn.execute(
                "SELECT id FROM dead_letters ORDER BY failed_at_ms, queue, id"
            ).fetchall()
            conn.executemany(
                "UPDATE dead_letters SET failure_seq = ? WHERE id = ?",
                [(seq, job_id) for seq, (job_id,) in enumerate(dead, start=len(jobs) + 1)],
            )
            conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise

    @staticmethod
    def _load(conn: sqlite3.Connection) -> StoreContents:
        columns = ", ".join(_JOB_COLUMNS)
        jobs = [_job_from_row(row) for row in conn.execute(f"SELECT {columns} FROM jobs")]
        dead_letters = [
            DeadLetter(
                job=_job_from_row(row),
                cause=DeadLetterCause(row[17]),
                failed_at_ms=row[18],
                final_attempt=row[19],
                last_reason=row[20],
                seq=row[21],
            )
            for row in conn.execute(f"SELECT {', '.join(_DL_COLUMNS)} FROM dead_letters")
        ]
        dedup = [
            DedupEntry(
                queue=row[0], key=row[1], job_id=row[2], enqueued_at_ms=row[3], deadline_ms=row[4]
            )
            for row in conn.execute(
                "SELECT queue, key, job_id, enqueued_at_ms, deadline_ms FROM dedup"
            )
        ]
        return StoreContents(jobs=jobs, dead_letters=dead_letters, dedup=dedup)

    async def commit(self, writes: Sequence[Write]) -> None:
        """Apply *writes* in one transaction (see :meth:`Store.commit`).

        Cancellation: the transaction runs in a worker thread and is not abandoned; the
        cancellation is delivered after it has committed or rolled back, so the caller
        never leaves a transaction half done.

        Raises:
            RuntimeError: the store is not open.
            sqlite3.Error: the transaction failed (it was rolled back).
        """
        if self._conn is None or self._limiter is None:
            raise RuntimeError("this SqliteStore is not open")
        await anyio.to_thread.run_sync(self._commit_sync, self._conn, writes, limiter=self._limiter)
        self._transactions += 1

    def _commit_sync(self, conn: sqlite3.Connection, writes: Sequence[Write]) -> None:
        conn.execute("BEGIN IMMEDIATE")
        try:
            if self._in_transaction_hook is not None:
                self._in_transaction_hook(conn)
            # Consecutive writes of one kind (a batch of enqueues, a stream of acks) go to
            # SQLite as one executemany: the order of writes is kept, the per-statement
            # Python overhead is not paid per row.
            statement = ""
            rows: list[tuple[Any, ...]] = []
            for write in writes:
                sql, row = _statement(write)
                if sql is not statement:
                    if rows:
                        conn.executemany(statement, rows)
                    statement, rows = sql, []
                rows.append(row)
            if rows:
                conn.executemany(statement, rows)
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise

    async def aclose(self) -> None:
        """Close the database connection.  Idempotent.

        Cancellation: the close runs in a worker thread and is not abandoned; the store is
        closed either way.
        """
        conn, self._conn = self._conn, None
        if conn is not None:
            await anyio.to_thread.run_sync(conn.close, limiter=self._limiter)
