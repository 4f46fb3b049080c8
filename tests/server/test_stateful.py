"""A Hypothesis state machine: random enqueue / reserve / ack / nack / extend / drain / time
steps against a plain model of the queue.

The engine runs in a blocking portal (its own event loop thread, one per example), so the
state machine itself stays synchronous; time is a ManualClock, so leases, delays and dedup
windows expire exactly when the model says.

Invariants: no job is lost or duplicated (every job is live with the model's state, or acked,
or dead-lettered), attempts only grow, and every reserve returns exactly the jobs the model
predicts, in priority / FIFO / enqueue order, and every drain the dead letters in order of
failure.  The model numbers insertions and failures itself; the engine's ids are made
sequential too (for replays), but only the model's numbers decide an order.
"""

from __future__ import annotations

import datetime
import itertools
import random
import uuid
from collections import Counter
from dataclasses import dataclass
from typing import Any, ClassVar

import pytest
from anyio.from_thread import BlockingPortal, start_blocking_portal
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from sepp_anyio import StatusCode
from sepp_anyio._proto.google.protobuf import Empty
from sepp_anyio._proto.sepp import v1 as pb
from sepp_anyio.server import (
    Engine,
    EngineError,
    JobState,
    LimitsConfig,
    ManualClock,
    QueueStats,
    ServerConfig,
    StorageConfig,
)
from sepp_anyio.server._engine._engine import rpc_of

from ._helpers import T0, td, ts

QUEUES = ("a", "b")
DEDUP_WINDOW_MS = 5000
CONFIG = ServerConfig(
    limits=LimitsConfig(default_max_attempts=2),
    storage=StorageConfig(
        dead_letter_retention_ms=10**10, dedup_window_ms=DEDUP_WINDOW_MS, sweep_interval_ms=700
    ),
)
LIVE = {"ready": JobState.READY, "scheduled": JobState.SCHEDULED, "inflight": JobState.INFLIGHT}
CAUSES = {
    "REJECTED": pb.DeadLetterCause.REJECTED,
    "ATTEMPTS_EXHAUSTED": pb.DeadLetterCause.ATTEMPTS_EXHAUSTED,
    "LEASE_EXPIRED": pb.DeadLetterCause.LEASE_EXPIRED,
}


@dataclass
class ModelJob:
    id: str
    queue: str
    priority: int
    enqueued_at: int
    #: Order of insertion (the engine's enqueue sequence).
    seq: int
    max_attempts: int
    attempt: int = 1
    #: ready | scheduled | inflight | acked | dead | drained
    state: str = "ready"
    due: int = 0
    lease: int = 0
    cause: str = ""
    failed_at: int = 0
    #: Order of failure (the engine's dead-letter sequence).
    failure_seq: int = 0

    @property
    def ready_key(self) -> tuple[int, int, int]:
        return (9 - self.priority, self.enqueued_at, self.seq)

    def dead(self, cause: str, now: int, failure_seq: int) -> None:
        self.state, self.cause, self.failed_at = "dead", cause, now
        self.failure_seq = failure_seq


JOB_SPEC = st.tuples(
    st.sampled_from(QUEUES),
    st.none() | st.integers(0, 9),  # priority
    st.sampled_from([None, "k1", "k2"]),  # idempotency key
    st.sampled_from([None, -1000, 0, 500, 2000]),  # scheduled_at relative to now (ms)
    st.sampled_from([None, 1, 2, 3]),  # max_attempts
)


