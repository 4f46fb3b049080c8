"""Engine lifecycle, GetServerInfo, introspection, storage failures and recovery."""

from __future__ import annotations

import anyio
import anyio.abc
import pytest

from sepp_anyio import StatusCode
from sepp_anyio._proto.sepp import v1 as pb
from sepp_anyio._version import __version__
from sepp_anyio.server import (
    Engine,
    EngineError,
    JobState,
    LimitsConfig,
    ManualClock,
    MemoryStore,
    QueueConfig,
    QueueStats,
    ServerConfig,
    ServerSection,
    StorageConfig,
)
from sepp_anyio.server._engine._engine import rpc_of

from ._helpers import T0, GatedStore, enqueue, job, nack, reserve, running, td, ts

pytestmark = pytest.mark.anyio


# ---------------------------------------------------------------- GetServerInfo


async def test_server_info_defaults() -> None:
    async with running() as engine:
        info = await rpc_of(engine).get_server_info(pb.GetServerInfoRequest())
    assert info.server_version == __version__
    assert info.supported_protocol_versions == ["v1"]
    assert info.server_time == ts(T0)
    assert info.restricts_encodings is False
    assert info.allowed_encodings == []
    assert info.max_payload_bytes == 1_048_576
    assert info.max_custom_entries == 64
    assert info.max_custom_total_bytes == 16_384
    assert info.max_custom_key_bytes == 256
    assert info.max_queue_name_bytes == 512
    assert info.max_job_type_bytes == 256
    assert info.max_idempotency_key_bytes == 256
    assert info.max_schedule_horizon == td(30 * 86400)
    assert info.max_enqueue_batch == 256
    assert info.max_reserve_batch == 256
    assert info.max_reserve_queues == 32
    assert info.max_wait_timeout == td(300)
    assert info.max_lease_duration == td(300)
    assert info.strict_queues is False
    assert info.dead_letter_retention_enabled is False


async def test_server_info_reflects_global_config_not_queue_overrides() -> None:
    config = ServerConfig(
        server=ServerSection(strict_queues=True),
        limits=LimitsConfig(allowed_encodings=(), max_lease_duration_ms=1234),
        storage=StorageConfig(dead_letter_retention_ms=1),
        queues=(QueueConfig(name="q", max_lease_duration_ms=5, allowed_encodings=("json",)),),
    )
    async with running(config) as engine:
        info = await rpc_of(engine).get_server_info(pb.GetServerInfoRequest())
        assert info.restricts_encodings is True  # an empty list counts
        assert info.allowed_encodings == []
        assert info.max_lease_duration == td(1.234)
        assert info.strict_queues is True
        assert info.dead_letter_retention_enabled is True
        # Retention is read at boot; strict mode is live.
        engine.reload(ServerConfig())
        info = await rpc_of(engine).get_server_info(pb.GetServerInfoRequest())
        assert info.dead_letter_retention_enabled is True
        assert info.strict_queues is False


# ---------------------------------------------------------------- lifecycle


async def test_rpc_before_start_is_a_usage_error() -> None:
    engine = Engine()
    with pytest.raises(RuntimeError, match="not running"):
        await rpc_of(engine).get_server_info(pb.GetServerInfoRequest())


async def test_rpc_after_close_is_unavailable_and_reentry_refused() -> None:
    async with running() as engine:
        pass
    with pytest.raises(EngineError) as info:
        await enqueue(engine, job())
    assert (info.value.status, info.value.message) == (
        StatusCode.UNAVAILABLE,
        "server is shut down",
    )
    with pytest.raises(RuntimeError):
        async with engine:
            pass


async def test_exception_in_body_propagates_unwrapped() -> None:
    with pytest.raises(KeyError):
        async with running():
            raise KeyError("boom")


async def test_memory_store_recovery_in_a_new_engine() -> None:
    store = MemoryStore()
    clock = ManualClock(T0)
    config = ServerConfig(storage=StorageConfig(dead_letter_retention_ms=60_000))
    async with running(config, store, clock) as engine:
        ready, scheduled, leased_id, dead = await enqueue(
            engine,
            job(priority=1),
            job(scheduled_at=ts(T0 + 5000)),
            job(priority=9, idempotency_key="k"),
            job("dl", payload=b"x"),
        )
        [leased] = await reserve(engine, lease=10)
        [doomed] = await reserve(engine, "dl")
        await nack(engine, doomed, dead_letter=True)
        assert store.transactions > 0
    async with running(config, store, clock) as engine:
        assert leased.id == leased_id
        states = {
            job_id: snap.state
            for job_id in (ready, scheduled, leased_id)
            if (snap := engine.snapshot_job(job_id)) is not None
        }
        assert states == {
            ready: JobState.READY,
            scheduled: JobState.SCHEDULED,
            leased_id: JobState.INFLIGHT,
        }
        assert [r.job.id for r in engine.dead_letters()] == [dead]
        dedup = await rpc_of(engine).enqueue_batch(
            pb.EnqueueBatchRequest(jobs=[job(idempotency_key="k")])
        )
        assert dedup.results[0].success.job_id == leased_id
        await clock.advance(10)  # the recovered lease still expires on time
        again = await reserve(engine, max_jobs=3)
        assert [(j.id, j.attempt) for j in again] == [(leased_id, 2), (ready, 1), (scheduled, 1)]


async def test_store_can_serve_one_engine_at_a_time() -> None:
    store = MemoryStore()
    async with running(store=store):
        with pytest.raises(RuntimeError, match="already"):
            async with running(store=store):
                pass


# ---------------------------------------------------------------- introspection


async def test_stats_counts_per_queue_and_declared_queues() -> None:
    config = ServerConfig(queues=(QueueConfig(name="declared"),))
    async with running(config) as engine:
        await enqueue(engine, job(), job(), job(scheduled_at=ts(T0 + 1000)))
        await reserve(engine)
        assert engine.stats() == {
            "declared": QueueStats(),
            "q": QueueStats(ready=1, scheduled=1, inflight=1),
        }
        assert engine.stats()["q"].live_depth == 3


# ---------------------------------------------------------------- storage failure
# (held, retried and recovered: see test_storage_failure.py)


async def test_group_commit_with_memory_store() -> None:
    store = GatedStore()
    async with running(store=store) as engine:
        store.hold = True
        async with anyio.create_task_group() as tg:
            tg.start_soon(enqueue, engine, job())
            await store.entered.wait()
            # While the first transaction is in flight, ten more RPCs arrive.
            for _ in range(10):
                tg.start_soon(enqueue, engine, job())
            await anyio.wait_all_tasks_blocked()
            store.gate.set()
        assert store.commits == [1, 10]
        assert engine.stats()["q"].ready == 11


async def test_teardown_after_error_releases_rpcs_waiting_for_their_commit() -> None:
    store = GatedStore()
    errors: list[EngineError] = []

    async def rpc(engine: Engine) -> None:
        try:
            await enqueue(engine, job())
        except EngineError as exc:
            errors.append(exc)

    async def crash(tg: anyio.abc.TaskGroup) -> None:
        async with running(store=store) as engine:
            store.hold = True
            tg.start_soon(rpc, engine)
            await store.entered.wait()
            raise KeyError("crash")

    async with anyio.create_task_group() as tg:
        with pytest.raises(KeyError):
            await crash(tg)
    assert [(e.status, e.message) for e in errors] == [
        (StatusCode.UNAVAILABLE, "server is shut down")
    ]
