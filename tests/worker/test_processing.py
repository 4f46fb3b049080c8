"""Reserve -> dispatch -> ack/nack against the in-process reference server, on both backends,
on virtual time (see ``conftest.py``)."""

from __future__ import annotations

import itertools
import logging

import anyio
import pytest

from sepp_anyio import HandlerError, JobCtx, Payload, Retry, Worker
from sepp_anyio._model._retry_policy import DEFAULT_RETRY
from sepp_anyio.server import DeadLetterCause, JobState
from sepp_anyio.testing import open_in_memory_client

from ._helpers import QUEUE, EngineSpy, Probe, enqueue, nack_kind, running, unavailable

pytestmark = pytest.mark.anyio

RETAIN = {"dead_letter_retention_ms": 3_600_000}
#: The default policy without its jitter: its delays are exact.
UNJITTERED = Retry(backoff=2.0, factor=2.0, max_delay=60.0, jitter=None)


async def test_jobs_are_processed_and_acked() -> None:
    probe = Probe()
    async with open_in_memory_client() as (client, engine):
        spy = EngineSpy(engine)
        worker = Worker(client, [QUEUE], max_in_flight=4, worker_id="w-1")
        worker.handle("t", probe.handler())
        ids = await enqueue(client, 20)
        async with running(worker):
            acks = await spy.wait_for("ack", 20)
        assert sorted(p["n"] for p in probe.payloads) == list(range(20))
        assert sorted(c.request.job_id for c in acks) == sorted(ids)
        assert {(c.request.attempt, c.request.worker_id) for c in acks} == {(1, "w-1")}
        assert engine.stats()[QUEUE].live_depth == 0
        assert not spy.of("nack")
        stats = worker.statistics()
        assert (stats.processed, stats.nacked_retry, stats.settle_errors, stats.in_flight) == (
            20,
            0,
            0,
            0,
        )


@pytest.mark.parametrize("max_in_flight", [1, 4])
async def test_max_in_flight_is_never_exceeded(max_in_flight: int) -> None:
    probe = Probe()

    async def work(payload: Payload | None, ctx: JobCtx) -> None:
        assert payload is not None
        await anyio.sleep(0.1 * (payload.json()["n"] % 5 + 1))

    async with open_in_memory_client() as (client, engine):
        spy = EngineSpy(engine)
        worker = Worker(client, [QUEUE], max_in_flight=max_in_flight)
        worker.handle("t", probe.handler(work))
        await enqueue(client, 30)
        async with running(worker):
            await spy.wait_for("ack", 30)
    assert probe.max_in_flight == max_in_flight  # reached, never exceeded
    assert worker.statistics().max_in_flight_seen == max_in_flight


async def test_reserve_asks_only_for_free_capacity() -> None:
    probe = Probe()
    gates: dict[int, anyio.Event] = {}

    async def blocked(payload: Payload | None, ctx: JobCtx) -> None:
        assert payload is not None
        await gates.setdefault(payload.json()["n"], anyio.Event()).wait()

    async with open_in_memory_client() as (client, engine):
        spy = EngineSpy(engine)
        worker = Worker(client, [QUEUE], max_in_flight=4, wait=30.0)
        spy.annotate = lambda call: worker.statistics().in_flight
        worker.handle("t", probe.handler(blocked))
        async with running(worker):
            await spy.wait_until(lambda: len(spy.of("reserve")) == 1)
            await enqueue(client, 2)  # the parked reserve takes both
            await probe.wait_starts(2)
            await spy.wait_until(lambda: len(spy.of("reserve")) == 2)
            await enqueue(client, 3, first=2)  # the second reserve may take only 2 of them
            await probe.wait_starts(4)
            # Every slot is taken: no reserve is made while they stay taken.
            await anyio.sleep(20)
            assert len(spy.of("reserve")) == 2
            assert engine.stats()[QUEUE].ready == 1
            gates[0].set()
            await probe.wait_starts(5)
            for n in range(5):
                gates.setdefault(n, anyio.Event()).set()
            await spy.wait_for("ack", 5)
        asked = [c.request.max_jobs for c in spy.of("reserve")]
        assert asked[:3] == [4, 2, 1]
        assert [len(c.reply.jobs) for c in spy.of("reserve")[:3]] == [2, 2, 1]
        for call in spy.of("reserve"):
            assert call.request.max_jobs + call.note <= 4, (call.request.max_jobs, call.note)


