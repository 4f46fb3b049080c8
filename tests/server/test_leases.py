"""Leases: expiry and redelivery, Ack / Nack / Extend, the retry policy, the timer
(protocol §3.5-§3.8)."""

from __future__ import annotations

from typing import Any

import anyio
import pytest
from hypothesis import given
from hypothesis import strategies as st

from sepp_anyio import StatusCode
from sepp_anyio._proto.google.protobuf import Empty
from sepp_anyio._proto.sepp import v1 as pb
from sepp_anyio.server import (
    DeadLetterCause,
    EngineError,
    JobState,
    LimitsConfig,
    ManualClock,
    QueueConfig,
    ServerConfig,
    StorageConfig,
)
from sepp_anyio.server._engine._engine import rpc_of
from sepp_anyio.server._engine._policy import retry_delay_ms

from ._helpers import (
    T0,
    ack,
    drain,
    enqueue,
    extend,
    job,
    nack,
    reserve,
    running,
    td,
    ts,
)

pytestmark = pytest.mark.anyio

RETAIN = ServerConfig(storage=StorageConfig(dead_letter_retention_ms=3_600_000))


async def expect_error(awaitable: Any, status: StatusCode, message: str) -> None:
    with pytest.raises(EngineError) as info:
        await awaitable
    assert (info.value.status, info.value.message) == (status, message)


# ---------------------------------------------------------------- lease expiry


async def test_lease_expiry_redelivers_with_next_attempt_at_original_position() -> None:
    clock = ManualClock(T0)
    async with running(clock=clock) as engine:
        [first] = await enqueue(engine, job())
        [leased] = await reserve(engine, lease=10)
        await clock.advance(0.001)
        [later] = await enqueue(engine, job())
        await clock.advance(9.998)
        assert engine.stats()["q"].inflight == 1
        await clock.advance(0.001)  # exactly lease_expires_at
        assert engine.stats()["q"].inflight == 0
        jobs = await reserve(engine, max_jobs=2)
        assert [(j.id, j.attempt) for j in jobs] == [(first, 2), (later, 1)]
        assert jobs[0].enqueued_at == leased.enqueued_at


async def test_lease_expiry_on_last_attempt_dead_letters_lease_expired() -> None:
    clock = ManualClock(T0)
    async with running(RETAIN, clock=clock) as engine:
        [job_id] = await enqueue(engine, job(max_attempts=1, payload=b"x"))
        [leased] = await reserve(engine, lease=5)
        await clock.advance(5)
        assert engine.snapshot_job(job_id) is None
        [record] = await drain(engine)
        assert record.cause == pb.DeadLetterCause.LEASE_EXPIRED
        assert record.last_reason is None
        assert record.final_attempt == 1
        assert record.failed_at == ts(T0 + 5000)
        assert record.job.lease_expires_at == leased.lease_expires_at
        assert record.job.payload == leased.payload


async def test_lease_expiry_on_last_attempt_without_retention_deletes() -> None:
    clock = ManualClock(T0)
    async with running(clock=clock) as engine:
        [job_id] = await enqueue(engine, job(max_attempts=1))
        await reserve(engine, lease=5)
        await clock.advance(5)
        assert engine.snapshot_job(job_id) is None
        assert engine.stats()["q"].live_depth == 0
        assert await drain(engine) == []


async def test_late_ack_after_expiry_is_not_found_or_attempt_mismatch() -> None:
    clock = ManualClock(T0)
    async with running(clock=clock) as engine:
        await enqueue(engine, job())
        [leased] = await reserve(engine, lease=1)
        await clock.advance(1)
        await expect_error(ack(engine, leased), StatusCode.NOT_FOUND, "job not found")
        [again] = await reserve(engine)
        await expect_error(ack(engine, leased), StatusCode.FAILED_PRECONDITION, "attempt mismatch")
        await ack(engine, again)


async def test_timer_sleeps_until_the_earliest_deadline_not_a_fixed_tick() -> None:
    clock = ManualClock(T0)
    config = ServerConfig(storage=StorageConfig(sweep_interval_ms=10**9))
    async with running(config, clock=clock) as engine:
        await enqueue(engine, job(), job())
        await reserve(engine, lease=100)
        # The timer now sleeps until T0+100s; a shorter lease must wake it early.
        await reserve(engine, lease=2)
        await clock.advance(2)
        assert engine.stats()["q"].ready == 1
        await clock.advance(98)
        assert engine.stats()["q"].ready == 2


