"""Expiry on the producer side: ``EnqueueRequest(expires_at=)`` and ``Task(expires=)`` write
the deadline into ``custom["sepp.expires_at"]`` (int milliseconds since the epoch) and check
it; ``Task.enqueue`` counts ``expires`` on the client's clock from when the job is due."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta, timezone

import pytest

from sepp_anyio import EnqueueRequest, InvalidArgumentError, InvalidArgumentTypeError, Task
from sepp_anyio._client import wall_clock_of
from sepp_anyio.testing import open_in_memory_client

KEY = "sepp.expires_at"
INSTANT = datetime(2030, 1, 2, 3, 4, 5, 678_901, tzinfo=UTC)
#: INSTANT in ms since the epoch (its microseconds rounded down).
INSTANT_MS = 1_893_553_445_678


def _ms(request: EnqueueRequest) -> int:
    """The request's deadline, which must be an int."""
    value = request.custom[KEY]
    assert isinstance(value, int) and not isinstance(value, bool)
    return value


def test_expires_at_is_stored_in_custom_as_int_milliseconds() -> None:
    request = EnqueueRequest("q", "t", expires_at=INSTANT, custom={"tenant": "a"})
    assert request.custom == {"tenant": "a", KEY: INSTANT_MS}
    assert request.expires_at == INSTANT.replace(microsecond=678_000)
    assert isinstance(request.custom[KEY], int)


def test_a_naive_expires_at_is_utc_and_another_zone_is_converted() -> None:
    naive = EnqueueRequest("q", "t", expires_at=INSTANT.replace(tzinfo=None))
    assert naive.custom[KEY] == INSTANT_MS
    plus_two = INSTANT.astimezone(timezone(timedelta(hours=2)))
    assert EnqueueRequest("q", "t", expires_at=plus_two).custom[KEY] == INSTANT_MS


def test_a_copy_of_a_request_keeps_its_deadline_or_takes_a_new_one() -> None:
    request = EnqueueRequest("q", "t", expires_at=INSTANT)
    copy = dataclasses.replace(request, priority=3)
    assert copy.custom[KEY] == INSTANT_MS and copy.priority == 3
    later = dataclasses.replace(request, expires_at=INSTANT + timedelta(seconds=1))
    assert later.custom[KEY] == INSTANT_MS + 1_000


def test_expires_at_wins_over_the_custom_field() -> None:
    request = EnqueueRequest("q", "t", expires_at=INSTANT, custom={KEY: 1, "k": "v"})
    assert request.custom == {KEY: INSTANT_MS, "k": "v"}


def test_the_custom_field_alone_is_a_deadline_too() -> None:
    """What a producer in another language does; nothing to check beyond custom's rules."""
    request = EnqueueRequest("q", "t", custom={KEY: INSTANT_MS})
    assert request.custom[KEY] == INSTANT_MS and request.expires_at is None


def test_bad_expires_at_values_are_refused_naming_the_field() -> None:
    with pytest.raises(InvalidArgumentTypeError, match="expires_at must be a datetime"):
        EnqueueRequest("q", "t", expires_at=1_893_553_445_678)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match=r"expires_at .* must be after scheduled_at"):
        EnqueueRequest("q", "t", scheduled_at=INSTANT, expires_at=INSTANT)


def test_task_expires_is_checked_and_exposed() -> None:
    assert Task("q", "t", int, expires=30.0).expires == 30.0
    assert Task("q", "t", int).expires is None
    with pytest.raises(InvalidArgumentError, match="Task expires"):
        Task("q", "t", int, expires=0.0)
    with pytest.raises(InvalidArgumentTypeError, match="Task expires"):
        Task("q", "t", int, expires="1h")  # type: ignore[call-overload]


def test_task_request_counts_expires_from_when_the_job_is_due() -> None:
    task = Task("q", "t", int, expires=60.0)
    before = datetime.now(UTC)
    now_ms = _ms(task.request(1))
    after = datetime.now(UTC)
    assert int((before + timedelta(seconds=60)).timestamp() * 1000) - 1 <= now_ms
    assert now_ms <= int((after + timedelta(seconds=60)).timestamp() * 1000)
    scheduled = task.request(1, scheduled_at=INSTANT).custom[KEY]
    assert scheduled == INSTANT_MS + 60_000
    delayed = _ms(task.request(1, delay=3600.0))
    assert delayed - now_ms == pytest.approx(3_600_000, abs=1_000)
    # An explicit expires_at wins over the task's.
    explicit = task.request(1, scheduled_at=INSTANT, expires_at=INSTANT + timedelta(seconds=1))
    assert explicit.custom[KEY] == INSTANT_MS + 1_000
    # A task without expires writes nothing.
    assert KEY not in Task("q", "t", int).request(1).custom


def test_task_request_with_a_bad_schedule_reports_the_schedule() -> None:
    task = Task("q", "t", int, expires=60.0)
    with pytest.raises(InvalidArgumentError, match="delay"):
        task.request(1, delay=-1.0)
    with pytest.raises(InvalidArgumentTypeError, match="scheduled_at"):
        task.request(1, scheduled_at="tomorrow")  # type: ignore[arg-type]


@pytest.mark.anyio
async def test_task_enqueue_reads_the_clients_clock() -> None:
    """The in-process server's clock (virtual time in the worker tests) is the client's: the
    deadline is its now plus ``expires``, whatever the host's clock says."""
    task = Task("q", "t", int, expires=5.0)
    async with open_in_memory_client() as (client, _):
        now = wall_clock_of(client)()
        ack = await task.enqueue(client, 1)
        [job] = await client.reserve(["q"], lease=5.0, wait=0.1)
        assert job.ctx.id == ack.job_id
        deadline = job.ctx.custom[KEY]
        assert isinstance(deadline, int)
        expected = int((now + timedelta(seconds=5)).timestamp() * 1000)
        assert expected - 1 <= deadline <= expected + 50
        await client.ack(job.ctx)