async def test_an_idle_worker_reserves_at_once_after_each_job() -> None:
    """With nothing else settling, a returned token is reserved with at once."""
    gates = {n: anyio.Event() for n in range(5)}

    async def blocked(payload: Payload | None, ctx: JobCtx) -> None:
        assert payload is not None
        await gates[payload.json()["n"]].wait()

    async with open_in_memory_client() as (client, engine):
        spy = EngineSpy(engine)
        spy.annotate = lambda call: anyio.current_time()
        probe = Probe()
        worker = Worker(client, [QUEUE], max_in_flight=8, wait=30.0)
        worker.handle("t", probe.handler(blocked))
        await enqueue(client, 4)
        async with running(worker):
            await probe.wait_starts(4)
            await spy.wait_until(lambda: len(spy.of("reserve")) == 2)  # parked for 4 more
            gates[0].set()
            await spy.wait_for("ack")
            await enqueue(client, 1, first=4)
            await probe.wait_starts(5)
            assert probe.starts[-1][0] == spy.of("ack")[0].ended_at  # no wait at all
            for gate in gates.values():
                gate.set()
            await spy.wait_for("ack", 5)


async def test_max_jobs_caps_each_reserve() -> None:
    async with open_in_memory_client() as (client, engine):
        spy = EngineSpy(engine)
        worker = Worker(client, [QUEUE], max_in_flight=8, max_jobs=3)
        worker.handle("t", Probe().handler())
        await enqueue(client, 7)
        async with running(worker):
            await spy.wait_for("ack", 7)
        reserves = spy.of("reserve")
        assert reserves[0].request.max_jobs == 3
        assert all(c.request.max_jobs <= 3 for c in reserves)
        assert [len(c.reply.jobs) for c in reserves[:3]] == [3, 3, 1]


async def test_handler_error_retry_is_redelivered_as_attempt_2() -> None:
    probe = Probe()

    async def flaky(payload: Payload | None, ctx: JobCtx) -> None:
        if ctx.attempt == 1:
            raise HandlerError.retry("busy")

    async with open_in_memory_client() as (client, engine):
        spy = EngineSpy(engine)
        worker = Worker(client, [QUEUE])
        worker.handle("t", probe.handler(flaky))
        [job_id] = await enqueue(client)
        async with running(worker):
            [ack] = await spy.wait_for("ack")
        [nack] = spy.of("nack")
        assert nack_kind(nack) == ("default", None)
        assert (nack.request.job_id, nack.request.attempt, nack.request.reason) == (
            job_id,
            1,
            "busy",
        )
        assert probe.attempts() == [1, 2]
        assert ack.request.attempt == 2
        stats = worker.statistics()
        assert (stats.nacked_retry, stats.processed) == (1, 1)


async def test_handler_error_retry_after_delays_the_redelivery() -> None:
    probe = Probe()

    async def later(payload: Payload | None, ctx: JobCtx) -> None:
        if ctx.attempt == 1:
            raise HandlerError.retry_after("rate limited", 7.5)

    async with open_in_memory_client() as (client, engine):
        spy = EngineSpy(engine)
        worker = Worker(client, [QUEUE])
        worker.handle("t", probe.handler(later))
        await enqueue(client)
        async with running(worker):
            await spy.wait_for("ack")
        [nack] = spy.of("nack")
        assert nack_kind(nack) == ("after", 7.5)
        assert nack.request.reason == "rate limited"
        (first, _), (second, _) = probe.starts
        assert 7.5 <= second - first < 7.6
        assert probe.attempts() == [1, 2]


