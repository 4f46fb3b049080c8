"""``run_cron``: the scheduler loop that turns cron slots into enqueued jobs.

One task per :class:`Cron`, all in one task group. Each task remembers the last slot it
dealt with and loops:

1. read the wall clock; the due slots are those after the remembered one up to now, of which
   the newest ``catch_up`` are enqueued, oldest first (older ones are skipped, logged);
2. sleep until the next slot, in steps of at most a minute so that a wall clock that jumps
   (a host resumed from suspend, an NTP step) is noticed.

At first the remembered slot is ``catch_up_window`` before the start: a scheduler that
starts treats the slots of that look-back as due, so a slot that fell while every replica
was down (a deploy, a crash) is still enqueued (the newest ``catch_up`` of them). That is
safe because every cron job carries the idempotency key ``cron:<name>:<slot>``: a slot that
some replica, or this one before its restart, already enqueued is answered as a duplicate
by the server, provided the look-back is shorter than the queue's deduplication window (the
row lives ``dedup_window_ms`` from that enqueue, which happened at or after the slot, so
at or after ``start - catch_up_window``). The client cannot check that bound (the protocol
does not report the window), so it is the user's to keep. ``catch_up_window=0`` starts
from the start instant (a slot at that very instant included), and ``catch_up=0`` turns
catch-up off altogether: the remembered slot is then simply the previous look at the clock,
so only slots that fell since then are due (the newest one), and a failed enqueue is not
retried.

The sleep is ``anyio.sleep`` of a duration computed from the wall clock, so with the
in-process server under trio's ``MockClock`` (whose clock the client's wall clock follows)
schedules run on virtual time.

Failures never lose the schedule: a transient error (any ``SeppError`` other than a
rejection) is retried with backoff, and the slot stays due until it is enqueued or until
``catch_up`` newer slots have come due. Retrying is safe because the idempotency key makes a
second enqueue of a slot a no-op. A job the server rejects, or a payload factory that raises,
skips that slot with an error log.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from datetime import UTC, datetime, timedelta
from typing import Any

import anyio
import anyio.abc

from .._client import Client, wall_clock_of
from .._model._error_root import InvalidArgumentError, InvalidArgumentTypeError
from .._model._errors import JobRejectedError, SeppError
from ._cron import Cron

__all__ = ["run_cron"]

logger = logging.getLogger("sepp_anyio.cron")

#: Longest single sleep: the wall clock is re-read at least this often.
_MAX_SLEEP = 60.0
#: Added to each sleep so that a clock with millisecond resolution (the in-process server's)
#: has reached the slot when the sleep ends, rather than waking a hair early and again.
_SLEEP_SLACK = 0.001
_RETRY_FIRST = 0.5
_RETRY_MAX = 30.0


def _checked(crons: Cron[Any] | Iterable[Cron[Any]]) -> list[Cron[Any]]:
    items = [crons] if isinstance(crons, Cron) else list(crons)
    if not items:
        raise InvalidArgumentError("run_cron needs at least one Cron")
    names: set[str] = set()
    for index, cron in enumerate(items):
        if not isinstance(cron, Cron):
            raise InvalidArgumentTypeError(
                f"crons[{index}] must be a Cron, got {type(cron).__name__}"
            )
        if cron.name in names:
            raise InvalidArgumentError(
                f"two crons are named {cron.name!r}: their idempotency keys would collide"
                " (give one of them another name=)"
            )
        names.add(cron.name)
    return items


async def run_cron(
    client: Client,
    crons: Cron[Any] | Iterable[Cron[Any]],
    *,
    wall_clock: Callable[[], datetime] | None = None,
    task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Enqueue the slots of one or many crons until cancelled.

    Safe to run on any number of replicas at once (see :class:`Cron`), and to restart: each
    cron first looks back ``catch_up_window`` seconds from its start and enqueues the newest
    ``catch_up`` slots of that look-back (those already enqueued, by a replica or before the
    restart, are deduplicated by the server while the look-back is shorter than the queue's
    deduplication window). Reports ``task_status.started()`` once every cron has read its
    start time.

    Args:
        client: where the jobs go.
        crons: a :class:`Cron` or several (their names must differ).
        wall_clock: "now" as an aware datetime; default the client's own (the server's clock
            for the in-process server, so virtual time drives the schedule).

    Raises:
        InvalidArgumentError: (a ``ValueError``) no crons, or two with the same name.
        InvalidArgumentTypeError: (a ``TypeError``) something other than a Cron.

    Cancellation: the only way to stop it; an enqueue in progress is abandoned (harmless:
    a replica or the next start cannot repeat that slot's job within the dedup window,
    and no later slot is lost because of it).
    """
    items = _checked(crons)
    clock = wall_clock if wall_clock is not None else wall_clock_of(client)
    async with anyio.create_task_group() as tg:
        for cron in items:
            await tg.start(_run_one, client, cron, clock, name=f"sepp cron {cron.name}")
        task_status.started()