class EngineMachine(RuleBasedStateMachine):
    backend: ClassVar[str] = "trio"

    def __init__(self) -> None:
        super().__init__()
        self._portal_cm = start_blocking_portal(self.backend)
        self.portal: BlockingPortal = self._portal_cm.__enter__()
        self.clock = ManualClock(T0)
        self.engine = Engine(CONFIG, clock=self.clock)
        # Reproducible ids, so that a replayed example behaves the same; random-looking (not
        # in enqueue order) as real v4 ids are, so an order decided by id would show.
        ids = random.Random(13)
        self.engine._new_job_id = lambda: str(uuid.UUID(int=ids.getrandbits(128), version=4))
        self._engine_cm = self.portal.wrap_async_context_manager(self.engine)
        self._engine_cm.__enter__()
        self.jobs: dict[str, ModelJob] = {}
        self.dedup: dict[tuple[str, str], tuple[str, int]] = {}
        #: Every lease ever handed out, as (job_id, attempt); old ones test late calls.
        self.leases: list[tuple[str, int]] = []
        self.seen_attempts: dict[str, int] = {}
        self.insertions = itertools.count(1)
        self.failures = itertools.count(1)

    def teardown(self) -> None:
        self._engine_cm.__exit__(None, None, None)
        self._portal_cm.__exit__(None, None, None)

    @property
    def now(self) -> int:
        return self.clock.now_ms()

    def call(self, method: Any, request: Any) -> Any:
        return self.portal.call(method, request)

    def expect_status(self, method: Any, request: Any, status: StatusCode) -> None:
        with pytest.raises(EngineError) as info:
            self.call(method, request)
        assert info.value.status is status

    def lease_outcome(self, job_id: str, attempt: int) -> ModelJob | StatusCode:
        model = self.jobs[job_id]
        if model.state != "inflight":
            return StatusCode.NOT_FOUND
        if model.attempt != attempt:
            return StatusCode.FAILED_PRECONDITION
        return model

    # ------------------------------------------------------------------ rules

    @rule(specs=st.lists(JOB_SPEC, min_size=1, max_size=3))
    def enqueue(
        self, specs: list[tuple[str, int | None, str | None, int | None, int | None]]
    ) -> None:
        now = self.now
        requests = [
            pb.EnqueueRequest(
                queue=queue,
                job_type="t",
                priority=priority,
                idempotency_key=key,
                scheduled_at=None if offset is None else ts(now + offset),
                max_attempts=attempts,
            )
            for queue, priority, key, offset, attempts in specs
        ]
        response = self.call(
            rpc_of(self.engine).enqueue_batch, pb.EnqueueBatchRequest(jobs=requests)
        )
        for (queue, priority, key, offset, attempts), result in zip(
            specs, response.results, strict=True
        ):
            success = result.success
            assert success is not None
            row = None if key is None else self.dedup.get((queue, key))
            if row is not None and now < row[1]:
                assert (success.job_id, success.deduplicated) == (row[0], True)
                continue
            assert not success.deduplicated
            job = ModelJob(
                id=success.job_id,
                queue=queue,
                priority=0 if priority is None else priority,
                enqueued_at=now,
                seq=next(self.insertions),
                max_attempts=2 if attempts is None else attempts,
            )
            if offset is not None and offset > 0:
                job.state, job.due = "scheduled", now + offset
            assert job.id not in self.jobs
            self.jobs[job.id] = job
            if key is not None:
                self.dedup[queue, key] = (job.id, now + DEDUP_WINDOW_MS)

    @rule(
        queues=st.lists(st.sampled_from(QUEUES), min_size=1, max_size=2, unique=True),
        max_jobs=st.integers(1, 3),
        lease_ms=st.sampled_from([1, 1000, 3000, 10_000]),
    )
    def reserve(self, queues: list[str], max_jobs: int, lease_ms: int) -> None:
        expected: list[ModelJob] = []
        for queue in queues:
            ready = sorted(
                (j for j in self.jobs.values() if j.queue == queue and j.state == "ready"),
                key=lambda j: j.ready_key,
            )
            expected += ready[: max_jobs - len(expected)]
        request = pb.ReserveRequest(
            queues=queues, lease_duration=td(lease_ms / 1000), max_jobs=max_jobs
        )
        response = self.call(rpc_of(self.engine).reserve, request)
        assert [j.id for j in response.jobs] == [m.id for m in expected]
        for job, model in zip(response.jobs, expected, strict=True):
            assert (job.attempt, job.queue, job.priority) == (
                model.attempt,
                model.queue,
                model.priority,
            )
            assert job.lease_expires_at == ts(self.now + lease_ms)
            model.state, model.lease = "inflight", self.now + lease_ms
            self.leases.append((model.id, model.attempt))

    @precondition(lambda self: self.leases)
    @rule(data=st.data())
    def ack(self, data: st.DataObject) -> None:
        job_id, attempt = self.leases[data.draw(st.integers(0, len(self.leases) - 1))]
        request = pb.AckRequest(job_id=job_id, attempt=attempt)
        outcome = self.lease_outcome(job_id, attempt)
        if isinstance(outcome, StatusCode):
            self.expect_status(rpc_of(self.engine).ack, request, outcome)
            return
        assert self.call(rpc_of(self.engine).ack, request).job_id == job_id
        outcome.state = "acked"

    @precondition(lambda self: self.leases)
    @rule(data=st.data(), strategy=st.sampled_from(["none", "default", "0", "500", "2000", "dead"]))
    def nack(self, data: st.DataObject, strategy: str) -> None:
        job_id, attempt = self.leases[data.draw(st.integers(0, len(self.leases) - 1))]
        if strategy.isdigit():
            retry = pb.NackRetry(delay=datetime.timedelta(milliseconds=int(strategy)))
        else:
            retry = {
                "none": None,
                "default": pb.NackRetry(default=Empty()),
                "dead": pb.NackRetry(dead_letter=Empty()),
            }[strategy]
        request = pb.NackRequest(job_id=job_id, attempt=attempt, retry=retry, reason="r")
        outcome = self.lease_outcome(job_id, attempt)
        if isinstance(outcome, StatusCode):
            self.expect_status(rpc_of(self.engine).nack, request, outcome)
            return
        response = self.call(rpc_of(self.engine).nack, request)
        if strategy == "dead":
            outcome.dead("REJECTED", self.now, next(self.failures))
        elif outcome.attempt >= outcome.max_attempts:
            outcome.dead("ATTEMPTS_EXHAUSTED", self.now, next(self.failures))
        else:
            outcome.attempt += 1
            delay = int(strategy) if strategy.isdigit() else 0
            outcome.state = "scheduled" if delay else "ready"
            outcome.due = self.now + delay
        assert response.dead_lettered is (outcome.state == "dead")

    @precondition(lambda self: self.leases)
    @rule(data=st.data(), lease_ms=st.sampled_from([1, 500, 4000]))
    def extend(self, data: st.DataObject, lease_ms: int) -> None:
        job_id, attempt = self.leases[data.draw(st.integers(0, len(self.leases) - 1))]
        request = pb.ExtendRequest(
            job_id=job_id, attempt=attempt, lease_duration=td(lease_ms / 1000)
        )
        outcome = self.lease_outcome(job_id, attempt)
        if isinstance(outcome, StatusCode):
            self.expect_status(rpc_of(self.engine).extend, request, outcome)
            return
        response = self.call(rpc_of(self.engine).extend, request)
        outcome.lease = self.now + lease_ms
        assert response.lease_expires_at == ts(outcome.lease)

    @rule(ms=st.sampled_from([1, 499, 1000, 2500, 6000]))
    def advance(self, ms: int) -> None:
        target = self.now + ms
        self.portal.call(self.clock.advance, ms / 1000)
        assert self.now == target
        # Within one step a job makes at most one timed transition (it needs an RPC to be
        # leased again).  Leases expire in deadline order, ties in enqueue order, which is
        # the order their dead letters take.
        for job in sorted(self.jobs.values(), key=lambda j: (j.lease, j.seq)):
            if job.state == "scheduled" and job.due <= target:
                job.state = "ready"
            elif job.state == "inflight" and job.lease <= target:
                if job.attempt >= job.max_attempts:
                    job.dead("LEASE_EXPIRED", job.lease, next(self.failures))
                else:
                    job.attempt += 1
                    job.state = "ready"

    @rule(queue=st.sampled_from([None, *QUEUES]), max_records=st.integers(1, 3))
    def drain(self, queue: str | None, max_records: int) -> None:
        expected = sorted(
            (j for j in self.jobs.values() if j.state == "dead" and queue in (None, j.queue)),
            key=lambda j: (j.failed_at, j.failure_seq),
        )[:max_records]
        request = pb.DrainDeadLettersRequest(queue=queue, max=max_records)
        records = self.call(rpc_of(self.engine).drain_dead_letters, request).records
        assert [(r.job.id, r.cause, r.final_attempt) for r in records] == [
            (j.id, CAUSES[j.cause], j.attempt) for j in expected
        ]
        for record, model in zip(records, expected, strict=True):
            assert record.failed_at == ts(model.failed_at)
            assert record.last_reason == (None if model.cause == "LEASE_EXPIRED" else "r")
            model.state = "drained"

    # ------------------------------------------------------------------ invariants

    @invariant()
    def engine_matches_model(self) -> None:
        counts: dict[str, Counter[str]] = {q: Counter() for q in QUEUES}
        for job in self.jobs.values():
            counts[job.queue][job.state] += 1
            snapshot = self.portal.call(self.engine.snapshot_job, job.id)
            if job.state in LIVE:
                # Not lost, in the right state and attempt.
                assert snapshot is not None, job
                assert (snapshot.state, snapshot.attempt) == (LIVE[job.state], job.attempt)
                if job.state == "inflight":
                    assert snapshot.lease_expires_at_ms == job.lease
                assert snapshot.attempt >= self.seen_attempts.get(job.id, 1)
                self.seen_attempts[job.id] = snapshot.attempt
            else:
                assert snapshot is None, job  # acked or dead: gone from the live set
        stats = self.portal.call(self.engine.stats)
        for queue in QUEUES:
            c = counts[queue]
            expected = QueueStats(c["ready"], c["scheduled"], c["inflight"], c["dead"])
            assert stats.get(queue, QueueStats()) == expected
        # Nothing the model does not know about (no duplicates).
        assert sum(s.live_depth for s in stats.values()) == sum(
            1 for j in self.jobs.values() if j.state in LIVE
        )


SETTINGS = settings(
    max_examples=50,
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)


class TrioMachine(EngineMachine):
    backend = "trio"


class AsyncioMachine(EngineMachine):
    backend = "asyncio"


TestEngineStateMachineTrio = TrioMachine.TestCase
TestEngineStateMachineTrio.settings = SETTINGS
TestEngineStateMachineAsyncio = AsyncioMachine.TestCase
TestEngineStateMachineAsyncio.settings = settings(SETTINGS, max_examples=15)
