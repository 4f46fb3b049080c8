"""Shorthands for driving the engine with ``sepp.v1`` messages in tests."""

from __future__ import annotations

import datetime
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

import anyio
import betterproto2

from sepp_anyio._proto.google.protobuf import Empty
from sepp_anyio._proto.sepp import v1 as pb
from sepp_anyio.server import Clock, Engine, ManualClock, MemoryStore, ServerConfig, Store
from sepp_anyio.server._engine._engine import rpc_of
from sepp_anyio.server._store._records import StoreContents, Write

#: The ManualClock start used by every test (2023-11-14T22:13:20Z).
T0 = 1_700_000_000_000


class GatedStore:
    """A MemoryStore wrapper whose commits can be held at a gate or made to fail."""

    def __init__(self, inner: Store | None = None) -> None:
        self.inner = inner if inner is not None else MemoryStore()
        #: While set, commits wait for ``gate`` (``entered`` is set when one arrives).
        self.hold = False
        self.gate = anyio.Event()
        self.entered = anyio.Event()
        #: While set, commits raise OSError.
        self.fail = False
        self.commits: list[int] = []

    @property
    def transactions(self) -> int:
        return self.inner.transactions

    async def open(self) -> StoreContents:
        return await self.inner.open()

    async def commit(self, writes: Sequence[Write]) -> None:
        if self.hold:
            self.entered.set()
            await self.gate.wait()
        if self.fail:
            raise OSError("disk on fire")
        self.commits.append(len(writes))
        await self.inner.commit(writes)

    async def aclose(self) -> None:
        await self.inner.aclose()


def td(seconds: float) -> datetime.timedelta:
    return datetime.timedelta(seconds=seconds)


def ts(ms: int) -> datetime.datetime:
    return datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC) + datetime.timedelta(milliseconds=ms)


def ms(value: datetime.datetime) -> int:
    return (value - ts(0)) // datetime.timedelta(milliseconds=1)


def job(queue: str = "q", job_type: str = "t", **fields: Any) -> Any:
    """An EnqueueRequest; ``payload=b"..."`` is wrapped as JSON-encoded data."""
    payload = fields.pop("payload", None)
    if isinstance(payload, bytes):
        payload = pb.Payload(data=payload, encoding="application/json")
    return pb.EnqueueRequest(queue=queue, job_type=job_type, payload=payload, **fields)


@asynccontextmanager
async def running(
    config: ServerConfig | None = None,
    store: Store | None = None,
    clock: Clock | None = None,
) -> AsyncIterator[Engine]:
    """An engine on a ManualClock at T0 unless another clock is given."""
    async with Engine(config, store, clock if clock is not None else ManualClock(T0)) as engine:
        yield engine


async def enqueue_results(engine: Engine, *jobs: Any) -> list[tuple[str, Any]]:
    """``(branch, value)`` per job: ``("success", EnqueueResponse)`` or a rejection's branch."""
    response = await rpc_of(engine).enqueue_batch(pb.EnqueueBatchRequest(jobs=list(jobs)))
    out = []
    for result in response.results:
        branch, value = betterproto2.which_one_of(result, "outcome")
        assert value is not None
        if branch == "rejection":
            out.append(betterproto2.which_one_of(value, "reason"))
        else:
            out.append((branch, value))
    return out


async def enqueue(engine: Engine, *jobs: Any) -> list[str]:
    """Enqueue, asserting every job succeeded; returns the job ids."""
    results = await enqueue_results(engine, *jobs)
    assert all(branch == "success" for branch, _ in results), results
    return [value.job_id for _, value in results]


async def rejection(engine: Engine, one: Any) -> tuple[str, Any]:
    """Enqueue one job expected to be rejected; returns ``(reason branch, detail)``."""
    [(branch, value)] = await enqueue_results(engine, one)
    assert branch != "success", value
    return branch, value


async def atomic(engine: Engine, *jobs: Any) -> tuple[str, Any]:
    """EnqueueAtomic: ``("success", [EnqueueResponse])`` or ``("rejection", [(index, branch)])``."""
    response = await rpc_of(engine).enqueue_atomic(pb.EnqueueBatchRequest(jobs=list(jobs)))
    branch, value = betterproto2.which_one_of(response, "outcome")
    assert value is not None
    if branch == "success":
        return branch, list(value.responses)
    return branch, [
        (e.index, betterproto2.which_one_of(e.rejection, "reason")[0]) for e in value.errors
    ]


async def reserve(
    engine: Engine,
    *queues: str,
    lease: float = 30.0,
    wait: float | None = None,
    max_jobs: int | None = None,
) -> list[Any]:
    response = await rpc_of(engine).reserve(
        pb.ReserveRequest(
            queues=list(queues or ("q",)),
            lease_duration=td(lease),
            wait_timeout=None if wait is None else td(wait),
            max_jobs=max_jobs,
        )
    )
    return list(response.jobs)


async def ack(engine: Engine, j: Any) -> None:
    await rpc_of(engine).ack(pb.AckRequest(job_id=j.id, attempt=j.attempt))


async def nack(
    engine: Engine,
    j: Any,
    *,
    delay: float | None = None,
    dead_letter: bool = False,
    default: bool = False,
    reason: str | None = None,
) -> bool:
    retry = None
    if dead_letter:
        retry = pb.NackRetry(dead_letter=Empty())
    elif delay is not None:
        retry = pb.NackRetry(delay=td(delay))
    elif default:
        retry = pb.NackRetry(default=Empty())
    response = await rpc_of(engine).nack(
        pb.NackRequest(job_id=j.id, attempt=j.attempt, retry=retry, reason=reason)
    )
    return bool(response.dead_lettered)


async def extend(engine: Engine, j: Any, lease: float) -> datetime.datetime:
    response = await rpc_of(engine).extend(
        pb.ExtendRequest(job_id=j.id, attempt=j.attempt, lease_duration=td(lease))
    )
    result: datetime.datetime = response.lease_expires_at
    return result


async def drain(engine: Engine, queue: str | None = None, max: int | None = None) -> list[Any]:
    response = await rpc_of(engine).drain_dead_letters(
        pb.DrainDeadLettersRequest(queue=queue, max=max)
    )
    return list(response.records)
