"""The start-up look-back of ``run_cron`` (issue 18: "after downtime at most ``catch_up``
missed slots, the newest, are enqueued"), on virtual time on both backends.

Every test has the same shape: a ``*/10`` cron, the server's clock starting at 00:00:30, a
first run of the scheduler until 00:15:00 (it enqueues 00:10 and, looking back at its own
start, the newest slots of the hour before), then downtime until 00:45:30, which covers
the slots 00:20, 00:30 and 00:40, then a restart. Only what the restart sends is checked,
from ``tap.jobs[before:]``.
"""

from __future__ import annotations

import logging
from collections import Counter
from datetime import datetime, timedelta
from typing import Any

import anyio
import pytest

from sepp_anyio._cron import Cron, idempotency_key, run_cron

from ._support import QUEUE, EnqueueTap, JsonTask, cron_server, reserve_all, run_for, utc

pytestmark = pytest.mark.anyio

TASK = JsonTask(QUEUE, "tick")
START = utc(2025, 1, 1, 0, 0, 30)
#: Where the first run stops, and how long everything is down after it.
FIRST_RUN = 14 * 60 + 30  # until 00:15:00
DOWNTIME = 30 * 60 + 30  # until 00:45:30
RESTART = utc(2025, 1, 1, 0, 45, 30)


def _payload(slot: datetime) -> dict[str, Any]:
    return {"slot": slot.isoformat()}


def _at(minute: int) -> datetime:
    return utc(2025, 1, 1, 0, minute) if minute < 60 else utc(2025, 1, 1, 1, minute - 60)


def _runner(client: Any, cron: Cron[Any]) -> Any:
    return lambda task_status: run_cron(client, cron, task_status=task_status)


async def _first_run_then_downtime(client: Any, cron: Cron[Any], tap: EnqueueTap) -> int:
    """Run until 00:15:00 (00:10 enqueued), stay down until 00:45:30; the number of jobs
    sent by then."""
    await run_for(FIRST_RUN, _runner(client, cron))
    assert _at(10) in [job.scheduled_at for job in tap.jobs]
    await anyio.sleep(DOWNTIME)
    return len(tap.jobs)


@pytest.mark.parametrize("catch_up", [1, 2])
async def test_a_restart_after_downtime_enqueues_the_newest_catch_up_missed_slots(
    catch_up: int, caplog: pytest.LogCaptureFixture
) -> None:
    async with cron_server(START) as (client, _engine, _clock, tap):
        cron = Cron("*/10 * * * *", TASK, _payload, catch_up=catch_up)
        before = await _first_run_then_downtime(client, cron, tap)
        with caplog.at_level(logging.INFO, "sepp_anyio.cron"):
            await run_for(10 * 60, _runner(client, cron))  # until 00:55:30
        jobs = await reserve_all(client)

    missed = [_at(20), _at(30), _at(40)]
    restart = tap.jobs[before:]
    assert [job.scheduled_at for job in restart] == [*missed[-catch_up:], _at(50)]
    assert not any(job.deduplicated for job in restart)
    # The caught-up slots went out at the restart itself, not at the next slot.
    assert all(job.at < RESTART + timedelta(seconds=1) for job in restart[:catch_up])
    # Each slot is one job; those the look-back passed over stay missed.
    slots = sorted(job.ctx.scheduled_at for job in jobs if job.ctx.scheduled_at is not None)
    assert _at(50) in slots and all(slots.count(slot) == 1 for slot in slots)
    assert [slot for slot in missed if slot in slots] == missed[-catch_up:]
    # Skipping the older slots of the look-back is expected at a start: INFO, no warning.
    skips = [r for r in caplog.records if "missed and are skipped" in r.getMessage()]
    assert skips and all(r.levelno == logging.INFO for r in skips)
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


@pytest.mark.parametrize(
    ("window", "caught_up"),
    [
        (25 * 60, [_at(30), _at(40)]),  # back to 00:20:30: 00:20 is older than the window
        (25 * 60 + 30, [_at(20), _at(30), _at(40)]),  # back to 00:20:00, included
        (timedelta(minutes=9), [_at(40)]),  # back to 00:36:30
    ],
)
async def test_a_slot_older_than_the_window_is_not_enqueued(
    window: float | timedelta, caught_up: list[datetime]
) -> None:
    async with cron_server(START) as (client, _engine, _clock, tap):
        cron = Cron("*/10 * * * *", TASK, _payload, catch_up=5, catch_up_window=window)
        before = await _first_run_then_downtime(client, cron, tap)
        await run_for(10 * 60, _runner(client, cron))
    assert [job.scheduled_at for job in tap.jobs[before:]] == [*caught_up, _at(50)]


