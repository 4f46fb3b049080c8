"""The in-memory queue state: every job, dead letter and dedup row, and their indexes.

Theory of operation
-------------------
This module is synchronous and knows nothing of RPCs, config or protobuf.  Every mutation
updates the indexes at once and records what happened in a :class:`Changes`:

* ``writes``: the row-level writes the store must commit before anybody is told;
* ``ready_queues``: queues that gained a ready job, whose parked reserves must be woken once
  those writes are committed;
* ``earliest_deadline``: the earliest new timer deadline, so the timer can be woken early.

Indexes (``heapq``; lazy deletion where entries can go stale):

* per queue, a ready heap keyed ``(9 - priority, enqueued_at_ms, seq, job_id)``.  A job
  enters it only from another state and leaves it only by being popped, so it holds no stale
  entries;
* one scheduled heap ``(due_ms, seq, job_id)``, same property;
* one lease heap ``(lease_expires_at_ms, seq, job_id)``: ack/nack/extend leave stale
  entries, recognised on pop because the job is gone or has another deadline;
* one dedup heap ``(deadline_ms, queue, key)``, stale once a row is replaced;
* dead letters: a sorted list of ``(failed_at_ms, seq, queue, job_id)`` (drain removes from
  the middle, so a heap would not do).

Sequence numbers
----------------
Times are whole milliseconds, so many jobs share one (a batch always does) and many dead
letters do (a sweep expiring a batch's leases, a burst of nacks).  Where an order is promised
(FIFO within a priority, §3.3; dead letters oldest first, §3.9) the tie-break is therefore a
sequence number, never the random job id: every insertion takes one (``StoredJob.seq``, kept
across requeues) and so does every dead-lettering (``DeadLetter.seq``).  Both come from one
counter, persisted in the rows themselves; :meth:`QueueState.load` resumes it above the
largest number found, so it grows over every row that exists, across restarts.  (A number
freed by a deleted row may be taken again after a restart; nothing compares against a row
that is gone.)  The lease and scheduled heaps use it too, so timers that fire in the same
millisecond are handled in a reproducible order (a batch's leases expire in reserve order).

Invariant: ``QueueCounts`` match the number of jobs per queue and state.
"""

from __future__ import annotations

import bisect
import heapq
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace

from .._store._records import (
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
    QueueStats,
    StoreContents,
    StoredJob,
    Write,
)


@dataclass(slots=True)
class Changes:
    """What one operation did, for the committer and the timer (see the module docstring)."""

    writes: list[Write] = field(default_factory=list)
    ready_queues: set[str] = field(default_factory=set)
    earliest_deadline: int | None = None

    def deadline(self, ms: int) -> None:
        if self.earliest_deadline is None or ms < self.earliest_deadline:
            self.earliest_deadline = ms


@dataclass(slots=True)
class _Queue:
    ready: list[tuple[int, int, int, str]] = field(default_factory=list)
    scheduled: int = 0
    inflight: int = 0
    dead_letters: int = 0
    #: An admin delete is in progress: enqueues are refused with QueueClosing.
    closing: bool = False
    #: The ids of the queue's live jobs in order of insertion (a dict as an ordered set):
    #: lets the console list one queue's jobs without walking every queue's.
    ids: dict[str, None] = field(default_factory=dict)

    def count(self, state: JobState, delta: int) -> None:
        # The ready count is the heap's length; only the other two are counters.
        if state is JobState.SCHEDULED:
            self.scheduled += delta
        elif state is JobState.INFLIGHT:
            self.inflight += delta

    @property
    def live_depth(self) -> int:
        return len(self.ready) + self.scheduled + self.inflight