async def test_handler_error_permanent_dead_letters() -> None:
    probe = Probe()

    async def bad(payload: Payload | None, ctx: JobCtx) -> None:
        raise HandlerError.permanent("malformed input")

    async with open_in_memory_client(storage=RETAIN) as (client, engine):
        spy = EngineSpy(engine)
        worker = Worker(client, [QUEUE])
        worker.handle("t", probe.handler(bad))
        [job_id] = await enqueue(client)
        async with running(worker):
            [nack] = await spy.wait_for("nack")
            await anyio.sleep(60)  # nothing is redelivered
        assert nack_kind(nack) == ("dead_letter", None)
        assert nack.reply.dead_lettered
        [record] = engine.dead_letters()
        assert (record.job.id, record.cause, record.last_reason, record.final_attempt) == (
            job_id,
            DeadLetterCause.REJECTED,
            "malformed input",
            1,
        )
        assert probe.attempts() == [1]
        assert engine.stats()[QUEUE].live_depth == 0
        assert worker.statistics().nacked_dead_letter == 1


async def test_retry_on_the_last_attempt_dead_letters() -> None:
    async def flaky(payload: Payload | None, ctx: JobCtx) -> None:
        raise HandlerError.retry("still busy")

    async with open_in_memory_client(storage=RETAIN) as (client, engine):
        spy = EngineSpy(engine)
        worker = Worker(client, [QUEUE])
        worker.handle("t", flaky)
        await enqueue(client, max_attempts=2)
        async with running(worker):
            nacks = await spy.wait_for("nack", 2)
        assert [c.reply.dead_lettered for c in nacks] == [False, True]
        [record] = engine.dead_letters()
        assert record.cause == DeadLetterCause.ATTEMPTS_EXHAUSTED
        stats = worker.statistics()
        assert (stats.nacked_retry, stats.nacked_dead_letter) == (1, 1)


def test_the_default_retry_is_two_to_the_attempt_capped_at_60_with_full_jitter() -> None:
    assert [DEFAULT_RETRY.nominal_delay(a) for a in range(1, 9)] == [2, 4, 8, 16, 32, 60, 60, 60]
    assert DEFAULT_RETRY.nominal_delay(10**6) == 60
    assert DEFAULT_RETRY.jitter == "full"
    assert Retry(backoff=2.0, max_delay=60.0, jitter=None) == UNJITTERED


async def test_unknown_job_type_backs_off_instead_of_burning_attempts() -> None:
    probe = Probe()
    async with open_in_memory_client() as (client, engine):
        spy = EngineSpy(engine)
        lacking = Worker(client, [QUEUE], worker_id="lacking", retry=UNJITTERED)
        lacking.handle("t", probe.handler())
        [job_id] = await enqueue(client, job_type="mystery")
        async with running(lacking):
            [first] = await spy.wait_for("nack")
            t_nack = anyio.current_time()
            assert nack_kind(first) == ("after", 2.0)
            assert "no handler registered" in (first.request.reason or "")
            # Not burned: waiting out its backoff, still on attempt 2.
            snapshot = engine.snapshot_job(job_id)
            assert snapshot is not None
            assert (snapshot.state, snapshot.attempt) == (JobState.SCHEDULED, 2)
            second = (await spy.wait_for("nack", 2))[1]
            assert second.request.attempt == 2
            assert nack_kind(second) == ("after", 4.0)
            assert 2.0 <= second.at - t_nack < 2.1
        # A worker that has the handler takes the job on its next delivery.
        capable = Worker(client, [QUEUE], worker_id="capable")
        capable.handle("mystery", probe.handler())
        async with running(capable):
            [ack] = await spy.wait_for("ack")
        assert (ack.request.attempt, ack.request.worker_id) == (3, "capable")
        assert probe.attempts() == [3]


