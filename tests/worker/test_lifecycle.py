"""Starting, shutting down, draining and cancelling a worker. Both backends, virtual time."""

from __future__ import annotations

import logging
import math
from typing import Any

import anyio
import anyio.abc
import pytest

import sepp_anyio
from sepp_anyio import Client, Job, JobCtx, Payload, Worker
from sepp_anyio.server import JobState
from sepp_anyio.testing import open_in_memory_client

from ._helpers import QUEUE, EngineSpy, Probe, enqueue, nack_kind, running, unavailable

pytestmark = pytest.mark.anyio


def _gated(gate: anyio.Event) -> Any:
    async def body(payload: Payload | None, ctx: JobCtx) -> None:
        await gate.wait()

    return body


async def test_run_reports_started_once_reserving() -> None:
    probe = Probe()
    async with open_in_memory_client() as (client, engine):
        spy = EngineSpy(engine)
        worker = Worker(client, [QUEUE])
        worker.handle("t", probe.handler())
        async with anyio.create_task_group() as tg:
            assert await tg.start(worker.run) is None
            with pytest.raises(RuntimeError, match="already running"):
                await worker.run()
            await spy.wait_until(lambda: len(spy.of("reserve")) == 1)
            await enqueue(client)
            await spy.wait_for("ack")
            worker.shutdown()
        assert probe.attempts() == [1]


async def test_shutdown_drains_an_in_flight_job_extending_its_lease_and_acks_it() -> None:
    probe, gate = Probe(), anyio.Event()
    async with open_in_memory_client() as (client, engine):
        spy = EngineSpy(engine)
        worker = Worker(client, [QUEUE], lease=2.0, auto_extend=True)
        worker.handle("t", probe.handler(_gated(gate)))
        [job_id] = await enqueue(client)
        returned = anyio.Event()

        async def run_and_flag() -> None:
            await worker.run()
            returned.set()

        async with anyio.create_task_group() as tg:
            tg.start_soon(run_and_flag)
            await probe.wait_starts(1)
            worker.shutdown()
            reserves = len(spy.of("reserve"))
            [late_id] = await enqueue(client)  # arrives after shutdown: never reserved
            extends_before = len(spy.of("extend"))
            await anyio.sleep(10)  # the drain outlasts the 2 s lease several times
            assert not returned.is_set()
            assert len(spy.of("extend")) >= extends_before + 10
            assert worker.statistics().in_flight == 1
            gate.set()
            await returned.wait()
        [ack] = spy.of("ack")
        assert (ack.request.job_id, ack.request.attempt, ack.ok) == (job_id, 1, True)
        assert len(spy.of("reserve")) == reserves
        late = engine.snapshot_job(late_id)
        assert late is not None and late.state == JobState.READY


async def test_shutdown_cancels_a_parked_reserve_at_once() -> None:
    async with open_in_memory_client() as (client, engine):
        spy = EngineSpy(engine)
        worker = Worker(client, [QUEUE], wait=30.0)
        worker.handle("t", Probe().handler())
        async with anyio.create_task_group() as tg:
            await tg.start(worker.run)
            await spy.wait_until(lambda: bool(spy.of("reserve")))
            asked_at = anyio.current_time()
            worker.shutdown_handle().shutdown()
        assert anyio.current_time() == asked_at  # no virtual time passed
        [reserve] = spy.of("reserve")
        assert reserve.done and reserve.error is not None  # cancelled, not answered


