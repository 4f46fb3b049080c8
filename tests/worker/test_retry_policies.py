"""Retry policies in the worker: the nack carries the policy's delay (seeded jitter), the
task's policy wins over the worker's, ``dead_letter_on`` dead-letters by exception type,
and what the policy does not govern (``HandlerError``, timeouts) keeps its own rule.
Both backends, virtual time, the in-process server."""

from __future__ import annotations

import itertools
import random

import anyio
import pytest

from sepp_anyio import HandlerError, JobCtx, Payload, Retry, Task, Worker
from sepp_anyio.server import DeadLetterCause
from sepp_anyio.testing import open_in_memory_client

from ._helpers import QUEUE, Call, EngineSpy, Probe, enqueue, nack_kind, running

pytestmark = pytest.mark.anyio


async def _wait(spy: EngineSpy, method: str, count: int = 1) -> list[Call]:
    """``spy.wait_for``, bounded: a missing call fails the test after 10 virtual minutes."""
    with anyio.fail_after(600):
        return await spy.wait_for(method, count)


RETAIN = {"dead_letter_retention_ms": 3_600_000}


class _Transient(Exception):
    pass


class _Corrupt(ValueError):
    pass


async def test_a_tasks_policy_sets_the_delay_of_each_nack() -> None:
    """Delays 1, 3, 9 s (factor 3, no jitter), and each redelivery comes that much later."""
    task = Task(QUEUE, "t", int, retry=Retry(backoff=1.0, factor=3.0, jitter=None))
    starts: list[float] = []
    async with open_in_memory_client() as (client, engine):
        spy = EngineSpy(engine)
        worker = Worker(client, [QUEUE], retry=Retry(backoff=100.0, jitter=None))

        @worker.task(task)
        async def fails_three_times(value: int, ctx: JobCtx) -> None:
            starts.append(anyio.current_time())
            if ctx.attempt <= 3:
                raise _Transient(f"attempt {ctx.attempt}")

        await task.enqueue(client, 1, max_attempts=5)
        async with running(worker):
            await _wait(spy, "ack")
    nacks = [nack_kind(c) for c in spy.of("nack")]
    assert nacks == [("after", 1.0), ("after", 3.0), ("after", 9.0)]
    gaps = [later - earlier for earlier, later in itertools.pairwise(starts)]
    assert gaps == pytest.approx([1.0, 3.0, 9.0], abs=0.01)


async def test_the_workers_policy_is_the_default_of_every_handler() -> None:
    """A plain handler and a task without a policy of its own both take the worker's."""
    plain_task = Task(QUEUE, "typed", int)
    async with open_in_memory_client() as (client, engine):
        spy = EngineSpy(engine)
        worker = Worker(client, [QUEUE], retry=Retry(backoff=7.0, jitter=None))

        @worker.handler("plain")
        async def plain(payload: Payload | None, ctx: JobCtx) -> None:
            raise _Transient("plain")

        @worker.task(plain_task)
        async def typed(value: int, ctx: JobCtx) -> None:
            raise _Transient("typed")

        await enqueue(client, job_type="plain")
        await plain_task.enqueue(client, 1)
        async with running(worker):
            nacks = await _wait(spy, "nack", 2)
    assert sorted(nack_kind(c) for c in nacks) == [("after", 7.0), ("after", 7.0)]


async def test_the_jitter_of_the_nacks_is_the_seeded_policys() -> None:
    """With a seeded random the nacks carry exactly the delays an identically seeded policy
    draws (to the millisecond the wire carries), each within its jitter's bounds."""
    seeded = Retry(backoff=2.0, factor=2.0, max_delay=60.0, jitter="full", random=random.Random(7))
    twin = Retry(backoff=2.0, factor=2.0, max_delay=60.0, jitter="full", random=random.Random(7))
    async with open_in_memory_client() as (client, engine):
        spy = EngineSpy(engine)
        worker = Worker(client, [QUEUE], retry=seeded)

        @worker.handler("t")
        async def crashes(payload: Payload | None, ctx: JobCtx) -> None:
            if ctx.attempt <= 4:
                raise _Transient("again")

        await enqueue(client, max_attempts=6)
        async with running(worker):
            await _wait(spy, "ack")
    delays = [nack_kind(c)[1] for c in spy.of("nack")]
    expected = [twin.delay(n) for n in range(1, 5)]
    assert delays == pytest.approx(expected, abs=0.001)
    for delay, cap in zip(delays, [2.0, 4.0, 8.0, 16.0], strict=True):
        assert delay is not None and 0.0 <= delay <= cap


@pytest.mark.parametrize("kind", ["async", "sync"])
async def test_dead_letter_on_dead_letters_at_once_and_subclasses_count(kind: str) -> None:
    async with open_in_memory_client(storage=RETAIN) as (client, engine):
        spy = EngineSpy(engine)
        policy = Retry(retry_on=(_Transient,), dead_letter_on=(ValueError,), jitter=None)
        # auto_extend: a thread does not run on virtual time (see test_sync_handlers).
        worker = Worker(client, [QUEUE], retry=policy, auto_extend=True)

        if kind == "async":

            @worker.handler("t")
            async def corrupt(payload: Payload | None, ctx: JobCtx) -> None:
                raise _Corrupt("bad bytes")

        else:

            @worker.handler("t")
            def corrupt_sync(payload: Payload | None, ctx: JobCtx) -> None:
                raise _Corrupt("bad bytes")

        [job_id] = await enqueue(client, max_attempts=5)
        async with running(worker):
            # A virtual clock jumps from heartbeat to heartbeat while the thread runs, so a
            # virtual bound could pass before a busy machine schedules the thread: the sync
            # variant waits without one (the suite's timeout bounds it).
            [nack] = await (spy.wait_for("nack") if kind == "sync" else _wait(spy, "nack"))
            await anyio.sleep(600)  # nothing is redelivered
        assert nack_kind(nack) == ("dead_letter", None)
        assert nack.request.reason == "handler raised _Corrupt: bad bytes"
        [record] = engine.dead_letters()
        assert (record.job.id, record.cause, record.final_attempt) == (
            job_id,
            DeadLetterCause.REJECTED,
            1,
        )
        assert worker.statistics().nacked_dead_letter == 1


