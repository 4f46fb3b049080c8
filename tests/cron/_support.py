"""Pieces of the cron tests: a server clock that starts at a chosen instant, a minimal task,
and a tap on the in-process engine's enqueues (which can also simulate an outage)."""

from __future__ import annotations

import math
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import anyio

from sepp_anyio import Client, EnqueueRequest, Job, Payload, StatusCode
from sepp_anyio.server import Clock, Engine, EngineError
from sepp_anyio.server._engine._engine import rpc_of
from sepp_anyio.testing import open_in_memory_client

QUEUE = "cron"


class StartAt(Clock):
    """The engine's clock, starting at ``start`` and advancing with the event loop's clock
    (so virtual under trio's MockClock and VirtualTimeLoop). :meth:`jump` moves the wall
    clock without the loop clock, as a host resumed from suspend sees it."""

    def __init__(self, start: datetime) -> None:
        super().__init__()
        self._start_ms = round(start.timestamp() * 1000)
        self._loop_start = anyio.current_time()
        self._jumped_ms = 0

    def now_ms(self) -> int:
        elapsed = anyio.current_time() - self._loop_start
        return self._start_ms + self._jumped_ms + math.floor(elapsed * 1000)

    async def sleep_until_ms(self, deadline_ms: int) -> None:
        base = self._start_ms + self._jumped_ms
        await anyio.sleep_until(self._loop_start + (deadline_ms - base) / 1000 + 1e-6)

    def jump(self, seconds: float) -> None:
        self._jumped_ms += round(seconds * 1000)

    def now(self) -> datetime:
        return datetime.fromtimestamp(self.now_ms() / 1000, UTC)


@dataclass(frozen=True)
class JsonTask:
    """The smallest real task: a JSON payload for one queue and job type."""

    queue: str
    job_type: str

    def request(
        self,
        value: Any,
        *,
        scheduled_at: datetime | None = None,
        idempotency_key: str | None = None,
    ) -> EnqueueRequest:
        return EnqueueRequest(
            self.queue,
            self.job_type,
            payload=Payload.from_json(value),
            scheduled_at=scheduled_at,
            idempotency_key=idempotency_key,
        )


@dataclass(frozen=True)
class Enqueued:
    """One job as the engine received it, with the engine's answer."""

    at: datetime
    key: str
    scheduled_at: datetime
    deduplicated: bool


@dataclass(eq=False)
class EnqueueTap:
    """Wraps ``rpc_of(engine).enqueue_batch`` (the engine still answers): records every job,
    and answers UNAVAILABLE while the engine clock is inside ``outage`` (a half-open
    interval)."""

    engine: Engine
    clock: StartAt
    jobs: list[Enqueued] = field(default_factory=list)
    refused: list[tuple[datetime, str]] = field(default_factory=list)
    outage: tuple[datetime, datetime] | None = None

    def __post_init__(self) -> None:
        real: Callable[[Any], Awaitable[Any]] = rpc_of(self.engine).enqueue_batch

        async def tap(request: Any) -> Any:
            now = self.clock.now()
            keys = [job.idempotency_key for job in request.jobs]
            if self.outage is not None and self.outage[0] <= now < self.outage[1]:
                self.refused.extend((now, key) for key in keys)
                raise EngineError(StatusCode.UNAVAILABLE, "injected outage")
            reply = await real(request)
            for job, result in zip(request.jobs, reply.results, strict=True):
                if result.success is None:
                    continue
                self.jobs.append(
                    Enqueued(
                        now, job.idempotency_key, job.scheduled_at, result.success.deduplicated
                    )
                )
            return reply

        rpc_of(self.engine).enqueue_batch = tap

    def new(self) -> list[Enqueued]:
        """The jobs that were really created (not deduplicated)."""
        return [job for job in self.jobs if not job.deduplicated]


@asynccontextmanager
async def cron_server(
    start: datetime, **sections: Any
) -> AsyncIterator[tuple[Client, Engine, StartAt, EnqueueTap]]:
    clock = StartAt(start)
    # The engine's timer wakes at its next deadline anyway; its idle wake-up every second
    # would cost ~10^5 wake-ups over a day of virtual time.
    sections.setdefault("storage", {"sweep_interval_ms": 3_600_000})
    async with open_in_memory_client(clock=clock, **sections) as (client, engine):
        yield client, engine, clock, EnqueueTap(engine, clock)


async def reserve_all(client: Client, queue: str = QUEUE) -> list[Job]:
    """Every ready job of ``queue`` (bounded: at most 16 reserves of 256)."""
    jobs: list[Job] = []
    for _ in range(16):
        batch = await client.reserve([queue], lease=600.0, wait=0, max_jobs=256)
        if not batch:
            return jobs
        jobs.extend(batch)
    raise AssertionError("more jobs than a test should make")


async def run_for(seconds: float, *runs: Any) -> None:
    """Run the schedulers (``task_status``-taking callables) for ``seconds`` of (virtual)
    time, then cancel them."""
    async with anyio.create_task_group() as tg:
        for run in runs:
            await tg.start(run)
        await anyio.sleep(seconds)
        tg.cancel_scope.cancel()


def utc(
    year: int, month: int, day: int, hour: int = 0, minute: int = 0, second: int = 0
) -> datetime:
    return datetime(year, month, day, hour, minute, second, tzinfo=UTC)
