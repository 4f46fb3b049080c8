"""What the web console reads and does beyond the RPCs: bounded listings, rates, lease
holders, and the dead-letter actions (requeue, purge).

Reading: every function here is synchronous and reads the in-memory state directly, so a
page never waits for the engine and never holds anything across an await.  A listing looks
at no more than ``scan_limit`` entries, whatever filter is given, and returns where to go on
(``next_cursor``): its cost is bounded by its page, not by the size of the queue.

Acting: requeue and purge build their :class:`~._state.Changes` here; the engine submits
them through its committer exactly as an RPC's (one store transaction per call, answered
once durable), so the store records a requeue as a dead letter deleted and a job inserted.

Rates count enqueues, acks and nacks per queue in one-second buckets over the last minute
(:data:`RATE_WINDOW_S`); memory is bounded by the number of queues times the window.
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, replace

from .._store._records import DeadLetter, JobState, StoredJob
from ._state import Changes, QueueState

__all__ = [
    "RATE_WINDOW_S",
    "Activity",
    "DeadLetterPage",
    "JobPage",
    "LeaseHolders",
    "list_dead_letters",
    "list_jobs",
    "oldest_ready_ms",
    "purge",
    "requeue",
]

#: Seconds the console's rates cover.
RATE_WINDOW_S = 60
#: The lease-holder table is first pruned at this size.
_MIN_PRUNE = 64
#: The counted operations.
KINDS = ("enqueue", "ack", "nack")


@dataclass(frozen=True, slots=True)
class JobPage:
    """One page of a queue's live jobs; ``next_cursor`` is None at the end."""

    jobs: tuple[StoredJob, ...]
    next_cursor: int | None


@dataclass(frozen=True, slots=True)
class DeadLetterPage:
    """One page of dead letters, oldest first; ``next_cursor`` is None at the end."""

    records: tuple[DeadLetter, ...]
    next_cursor: int | None


class Activity:
    """Per-queue counts of enqueues, acks and nacks in one-second buckets."""

    def __init__(self, window_s: int = RATE_WINDOW_S) -> None:
        self._window = window_s
        #: queue -> kind -> deque of [second, count], oldest first.
        self._buckets: dict[str, dict[str, deque[list[int]]]] = {}

    def record(self, queue: str, kind: str, now_ms: int, count: int = 1) -> None:
        second = now_ms // 1000
        kinds = self._buckets.get(queue)
        if kinds is None:  # (not setdefault: that would build the default on every call)
            kinds = self._buckets[queue] = {k: deque() for k in KINDS}
        buckets = kinds[kind]
        if buckets and buckets[-1][0] == second:
            buckets[-1][1] += count  # (within the newest second: nothing to trim)
        else:
            buckets.append([second, count])
            self._trim(buckets, second)

    def _trim(self, buckets: deque[list[int]], second: int) -> None:
        while buckets and buckets[0][0] <= second - self._window:
            buckets.popleft()

    def per_minute(self, queue: str, now_ms: int) -> dict[str, int]:
        """The counts of the last :data:`RATE_WINDOW_S` seconds, by kind."""
        second = now_ms // 1000
        kinds = self._buckets.get(queue)
        out = dict.fromkeys(KINDS, 0)
        if kinds is None:
            return out
        for kind, buckets in kinds.items():
            self._trim(buckets, second)
            out[kind] = sum(count for _, count in buckets)
        return out


class LeaseHolders:
    """The worker id each lease was granted to (``ReserveRequest.worker_id``).

    Not persisted (a restart forgets it, as it forgets who was connected).  Entries of jobs
    that are no longer leased are pruned whenever the table has doubled since the last
    pruning, so it stays proportional to the jobs in flight at amortised constant cost.
    """

    def __init__(self) -> None:
        self._holders: dict[str, tuple[str, int]] = {}
        self._prune_at = _MIN_PRUNE

    def leased(self, jobs: Iterable[StoredJob], worker_id: str | None, state: QueueState) -> None:
        if not worker_id:
            return
        for job in jobs:
            self._holders[job.id] = (worker_id, job.lease_expires_at_ms)
        if len(self._holders) >= self._prune_at:
            self._holders = {
                job_id: held
                for job_id, held in self._holders.items()
                if state.inflight(job_id) is not None
            }
            self._prune_at = max(_MIN_PRUNE, 2 * len(self._holders))

    def holder(self, job: StoredJob) -> str | None:
        """The worker id holding *job*'s current lease, if it is leased and one was given."""
        if job.state is not JobState.INFLIGHT:
            return None
        held = self._holders.get(job.id)
        return held[0] if held is not None else None


