"""The per-job heartbeat: keeps a lease alive, and ends the job when it is lost.

A job runs inside its own cancel scope, shared by the handler and this
heartbeat. The heartbeat never settles a job; it only extends the lease and,
when the lease is gone (the server says so, or its known expiry has passed
with no successful extension, or ``max_lease_time`` is up), sets the job's
``lease_lost`` flag and cancels the scope. The flag, not the cancellation,
decides the outcome: a handler that swallows the cancellation and returns
still cannot ack a job that another worker may already own.

Timing follows the lease the server **granted**, not the one requested: the
server may clamp a long lease down, and an interval derived from the request
could fire only after the real lease had expired (and the job had been handed
to someone else).
"""

from __future__ import annotations

import enum
import logging
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import anyio

from .._logcontext import JobLog
from .._model._errors import AttemptMismatchError, JobNotFoundError, SeppError
from .._model._job import JobCtx

__all__ = ["JobRun", "Phase", "heartbeat", "heartbeat_delay"]

logger = logging.getLogger("sepp_anyio.worker")

_MIN_INTERVAL = 0.001


class Phase(enum.IntEnum):
    """Where one job's run is (internal). It only moves forward, in this order."""

    #: The handler runs (or is about to).
    RUNNING = 0
    #: The handler has returned or raised: its outcome is its own from here on, and a
    #: shutdown no longer stops it.
    HANDLED = 1
    #: The ack or nack is on its way: the job holds one of its lane's settle slots.
    SETTLING = 2


@dataclass(eq=False, slots=True)
class JobRun:
    """The mutable state of one job being processed (internal).

    Whoever cancels the job's scope sets a flag first, and the flags, not what the handler
    does with the cancellation, decide the job's outcome (see ``Worker._verdict``): a handler
    that swallows the cancellation and returns still cannot ack.
    """

    ctx: JobCtx
    #: The handler's own scope (inside the heartbeat's), made only when the job needs one
    #: beside a shutdown's: its deadline is the job's timeout, and with a heartbeat a
    #: shutdown cancels only the handler, so the lease stays extended until the handler
    #: has returned (one that ignores the cancellation must not lose its job to another
    #: worker meanwhile, and its nack needs the lease). Without either, a shutdown cancels
    #: the job's task (:attr:`task`): one cancel scope fewer per job is about a tenth of
    #: the memory a job in flight costs. On trio every job has one (trio's own), since
    #: its task has no handle (``_spawn``).
    handler_scope: anyio.CancelScope | None = None
    #: The job's task handle (set as it is started; None on trio, see ``_spawn``).
    task: anyio.TaskHandle[None] | None = None
    #: The job's scope, the handler's and its heartbeat's, cancelled when the lease is
    #: lost: the heartbeat's task group's (set as it starts; None without a heartbeat).
    scope: anyio.CancelScope | None = None
    #: Set before the scope is cancelled because the lease is (or may be) gone.
    lease_lost: bool = False
    lost_reason: str = ""
    #: Set when the handler ran into its timeout (read as the handler's scope ends).
    timed_out: bool = False
    #: Set before the scope is cancelled because the worker is shutting down: why (the
    #: drain timed out, ``cancel_in_flight()`` was called, a second signal), for the nack.
    stop_reason: str | None = None
    #: The run's state; the flags above say why it was cancelled, if it was.
    phase: Phase = Phase.RUNNING
    #: When the handler started (anyio time).
    started: float = 0.0
    #: The handler's (or a middleware's) exception, for ``on_outcome``.
    error: BaseException | None = None
    #: The worker's lane the job came from (a ``_lane.LaneRun``; its counters).
    lane: Any = None
    #: When the heartbeat stops extending (anyio time; ``max_lease_time`` after the start).
    stop_extending_at: float = math.inf
    #: The expiry the reserve granted, for the heartbeat to tell a manual ``ctx.extend``
    #: from its own extensions (it may start after one: see ``_heartbeat_timer``).
    granted_expiry: datetime | None = None
    #: The job's entry in the worker's ``HeartbeatTimer`` until its heartbeat starts.
    timer_entry: list[Any] | None = None
    _log: JobLog | None = field(default=None, init=False, repr=False)

    @property
    def log(self) -> JobLog:
        """The job's logger (lines prefixed with its id, type and attempt), made the first
        time a line is logged: most jobs log nothing above DEBUG."""
        if self._log is None:
            self._log = JobLog(logger, self.ctx)
        return self._log

    def lose_lease(self, reason: str) -> None:
        if not self.lease_lost:
            self.lease_lost = True
            self.lost_reason = reason
        scope = self.scope or self.handler_scope
        assert scope is not None  # lost only by a heartbeat, which has its job's scope
        scope.cancel()

    def stop(self, reason: str) -> bool:
        """Cancel the handler because the worker shuts down; the job is then nacked for
        an immediate retry, whatever the handler does with the cancellation.

        Returns False (and changes nothing) when the handler has already finished, or the
        job was already stopped (the first reason stays) or lost its lease.
        """
        if self.phase is not Phase.RUNNING or self.lease_lost or self.stop_reason is not None:
            return False
        self.stop_reason = reason
        # The job's task when the handler has no scope of its own: the job's task then
        # settles the job and lets the cancellation go on out (see Worker._job_task).
        # (No task yet only while an eager task factory runs the job's first steps inside
        # start_soon: Worker._start_job cancels it as soon as it has it.)
        target = self.handler_scope or self.task
        if target is not None:
            target.cancel()
        return True


