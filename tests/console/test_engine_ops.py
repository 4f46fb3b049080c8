"""The engine's console operations: listings bounded by their page (and by the scan limit),
rates over the last minute on virtual time, lease holders, and requeue / purge recorded in
the durable store exactly as an RPC's writes are (checked by reopening a SQLite store)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from sepp_anyio import Client, EnqueueRequest, Payload, RetryDirective
from sepp_anyio.server import JobState, ManualClock, SqliteStore
from sepp_anyio.server._engine._console_ops import LeaseHolders
from sepp_anyio.server._engine._state import QueueState
from sepp_anyio.server._store._records import StoredJob
from sepp_anyio.testing import open_in_memory_client

from ._helpers import QUEUE, RETENTION

pytestmark = pytest.mark.anyio


async def _dead_letter_three(client: Client) -> list[str]:
    ids = [
        (await client.enqueue(EnqueueRequest(QUEUE, "t", payload=Payload.from_json(n)))).job_id
        for n in range(3)
    ]
    for job in await client.reserve([QUEUE], lease=60, wait=0, max_jobs=3):
        await client.nack(job.ctx, RetryDirective.dead_letter(), reason="no")
    return ids


async def test_requeue_and_purge_are_durable_like_an_rpc(tmp_path: Path) -> None:
    path = tmp_path / "sepp.sqlite3"
    async with open_in_memory_client(store=SqliteStore(path), storage=RETENTION) as (
        client,
        engine,
    ):
        ids = await _dead_letter_three(client)
        (requeued,) = await engine.requeue_dead_letters(job_id=ids[0].upper())
        assert (requeued.id, requeued.attempt, requeued.state) == (ids[0], 1, JobState.READY)
        (purged,) = await engine.purge_dead_letters(job_id=ids[1])
        assert purged.job.id == ids[1]
        assert await engine.requeue_dead_letters(job_id=ids[1]) == []
    # A fresh engine on the same file: what the console did is in the store.
    async with open_in_memory_client(store=SqliteStore(path), storage=RETENTION) as (
        client,
        engine,
    ):
        assert [r.job.id for r in engine.dead_letters()] == [ids[2]]
        (job,) = await client.reserve([QUEUE], lease=60, wait=0)
        assert (job.ctx.id, job.ctx.attempt, job.payload) == (ids[0], 1, Payload.from_json(0))
        # All of a queue at once.
        assert [j.id for j in await engine.requeue_dead_letters(QUEUE)] == [ids[2]]
        assert engine.dead_letters() == []


async def test_a_listing_looks_at_no_more_than_the_scan_limit() -> None:
    storage = {**RETENTION, "sweep_limit": 5}
    async with open_in_memory_client(storage=storage) as (client, engine):
        for n in range(12):
            await client.enqueue(EnqueueRequest(QUEUE, "rare" if n == 11 else "common"))
        page = engine.list_jobs(QUEUE, job_type="rare", page_size=50)
        # Five jobs looked at, none matched: a short page and where to go on.
        assert (page.jobs, page.next_cursor) == ((), 5)
        page = engine.list_jobs(QUEUE, job_type="rare", cursor=10, page_size=50)
        assert [j.job_type for j in page.jobs] == ["rare"] and page.next_cursor is None
        page = engine.list_jobs(QUEUE, page_size=3)
        assert len(page.jobs) == 3 and page.next_cursor == 3
        leased = await client.reserve([QUEUE], lease=60, wait=0, max_jobs=2)
        page = engine.list_jobs(QUEUE, states=frozenset({JobState.INFLIGHT}), page_size=50)
        assert {j.id for j in page.jobs} == {job.ctx.id for job in leased}
        assert engine.list_jobs("elsewhere").jobs == ()


async def test_rates_cover_the_last_minute_on_virtual_time() -> None:
    clock = ManualClock()
    async with open_in_memory_client(clock=clock, storage=RETENTION) as (client, engine):
        for _ in range(4):
            await client.enqueue(EnqueueRequest(QUEUE, "t"))
        (job,) = await client.reserve([QUEUE], lease=600, wait=0)
        await client.ack(job.ctx)
        (job,) = await client.reserve([QUEUE], lease=600, wait=0)
        await client.nack(job.ctx)
        assert engine.rates(QUEUE) == {"enqueue": 4, "ack": 1, "nack": 1}
        oldest = engine.oldest_ready_at_ms(QUEUE)
        assert oldest is not None and oldest <= clock.now_ms()
        await clock.advance(30)
        await client.enqueue(EnqueueRequest(QUEUE, "t"))
        assert engine.rates(QUEUE)["enqueue"] == 5
        await clock.advance(31)
        assert engine.rates(QUEUE) == {"enqueue": 1, "ack": 0, "nack": 0}
        await clock.advance(60)
        assert engine.rates(QUEUE) == {"enqueue": 0, "ack": 0, "nack": 0}
        assert engine.rates("never-seen") == {"enqueue": 0, "ack": 0, "nack": 0}


async def test_the_lease_holder_is_the_reserving_worker() -> None:
    async with open_in_memory_client(storage=RETENTION) as (client, engine):
        await client.enqueue(EnqueueRequest(QUEUE, "t"))
        await client.enqueue(EnqueueRequest(QUEUE, "t"))
        (held,) = await client.reserve([QUEUE], lease=60, wait=0, worker_id="w-7")
        (anonymous,) = await client.reserve([QUEUE], lease=60, wait=0)
        live = engine.snapshot_job(held.ctx.id)
        assert live is not None and engine.lease_holder(live) == "w-7"
        other = engine.snapshot_job(anonymous.ctx.id)
        assert other is not None and engine.lease_holder(other) is None
        await client.nack(held.ctx)
        requeued = engine.snapshot_job(held.ctx.id)
        assert requeued is not None and engine.lease_holder(requeued) is None


def test_lease_holders_forget_settled_jobs() -> None:
    state = QueueState(dead_letter_retention_ms=0)
    holders = LeaseHolders()
    job = StoredJob(
        id="x",
        queue=QUEUE,
        job_type="t",
        state=JobState.INFLIGHT,
        priority=5,
        enqueued_at_ms=0,
        seq=1,
        attempt=1,
        max_attempts=3,
    )
    # None of these is in flight in the state: the table is pruned back as it grows.
    for n in range(200):
        holders.leased([dataclasses.replace(job, id=f"j{n}")], "w", state)
    assert len(holders._holders) <= 65
