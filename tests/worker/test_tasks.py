"""Typed tasks in the worker (``Worker.task``): the handler gets the validated value for
every kind of type, sync task functions run in threads, a payload that is not JSON or does
not validate is dead-lettered on that attempt with a reason naming the field, and a task's
``timeout`` wins over ``job_timeout``. Both backends, virtual time."""

from __future__ import annotations

import threading
from typing import Any

import anyio
import pytest

import sepp_anyio as sepp
from sepp_anyio import EnqueueRequest, JobCtx, Payload, Task, Worker
from sepp_anyio.testing import open_in_memory_client
from tests.tasks._kinds import KINDS, WHEN, Kind, PAddress, PWelcome

from ._helpers import EngineSpy, nack_kind, running

pytestmark = pytest.mark.anyio


def _welcome(user: int) -> PWelcome:
    return PWelcome(user=user, when=WHEN, tags=["a"], address=PAddress(city="Bern"))


def test_the_task_names_are_public() -> None:
    assert sepp.Task is Task
    assert issubclass(sepp.TaskPayloadError, sepp.HandlerError)
    for name in ("Task", "TaskPayloadError", "Outcome"):
        assert name in sepp.__all__


@pytest.mark.parametrize("kind", KINDS, ids=[kind.id for kind in KINDS])
async def test_a_task_handler_gets_the_validated_value_of_every_kind(kind: Kind) -> None:
    task = kind.task()
    seen: list[Any] = []
    async with open_in_memory_client() as (client, engine):
        spy = EngineSpy(engine)
        worker = Worker(client, ["q"])

        @worker.task(task)
        async def handle(value: Any, ctx: JobCtx) -> None:
            seen.append(value)

        await task.enqueue(client, kind.value)
        async with running(worker):
            await spy.wait_for("ack")
    assert seen == [kind.value]
    assert worker.handlers == {kind.id: handle}


async def test_a_sync_task_function_runs_in_a_worker_thread() -> None:
    task = Task("q", "sync", PWelcome)
    seen: list[tuple[int, int]] = []
    async with open_in_memory_client() as (client, engine):
        spy = EngineSpy(engine)
        # A thread is not on virtual time: the heartbeat keeps the lease (see
        # test_sync_handlers).
        worker = Worker(client, ["q"], auto_extend=True)

        @worker.task(task)
        def handle(value: PWelcome, ctx: JobCtx) -> None:
            seen.append((value.user, threading.get_ident()))

        await task.enqueue(client, _welcome(7))
        async with running(worker):
            await spy.wait_for("ack")
    [(user, ident)] = seen
    assert user == 7 and ident != threading.get_ident()


@pytest.mark.parametrize("sync", [False, True], ids=["async", "sync"])
@pytest.mark.parametrize(
    ("data", "encoding", "expected"),
    [
        (
            b'{"user":"one","when":"2024-05-01T12:00:00Z","tags":[],"address":{"city":"B"}}',
            "application/json",
            "payload does not validate: field 'user': ",
        ),
        (
            b'{"user":1,"when":"2024-05-01T12:00:00Z","tags":[],"address":{}}',
            "application/json",
            "payload does not validate: field 'address.city': ",
        ),
        (b"{not json", "application/json", "payload is not JSON"),
        (b"\x80\x81", "application/octet-stream", "payload encoding is 'application/octet-stream'"),
    ],
    ids=["wrong-type", "missing-nested", "not-json", "not-json-encoding"],
)
async def test_an_unreadable_payload_is_dead_lettered_on_that_attempt(
    data: bytes, encoding: str, expected: str, sync: bool
) -> None:
    task = Task("emails", "send_welcome", PWelcome, max_attempts=5)
    seen: list[PWelcome] = []
    async with open_in_memory_client() as (client, engine):
        spy = EngineSpy(engine)
        worker = Worker(client, ["emails"], auto_extend=True)
        if sync:

            @worker.task(task)
            def handle_sync(value: PWelcome, ctx: JobCtx) -> None:
                seen.append(value)
        else:

            @worker.task(task)
            async def handle(value: PWelcome, ctx: JobCtx) -> None:
                seen.append(value)

        good = await task.enqueue(client, _welcome(1))
        bad = await client.enqueue(
            EnqueueRequest(
                "emails", "send_welcome", payload=Payload(data, encoding), max_attempts=5
            )
        )
        async with running(worker):
            await spy.wait_for("ack")
            [nack] = await spy.wait_for("nack")
        assert nack.request.job_id == bad.job_id
        assert nack_kind(nack) == ("dead_letter", None)
        assert nack.reply.dead_lettered
        assert nack.request.reason.startswith(f"Task 'emails/send_welcome': {expected}")
        assert "dead-lettered without a retry" in nack.request.reason
        stats = worker.statistics()
        assert (stats.processed, stats.nacked_dead_letter, stats.nacked_retry) == (1, 1, 0)
    assert seen == [_welcome(1)]
    assert good.job_id != bad.job_id