@pytest.mark.parametrize("setting", ["reserve_error_backoff", "early_empty_pause"])
async def test_shutdown_interrupts_a_backoff(setting: str) -> None:
    async with open_in_memory_client() as (client, engine):
        spy = EngineSpy(engine)
        if setting == "reserve_error_backoff":
            spy.fail("reserve", unavailable())
            worker = Worker(client, [QUEUE], reserve_error_backoff=300.0)
        else:
            engine.shutdown()  # every reserve answers empty at once
            worker = Worker(client, [QUEUE])
        worker.handle("t", Probe().handler())
        async with anyio.create_task_group() as tg:
            await tg.start(worker.run)
            await spy.wait_until(lambda: bool(spy.of("reserve")) and spy.calls[-1].done)
            asked_at = anyio.current_time()
            worker.shutdown()
        assert anyio.current_time() == asked_at
        assert len(spy.of("reserve")) == 1


async def test_a_reserve_that_returned_at_the_shutdown_boundary_is_processed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    probe = Probe()
    async with open_in_memory_client() as (client, engine):
        spy = EngineSpy(engine)
        worker = Worker(client, [QUEUE], max_in_flight=4)
        worker.handle("t", probe.handler())
        real_reserve = client.reserve

        async def reserve_then_shutdown(*args: Any, **kwargs: Any) -> list[Job]:
            jobs = await real_reserve(*args, **kwargs)
            # Shutdown arrives the instant the reply does: the jobs are leased to us already.
            worker.shutdown()
            return jobs

        monkeypatch.setattr(client, "reserve", reserve_then_shutdown)
        ids = await enqueue(client, 3)
        await worker.run()
        assert len(spy.of("reserve")) == 1
        assert sorted(c.request.job_id for c in spy.of("ack", ok=True)) == sorted(ids)
        assert sorted(ctx.id for _, ctx in probe.starts) == sorted(ids)
        assert engine.stats()[QUEUE].live_depth == 0


async def test_shutdown_while_every_slot_is_taken_drains_and_returns() -> None:
    probe, gate = Probe(), anyio.Event()
    async with open_in_memory_client() as (client, engine):
        spy = EngineSpy(engine)
        worker = Worker(client, [QUEUE], max_in_flight=1)
        worker.handle("t", probe.handler(_gated(gate)))
        await enqueue(client, 2)
        async with anyio.create_task_group() as tg:
            await tg.start(worker.run)
            await probe.wait_starts(1)  # the reserve loop now waits for the only slot
            worker.shutdown()
            await anyio.sleep(1)
            gate.set()
        assert len(spy.of("reserve")) == 1
        assert len(spy.of("ack", ok=True)) == 1
        assert engine.stats()[QUEUE].ready == 1  # the second job was never reserved


async def test_shutdown_before_run_returns_at_once_without_reserving() -> None:
    async with open_in_memory_client() as (client, engine):
        spy = EngineSpy(engine)
        worker = Worker(client, [QUEUE])
        worker.shutdown()
        await worker.run()
        assert spy.calls == []


async def test_shutdown_is_idempotent_from_any_task() -> None:
    async with open_in_memory_client() as (client, _):
        worker = Worker(client, [QUEUE])
        handle = worker.shutdown_handle()

        async def stop(via_handle: bool) -> None:
            (handle.shutdown if via_handle else worker.shutdown)()

        async with anyio.create_task_group() as tg:
            await tg.start(worker.run)
            for _ in range(3):
                tg.start_soon(stop, True)
                tg.start_soon(stop, False)
        assert handle.is_shutdown
        worker.shutdown()  # after run() returned: still harmless