async def test_catch_all_takes_types_without_their_own_handler() -> None:
    specific, fallback = Probe(), Probe()
    async with open_in_memory_client() as (client, engine):
        spy = EngineSpy(engine)
        worker = Worker(client, [QUEUE])
        worker.handle("known", specific.handler())
        worker.catch_all(fallback.handler())
        await enqueue(client, 2, job_type="known")
        await enqueue(client, 3, job_type="other")
        async with running(worker):
            await spy.wait_for("ack", 5)
        assert {ctx.job_type for _, ctx in specific.starts} == {"known"}
        assert len(specific.starts) == 2
        assert {ctx.job_type for _, ctx in fallback.starts} == {"other"}
        assert len(fallback.starts) == 3
        assert not spy.of("nack")


async def test_an_exception_is_nacked_with_backoff() -> None:
    probe = Probe()

    async def crashes_twice(payload: Payload | None, ctx: JobCtx) -> None:
        if ctx.attempt < 3:
            raise ValueError(f"boom {ctx.attempt}")

    async with open_in_memory_client() as (client, engine):
        spy = EngineSpy(engine)
        worker = Worker(client, [QUEUE], retry=UNJITTERED)
        worker.handle("t", probe.handler(crashes_twice))
        await enqueue(client, max_attempts=5)
        async with running(worker):
            await spy.wait_for("ack")
        nacks = spy.of("nack")
        assert [nack_kind(c) for c in nacks] == [("after", 2.0), ("after", 4.0)]
        assert [c.request.reason for c in nacks] == [
            "handler raised ValueError: boom 1",
            "handler raised ValueError: boom 2",
        ]
        assert probe.attempts() == [1, 2, 3]
        starts = [t for t, _ in probe.starts]
        assert 2.0 <= starts[1] - starts[0] < 2.1
        assert 4.0 <= starts[2] - starts[1] < 4.1
        stats = worker.statistics()
        assert (stats.nacked_retry, stats.processed) == (2, 1)


async def test_by_default_a_failure_waits_a_random_part_of_two_to_the_attempt() -> None:
    """The default policy: full jitter below today's ``min(2**attempt, 60)``."""

    async def crashes(payload: Payload | None, ctx: JobCtx) -> None:
        if ctx.attempt < 4:
            raise ValueError("boom")

    async with open_in_memory_client() as (client, engine):
        spy = EngineSpy(engine)
        worker = Worker(client, [QUEUE])
        worker.handle("t", crashes)
        await enqueue(client, max_attempts=5)
        async with running(worker):
            await spy.wait_for("ack")
        delays = [nack_kind(c) for c in spy.of("nack")]
        assert [kind for kind, _ in delays] == ["after"] * 3
        for (_, delay), cap in zip(delays, [2.0, 4.0, 8.0], strict=True):
            assert delay is not None and 0.0 <= delay <= cap
        # Jittered: not today's exact 2, 4, 8 (each hit with probability zero).
        assert [delay for _, delay in delays] != [2.0, 4.0, 8.0]


async def test_an_ack_failure_is_logged_and_the_worker_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    probe = Probe()

    async def second_one_fails(payload: Payload | None, ctx: JobCtx) -> None:
        if len(probe.starts) == 2:
            raise RuntimeError("nack me")

    async with open_in_memory_client() as (client, engine):
        spy = EngineSpy(engine)
        spy.fail("ack", unavailable())
        spy.fail("nack", unavailable())
        worker = Worker(client, [QUEUE], max_in_flight=1)
        worker.handle("t", probe.handler(second_one_fails))
        await enqueue(client, 3)
        with caplog.at_level(logging.ERROR, "sepp_anyio.worker"):
            async with running(worker):
                # The third job is acked at once; the first two come back when their
                # unsettled leases expire, and are acked then.
                acks = await spy.wait_for("ack", 3)
        first, second, third = (ctx.id for _, ctx in probe.starts[:3])
        assert (acks[0].request.job_id, acks[0].request.attempt) == (third, 1)
        assert {(c.request.job_id, c.request.attempt) for c in acks[1:]} == {
            (first, 2),
            (second, 2),
        }
        stats = worker.statistics()
        assert (stats.processed, stats.settle_errors, stats.nacked_retry) == (3, 2, 0)
        errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
        assert any(first in m and "could not ack" in m for m in errors), errors
        assert any(second in m and "could not nack" in m for m in errors), errors