@pytest.mark.parametrize(
    ("task_timeout", "job_timeout", "expected"),
    [(2.0, 10.0, 2.0), (10.0, 2.0, 10.0), (3.0, None, 3.0)],
    ids=["shorter", "longer", "no-job-timeout"],
)
async def test_the_task_timeout_wins_over_job_timeout(
    task_timeout: float, job_timeout: float | None, expected: float
) -> None:
    task = Task("q", "slow", int, timeout=task_timeout)
    started: list[float] = []
    async with open_in_memory_client() as (client, engine):
        spy = EngineSpy(engine)
        worker = Worker(client, ["q"], lease=60.0, auto_extend=True, job_timeout=job_timeout)

        @worker.task(task)
        async def handle(value: int, ctx: JobCtx) -> None:
            started.append(anyio.current_time())
            await anyio.sleep(3600)

        await task.enqueue(client, 1)
        async with running(worker):
            [nack] = await spy.wait_for("nack")
    assert nack.request.reason == "timed out"
    assert nack.at - started[0] == pytest.approx(expected, abs=0.01)


async def test_a_plain_handler_that_replaces_a_task_drops_its_timeout() -> None:
    task = Task("q", "t", int, timeout=1.0)
    async with open_in_memory_client() as (client, engine):
        spy = EngineSpy(engine)
        worker = Worker(client, ["q"], job_timeout=5.0)

        @worker.task(task)
        async def typed(value: int, ctx: JobCtx) -> None:
            raise AssertionError("replaced")

        async def plain(payload: Payload | None, ctx: JobCtx) -> None:
            await anyio.sleep(3)  # longer than the task's 1 s, shorter than job_timeout

        worker.replace_handler("t", plain)
        await task.enqueue(client, 1)
        async with running(worker):
            await spy.wait_for("ack")


async def test_task_registration_errors() -> None:
    task = Task("q", "welcome", PWelcome)
    async with open_in_memory_client() as (client, _engine):
        worker = Worker(client, ["q"])
        with pytest.raises(sepp.InvalidArgumentError, match="queue 'other'"):
            worker.task(Task("other", "x", int))
        with pytest.raises(TypeError, match=r"sepp\.Task"):
            worker.task("welcome")  # type: ignore[arg-type]

        async def wrong(value: int, ctx: JobCtx) -> None: ...

        with pytest.raises(TypeError, match="takes value: int"):
            worker.task(task)(wrong)  # type: ignore[arg-type]

        async def no_ctx(value: PWelcome) -> None: ...

        with pytest.raises(TypeError, match=r"must accept \(value, ctx\)"):
            worker.task(task)(no_ctx)  # type: ignore[arg-type]

        async def right(value: PWelcome, ctx: JobCtx) -> None: ...

        worker.task(task)(right)
        with pytest.raises(sepp.DuplicateHandlerError):
            worker.task(task)(right)
        assert dict(worker.handlers) == {"welcome": right}  # type: ignore[comparison-overlap]
