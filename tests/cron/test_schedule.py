"""Cron construction and slot arithmetic (no event loop): expressions, shorthands, time
zones, the daylight-saving rule, catch-up selection, names and idempotency keys."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest

from sepp_anyio._cron import Cron, idempotency_key

from ._support import QUEUE, JsonTask, utc

TASK = JsonTask(QUEUE, "report")
BERLIN = ZoneInfo("Europe/Berlin")
NEW_YORK = ZoneInfo("America/New_York")


def _cron(expr: str, **options: object) -> Cron[object]:
    return Cron(expr, TASK, lambda slot: {"slot": slot.isoformat()}, **options)  # type: ignore[arg-type]


def _slots(cron: Cron[object], after: datetime, count: int) -> list[datetime]:
    out: list[datetime] = []
    for _ in range(count):
        slot = cron.next_slot(after)
        assert slot is not None
        out.append(slot)
        after = slot
    return out


def _walls(slots: list[datetime]) -> list[str]:
    """Each slot as local wall time with its UTC offset, e.g. ``03-30 03:00+02``."""
    return [f"{s:%m-%d %H:%M}{s.utcoffset() // timedelta(hours=1):+03d}" for s in slots]  # type: ignore[operator]


# ---------------------------------------------------------------- expressions


@pytest.mark.parametrize(
    ("expr", "needle"),
    [
        ("", "0 field(s)"),
        ("* * * *", "4 field(s)"),
        ("0 * * * * *", "6 field(s)"),
        ("61 * * * *", "minute"),
        ("* 24 * * *", "hour"),
        ("* * 32 * *", "day-of-month"),
        ("* * * 13 *", "month"),
        ("* * * * 8", "day-of-week"),
        ("*/0 * * * *", "minute"),
        ("0 0 * * MON#6", "day-of-week"),
        ("0 0 30 2 *", "day-of-month"),
        ("hello world a b c", "minute"),
        ("@reboot", "unknown shorthand"),
        ("@fortnightly", "unknown shorthand"),
    ],
)
def test_a_bad_expression_is_a_value_error_naming_the_problem(expr: str, needle: str) -> None:
    with pytest.raises(ValueError, match="cron expression") as info:
        _cron(expr)
    assert needle in str(info.value)
    assert repr(expr) in str(info.value)


def test_an_expression_that_never_fires_is_refused() -> None:
    # Valid fields, but the 1st or 21st of a month ("*/20": both days must match) is never
    # also its last Monday.
    with pytest.raises(ValueError, match="never fires"):
        _cron("0 0 */20 * 1L")


def test_a_non_string_expression_is_a_type_error() -> None:
    with pytest.raises(TypeError, match="must be a str"):
        _cron(5)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("macro", "expanded"),
    [
        ("@hourly", "0 * * * *"),
        ("@daily", "0 0 * * *"),
        ("@midnight", "0 0 * * *"),
        ("@weekly", "0 0 * * 0"),
        ("@monthly", "0 0 1 * *"),
        ("@yearly", "0 0 1 1 *"),
        ("@ANNUALLY", "0 0 1 1 *"),
    ],
)
def test_shorthands_expand(macro: str, expanded: str) -> None:
    assert _cron(macro).expr == expanded


def test_whitespace_is_normalised_and_names_are_accepted() -> None:
    cron = _cron("  0   9 *  *   mon-fri ")
    assert cron.expr == "0 9 * * mon-fri"
    # 2025-01-03 is a Friday: the next slots skip the weekend.
    assert _walls(_slots(cron, utc(2025, 1, 3, 12), 2)) == ["01-06 09:00+00", "01-07 09:00+00"]


# ---------------------------------------------------------------- arguments


def test_name_defaults_to_the_tasks_job_type() -> None:
    assert _cron("* * * * *").name == "report"
    assert _cron("* * * * *", name="nightly").name == "nightly"


@pytest.mark.parametrize("name", ["", "tab\there"])
def test_a_bad_name_is_refused(name: str) -> None:
    with pytest.raises(ValueError, match="name must be non-empty and printable"):
        _cron("* * * * *", name=name)


def test_a_task_with_an_empty_job_type_is_refused_for_the_default_name() -> None:
    with pytest.raises(ValueError, match=r"task\.job_type \(the default name\)"):
        Cron("* * * * *", JsonTask(QUEUE, ""), lambda slot: 1)


@pytest.mark.parametrize(
    ("catch_up", "error"), [(-1, ValueError), (True, TypeError), (1.5, TypeError)]
)
def test_catch_up_must_be_a_non_negative_int(catch_up: object, error: type[Exception]) -> None:
    with pytest.raises(error, match="catch_up"):
        _cron("* * * * *", catch_up=catch_up)


def test_catch_up_zero_is_allowed() -> None:
    assert _cron("* * * * *", catch_up=0).catch_up == 0


@pytest.mark.parametrize(
    ("window", "error", "message"),
    [
        (-1.0, ValueError, "catch_up_window must be >= 0 seconds"),
        (timedelta(seconds=-1), ValueError, "catch_up_window must be >= 0 seconds"),
        (math.inf, ValueError, "catch_up_window must be a finite number of seconds"),
        (math.nan, ValueError, "catch_up_window must be a finite number of seconds"),
        (365 * 86400 + 1, ValueError, r"catch_up_window must be at most 31536000 seconds"),
        (timedelta(days=400), ValueError, r"at most 31536000 seconds \(365 days\)"),
        ("1h", TypeError, "catch_up_window must be a number of seconds"),
        (True, TypeError, "catch_up_window must be a number of seconds"),
    ],
)
def test_catch_up_window_must_be_finite_and_not_negative(
    window: object, error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        _cron("* * * * *", catch_up_window=window)


def test_catch_up_window_takes_seconds_or_a_timedelta() -> None:
    assert _cron("* * * * *").catch_up_window == 3600.0
    assert _cron("* * * * *", catch_up_window=0).catch_up_window == 0.0
    assert _cron("* * * * *", catch_up_window=timedelta(minutes=90)).catch_up_window == 5400.0
    assert _cron("* * * * *", catch_up_window=timedelta(days=365)).catch_up_window == 31536000
    assert "catch_up_window=5400.0" in repr(_cron("* * * * *", catch_up_window=5400))


def test_an_unknown_time_zone_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="'Mars/Olympus' is not a known IANA time zone"):
        _cron("* * * * *", timezone="Mars/Olympus")
    with pytest.raises(TypeError, match="timezone"):
        _cron("* * * * *", timezone=3)


def test_time_zones_by_name_and_by_tzinfo() -> None:
    assert _cron("* * * * *").timezone is UTC
    assert _cron("* * * * *", timezone="Europe/Berlin").timezone == BERLIN
    plus_two = timezone(timedelta(hours=2))
    cron = _cron("0 9 * * *", timezone=plus_two)
    assert _slots(cron, utc(2025, 1, 1), 1) == [utc(2025, 1, 1, 7)]


# ---------------------------------------------------------------- keys and requests


def test_the_idempotency_key_is_the_slot_in_utc_to_the_second() -> None:
    slot = datetime(2025, 3, 30, 3, 0, tzinfo=BERLIN)  # 01:00 UTC
    assert idempotency_key("report", slot) == "cron:report:2025-03-30T01:00:00Z"
    # Fractions are never part of the key; the same instant in any zone gives the same key.
    assert idempotency_key("r", utc(2025, 1, 2, 3, 4, 5).replace(microsecond=999_999)) == (
        "cron:r:2025-01-02T03:04:05Z"
    )
    assert idempotency_key("r", utc(2025, 6, 1, 12).astimezone(NEW_YORK)) == (
        "cron:r:2025-06-01T12:00:00Z"
    )


def test_the_request_carries_the_slot_the_key_and_the_factorys_payload() -> None:
    seen: list[datetime] = []

    def factory(slot: datetime) -> dict[str, str]:
        seen.append(slot)
        return {"day": f"{slot:%Y-%m-%d}"}

    cron = Cron("30 8 * * *", TASK, factory, name="daily", timezone="Europe/Berlin")
    [slot] = _slots(cron, utc(2025, 7, 1), 1)
    request = cron.request(slot)
    assert seen == [slot]
    assert slot.tzinfo == BERLIN and slot.utcoffset() == timedelta(hours=2)
    assert request.scheduled_at == utc(2025, 7, 1, 6, 30)
    assert request.idempotency_key == "cron:daily:2025-07-01T06:30:00Z"
    assert (request.queue, request.job_type) == (QUEUE, "report")
    assert request.payload is not None and request.payload.json() == {"day": "2025-07-01"}


# ---------------------------------------------------------------- daylight saving


def test_spring_forward_skips_the_wall_times_that_do_not_exist_berlin() -> None:
    # 2025-03-30 02:00 CET -> 03:00 CEST: 02:00-02:59 does not exist.
    half_hourly = _cron("*/30 * * * *", timezone="Europe/Berlin")
    assert _walls(_slots(half_hourly, utc(2025, 3, 29, 23, 40), 4)) == [
        "03-30 01:00+01",
        "03-30 01:30+01",
        "03-30 03:00+02",
        "03-30 03:30+02",
    ]
    daily = _cron("30 2 * * *", timezone="Europe/Berlin")
    assert _walls(_slots(daily, utc(2025, 3, 28), 3)) == [
        "03-28 02:30+01",
        "03-29 02:30+01",
        "03-31 02:30+02",
    ]


def test_fall_back_fires_a_repeated_wall_time_once_berlin() -> None:
    # 2025-10-26 03:00 CEST -> 02:00 CET: 02:00-02:59 happens twice; each fires once, first.
    half_hourly = _cron("*/30 * * * *", timezone="Europe/Berlin")
    slots = _slots(half_hourly, utc(2025, 10, 25, 23, 10), 4)
    assert _walls(slots) == ["10-26 01:30+02", "10-26 02:00+02", "10-26 02:30+02", "10-26 03:00+01"]
    # The repeated hour has no slots: 02:30 CEST (00:30 UTC) is followed by 02:00 UTC.
    assert slots[3].astimezone(UTC) - slots[2].astimezone(UTC) == timedelta(minutes=90)
    daily = _cron("30 2 * * *", timezone="Europe/Berlin")
    assert _walls(_slots(daily, utc(2025, 10, 25, 12), 2)) == ["10-26 02:30+02", "10-27 02:30+01"]


def test_new_york_transitions() -> None:
    hourly = _cron("15 * * * *", timezone="America/New_York")
    # 2025-03-09 02:00 EST -> 03:00 EDT.
    assert _walls(_slots(hourly, utc(2025, 3, 9, 6), 3)) == [
        "03-09 01:15-05",
        "03-09 03:15-04",
        "03-09 04:15-04",
    ]
    # 2025-11-02 02:00 EDT -> 01:00 EST: 01:15 fires once (EDT); 02:15 EST comes next.
    assert _walls(_slots(hourly, utc(2025, 11, 2, 4), 3)) == [
        "11-02 00:15-04",
        "11-02 01:15-04",
        "11-02 02:15-05",
    ]


def test_asking_from_inside_the_repeated_hour_neither_repeats_nor_loses_slots() -> None:
    cron = _cron("*/15 * * * *", timezone="Europe/Berlin", catch_up=10)
    second_pass = utc(2025, 10, 26, 1, 20)  # 02:20 CET, the repeated 02:20
    assert second_pass.astimezone(BERLIN).fold == 1
    # Next: not 02:30 (it already fired, at 00:30 UTC) but 03:00 CET.
    assert cron.next_slot(second_pass) == utc(2025, 10, 26, 2, 0)
    # Due since 00:20 UTC: 02:30 and 02:45 CEST, whose wall times lie *after* 02:20.
    due, more = cron.due_slots(utc(2025, 10, 26, 0, 20), second_pass)
    assert [s.astimezone(UTC) for s in due] == [utc(2025, 10, 26, 0, 30), utc(2025, 10, 26, 0, 45)]
    assert not more


# ---------------------------------------------------------------- catch-up selection


def test_due_slots_are_the_newest_catch_up_oldest_first() -> None:
    cron = _cron("*/10 * * * *", catch_up=3)
    due, more = cron.due_slots(utc(2025, 1, 1, 0, 0), utc(2025, 1, 1, 2, 5))
    assert due == [utc(2025, 1, 1, 1, 40), utc(2025, 1, 1, 1, 50), utc(2025, 1, 1, 2, 0)]
    assert more
    # Exactly catch_up due: nothing skipped. The bounds: after is excluded, now included.
    due, more = cron.due_slots(utc(2025, 1, 1, 0, 0), utc(2025, 1, 1, 0, 30))
    assert due == [utc(2025, 1, 1, 0, 10), utc(2025, 1, 1, 0, 20), utc(2025, 1, 1, 0, 30)]
    assert not more
    assert cron.due_slots(utc(2025, 1, 1, 0, 30), utc(2025, 1, 1, 0, 39)) == ([], False)


def test_due_slots_after_a_year_of_downtime_take_constant_work() -> None:
    cron = _cron("* * * * *", catch_up=2)
    due, more = cron.due_slots(utc(2024, 1, 1), utc(2025, 1, 1, 0, 0, 30))
    assert due == [utc(2024, 12, 31, 23, 59), utc(2025, 1, 1, 0, 0)]
    assert more


def test_due_slots_skip_a_dst_gap() -> None:
    cron = _cron("30 * * * *", timezone="Europe/Berlin", catch_up=2)
    # At 03:40 CEST on 2025-03-30 the two newest slots are 03:30 CEST and 01:30 CET.
    due, more = cron.due_slots(utc(2025, 3, 29, 12), utc(2025, 3, 30, 1, 40))
    assert _walls(due) == ["03-30 01:30+01", "03-30 03:30+02"]
    assert more
