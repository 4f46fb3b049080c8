"""Typed tasks against the in-process reference server, on both backends on virtual time:
enqueue and reserve back, options on the wire, nothing sent for an invalid value, and a
payload that does not validate dead-lettered at once by the worker as it is today (the
handler decodes with ``Task.decode``; ``TaskPayloadError`` is a dead-lettering
``HandlerError``)."""

from __future__ import annotations

from typing import Any

import anyio
import pytest
import trio.testing

from sepp_anyio import (
    EnqueueRequest,
    JobCtx,
    Payload,
    TraceContext,
    Worker,
)
from sepp_anyio._tasks._task import Task
from sepp_anyio.server import DeadLetterCause
from sepp_anyio.server._engine._engine import rpc_of
from sepp_anyio.testing import open_in_memory_client
from tests.worker._helpers import EngineSpy, running
from tests.worker._vtime import VirtualTimeLoop

from ._kinds import KINDS, WHEN, Kind, PAddress, PWelcome

pytestmark = pytest.mark.anyio

RETAIN = {"dead_letter_retention_ms": 3_600_000}
TRACE = TraceContext("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")


@pytest.fixture(
    params=[
        pytest.param(("asyncio", {"loop_factory": VirtualTimeLoop}), id="asyncio-vtime"),
        pytest.param(("trio", {}), id="trio-mockclock"),
    ]
)
def anyio_backend(request: pytest.FixtureRequest) -> tuple[str, dict[str, Any]]:
    """Both backends on virtual time (as in tests/worker), so delays take no real time."""
    backend, options = request.param
    if backend == "trio":
        options = {"clock": trio.testing.MockClock(autojump_threshold=0)}
    return backend, options


send_welcome = Task("emails", "send_welcome", PWelcome, priority=5, max_attempts=5, timeout=30.0)


def _welcome(user: int) -> PWelcome:
    return PWelcome(user=user, when=WHEN, tags=["a"], address=PAddress(city="Bern"))


@pytest.mark.parametrize("kind", KINDS, ids=[kind.id for kind in KINDS])
async def test_enqueue_and_reserve_round_trip(kind: Kind) -> None:
    task = kind.task()
    async with open_in_memory_client() as (client, _engine):
        ack = await task.enqueue(client, kind.value)
        [job] = await client.reserve(["q"], lease=30.0, wait=0.0)
    assert job.ctx.id == ack.job_id
    assert job.ctx.job_type == kind.id
    assert job.payload is not None and job.payload.encoding == "application/json"
    assert task.decode(job.payload) == kind.value


async def test_enqueue_sends_the_options_and_the_task_defaults() -> None:
    async with open_in_memory_client() as (client, engine):
        first = await send_welcome.enqueue(
            client,
            _welcome(42),
            delay=10.0,
            idempotency_key="welcome-42",
            custom={"tenant": "acme"},
            trace_context=TRACE,
        )
        again = await send_welcome.enqueue(client, _welcome(42), idempotency_key="welcome-42")
        assert (first.deduplicated, again.deduplicated) == (False, True)
        assert again.job_id == first.job_id
        start = anyio.current_time()
        [job] = await client.reserve(["emails"], lease=30.0, wait=30.0)
        assert 10.0 <= anyio.current_time() - start < 10.1
        assert engine.stats()["emails"].live_depth == 1
    assert job.ctx.id == first.job_id
    assert (job.ctx.priority, job.ctx.max_attempts) == (5, 5)
    assert job.ctx.custom == {"tenant": "acme"}
    assert job.ctx.trace_context is not None
    assert job.ctx.trace_context.traceparent.split("-")[1] == TRACE.traceparent.split("-")[1]
    assert send_welcome.decode(job.payload) == _welcome(42)


async def test_per_call_options_override_the_task_defaults() -> None:
    async with open_in_memory_client() as (client, _engine):
        await send_welcome.enqueue(client, _welcome(1), priority=1, max_attempts=2)
        [job] = await client.reserve(["emails"], lease=30.0, wait=0.0)
    assert (job.ctx.priority, job.ctx.max_attempts) == (1, 2)


async def test_an_invalid_value_sends_nothing() -> None:
    bad = PWelcome.model_construct(user="x", when=WHEN, tags=[], address=PAddress(city="Bern"))
    async with open_in_memory_client() as (client, engine):
        enqueued: list[Any] = []
        real = rpc_of(engine).enqueue_batch

        async def spy(request: Any) -> Any:
            enqueued.append(request)
            return await real(request)

        rpc_of(engine).enqueue_batch = spy
        with pytest.raises(ValueError, match=r"^Task 'emails/send_welcome': field 'user': "):
            await send_welcome.enqueue(client, bad)
        assert enqueued == []
        assert "emails" not in engine.stats() or engine.stats()["emails"].live_depth == 0


async def test_requests_go_into_an_atomic_batch() -> None:
    counts = Task("stats", "count", dict[str, int])
    async with open_in_memory_client() as (client, _engine):
        acks = await client.enqueue_atomic(
            [send_welcome.request(_welcome(7)), counts.request({"a": 1})]
        )
        jobs = await client.reserve(["emails", "stats"], lease=30.0, wait=0.0, max_jobs=10)
    assert {job.ctx.id for job in jobs} == {ack.job_id for ack in acks}
    by_type = {job.ctx.job_type: job for job in jobs}
    assert send_welcome.decode(by_type["send_welcome"].payload) == _welcome(7)
    assert counts.decode(by_type["count"].payload) == {"a": 1}


async def test_worker_dead_letters_an_invalid_payload_at_once() -> None:
    seen: list[PWelcome] = []

    async def welcome(job: PWelcome, ctx: JobCtx) -> None:
        seen.append(job)

    async def handler(payload: Payload | None, ctx: JobCtx) -> None:
        # What Worker.task will do: decode, then call the typed function.
        await welcome(send_welcome.decode(payload), ctx)

    async with open_in_memory_client(storage=RETAIN) as (client, engine):
        spy = EngineSpy(engine)
        worker = Worker(client, ["emails"])
        worker.handle("send_welcome", handler)
        good = await send_welcome.enqueue(client, _welcome(1))
        # A producer in another language got the type of "user" wrong.
        bad = await client.enqueue(
            EnqueueRequest(
                "emails",
                "send_welcome",
                payload=Payload(
                    b'{"user":"one","when":"2024-05-01T12:00:00Z","tags":[],'
                    b'"address":{"city":"Bern"}}',
                    "application/json",
                ),
                max_attempts=5,
            )
        )
        async with running(worker):
            await spy.wait_for("ack")
            [nack] = await spy.wait_for("nack")
            await anyio.sleep(60)  # nothing is redelivered
        assert nack.request.job_id == bad.job_id and nack.reply.dead_lettered
        [record] = engine.dead_letters()
        assert (record.job.id, record.cause, record.final_attempt) == (
            bad.job_id,
            DeadLetterCause.REJECTED,
            1,
        )
        assert record.last_reason is not None
        assert record.last_reason.startswith(
            "Task 'emails/send_welcome': payload does not validate: field 'user': "
        )
        stats = worker.statistics()
        assert (stats.processed, stats.nacked_dead_letter, stats.nacked_retry) == (1, 1, 0)
    assert seen == [_welcome(1)]
    assert good.job_id != bad.job_id