async def test_timer_handles_at_most_sweep_limit_per_phase_then_continues() -> None:
    clock = ManualClock(T0)
    config = ServerConfig(storage=StorageConfig(sweep_limit=2))
    async with running(config, clock=clock) as engine:
        await enqueue(engine, *[job() for _ in range(5)])
        await reserve(engine, lease=1, max_jobs=5)
        await clock.advance(1)
        assert engine.stats()["q"].ready == 5


# ---------------------------------------------------------------- ack


async def test_ack_deletes_the_job() -> None:
    async with running() as engine:
        [job_id] = await enqueue(engine, job())
        [leased] = await reserve(engine)
        response = await rpc_of(engine).ack(pb.AckRequest(job_id=leased.id, attempt=1))
        assert response.job_id == job_id
        assert engine.snapshot_job(job_id) is None
        await expect_error(ack(engine, leased), StatusCode.NOT_FOUND, "job not found")


async def test_ack_not_inflight_is_not_found() -> None:
    async with running() as engine:
        [job_id] = await enqueue(engine, job())  # ready, not inflight
        request = pb.AckRequest(job_id=job_id, attempt=1)
        await expect_error(rpc_of(engine).ack(request), StatusCode.NOT_FOUND, "job not found")
        unknown = pb.AckRequest(job_id="00000000-0000-4000-8000-000000000000", attempt=1)
        await expect_error(rpc_of(engine).ack(unknown), StatusCode.NOT_FOUND, "job not found")


async def test_ack_attempt_mismatch_is_failed_precondition() -> None:
    async with running() as engine:
        await enqueue(engine, job())
        [leased] = await reserve(engine)
        request = pb.AckRequest(job_id=leased.id, attempt=2)
        await expect_error(
            rpc_of(engine).ack(request), StatusCode.FAILED_PRECONDITION, "attempt mismatch"
        )


async def test_job_id_hex_is_case_insensitive() -> None:
    async with running() as engine:
        await enqueue(engine, job())
        [leased] = await reserve(engine)
        response = await rpc_of(engine).ack(pb.AckRequest(job_id=leased.id.upper(), attempt=1))
        assert response.job_id == leased.id.upper()


@pytest.mark.parametrize("method", ["ack", "nack", "extend"])
@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"job_id": "not-a-uuid"}, "job_id must be a UUID"),
        ({"job_id": "00000000-0000-4000-8000-00000000000g"}, "job_id must be a UUID"),
        ({"job_id": "00000000000040008000000000000000"}, "job_id must be a UUID"),
        ({"attempt": 0}, "attempt must be >= 1"),
        ({"worker_id": ""}, "worker_id must not be empty"),
    ],
)
async def test_lease_rpc_validation(method: str, fields: dict[str, Any], message: str) -> None:
    request_type = {"ack": pb.AckRequest, "nack": pb.NackRequest, "extend": pb.ExtendRequest}
    base: dict[str, Any] = {"job_id": "00000000-0000-4000-8000-000000000000", "attempt": 1}
    if method == "extend":
        base["lease_duration"] = td(1)
    async with running() as engine:
        request = request_type[method](**{**base, **fields})
        await expect_error(
            getattr(rpc_of(engine), method)(request), StatusCode.INVALID_ARGUMENT, message
        )


@pytest.mark.parametrize(
    ("retry", "message"),
    [
        (pb.NackRetry(), "retry strategy is required"),
        (pb.NackRetry(delay=td(-1)), "retry delay must not be negative"),
    ],
)
async def test_nack_retry_validation(retry: Any, message: str) -> None:
    async with running() as engine:
        request = pb.NackRequest(
            job_id="00000000-0000-4000-8000-000000000000", attempt=1, retry=retry
        )
        await expect_error(rpc_of(engine).nack(request), StatusCode.INVALID_ARGUMENT, message)


@pytest.mark.parametrize(
    ("lease", "message"),
    [(None, "lease_duration is required"), (td(0), "lease_duration must be greater than 0")],
)
async def test_extend_lease_validation(lease: Any, message: str) -> None:
    async with running() as engine:
        request = pb.ExtendRequest(
            job_id="00000000-0000-4000-8000-000000000000", attempt=1, lease_duration=lease
        )
        await expect_error(rpc_of(engine).extend(request), StatusCode.INVALID_ARGUMENT, message)