async def test_reserve_errors_back_off_and_never_stop_the_loop(
    caplog: pytest.LogCaptureFixture,
) -> None:
    probe = Probe()
    async with open_in_memory_client() as (client, engine):
        spy = EngineSpy(engine)
        spy.fail("reserve", unavailable(), unavailable(), unavailable())
        worker = Worker(client, [QUEUE], reserve_error_backoff=1.5)
        worker.handle("t", probe.handler())
        await enqueue(client)
        with caplog.at_level(logging.WARNING, "sepp_anyio.worker"):
            async with running(worker):
                await spy.wait_for("ack")
        reserves = spy.of("reserve")
        assert [c.ok for c in reserves[:4]] == [False, False, False, True]
        gaps = [b.at - a.at for a, b in itertools.pairwise(reserves[:4])]
        assert all(1.5 <= gap < 1.6 for gap in gaps), gaps
        assert worker.statistics().reserve_errors == 3
        assert sum("reserve failed" in r.getMessage() for r in caplog.records) == 3


async def test_an_early_empty_reserve_pauses_before_the_next() -> None:
    async with open_in_memory_client() as (client, engine):
        spy = EngineSpy(engine)
        worker = Worker(client, [QUEUE], wait=30.0)
        worker.handle("t", Probe().handler())
        async with running(worker):
            await spy.wait_until(lambda: bool(spy.of("reserve")))
            engine.shutdown()  # a draining server answers every reserve empty at once
            started = anyio.current_time()
            await anyio.sleep(2.0)
        late = [c.at for c in spy.of("reserve") if c.at >= started]
        assert len(late) == 8, late  # one per 0.25 s, not a hot loop
        gaps = [b - a for a, b in itertools.pairwise(late)]
        assert all(0.25 <= gap < 0.26 for gap in gaps), gaps


async def test_an_empty_reserve_after_a_full_short_wait_repolls_at_once() -> None:
    async with open_in_memory_client() as (client, engine):
        spy = EngineSpy(engine)
        worker = Worker(client, [QUEUE], wait=0.1)
        worker.handle("t", Probe().handler())
        async with running(worker):
            await spy.wait_for("reserve", 5)
        calls = spy.of("reserve")[:5]
        gaps = [b.at - a.at for a, b in itertools.pairwise(calls)]
        assert all(0.099 < gap < 0.11 for gap in gaps), gaps  # the wait, and no 0.25 s pause


async def test_job_log_lines_carry_id_type_and_attempt(caplog: pytest.LogCaptureFixture) -> None:
    async def flaky(payload: Payload | None, ctx: JobCtx) -> None:
        if ctx.attempt == 1:
            raise KeyError("missing")
        await anyio.sleep(2)

    async with open_in_memory_client() as (client, engine):
        spy = EngineSpy(engine)
        worker = Worker(client, [QUEUE], lease=1.0, auto_extend=True)
        worker.handle("t", flaky)
        [job_id] = await enqueue(client)
        [other_id] = await enqueue(client, job_type="mystery", max_attempts=1)
        with caplog.at_level(logging.DEBUG, "sepp_anyio.worker"):
            async with running(worker):
                await spy.wait_for("ack")
                await spy.wait_for("nack", 2)
    job_lines = [r.getMessage() for r in caplog.records if job_id in r.getMessage()]
    assert any(m.startswith(f"job {job_id} (t, attempt 1/3): handler raised") for m in job_lines)
    assert any(m.startswith(f"job {job_id} (t, attempt 2/3): lease extended") for m in job_lines)
    assert any(m.startswith(f"job {job_id} (t, attempt 2/3): acked") for m in job_lines)
    assert any(
        m.startswith(f"job {other_id} (mystery, attempt 1/1): no handler")
        for r in caplog.records
        for m in [r.getMessage()]
    )
    # Every line about a job names it the same way.
    for record in caplog.records:
        message = record.getMessage()
        for jid, jtype in ((job_id, "t"), (other_id, "mystery")):
            if jid in message:
                assert message.startswith(f"job {jid} ({jtype}, attempt "), message
