"""Expiry: a job reserved at or after its ``sepp.expires_at`` deadline is never run; it is
dead-lettered with reason "expired", reported as ``Outcome.EXPIRED`` and counted (statistics,
Prometheus). The deadline comes from ``Task(expires=)``, ``EnqueueRequest(expires_at=)`` or a
producer that sets the custom field itself; a value there that is not an int is ignored
with a warning. Both backends, virtual time (the worker reads the server's clock)."""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta
from typing import Any

import anyio
import pytest
from prometheus_client.parser import text_string_to_metric_families

from sepp_anyio import Client, EnqueueRequest, JobCtx, Outcome, Task, Worker
from sepp_anyio._client import wall_clock_of
from sepp_anyio.server import DeadLetterCause
from sepp_anyio.testing import open_in_memory_client

from ._helpers import QUEUE, Call, EngineSpy, Probe, enqueue, nack_kind, running

pytestmark = pytest.mark.anyio


async def _wait(spy: EngineSpy, method: str, count: int = 1) -> list[Call]:
    """``spy.wait_for``, bounded: a missing call fails the test after 10 virtual minutes."""
    with anyio.fail_after(600):
        return await spy.wait_for(method, count)


RETAIN = {"dead_letter_retention_ms": 3_600_000}
KEY = "sepp.expires_at"


def _server_ms(client: Client, *, after: float = 0.0) -> int:
    """The server's "now" plus ``after`` seconds, in ms since the epoch."""
    now = wall_clock_of(client)() + timedelta(seconds=after)
    return int(now.timestamp() * 1000)


def _deadline(ctx: JobCtx) -> int:
    """The job's deadline, which must be an int."""
    value = ctx.custom[KEY]
    assert isinstance(value, int) and not isinstance(value, bool)
    return value


def _expired_jobs(worker: Worker) -> float:
    for family in text_string_to_metric_families(worker.metrics.render()):
        for sample in family.samples:
            if sample.name == "sepp_jobs_total" and sample.labels.get("outcome") == "expired":
                return sample.value
    return 0.0


async def test_an_expired_job_is_never_run_and_is_dead_lettered_as_expired() -> None:
    task = Task(QUEUE, "t", int, expires=5.0)
    ran: list[int] = []
    outcomes: list[tuple[str, Outcome, BaseException | None]] = []

    def on_outcome(ctx: JobCtx, outcome: Outcome, error: BaseException | None) -> None:
        outcomes.append((ctx.id, outcome, error))

    async with open_in_memory_client(storage=RETAIN) as (client, engine):
        spy = EngineSpy(engine)
        worker = Worker(client, [QUEUE], on_outcome=on_outcome)

        @worker.task(task)
        async def handle(value: int, ctx: JobCtx) -> None:
            ran.append(value)

        stale = await task.enqueue(client, 1)
        await anyio.sleep(10)  # past its 5 s deadline before any worker reserves it
        fresh = await task.enqueue(client, 2)
        async with running(worker):
            await _wait(spy, "nack")
            await _wait(spy, "ack")
        [nack] = spy.of("nack")
        assert (nack.request.job_id, nack.request.reason, nack_kind(nack)) == (
            stale.job_id,
            "expired",
            ("dead_letter", None),
        )
        assert ran == [2]
        [record] = engine.dead_letters()
        assert (record.job.id, record.cause, record.last_reason, record.final_attempt) == (
            stale.job_id,
            DeadLetterCause.REJECTED,
            "expired",
            1,
        )
        assert sorted(outcomes, key=lambda o: o[0] != stale.job_id) == [
            (stale.job_id, Outcome.EXPIRED, None),
            (fresh.job_id, Outcome.ACKED, None),
        ]
        stats = worker.statistics()
        assert (stats.expired, stats.nacked_dead_letter, stats.processed) == (1, 1, 1)
        assert stats.lanes[0].expired == 1
        assert _expired_jobs(worker) == 1.0


