"""``run_cron`` against the in-process server on virtual time (both backends): replicas,
daylight saving, catch-up after an outage or a clock jump, failures, and its arguments
(the start-up look-back after a restart: ``test_restart.py``)."""

from __future__ import annotations

import itertools
import logging
from datetime import UTC, datetime, timedelta
from typing import Any

import anyio
import pytest

from sepp_anyio._cron import Cron, run_cron

from ._support import QUEUE, JsonTask, cron_server, reserve_all, utc
from ._support import run_for as _run_for

pytestmark = pytest.mark.anyio

TASK = JsonTask(QUEUE, "tick")


def _payload(slot: datetime) -> dict[str, Any]:
    return {"slot": slot.isoformat()}


def _minutes(start: datetime, count: int, step: int = 1) -> list[datetime]:
    return [start + timedelta(minutes=step * i) for i in range(count)]


async def test_three_replicas_enqueue_each_slot_exactly_once() -> None:
    start = utc(2025, 1, 1, 0, 0, 30)
    async with cron_server(start) as (client, _engine, _clock, tap):
        cron = Cron("*/5 * * * *", TASK, _payload, catch_up_window=0)
        replicas = [lambda task_status: run_cron(client, cron, task_status=task_status)] * 3
        await _run_for(3600, *replicas)
        jobs = await reserve_all(client)

    slots = _minutes(utc(2025, 1, 1, 0, 5), 12, step=5)  # 00:05 ... 01:00
    assert sorted(job.ctx.scheduled_at or utc(1970, 1, 1) for job in jobs) == slots
    assert sorted(job.payload.json()["slot"] for job in jobs if job.payload) == [
        s.isoformat() for s in slots
    ]
    # Every replica sent every slot; the server kept the first of each and deduplicated two.
    keys = [f"cron:tick:{s:%Y-%m-%dT%H:%M:%SZ}" for s in slots]
    assert sorted(job.key for job in tap.jobs) == sorted(keys * 3)
    assert sorted(job.key for job in tap.new()) == keys
    # On time: each job was sent at its slot (the ms clock may read it a hair later).
    for job in tap.jobs:
        assert timedelta(0) <= job.at - job.scheduled_at < timedelta(seconds=0.1)


async def test_a_slot_at_the_start_instant_is_enqueued_and_none_before_it() -> None:
    async with cron_server(utc(2025, 1, 1, 12, 0, 0)) as (client, _engine, _clock, tap):
        cron = Cron("* * * * *", TASK, _payload, catch_up_window=0)
        await _run_for(150, lambda task_status: run_cron(client, cron, task_status=task_status))
    assert [job.scheduled_at for job in tap.jobs] == _minutes(utc(2025, 1, 1, 12, 0), 3)


async def test_spring_forward_skips_the_missing_hour() -> None:
    # Europe/Berlin, 2025-03-30 02:00 CET -> 03:00 CEST. Two crons of one task (hence the
    # names) in one scheduler.
    start = utc(2025, 3, 29, 23, 50)  # 00:50 CET
    async with cron_server(start) as (client, _engine, _clock, tap):
        crons = [
            Cron(
                "*/30 * * * *",
                TASK,
                _payload,
                name="half",
                timezone="Europe/Berlin",
                catch_up_window=0,
            ),
            Cron(
                "30 2 * * *",
                TASK,
                _payload,
                name="daily",
                timezone="Europe/Berlin",
                catch_up_window=0,
            ),
        ]
        runner = lambda task_status: run_cron(client, crons, task_status=task_status)  # noqa: E731
        await _run_for(timedelta(days=1, hours=3).total_seconds(), runner)

    half = [j.scheduled_at for j in tap.jobs if j.key.startswith("cron:half:")]
    daily = [j.scheduled_at for j in tap.jobs if j.key.startswith("cron:daily:")]
    # 01:00 and 01:30 CET, then 03:00 CEST (01:00 UTC): no slot in the missing hour.
    assert half[:3] == [utc(2025, 3, 30, 0, 0), utc(2025, 3, 30, 0, 30), utc(2025, 3, 30, 1, 0)]
    assert all(
        s.astimezone(UTC) - p.astimezone(UTC) == timedelta(minutes=30)
        for p, s in itertools.pairwise(half)
    )
    # 02:30 does not exist on the 30th; the next one is on the 31st (00:30 UTC, CEST).
    assert daily == [utc(2025, 3, 31, 0, 30)]


