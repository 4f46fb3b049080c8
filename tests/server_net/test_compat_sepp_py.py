"""The official asyncio client ``sepp-py`` (grpcio) against ``python -m sepp_anyio.server``.

sepp-py was written independently, against the real Rust server; every test here runs its
public API unchanged over a real socket.  One server subprocess (memory store, dead-letter
retention on) serves the module; each test uses its own queue.  sepp-py is asyncio-only, so
these tests run on the asyncio backend alone.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import anyio
import pytest
import sepp as _sepp_py

from sepp_anyio.server import ServerProcess

pytestmark = [pytest.mark.anyio, pytest.mark.parametrize("anyio_backend", ["asyncio"])]

# sepp-py ships no stubs that mypy follows here.
seppy: Any = _sepp_py

LEASE = timedelta(seconds=30)
TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


@pytest.fixture(scope="module")
def server() -> Iterator[ServerProcess]:
    env = {**os.environ, "SEPP_STORAGE__DEAD_LETTER_RETENTION_MS": "3600000"}
    with ServerProcess("--memory", "--port", "0", "--log-level", "WARNING", env=env) as running:
        yield running


@pytest.fixture
async def client(server: ServerProcess) -> AsyncIterator[Any]:
    async with await seppy.SeppClient.connect(server.address) as connected:
        yield connected


@pytest.fixture
def queue() -> str:
    return f"py-{uuid.uuid4().hex[:12]}"


def _job(queue: str, data: bytes = b"{}", **kwargs: Any) -> Any:
    return seppy.EnqueueRequest(
        queue, "t", payload=seppy.Payload(data, "application/json"), **kwargs
    )


async def _reserve(client: Any, queue: str, *, wait: float = 5.0, max_jobs: int = 1) -> list[Any]:
    options = seppy.ReserveOptions(
        [queue], LEASE, wait_timeout=timedelta(seconds=wait), max_jobs=max_jobs
    )
    return list(await client.reserve(options) or [])


async def test_server_info(client: Any) -> None:
    info = await client.get_server_info()
    assert info.supported_protocol_versions == ["v1"]
    assert info.dead_letter_retention_enabled is True
    assert info.max_reserve_batch == 256


async def test_enqueue_reserve_ack(client: Any, queue: str) -> None:
    ack = await client.enqueue(_job(queue, b'{"n": 1}', priority=7, custom={"k": "v", "n": 3}))
    assert not ack.deduplicated
    (job,) = await _reserve(client, queue)
    assert job.ctx.id == ack.job_id
    assert job.payload == seppy.Payload(b'{"n": 1}', "application/json")
    assert (int(job.ctx.priority), job.ctx.attempt, job.ctx.max_attempts) == (7, 1, 3)
    assert job.ctx.custom == {"k": "v", "n": 3}
    await client.ack(job.ctx)
    with pytest.raises(seppy.JobNotFoundError):
        await client.ack(job.ctx)
    assert await _reserve(client, queue, wait=0.05) == []


async def test_batch_with_a_rejection(client: Any, queue: str) -> None:
    results = await client.enqueue_batch([_job(queue), _job(queue, b"x" * (2 << 20)), _job(queue)])
    assert isinstance(results[0], seppy.EnqueueAck)
    assert results[1] == seppy.PayloadTooLarge(limit=1 << 20, actual=2 << 20)
    assert isinstance(results[2], seppy.EnqueueAck)
    with pytest.raises(seppy.JobRejectedError):
        await client.enqueue(_job(queue, scheduled_at=datetime.now(UTC) + timedelta(days=400)))


async def test_atomic(client: Any, queue: str) -> None:
    acks = await client.enqueue_atomic([_job(queue), _job(queue)])
    assert len(acks) == 2
    with pytest.raises(seppy.BatchValidationError) as info:
        await client.enqueue_atomic(
            [_job(queue), _job(queue, b"x" * (2 << 20)), seppy.EnqueueRequest(queue, "t" * 300)]
        )
    errors = info.value.errors
    assert [error.index for error in errors] == [1, 2]
    assert isinstance(errors[0].rejection, seppy.PayloadTooLarge)
    assert isinstance(errors[1].rejection, seppy.JobTypeNameTooLong)
    jobs = await _reserve(client, queue, max_jobs=10)
    assert sorted(job.ctx.id for job in jobs) == sorted(ack.job_id for ack in acks)


async def test_idempotency(client: Any, queue: str) -> None:
    first = await client.enqueue(_job(queue, idempotency_key="order-1"))
    again = await client.enqueue(_job(queue, b'{"other": 1}', idempotency_key="order-1"))
    assert (again.job_id, again.deduplicated) == (first.job_id, True)
    jobs = await _reserve(client, queue, max_jobs=10)
    assert [job.ctx.id for job in jobs] == [first.job_id]


async def test_nack_redelivers_with_attempt_2(client: Any, queue: str) -> None:
    ack = await client.enqueue(_job(queue))
    (job,) = await _reserve(client, queue)
    assert await client.nack(job.ctx, seppy.RetryDirective.DEFAULT, "try again") is False
    (again,) = await _reserve(client, queue)
    assert (again.ctx.id, again.ctx.attempt) == (ack.job_id, 2)
    with pytest.raises(seppy.AttemptMismatchError):
        await client.nack(job.ctx)
    await client.ack(again.ctx)


async def test_nack_after_delay(client: Any, queue: str) -> None:
    await client.enqueue(_job(queue))
    (job,) = await _reserve(client, queue)
    nacked_at = datetime.now(UTC)
    await client.nack(job.ctx, seppy.RetryDirective.after(timedelta(milliseconds=300)))
    (again,) = await _reserve(client, queue)
    assert datetime.now(UTC) - nacked_at >= timedelta(milliseconds=250)
    assert again.ctx.attempt == 2


async def test_dead_letters_and_drain(client: Any, queue: str) -> None:
    rejected = await client.enqueue(_job(queue, b'{"a": 1}', custom={"x": 1.5}))
    exhausted = await client.enqueue(_job(queue, max_attempts=1))
    (job,) = await _reserve(client, queue)
    assert job.ctx.id == rejected.job_id
    assert await client.nack(job.ctx, seppy.RetryDirective.DEAD_LETTER, "poison") is True
    (job,) = await _reserve(client, queue)
    assert await client.nack(job.ctx, seppy.RetryDirective.DEFAULT, "last") is True

    first, second = await client.drain_dead_letters(queue=queue, max_records=10)
    assert (first.job_id, first.cause, first.last_reason, first.final_attempt) == (
        rejected.job_id,
        seppy.DeadLetterCause.REJECTED,
        "poison",
        1,
    )
    assert first.payload == seppy.Payload(b'{"a": 1}', "application/json")
    assert first.custom == {"x": 1.5}
    assert (second.job_id, second.cause) == (
        exhausted.job_id,
        seppy.DeadLetterCause.ATTEMPTS_EXHAUSTED,
    )
    assert await client.drain_dead_letters(queue=queue, max_records=10) == []
    # Replay through sepp-py's own helper.
    replayed = await client.enqueue(first.to_enqueue_request())
    (job,) = await _reserve(client, queue)
    assert job.ctx.id == replayed.job_id


async def test_extend(client: Any, queue: str) -> None:
    await client.enqueue(_job(queue))
    (job,) = await _reserve(client, queue)
    new_expiry = await job.ctx.extend(timedelta(seconds=120))
    assert new_expiry - datetime.now(UTC) > timedelta(seconds=100)
    assert new_expiry > job.ctx.lease_expires_at
    await client.ack(job.ctx)
    with pytest.raises(seppy.JobNotFoundError):
        await job.ctx.extend(timedelta(seconds=1))


async def test_trace_context_round_trip(client: Any, queue: str) -> None:
    trace = seppy.TraceContext(TRACEPARENT, "vendor=value")
    ack = await client.enqueue(_job(queue, trace_context=trace))
    (job,) = await _reserve(client, queue)
    assert job.ctx.id == ack.job_id
    assert job.ctx.trace_context == trace


async def test_scheduled_job_waits(client: Any, queue: str) -> None:
    at = datetime.now(UTC) + timedelta(milliseconds=300)
    ack = await client.enqueue(_job(queue, scheduled_at=at))
    (job,) = await _reserve(client, queue)
    assert job.ctx.id == ack.job_id
    assert datetime.now(UTC) >= at - timedelta(milliseconds=5)
    assert job.ctx.scheduled_at == at.replace(microsecond=at.microsecond // 1000 * 1000)


async def test_unknown_credentials_are_ignored_without_auth(server: ServerProcess) -> None:
    async with await seppy.SeppClient.connect(server.address, api_key="whatever") as keyed:
        assert (await keyed.get_server_info()).version


async def test_worker_processes_jobs(client: Any, queue: str) -> None:
    total = 20
    await client.enqueue_batch([_job(queue, str(i).encode()) for i in range(total)])
    worker = seppy.Worker(
        client,
        [queue],
        LEASE,
        wait_timeout=timedelta(seconds=1),
        max_in_flight=4,
        auto_extend=True,
    )
    seen: list[bytes] = []
    failed_once: set[bytes] = set()
    done = anyio.Event()

    async def handle(payload: Any, ctx: Any) -> None:
        # Every fifth job fails on its first attempt: the worker nacks it and it comes back.
        if int(payload.data) % 5 == 0 and payload.data not in failed_once:
            failed_once.add(payload.data)
            raise seppy.HandlerError.retry("first attempt fails")
        seen.append(payload.data)
        if len(seen) == total:
            done.set()

    worker.handle("t", handle)
    async with anyio.create_task_group() as tg:
        tg.start_soon(worker.run)
        with anyio.fail_after(20):
            await done.wait()
        worker.shutdown_handle().shutdown()
    assert sorted(seen, key=int) == [str(i).encode() for i in range(total)]
    assert len(failed_once) == 4
    # Every job was acked: nothing is left to reserve.
    assert await _reserve(client, queue, wait=0.05, max_jobs=100) == []


@pytest.fixture(scope="module")
def keyed_server() -> Iterator[ServerProcess]:
    args = ("--memory", "--port", "0", "--api-key", "secret", "--log-level", "ERROR")
    with ServerProcess(*args) as running:
        yield running


async def test_auth(keyed_server: ServerProcess) -> None:
    async with await seppy.SeppClient.connect(keyed_server.address, api_key="secret") as ok:
        await ok.get_server_info()
    for key in (None, "wrong"):
        async with await seppy.SeppClient.connect(keyed_server.address, api_key=key) as bad:
            with pytest.raises(seppy.UnauthenticatedError):
                await bad.get_server_info()