async def _run_one(
    client: Client,
    cron: Cron[Any],
    clock: Callable[[], datetime],
    *,
    task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
) -> None:
    start = clock().astimezone(UTC)
    # Slots up to `done` are dealt with. At the start: none from the look-back on (see the
    # module docstring), and a slot at the very instant of the start is ours too.
    lookback = cron.catch_up_window if cron.catch_up > 0 else 0.0
    done = start - timedelta(seconds=lookback, microseconds=1)
    logger.info(
        "cron %s (%s, %s) started; looking back %.0f s for missed slots",
        cron.name,
        cron.expr,
        cron.timezone,
        lookback,
    )
    task_status.started()
    retry = _RETRY_FIRST
    first = True
    # The first slot after everything dealt with; until the clock reaches it nothing can be
    # due (slots up to the last look at the clock were dealt with then), so a wake-up from a
    # capped sleep costs one clock read. None: to be computed.
    upcoming: datetime | None = None
    while True:
        now = clock().astimezone(UTC)
        if upcoming is None or now >= upcoming:
            slots, skipped = cron.due_slots(done, now)
            if skipped:
                # Older slots of the start-up look-back are expected (other replicas, or
                # this one before it stopped, most likely enqueued them): not a warning.
                logger.log(
                    logging.INFO if first else logging.WARNING,
                    "cron %s: slots between %s and %s were missed and are skipped (catch_up=%d)",
                    cron.name,
                    done.isoformat(),
                    slots[0].isoformat(),
                    cron.catch_up,
                )
            first = False
            failed = False
            for slot in slots:
                if not await _enqueue(client, cron, slot):
                    failed = True
                    break
                done = slot.astimezone(UTC)
            if cron.catch_up == 0:
                # No catch-up: every slot up to this look is dealt with, sent or not.
                done, failed = max(done, now), False
            if failed:
                upcoming = None
                await anyio.sleep(retry)
                retry = min(retry * 2, _RETRY_MAX)
                continue
            retry = _RETRY_FIRST
            upcoming = cron.next_slot(max(done, now))
            if upcoming is None:
                logger.warning("cron %s: the expression has no further slots", cron.name)
                await anyio.sleep_forever()
                return  # pragma: no cover (sleep_forever only ends by cancellation)
            upcoming = upcoming.astimezone(UTC)
        delay = (upcoming - clock()).total_seconds()
        await anyio.sleep(min(max(delay, 0.0) + _SLEEP_SLACK, _MAX_SLEEP))


async def _enqueue(client: Client, cron: Cron[Any], slot: datetime) -> bool:
    """Enqueue ``slot``'s job; False on a transient failure (to retry), True otherwise."""
    key = cron.idempotency_key(slot)
    try:
        request = cron.request(slot)
    except Exception:
        logger.exception("cron %s: building the job for %s failed; slot skipped", cron.name, key)
        return True
    try:
        ack = await client.enqueue(request)
    except JobRejectedError as exc:
        logger.error("cron %s: the server rejected %s (%s); slot skipped", cron.name, key, exc)
        return True
    except SeppError as exc:
        then = "retrying" if cron.catch_up > 0 else "slot skipped (catch_up=0)"
        logger.warning("cron %s: enqueueing %s failed (%s); %s", cron.name, key, exc, then)
        return False
    if ack.deduplicated:
        logger.debug("cron %s: %s was already enqueued (job %s)", cron.name, key, ack.job_id)
    else:
        logger.info("cron %s: enqueued %s as job %s", cron.name, key, ack.job_id)
    return True
