"""When a cron expression fires, in a time zone, with our daylight-saving rule.

The expression library only ever sees *naive local wall-clock* times, so it does plain
calendar matching and none of its own DST handling. This module turns each matching wall
time into an instant:

* a wall time that does not exist (the hour skipped when clocks go forward) is **skipped**;
* a wall time that exists twice (the hour repeated when clocks go back) fires **once**, at its
  first occurrence (``fold=0``), and the repeated hour itself has no slots.

That rule keeps the slots strictly increasing in real time, which the scheduler relies on
(see :meth:`Schedule.due`). It differs on purpose from Debian cron's (which runs the skipped
jobs right after the jump and repeats wildcard jobs in the repeated hour): the rule here is
the same for every expression, and a job that says ``30 2 * * *`` never runs at 03:00.
"""

from __future__ import annotations

import zoneinfo
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta, tzinfo

from cronsim import CronSim, CronSimError

from .._model._error_root import InvalidArgumentError, InvalidArgumentTypeError
from ._fields import expression_problem

__all__ = ["Schedule", "resolve_timezone"]

#: The ``@`` shorthands of Vixie cron, as five-field expressions (``@reboot`` has no slots).
_MACROS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
#: Where the "does it ever fire?" check starts; any fixed instant works (the library searches
#: 50 years ahead, longer than any real period such as "Monday the 29th of February").
_PROBE_START = datetime(2000, 1, 1)
#: Bound on wall times passed over in one search (skipped DST gaps, candidates in a repeated
#: hour): far more than any real expression needs, so that a pathological one cannot spin.
_MAX_SKIPPED = 10_000


def resolve_timezone(timezone: str | tzinfo) -> tzinfo:
    """``timezone`` as a ``tzinfo``: an IANA name (``"Europe/Berlin"``) or a tzinfo.

    Raises:
        InvalidArgumentError: (a ``ValueError``) an unknown zone name, or an empty one.
        InvalidArgumentTypeError: (a ``TypeError``) neither a str nor a tzinfo.
    """
    if isinstance(timezone, tzinfo):
        return timezone
    if not isinstance(timezone, str):
        raise InvalidArgumentTypeError(
            f"timezone must be an IANA zone name or a tzinfo, got {timezone!r}"
        )
    if timezone.upper() == "UTC":
        return UTC
    try:
        return zoneinfo.ZoneInfo(timezone)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError) as exc:
        raise InvalidArgumentError(f"timezone {timezone!r} is not a known IANA time zone") from exc


def _normalise(expr: object) -> str:
    if not isinstance(expr, str):
        raise InvalidArgumentTypeError(
            f"a cron expression must be a str, got {type(expr).__name__}"
        )
    text = " ".join(expr.split())
    if text.startswith("@"):
        try:
            return _MACROS[text.lower()]
        except KeyError:
            known = ", ".join(sorted(_MACROS))
            raise InvalidArgumentError(
                f"cron expression {expr!r}: unknown shorthand (known: {known})"
            ) from None
    fields = text.split(" ") if text else []
    if len(fields) != 5:
        raise InvalidArgumentError(
            f"cron expression {expr!r} has {len(fields)} field(s); expected 5"
            " (minute hour day-of-month month day-of-week)"
        )
    return text


class Schedule:
    """A parsed five-field cron expression evaluated in one time zone.

    Args:
        expr: ``minute hour day-of-month month day-of-week`` (names, ranges, steps, lists,
            ``L``, ``LW``, ``5L`` and ``MON#2`` as in cronsim) or an ``@hourly``-style
            shorthand.
        timezone: the zone whose wall clock the expression reads.

    Raises:
        InvalidArgumentError: (a ``ValueError``) a malformed expression (the message names
            the field and its valid range, e.g. ``minute field '61' is out of range
            (0-59)``), one that never fires, or an unknown zone.
        InvalidArgumentTypeError: (a ``TypeError``) an expression or zone of the wrong type.
    """

    __slots__ = ("expr", "tz")

    def __init__(self, expr: str, timezone: str | tzinfo = "UTC") -> None:
        text = _normalise(expr)
        try:
            probe = CronSim(text, _PROBE_START)
        except CronSimError as exc:
            problem = expression_problem(text.split(" "), str(exc))
            raise InvalidArgumentError(f"cron expression {expr!r}: {problem}") from None
        if next(probe, None) is None:
            raise InvalidArgumentError(f"cron expression {expr!r} never fires")
        self.expr = text
        self.tz = resolve_timezone(timezone)

    def __repr__(self) -> str:
        return f"Schedule({self.expr!r}, {self.tz!s})"

    # ------------------------------------------------------------ wall time <-> instants

    def _local(self, instant: datetime) -> datetime:
        """The naive wall time at ``instant`` in this zone."""
        return instant.astimezone(self.tz).replace(tzinfo=None)

    def _slot(self, wall: datetime) -> datetime | None:
        """The instant of wall time ``wall``: its first occurrence, or None if it does not
        exist in this zone (a DST gap). Aware, in this zone, with ``fold`` set."""
        first = wall.replace(tzinfo=self.tz, fold=0)
        local = first.astimezone(UTC).astimezone(self.tz)
        if local.replace(tzinfo=None) != wall:
            return None
        return local

    def _walls(self, start: datetime, *, reverse: bool) -> Iterator[datetime]:
        """Matching wall times after (or before) ``start``, a naive wall time."""
        it = CronSim(self.expr, start.replace(microsecond=0), reverse=reverse)
        for _ in range(_MAX_SKIPPED):
            wall = next(it, None)
            if wall is None:
                return
            yield wall

    # ------------------------------------------------------------ queries

    def next_after(self, after: datetime) -> datetime | None:
        """The first slot strictly after the instant ``after``, or None if there is none.

        Returns an aware datetime in the schedule's zone.
        """
        # Compared in UTC: two datetimes with the same tzinfo compare by wall time and
        # ignore ``fold``, which is wrong in a repeated hour.
        after = after.astimezone(UTC)
        # Slot instants increase with their wall times, so none after `after` has a wall
        # time before `after`'s; candidates up to `after` (possible in a repeated hour,
        # whose wall times fire at their first occurrence) are passed over.
        for wall in self._walls(self._local(after), reverse=False):
            slot = self._slot(wall)
            if slot is not None and slot.astimezone(UTC) > after:
                return slot
        return None

    def due(self, after: datetime, now: datetime, limit: int) -> tuple[list[datetime], bool]:
        """The newest ``limit`` slots in ``(after, now]``, oldest first, and whether older
        ones in that range were left out.

        Walks backwards from ``now``, so the cost is ``limit`` slots however long the
        range (a scheduler back from a month of downtime does not scan a month of minutes).
        """
        after = after.astimezone(UTC)  # compared in UTC (see next_after)
        now = now.astimezone(UTC)
        local = now.astimezone(self.tz)
        # In a repeated hour (fold=1) the wall times up to one DST shift ahead already
        # fired, at their first occurrence: start the backward walk past them.
        ahead = timedelta(0)
        if local.fold:
            first = local.replace(fold=0).utcoffset()
            second = local.utcoffset()
            if first is not None and second is not None and first > second:
                ahead = first - second
        start = local.replace(tzinfo=None) + ahead + timedelta(seconds=1)
        found: list[datetime] = []
        more = False
        for wall in self._walls(start, reverse=True):
            slot = self._slot(wall)
            if slot is None or slot.astimezone(UTC) > now:
                continue
            if slot.astimezone(UTC) <= after:
                break
            if len(found) == limit:
                more = True
                break
            found.append(slot)
        found.reverse()
        return found, more
