"""``worker.cron(...)``: the scheduler inside a Worker's run(), on virtual time (both
backends): three replicas enqueue and handle each slot once, daylight saving, catch-up after
an outage and after a restart, the scheduler stops at the shutdown signal, and registration
errors."""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import AsyncIterator, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import anyio
import pytest

from sepp_anyio import Client, Cron, JobCtx, Payload, Worker

from ._support import QUEUE, JsonTask, cron_server, utc

pytestmark = pytest.mark.anyio

TASK = JsonTask(QUEUE, "tick")


def _payload(slot: datetime) -> dict[str, Any]:
    return {"slot": slot.astimezone(UTC).isoformat()}


class Handled:
    """What the workers' handlers saw: each slot's payload, with the worker that ran it."""

    def __init__(self) -> None:
        self.slots: list[tuple[str, str]] = []

    def handler(self, worker_id: str) -> Any:
        async def handle(payload: Payload | None, ctx: JobCtx) -> None:
            assert payload is not None
            self.slots.append((payload.json()["slot"], worker_id))

        return handle


def _workers(client: Client, crons: Sequence[Cron[Any]], count: int, seen: Handled) -> list[Worker]:
    workers = []
    for index in range(count):
        worker = Worker(client, [QUEUE], worker_id=f"replica-{index}")
        worker.handle("tick", seen.handler(worker.worker_id))
        for cron in crons:
            worker.cron(cron)
        workers.append(worker)
    return workers


@contextlib.asynccontextmanager
async def _running(workers: Sequence[Worker]) -> AsyncIterator[None]:
    async with anyio.create_task_group() as tg:
        for worker in workers:
            await tg.start(worker.run)
        try:
            yield
        finally:
            for worker in workers:
                worker.shutdown()


async def test_three_worker_replicas_enqueue_and_handle_each_slot_once() -> None:
    async with cron_server(utc(2025, 1, 1, 0, 0, 30)) as (client, _engine, _clock, tap):
        seen = Handled()
        cron = Cron("*/5 * * * *", TASK, _payload, catch_up_window=0)
        workers = _workers(client, [cron], 3, seen)
        assert workers[0].crons == (cron,)
        async with _running(workers):
            await anyio.sleep(3600 + 60)  # virtual time: the slots 00:05 ... 01:00, handled
    slots = [(utc(2025, 1, 1, 0, 5) + timedelta(minutes=5 * i)).isoformat() for i in range(12)]
    # Each replica sent each slot; the server kept one job per slot, handled once.
    assert Counter(job.key for job in tap.jobs) == {
        f"cron:tick:{datetime.fromisoformat(s):%Y-%m-%dT%H:%M:%SZ}": 3 for s in slots
    }
    assert len(tap.new()) == 12
    assert sorted(slot for slot, _ in seen.slots) == slots


async def test_a_worker_cron_skips_the_hour_spring_forward_removes() -> None:
    # Europe/Berlin, 2025-03-30 02:00 CET -> 03:00 CEST.
    async with cron_server(utc(2025, 3, 30, 0, 10)) as (client, _engine, _clock, tap):
        seen = Handled()
        cron = Cron("30 * * * *", TASK, _payload, timezone="Europe/Berlin", catch_up_window=0)
        async with _running(_workers(client, [cron], 2, seen)):
            await anyio.sleep(3 * 3600)
    # 01:30 CET (00:30 UTC), no 02:30, then 03:30 and 04:30 CEST (01:30, 02:30 UTC).
    expected = [utc(2025, 3, 30, 0, 30), utc(2025, 3, 30, 1, 30), utc(2025, 3, 30, 2, 30)]
    assert [job.scheduled_at for job in tap.new()] == expected
    assert sorted(slot for slot, _ in seen.slots) == [s.isoformat() for s in expected]