async def test_an_exception_in_retry_on_or_in_neither_is_retried() -> None:
    async with open_in_memory_client() as (client, engine):
        spy = EngineSpy(engine)
        policy = Retry(
            backoff=1.0, retry_on=(_Transient,), dead_letter_on=(ValueError,), jitter=None
        )
        worker = Worker(client, [QUEUE], retry=policy)

        @worker.handler("listed")
        async def listed(payload: Payload | None, ctx: JobCtx) -> None:
            if ctx.attempt == 1:
                raise _Transient("listed")

        @worker.handler("unlisted")
        async def unlisted(payload: Payload | None, ctx: JobCtx) -> None:
            if ctx.attempt == 1:
                raise KeyError("unlisted")

        await enqueue(client, job_type="listed")
        await enqueue(client, job_type="unlisted")
        async with running(worker):
            await _wait(spy, "ack", 2)
    assert [nack_kind(c) for c in spy.of("nack")] == [("after", 1.0), ("after", 1.0)]


async def test_dead_letter_on_wins_over_retry_on() -> None:
    async with open_in_memory_client() as (client, engine):
        spy = EngineSpy(engine)
        policy = Retry(retry_on=(ValueError,), dead_letter_on=(_Corrupt,))
        worker = Worker(client, [QUEUE], retry=policy)

        @worker.handler("t")
        async def corrupt(payload: Payload | None, ctx: JobCtx) -> None:
            raise _Corrupt("in both")

        await enqueue(client, max_attempts=5)
        async with running(worker):
            [nack] = await _wait(spy, "nack")
    assert nack_kind(nack) == ("dead_letter", None)


async def test_the_tasks_policy_wins_over_the_workers() -> None:
    lenient = Task(QUEUE, "lenient", int, retry=Retry(backoff=3.0, jitter=None))
    async with open_in_memory_client() as (client, engine):
        spy = EngineSpy(engine)
        worker = Worker(client, [QUEUE], retry=Retry(dead_letter_on=(ValueError,)))

        @worker.task(lenient)
        async def handle(value: int, ctx: JobCtx) -> None:
            if ctx.attempt == 1:
                raise ValueError("the worker's policy would dead-letter this")

        await lenient.enqueue(client, 1, max_attempts=3)
        async with running(worker):
            await _wait(spy, "ack")
    assert [nack_kind(c) for c in spy.of("nack")] == [("after", 3.0)]


@pytest.mark.parametrize(
    ("raised", "expected"),
    [
        (HandlerError.retry_after("rate limited", 4.5), ("after", 4.5)),
        (HandlerError.retry("busy"), ("default", None)),
        (HandlerError.permanent("never"), ("dead_letter", None)),
    ],
)
async def test_a_handler_errors_own_request_wins_over_the_policy(
    raised: HandlerError, expected: tuple[str, float | None]
) -> None:
    """Even a policy that dead-letters every Exception, or retries after 100 s."""
    for policy in (Retry(dead_letter_on=(Exception,)), Retry(backoff=100.0, jitter=None)):
        async with open_in_memory_client() as (client, engine):
            spy = EngineSpy(engine)
            worker = Worker(client, [QUEUE], retry=policy)

            @worker.handler("t")
            async def asks(payload: Payload | None, ctx: JobCtx) -> None:
                raise raised

            await enqueue(client, max_attempts=5)
            async with running(worker):
                [nack] = await _wait(spy, "nack")
        assert nack_kind(nack) == expected
        assert nack.request.reason == raised.reason


async def test_a_timeout_keeps_its_own_rule() -> None:
    """A job timeout is nacked under the queue's policy, whatever the retry policy names
    (TimeoutError included): the worker cancelled the handler, the handler did not fail."""
    task = Task(QUEUE, "t", int, timeout=1.0, retry=Retry(dead_letter_on=(TimeoutError, Exception)))
    async with open_in_memory_client() as (client, engine):
        spy = EngineSpy(engine)
        worker = Worker(client, [QUEUE])

        @worker.task(task)
        async def slow(value: int, ctx: JobCtx) -> None:
            await anyio.sleep(3600)

        await task.enqueue(client, 1, max_attempts=3)
        async with running(worker):
            [nack] = await _wait(spy, "nack")
    assert (nack.request.reason, nack_kind(nack)) == ("timed out", ("default", None))


async def test_a_job_type_without_a_handler_waits_the_workers_delay() -> None:
    probe = Probe()
    async with open_in_memory_client() as (client, engine):
        spy = EngineSpy(engine)
        worker = Worker(client, [QUEUE], retry=Retry(backoff=5.0, jitter=None))
        worker.handle("t", probe.handler())
        await enqueue(client, job_type="mystery", max_attempts=5)
        async with running(worker):
            [nack] = await _wait(spy, "nack")
    assert nack_kind(nack) == ("after", 5.0)
    assert not probe.starts


async def test_a_bad_retry_argument_is_refused() -> None:
    async with open_in_memory_client() as (client, _):
        with pytest.raises(TypeError, match=r"retry must be a sepp\.Retry"):
            Worker(client, [QUEUE], retry=3)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"Task retry must be a sepp\.Retry"):
        Task(QUEUE, "t", int, retry={"backoff": 1})  # type: ignore[call-overload]