def list_jobs(
    state: QueueState,
    queue: str,
    *,
    states: frozenset[JobState] | None,
    job_type: str | None,
    cursor: int,
    page_size: int,
    scan_limit: int,
) -> JobPage:
    """Up to *page_size* of *queue*'s live jobs matching the filters, in insertion order,
    from position *cursor*, looking at no more than *scan_limit* jobs."""
    ids = state.queue_job_ids(queue)
    found: list[StoredJob] = []
    position = cursor
    for job_id in itertools.islice(ids, cursor, cursor + scan_limit):
        position += 1
        job = state.job(job_id)
        if job is None:  # pragma: no cover (the index and the jobs agree)
            continue
        if (states is None or job.state in states) and (
            job_type is None or job.job_type == job_type
        ):
            found.append(job)
            if len(found) >= page_size:
                break
    return JobPage(tuple(found), position if position < state.live_depth(queue) else None)


def oldest_ready_ms(state: QueueState, queue: str, scan_limit: int) -> int | None:
    """The ``enqueued_at_ms`` of *queue*'s oldest ready job, None if it has none.

    Insertion order is enqueue order (requeues keep their place), so the first ready job in
    it is the oldest; at most *scan_limit* jobs are looked at (None past them).
    """
    for job_id in itertools.islice(state.queue_job_ids(queue), scan_limit):
        job = state.job(job_id)
        if job is not None and job.state is JobState.READY:
            return job.enqueued_at_ms
    return None


def list_dead_letters(
    state: QueueState,
    queue: str | None,
    *,
    cursor: int,
    page_size: int,
    scan_limit: int,
) -> DeadLetterPage:
    """Up to *page_size* dead letters (of *queue*, or all), oldest first, from position
    *cursor*, looking at no more than *scan_limit* records."""
    order = state.dead_letter_order()
    found: list[DeadLetter] = []
    position = cursor
    for key in order[cursor : cursor + scan_limit]:
        position += 1
        if queue is not None and key[2] != queue:
            continue
        record = state.dead_letter_of(key[3])
        if record is not None:
            found.append(record)
            if len(found) >= page_size:
                break
    return DeadLetterPage(tuple(found), position if position < len(order) else None)


def _chosen(
    state: QueueState, queue: str | None, job_id: str | None, limit: int
) -> list[DeadLetter]:
    if job_id is not None:
        record = state.dead_letter_of(job_id)
        if record is None or (queue is not None and record.job.queue != queue):
            return []
        return [record]
    return [
        record
        for key in state.dead_letter_order()[:limit]
        if (queue is None or key[2] == queue) and (record := state.dead_letter_of(key[3]))
    ]


def requeue(
    state: QueueState,
    queue: str | None,
    job_id: str | None,
    now: int,
    limit: int,
    ch: Changes,
) -> list[StoredJob]:
    """Give dead letters back as new ready jobs: one (*job_id*) or up to *limit* of *queue*.

    The job keeps its id, type, payload, priority, custom map and trace context; it starts
    again at attempt 1, enqueued now (at the back of its priority).
    """
    jobs = []
    for record in _chosen(state, queue, job_id, limit):
        state.remove_dead_letter(record.job.id, ch)
        job = replace(
            record.job,
            state=JobState.READY,
            attempt=1,
            enqueued_at_ms=now,
            seq=state.take_seq(),
            due_ms=0,
            lease_expires_at_ms=0,
        )
        state.insert(job, ch)
        jobs.append(job)
    return jobs


def purge(
    state: QueueState, queue: str | None, job_id: str | None, limit: int, ch: Changes
) -> list[DeadLetter]:
    """Delete dead letters for good: one (*job_id*) or up to *limit* of *queue*."""
    return [
        removed
        for record in _chosen(state, queue, job_id, limit)
        if (removed := state.remove_dead_letter(record.job.id, ch)) is not None
    ]