async def test_a_job_reserved_past_its_deadline_while_the_worker_was_busy_is_not_run() -> None:
    """The deadline is checked when the job is reserved: here 10 s after its enqueue, once
    the only slot is free again."""
    task = Task(QUEUE, "t", int, expires=5.0)
    started: list[tuple[int, float]] = []
    first_started = anyio.Event()
    async with open_in_memory_client() as (client, engine):
        spy = EngineSpy(engine)
        worker = Worker(client, [QUEUE], max_in_flight=1)

        @worker.task(task)
        async def handle(value: int, ctx: JobCtx) -> None:
            started.append((value, anyio.current_time()))
            if value == 1:
                first_started.set()
                await anyio.sleep(10)

        t0 = anyio.current_time()
        await task.enqueue(client, 1)
        async with running(worker):
            await first_started.wait()
            await task.enqueue(client, 2)  # due now, expires at t0 + 5
            [nack] = await _wait(spy, "nack")
            await _wait(spy, "ack")
        assert nack.request.reason == "expired"
        assert nack.at - t0 >= 10.0
        assert [value for value, _ in started] == [1]


async def test_a_job_reserved_before_its_deadline_runs() -> None:
    task = Task(QUEUE, "t", int, expires=5.0)
    probe = Probe()
    async with open_in_memory_client() as (client, engine):
        spy = EngineSpy(engine)
        worker = Worker(client, [QUEUE])
        worker.handle("t", probe.handler())
        await task.enqueue(client, 1)
        await anyio.sleep(4.9)
        async with running(worker):
            await _wait(spy, "ack")
        assert not spy.of("nack")
        assert worker.statistics().expired == 0


async def test_expires_counts_from_when_the_job_is_due() -> None:
    """A job delayed 60 s with ``expires=5`` runs at 60 s: its deadline is 65 s."""
    task = Task(QUEUE, "t", int, expires=5.0)
    probe = Probe()
    async with open_in_memory_client() as (client, engine):
        spy = EngineSpy(engine)
        worker = Worker(client, [QUEUE])
        worker.handle("t", probe.handler())
        before = _server_ms(client)
        await task.enqueue(client, 1, delay=60.0)
        await task.enqueue(client, 2, scheduled_at=wall_clock_of(client)() + timedelta(seconds=90))
        async with running(worker):
            await _wait(spy, "ack", 2)
        assert not spy.of("nack")
        [(_, first), (_, second)] = probe.starts
        assert _deadline(first) - before == pytest.approx(65_000, abs=5)
        assert _deadline(second) - before == pytest.approx(95_000, abs=5)


async def test_expires_at_on_a_request_is_honoured() -> None:
    async with open_in_memory_client() as (client, engine):
        spy = EngineSpy(engine)
        worker = Worker(client, [QUEUE])
        probe = Probe()
        worker.handle("t", probe.handler())
        deadline = wall_clock_of(client)() + timedelta(seconds=3)
        ack = await client.enqueue(EnqueueRequest(QUEUE, "t", expires_at=deadline))
        await anyio.sleep(3)  # exactly at the deadline: expired
        async with running(worker):
            [nack] = await _wait(spy, "nack")
        assert (nack.request.job_id, nack.request.reason) == (ack.job_id, "expired")
        assert not probe.starts


async def test_a_producer_in_another_language_sets_the_custom_field_itself() -> None:
    async with open_in_memory_client() as (client, engine):
        spy = EngineSpy(engine)
        worker = Worker(client, [QUEUE])
        probe = Probe()
        worker.handle("t", probe.handler())
        past = _server_ms(client, after=-1.0)
        future = _server_ms(client, after=3600.0)
        [expired] = await enqueue(client, custom={KEY: past})
        [alive] = await enqueue(client, custom={KEY: future})
        async with running(worker):
            [nack] = await _wait(spy, "nack")
            [ack] = await _wait(spy, "ack")
        assert (nack.request.job_id, nack.request.reason) == (expired, "expired")
        assert ack.request.job_id == alive
        assert [ctx.id for _, ctx in probe.starts] == [alive]