class QueueState:
    """All live data of one engine.  Not thread-safe; used from the engine's event loop."""

    def __init__(self, *, dead_letter_retention_ms: int) -> None:
        #: 0 disables the dead-letter store (dead-letter paths just delete the job).
        self.retention_ms = dead_letter_retention_ms
        self._jobs: dict[str, StoredJob] = {}
        self._queues: dict[str, _Queue] = {}
        self._scheduled: list[tuple[int, int, str]] = []
        self._leases: list[tuple[int, int, str]] = []
        self._dedup: dict[tuple[str, str], DedupEntry] = {}
        self._dedup_timers: list[tuple[int, str, str]] = []
        #: job id -> its idempotency key, while the key's row lives (the console shows it).
        self._key_of: dict[str, str] = {}
        self._dead: dict[str, DeadLetter] = {}
        self._dead_order: list[tuple[int, int, str, str]] = []
        #: The next sequence number (see the module docstring).
        self._next_seq = 1

    # ------------------------------------------------------------------ loading, queries

    def load(self, contents: StoreContents) -> None:
        """Rebuild every index from a store's contents (engine start)."""
        self._next_seq = 1 + max(
            (
                *(job.seq for job in contents.jobs),
                *(record.seq for record in contents.dead_letters),
                *(record.job.seq for record in contents.dead_letters),
            ),
            default=0,
        )
        for job in contents.jobs:
            self._place(job)
        for entry in contents.dedup:
            self._dedup[entry.queue, entry.key] = entry
            self._key_of[entry.job_id] = entry.key
            heapq.heappush(self._dedup_timers, (entry.deadline_ms, entry.queue, entry.key))
        for record in contents.dead_letters:
            self._add_dead_letter(record)

    def take_seq(self) -> int:
        """A new sequence number, larger than every one in use (see the module docstring)."""
        seq = self._next_seq
        self._next_seq += 1
        return seq

    def _queue(self, name: str) -> _Queue:
        queue = self._queues.get(name)
        if queue is None:
            queue = self._queues[name] = _Queue()
        return queue

    def job(self, job_id: str) -> StoredJob | None:
        """The live job with this (lowercase) id, in any state."""
        return self._jobs.get(job_id)

    def inflight(self, job_id: str) -> StoredJob | None:
        """The job if it is inflight, else None."""
        job = self._jobs.get(job_id)
        return job if job is not None and job.state is JobState.INFLIGHT else None

    def live_depth(self, queue: str) -> int:
        q = self._queues.get(queue)
        return 0 if q is None else q.live_depth

    def is_closing(self, queue: str) -> bool:
        q = self._queues.get(queue)
        return q is not None and q.closing

    def set_closing(self, queue: str, closing: bool) -> None:
        self._queue(queue).closing = closing

    def dedup_hit(self, queue: str, key: str, now: int) -> DedupEntry | None:
        """The dedup row of ``(queue, key)`` if it is still inside its window at *now*."""
        entry = self._dedup.get((queue, key))
        return entry if entry is not None and now < entry.deadline_ms else None

    def stats(self, extra_queues: Iterable[str] = ()) -> dict[str, QueueStats]:
        """Counts per queue, for every queue seen so far and every name in *extra_queues*."""
        names = sorted(set(self._queues).union(extra_queues))
        out: dict[str, QueueStats] = {}
        for name in names:
            q = self._queues.get(name) or _Queue()
            out[name] = QueueStats(len(q.ready), q.scheduled, q.inflight, q.dead_letters)
        return out

    def dead_letters(self, queue: str | None = None) -> list[DeadLetter]:
        """Dead letters oldest first, without removing them."""
        return [
            self._dead[job_id]
            for _, _, q, job_id in self._dead_order
            if queue is None or q == queue
        ]

    def idempotency_key(self, job_id: str) -> str | None:
        """The idempotency key the job was enqueued with, while its dedup row lives."""
        return self._key_of.get(job_id)

    def queue_job_ids(self, queue: str) -> Iterable[str]:
        """The ids of *queue*'s live jobs, oldest insertion first (a live view: iterate it
        without mutating the state in between)."""
        q = self._queues.get(queue)
        return () if q is None else q.ids.keys()

    def dead_letter_order(self) -> Sequence[tuple[int, int, str, str]]:
        """The dead letters' order keys, oldest first (a live view, see above)."""
        return self._dead_order

    def dead_letter_of(self, job_id: str) -> DeadLetter | None:
        """The dead letter of the job with this (lowercase) id, or None."""
        return self._dead.get(job_id)

    def remove_dead_letter(self, job_id: str, ch: Changes) -> DeadLetter | None:
        """Delete the dead letter of *job_id* (console requeue and purge); None if absent."""
        record = self._dead.get(job_id)
        if record is None:
            return None
        return self._delete_dead_letter(record.order_key, ch)

    def next_deadline(self) -> int | None:
        """Earliest pending timer deadline (may be a stale entry's: waking early is harmless)."""
        candidates = [heap[0][0] for heap in (self._scheduled, self._leases) if heap]
        if self._dedup_timers:
            candidates.append(self._dedup_timers[0][0])
        if self._dead_order:
            candidates.append(self._dead_order[0][0] + self.retention_ms)
        return min(candidates, default=None)

    # ------------------------------------------------------------------ placement

    def _place(self, job: StoredJob) -> None:
        """Index *job* (already in its final state) as live."""
        self._jobs[job.id] = job
        queue = self._queue(job.queue)
        queue.ids[job.id] = None
        if job.state is JobState.READY:
            heapq.heappush(queue.ready, job.ready_key)
        elif job.state is JobState.SCHEDULED:
            queue.scheduled += 1
            heapq.heappush(self._scheduled, (job.due_ms, job.seq, job.id))
        else:
            queue.inflight += 1
            heapq.heappush(self._leases, (job.lease_expires_at_ms, job.seq, job.id))

    def _move(self, job: StoredJob, new: StoredJob, ch: Changes) -> StoredJob:
        """Replace live *job* by *new*, a changed copy of it (its new state is indexed)."""
        self._queue(job.queue).count(job.state, -1)
        self._jobs.pop(job.id)
        self._place(new)
        ch.writes.append(PutJob(new))
        if new.state is JobState.READY:
            ch.ready_queues.add(new.queue)
        elif new.state is JobState.SCHEDULED:
            ch.deadline(new.due_ms)
        else:
            ch.deadline(new.lease_expires_at_ms)
        return new

    def _remove(self, job: StoredJob, ch: Changes) -> None:
        """Forget live *job* (acked or dead-lettered).  Its heap entries go stale."""
        self._jobs.pop(job.id)
        queue = self._queue(job.queue)
        queue.count(job.state, -1)
        queue.ids.pop(job.id, None)
        ch.writes.append(DeleteJob(job.id))

    # ------------------------------------------------------------------ mutations

    def insert(self, job: StoredJob, ch: Changes, dedup: DedupEntry | None = None) -> None:
        """Add a new ready or scheduled job, with its dedup row if it has a key."""
        self._place(job)
        ch.writes.append(PutJob(job, new=True))
        if job.state is JobState.READY:
            ch.ready_queues.add(job.queue)
        else:
            ch.deadline(job.due_ms)
        if dedup is not None:
            # Replaces a stale row of the same key, if any (its timer entry goes stale).
            self._dedup[dedup.queue, dedup.key] = dedup
            self._key_of[dedup.job_id] = dedup.key
            heapq.heappush(self._dedup_timers, (dedup.deadline_ms, dedup.queue, dedup.key))
            ch.writes.append(PutDedup(dedup))
            ch.deadline(dedup.deadline_ms)

    def reserve(
        self, queues: Sequence[str], lease_ms: int, max_jobs: int, now: int, ch: Changes
    ) -> list[StoredJob]:
        """Lease up to *max_jobs* ready jobs, walking *queues* in order (best key first)."""
        reserved: list[StoredJob] = []
        for name in queues:
            queue = self._queues.get(name)
            while queue is not None and queue.ready and len(reserved) < max_jobs:
                *_, job_id = heapq.heappop(queue.ready)
                job = self._jobs[job_id]
                # _move would push the ready entry back; adjust the heap by hand instead.
                queue.inflight += 1
                leased = replace(job, state=JobState.INFLIGHT, lease_expires_at_ms=now + lease_ms)
                self._jobs[job_id] = leased
                heapq.heappush(self._leases, (leased.lease_expires_at_ms, leased.seq, job_id))
                ch.writes.append(PutJob(leased))
                ch.deadline(leased.lease_expires_at_ms)
                reserved.append(leased)
            if len(reserved) >= max_jobs:
                break
        return reserved

    def ack(self, job: StoredJob, ch: Changes) -> None:
        """Delete an inflight job.  Its dedup row stays until its own deadline."""
        self._remove(job, ch)

    def extend(self, job: StoredJob, lease_expires_at_ms: int, ch: Changes) -> StoredJob:
        """Move an inflight job's lease deadline (the attempt is unchanged)."""
        return self._move(job, replace(job, lease_expires_at_ms=lease_expires_at_ms), ch)

    def requeue(self, job: StoredJob, now: int, delay_ms: int, ch: Changes) -> StoredJob:
        """Give an inflight job back for its next attempt, at its original queue position.

        With a delay it waits in the scheduled set until ``now + delay_ms``.
        """
        if delay_ms > 0:
            new = replace(
                job, state=JobState.SCHEDULED, attempt=job.attempt + 1, due_ms=now + delay_ms
            )
        else:
            new = replace(job, state=JobState.READY, attempt=job.attempt + 1, due_ms=0)
        return self._move(job, new, ch)

    def dead_letter(
        self,
        job: StoredJob,
        cause: DeadLetterCause,
        reason: str | None,
        now: int,
        ch: Changes,
    ) -> None:
        """Remove a job for good, keeping a record if retention is enabled."""
        self._remove(job, ch)
        if self.retention_ms <= 0:
            return
        record = DeadLetter(
            job=job,
            cause=cause,
            failed_at_ms=now,
            final_attempt=job.attempt,
            seq=self.take_seq(),
            last_reason=reason,
        )
        self._add_dead_letter(record)
        ch.writes.append(PutDeadLetter(record))
        ch.deadline(now + self.retention_ms)

    def _add_dead_letter(self, record: DeadLetter) -> None:
        self._dead[record.job.id] = record
        bisect.insort(self._dead_order, record.order_key)
        self._queue(record.job.queue).dead_letters += 1

    def _delete_dead_letter(self, key: tuple[int, int, str, str], ch: Changes) -> DeadLetter:
        index = bisect.bisect_left(self._dead_order, key)
        del self._dead_order[index]
        record = self._dead.pop(key[3])
        self._queue(record.job.queue).dead_letters -= 1
        ch.writes.append(DeleteDeadLetter(record.job.id))
        return record

    def drain(
        self, queue: str | None, max_records: int, examine_limit: int, ch: Changes
    ) -> list[DeadLetter]:
        """Remove and return up to *max_records* dead letters, oldest first.

        At most *examine_limit* records are looked at, so a filtered drain can come back short
        while matching records remain further on (as in the real server).
        """
        chosen = [
            key for key in self._dead_order[:examine_limit] if queue is None or key[2] == queue
        ][:max_records]
        return [self._delete_dead_letter(key, ch) for key in chosen]

    # ------------------------------------------------------------------ the sweep

    def sweep(self, now: int, limit: int, ch: Changes) -> bool:
        """Handle every deadline that has passed at *now*, at most *limit* items per phase.

        Phases: scheduled promotion, lease expiry, dedup expiry, dead-letter retention.
        Returns True if a phase stopped at *limit* (more work is due right away).
        """
        more = False
        done = 0
        while self._scheduled and self._scheduled[0][0] <= now and done < limit:
            due, _, job_id = heapq.heappop(self._scheduled)
            job = self._jobs.get(job_id)
            if job is None or job.state is not JobState.SCHEDULED or job.due_ms != due:
                continue
            # Promotion keeps the original enqueued_at: the job goes back to its old place.
            self._move(job, replace(job, state=JobState.READY, due_ms=0), ch)
            done += 1
        more |= done >= limit

        done = 0
        while self._leases and self._leases[0][0] <= now and done < limit:
            expires, _, job_id = heapq.heappop(self._leases)
            job = self._jobs.get(job_id)
            if job is None or job.state is not JobState.INFLIGHT:
                continue
            if job.lease_expires_at_ms != expires:
                continue
            if job.attempt >= job.max_attempts:
                self.dead_letter(job, DeadLetterCause.LEASE_EXPIRED, None, now, ch)
            else:
                self.requeue(job, now, 0, ch)
            done += 1
        more |= done >= limit

        done = 0
        while self._dedup_timers and self._dedup_timers[0][0] <= now and done < limit:
            deadline, queue, key = heapq.heappop(self._dedup_timers)
            entry = self._dedup.get((queue, key))
            if entry is None or entry.deadline_ms != deadline:
                continue
            del self._dedup[queue, key]
            self._key_of.pop(entry.job_id, None)
            ch.writes.append(DeleteDedup(queue, key))
            done += 1
        more |= done >= limit

        # With retention disabled no record is ever added, but records loaded from a store
        # written with retention enabled expire here at once (failed_at + 0 has passed).
        done = 0
        while (
            self._dead_order and self._dead_order[0][0] + self.retention_ms <= now and done < limit
        ):
            self._delete_dead_letter(self._dead_order[0], ch)
            done += 1
        more |= done >= limit
        return more