# ---------------------------------------------------------------- nack


async def test_nack_without_retry_or_default_requeues_at_once() -> None:
    async with running() as engine:
        await enqueue(engine, job())
        [leased] = await reserve(engine)
        assert await nack(engine, leased) is False
        [again] = await reserve(engine)
        assert again.attempt == 2
        assert await nack(engine, again, default=True) is False
        [third] = await reserve(engine)
        assert third.attempt == 3


async def test_nack_delay_schedules_then_promotes() -> None:
    clock = ManualClock(T0)
    async with running(clock=clock) as engine:
        [job_id] = await enqueue(engine, job())
        [leased] = await reserve(engine)
        await nack(engine, leased, delay=2.5)
        snapshot = engine.snapshot_job(job_id)
        assert snapshot is not None
        assert (snapshot.state, snapshot.due_ms, snapshot.attempt) == (
            JobState.SCHEDULED,
            T0 + 2500,
            2,
        )
        await clock.advance(2.499)
        assert await reserve(engine) == []
        await clock.advance(0.001)
        [again] = await reserve(engine)
        assert (again.id, again.attempt) == (job_id, 2)


async def test_nack_delay_capped_by_queue_schedule_horizon() -> None:
    config = ServerConfig(queues=(QueueConfig(name="q", max_schedule_horizon_ms=1000),))
    async with running(config) as engine:
        [job_id] = await enqueue(engine, job())
        [leased] = await reserve(engine)
        await nack(engine, leased, delay=3600)
        snapshot = engine.snapshot_job(job_id)
        assert snapshot is not None
        assert snapshot.due_ms == T0 + 1000


async def test_nack_dead_letter_strategy_is_rejected_whatever_attempts_remain() -> None:
    async with running(RETAIN) as engine:
        await enqueue(engine, job(max_attempts=10))
        [leased] = await reserve(engine)
        assert await nack(engine, leased, dead_letter=True, reason="poison") is True
        [record] = await drain(engine)
        assert (record.cause, record.last_reason, record.final_attempt) == (
            pb.DeadLetterCause.REJECTED,
            "poison",
            1,
        )


async def test_nack_on_last_attempt_is_attempts_exhausted() -> None:
    async with running(RETAIN) as engine:
        await enqueue(engine, job(max_attempts=2))
        [leased] = await reserve(engine)
        assert await nack(engine, leased, reason="first") is False
        [again] = await reserve(engine)
        assert await nack(engine, again, delay=60, reason="second") is True
        [record] = await drain(engine)
        assert (record.cause, record.last_reason, record.final_attempt) == (
            pb.DeadLetterCause.ATTEMPTS_EXHAUSTED,
            "second",
            2,
        )
        assert record.job.attempt == 2


async def test_nack_dead_lettered_true_even_without_retention() -> None:
    async with running() as engine:
        [job_id] = await enqueue(engine, job(max_attempts=1))
        [leased] = await reserve(engine)
        assert await nack(engine, leased) is True
        assert engine.snapshot_job(job_id) is None
        assert await drain(engine) == []


async def test_nack_not_inflight_and_attempt_mismatch() -> None:
    async with running() as engine:
        await enqueue(engine, job())
        [leased] = await reserve(engine)
        bad = pb.NackRequest(job_id=leased.id, attempt=3, retry=pb.NackRetry(dead_letter=Empty()))
        await expect_error(
            rpc_of(engine).nack(bad), StatusCode.FAILED_PRECONDITION, "attempt mismatch"
        )
        await nack(engine, leased)
        await expect_error(nack(engine, leased), StatusCode.NOT_FOUND, "job not found")


async def test_default_nack_uses_the_queue_retry_policy() -> None:
    clock = ManualClock(T0)
    config = ServerConfig(
        queues=(QueueConfig(name="q", retry_delay_ms=1000, retry_backoff="exponential"),)
    )
    async with running(config, clock=clock) as engine:
        [job_id] = await enqueue(engine, job(max_attempts=5))
        for attempt in (1, 2, 3):
            [leased] = await reserve(engine)
            assert leased.attempt == attempt
            await nack(engine, leased)
            snapshot = engine.snapshot_job(job_id)
            assert snapshot is not None
            delay = snapshot.due_ms - clock.now_ms()
            full = 1000 * 2 ** (attempt - 1)
            assert full - full // 4 <= delay <= full
            await clock.advance(delay / 1000)