async def test_drain_timeout_cancels_the_rest_and_nacks_them_for_immediate_retry() -> None:
    probe = Probe()

    async def body(payload: Payload | None, ctx: JobCtx) -> None:
        assert payload is not None
        await anyio.sleep(0.5 if payload.json()["n"] == 0 else 3600)

    async with open_in_memory_client() as (client, engine):
        spy = EngineSpy(engine)
        worker = Worker(client, [QUEUE], lease=2.0, auto_extend=True, drain_timeout=1.0)
        worker.handle("t", probe.handler(body))
        ids = await enqueue(client, 2)
        async with anyio.create_task_group() as tg:
            await tg.start(worker.run)
            await probe.wait_starts(2)
            shutdown_at = anyio.current_time()
            worker.shutdown()
        assert anyio.current_time() - shutdown_at == pytest.approx(1.0, abs=0.001)
        [(_, first), (_, second)] = probe.starts
        quick, slow = (first, second) if probe.payloads[0] == {"n": 0} else (second, first)
        assert [ctx.id for ctx in probe.finished] == [quick.id]
        assert [ctx.id for ctx in probe.cancelled] == [slow.id]
        [ack] = spy.of("ack")
        assert ack.request.job_id == quick.id
        [nack] = spy.of("nack")
        assert (nack.request.job_id, nack_kind(nack)) == (slow.id, ("after", 0.0))
        assert "drain_timeout" in (nack.request.reason or "")
        again = engine.snapshot_job(slow.id)
        assert again is not None and (again.state, again.attempt) == (JobState.READY, 2)
        assert sorted(ids) == sorted([quick.id, slow.id])
        assert worker.statistics().nacked_retry == 1


async def test_a_zero_drain_timeout_nacks_at_once() -> None:
    probe = Probe()
    async with open_in_memory_client() as (client, engine):
        spy = EngineSpy(engine)
        worker = Worker(client, [QUEUE], drain_timeout=0)
        worker.handle("t", probe.handler(_gated(anyio.Event())))
        await enqueue(client)
        async with anyio.create_task_group() as tg:
            await tg.start(worker.run)
            await probe.wait_starts(1)
            shutdown_at = anyio.current_time()
            worker.shutdown()
        assert anyio.current_time() == shutdown_at
        [nack] = spy.of("nack")
        assert nack_kind(nack) == ("after", 0.0)
        assert len(probe.cancelled) == 1


async def test_async_with_runs_in_the_background_and_drains_on_exit() -> None:
    probe, gate = Probe(), anyio.Event()
    async with open_in_memory_client() as (client, engine):
        spy = EngineSpy(engine)
        worker = Worker(client, [QUEUE])
        worker.handle("t", probe.handler(_gated(gate)))
        async with worker as same:
            assert same is worker
            await enqueue(client, 2)
            await probe.wait_starts(2)
            assert worker.statistics().in_flight == 2

            async def open_gate() -> None:
                await anyio.sleep(5)
                gate.set()

            async with anyio.create_task_group() as tg:
                tg.start_soon(open_gate)
                exited_at = anyio.current_time()
        # The block's end waited for both handlers (5 s) and their acks.
        assert anyio.current_time() - exited_at == pytest.approx(5.0)
        assert len(spy.of("ack", ok=True)) == 2
        assert worker.statistics().in_flight == 0


async def test_an_exception_in_the_async_with_body_drains_and_propagates_unwrapped() -> None:
    probe = Probe()

    async def slow(payload: Payload | None, ctx: JobCtx) -> None:
        await anyio.sleep(3)

    async with open_in_memory_client() as (client, engine):
        spy = EngineSpy(engine)
        worker = Worker(client, [QUEUE])
        worker.handle("t", probe.handler(slow))
        await enqueue(client)

        async def body_fails() -> None:
            async with worker:
                await probe.wait_starts(1)
                raise KeyError("body")

        with pytest.raises(KeyError, match="body"):
            await body_fails()
        assert [c.ok for c in spy.of("ack")] == [True]


class Fatal(BaseException):
    pass


@pytest.mark.parametrize("how", ["run", "async-with"])
async def test_a_base_exception_from_a_handler_propagates_unwrapped(how: str) -> None:
    async def fatal(payload: Payload | None, ctx: JobCtx) -> None:
        raise Fatal("stop everything")

    async with open_in_memory_client() as (client, engine):
        spy = EngineSpy(engine)
        worker = Worker(client, [QUEUE])
        worker.handle("t", fatal)
        await enqueue(client)

        async def in_background() -> None:
            async with worker:
                await anyio.sleep_forever()

        with pytest.raises(Fatal, match="stop everything"):
            await (worker.run() if how == "run" else in_background())
        assert not [c for c in spy.calls if c.method in ("ack", "nack")]


