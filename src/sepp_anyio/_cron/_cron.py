"""``Cron``: one periodic job, described by a cron expression, a task and a payload factory."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta, tzinfo
from typing import Generic, Protocol, TypeVar

from .._model._checks import check_count, check_seconds
from .._model._enqueue import EnqueueRequest
from .._model._error_root import InvalidArgumentError, InvalidArgumentTypeError
from ._schedule import Schedule

__all__ = ["Cron", "CronTask", "idempotency_key"]

#: The longest start-up look-back, in seconds (365 days): far beyond any deduplication
#: window worth having, and short enough that ``start - window`` is always a datetime.
MAX_CATCH_UP_WINDOW = 365 * 86400.0

T = TypeVar("T")
T_contra = TypeVar("T_contra", contravariant=True)


class CronTask(Protocol[T_contra]):
    """What a :class:`Cron` needs from a task: ``sepp.Task`` fits, as does any object with a
    ``job_type`` and a ``request`` that builds an :class:`EnqueueRequest` for a value."""

    @property
    def job_type(self) -> str: ...

    def request(
        self, value: T_contra, /, *, scheduled_at: datetime, idempotency_key: str
    ) -> EnqueueRequest: ...


def idempotency_key(name: str, slot: datetime) -> str:
    """``cron:<name>:<slot>``, the slot in UTC as ``YYYY-MM-DDTHH:MM:SSZ``.

    One fixed spelling (UTC, seconds, no fraction, ``Z``) so that every replica, whatever its
    zone settings or Python version, derives the same key for the same slot.
    """
    return f"cron:{name}:{slot.astimezone(UTC):%Y-%m-%dT%H:%M:%SZ}"


class Cron(Generic[T]):
    """Enqueue ``task`` at every slot of the cron expression ``expr``.

    Each slot becomes one job built by ``task.request(payload_factory(slot), scheduled_at=slot,
    idempotency_key=...)``, the key being ``cron:<name>:<slot in UTC>`` (see
    :func:`idempotency_key`, e.g. ``cron:report:2025-03-30T01:00:00Z``). Any number of
    schedulers may run the same ``Cron``: the server keeps one job per key within its
    deduplication window (24 h by default), so no leader is needed. ``payload_factory``
    should therefore depend on the slot only; when replicas build different payloads, the
    first one to arrive wins.

    Args:
        expr: five fields, ``minute hour day-of-month month day-of-week``, or a shorthand
            (``@hourly``, ``@daily``/``@midnight``, ``@weekly``, ``@monthly``,
            ``@yearly``/``@annually``).
        task: what to enqueue (a ``sepp.Task``, or any object with a ``job_type`` and a
            ``request(value, *, scheduled_at, idempotency_key)`` method).
        payload_factory: called with each slot, an aware datetime in ``timezone``; returns
            the task's value. Called on every replica.
        name: part of the idempotency key; defaults to ``task.job_type``. Two crons of the
            same task need different names, or they deduplicate each other's slots.
        timezone: an IANA zone name or a ``tzinfo`` (a ``zoneinfo.ZoneInfo`` or a fixed
            offset) whose wall clock the expression reads. Wall times that a daylight-saving
            change skips have no slot; wall times it repeats fire once, at their first
            occurrence.
        catch_up: when the scheduler finds several slots due at once (at its start, after
            a server outage, a stalled event loop or a wall clock that jumped), it enqueues
            only the newest ``catch_up`` of them, oldest first, and skips the older ones
            (logged). ``0`` means no catch-up at all: a slot is enqueued only at the
            scheduler's first look at the clock after it (the newest one, if several fell
            since the previous look); one that fell while no scheduler ran, or whose
            enqueue failed, is skipped, never sent late.
        catch_up_window: how far back, in seconds (or a ``timedelta``), a scheduler that
            starts looks for missed slots: the slots from ``start - catch_up_window`` up to
            its start are due at once (so the newest ``catch_up`` of them are enqueued), and
            a slot that fell while every scheduler was down (a deploy, a crash) is not lost.
            Safe with any number of replicas: a slot some scheduler already enqueued (this
            one before its restart, or another replica) carries the same idempotency key,
            and the server answers it as a duplicate, as long as this window is shorter
            than the queue's deduplication window (``dedup_window_ms``, 24 h by default,
            which the client cannot read: keep this below it). ``0`` turns the look-back
            off (only slots from the start on are enqueued). Default one hour.

    Raises:
        InvalidArgumentError: (a ``ValueError``) a malformed expression (the message names
            the field and its valid range, e.g. ``cron expression '61 * * * *': minute
            field '61' is out of range (0-59)``), one that never fires, an unknown zone,
            an empty name, ``catch_up`` < 0, or a ``catch_up_window`` that is negative,
            not finite or over 365 days.
        InvalidArgumentTypeError: (a ``TypeError``) an argument of the wrong type.
    """

    __slots__ = ("_catch_up", "_catch_up_window", "_factory", "_name", "_schedule", "_task")

    def __init__(
        self,
        expr: str,
        task: CronTask[T],
        payload_factory: Callable[[datetime], T],
        *,
        name: str | None = None,
        timezone: str | tzinfo = "UTC",
        catch_up: int = 1,
        catch_up_window: float | timedelta = 3600.0,
    ) -> None:
        self._schedule = Schedule(expr, timezone)
        if not callable(payload_factory):
            raise InvalidArgumentTypeError(
                "payload_factory must be callable with the slot, got "
                f"{type(payload_factory).__name__}"
            )
        if name is None:
            name = task.job_type
            label = "task.job_type (the default name)"
        else:
            label = "name"
        if not isinstance(name, str):
            raise InvalidArgumentTypeError(f"{label} must be a str, got {type(name).__name__}")
        if not name or any(not ch.isprintable() for ch in name):
            raise InvalidArgumentError(f"{label} must be non-empty and printable, got {name!r}")
        self._catch_up = check_count(catch_up, "catch_up", minimum=0)
        if isinstance(catch_up_window, timedelta):
            catch_up_window = catch_up_window.total_seconds()
        window = check_seconds(catch_up_window, "catch_up_window")
        if window > MAX_CATCH_UP_WINDOW:
            raise InvalidArgumentError(
                f"catch_up_window must be at most {MAX_CATCH_UP_WINDOW:.0f} seconds"
                f" (365 days), got {catch_up_window}"
            )
        self._catch_up_window = window
        self._task = task
        self._factory = payload_factory
        self._name = name

    def __repr__(self) -> str:
        return (
            f"Cron({self._schedule.expr!r}, name={self._name!r},"
            f" timezone={str(self._schedule.tz)!r}, catch_up={self._catch_up},"
            f" catch_up_window={self._catch_up_window})"
        )

    @property
    def expr(self) -> str:
        """The expression, normalised (shorthands expanded, spaces collapsed)."""
        return self._schedule.expr

    @property
    def name(self) -> str:
        return self._name

    @property
    def task(self) -> CronTask[T]:
        return self._task

    @property
    def timezone(self) -> tzinfo:
        return self._schedule.tz

    @property
    def catch_up(self) -> int:
        return self._catch_up

    @property
    def catch_up_window(self) -> float:
        """The start-up look-back, in seconds."""
        return self._catch_up_window

    def next_slot(self, after: datetime) -> datetime | None:
        """The first slot strictly after the aware instant ``after`` (in the cron's zone),
        or None if the expression never fires again."""
        return self._schedule.next_after(after)

    def due_slots(self, after: datetime, now: datetime) -> tuple[list[datetime], bool]:
        """The slots to enqueue when the slots up to ``after`` are done and it is ``now``:
        the newest ``catch_up`` in ``(after, now]`` (the newest one for ``catch_up=0``,
        whose scheduler passes only the time since its previous look), oldest first, and
        whether older ones were skipped."""
        return self._schedule.due(after, now, max(self._catch_up, 1))

    def idempotency_key(self, slot: datetime) -> str:
        """The key of ``slot``'s job: ``cron:<name>:<YYYY-MM-DDTHH:MM:SSZ>``."""
        return idempotency_key(self._name, slot)

    def request(self, slot: datetime) -> EnqueueRequest:
        """The job for ``slot``: the factory's value through ``task.request``.

        Raises:
            Exception: whatever the factory or ``task.request`` raise (a value that fails
                validation raises :class:`InvalidArgumentError`, a ``ValueError``).
        """
        value = self._factory(slot)
        return self._task.request(
            value, scheduled_at=slot.astimezone(UTC), idempotency_key=self.idempotency_key(slot)
        )
