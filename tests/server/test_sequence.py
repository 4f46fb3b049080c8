"""Sequence numbers break the ties of one millisecond (protocol §3.3 FIFO, §3.9 oldest first).

Every test runs on virtual time (trio's autojumping MockClock, the asyncio twin from
``tests/worker/_vtime.py``) with the engine on a :class:`ManualClock`, so each failure below
happens in one and the same millisecond, on the in-memory store and on SQLite, and the
order must survive a restart.  Job ids are random v4 ids: an order decided by id would be
random, and these tests would catch it (the chance of 12 random ids sorting in failure order
is 1 in 12!).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import trio.testing

from sepp_anyio.server import (
    DeadLetterCause,
    ManualClock,
    MemoryStore,
    ServerConfig,
    SqliteStore,
    StorageConfig,
    Store,
)
from tests.worker._vtime import VirtualTimeLoop

from ._helpers import T0, drain, enqueue, job, nack, reserve, running, ts

pytestmark = pytest.mark.anyio

CONFIG = ServerConfig(storage=StorageConfig(dead_letter_retention_ms=3_600_000))


@pytest.fixture(
    params=[
        pytest.param("asyncio", id="asyncio-vtime"),
        pytest.param("trio", id="trio-mockclock"),
    ]
)
def anyio_backend(request: pytest.FixtureRequest) -> tuple[str, dict[str, Any]]:
    if request.param == "trio":
        return "trio", {"clock": trio.testing.MockClock(autojump_threshold=0)}
    return "asyncio", {"loop_factory": VirtualTimeLoop}


@pytest.fixture(params=["memory", "sqlite"])
def new_store(request: pytest.FixtureRequest, tmp_path: Path) -> Callable[[], Store]:
    """A factory of stores over the same data: a fresh SqliteStore on one file each time, or
    the same MemoryStore (which keeps its rows across engines)."""
    if request.param == "sqlite":
        return lambda: SqliteStore(tmp_path / "db.sqlite3")
    memory = MemoryStore()
    return lambda: memory


async def test_dead_letters_of_one_millisecond_drain_in_failure_order(
    new_store: Callable[[], Store],
) -> None:
    clock = ManualClock(T0)
    async with running(CONFIG, new_store(), clock) as engine:
        # Six jobs whose short leases expire together, six to be nacked one by one.
        expiring = await enqueue(engine, *[job("a", max_attempts=1) for _ in range(3)])
        expiring += await enqueue(engine, *[job("b", max_attempts=1) for _ in range(3)])
        await reserve(engine, "a", "b", lease=1.0, max_jobs=6)
        nacked = await enqueue(engine, *[job(q) for q in "abbaab"])
        leased = {j.id: j for j in await reserve(engine, "a", "b", lease=60.0, max_jobs=6)}
        assert set(leased) == set(nacked)
        await clock.advance(1.0)  # the sweep dead-letters the first six, in reserve order
        failure_order = list(expiring)
        for job_id in (nacked[4], nacked[0], nacked[5], nacked[2], nacked[1], nacked[3]):
            assert await nack(engine, leased[job_id], dead_letter=True, reason="r")
            failure_order.append(job_id)
        assert {r.failed_at_ms for r in engine.dead_letters()} == {T0 + 1000}
        assert [r.job.id for r in engine.dead_letters()] == failure_order
        queue_of = {r.job.id: r.job.queue for r in engine.dead_letters()}

    # After a restart: the same order, and a new failure of the same millisecond goes last.
    async with running(CONFIG, new_store(), clock) as engine:
        assert [r.job.id for r in engine.dead_letters()] == failure_order
        [late] = await enqueue(engine, job("b"))
        [leased_late] = await reserve(engine, "b")
        assert await nack(engine, leased_late, dead_letter=True)
        failure_order.append(late)
        queue_of[late] = "b"
        # A filtered drain keeps the order too; then everything else, four at a time.
        records = await drain(engine, "a", max=4)
        expected = [i for i in failure_order if queue_of[i] == "a"][:4]
        assert [r.job.id for r in records] == expected
        for _ in range(3):
            records += await drain(engine, max=4)
        assert [r.job.id for r in records[4:]] == [i for i in failure_order if i not in expected]
        assert [r.failed_at for r in records] == [ts(T0 + 1000)] * 13
        assert await drain(engine, max=4) == []
        causes = {r.job.id: r.cause for r in records}
        assert {causes[i] for i in expiring} == {DeadLetterCause.LEASE_EXPIRED}


async def test_ready_jobs_of_one_millisecond_are_fifo_across_restarts(
    new_store: Callable[[], Store],
) -> None:
    clock = ManualClock(T0)
    async with running(CONFIG, new_store(), clock) as engine:
        first = await enqueue(engine, *[job() for _ in range(8)])
        for _ in range(4):
            first += await enqueue(engine, job())
        # A requeued job keeps its place (enqueued_at and sequence) ahead of later ones.
        [head] = await reserve(engine)
        assert head.id == first[0]
        await nack(engine, head)
    async with running(CONFIG, new_store(), clock) as engine:
        later = await enqueue(engine, job(), job())
        jobs = await reserve(engine, max_jobs=4)
        jobs += await reserve(engine, max_jobs=4)
        jobs += await reserve(engine, max_jobs=4)
        jobs += await reserve(engine, max_jobs=4)
        assert [j.id for j in jobs] == [*first, *later]
        assert {j.enqueued_at for j in jobs} == {ts(T0)}