@pytest.mark.parametrize("catch_up", [1, 2])
async def test_a_worker_cron_catches_up_the_newest_slots_after_an_outage(catch_up: int) -> None:
    async with cron_server(utc(2025, 1, 1, 0, 0, 30)) as (client, _engine, _clock, tap):
        # The server refuses enqueues from 00:00:30 to 00:05:45: five slots come due.
        tap.outage = (utc(2025, 1, 1, 0, 0, 30), utc(2025, 1, 1, 0, 5, 45))
        seen = Handled()
        cron = Cron("* * * * *", TASK, _payload, catch_up=catch_up, catch_up_window=0)
        async with _running(_workers(client, [cron], 1, seen)):
            await anyio.sleep(10 * 60)  # until 00:10:30
    assert tap.refused
    # The retry that gets through (its backoff decides when) sends the newest `catch_up`
    # slots due then, and the older ones are skipped.
    recovered = tap.jobs[0].at
    newest = recovered.replace(second=0, microsecond=0)
    caught_up = [newest - timedelta(minutes=n) for n in reversed(range(catch_up))]
    later = [newest + timedelta(minutes=n) for n in range(1, 11)]
    expected = [*caught_up, *(s for s in later if s <= utc(2025, 1, 1, 0, 10))]
    assert [job.scheduled_at for job in tap.new()] == expected
    assert utc(2025, 1, 1, 0, 1) not in expected  # older slots were skipped
    assert sorted(slot for slot, _ in seen.slots) == [s.isoformat() for s in expected]


async def test_the_scheduler_stops_at_the_shutdown_signal() -> None:
    async with cron_server(utc(2025, 1, 1, 0, 0, 30)) as (client, _engine, _clock, tap):
        gate, started = anyio.Event(), anyio.Event()

        async def held(payload: Payload | None, ctx: JobCtx) -> None:
            started.set()
            await gate.wait()

        worker = Worker(client, [QUEUE]).cron(Cron("* * * * *", TASK, _payload, catch_up_window=0))
        worker.handle("tick", held)
        async with anyio.create_task_group() as tg:
            await tg.start(worker.run)
            await started.wait()  # the 00:01 job is running
            worker.shutdown()
            # Draining (the handler holds the drain) for five more minutes: no new slots.
            await anyio.sleep(5 * 60)
            assert [job.scheduled_at for job in tap.jobs] == [utc(2025, 1, 1, 0, 1)]
            gate.set()


async def test_cron_registration_errors() -> None:
    async with cron_server(utc(2025, 1, 1)) as (client, _engine, _clock, _tap):
        worker = Worker(client, [QUEUE])
        worker.cron(Cron("@hourly", TASK, _payload))
        with pytest.raises(ValueError, match="a cron named 'tick' is already registered"):
            worker.cron(Cron("@daily", TASK, _payload))
        worker.cron(Cron("@daily", TASK, _payload, name="daily"))
        with pytest.raises(TypeError, match=r"cron must be a sepp_anyio\.Cron, got str"):
            worker.cron("* * * * *")  # type: ignore[arg-type]
        async with anyio.create_task_group() as tg:
            await tg.start(worker.run)
            with pytest.raises(RuntimeError, match="register crons before run"):
                worker.cron(Cron("@weekly", TASK, _payload, name="weekly"))
            worker.shutdown()
        assert [c.name for c in worker.crons] == ["tick", "daily"]


async def test_a_worker_restarted_after_downtime_enqueues_and_handles_the_slot_it_missed() -> None:
    # The default look-back (an hour, catch_up=1) through worker.cron(): the worker stops at
    # 00:15, is down over the slots 00:20 to 00:40, restarts at 00:45:30.
    async with cron_server(utc(2025, 1, 1, 0, 10, 30)) as (client, _engine, _clock, tap):
        seen = Handled()
        cron = Cron("*/10 * * * *", TASK, _payload)
        async with _running(_workers(client, [cron], 1, seen)):
            await anyio.sleep(4 * 60 + 30)  # until 00:15:00
        await anyio.sleep(30 * 60 + 30)  # down until 00:45:30
        async with _running(_workers(client, [cron], 1, seen)):
            await anyio.sleep(60)
    # 00:10 at the first start (its own look-back), 00:40 at the restart.
    expected = [utc(2025, 1, 1, 0, 10), utc(2025, 1, 1, 0, 40)]
    assert [job.scheduled_at for job in tap.new()] == expected
    assert sorted(slot for slot, _ in seen.slots) == [s.isoformat() for s in expected]
