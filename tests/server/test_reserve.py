"""Reserve: ordering, queue walk, clamps, long poll, wake-after-commit, shutdown, strict mode
(protocol §3.3, §3.4, §3.11, §3.14)."""

from __future__ import annotations

from typing import Any

import anyio
import pytest
import trio.testing

from sepp_anyio import StatusCode
from sepp_anyio._proto.sepp import v1 as pb
from sepp_anyio.server import (
    Engine,
    EngineError,
    LimitsConfig,
    ManualClock,
    QueueConfig,
    ServerConfig,
    ServerSection,
)
from sepp_anyio.server._engine._engine import rpc_of

from ._helpers import T0, GatedStore, enqueue, job, nack, reserve, running, td, ts

pytestmark = pytest.mark.anyio


# ---------------------------------------------------------------- ordering


async def test_priority_nine_first_then_fifo() -> None:
    clock = ManualClock(T0)
    async with running(clock=clock) as engine:
        ids = {}
        for name, priority in (
            ("low-1", 0),
            ("high-1", 9),
            ("mid", 5),
            ("low-2", 0),
            ("high-2", 9),
        ):
            [ids[name]] = await enqueue(engine, job(priority=priority))
            await clock.advance(0.001)
        order = [j.id for j in await reserve(engine, max_jobs=10)]
        by_id = {v: k for k, v in ids.items()}
        assert [by_id[i] for i in order] == ["high-1", "high-2", "mid", "low-1", "low-2"]


async def test_same_millisecond_is_fifo_by_enqueue_order() -> None:
    # The random v4 ids are no tie-break: jobs of one millisecond are served as enqueued,
    # within a batch and across calls.
    async with running() as engine:
        ids = await enqueue(engine, *[job() for _ in range(20)])
        for _ in range(10):
            ids += await enqueue(engine, job())
        assert [j.id for j in await reserve(engine, max_jobs=30)] == ids


async def test_requeue_keeps_original_position() -> None:
    clock = ManualClock(T0)
    async with running(clock=clock) as engine:
        [first] = await enqueue(engine, job())
        await clock.advance(0.001)
        [leased] = await reserve(engine)
        [later] = await enqueue(engine, job())
        await nack(engine, leased)
        again = await reserve(engine, max_jobs=2)
        assert [j.id for j in again] == [first, later]
        assert again[0].attempt == 2
        assert again[0].enqueued_at == ts(T0)


async def test_queues_walked_in_request_order() -> None:
    async with running() as engine:
        a = await enqueue(engine, job("a"), job("a"))
        b = await enqueue(engine, job("b", priority=9), job("b"))
        jobs = await reserve(engine, "a", "b", max_jobs=3)
        assert [j.queue for j in jobs] == ["a", "a", "b"]
        assert [j.id for j in jobs] == [*a, b[0]]


async def test_returns_only_listed_queues() -> None:
    async with running() as engine:
        await enqueue(engine, job("other"))
        assert await reserve(engine, "q") == []


# ---------------------------------------------------------------- clamps


async def test_max_jobs_defaults_to_one_and_is_clamped() -> None:
    config = ServerConfig(limits=LimitsConfig(max_reserve_batch=3))
    async with running(config) as engine:
        await enqueue(engine, *[job() for _ in range(5)])
        assert len(await reserve(engine)) == 1
        assert len(await reserve(engine, max_jobs=100)) == 3


async def test_lease_clamped_to_minimum_ceiling_of_requested_queues() -> None:
    config = ServerConfig(
        limits=LimitsConfig(max_lease_duration_ms=60_000),
        queues=(QueueConfig(name="fast", max_lease_duration_ms=2000),),
    )
    async with running(config) as engine:
        await enqueue(engine, job("slow"), job("slow"))
        [alone] = await reserve(engine, "slow", lease=600)
        assert alone.lease_expires_at == ts(T0 + 60_000)
        [mixed] = await reserve(engine, "slow", "fast", lease=600)
        assert mixed.queue == "slow"
        assert mixed.lease_expires_at == ts(T0 + 2000)


async def test_sub_millisecond_lease_gets_one_millisecond_floor() -> None:
    async with running() as engine:
        await enqueue(engine, job())
        [leased] = await reserve(engine, lease=0.0004)
        assert leased.lease_expires_at == ts(T0 + 1)