async def test_a_restart_without_downtime_is_a_dedup_hit_not_a_second_job() -> None:
    async with cron_server(START) as (client, _engine, _clock, tap):
        cron = Cron("*/10 * * * *", TASK, _payload)
        await run_for(FIRST_RUN, _runner(client, cron))  # 00:10 enqueued
        before = len(tap.jobs)
        await run_for(10 * 60, _runner(client, cron))  # restarted at once, until 00:25:00
        jobs = await reserve_all(client)

    restart = tap.jobs[before:]
    # The look-back sent 00:10 again, and the server answered it as a duplicate.
    assert [(job.key, job.deduplicated) for job in restart] == [
        (idempotency_key("tick", _at(10)), True),
        (idempotency_key("tick", _at(20)), False),
    ]
    slots = [job.ctx.scheduled_at for job in jobs]
    assert slots.count(_at(10)) == 1
    assert len(slots) == len(set(slots))


async def test_three_replicas_starting_at_different_moments_enqueue_each_missed_slot_once() -> None:
    async with cron_server(START) as (client, _engine, _clock, tap):
        cron = Cron("*/10 * * * *", TASK, _payload, catch_up=3)
        before = await _first_run_then_downtime(client, cron, tap)
        async with anyio.create_task_group() as tg:
            await tg.start(_runner(client, cron))  # 00:45:30
            await anyio.sleep(90)
            await tg.start(_runner(client, cron))  # 00:47:00
            await anyio.sleep(5 * 60)
            await tg.start(_runner(client, cron))  # 00:52:00, after the 00:50 slot
            await anyio.sleep(8 * 60 + 30)  # until 01:00:30
            tg.cancel_scope.cancel()
        jobs = await reserve_all(client)

    restart = tap.jobs[before:]
    expected = [_at(20), _at(30), _at(40), _at(50), _at(60)]
    assert [job.scheduled_at for job in restart if not job.deduplicated] == expected
    # Who sent what: the first replica everything, the second its look-back (00:20 to 00:40)
    # and the slots from then on, the third its look-back (00:30 to 00:50) and 01:00.
    assert Counter(job.scheduled_at for job in restart) == {
        _at(20): 2,
        _at(30): 3,
        _at(40): 3,
        _at(50): 3,
        _at(60): 3,
    }
    slots = [job.ctx.scheduled_at for job in jobs]
    assert all(slots.count(slot) == 1 for slot in expected)


async def test_catch_up_window_zero_enqueues_nothing_from_before_the_start() -> None:
    async with cron_server(START) as (client, _engine, _clock, tap):
        cron = Cron("*/10 * * * *", TASK, _payload, catch_up=5, catch_up_window=0)
        await run_for(FIRST_RUN, _runner(client, cron))
        # Not even the 00:00 slot, 30 s before the first start.
        assert [job.scheduled_at for job in tap.jobs] == [_at(10)]
        await anyio.sleep(DOWNTIME)
        await run_for(10 * 60, _runner(client, cron))
    assert [job.scheduled_at for job in tap.jobs] == [_at(10), _at(50)]


async def test_catch_up_zero_enqueues_nothing_from_before_the_start() -> None:
    async with cron_server(START) as (client, _engine, _clock, tap):
        cron = Cron("*/10 * * * *", TASK, _payload, catch_up=0)  # the window is ignored
        await _first_run_then_downtime(client, cron, tap)
        await run_for(10 * 60, _runner(client, cron))
    assert [job.scheduled_at for job in tap.jobs] == [_at(10), _at(50)]


async def test_catch_up_zero_does_not_retry_a_slot_the_server_refused(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async with cron_server(START) as (client, _engine, _clock, tap):
        # UNAVAILABLE from 00:19:30 to 00:25:00: the 00:20 slot's enqueue fails.
        tap.outage = (utc(2025, 1, 1, 0, 19, 30), utc(2025, 1, 1, 0, 25))
        cron = Cron("*/10 * * * *", TASK, _payload, catch_up=0)
        with caplog.at_level(logging.WARNING, "sepp_anyio.cron"):
            await run_for(35 * 60, _runner(client, cron))  # until 00:35:30
    assert [key for _, key in tap.refused] == [idempotency_key("tick", _at(20))]
    assert [job.scheduled_at for job in tap.jobs] == [_at(10), _at(30)]
    assert any("slot skipped (catch_up=0)" in r.getMessage() for r in caplog.records)
