"""``Worker(lifespan=...)``: set up before the first reserve and before ``run()`` reports
itself started, torn down after the drain (after the last ack), its value in
``worker.state`` and ``ctx.state``; a setup failure raised by ``run()`` and by
``async with worker`` as itself. Both backends, virtual time."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import anyio
import pytest

from sepp_anyio import InvalidArgumentTypeError, JobCtx, Payload, Worker
from sepp_anyio.testing import open_in_memory_client

from ._helpers import QUEUE, EngineSpy, enqueue, running

pytestmark = pytest.mark.anyio


@dataclass
class State:
    name: str
    seen: list[tuple[str, Any]] = field(default_factory=list)


class SetupFailed(Exception):
    pass


async def _nothing(payload: Payload | None, ctx: JobCtx) -> None:
    pass


async def test_setup_runs_before_the_first_reserve_and_teardown_after_the_last_ack() -> None:
    async with open_in_memory_client() as (client, engine):
        spy = EngineSpy(engine)
        release = anyio.Event()
        timeline: list[str] = []

        @asynccontextmanager
        async def lifespan(worker: Worker[State]) -> AsyncIterator[State]:
            timeline.append(f"setup, {len(spy.calls)} calls")
            await anyio.sleep(5)  # a slow setup still comes before every reserve
            yield State("app")
            acks = len(spy.of("ack", ok=True))
            timeline.append(f"teardown, {acks} acks, {worker.statistics().in_flight} in flight")

        worker = Worker(client, [QUEUE], lifespan=lifespan, auto_extend=True)

        @worker.handler("t")
        async def handle(payload: Payload | None, ctx: JobCtx[State]) -> None:
            ctx.state.seen.append(("job", worker.state is ctx.state))
            await release.wait()

        await enqueue(client, 3)
        async with anyio.create_task_group() as tg:
            await tg.start(worker.run)
            timeline.append(f"started, {len(spy.calls)} calls")
            await spy.wait_for("reserve")
            # Shut down while the handlers still run: the drain lets them finish first.
            worker.shutdown()
            release.set()
        assert timeline == [
            "setup, 0 calls",
            "started, 0 calls",
            "teardown, 3 acks, 0 in flight",
        ]
        assert spy.of("reserve")[0].at == pytest.approx(5.0)
        # Readable after run() returns, until the next run.
        assert worker.state.name == "app"
        assert worker.state.seen == [("job", True)] * 3


async def test_a_setup_failure_is_raised_by_run_without_reserving() -> None:
    async with open_in_memory_client() as (client, engine):
        spy = EngineSpy(engine)

        @asynccontextmanager
        async def lifespan(worker: Worker) -> AsyncIterator[None]:
            if not worker.queues:  # never: keeps the yield below reachable for mypy
                yield
            raise SetupFailed("no database")

        worker = Worker(client, [QUEUE], lifespan=lifespan)
        with pytest.raises(SetupFailed, match="no database"):
            await worker.run()
        assert spy.calls == []
        with pytest.raises(RuntimeError, match="not been entered"):
            _ = worker.state
        # The worker can run again (the failure left it not running).
        with pytest.raises(SetupFailed):
            await worker.run()


async def test_a_setup_failure_comes_out_of_async_with_worker_as_itself() -> None:
    async with open_in_memory_client() as (client, engine):
        spy = EngineSpy(engine)

        @asynccontextmanager
        async def lifespan(worker: Worker) -> AsyncIterator[None]:
            if not worker.queues:  # never: keeps the yield below reachable for mypy
                yield
            raise SetupFailed("no database")

        worker = Worker(client, [QUEUE], lifespan=lifespan)
        body = False
        with pytest.raises(SetupFailed, match="no database") as caught:
            async with worker:
                body = True
        assert type(caught.value) is SetupFailed
        assert not body and spy.calls == []


async def test_a_teardown_failure_is_raised_by_run_after_the_drain() -> None:
    async with open_in_memory_client() as (client, engine):
        spy = EngineSpy(engine)

        @asynccontextmanager
        async def lifespan(worker: Worker) -> AsyncIterator[None]:
            yield
            raise SetupFailed("could not close")

        worker = Worker(client, [QUEUE], lifespan=lifespan)
        worker.handle("t", _nothing)
        await enqueue(client)

        async def stop_after_the_ack() -> None:
            await spy.wait_for("ack")
            worker.shutdown()

        async with anyio.create_task_group() as tg:
            tg.start_soon(stop_after_the_ack)
            with pytest.raises(SetupFailed, match="could not close"):
                await worker.run()


async def test_a_plain_async_generator_is_a_lifespan_and_state_resets_per_run() -> None:
    runs = 0
    before_setup: list[str] = []

    async def lifespan(worker: Worker[int]) -> AsyncIterator[int]:
        nonlocal runs
        try:
            before_setup.append(f"state {worker.state}")
        except RuntimeError:
            before_setup.append("no state")
        runs += 1
        yield runs

    async with open_in_memory_client() as (client, engine):
        spy = EngineSpy(engine)
        seen: list[int] = []
        worker: Worker[int] = Worker(client, [QUEUE], lifespan=lifespan)

        @worker.handler("t")
        async def handle(payload: Payload | None, ctx: JobCtx[int]) -> None:
            seen.append(ctx.state)

        with pytest.raises(RuntimeError, match="not been entered"):
            _ = worker.state
        for count in (1, 2):
            await enqueue(client)
            # Cancelled from outside (a shutdown would stop the next run at once).
            async with anyio.create_task_group() as tg:
                await tg.start(worker.run)
                assert worker.state == count
                await spy.wait_for("ack", count)
                tg.cancel_scope.cancel()
            assert worker.state == count
        assert seen == [1, 2]
        # The second run's setup did not see the first run's state.
        assert before_setup == ["no state", "no state"]


async def test_without_a_lifespan_the_state_is_none() -> None:
    async with open_in_memory_client() as (client, engine):
        spy = EngineSpy(engine)
        seen: list[object] = []
        worker = Worker(client, [QUEUE])

        @worker.handler("t")
        async def handle(payload: Payload | None, ctx: JobCtx) -> None:
            seen.append(ctx.state)

        assert worker.state is None
        await enqueue(client)
        async with running(worker):
            await spy.wait_for("ack")
        assert seen == [None]


async def test_lifespan_argument_errors() -> None:
    async with open_in_memory_client() as (client, engine):
        spy = EngineSpy(engine)
        with pytest.raises(InvalidArgumentTypeError, match="lifespan must be callable"):
            Worker(client, [QUEUE], lifespan=42)  # type: ignore[arg-type]
        worker = Worker(client, [QUEUE], lifespan=lambda worker: 42)  # type: ignore[arg-type,return-value]
        with pytest.raises(TypeError, match="not an async context manager"):
            await worker.run()
        assert spy.calls == []