def _seconds_left(expiry: datetime, now: Callable[[], datetime]) -> float:
    return (expiry - now()).total_seconds()


def heartbeat_delay(
    run: JobRun,
    *,
    interval: float | None,
    extend: bool,
    wall_clock: Callable[[], datetime],
) -> float | None:
    """Seconds from now until ``run``'s heartbeat next has something to do: extend the
    lease, or (no more extending) look at it again when it should have run out. None when
    it is only watching and the lease has run out already: the job is lost now.
    """
    left = _seconds_left(run.ctx.lease_expires_at, wall_clock)
    now = anyio.current_time()
    stop_extending_at = run.stop_extending_at
    if not extend or now >= stop_extending_at:
        return left if left > 0 else None
    wait = interval if interval is not None else max(left / 3, _MIN_INTERVAL)
    return min(wait, max(stop_extending_at - now, 0.0))


async def heartbeat(
    run: JobRun,
    *,
    lease: float,
    interval: float | None,
    extend: bool,
    max_lease_time: float | None,
    wall_clock: Callable[[], datetime],
    on_extended: Callable[[], None] | None = None,
    due: bool = False,
) -> None:
    """Extend ``run``'s lease until cancelled; cancel the job if the lease is lost.

    After a manual ``ctx.extend`` that reached past ``lease`` from now, the heartbeat sends
    no extension (it would shorten that lease) and follows the new expiry instead.

    Args:
        lease: seconds asked for on every extension.
        interval: fixed seconds between extensions, or None for one third of
            the time left on the granted lease (recomputed after each extend).
        extend: False to only watch: the job is cancelled when its lease runs
            out (used with ``max_lease_time`` and no auto-extension).
        max_lease_time: stop extending at ``run.stop_extending_at`` (this long after the
            job started), then end the job as lease-lost once the last granted lease
            runs out (here only named in the log line).
        wall_clock: "now" on the server's clock (to read expiry instants).
        on_extended: called after each extension the server granted (metrics).
        due: the first wait (:func:`heartbeat_delay` as the job started) is over already
            (``_heartbeat_timer`` starts the task only then).

    Never raises except cancellation: extension errors are decided here.
    """
    ctx = run.ctx
    # The expiry granted to the heartbeat itself (or by the reserve); ctx.lease_expires_at
    # differs from it after a manual ctx.extend, which may come before this task starts.
    own_expiry = run.granted_expiry or ctx.lease_expires_at
    while True:
        if not due:
            delay = heartbeat_delay(run, interval=interval, extend=extend, wall_clock=wall_clock)
            if delay is None:
                reason = (
                    f"max_lease_time ({max_lease_time:g}s) reached"
                    if extend and max_lease_time is not None
                    else "the lease expired"
                )
                run.log.error(
                    "lease lost (%s); cancelling the handler, not settling the job", reason
                )
                run.lose_lease(reason)
                return
            await anyio.sleep(delay)
        due = False
        if not extend or anyio.current_time() >= run.stop_extending_at:
            # No (more) extensions: the job ends with its lease. Look at it again (in a
            # loop, because a handler may still extend by hand, ctx.extend).
            continue
        if (
            ctx.lease_expires_at != own_expiry
            and _seconds_left(ctx.lease_expires_at, wall_clock) >= lease
        ):
            # The handler extended by hand (ctx.extend) past what an extension would give:
            # sending one now would cut its longer lease back down to ``lease``. Follow the
            # expiry it got instead. (Only after a manual extension: without one, a fixed
            # interval never depends on the client's and server's clocks agreeing.)
            continue
        try:
            expiry = await ctx.extend(lease)
        except (JobNotFoundError, AttemptMismatchError) as exc:
            run.log.error(
                "lease reassigned or gone (%s); cancelling the handler, not settling the job",
                type(exc).__name__,
            )
            run.lose_lease(f"extend failed: {type(exc).__name__}")
            return
        except SeppError as exc:
            if _seconds_left(ctx.lease_expires_at, wall_clock) <= 0:
                run.log.error(
                    "could not extend the lease before it expired (%s); cancelling the handler",
                    exc,
                )
                run.lose_lease(f"extend failed after expiry: {exc}")
                return
            run.log.warning("could not extend the lease (%s); retrying before it expires", exc)
            if interval is None:
                # Don't spin: the next try comes after a third of what is left.
                continue
        else:
            own_expiry = expiry
            if on_extended is not None:
                on_extended()
            if logger.isEnabledFor(logging.DEBUG):
                run.log.debug("lease extended to %s", expiry.isoformat())
