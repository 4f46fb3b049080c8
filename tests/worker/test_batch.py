"""Batch handlers (``Worker.batch``): one call for up to ``max_size`` jobs gathered for at
most ``max_wait`` after the first, each job then settled on its own as its item says (a
lost lease never settled), the handler's exception settling the undecided ones, capacity
counting jobs, ``on_outcome`` per job, sync batch functions in a thread, the batch's
timeout and a shutdown's release. Both backends, virtual time."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import anyio
import anyio.lowlevel
import pytest

import sepp_anyio as sepp
from sepp_anyio import (
    BatchCtx,
    BatchItem,
    EnqueueRequest,
    HandlerError,
    JobCtx,
    Outcome,
    Payload,
    StatusCode,
    Task,
    Worker,
)
from sepp_anyio.server import EngineError
from sepp_anyio.testing import open_in_memory_client

from ._helpers import QUEUE, EngineSpy, nack_kind, running

pytestmark = pytest.mark.anyio

RawItems = list[BatchItem[Payload | None]]
#: The backoff for failed attempts without jitter, so that nacks can be compared exactly.
EXACT = sepp.Retry(backoff=2.0, factor=2.0, max_delay=60.0, jitter=None)


@dataclass(eq=False)
class Outcomes:
    """``on_outcome``'s calls: the first delivery's by job id, and a count of all."""

    seen: dict[str, tuple[Outcome, BaseException | None]] = field(default_factory=dict)
    calls: int = 0
    _changed: anyio.Event = field(default_factory=anyio.Event)

    def hook(self, ctx: JobCtx, outcome: Outcome, error: BaseException | None) -> None:
        self.calls += 1
        if ctx.attempt == 1:
            self.seen[ctx.id] = (outcome, error)
        self._changed.set()
        self._changed = anyio.Event()

    async def wait(self, count: int) -> None:
        while self.calls < count:
            await self._changed.wait()

    async def wait_first(self, count: int) -> None:
        """Until ``count`` first deliveries have been reported."""
        while len(self.seen) < count:
            await self._changed.wait()


def _n(item: BatchItem[Payload | None]) -> int:
    assert item.value is not None
    n = item.value.json()["n"]
    assert isinstance(n, int)
    return n


async def _enqueue(client: sepp.Client, count: int, *, first: int = 0) -> list[str]:
    """``count`` jobs of type ``t`` with payloads ``{"n": first + i}``, one at a time (so
    they are delivered in this order); their ids."""
    ids = []
    for n in range(first, first + count):
        ack = await client.enqueue(EnqueueRequest(QUEUE, "t", payload=Payload.from_json({"n": n})))
        ids.append(ack.job_id)
    return ids


async def test_a_batch_of_mixed_outcomes_with_one_lost_lease() -> None:
    outcomes = Outcomes()
    async with open_in_memory_client() as (client, engine):
        spy = EngineSpy(engine)
        ids = await _enqueue(client, 5)
        lost = ids[4]
        spy.reject["extend"] = lambda request: (
            EngineError(StatusCode.NOT_FOUND, "gone") if request.job_id == lost else None
        )
        worker = Worker(
            client, [QUEUE], lease=3.0, auto_extend=True, on_outcome=outcomes.hook, retry=EXACT
        )
        calls: list[list[int]] = []
        lost_flags: list[bool] = []

        @worker.batch("t", max_size=10, max_wait=0.5)
        async def handle(items: RawItems, ctx: BatchCtx) -> None:
            calls.append([_n(item) for item in items])
            if any(item.ctx.attempt > 1 for item in items):
                return  # the lost job, redelivered once its lease ran out: acked
            assert (ctx.job_type, ctx.size) == ("t", 5)
            assert not any(item.lease_lost for item in items)
            # Ten seconds of work on a three-second lease: every lease is extended, one
            # extension is refused.
            await anyio.sleep(10.0)
            by_id = {item.ctx.id: item for item in items}
            by_id[ids[1]].fail(ValueError("bad row"))
            by_id[ids[2]].retry(after=5.0)
            by_id[ids[3]].dead_letter("unusable")
            lost_flags.extend(item.lease_lost for item in items)

        async with running(worker):
            await outcomes.wait_first(5)
        assert calls[0] == [0, 1, 2, 3, 4]
        assert lost_flags == [False, False, False, False, True]
        settles = spy.of("ack") + spy.of("nack")
        first = [call for call in settles if call.request.attempt == 1]
        assert [call.request.job_id for call in first if call.method == "ack"] == [ids[0]]
        nacks = {call.request.job_id: nack_kind(call) for call in first if call.method == "nack"}
        assert nacks == {
            ids[1]: ("after", 2.0),  # a failure's backoff on attempt 1, as for one job
            ids[2]: ("after", 5.0),
            ids[3]: ("dead_letter", None),
        }
        extended = {call.request.job_id for call in spy.of("extend", ok=True)}
        assert extended == set(ids[:4])
        error = outcomes.seen[ids[1]][1]
        assert isinstance(error, ValueError)
        assert {job: outcome for job, (outcome, _) in outcomes.seen.items()} == {
            ids[0]: Outcome.ACKED,
            ids[1]: Outcome.RETRIED,
            ids[2]: Outcome.RETRIED,
            ids[3]: Outcome.DEAD_LETTERED,
            ids[4]: Outcome.LEASE_LOST,
        }
        stats = worker.statistics()
        assert (stats.nacked_retry, stats.nacked_dead_letter) == (2, 1)
        assert (stats.lease_lost, stats.in_flight) == (1, 0)


async def test_max_wait_counts_from_the_first_job_of_a_batch() -> None:
    async with open_in_memory_client() as (client, engine):
        spy = EngineSpy(engine)
        worker = Worker(client, [QUEUE], wait=60.0)
        calls: list[tuple[float, list[int]]] = []

        @worker.batch("t", max_size=10, max_wait=5.0)
        async def handle(items: RawItems, ctx: BatchCtx) -> None:
            calls.append((anyio.current_time(), [_n(item) for item in items]))

        async with running(worker):
            start = anyio.current_time()
            await _enqueue(client, 1)
            # The timeline, on virtual time: a second job comes two seconds later and
            # joins the batch, which runs five seconds after the first job came.
            await anyio.sleep(2.0)
            await _enqueue(client, 1, first=1)
            await spy.wait_for("ack", 2)
            # A third after the batch ran starts a batch of its own, five seconds later.
            third_at = anyio.current_time()
            await _enqueue(client, 1, first=2)
            await spy.wait_for("ack", 3)
        [(at, first), (later, second)] = calls
        assert first == [0, 1] and second == [2]
        assert at - start == pytest.approx(5.0, abs=0.01)
        assert later - third_at == pytest.approx(5.0, abs=0.01)


async def test_a_full_batch_runs_at_once() -> None:
    async with open_in_memory_client() as (client, engine):
        spy = EngineSpy(engine)
        worker = Worker(client, [QUEUE])
        calls: list[tuple[float, list[int]]] = []

        @worker.batch("t", max_size=2, max_wait=20.0)
        async def handle(items: RawItems, ctx: BatchCtx) -> None:
            calls.append((anyio.current_time(), sorted(_n(item) for item in items)))

        await _enqueue(client, 4)
        start = anyio.current_time()
        async with running(worker):
            await spy.wait_for("ack", 4)
        assert sorted(batch for _, batch in calls) == [[0, 1], [2, 3]]
        assert all(at - start < 1.0 for at, _ in calls)


async def test_capacity_counts_jobs_not_batches() -> None:
    async with open_in_memory_client() as (client, engine):
        spy = EngineSpy(engine)
        worker = Worker(client, [QUEUE], max_in_flight=3)
        sizes: list[int] = []
        in_flight: list[int] = []

        @worker.batch("t", max_size=10, max_wait=1.0)
        async def handle(items: RawItems, ctx: BatchCtx) -> None:
            sizes.append(len(items))
            in_flight.append(worker.statistics().in_flight)
            await anyio.sleep(1.0)

        await _enqueue(client, 7)
        async with running(worker):
            await spy.wait_for("ack", 7)
        assert sum(sizes) == 7 and max(sizes) == 3
        assert max(in_flight) == 3
        assert worker.statistics().max_in_flight_seen == 3


@pytest.mark.parametrize(
    ("raised", "expected"),
    [
        (RuntimeError("boom"), ("after", 2.0)),
        (HandlerError.permanent("no"), ("dead_letter", None)),
        (HandlerError.retry_after("later", 30.0), ("after", 30.0)),
    ],
    ids=["exception", "permanent", "retry_after"],
)
async def test_an_exception_settles_every_undecided_item_as_it_would_one_job(
    raised: Exception, expected: tuple[str, float | None]
) -> None:
    outcomes = Outcomes()
    async with open_in_memory_client() as (client, engine):
        spy = EngineSpy(engine)
        ids = await _enqueue(client, 4)
        worker = Worker(client, [QUEUE], on_outcome=outcomes.hook, retry=EXACT)

        @worker.batch("t", max_size=4, max_wait=1.0)
        async def handle(items: RawItems, ctx: BatchCtx) -> None:
            by_id = {item.ctx.id: item for item in items}
            by_id[ids[0]].ack()
            by_id[ids[1]].retry(after=7.0)
            raise raised

        async with running(worker):
            await outcomes.wait(4)
        assert [call.request.job_id for call in spy.of("ack")] == [ids[0]]
        nacks = {call.request.job_id: nack_kind(call) for call in spy.of("nack")}
        assert nacks == {ids[1]: ("after", 7.0), ids[2]: expected, ids[3]: expected}
        assert outcomes.seen[ids[2]][1] is raised
        assert outcomes.seen[ids[0]] == (Outcome.ACKED, None)


async def test_a_sync_batch_function_runs_in_a_worker_thread() -> None:
    async with open_in_memory_client() as (client, engine):
        spy = EngineSpy(engine)
        ids = await _enqueue(client, 3)
        # A thread is not on virtual time: the heartbeat keeps the leases.
        worker = Worker(client, [QUEUE], auto_extend=True)
        threads: list[int] = []

        @worker.batch("t", max_size=3, max_wait=1.0)
        def handle(items: RawItems, ctx: BatchCtx) -> None:
            threads.append(threading.get_ident())
            items[0].retry(after=1.0)

        async with running(worker):
            await spy.wait_for("nack")
            await spy.wait_for("ack", 2)
        assert len(threads) == 1 and threads[0] != threading.get_ident()
        assert {call.request.job_id for call in spy.of("ack")} | {
            call.request.job_id for call in spy.of("nack")
        } == set(ids)


async def test_a_typed_batch_gets_values_and_an_invalid_payload_is_dead_lettered() -> None:
    numbers = Task(QUEUE, "num", int)
    async with open_in_memory_client() as (client, engine):
        spy = EngineSpy(engine)
        for n in (1, 2):
            await numbers.enqueue(client, n)
        bad = await client.enqueue(EnqueueRequest(QUEUE, "num", payload=Payload.from_json("x")))
        worker = Worker(client, [QUEUE])
        values: list[list[int]] = []

        @worker.batch(numbers, max_size=10, max_wait=1.0)
        async def handle(items: list[BatchItem[int]], ctx: BatchCtx) -> None:
            values.append(sorted(item.value for item in items))

        async with running(worker):
            await spy.wait_for("ack", 2)
            await spy.wait_for("nack")
        assert values == [[1, 2]]
        [nack] = spy.of("nack")
        assert (nack.request.job_id, nack_kind(nack)) == (bad.job_id, ("dead_letter", None))
        assert "does not validate" in (nack.request.reason or "")


async def test_the_task_timeout_bounds_the_batch() -> None:
    slow = Task(QUEUE, "slow", int, timeout=2.0)
    outcomes = Outcomes()
    async with open_in_memory_client() as (client, engine):
        spy = EngineSpy(engine)
        done = await slow.enqueue(client, 1)
        late = await slow.enqueue(client, 2)
        worker = Worker(client, [QUEUE], job_timeout=100.0, on_outcome=outcomes.hook)
        started: list[float] = []

        @worker.batch(slow, max_wait=0.5)
        async def handle(items: list[BatchItem[int]], ctx: BatchCtx) -> None:
            started.append(anyio.current_time())
            for item in items:
                if item.value == 1:
                    item.ack()
            await anyio.sleep_forever()

        async with running(worker):
            await outcomes.wait(2)
            ended = anyio.current_time()
        assert ended - started[0] == pytest.approx(2.0, abs=0.01)
        assert [call.request.job_id for call in spy.of("ack")] == [done.job_id]
        [nack] = spy.of("nack")
        assert (nack.request.job_id, nack_kind(nack)) == (late.job_id, ("default", None))
        assert nack.request.reason == "timed out"
        assert outcomes.seen[late.job_id][0] is Outcome.TIMED_OUT


async def test_drain_timeout_releases_the_undecided_items_for_an_immediate_retry() -> None:
    outcomes = Outcomes()
    async with open_in_memory_client() as (client, engine):
        spy = EngineSpy(engine)
        ids = await _enqueue(client, 3)
        worker = Worker(client, [QUEUE], drain_timeout=1.0, on_outcome=outcomes.hook)
        running_now = anyio.Event()

        @worker.batch("t", max_size=3, max_wait=1.0)
        async def handle(items: RawItems, ctx: BatchCtx) -> None:
            items[0].retry(after=9.0)
            running_now.set()
            await anyio.sleep_forever()

        async with anyio.create_task_group() as tg:
            await tg.start(worker.run)
            await running_now.wait()
            shutdown_at = anyio.current_time()
            worker.shutdown()
        assert anyio.current_time() - shutdown_at == pytest.approx(1.0, abs=0.01)
        assert spy.of("ack") == []
        nacks = {call.request.job_id: nack_kind(call) for call in spy.of("nack")}
        assert nacks == {ids[0]: ("after", 9.0), ids[1]: ("after", 0.0), ids[2]: ("after", 0.0)}
        assert {job: outcome for job, (outcome, _) in outcomes.seen.items()} == {
            ids[0]: Outcome.RETRIED,
            ids[1]: Outcome.RELEASED,
            ids[2]: Outcome.RELEASED,
        }


async def test_a_shutdown_runs_the_gathered_jobs_at_once() -> None:
    async with open_in_memory_client() as (client, engine):
        spy = EngineSpy(engine)
        await _enqueue(client, 2)
        worker = Worker(client, [QUEUE], lease=60.0)
        calls: list[float] = []

        @worker.batch("t", max_size=10, max_wait=50.0)
        async def handle(items: RawItems, ctx: BatchCtx) -> None:
            calls.append(anyio.current_time())

        async with running(worker):
            # The next reserve goes out once the first one's jobs were handed to the collector.
            await spy.wait_until(lambda: len(spy.of("reserve")) >= 2)
            shutdown_at = anyio.current_time()
            worker.shutdown()
        assert len(spy.of("ack", ok=True)) == 2
        assert len(calls) == 1 and calls[0] - shutdown_at < 1.0


async def test_cancel_in_flight_releases_gathered_jobs_without_running_them() -> None:
    outcomes = Outcomes()
    async with open_in_memory_client() as (client, engine):
        spy = EngineSpy(engine)
        ids = await _enqueue(client, 2)
        worker = Worker(client, [QUEUE], lease=60.0, on_outcome=outcomes.hook)
        calls: list[int] = []

        @worker.batch("t", max_size=10, max_wait=50.0)
        async def handle(items: RawItems, ctx: BatchCtx) -> None:
            calls.append(len(items))

        async with anyio.create_task_group() as tg:
            await tg.start(worker.run)
            # The next reserve goes out once the first one's jobs were handed to the collector.
            await spy.wait_until(lambda: len(spy.of("reserve")) >= 2)
            worker.cancel_in_flight(reason="test")
        assert calls == []
        nacks = {call.request.job_id: nack_kind(call) for call in spy.of("nack")}
        assert nacks == {ids[0]: ("after", 0.0), ids[1]: ("after", 0.0)}
        assert {outcome for outcome, _ in outcomes.seen.values()} == {Outcome.RELEASED}


async def test_an_item_cannot_be_decided_after_its_batch() -> None:
    async with open_in_memory_client() as (client, engine):
        spy = EngineSpy(engine)
        await _enqueue(client, 1)
        worker = Worker(client, [QUEUE])
        kept: list[BatchItem[Payload | None]] = []

        @worker.batch("t", max_wait=0.0)
        async def handle(items: RawItems, ctx: BatchCtx) -> None:
            with pytest.raises(sepp.InvalidArgumentTypeError, match=r"fail\(\) takes an Exception"):
                items[0].fail(KeyboardInterrupt())  # type: ignore[arg-type]
            with pytest.raises(sepp.InvalidArgumentError, match=r"retry\(after=\)"):
                items[0].retry(after=-1.0)
            kept.extend(items)

        async with running(worker):
            await spy.wait_for("ack")
        with pytest.raises(RuntimeError, match="batch handler has returned"):
            kept[0].dead_letter()


def _noop(items: RawItems, ctx: BatchCtx) -> None:
    pass


@pytest.mark.parametrize(
    ("register", "error", "match"),
    [
        (lambda w: w.batch("t", max_size=0), sepp.InvalidArgumentError, "max_size must be >= 1"),
        (lambda w: w.batch("t", max_wait=-1), sepp.InvalidArgumentError, "max_wait"),
        (lambda w: w.batch("t", max_wait=30.0), sepp.InvalidArgumentError, "less than the"),
        (lambda w: w.batch(3), sepp.InvalidArgumentTypeError, "Task or a job type"),
        (lambda w: w.batch(""), sepp.InvalidArgumentError, "job_type must not be empty"),
        (
            lambda w: w.batch(Task("elsewhere", "t", int)),
            sepp.InvalidArgumentError,
            "does not reserve from",
        ),
        (
            lambda w: w.batch("t")(lambda items: None),
            sepp.InvalidArgumentTypeError,
            "cannot be called",
        ),
        (
            lambda w: w.handle("t", _noop) and w.batch("t")(_noop),
            sepp.DuplicateHandlerError,
            "t",
        ),
    ],
    ids=["max_size", "max_wait", "max_wait-lease", "type", "empty", "queue", "signature", "dup"],
)
async def test_bad_registrations_are_refused(
    register: Callable[[Worker], Any], error: type[Exception], match: str
) -> None:
    async with open_in_memory_client() as (client, _engine):
        worker = Worker(client, [QUEUE], lease=30.0)
        with pytest.raises(error, match=match):
            register(worker)


async def test_a_batch_handler_is_listed_and_can_be_removed() -> None:
    async with open_in_memory_client() as (client, engine):
        spy = EngineSpy(engine)
        worker = Worker(client, [QUEUE])
        worker.batch("t")(_noop)
        assert dict(worker.handlers) == {"t": _noop}  # type: ignore[comparison-overlap]
        seen: list[int] = []

        async def single(payload: Payload | None, ctx: JobCtx) -> None:
            seen.append(1)

        worker.replace_handler("t", single)
        await _enqueue(client, 1)
        async with running(worker):
            await spy.wait_for("ack")
        assert seen == [1]
