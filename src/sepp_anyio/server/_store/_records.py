"""The engine's own records: jobs, dead letters, dedup rows, and the row-level writes a store
commits.  All are immutable, so a write can hold a record while the engine moves on.

Times are integer milliseconds since the epoch.  None of these types mention protobuf: the
stores depend only on this module.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

#: A custom-map value: the Python type is the protobuf branch (``bool`` before ``int``).
CustomValue = str | float | int | bool


class JobState(enum.IntEnum):
    """Where a live job is (its number is what the SQLite store persists)."""

    READY = 0
    SCHEDULED = 1
    INFLIGHT = 2


class DeadLetterCause(enum.IntEnum):
    """Mirror of ``sepp.v1.DeadLetterCause`` (same numbers)."""

    UNSPECIFIED = 0
    ATTEMPTS_EXHAUSTED = 1
    REJECTED = 2
    LEASE_EXPIRED = 3
    ADMIN = 4


@dataclass(frozen=True, slots=True, kw_only=True)
class StoredJob:
    """One live job (ready, scheduled or inflight), or a dead letter's snapshot of it."""

    #: Lowercase canonical UUID v4.
    id: str
    queue: str
    job_type: str
    state: JobState
    #: 0-9, higher served first.
    priority: int
    #: Commit time of the enqueue; the FIFO sort key, kept across requeues.
    enqueued_at_ms: int
    #: The engine-wide enqueue sequence number (see :meth:`ready_key`): larger for every
    #: later insertion, persisted, kept across requeues.
    seq: int
    #: Ready/scheduled: the attempt number of the next delivery.  Inflight: the current one.
    attempt: int
    max_attempts: int
    #: When a scheduled job becomes ready; 0 in the other states.
    due_ms: int = 0
    #: The lease deadline while in flight; in the other states the last lease's, or 0 if
    #: never reserved (the epoch-0 placeholder that shows in dead letters of never-reserved
    #: jobs).
    lease_expires_at_ms: int = 0
    #: The enqueue's ``scheduled_at`` (ms), echoed back on delivery; None if not given.
    scheduled_at_ms: int | None = None
    #: None when the job was enqueued without payload.
    payload_data: bytes | None = field(default=None, repr=False)
    payload_encoding: str | None = None
    #: None when the job has no trace context.
    traceparent: str | None = None
    tracestate: str | None = None
    #: Sorted by key.
    custom: tuple[tuple[str, CustomValue], ...] = ()

    @property
    def ready_key(self) -> tuple[int, int, int, str]:
        """Order within a queue: priority 9 first, then FIFO by enqueued_at, then by enqueue
        sequence.

        The sequence breaks ties between jobs enqueued in the same millisecond (a batch, or
        RPCs close together) by their order of insertion; the random v4 id would give a
        random order.  The id is last only to name the job: sequences are unique.
        """
        return (9 - self.priority, self.enqueued_at_ms, self.seq, self.id)


@dataclass(frozen=True, slots=True, kw_only=True)
class DeadLetter:
    """A dead-lettered job's record (kept only when retention is enabled)."""

    #: Snapshot with ``attempt`` = the final attempt.
    job: StoredJob
    cause: DeadLetterCause
    failed_at_ms: int
    final_attempt: int
    #: The engine-wide sequence number taken when the job failed (the same counter as
    #: :attr:`StoredJob.seq`): orders dead letters that failed in the same millisecond.
    seq: int
    last_reason: str | None = None

    @property
    def order_key(self) -> tuple[int, int, str, str]:
        """Drain and retention order: oldest ``failed_at`` first, then in order of failure.

        The queue and id follow only to filter by queue and name the record: sequences are
        unique, so they never decide the order.
        """
        return (self.failed_at_ms, self.seq, self.job.queue, self.job.id)


@dataclass(frozen=True, slots=True, kw_only=True)
class DedupEntry:
    """An idempotency row: ``(queue, key)`` maps to ``job_id`` until ``deadline_ms``."""

    queue: str
    key: str
    job_id: str
    enqueued_at_ms: int
    deadline_ms: int


@dataclass(frozen=True, slots=True)
class QueueStats:
    """Per-queue counts, for tests, the CLI and metrics."""

    ready: int = 0
    scheduled: int = 0
    inflight: int = 0
    dead_letters: int = 0

    @property
    def live_depth(self) -> int:
        """Ready + scheduled + inflight: what ``max_queue_depth`` caps."""
        return self.ready + self.scheduled + self.inflight


# Row-level writes.  A store applies a sequence of them, in order, in one transaction.


@dataclass(frozen=True, slots=True)
class PutJob:
    """Insert (``new``) or update a job row.  An update only changes state, attempt, due_ms
    and lease_expires_at_ms: the other fields never change after insertion."""

    job: StoredJob
    new: bool = False


@dataclass(frozen=True, slots=True)
class DeleteJob:
    job_id: str


@dataclass(frozen=True, slots=True)
class PutDeadLetter:
    record: DeadLetter


@dataclass(frozen=True, slots=True)
class DeleteDeadLetter:
    job_id: str


@dataclass(frozen=True, slots=True)
class PutDedup:
    """Insert or replace the row of ``(entry.queue, entry.key)``."""

    entry: DedupEntry


@dataclass(frozen=True, slots=True)
class DeleteDedup:
    queue: str
    key: str


Write = PutJob | DeleteJob | PutDeadLetter | DeleteDeadLetter | PutDedup | DeleteDedup


@dataclass(frozen=True, slots=True)
class StoreContents:
    """Everything a store holds, as loaded at engine start."""

    jobs: list[StoredJob] = field(default_factory=list)
    dead_letters: list[DeadLetter] = field(default_factory=list)
    dedup: list[DedupEntry] = field(default_factory=list)