@pytest.mark.parametrize("value", ["tomorrow", 1.7e12, True])
async def test_a_deadline_that_is_not_an_int_is_ignored_with_a_warning(
    value: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """It cannot be read as a deadline: the job runs (losing it would be worse than running
    it late), and the warning names the field and what it holds."""
    async with open_in_memory_client() as (client, engine):
        spy = EngineSpy(engine)
        worker = Worker(client, [QUEUE])
        probe = Probe()
        worker.handle("t", probe.handler())
        [job_id] = await enqueue(client, custom={KEY: value})
        with caplog.at_level(logging.WARNING, logger="sepp_anyio.worker"):
            async with running(worker):
                [ack] = await _wait(spy, "ack")
        assert ack.request.job_id == job_id
        assert not spy.of("nack")
        [warning] = [r for r in caplog.records if KEY in r.getMessage()]
        assert warning.levelno == logging.WARNING
        assert f"{value!r} (a {type(value).__name__})" in warning.getMessage()
        assert "runs without an expiry" in warning.getMessage()


async def test_an_expired_job_without_a_handler_is_still_expired() -> None:
    """Expiry is checked before the handler is looked up: no pointless retries."""
    async with open_in_memory_client() as (client, engine):
        spy = EngineSpy(engine)
        worker = Worker(client, [QUEUE])
        worker.handle("t", Probe().handler())
        await enqueue(client, job_type="mystery", custom={KEY: _server_ms(client, after=-1)})
        async with running(worker):
            [nack] = await _wait(spy, "nack")
        assert (nack.request.reason, nack_kind(nack)) == ("expired", ("dead_letter", None))


async def test_the_deadline_is_read_on_the_servers_clock_not_the_hosts() -> None:
    """On virtual time the server's clock and the host's differ: a deadline an hour after
    the server's now is not expired even though the host's clock may say otherwise (and the
    other way round), so the check uses the client's wall clock."""
    async with open_in_memory_client() as (client, engine):
        spy = EngineSpy(engine)
        worker = Worker(client, [QUEUE])
        probe = Probe()
        worker.handle("t", probe.handler())
        await anyio.sleep(7200)  # the server's clock moves two hours; the host's does not
        host_now_ms = int(datetime.now(UTC).timestamp() * 1000)
        deadline = _server_ms(client, after=-1.0)
        assert deadline > host_now_ms + 3_600_000  # expired for the server, not the host
        await enqueue(client, custom={KEY: deadline})
        async with running(worker):
            [nack] = await _wait(spy, "nack")
        assert nack.request.reason == "expired"
        assert not probe.starts


async def test_expiry_uses_payload_free_jobs_too() -> None:
    """A job without a payload (nothing to decode) expires alike."""
    async with open_in_memory_client() as (client, engine):
        spy = EngineSpy(engine)
        worker = Worker(client, [QUEUE])
        worker.handle("t", Probe().handler())
        request = EnqueueRequest(
            QUEUE, "t", expires_at=wall_clock_of(client)() - timedelta(seconds=1)
        )
        assert request.payload is None
        await client.enqueue(request)
        async with running(worker):
            [nack] = await _wait(spy, "nack")
        assert nack.request.reason == "expired"


async def test_task_enqueue_counts_expires_on_the_servers_clock() -> None:
    """Two virtual hours in, the deadline is the server's now plus ``expires`` (a host-clock
    deadline would be two hours in the past, and the job expired at once)."""
    task = Task(QUEUE, "t", int, expires=5.0)
    probe = Probe()
    async with open_in_memory_client() as (client, engine):
        spy = EngineSpy(engine)
        worker = Worker(client, [QUEUE])
        worker.handle("t", probe.handler())
        await anyio.sleep(7200)
        now = _server_ms(client)
        await task.enqueue(client, 1)
        async with running(worker):
            await _wait(spy, "ack")
        [(_, ctx)] = probe.starts
        assert _deadline(ctx) - now == pytest.approx(5_000, abs=5)