# ---------------------------------------------------------------- retry formula


def _limits(**kw: Any) -> Any:
    return ServerConfig(limits=LimitsConfig(**kw)).default_limits


def test_retry_delay_zero_base_means_no_delay() -> None:
    assert retry_delay_ms(_limits(), "id", 1) == 0
    assert retry_delay_ms(_limits(retry_backoff="exponential"), "id", 7) == 0


@given(
    base=st.integers(1, 10**7),
    attempt=st.integers(1, 2**32 - 1),
    exponential=st.booleans(),
    cap=st.integers(0, 10**9),
    horizon=st.integers(1, 10**9),
    job_id=st.uuids().map(str),
)
def test_retry_delay_bounds(
    base: int, attempt: int, exponential: bool, cap: int, horizon: int, job_id: str
) -> None:
    cap = max(cap, base)
    limits = _limits(
        retry_delay_ms=base,
        retry_backoff="exponential" if exponential else "none",
        retry_delay_max_ms=cap,
        max_schedule_horizon_ms=horizon,
    )
    grown = base * 2 ** min(attempt - 1, 64) if exponential else base
    capped = min(grown, cap, horizon)
    delay = retry_delay_ms(limits, job_id, attempt)
    assert capped - capped // 4 <= delay <= capped
    assert delay == retry_delay_ms(limits, job_id, attempt)  # deterministic


# ---------------------------------------------------------------- extend


async def test_extend_sets_now_plus_lease_and_keeps_the_attempt() -> None:
    clock = ManualClock(T0)
    async with running(clock=clock) as engine:
        [job_id] = await enqueue(engine, job())
        [leased] = await reserve(engine, lease=10)
        await clock.advance(4)
        assert await extend(engine, leased, 10) == ts(T0 + 14_000)  # from now, not +10 s
        await clock.advance(9.999)
        snapshot = engine.snapshot_job(job_id)
        assert snapshot is not None
        assert (snapshot.state, snapshot.attempt) == (JobState.INFLIGHT, 1)
        await ack(engine, leased)


async def test_extend_clamped_to_queue_ceiling() -> None:
    config = ServerConfig(queues=(QueueConfig(name="q", max_lease_duration_ms=3000),))
    async with running(config) as engine:
        await enqueue(engine, job())
        [leased] = await reserve(engine, lease=1)
        assert await extend(engine, leased, 3600) == ts(T0 + 3000)
        assert await extend(engine, leased, 0.0001) == ts(T0 + 1)


async def test_shorter_extend_wakes_the_timer_early() -> None:
    clock = ManualClock(T0)
    async with running(clock=clock) as engine:
        await enqueue(engine, job())
        [leased] = await reserve(engine, lease=60)
        await extend(engine, leased, 1)
        await clock.advance(1)
        [again] = await reserve(engine)
        assert again.attempt == 2


async def test_extend_not_found_and_attempt_mismatch() -> None:
    async with running() as engine:
        [job_id] = await enqueue(engine, job())
        request = pb.ExtendRequest(job_id=job_id, attempt=1, lease_duration=td(1))
        await expect_error(rpc_of(engine).extend(request), StatusCode.NOT_FOUND, "job not found")
        await reserve(engine)
        request = pb.ExtendRequest(job_id=job_id, attempt=5, lease_duration=td(1))
        await expect_error(
            rpc_of(engine).extend(request), StatusCode.FAILED_PRECONDITION, "attempt mismatch"
        )


async def test_cancelled_ack_still_commits() -> None:
    async with running() as engine:
        [job_id] = await enqueue(engine, job())
        [leased] = await reserve(engine)
        with anyio.CancelScope() as scope:
            scope.cancel()
            await ack(engine, leased)
        assert engine.snapshot_job(job_id) is None


def test_dead_letter_cause_mirrors_proto_numbers() -> None:
    for cause in DeadLetterCause:
        assert pb.DeadLetterCause(int(cause)).name == cause.name