async def _run_until_cancelled(
    client: Client, spy: EngineSpy, probe: Probe, worker: Worker
) -> tuple[float, float]:
    """Start ``worker``, wait for two handlers, cancel ``run()``; return (asked, returned)."""
    with anyio.CancelScope() as scope:
        async with anyio.create_task_group() as tg:
            await tg.start(worker.run)
            await enqueue(client, 2)
            await probe.wait_starts(2)
            await spy.wait_until(lambda: len(spy.of("reserve")) == 2)  # parked again
            asked = anyio.current_time()
            scope.cancel()
    return asked, anyio.current_time()


async def test_cancelling_run_cancels_everything_promptly_and_settles_nothing() -> None:
    probe = Probe()
    async with open_in_memory_client() as (client, engine):
        spy = EngineSpy(engine)
        worker = Worker(client, [QUEUE], lease=2.0, auto_extend=True)
        worker.handle("t", probe.handler(_gated(anyio.Event())))
        asked, returned = await _run_until_cancelled(client, spy, probe, worker)
        assert returned == asked  # promptly: no virtual time passed
        # Both handlers saw the cancellation before run() returned (no task outlived it).
        assert len(probe.cancelled) == 2
        assert probe.in_flight == 0
        assert worker.statistics().in_flight == 0
        assert not [c for c in spy.calls if c.method in ("ack", "nack")]
        assert all(c.done for c in spy.calls)  # the parked reserve was abandoned too
        extends = len(spy.of("extend"))
        await anyio.sleep(30)
        assert len(spy.of("extend")) == extends  # no heartbeat left running
        # Left to lease expiry: the server redelivers them.
        assert engine.stats()[QUEUE].ready == 2


async def test_a_cancelled_worker_is_not_running_any_more() -> None:
    probe = Probe()
    async with open_in_memory_client() as (client, engine):
        spy = EngineSpy(engine)
        worker = Worker(client, [QUEUE])
        worker.handle("t", probe.handler(_gated(anyio.Event())))
        await _run_until_cancelled(client, spy, probe, worker)
        # It can be started again; the redelivered jobs are processed then.
        probe2 = Probe()
        worker.replace_handler("t", probe2.handler())
        async with running(worker):
            await probe2.wait_starts(2)
            await spy.wait_for("ack", 2)
        assert probe2.attempts() == [2, 2]


async def test_statistics_reflect_the_work_in_progress(
    anyio_backend: tuple[str, dict[str, Any]],
) -> None:
    probe, gate = Probe(), anyio.Event()
    async with open_in_memory_client() as (client, engine):
        spy = EngineSpy(engine)
        worker = Worker(client, [QUEUE], max_in_flight=3)
        worker.handle("t", probe.handler(_gated(gate)))
        async with running(worker):
            await enqueue(client, 5)
            await probe.wait_starts(3)
            stats = worker.statistics()
            assert (stats.in_flight, stats.max_in_flight_seen, stats.processed) == (3, 3, 0)
            gate.set()
            await spy.wait_for("ack", 5)
        stats = worker.statistics()
        assert (stats.in_flight, stats.processed, stats.max_in_flight_seen) == (0, 5, 3)
        assert stats.reserves == len(spy.of("reserve"))
        assert stats.reserve_errors == 0