async def test_wait_timeout_clamped_to_max_wait_timeout() -> None:
    clock = ManualClock(T0)
    config = ServerConfig(limits=LimitsConfig(max_wait_timeout_ms=1000))
    async with running(config, clock=clock) as engine, anyio.create_task_group() as tg:
        done = anyio.Event()

        async def poll() -> None:
            assert await reserve(engine, wait=3600) == []
            done.set()

        tg.start_soon(poll)
        await clock.settle()
        await clock.advance(0.999)
        assert not done.is_set()
        await clock.advance(0.001)
        assert done.is_set()


# ---------------------------------------------------------------- long poll


async def test_no_wait_is_a_single_attempt() -> None:
    async with running() as engine:
        assert await reserve(engine) == []
        assert await reserve(engine, wait=0) == []


async def test_long_poll_times_out_empty_at_deadline() -> None:
    clock = ManualClock(T0)
    async with running(clock=clock) as engine, anyio.create_task_group() as tg:
        result: list[list[Any]] = []

        async def poll() -> None:
            result.append(await reserve(engine, wait=5))

        tg.start_soon(poll)
        await clock.settle()
        await clock.advance(4.999)
        assert result == []
        await clock.advance(0.001)
        assert result == [[]]


async def test_long_poll_wakes_on_enqueue_and_returns_at_once() -> None:
    clock = ManualClock(T0)
    async with running(clock=clock) as engine, anyio.create_task_group() as tg:
        result: list[list[Any]] = []

        async def poll() -> None:
            result.append(await reserve(engine, "a", "b", wait=60, max_jobs=10))

        tg.start_soon(poll)
        await clock.settle()
        [job_id] = await enqueue(engine, job("b"))
        await clock.settle()
        assert [[j.id for j in jobs] for jobs in result] == [[job_id]]
        assert clock.now_ms() == T0  # no time passed: it did not wait to fill max_jobs


async def test_parked_reserve_is_woken_only_after_the_commit() -> None:
    store = GatedStore()
    async with running(store=store) as engine, anyio.create_task_group() as tg:
        result: list[list[Any]] = []

        async def poll() -> None:
            result.append(await reserve(engine, wait=60))

        tg.start_soon(poll)
        await anyio.wait_all_tasks_blocked()
        store.hold = True
        tg.start_soon(enqueue, engine, job())
        await store.entered.wait()
        await anyio.wait_all_tasks_blocked()
        assert result == []  # the job is ready in memory, but not durable yet
        store.gate.set()
        await anyio.wait_all_tasks_blocked()
        assert len(result) == 1
        assert len(result[0]) == 1


async def test_wake_that_loses_the_race_keeps_waiting() -> None:
    clock = ManualClock(T0)
    async with running(clock=clock) as engine, anyio.create_task_group() as tg:
        results: list[list[Any]] = []

        async def poll() -> None:
            results.append(await reserve(engine, wait=10))

        tg.start_soon(poll)
        tg.start_soon(poll)
        await clock.settle()
        await enqueue(engine, job())
        await clock.settle()
        assert [len(r) for r in results] == [1]  # one won; the other loops and waits
        await enqueue(engine, job())
        await clock.settle()
        assert [len(r) for r in results] == [1, 1]


async def test_parked_reserve_woken_by_requeue_and_promotion() -> None:
    clock = ManualClock(T0)
    async with running(clock=clock) as engine, anyio.create_task_group() as tg:
        await enqueue(engine, job(), job(scheduled_at=ts(T0 + 3000)))
        [leased] = await reserve(engine)
        results: list[list[Any]] = []

        async def poll() -> None:
            results.append(await reserve(engine, wait=60))

        tg.start_soon(poll)
        await clock.settle()
        await nack(engine, leased)
        await clock.settle()
        assert results[0][0].id == leased.id
        tg.start_soon(poll)
        await clock.advance(3)
        assert results[1][0].scheduled_at == ts(T0 + 3000)


async def test_shutdown_returns_parked_and_later_reserves_empty_at_once() -> None:
    clock = ManualClock(T0)
    async with running(clock=clock) as engine, anyio.create_task_group() as tg:
        results: list[list[Any]] = []

        async def poll() -> None:
            results.append(await reserve(engine, wait=300))

        tg.start_soon(poll)
        tg.start_soon(poll)
        await clock.settle()
        engine.shutdown()
        engine.shutdown()  # idempotent
        await clock.settle()
        assert results == [[], []]
        await enqueue(engine, job())  # other RPCs still work during shutdown
        assert await reserve(engine, wait=300) == []
        assert clock.now_ms() == T0


