"""``Worker(on_outcome=...)``: called once per delivery with its ``sepp.Outcome`` (every
value reached here) and the handler's exception; sync or async; its own failure is logged
and changes nothing. Both backends, virtual time."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

import anyio
import anyio.lowlevel
import pytest
import trio

from sepp_anyio import (
    HandlerError,
    InvalidArgumentTypeError,
    JobCtx,
    Outcome,
    Payload,
    Task,
    Worker,
)
from sepp_anyio.testing import open_in_memory_client

from ._helpers import QUEUE, EngineSpy, enqueue, running

pytestmark = pytest.mark.anyio


@dataclass(eq=False)
class Outcomes:
    seen: list[tuple[str, int, Outcome, BaseException | None]] = field(default_factory=list)
    _changed: anyio.Event = field(default_factory=anyio.Event)

    async def hook(self, ctx: JobCtx, outcome: Outcome, error: BaseException | None) -> None:
        await anyio.lowlevel.checkpoint()  # an async hook is awaited
        self.seen.append((ctx.id, ctx.attempt, outcome, error))
        self._changed.set()
        self._changed = anyio.Event()

    async def wait(self, count: int) -> None:
        while len(self.seen) < count:
            await self._changed.wait()

    def of(self, job_id: str) -> list[tuple[int, Outcome, str | None]]:
        return [
            (attempt, outcome, None if error is None else type(error).__name__)
            for seen_id, attempt, outcome, error in self.seen
            if seen_id == job_id
        ]


async def test_acked_retried_and_dead_lettered() -> None:
    outcomes = Outcomes()
    async with open_in_memory_client() as (client, engine):
        spy = EngineSpy(engine)
        worker = Worker(client, [QUEUE], on_outcome=outcomes.hook)

        @worker.handler("ok")
        async def ok(payload: Payload | None, ctx: JobCtx) -> None:
            pass

        @worker.handler("flaky")
        async def flaky(payload: Payload | None, ctx: JobCtx) -> None:
            raise ValueError(f"attempt {ctx.attempt}")

        @worker.handler("permanent")
        async def permanent(payload: Payload | None, ctx: JobCtx) -> None:
            raise HandlerError.permanent("never")

        [acked] = await enqueue(client, job_type="ok")
        [retried] = await enqueue(client, job_type="flaky", max_attempts=2)
        [dead] = await enqueue(client, job_type="permanent")
        async with running(worker):
            await outcomes.wait(4)
            await spy.wait_for("nack", 3)
    assert outcomes.of(acked) == [(1, Outcome.ACKED, None)]
    # A failure on the last attempt is dead-lettered, as the server's reply says.
    assert outcomes.of(retried) == [
        (1, Outcome.RETRIED, "ValueError"),
        (2, Outcome.DEAD_LETTERED, "ValueError"),
    ]
    assert outcomes.of(dead) == [(1, Outcome.DEAD_LETTERED, "HandlerError")]


async def test_an_invalid_typed_payload_is_dead_lettered_with_its_error() -> None:
    outcomes = Outcomes()
    task = Task(QUEUE, "t", int)
    async with open_in_memory_client() as (client, _engine):
        worker = Worker(client, [QUEUE], on_outcome=outcomes.hook)

        @worker.task(task)
        async def handle(value: int, ctx: JobCtx) -> None:
            raise AssertionError("not reached")

        [job_id] = await enqueue(client)  # {"n": 0} is not an int
        async with running(worker):
            await outcomes.wait(1)
    assert outcomes.of(job_id) == [(1, Outcome.DEAD_LETTERED, "TaskPayloadError")]


async def test_timed_out() -> None:
    outcomes = Outcomes()
    async with open_in_memory_client() as (client, _engine):
        worker = Worker(
            client, [QUEUE], job_timeout=5.0, auto_extend=True, on_outcome=outcomes.hook
        )

        @worker.handler("slow")
        async def slow(payload: Payload | None, ctx: JobCtx) -> None:
            if ctx.attempt == 1:
                await anyio.sleep(3600)

        [timed_out] = await enqueue(client, job_type="slow")
        async with running(worker):
            await outcomes.wait(2)
    assert outcomes.of(timed_out) == [(1, Outcome.TIMED_OUT, None), (2, Outcome.ACKED, None)]


async def _sleep() -> None:
    await anyio.sleep(3600)


async def _sleep_in_a_native_task_group() -> None:
    """A shutdown's cancellation comes out of a trio nursery as a group of Cancelled
    (asyncio's TaskGroup lets it out bare)."""
    native = anyio.lowlevel.current_token().native_token
    if not isinstance(native, asyncio.AbstractEventLoop):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(trio.sleep_forever)
            nursery.start_soon(trio.sleep_forever)
    else:
        async with asyncio.TaskGroup() as group:
            group.create_task(asyncio.sleep(3600))
            group.create_task(asyncio.sleep(3600))


# With a heartbeat the shutdown cancels the handler's own scope; without one, the job's
# task, whose (async) hook must then still be awaited to the end.
@pytest.mark.parametrize(
    ("auto_extend", "hold"),
    [(True, _sleep), (False, _sleep), (False, _sleep_in_a_native_task_group)],
    ids=["heartbeat", "no-heartbeat", "no-heartbeat-native-task-group"],
)
async def test_released(auto_extend: bool, hold: Callable[[], Awaitable[None]]) -> None:
    outcomes = Outcomes()
    async with open_in_memory_client() as (client, engine):
        spy = EngineSpy(engine)
        started = anyio.Event()
        worker = Worker(client, [QUEUE], auto_extend=auto_extend, on_outcome=outcomes.hook)

        @worker.handler("held")
        async def held(payload: Payload | None, ctx: JobCtx) -> None:
            started.set()
            await hold()

        [released] = await enqueue(client, job_type="held")
        async with running(worker):
            await started.wait()
            worker.cancel_in_flight()
            await spy.wait_for("nack")
            await outcomes.wait(1)
    assert outcomes.of(released) == [(1, Outcome.RELEASED, None)]


async def test_lease_lost_and_settle_failed() -> None:
    outcomes = Outcomes()
    async with open_in_memory_client() as (client, engine):
        spy = EngineSpy(engine)
        worker = Worker(client, [QUEUE], lease=2.0, on_outcome=outcomes.hook)

        @worker.handler("late")
        async def late(payload: Payload | None, ctx: JobCtx) -> None:
            if ctx.attempt == 1:
                await anyio.sleep(3)  # the 2 s lease silently runs out; the ack fails

        [settle_failed] = await enqueue(client, job_type="late")
        async with running(worker):
            await spy.wait_for("ack", 2, ok=False)
            await outcomes.wait(2)
    assert sorted(outcomes.of(settle_failed)) == [
        (1, Outcome.SETTLE_FAILED, None),
        (2, Outcome.ACKED, None),
    ]

    outcomes = Outcomes()
    async with open_in_memory_client() as (client, engine):
        worker = Worker(
            client,
            [QUEUE],
            lease=2.0,
            auto_extend=True,
            max_lease_time=5.0,
            on_outcome=outcomes.hook,
        )

        @worker.handler("forever")
        async def forever(payload: Payload | None, ctx: JobCtx) -> None:
            if ctx.attempt == 1:
                await anyio.sleep_forever()

        [lost] = await enqueue(client, job_type="forever")
        async with running(worker):
            await outcomes.wait(2)
    assert sorted(outcomes.of(lost)) == [(1, Outcome.LEASE_LOST, None), (2, Outcome.ACKED, None)]


async def test_an_expired_job_is_reported_expired_without_an_error() -> None:
    outcomes = Outcomes()
    expiring = Task(QUEUE, "expiring", int, expires=1.0)
    async with open_in_memory_client() as (client, _):
        worker = Worker(client, [QUEUE], on_outcome=outcomes.hook)

        @worker.task(expiring)
        async def never(value: int, ctx: JobCtx) -> None:
            raise AssertionError("an expired job must not run")

        stale = await expiring.enqueue(client, 1)
        await anyio.sleep(2)
        async with running(worker):
            await outcomes.wait(1)
    assert outcomes.of(stale.job_id) == [(1, Outcome.EXPIRED, None)]


def test_every_outcome_value_is_reached_by_the_tests_above() -> None:
    # The tests of this module between them assert every member.
    source = Path(__file__).read_text(encoding="utf-8")
    for member in Outcome:
        assert f"Outcome.{member.name}, " in source, member


@pytest.mark.parametrize("kind", ["sync", "async"])
async def test_a_failing_hook_is_logged_and_changes_nothing(
    kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    calls: list[Outcome] = []

    def sync_hook(ctx: JobCtx, outcome: Outcome, error: BaseException | None) -> None:
        calls.append(outcome)
        raise RuntimeError("metrics backend down")

    async def async_hook(ctx: JobCtx, outcome: Outcome, error: BaseException | None) -> None:
        sync_hook(ctx, outcome, error)

    async with open_in_memory_client() as (client, engine):
        spy = EngineSpy(engine)
        worker = Worker(client, [QUEUE], on_outcome=sync_hook if kind == "sync" else async_hook)

        @worker.handler("t")
        async def handle(payload: Payload | None, ctx: JobCtx) -> None:
            pass

        await enqueue(client, 2)
        with caplog.at_level(logging.ERROR, "sepp_anyio.worker"):
            async with running(worker):
                await spy.wait_for("ack", 2)
        assert worker.statistics().processed == 2 and not spy.of("nack")
    assert calls == [Outcome.ACKED, Outcome.ACKED]
    failures = [r for r in caplog.records if "on_outcome raised" in r.getMessage()]
    assert len(failures) == 2
    assert failures[0].exc_info is not None


async def test_the_hook_sees_the_middlewares_exception() -> None:
    outcomes = Outcomes()

    @asynccontextmanager
    async def failing(ctx: JobCtx) -> AsyncIterator[None]:
        if ctx.attempt > 0:  # always: keeps the yield below reachable for mypy
            raise ConnectionError("db down")
        yield

    async with open_in_memory_client() as (client, _engine):
        worker = Worker(client, [QUEUE], middleware=[failing], on_outcome=outcomes.hook)
        worker.handle("t", _nothing)
        [job_id] = await enqueue(client)
        async with running(worker):
            await outcomes.wait(1)
    assert outcomes.of(job_id) == [(1, Outcome.RETRIED, "ConnectionError")]


async def _nothing(payload: Payload | None, ctx: JobCtx) -> None:
    pass


async def test_on_outcome_must_be_callable() -> None:
    async with open_in_memory_client() as (client, _engine):
        with pytest.raises(InvalidArgumentTypeError, match="on_outcome must be callable"):
            Worker(client, [QUEUE], on_outcome="log")  # type: ignore[arg-type]
