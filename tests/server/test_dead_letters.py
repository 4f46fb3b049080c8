"""Dead letters: records, retention, DrainDeadLetters (protocol §3.9)."""

from __future__ import annotations

from typing import Any

import pytest

from sepp_anyio import StatusCode
from sepp_anyio._proto.sepp import v1 as pb
from sepp_anyio.server import (
    EngineError,
    LimitsConfig,
    ManualClock,
    ServerConfig,
    ServerSection,
    StorageConfig,
)
from sepp_anyio.server._engine._engine import rpc_of

from ._helpers import T0, drain, enqueue, job, nack, reserve, running, ts

pytestmark = pytest.mark.anyio


def retain(ms: int = 3_600_000, **storage: Any) -> ServerConfig:
    return ServerConfig(
        limits=LimitsConfig(max_reserve_batch=4),
        storage=StorageConfig(dead_letter_retention_ms=ms, **storage),
    )


async def dead_letter(engine: Any, *queues: str, reason: str | None = None) -> list[str]:
    """Enqueue one job per queue and nack each with the dead_letter strategy."""
    ids = []
    for queue in queues:
        [job_id] = await enqueue(engine, job(queue))
        [leased] = await reserve(engine, queue)
        assert await nack(engine, leased, dead_letter=True, reason=reason)
        ids.append(job_id)
    return ids


async def test_record_snapshot_of_the_job() -> None:
    clock = ManualClock(T0)
    async with running(retain(), clock=clock) as engine:
        [job_id] = await enqueue(
            engine,
            job(
                "emails",
                "send",
                payload=b"{}",
                priority=7,
                max_attempts=4,
                custom={"tenant": pb.PrimitiveValue(string_value="acme")},
                trace_context=pb.TraceContext(traceparent="00-aa-bb-01"),
                scheduled_at=ts(T0 - 1),
            ),
        )
        await clock.advance(1)
        [leased] = await reserve(engine, "emails", lease=30)
        await clock.advance(2)
        await nack(engine, leased, dead_letter=True, reason="bad input")
        [record] = await drain(engine)
        assert record.cause == pb.DeadLetterCause.REJECTED
        assert record.failed_at == ts(T0 + 3000)
        assert record.final_attempt == 1
        assert record.last_reason == "bad input"
        snap = record.job
        assert (snap.id, snap.queue, snap.job_type, snap.priority) == (job_id, "emails", "send", 7)
        assert (snap.attempt, snap.max_attempts) == (1, 4)
        assert snap.enqueued_at == ts(T0)
        assert snap.lease_expires_at == ts(T0 + 31_000)  # stale
        assert snap.payload == pb.Payload(data=b"{}", encoding="application/json")
        assert snap.custom["tenant"].string_value == "acme"
        assert snap.trace_context.traceparent == "00-aa-bb-01"
        assert snap.scheduled_at == ts(T0 - 1)


async def test_drain_is_oldest_first_across_queues_and_destructive() -> None:
    clock = ManualClock(T0)
    async with running(retain(), clock=clock) as engine:
        ids = []
        for queue in ("b", "a", "b"):
            ids += await dead_letter(engine, queue)
            await clock.advance(0.001)
        assert engine.stats()["b"].dead_letters == 2
        assert [r.job.id for r in await drain(engine, max=10)] == ids
        assert await drain(engine, max=10) == []
        assert engine.stats()["b"].dead_letters == 0


async def test_drain_queue_filter() -> None:
    async with running(retain()) as engine:
        a1, b1, a2 = await dead_letter(engine, "a", "b", "a")
        # Same failed_at millisecond: in order of failure (not by queue or job id).
        assert [r.job.id for r in await drain(engine, "a", max=4)] == [a1, a2]
        assert [r.job.id for r in await drain(engine, max=4)] == [b1]


async def test_drain_max_defaults_to_one_and_is_clamped_to_max_reserve_batch() -> None:
    async with running(retain()) as engine:
        await dead_letter(engine, *"qqqqqq")
        assert len(await drain(engine)) == 1
        assert len(await drain(engine, max=1000)) == 4  # max_reserve_batch
        assert len(await drain(engine, max=1000)) == 1


async def test_filtered_drain_examines_at_most_sweep_limit_records() -> None:
    async with running(retain(sweep_limit=2)) as engine:
        await dead_letter(engine, "a", "a", "b")
        assert await drain(engine, "b", max=4) == []  # b is third, beyond the limit
        assert len(await drain(engine, "a", max=4)) == 2
        assert len(await drain(engine, "b", max=4)) == 1


async def test_retention_expires_records() -> None:
    clock = ManualClock(T0)
    async with running(retain(10_000), clock=clock) as engine:
        await dead_letter(engine, "q")
        await clock.advance(9.999)
        assert len(engine.dead_letters()) == 1
        await clock.advance(0.001)
        assert engine.dead_letters() == []
        assert await drain(engine) == []


async def test_retention_disabled_by_default_drain_always_empty() -> None:
    async with running() as engine:
        await dead_letter(engine, "q")
        assert await drain(engine, max=10) == []


async def test_drain_has_no_strict_mode_check() -> None:
    config = ServerConfig(server=ServerSection(strict_queues=True))
    async with running(config) as engine:
        assert await drain(engine, "undeclared") == []


@pytest.mark.parametrize(
    ("fields", "message"),
    [({"queue": ""}, "queue must not be empty"), ({"max": 0}, "max must be >= 1")],
)
async def test_drain_validation(fields: dict[str, Any], message: str) -> None:
    async with running() as engine:
        with pytest.raises(EngineError) as info:
            await rpc_of(engine).drain_dead_letters(pb.DrainDeadLettersRequest(**fields))
    assert (info.value.status, info.value.message) == (StatusCode.INVALID_ARGUMENT, message)