async def test_leaving_the_engine_releases_parked_reserves() -> None:
    clock = ManualClock(T0)
    results: list[list[Any]] = []
    async with anyio.create_task_group() as tg, running(clock=clock) as engine:

        async def poll() -> None:
            results.append(await reserve(engine, wait=300))

        tg.start_soon(poll)
        await clock.settle()
    assert results == [[]]
    with pytest.raises(EngineError) as info:
        await reserve(engine)
    assert info.value.status is StatusCode.UNAVAILABLE


async def test_cancelled_parked_reserve_leaves_nothing_behind() -> None:
    async with running() as engine:
        with anyio.move_on_after(0):
            await reserve(engine, wait=300)
        assert engine._waiters == {}
        await enqueue(engine, job())
        assert len(await reserve(engine)) == 1


# ---------------------------------------------------------------- validation, strict mode


@pytest.mark.parametrize(
    ("request_fields", "message"),
    [
        ({"queues": []}, "queues must contain at least 1 item"),
        ({"queues": [""]}, "queues item must not be empty"),
        ({"queues": ["."]}, "queues item must not be '.' or '..'"),
        ({"queues": ["a/b"]}, "queues item must not contain '/'"),
        ({"queues": ["a\x00"]}, "queues item must not contain control characters"),
        ({"wait_timeout": td(-1)}, "wait_timeout must not be negative"),
        ({"lease_duration": None}, "lease_duration is required"),
        ({"lease_duration": td(0)}, "lease_duration must be greater than 0"),
        ({"worker_id": ""}, "worker_id must not be empty"),
        ({"max_jobs": 0}, "max_jobs must be >= 1"),
    ],
)
async def test_reserve_validation_errors(request_fields: dict[str, Any], message: str) -> None:
    fields: dict[str, Any] = {"queues": ["q"], "lease_duration": td(30), **request_fields}
    async with running() as engine:
        with pytest.raises(EngineError) as info:
            await rpc_of(engine).reserve(pb.ReserveRequest(**fields))
    assert (info.value.status, info.value.message) == (StatusCode.INVALID_ARGUMENT, message)


async def test_reserve_exceeds_max_reserve_queues() -> None:
    config = ServerConfig(limits=LimitsConfig(max_reserve_queues=2))
    async with running(config) as engine:
        with pytest.raises(EngineError) as info:
            await reserve(engine, "a", "b", "c")
    assert (info.value.status, info.value.message) == (
        StatusCode.INVALID_ARGUMENT,
        "reserve exceeds max_reserve_queues (2)",
    )


async def test_reserve_queue_name_too_long() -> None:
    config = ServerConfig(limits=LimitsConfig(max_queue_name_bytes=3))
    async with running(config) as engine:
        with pytest.raises(EngineError) as info:
            await reserve(engine, "abc", "abcd")
    assert (info.value.status, info.value.message) == (
        StatusCode.INVALID_ARGUMENT,
        'queue name "abcd" exceeds max_queue_name_bytes (3)',
    )


async def test_strict_mode_reserve_is_failed_precondition() -> None:
    config = ServerConfig(
        server=ServerSection(strict_queues=True), queues=(QueueConfig(name="known"),)
    )
    async with running(config) as engine:
        with pytest.raises(EngineError) as info:
            await reserve(engine, "known", "x", "y", "x")
        assert (info.value.status, info.value.message) == (
            StatusCode.FAILED_PRECONDITION,
            'queue(s) not declared (strict mode): ["x", "y"]',
        )
        assert await reserve(engine, "known") == []


async def test_strict_mode_follows_reload() -> None:
    async with running() as engine:
        await reserve(engine, "x")
        engine.reload(ServerConfig(server=ServerSection(strict_queues=True)))
        with pytest.raises(EngineError):
            await reserve(engine, "x")


# ---------------------------------------------------------------- real clock, virtual time


@pytest.mark.parametrize(
    "anyio_backend",
    [
        pytest.param(
            ("trio", {"clock": trio.testing.MockClock(autojump_threshold=0)}), id="trio-mockclock"
        )
    ],
)
async def test_long_poll_with_default_clock_under_mock_clock() -> None:
    async with Engine() as engine:
        start = anyio.current_time()
        assert await reserve(engine, wait=120) == []
        assert anyio.current_time() - start == pytest.approx(120, abs=0.01)
        await enqueue(engine, job())
        [leased] = await reserve(engine, lease=30)
        # Lease expiry is handled by the timer at the deadline, in virtual time.
        await anyio.sleep(30.01)
        [again] = await reserve(engine)
        assert (again.id, again.attempt) == (leased.id, 2)
