"""``Worker(middleware=[...])``: entered in order around the handler, inside its timeout;
their exceptions count as the handler's; one that swallows the handler's exception turns
the job into an ack. Both backends, virtual time."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

import anyio
import pytest

from sepp_anyio import HandlerError, InvalidArgumentTypeError, JobCtx, Payload, Worker
from sepp_anyio.testing import open_in_memory_client

from ._helpers import QUEUE, EngineSpy, enqueue, nack_kind, running

pytestmark = pytest.mark.anyio

Mw = Callable[[JobCtx], AbstractAsyncContextManager[object]]


def _recording(name: str, log: list[str]) -> Mw:
    @asynccontextmanager
    async def middleware(ctx: JobCtx) -> AsyncIterator[None]:
        log.append(f"{name} enter {ctx.job_type}")
        try:
            yield
        except Exception as exc:
            log.append(f"{name} saw {type(exc).__name__}")
            raise
        finally:
            log.append(f"{name} exit")

    return middleware


async def test_middleware_is_entered_in_order_around_the_handler() -> None:
    log: list[str] = []
    async with open_in_memory_client() as (client, engine):
        spy = EngineSpy(engine)
        worker = Worker(
            client, [QUEUE], middleware=[_recording("outer", log), _recording("inner", log)]
        )

        @worker.handler("t")
        async def handle(payload: Payload | None, ctx: JobCtx) -> None:
            log.append("handler")

        await enqueue(client)
        async with running(worker):
            await spy.wait_for("ack")
    assert log == ["outer enter t", "inner enter t", "handler", "inner exit", "outer exit"]


async def test_the_handlers_exception_passes_through_the_middleware_and_is_nacked() -> None:
    log: list[str] = []
    async with open_in_memory_client() as (client, engine):
        spy = EngineSpy(engine)
        worker = Worker(client, [QUEUE], middleware=[_recording("reporter", log)])

        @worker.handler("t")
        async def handle(payload: Payload | None, ctx: JobCtx) -> None:
            raise ValueError("broken")

        await enqueue(client)
        async with running(worker):
            [nack] = await spy.wait_for("nack")
    assert log == ["reporter enter t", "reporter saw ValueError", "reporter exit"]
    assert nack.request.reason == "handler raised ValueError: broken"
    kind, delay = nack_kind(nack)
    # The default retry policy: full jitter below 2 s on the first attempt.
    assert kind == "after" and delay is not None and 0.0 <= delay <= 2.0


@pytest.mark.parametrize("where", ["enter", "exit"])
async def test_a_middlewares_own_exception_counts_as_the_handlers(where: str) -> None:
    @asynccontextmanager
    async def failing(ctx: JobCtx) -> AsyncIterator[None]:
        if where == "enter":
            raise RuntimeError("no connection")
        yield
        raise RuntimeError("commit failed")

    ran: list[int] = []
    async with open_in_memory_client() as (client, engine):
        spy = EngineSpy(engine)
        worker = Worker(client, [QUEUE], middleware=[failing])

        @worker.handler("t")
        async def handle(payload: Payload | None, ctx: JobCtx) -> None:
            ran.append(ctx.attempt)

        await enqueue(client)
        async with running(worker):
            [nack] = await spy.wait_for("nack")
        message = "no connection" if where == "enter" else "commit failed"
        assert nack.request.reason == f"handler raised RuntimeError: {message}"
        assert not spy.of("ack")
    assert ran == ([] if where == "enter" else [1])


async def test_a_handler_error_from_middleware_keeps_its_directive() -> None:
    @asynccontextmanager
    async def gate(ctx: JobCtx) -> AsyncIterator[None]:
        if ctx.attempt > 0:  # always: keeps the yield below reachable for mypy
            raise HandlerError.permanent("tenant is gone")
        yield

    async with open_in_memory_client() as (client, engine):
        spy = EngineSpy(engine)
        worker = Worker(client, [QUEUE], middleware=[gate])
        worker.handle("t", _never)
        await enqueue(client)
        async with running(worker):
            [nack] = await spy.wait_for("nack")
        assert nack_kind(nack) == ("dead_letter", None) and nack.reply.dead_lettered
        assert worker.statistics().nacked_dead_letter == 1


async def test_a_middleware_that_swallows_the_exception_turns_it_into_an_ack() -> None:
    @asynccontextmanager
    async def swallow(ctx: JobCtx) -> AsyncIterator[None]:
        with contextlib.suppress(ValueError):  # its decision: the job is done
            yield

    async with open_in_memory_client() as (client, engine):
        spy = EngineSpy(engine)
        worker = Worker(client, [QUEUE], middleware=[swallow])

        @worker.handler("t")
        async def handle(payload: Payload | None, ctx: JobCtx) -> None:
            raise ValueError("ignored")

        await enqueue(client)
        async with running(worker):
            await spy.wait_for("ack")
        assert not spy.of("nack") and worker.statistics().processed == 1


async def test_the_job_timeout_covers_the_middleware_and_the_handler() -> None:
    @asynccontextmanager
    async def slow_setup(ctx: JobCtx) -> AsyncIterator[None]:
        await anyio.sleep(3)
        yield

    started: list[float] = []
    async with open_in_memory_client() as (client, engine):
        spy = EngineSpy(engine)
        worker = Worker(client, [QUEUE], job_timeout=5.0, auto_extend=True, middleware=[slow_setup])

        @worker.handler("t")
        async def handle(payload: Payload | None, ctx: JobCtx) -> None:
            started.append(anyio.current_time())
            await anyio.sleep(3)  # 3 + 3 > 5: the timeout counts both

        await enqueue(client)
        async with running(worker):
            [nack] = await spy.wait_for("nack")
        assert nack.request.reason == "timed out"
        assert nack.at - started[0] == pytest.approx(2.0, abs=0.01)


async def test_a_middleware_that_returns_no_context_manager_fails_the_job() -> None:
    def broken(ctx: JobCtx) -> Any:
        return 42

    async with open_in_memory_client() as (client, engine):
        spy = EngineSpy(engine)
        worker = Worker(client, [QUEUE], middleware=[broken])
        worker.handle("t", _never)
        await enqueue(client)
        async with running(worker):
            [nack] = await spy.wait_for("nack")
        assert "not an async context manager" in nack.request.reason


async def _never(payload: Payload | None, ctx: JobCtx) -> None:
    raise AssertionError("the handler must not run")


async def test_middleware_argument_errors() -> None:
    async with open_in_memory_client() as (client, _engine):
        with pytest.raises(InvalidArgumentTypeError, match="sequence of callables"):
            Worker(client, [QUEUE], middleware=_recording("one", []))  # type: ignore[arg-type]
        with pytest.raises(InvalidArgumentTypeError, match=r"middleware\[1\] must be callable"):
            Worker(client, [QUEUE], middleware=[_recording("one", []), 42])  # type: ignore[list-item]