async def test_fall_back_fires_the_repeated_hour_once() -> None:
    # Europe/Berlin, 2025-10-26 03:00 CEST -> 02:00 CET.
    start = utc(2025, 10, 25, 23, 50)  # 01:50 CEST
    async with cron_server(start) as (client, _engine, _clock, tap):
        crons = [
            Cron(
                "*/30 * * * *",
                TASK,
                _payload,
                name="half",
                timezone="Europe/Berlin",
                catch_up_window=0,
            ),
            Cron(
                "30 2 * * *",
                TASK,
                _payload,
                name="daily",
                timezone="Europe/Berlin",
                catch_up_window=0,
            ),
        ]
        runner = lambda task_status: run_cron(client, crons, task_status=task_status)  # noqa: E731
        await _run_for(timedelta(hours=4).total_seconds(), runner)

    half = [j.scheduled_at for j in tap.jobs if j.key.startswith("cron:half:")]
    daily = [j.scheduled_at for j in tap.jobs if j.key.startswith("cron:daily:")]
    assert half == [
        utc(2025, 10, 26, 0, 0),  # 02:00 CEST
        utc(2025, 10, 26, 0, 30),  # 02:30 CEST
        # The repeated 02:00 and 02:30 (CET, 01:00 and 01:30 UTC) do not fire again.
        utc(2025, 10, 26, 2, 0),  # 03:00 CET
        utc(2025, 10, 26, 2, 30),
        utc(2025, 10, 26, 3, 0),
        utc(2025, 10, 26, 3, 30),
    ]
    assert daily == [utc(2025, 10, 26, 0, 30)]
    assert len(tap.new()) == len(tap.jobs)  # each slot sent once by the one scheduler


@pytest.mark.parametrize("catch_up", [1, 3])
async def test_after_a_server_outage_only_the_newest_catch_up_slots_are_enqueued(
    catch_up: int, caplog: pytest.LogCaptureFixture
) -> None:
    start = utc(2025, 1, 1, 0, 0, 30)
    async with cron_server(start) as (client, _engine, _clock, tap):
        tap.outage = (utc(2025, 1, 1, 0, 1, 30), utc(2025, 1, 1, 0, 16, 45))
        cron = Cron("* * * * *", TASK, _payload, catch_up=catch_up, catch_up_window=0)
        with caplog.at_level(logging.WARNING, "sepp_anyio.cron"):
            await _run_for(
                20 * 60, lambda task_status: run_cron(client, cron, task_status=task_status)
            )

    enqueued = [job.scheduled_at for job in tap.jobs]
    assert tap.refused  # the outage was real: slots 00:02 onwards were refused, retried
    recovered = next(job.at for job in tap.jobs if job.at >= tap.outage[1])
    newest_due = recovered.replace(second=0, microsecond=0)
    caught_up = [newest_due - timedelta(minutes=n) for n in reversed(range(catch_up))]
    after = _minutes(newest_due + timedelta(minutes=1), 20)
    expected = [
        utc(2025, 1, 1, 0, 1),
        *caught_up,
        *(s for s in after if s <= utc(2025, 1, 1, 0, 20)),
    ]
    assert enqueued == expected
    # The caught-up slots went out together, when the server came back.
    assert {job.at for job in tap.jobs[1 : 1 + catch_up]} == {recovered}
    assert any("missed and are skipped" in r.getMessage() for r in caplog.records)
    assert any("retrying" in r.getMessage() for r in caplog.records)


