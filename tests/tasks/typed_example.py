"""A typed example that ``test_typing.py`` type-checks with ``mypy --strict``.

Every line that carries a ``# type: ignore[code]`` is a mistake mypy must catch with that
error code; every other line must pass. The project's own mypy run checks this file as it is
(``warn_unused_ignores`` then fails on a mistake that went unnoticed); the test also checks
a copy without the ignores and compares the errors line by line.

``Worker.task`` registers the handlers; ``JobCtx[AppState]`` types ``ctx.state`` with the
worker's lifespan value, and a bare ``JobCtx`` stays valid. ``Task[In, Out]`` types a
task's result: its handler must return ``Out`` and ``handle.result()`` returns it;
``Task[In]`` is ``Task[In, None]``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import msgspec
import pydantic
from typing_extensions import TypedDict

from sepp_anyio import (
    Client,
    EnqueueAck,
    EnqueueRequest,
    JobCtx,
    Outcome,
    Result,
    ResultHandle,
    Results,
    Task,
    Worker,
)


@dataclasses.dataclass
class AppState:
    db: str


@asynccontextmanager
async def lifespan(worker: Worker[AppState]) -> AsyncIterator[AppState]:
    yield AppState(db="pool")


class Welcome(pydantic.BaseModel):
    user: int


@dataclasses.dataclass
class Refund:
    order: int


class Ping(TypedDict):
    n: int


class Tick(msgspec.Struct):
    at: float


send_welcome = Task("emails", "send_welcome", Welcome, priority=5, max_attempts=5, timeout=30.0)
refund = Task("shop", "refund", Refund)
ping = Task("ops", "ping", Ping)
tick = Task("ops", "tick", Tick)
counts = Task("ops", "counts", dict[str, int])
maybe: Task[int | None] = Task("ops", "maybe", int | None)
anything: Task[Any] = Task("ops", "anything", Any)


class Report(pydantic.BaseModel):
    pages: int


render = Task("shop", "render", Refund, result=Report)
typed_render: Task[Refund, Report] = render
no_result: Task[Refund, None] = refund
optional_result: Task[Refund, int | None] = Task("shop", "maybe_count", Refund, result=int | None)
wrong_result: Task[Refund, Report] = refund  # type: ignore[assignment]


async def await_results(client: Client) -> None:
    async with Results(client, queue="results.web-1") as results:
        handle: ResultHandle[Report] = await render.enqueue(
            client, Refund(order=1), reply_to=results
        )
        report: Report = await handle.result(timeout=60)
        pages: int = (await handle.result()).pages
        nothing: ResultHandle[None] = await refund.enqueue(
            client, Refund(order=2), reply_to=results
        )
        kept: Result | None = results.get(handle.job_id)
        again: ResultHandle[Report] = results.handle(render, handle.job_id)
        request: EnqueueRequest = render.request(Refund(order=3), reply_to="results.web-1")
        print(report, pages, nothing, kept, again, request)
        bad: Refund = await handle.result()  # type: ignore[assignment]
        await handle.result(timeout="soon")  # type: ignore[arg-type]
        print(bad)


async def produce(client: Client) -> None:
    ack: EnqueueAck = await send_welcome.enqueue(
        client, Welcome(user=42), delay=10.0, idempotency_key="welcome-42"
    )
    request: EnqueueRequest = send_welcome.request(Welcome(user=42))
    await client.enqueue_atomic([request, refund.request(Refund(order=1))])
    await refund.enqueue(client, Refund(order=1), priority=1, custom={"k": "v"})
    await ping.enqueue(client, {"n": 1})
    await tick.enqueue(client, Tick(at=1.0))
    await counts.enqueue(client, {"a": 1})
    await maybe.enqueue(client, None)
    await anything.enqueue(client, [1, "two"])
    print(ack.job_id)

    await send_welcome.enqueue(client, 42)  # type: ignore[call-overload]
    await send_welcome.enqueue(client, Refund(order=1))  # type: ignore[call-overload]
    await ping.enqueue(client, {"n": "one"})  # type: ignore[call-overload]
    await counts.enqueue(client, {"a": "b"})  # type: ignore[dict-item]
    await maybe.enqueue(client, "x")  # type: ignore[call-overload]
    send_welcome.request(Welcome(user=1), priority="high")  # type: ignore[arg-type]
    await send_welcome.enqueue(client)  # type: ignore[call-overload]


def consume(ctx: JobCtx) -> None:
    welcome: Welcome = send_welcome.decode(None)
    wrong: Refund = send_welcome.decode(None)  # type: ignore[assignment]
    print(welcome, wrong, ctx)


def register(client: Client) -> Worker[AppState]:
    worker = Worker(client, ["emails", "shop"], lifespan=lifespan)
    state: AppState = worker.state
    not_state: int = worker.state  # type: ignore[assignment]
    print(state, not_state)

    @worker.task(send_welcome)
    async def handle_welcome(job: Welcome, ctx: JobCtx[AppState]) -> None:
        db: str = ctx.state.db
        print(job.user, ctx.attempt, db)

    @worker.task(refund)
    def handle_refund_sync(job: Refund, ctx: JobCtx) -> None:
        print(job.order, ctx.state.anything_goes)

    @worker.task(tick)
    async def handle_tick(job: Tick, ctx: JobCtx[AppState]) -> None:
        print(ctx.state.cache)  # type: ignore[attr-defined]

    @worker.task(send_welcome)  # type: ignore[arg-type]
    async def handle_wrong_type(job: Refund, ctx: JobCtx) -> None:
        print(job.order)

    @worker.task(send_welcome)  # type: ignore[arg-type]
    async def handle_without_ctx(job: Welcome) -> None:
        print(job.user)

    @worker.task(send_welcome)  # type: ignore[arg-type]
    async def handle_returning(job: Welcome, ctx: JobCtx) -> int:
        return job.user

    @worker.task(send_welcome)  # type: ignore[arg-type]
    async def handle_other_state(job: Welcome, ctx: JobCtx[int]) -> None:
        print(ctx.state)

    @worker.task(render)
    async def handle_render(job: Refund, ctx: JobCtx) -> Report:
        await ctx.enqueue(refund, Refund(order=job.order), key="refund")
        await ctx.enqueue_atomic([refund.request(Refund(order=1), idempotency_key="a")])
        await ctx.enqueue(refund, Welcome(user=1), key="x")  # type: ignore[misc]
        return Report(pages=job.order)

    @worker.task(render)
    def handle_render_sync(job: Refund, ctx: JobCtx) -> Report:
        return Report(pages=job.order)

    @worker.task(render)  # type: ignore[arg-type]
    async def handle_render_wrong(job: Refund, ctx: JobCtx) -> Welcome:
        return Welcome(user=job.order)

    return worker


def plain_worker(client: Client) -> Worker:
    def on_outcome(ctx: JobCtx, outcome: Outcome, error: BaseException | None) -> None:
        print(ctx.id, outcome.name, error)

    return Worker(client, ["ops"], on_outcome=on_outcome)
