"""A typed example of batch handlers that ``test_batch_typing.py`` checks with ``mypy
--strict``, as ``tests/tasks/typed_example.py`` is checked: every line with a
``# type: ignore[code]`` is a mistake mypy must catch with that code, every other line must
pass (the project's own mypy run checks the file as it is).

``Worker.batch`` takes a ``Task[T]`` (items are ``BatchItem[T]``) or a job type (items are
``BatchItem[Payload | None]``); ``BatchCtx[AppState]`` types ``ctx.state``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from sepp_anyio import BatchCtx, BatchItem, Client, JobCtx, Payload, Task, Worker


@dataclasses.dataclass
class AppState:
    db: str


@dataclasses.dataclass
class Resize:
    width: int


resize = Task("images", "resize", Resize)


@asynccontextmanager
async def lifespan(worker: Worker[AppState]) -> AsyncIterator[AppState]:
    yield AppState(db="pool")


def register(client: Client) -> Worker[AppState]:
    worker = Worker(client, ["images"], lifespan=lifespan)

    @worker.batch(resize, max_size=100, max_wait=0.05)
    async def resize_many(jobs: list[BatchItem[Resize]], ctx: BatchCtx[AppState]) -> None:
        db: str = ctx.state.db
        size: int = ctx.size
        for item in jobs:
            width: int = item.value.width
            job_ctx: JobCtx = item.ctx
            lost: bool = item.lease_lost
            print(db, size, width, job_ctx.attempt, lost)
            if width > 10_000:
                item.dead_letter("too wide")
            elif width < 0:
                item.fail(ValueError("negative width"))
            elif width == 0:
                item.retry(after=5.0)
            else:
                item.ack()
            print(item.value.height)  # type: ignore[attr-defined]
            item.retry(after="soon")  # type: ignore[arg-type]
            item.fail("failed")  # type: ignore[arg-type]

    @worker.batch(resize)
    def resize_many_in_a_thread(jobs: list[BatchItem[Resize]], ctx: BatchCtx) -> None:
        print(len(jobs), ctx.state.anything_goes)

    @worker.batch("raw")
    async def raw_many(jobs: list[BatchItem[Payload | None]], ctx: BatchCtx) -> None:
        for item in jobs:
            payload: Payload | None = item.value
            print(payload)

    @worker.batch(resize)  # type: ignore[arg-type]
    async def wrong_type(jobs: list[BatchItem[int]], ctx: BatchCtx) -> None:
        print(jobs)

    @worker.batch(resize)  # type: ignore[arg-type]
    async def one_job(job: Resize, ctx: JobCtx) -> None:
        print(job)

    @worker.batch(resize)  # type: ignore[arg-type]
    async def returning(jobs: list[BatchItem[Resize]], ctx: BatchCtx) -> int:
        return len(jobs)

    @worker.batch(resize)  # type: ignore[arg-type]
    async def other_state(jobs: list[BatchItem[Resize]], ctx: BatchCtx[int]) -> None:
        print(ctx.state)

    @worker.batch("raw")  # type: ignore[arg-type]
    async def raw_as_typed(jobs: list[BatchItem[Resize]], ctx: BatchCtx) -> None:
        print(jobs)

    worker.batch(resize, max_size="10")  # type: ignore[call-overload]
    return worker