async def test_a_wall_clock_jump_is_noticed_within_a_minute_and_caught_up() -> None:
    # The host sleeps for two hours: the wall clock jumps, the loop's clock does not.
    start = utc(2025, 1, 1, 0, 0, 30)
    async with cron_server(start) as (client, _engine, clock, tap):
        cron = Cron("*/10 * * * *", TASK, _payload, catch_up=2, catch_up_window=0)
        async with anyio.create_task_group() as tg:
            await tg.start(run_cron, client, cron)
            await anyio.sleep(60)  # 00:01:30
            clock.jump(2 * 3600)  # 02:01:30
            await anyio.sleep(61)  # at most one capped sleep later: noticed
            noticed = [(job.at, job.scheduled_at) for job in tap.jobs]
            tg.cancel_scope.cancel()
    assert [s for _, s in noticed] == [utc(2025, 1, 1, 1, 50), utc(2025, 1, 1, 2, 0)]
    assert all(at <= utc(2025, 1, 1, 2, 2, 31) for at, _ in noticed)


async def test_a_rejected_job_and_a_failing_factory_skip_their_slot_only(
    caplog: pytest.LogCaptureFixture,
) -> None:
    calls: list[datetime] = []

    def flaky(slot: datetime) -> dict[str, Any]:
        calls.append(slot)
        if len(calls) == 2:
            raise RuntimeError("factory broke")
        return _payload(slot)

    sections = {"server": {"strict_queues": True}, "queues": [{"name": QUEUE}]}
    async with cron_server(utc(2025, 1, 1, 0, 0, 30), **sections) as (client, _e, _c, tap):
        good = Cron("* * * * *", TASK, flaky, name="good", catch_up_window=0)
        nowhere = Cron(
            "* * * * *", JsonTask("undeclared", "tick"), _payload, name="nowhere", catch_up_window=0
        )
        with caplog.at_level(logging.WARNING, "sepp_anyio.cron"):
            await _run_for(
                3 * 60 + 30,
                lambda task_status: run_cron(client, [good, nowhere], task_status=task_status),
            )
    assert [job.scheduled_at for job in tap.jobs] == [utc(2025, 1, 1, 0, 1), utc(2025, 1, 1, 0, 3)]
    assert calls == _minutes(utc(2025, 1, 1, 0, 1), 3)
    messages = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert (
        sum("building the job for cron:good:2025-01-01T00:02:00Z failed" in m for m in messages)
        == 1
    )
    assert sum("the server rejected cron:nowhere:" in m for m in messages) == 3


async def test_the_default_wall_clock_is_the_clients() -> None:
    # With an explicit wall clock 1 h ahead of the server's, slots follow that clock.
    start = utc(2025, 1, 1, 0, 0, 30)
    async with cron_server(start) as (client, _engine, clock, tap):
        cron = Cron("0 * * * *", TASK, _payload, catch_up_window=0)
        ahead = lambda: clock.now() + timedelta(minutes=59)  # noqa: E731
        await _run_for(
            60,
            lambda task_status: run_cron(client, cron, wall_clock=ahead, task_status=task_status),
        )
    assert [job.scheduled_at for job in tap.jobs] == [utc(2025, 1, 1, 1, 0)]


async def test_run_cron_refuses_bad_arguments() -> None:
    async with cron_server(utc(2025, 1, 1)) as (client, _engine, _clock, _tap):
        with pytest.raises(ValueError, match="at least one Cron"):
            await run_cron(client, [])
        with pytest.raises(TypeError, match=r"crons\[1\] must be a Cron"):
            await run_cron(client, [Cron("* * * * *", TASK, _payload), "* * * * *"])  # type: ignore[list-item]
        twins = [Cron("* * * * *", TASK, _payload), Cron("0 * * * *", TASK, _payload)]
        with pytest.raises(ValueError, match="two crons are named 'tick'"):
            await run_cron(client, twins)
