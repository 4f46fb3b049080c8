"""``Cron``: one periodic job, described by a cron expression, a task and a payload factory."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, tzinfo
from typing import Generic, Protocol, TypeVar

from .._model._enqueue import EnqueueRequest
from ._schedule import Schedule

__all__ = ["Cron", "CronTask", "idempotency_key"]

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
        catch_up: when the scheduler finds several slots due at once (after downtime, a
            server outage or a stalled event loop), it enqueues only the newest
            ``catch_up`` of them and skips the older ones (logged). Must be >= 1.

    Raises:
        ValueError: a malformed expression (the message names the field), one that never
            fires, an unknown zone, an empty name, or ``catch_up`` < 1.
        TypeError: an argument of the wrong type.
    """

    __slots__ = ("_catch_up", "_factory", "_name", "_schedule", "_task")

    def __init__(
        self,
        expr: str,
        task: CronTask[T],
        payload_factory: Callable[[datetime], T],
        *,
        name: str | None = None,
        timezone: str | tzinfo = "UTC",
        catch_up: int = 1,
    ) -> None:
        self._schedule = Schedule(expr, timezone)
        if not callable(payload_factory):
            raise TypeError("payload_factory must be callable with the slot")
        if name is None:
            name = task.job_type
            label = "task.job_type (the default name)"
        else:
            label = "name"
        if not isinstance(name, str):
            raise TypeError(f"{label} must be a str, got {type(name).__name__}")
        if not name or any(not ch.isprintable() for ch in name):
            raise ValueError(f"{label} must be non-empty and printable, got {name!r}")
        if isinstance(catch_up, bool) or not isinstance(catch_up, int):
            raise TypeError(f"catch_up must be an int, got {type(catch_up).__name__}")
        if catch_up < 1:
            raise ValueError(f"catch_up must be >= 1, got {catch_up}")
        self._task = task
        self._factory = payload_factory
        self._name = name
        self._catch_up = catch_up

    def __repr__(self) -> str:
        return (
            f"Cron({self._schedule.expr!r}, name={self._name!r},"
            f" timezone={str(self._schedule.tz)!r}, catch_up={self._catch_up})"
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

    def next_slot(self, after: datetime) -> datetime | None:
        """The first slot strictly after the aware instant ``after`` (in the cron's zone),
        or None if the expression never fires again."""
        return self._schedule.next_after(after)

    def due_slots(self, after: datetime, now: datetime) -> tuple[list[datetime], bool]:
        """The slots to enqueue when the slots up to ``after`` are done and it is ``now``:
        the newest ``catch_up`` in ``(after, now]``, oldest first, and whether older ones
        were skipped."""
        return self._schedule.due(after, now, self._catch_up)

    def idempotency_key(self, slot: datetime) -> str:
        """The key of ``slot``'s job: ``cron:<name>:<YYYY-MM-DDTHH:MM:SSZ>``."""
        return idempotency_key(self._name, slot)

    def request(self, slot: datetime) -> EnqueueRequest:
        """The job for ``slot``: the factory's value through ``task.request``.

        Raises:
            Exception: whatever the factory or ``task.request`` raise (a value that fails
                validation raises ``ValueError``).
        """
        value = self._factory(slot)
        return self._task.request(
            value, scheduled_at=slot.astimezone(UTC), idempotency_key=self.idempotency_key(slot)
        )
