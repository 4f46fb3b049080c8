"""Results (``Task(..., result=...)``, ``sepp.Results``, ``handle.result()``): typed round
trips, the fixed wire format, one result per job however often it is delivered, failures on
the last attempt or a dead-letter only, validation on both sides, and the Results' own
bookkeeping (kept results, the bound, timeouts, closing). Both backends, virtual time."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import anyio
import pytest

import sepp_anyio as sepp
from sepp_anyio import (
    EnqueueRequest,
    HandlerError,
    InvalidResultError,
    JobCtx,
    JobFailedError,
    Payload,
    Result,
    Results,
    ResultTimeoutError,
    SeppError,
    StatusCode,
    Task,
    Worker,
)
from sepp_anyio.server import EngineError
from sepp_anyio.testing import open_in_memory_client

from ._helpers import EngineSpy, running, unavailable

pytestmark = pytest.mark.anyio

REPLIES = "results.web-1"


@dataclasses.dataclass
class Spec:
    pages: int


@dataclasses.dataclass
class Report:
    pages: int
    title: str


render = Task("reports", "render", Spec, result=Report)


async def _reply_jobs(client: sepp.Client, queue: str = REPLIES) -> list[sepp.Job]:
    """The result jobs waiting in ``queue`` (reserved: they stay leased)."""
    return await client.reserve([queue], lease=600.0, wait=0.0, max_jobs=100)


def test_the_result_names_are_public() -> None:
    for name in (
        "Results",
        "ResultHandle",
        "Result",
        "JobFailedError",
        "InvalidResultError",
        "ResultTimeoutError",
    ):
        assert name in sepp.__all__
        assert getattr(sepp, name).__module__ == "sepp_anyio"
    assert issubclass(ResultTimeoutError, TimeoutError)
    assert issubclass(JobFailedError, SeppError) and issubclass(InvalidResultError, SeppError)


@pytest.mark.parametrize("sync", [False, True], ids=["async", "sync"])
async def test_a_result_round_trips_typed(sync: bool) -> None:
    async with open_in_memory_client() as (client, _):
        # A thread is not on virtual time: the heartbeat keeps the lease.
        worker = Worker(client, ["reports"], auto_extend=sync)
        if sync:

            @worker.task(render)
            def handle_sync(spec: Spec, ctx: JobCtx) -> Report:
                return Report(spec.pages, f"sync {ctx.attempt}")
        else:

            @worker.task(render)
            async def handle(spec: Spec, ctx: JobCtx) -> Report:
                return Report(spec.pages, f"async {ctx.attempt}")

        async with Results(client, queue=REPLIES) as results, running(worker):
            handle_ = await render.enqueue(client, Spec(3), reply_to=results)
            assert handle_.ack is not None and handle_.ack.job_id == handle_.job_id
            # A virtual clock jumps while a thread runs (nothing else waits on a timer): a
            # timeout would expire at once, so the sync variant waits without one (the
            # suite's timeout bounds it).
            report = await handle_.result(timeout=None if sync else 60)
            # Awaiting again gives the same value.
            assert await handle_.result() == report
            assert handle_.done
        assert report == Report(3, f"{'sync' if sync else 'async'} 1")
        assert results.received == 1 and results.kept == 0


async def test_the_result_job_has_the_documented_wire_format() -> None:
    async with open_in_memory_client() as (client, engine):
        spy = EngineSpy(engine)
        worker = Worker(client, ["reports"])

        @worker.task(render)
        async def handle(spec: Spec, ctx: JobCtx) -> Report:
            return Report(spec.pages, "t")

        ack = await client.enqueue(render.request(Spec(2), reply_to=REPLIES))
        async with running(worker):
            await spy.wait_for("ack")
        [job] = await _reply_jobs(client)
        # Sent before the ack: the first ack is the job's own.
        assert spy.of("ack")[0].request.job_id == ack.job_id
    assert job.ctx.job_type == "sepp.result"
    assert job.ctx.custom == {"sepp.correlation_id": ack.job_id}
    assert job.payload is not None and job.payload.encoding == "application/json"
    assert json.loads(job.payload.data) == {"ok": True, "value": {"pages": 2, "title": "t"}}


async def test_the_result_is_sent_before_the_job_is_acked() -> None:
    async with open_in_memory_client() as (client, engine):
        spy = EngineSpy(engine)
        # The ack is held on its way to the engine: while it is, the result must be there.
        spy.stall["ack"] = [100.0]
        worker = Worker(client, ["reports"])

        @worker.task(render)
        async def handle(spec: Spec, ctx: JobCtx) -> Report:
            return Report(spec.pages, "t")

        await client.enqueue(render.request(Spec(2), reply_to=REPLIES))
        async with running(worker):
            await spy.wait_until(lambda: len(spy.of("ack")) == 1)
            [job] = await _reply_jobs(client)
            assert not spy.of("ack")[0].done
            await spy.wait_for("ack")
    assert job.ctx.job_type == "sepp.result"


async def test_a_redelivered_job_sends_one_result() -> None:
    async with open_in_memory_client() as (client, engine):
        spy = EngineSpy(engine)
        # The first attempt's ack is lost: the job is redelivered when its lease expires,
        # and its handler runs again (returning another value).
        spy.reject["ack"] = lambda request: (
            EngineError(StatusCode.NOT_FOUND, "lost ack") if request.attempt == 1 else None
        )
        worker = Worker(client, ["reports"], lease=5.0)
        attempts: list[int] = []

        @worker.task(render)
        async def handle(spec: Spec, ctx: JobCtx) -> Report:
            attempts.append(ctx.attempt)
            return Report(spec.pages, f"attempt {ctx.attempt}")

        ack = await client.enqueue(render.request(Spec(1), reply_to=REPLIES, max_attempts=5))
        async with running(worker):
            await spy.wait_for("ack", 2, ok=False)
            await spy.wait_until(lambda: any(c.ok for c in spy.of("ack")))
        assert attempts == [1, 2]
        jobs = await _reply_jobs(client)
    # One result, the first attempt's: the second send was deduplicated by its key.
    assert [job.ctx.custom["sepp.correlation_id"] for job in jobs] == [ack.job_id]
    assert jobs[0].payload is not None
    assert jobs[0].payload.json()["value"]["title"] == "attempt 1"


async def test_a_failure_is_sent_on_the_last_attempt_only() -> None:
    async with open_in_memory_client() as (client, engine):
        spy = EngineSpy(engine)
        worker = Worker(client, ["reports"])

        @worker.task(render)
        async def handle(spec: Spec, ctx: JobCtx) -> Report:
            raise ValueError(f"no pages in attempt {ctx.attempt}")

        async with Results(client, queue=REPLIES) as results, running(worker):
            handle_ = await render.enqueue(client, Spec(1), reply_to=results, max_attempts=2)
            with pytest.raises(JobFailedError) as info:
                await handle_.result(timeout=600)
            await spy.wait_for("nack", 2)
        assert results.received == 1
    error = info.value
    assert (error.job_id, error.error_type) == (handle_.job_id, "ValueError")
    assert error.error_message == "no pages in attempt 2"
    assert str(error) == f"job {handle_.job_id!r} failed: ValueError: no pages in attempt 2"


async def test_a_dead_letter_sends_the_failure_at_once() -> None:
    async with open_in_memory_client() as (client, _):
        worker = Worker(client, ["reports"])

        @worker.task(render)
        async def handle(spec: Spec, ctx: JobCtx) -> Report:
            raise HandlerError("spec is unusable", sepp.RetryDirective.dead_letter())

        async with Results(client, queue=REPLIES) as results, running(worker):
            handle_ = await render.enqueue(client, Spec(1), reply_to=results, max_attempts=9)
            with pytest.raises(JobFailedError) as info:
                await handle_.result(timeout=60)
    assert (info.value.error_type, info.value.error_message) == ("HandlerError", "spec is unusable")


async def test_a_handler_result_that_does_not_validate_fails_the_attempt() -> None:
    async with open_in_memory_client() as (client, engine):
        spy = EngineSpy(engine)
        worker = Worker(client, ["reports"])

        @worker.task(render)
        async def handle(spec: Spec, ctx: JobCtx) -> Any:
            return {"pages": "many"}

        async with Results(client, queue=REPLIES) as results, running(worker):
            handle_ = await render.enqueue(client, Spec(1), reply_to=results, max_attempts=1)
            with pytest.raises(JobFailedError) as info:
                await handle_.result(timeout=60)
            [nack] = await spy.wait_for("nack")
        # (The one ack is the Results' own, of the failure.)
        assert handle_.job_id not in [call.request.job_id for call in spy.of("ack")]
    assert info.value.error_type == "InvalidResultError"
    assert "Task 'reports/render': the handler's result does not validate" in str(info.value)
    assert "handler raised InvalidResultError" in nack.request.reason


async def test_a_plain_handler_and_a_task_without_result_type_send_null() -> None:
    plain = Task("reports", "plain", Spec)
    async with open_in_memory_client() as (client, _):
        worker = Worker(client, ["reports"])

        @worker.task(plain)
        async def handle(spec: Spec, ctx: JobCtx) -> None:
            pass

        @worker.handler("untyped")
        async def untyped(payload: Payload | None, ctx: JobCtx) -> None:
            pass

        async with Results(client, queue=REPLIES) as results, running(worker):
            # (Typed Any: mypy refuses to use the value of a None-typed result.)
            first: sepp.ResultHandle[Any] = await plain.enqueue(client, Spec(1), reply_to=results)
            values: list[object] = [await first.result(timeout=60)]
            ack = await client.enqueue(
                EnqueueRequest("reports", "untyped", custom={"sepp.reply_to": REPLIES})
            )
            second: sepp.ResultHandle[Any] = results.handle(plain, ack.job_id)
            values.append(await second.result(timeout=60))
        assert values == [None, None]


async def test_a_result_that_cannot_be_sent_leaves_the_job_unacked() -> None:
    async with open_in_memory_client(
        server={"strict_queues": True}, queues=[{"name": "reports"}]
    ) as (client, engine):
        spy = EngineSpy(engine)
        worker = Worker(client, ["reports"])

        @worker.task(render)
        async def handle(spec: Spec, ctx: JobCtx) -> Report:
            return Report(1, "t")

        await client.enqueue(render.request(Spec(1), reply_to="undeclared", max_attempts=3))
        async with running(worker):
            [nack] = await spy.wait_for("nack")
        assert not spy.of("ack")
    assert "could not send the result to reply queue 'undeclared'" in nack.request.reason


async def test_a_result_for_no_waiting_handle_is_kept_until_get_within_the_bound() -> None:
    async with open_in_memory_client() as (client, engine):
        spy = EngineSpy(engine)
        worker = Worker(client, ["reports"])

        @worker.task(render)
        async def handle(spec: Spec, ctx: JobCtx) -> Report:
            return Report(spec.pages, "kept")

        async with Results(client, queue=REPLIES, keep=2) as results:
            # Enqueued with a queue name: no handle waits for them.
            ids = [
                (await client.enqueue(render.request(Spec(n), reply_to=REPLIES))).job_id
                for n in range(3)
            ]
            async with running(worker):
                # (Each result is counted before the Results' next reserve, which the spy
                # sees.)
                await spy.wait_until(lambda: results.received == 3)
            # Kept: the last two to arrive; the oldest was dropped and counted.
            assert (results.kept, results.dropped) == (2, 1)
            kept = {job_id: results.get(job_id) for job_id in ids}
            assert all(results.get(job_id) is None for job_id in ids)  # taken
            # A handle made now finds nothing (taken) and waits.
            assert not results.handle(render, ids[2]).done
    [dropped] = [job_id for job_id, result in kept.items() if result is None]
    for n, job_id in enumerate(ids):
        result = kept[job_id]
        if job_id != dropped:
            assert isinstance(result, Result) and result.ok and result.job_id == job_id
            assert render.decode_result(result.value) == Report(n, "kept")


async def test_a_handle_made_after_the_result_arrived_finds_it() -> None:
    async with open_in_memory_client() as (client, engine):
        spy = EngineSpy(engine)
        worker = Worker(client, ["reports"])

        @worker.task(render)
        async def handle(spec: Spec, ctx: JobCtx) -> Report:
            return Report(spec.pages, "late")

        async with Results(client, queue=REPLIES) as results:
            ack = await client.enqueue(render.request(Spec(4), reply_to=results))
            async with running(worker):
                await spy.wait_for("ack")
                await spy.wait_until(lambda: results.kept == 1)
            handle_ = results.handle(render, ack.job_id)
            assert handle_.done and results.kept == 0
            assert await handle_.result() == Report(4, "late")


async def test_a_result_is_validated_on_the_way_in() -> None:
    async with (
        open_in_memory_client() as (client, _),
        Results(client, queue=REPLIES) as results,
    ):
        handle_ = results.handle(render, "job-1")
        other = results.handle(render, "job-2")
        await client.enqueue_batch(
            [
                EnqueueRequest(
                    REPLIES,
                    "sepp.result",
                    payload=Payload.from_json({"ok": True, "value": {"pages": "x"}}),
                    custom={"sepp.correlation_id": "job-1"},
                ),
                EnqueueRequest(
                    REPLIES,
                    "sepp.result",
                    payload=Payload.from_json({"ok": "maybe"}),
                    custom={"sepp.correlation_id": "job-2"},
                ),
            ]
        )
        with pytest.raises(InvalidResultError, match="field 'pages'"):
            await handle_.result(timeout=60)
        with pytest.raises(InvalidResultError, match="not a result envelope"):
            await other.result(timeout=60)


async def test_a_job_in_the_reply_queue_that_is_no_result_is_dead_lettered() -> None:
    async with open_in_memory_client() as (client, engine):
        spy = EngineSpy(engine)
        async with Results(client, queue=REPLIES) as results:
            await client.enqueue(EnqueueRequest(REPLIES, "stray"))
            [nack] = await spy.wait_for("nack")
        assert results.received == 0
    assert nack.request.retry.dead_letter is not None
    assert "not a result: job_type 'stray'" in nack.request.reason


async def test_a_result_that_does_not_come_times_out_on_virtual_time() -> None:
    async with (
        open_in_memory_client() as (client, _),
        Results(client, queue=REPLIES) as results,
    ):
        handle_ = await render.enqueue(client, Spec(1), reply_to=results)
        start = anyio.current_time()
        with pytest.raises(ResultTimeoutError, match="within 60s"):
            await handle_.result(timeout=60)
        assert anyio.current_time() - start == pytest.approx(60, abs=1)
        # A cancelled wait changes nothing: the handle still waits.
        with anyio.move_on_after(1):
            await handle_.result()
        assert not handle_.done


async def test_closing_the_results_wakes_waiting_handles() -> None:
    async with open_in_memory_client() as (client, _):
        results = Results(client, queue=REPLIES)
        errors: list[SeppError] = []

        async def wait(handle_: sepp.ResultHandle[Report]) -> None:
            try:
                await handle_.result()
            except SeppError as exc:
                errors.append(exc)

        async with anyio.create_task_group() as tg, results:
            assert results.running
            tg.start_soon(wait, results.handle(render, "job-1"))
            await anyio.sleep(1)  # virtual time: the waiter is parked by then
            assert not errors
        assert not results.running
        [error] = errors
        assert "not running" in str(error) and "'job-1'" in str(error)
        # Outside the block a handle cannot wait.
        with pytest.raises(SeppError, match="use it in 'async with'"):
            await results.handle(render, "job-2").result(timeout=1)


def test_results_arguments_are_checked() -> None:
    client: Any = object()
    with pytest.raises(sepp.InvalidArgumentError, match="Results keep must be >= 0"):
        Results(client, queue=REPLIES, keep=-1)
    with pytest.raises(sepp.InvalidArgumentError, match="Results queue"):
        Results(client, queue="a/b")
    with pytest.raises(sepp.InvalidArgumentTypeError, match=r"reply_to must be a sepp\.Results"):
        render.request(Spec(1), reply_to=3)  # type: ignore[arg-type]


async def test_a_failed_reserve_of_the_results_is_retried_after_a_pause() -> None:
    async with open_in_memory_client() as (client, engine):
        spy = EngineSpy(engine)
        spy.fail("reserve", unavailable(), unavailable())
        worker = Worker(client, ["reports"])

        @worker.task(render)
        async def handle(spec: Spec, ctx: JobCtx) -> Report:
            return Report(spec.pages, "after the outage")

        def reserves() -> list[Any]:
            return [c for c in spy.of("reserve") if list(c.request.queues) == [REPLIES]]

        async with Results(client, queue=REPLIES) as results:
            await spy.wait_until(lambda: len(reserves()) >= 3)
            first, second, third = reserves()[:3]
            assert first.error is not None and second.error is not None
            # Paused 0.5 s, then twice that.
            assert second.at - first.at == pytest.approx(0.5)
            assert third.at - second.at == pytest.approx(1.0)
            async with running(worker):
                handle_ = await render.enqueue(client, Spec(5), reply_to=results)
                assert await handle_.result(timeout=120) == Report(5, "after the outage")


async def test_an_undeclared_reply_queue_ends_the_block_with_the_error() -> None:
    async with open_in_memory_client(
        server={"strict_queues": True}, queues=[{"name": "reports"}]
    ) as (client, _):
        with pytest.raises(ExceptionGroup) as info:
            async with Results(client, queue="undeclared"):
                await anyio.sleep_forever()
    assert info.group_contains(sepp.UnknownQueuesError)


async def test_two_handles_of_one_job_share_its_result_delivered_once() -> None:
    async with open_in_memory_client() as (client, engine):
        spy = EngineSpy(engine)
        async with Results(client, queue=REPLIES) as results:
            first = results.handle(render, "job-1")
            result = EnqueueRequest(
                REPLIES,
                "sepp.result",
                payload=Payload.from_json({"ok": True, "value": {"pages": 1, "title": "t"}}),
                custom={"sepp.correlation_id": "job-1"},
            )
            # Delivered twice (as when the Results' ack of it was lost).
            await client.enqueue_batch([result, result])
            await spy.wait_until(lambda: results.received == 2)
            second = results.handle(render, "job-1")
            assert await first.result() == await second.result() == Report(1, "t")
            assert results.kept == 0
