"""Why cronsim refused a cron expression, in words that name the field and its range.

cronsim (the expression library) decides what is valid; its error only says ``Bad minute``.
This module explains a refusal after the fact, and never accepts or refuses anything itself:

1. which field is wrong is found with cronsim too, by parsing each field on its own
   (the other four ``*``); none alone is wrong when the day-of-month names no day of the
   months listed (``0 0 30 2 *``), a refusal of the combination;
2. what is wrong with that field is found by walking its list items with the grammar cronsim
   documents (numbers or names in range, ``a-b`` ranges, ``/n`` steps, ``L``, ``LW``, ``5L``,
   ``MON#2``), so the message can say ``minute field '61' is out of range (0-59)``.

If the walk finds nothing (a form this walk does not know but cronsim refuses), the message
still names the field, quotes it and gives its range and the forms it takes.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from cronsim import CronSim, CronSimError

__all__ = ["expression_problem"]

_MONTHS = ("JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC")
_DAYS = ("SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT")
#: The most days each month can have (February's 29), for the combination check.
_MONTH_DAYS = (31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)
_PROBE = datetime(2000, 1, 1)


@dataclass(frozen=True)
class _Spec:
    label: str
    lo: int
    hi: int
    names: tuple[str, ...] = ()
    #: The extra forms the field takes, for the catch-all message.
    extra: str = ""

    @property
    def range(self) -> str:
        text = f"{self.lo}-{self.hi}"
        if self.names:
            text += f" or {self.names[0]}-{self.names[-1]}"
        if self.label == "day-of-week":
            text += "; 0 and 7 are Sunday"
        return text

    def value(self, text: str) -> int | None:
        """The number ``text`` stands for (names case-insensitively), or None."""
        if text.upper() in self.names:
            return self.names.index(text.upper()) + (1 if self.label == "month" else 0)
        return int(text) if _number(text) else None


_FIELDS = (
    _Spec("minute", 0, 59),
    _Spec("hour", 0, 23),
    _Spec("day-of-month", 1, 31, extra=", L (the last day), LW (the last weekday)"),
    _Spec("month", 1, 12, _MONTHS),
    _Spec("day-of-week", 0, 7, _DAYS, extra=", 5L (the last Friday), MON#2 (the 2nd Monday)"),
)


class _Problem(Exception):
    """What is wrong with one list item (internal to the walk)."""


def _refused(expr: str) -> bool:
    try:
        CronSim(expr, _PROBE)
    except CronSimError:
        return True
    return False


def expression_problem(fields: list[str], refusal: str) -> str:
    """Why cronsim refused the five ``fields``, as a phrase naming the field.

    For example ``minute field '61' is out of range (0-59)``. Only called once cronsim has
    refused the expression, with its error text as ``refusal`` (quoted only if no better
    explanation is found).
    """
    for index, spec in enumerate(_FIELDS):
        alone = ["*"] * 5
        alone[index] = fields[index]
        if _refused(" ".join(alone)):
            return _field_problem(spec, fields[index])
    # Each field parses alone, so the combination is refused: cronsim checks that a day of
    # the month exists in at least one of the months when both must match.
    days, months = _values(_FIELDS[2], fields[2]), _values(_FIELDS[3], fields[3])
    if days and months:
        longest = max(_MONTH_DAYS[month - 1] for month in months)
        if min(days) > longest:
            return (
                f"day-of-month field {fields[2]!r} names no day that the months of month "
                f"field {fields[3]!r} have (the longest has {longest} days)"
            )
    return f"the fields are valid alone but not together ({refusal})"


def _number(text: str) -> bool:
    # ASCII digits only: str.isdigit also takes '²', which int() refuses.
    return bool(text) and all(ch in "0123456789" for ch in text)


def _values(spec: _Spec, field: str) -> set[int]:
    """The values a field that parses alone lists; empty if it uses a form other than
    numbers, names, ``*``, ranges and steps (``L``...), which the caller then leaves be."""
    found: set[int] = set()
    for item in field.split(","):
        body, _, step_text = item.partition("/")
        step = int(step_text) if _number(step_text) else 1
        if body == "*":
            bounds: tuple[int | None, int | None] = (spec.lo, spec.hi)
        elif "-" in body:
            start, end = body.split("-", 1)
            bounds = (spec.value(start), spec.value(end))
        else:
            first = spec.value(body)
            bounds = (first, spec.hi if step_text else first)
        lo, hi = bounds
        if lo is None or hi is None:
            return set()
        found.update(range(lo, hi + 1, max(step, 1)))
    return found


def _field_problem(spec: _Spec, field: str) -> str:
    head = f"{spec.label} field {field!r}"
    for item in field.split(","):
        try:
            _check_item(spec, item)
        except _Problem as exc:
            detail = str(exc)
            # A lone value out of range reads best without repeating itself.
            if detail == f"{field} is out of range ({spec.range})":
                return f"{head} is out of range ({spec.range})"
            return f"{head}: {detail}"
    return (
        f"{head} is not valid: it takes values {spec.range}, '*', ranges 'a-b', steps "
        f"'*/n' and 'a-b/n' and lists 'a,b'{spec.extra}"
    )


def _check_item(spec: _Spec, item: str) -> None:
    """Raise :class:`_Problem` saying what is wrong with one list item (as cronsim reads
    it: case-insensitively, ``L`` and ``#`` first, then ``/``, then ``-``)."""
    upper = item.upper()
    if item == "":
        raise _Problem("a list item is empty (two commas in a row, or one at an end)")
    if item == "*":
        return
    if spec.label == "day-of-week" and "L" in upper:
        if not upper.endswith("L") or not _number(item[:-1]):
            raise _Problem(
                "'L' in this field follows a day number, as in 5L (the last Friday of the month)"
            )
        _check_value(spec, item[:-1])
        return
    if spec.label == "day-of-week" and "#" in item:
        day, nth = item.split("#", 1)
        if not _number(nth) or not 1 <= int(nth) <= 5:
            raise _Problem(f"the week after '#' must be 1-5, got {nth!r}")
        _check_value(spec, day)
        return
    if "/" in item:
        body, step = item.split("/", 1)
        if not _number(step):
            raise _Problem(f"the step after '/' must be a number, got {step!r}")
        if int(step) == 0:
            raise _Problem("the step after '/' must be at least 1")
        _check_item(spec, body)
        return
    if "-" in item:
        start, end = item.split("-", 1)
        if not start or not end:
            raise _Problem(
                f"the range {item!r} needs a value on each side of '-' (values are "
                f"{spec.range}; there are no negative ones)"
            )
        low = _check_value(spec, start)
        high = _check_value(spec, end)
        if high < low:
            raise _Problem(
                f"the range {item!r} runs backwards; write it low-high "
                f"(a range cannot wrap around: use a list such as '{end},{start}')"
            )
        return
    if spec.label == "day-of-month" and upper in ("L", "LW"):
        return
    _check_value(spec, item)


def _check_value(spec: _Spec, text: str) -> int:
    value = spec.value(text)
    if value is None:
        kind = "a number"
        if spec.names:
            kind += f" or a {'month' if spec.label == 'month' else 'day'} name"
        forms = f"; the field also takes {spec.extra.lstrip(', ')}" if spec.extra else ""
        raise _Problem(f"{text!r} is not {kind} ({spec.range}){forms}")
    if not spec.lo <= value <= spec.hi:
        raise _Problem(f"{text} is out of range ({spec.range})")
    return value
