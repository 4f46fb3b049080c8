"""Cron construction and slot arithmetic (no event loop): expressions, shorthands, time
zones, the daylight-saving rule, catch-up selection, names and idempotency keys."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest

from sepp_anyio import InvalidArgumentError, InvalidArgumentTypeError, SeppError
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


#: Each field's valid range, as the messages give it.
MINUTE, HOUR, DOM, MONTH = "(0-59)", "(0-23)", "(1-31)", "(1-12 or JAN-DEC)"
DOW = "(0-7 or SUN-SAT; 0 and 7 are Sunday)"
DOM_FORMS = "; the field also takes L (the last day), LW (the last weekday)"


@pytest.mark.parametrize(
    ("expr", "problem"),
    [
        # Each field, out of range above and below.
        ("61 * * * *", f"minute field '61' is out of range {MINUTE}"),
        ("60 * * * *", f"minute field '60' is out of range {MINUTE}"),
        ("* 24 * * *", f"hour field '24' is out of range {HOUR}"),
        ("* * 32 * *", f"day-of-month field '32' is out of range {DOM}"),
        ("* * 0 * *", f"day-of-month field '0' is out of range {DOM}"),
        ("* * * 13 *", f"month field '13' is out of range {MONTH}"),
        ("* * * 0 *", f"month field '0' is out of range {MONTH}"),
        ("* * * * 8", f"day-of-week field '8' is out of range {DOW}"),
        # Inside lists, ranges and the special forms.
        ("1,61 * * * *", f"minute field '1,61': 61 is out of range {MINUTE}"),
        ("0 1-25 * * *", f"hour field '1-25': 25 is out of range {HOUR}"),
        ("0 0 1-32 * *", f"day-of-month field '1-32': 32 is out of range {DOM}"),
        ("0 0 * * 0-8", f"day-of-week field '0-8': 8 is out of range {DOW}"),
        ("0 0 * * 8L", f"day-of-week field '8L': 8 is out of range {DOW}"),
        # Not a number, or not a name.
        ("hello world a b c", f"minute field 'hello': 'hello' is not a number {MINUTE}"),
        ("0 x * * *", f"hour field 'x': 'x' is not a number {HOUR}"),
        ("0 0 ? * *", f"day-of-month field '?': '?' is not a number {DOM}{DOM_FORMS}"),
        ("0 0 15W * *", f"day-of-month field '15W': '15W' is not a number {DOM}{DOM_FORMS}"),
        ("* * * FOO *", f"month field 'FOO': 'FOO' is not a number or a month name {MONTH}"),
        (
            "* * * * funday",
            f"day-of-week field 'funday': 'funday' is not a number or a day name {DOW}"
            "; the field also takes 5L (the last Friday), MON#2 (the 2nd Monday)",
        ),
        # Steps, ranges, lists and the day-of-week forms.
        ("*/0 * * * *", "minute field '*/0': the step after '/' must be at least 1"),
        ("*/x * * * *", "minute field '*/x': the step after '/' must be a number, got 'x'"),
        (
            "5-1 * * * *",
            "minute field '5-1': the range '5-1' runs backwards; write it low-high (a range "
            "cannot wrap around: use a list such as '1,5')",
        ),
        (
            "-1 * * * *",
            "minute field '-1': the range '-1' needs a value on each side of '-' (values are "
            "0-59; there are no negative ones)",
        ),
        (
            "1,,2 * * * *",
            "minute field '1,,2': a list item is empty (two commas in a row, or one at an end)",
        ),
        ("0 0 * * MON#6", "day-of-week field 'MON#6': the week after '#' must be 1-5, got '6'"),
        (
            "0 0 * * L",
            "day-of-week field 'L': 'L' in this field follows a day number, as in 5L (the last "
            "Friday of the month)",
        ),
        # Fields valid alone, refused together.
        (
            "0 0 30 2 *",
            "day-of-month field '30' names no day that the months of month field '2' have "
            "(the longest has 29 days)",
        ),
        (
            "0 0 31 apr,jun *",
            "day-of-month field '31' names no day that the months of month field 'apr,jun' "
            "have (the longest has 30 days)",
        ),
        # The shape of the expression.
        ("", "has 0 field(s); expected 5 (minute hour day-of-month month day-of-week)"),
        ("* * * *", "has 4 field(s); expected 5 (minute hour day-of-month month day-of-week)"),
        (
            "0 * * * * *",
            "has 6 field(s); expected 5 (minute hour day-of-month month day-of-week)",
        ),
        (
            "@reboot",
            "unknown shorthand (known: @annually, @daily, @hourly, @midnight, "
            "@monthly, @weekly, @yearly)",
        ),
        (
            "@fortnightly",
            "unknown shorthand (known: @annually, @daily, @hourly, @midnight, "
            "@monthly, @weekly, @yearly)",
        ),
    ],
)
def test_a_bad_expression_names_the_field_and_its_range(expr: str, problem: str) -> None:
    with pytest.raises(InvalidArgumentError) as info:
        _cron(expr)
    assert isinstance(info.value, ValueError) and isinstance(info.value, SeppError)
    separator = " " if problem.startswith("has ") else ": "
    assert str(info.value) == f"cron expression {expr!r}{separator}{problem}"


@pytest.mark.parametrize(
    "expr",
    [
        "0 0 L * *",
        "0 0 LW * *",
        "0 0 * * 5L",
        "0 0 * * MON#2",
        "0 0 * * 7",
        "*/61 * * * *",
        "0 0 * jan-dec sun-sat",
        "0 0 30 2 MON",
    ],
)
def test_the_forms_cronsim_takes_are_still_taken(expr: str) -> None:
    assert _cron(expr).expr == expr


def test_an_expression_that_never_fires_is_refused() -> None:
    # Valid fields, but the 1st or 21st of a month ("*/20": both days must match) is never
    # also its last Monday.
    with pytest.raises(InvalidArgumentError, match="never fires"):
        _cron("0 0 */20 * 1L")


def test_a_non_string_expression_is_a_type_error() -> None:
    with pytest.raises(InvalidArgumentTypeError, match="must be a str"):
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
    with pytest.raises(InvalidArgumentError, match="name must be non-empty and printable"):
        _cron("* * * * *", name=name)


def test_a_task_with_an_empty_job_type_is_refused_for_the_default_name() -> None:
    with pytest.raises(InvalidArgumentError, match=r"task\.job_type \(the default name\)"):
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
    with pytest.raises(InvalidArgumentError, match="'Mars/Olympus' is not a known IANA time zone"):
        _cron("* * * * *", timezone="Mars/Olympus")
    with pytest.raises(InvalidArgumentTypeError, match="timezone"):
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