async def test_an_ack_in_progress_survives_the_cancellation_of_run() -> None:
    probe = Probe()
    async with open_in_memory_client() as (client, engine):
        spy = EngineSpy(engine)
        spy.stall["ack"].append(5.0)
        worker = Worker(client, [QUEUE])
        worker.handle("t", probe.handler())
        [job_id] = await enqueue(client)
        with anyio.CancelScope() as scope:
            async with anyio.create_task_group() as tg:
                await tg.start(worker.run)
                await spy.wait_until(lambda: bool(spy.of("ack")))
                asked = anyio.current_time()
                scope.cancel()
        # run() waited for the shielded ack (5 s) instead of losing a decided outcome.
        assert anyio.current_time() - asked == pytest.approx(5.0)
        [ack] = spy.of("ack")
        assert ack.ok and ack.request.job_id == job_id
        assert engine.snapshot_job(job_id) is None


async def test_an_ack_that_never_answers_is_abandoned_after_a_bound(
    caplog: pytest.LogCaptureFixture,
) -> None:
    probe = Probe()
    # The call's own timeout longer than the settle's bound: the bound is what ends it.
    async with open_in_memory_client(rpc_timeout=120.0) as (client, engine):
        spy = EngineSpy(engine)
        spy.stall["ack"].append(math.inf)
        worker = Worker(client, [QUEUE], max_in_flight=1)
        worker.handle("t", probe.handler())
        [first, second] = await enqueue(client, 2)
        with caplog.at_level(logging.ERROR, "sepp_anyio.worker"):
            async with running(worker):
                await spy.wait_for("ack")  # the second job's, once the first gave up
        [hung, done] = spy.of("ack")
        assert done.at - hung.at == pytest.approx(30.0)
        assert not hung.ok
        assert {hung.request.job_id, done.request.job_id} == {first, second}
        stats = worker.statistics()
        assert (stats.processed, stats.settle_errors) == (1, 1)
        assert any("did not finish within 30s" in r.getMessage() for r in caplog.records)


async def test_a_hung_ack_still_ends_at_its_bound_when_run_is_cancelled() -> None:
    """The settles' bounds are kept by a task of the worker's own; cancelling run() ends
    that task while an ack hangs (shielded), and the ack's bound must still hold: run()
    returns 30 s after the ack began, not never."""
    probe = Probe()
    async with open_in_memory_client(rpc_timeout=120.0) as (client, engine):
        spy = EngineSpy(engine)
        spy.stall["ack"].append(math.inf)
        worker = Worker(client, [QUEUE], max_in_flight=1)
        worker.handle("t", probe.handler())
        await enqueue(client, 1)
        with anyio.fail_after(300):
            async with anyio.create_task_group() as tg:
                tg.start_soon(worker.run)
                await spy.wait_until(lambda: bool(spy.of("ack")))
                tg.cancel_scope.cancel()
        [hung] = spy.of("ack")
        assert hung.done
        assert not hung.ok
        assert hung.ended_at is not None
        assert hung.ended_at - hung.at == pytest.approx(30.0)


async def test_cancel_in_flight_cancels_handlers_and_retries_their_jobs_at_once() -> None:
    async with open_in_memory_client() as (client, _):
        (ack,) = await client.enqueue_batch([sepp_anyio.EnqueueRequest("q", "slow")])
        assert isinstance(ack, sepp_anyio.EnqueueAck)
        worker = sepp_anyio.Worker(client, ["q"], wait=1.0)
        started = anyio.Event()
        cancelled = anyio.Event()

        @worker.handler("slow")
        async def slow(payload: sepp_anyio.Payload | None, ctx: sepp_anyio.JobCtx) -> None:
            started.set()
            try:
                await anyio.sleep(3600)
            finally:
                cancelled.set()

        assert worker.queues == ("q",)
        async with anyio.create_task_group() as tg:
            await tg.start(worker.run)
            await started.wait()
            worker.cancel_in_flight()
            worker.cancel_in_flight()  # idempotent
        assert cancelled.is_set()
        assert worker.statistics().nacked_retry == 1
        # Back in the queue at once, on its next attempt, not after the lease.
        (job,) = await client.reserve(["q"], lease=30, wait=0)
        assert job.ctx.id == ack.job_id
        assert job.ctx.attempt == 2
