"""One job's task: run it (middleware, handler, heartbeat), decide its verdict, hand off
its token, settle it (ack or nack), report its outcome.

The design (capacity, hand-off order, cancellation) is in :mod:`._facade`'s docstring;
:class:`JobRunner` is the part of :class:`~sepp_anyio.Worker` that runs one job.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Coroutine
from datetime import UTC, datetime, timedelta
from typing import Any

import anyio
import anyio.abc
import anyio.lowlevel
import anyio.to_thread

from .. import _otel
from .._client import Client, wall_clock_of
from .._io._deadlines import Deadlines
from .._io._native import Native
from .._logcontext import enter_job
from .._model._errors import (
    HandlerError,
    JobNotFoundError,
    SeppError,
)
from .._model._expiry import EXPIRES_AT_KEY, NOT_AN_EXPIRY, expiry_of
from .._model._job import Job, JobCtx, attach_enqueuer, attach_state, is_traced
from .._model._results import REPLY_TO
from .._model._retries import RetryDirective
from .._model._retry_policy import Retry
from ._accounting import LaneAccounts
from ._heartbeat_timer import HeartbeatTimer
from ._lane import LaneRun
from ._lease import JobRun, Phase, heartbeat, heartbeat_delay
from ._middleware import Middleware, call_through
from ._outcome import OutcomeHook, Settled, outcome_of, report_outcome
from ._registry import AsyncHandler
from ._replies import reply

logger = logging.getLogger("sepp_anyio.worker")

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MS = timedelta(milliseconds=1)


# Upper bound on one ack or nack at the end of a job, shielded from
# cancellation: long enough for a retrying client, short enough that a dead
# server can't hold a shutdown hostage.
_SETTLE_TIMEOUT = 30.0
# Stands in for the heartbeat's task group when a job has no heartbeat, and for the
# handler's scope when it has none (reusable: a nullcontext keeps no state).
_NOTHING: contextlib.nullcontext[None] = contextlib.nullcontext()
# Every job task's name. One shared string: a name made per job (with its id) is one more
# object alive per job in flight, and a job's log lines already carry its id.
JOB_TASK_NAME = "sepp-anyio job"
#: The nack reason of a job reserved past its ``sepp.expires_at``.
EXPIRED_REASON = "expired"


def _failure_directive(policy: Retry, ctx: JobCtx, error: Exception) -> RetryDirective:
    """The nack of a job whose handler (or a middleware) raised ``error``, not a
    ``HandlerError``, under ``policy``: dead-lettered when ``error`` is of a
    ``dead_letter_on`` type, else retried after the policy's (jittered) delay."""
    if policy.dead_letters(error):
        return RetryDirective.dead_letter()
    return RetryDirective.after(policy.delay(ctx.attempt))


def _expired(run: JobRun, wall_clock: Callable[[], datetime]) -> bool:
    """Whether ``run``'s job was reserved at or after its ``sepp.expires_at`` deadline on
    the client's (server's) clock. A value under the key that is not an int cannot be
    read as a deadline: the job runs, and a warning says why it was not checked."""
    deadline = expiry_of(run.ctx.custom)
    if deadline is None:
        return False
    if deadline is NOT_AN_EXPIRY:
        value = run.ctx.custom[EXPIRES_AT_KEY]
        run.log.warning(
            "custom field %r is %r (a %s), not an int of milliseconds since the epoch;"
            " the job runs without an expiry",
            EXPIRES_AT_KEY,
            value,
            type(value).__name__,
        )
        return False
    assert isinstance(deadline, int)
    return (wall_clock() - _EPOCH) // _MS >= deadline


def _stopped_here(run: JobRun, exc: BaseException) -> bool:
    """Whether ``exc`` is a shutdown's cancellation of ``run``'s own task (``JobRun.stop``
    cancels the task when the handler has no scope of its own).

    Only a cancellation, bare or grouped (a handler's own trio nursery), with the stop's
    flag set: any other cancellation (``run()`` itself cancelled) is not the job's to end.
    """
    if run.stop_reason is None or run.handler_scope is not None:
        return False
    cancelled = anyio.get_cancelled_exc_class()
    if isinstance(exc, BaseExceptionGroup):
        return exc.split(cancelled)[1] is None
    return isinstance(exc, cancelled)


_QUEUE_POLICY = "under the queue's retry policy"


def _then_retry(ctx: JobCtx, delay: float | str) -> str:
    """The end of a log line about a failed attempt: when the job runs again, or that it
    will not (its last attempt is dead-lettered by the server, whatever the nack asks)."""
    if ctx.attempt >= ctx.max_attempts:
        return (
            f"that was its last attempt ({ctx.attempt}/{ctx.max_attempts}), so it will be"
            " dead-lettered"
        )
    if isinstance(delay, str):
        return f"retrying {delay}"
    return "retrying at once" if delay == 0 else f"retrying in {delay:g}s"


def _handler_asked(exc: HandlerError, ctx: JobCtx) -> tuple[str, str]:
    """What a :class:`HandlerError` asked for, in words, and what then becomes of the job
    ("" for a dead-letter, which says it all): the two halves of its nack's log line."""
    why = exc.reason or "no reason given"
    directive = exc.directive
    if directive.kind == "dead_letter":
        return f"handler asked to dead-letter the job ({why})", ""
    if directive.kind == "after":
        assert directive.delay is not None
        then = _then_retry(ctx, directive.delay)
        return f"handler asked to retry the job in {directive.delay:g}s ({why})", then
    return f"handler asked to retry the job ({why})", _then_retry(ctx, _QUEUE_POLICY)


def _settling(directive: RetryDirective | None, asked: tuple[str, str] | None) -> str:
    """The settle in a failed settle's log line: "ack", "nack", or the nack with what the
    handler asked for (that line is the only one to say it)."""
    if directive is None:
        return "ack"
    return "nack" if asked is None else f"nack ({asked[0]})"


def _span_attributes(ctx: JobCtx, worker_id: str) -> dict[str, Any]:
    """The attributes of a job's CONSUMER span (built only when one is made)."""
    return {
        "messaging.destination.name": ctx.queue,
        "messaging.message.id": ctx.id,
        "messaging.client.id": worker_id,
        "sepp.job.type": ctx.job_type,
        "sepp.job.attempt": ctx.attempt,
    }


class JobRunner:
    """The job task of a :class:`~sepp_anyio.Worker` (a base class: the worker sets every
    attribute declared here in its ``__init__``)."""

    _client: Client
    worker_id: str
    _lease: float
    _auto_extend: bool
    _interval: float | None
    _max_lease_time: float | None
    _job_timeout: float | None
    _timeouts: dict[str, float]
    _calls: dict[str, AsyncHandler]
    _retry: Retry
    _retries: dict[str, Retry]
    _catch_all_call: AsyncHandler | None
    _middleware: tuple[Middleware, ...]
    _on_outcome: OutcomeHook | None
    _state: Any
    _timer: HeartbeatTimer | None
    _deadlines: Deadlines
    _native: Native
    _now: Callable[[], float]
    _runs: set[JobRun]
    _in_flight: int
    _finished: int
    _hand_off_yields: int
    _job_done: anyio.Event | None
    _idle: anyio.Event | None
    _accounts: dict[LaneRun, LaneAccounts]
    _heartbeats: bool

    async def _job_task(self, job: Job, run: JobRun) -> None:
        """One job's task, start to end: in its log context and CONSUMER span, the
        middleware and the handler (in the handler's scope, inside the heartbeat's task
        group; its deadline is the job's timeout), then the settle and ``on_outcome``; last, the
        lane's bookkeeping.

        A job reserved at or after its ``sepp.expires_at`` deadline is not run: it is
        nacked dead-lettered with reason "expired" (``Settled.EXPIRED``). Otherwise: the
        handler returns: ack; it raises ``HandlerError``: that directive; any other
        ``Exception``: a nack under the retry policy (the task's, else the worker's);
        then the flags of whoever cancelled it decide (:meth:`_verdict`). Cancellation
        from outside (``run()`` cancelled) and non-``Exception`` errors propagate, the job
        unsettled. A handler without a scope of
        its own is stopped by a shutdown cancelling this task: that cancellation is caught
        as it leaves the handler (:func:`_stopped_here`), the job is nacked and reported,
        shielded, and the cancellation is raised again at the end.

        One coroutine, not a chain of them, because every frame of a chain stays alive for
        as long as the handler runs: a worker with 10,000 jobs in flight keeps 10,000 of
        each (``benchmarks/worker.py`` measures that memory). The steps before and after
        the handler are plain functions, whose frames are gone while it runs.
        """
        ctx = job.ctx
        enter_job(ctx)  # in this task's own context: nothing to undo (_logcontext)
        self._job_started(run)
        outcome: Settled | None = None  # None until settled (or found lost)
        stopped: BaseException | None = None  # a shutdown's cancellation of this task
        try:
            span_of = _otel.process_span(
                is_traced(ctx), ctx.trace_context, _span_attributes, ctx, self.worker_id
            )
            with span_of as span:
                directive: RetryDirective | None = None  # None: ack
                reason = ""
                # A typed task's own timeout wins over job_timeout; it covers the middleware.
                # It is the deadline of the handler's scope: one scope for the timeout and
                # a shutdown (cheaper per job than two); the flags tell them apart.
                limit = self._timeouts.get(ctx.job_type, self._job_timeout)
                scope = run.handler_scope  # made when there is a limit, or on trio (_start_job)
                if limit is not None:
                    assert scope is not None
                    scope.deadline = anyio.current_time() + limit
                handler = self._calls.get(ctx.job_type) or self._catch_all_call
                expired = EXPIRES_AT_KEY in ctx.custom and _expired(
                    run, wall_clock_of(self._client)
                )
                if expired:
                    # Past its deadline: not run; dead-lettered (below, bypassing _verdict:
                    # no handler ran, so nothing was cancelled or failed).
                    directive, reason = RetryDirective.dead_letter(), EXPIRED_REASON
                    run.log.warning(
                        "reserved at or after its deadline (custom %r = %s); dead-lettered"
                        " without running",
                        EXPIRES_AT_KEY,
                        ctx.custom[EXPIRES_AT_KEY],
                    )
                    _otel.mark_error(span, "expired before it started")
                elif handler is None:
                    directive, reason = self._unhandled(run, span)
                else:
                    # Without a heartbeat (nothing to watch) no task group is made.
                    timer = self._timer
                    async with (
                        anyio.create_task_group() if timer is not None else _NOTHING
                    ) as heartbeats:
                        if heartbeats is not None:
                            # Its scope is the job's: a lost lease cancels both. The
                            # heartbeat starts in it when its first wait is over.
                            run.scope = heartbeats.cancel_scope
                            self._schedule_heartbeat(run, heartbeats)
                        with scope if scope is not None else _NOTHING:
                            try:
                                if self._middleware:
                                    await call_through(self._middleware, handler, job.payload, ctx)
                                else:
                                    await handler(job.payload, ctx)
                            except HandlerError as exc:
                                run.error = exc
                                directive, reason = exc.directive, exc.reason
                            except Exception as exc:
                                run.error = exc
                                directive = _failure_directive(
                                    self._retries.get(ctx.job_type, self._retry), ctx, exc
                                )
                                reason = f"handler raised {type(exc).__name__}: {exc}"
                            except BaseException as exc:
                                if not _stopped_here(run, exc):
                                    raise
                                # A shutdown cancelled this very task (the handler has no
                                # scope of its own): settle as for any shutdown, shielded,
                                # then let the cancellation out of the task (below).
                                stopped = exc
                            finally:
                                # Read as the handler ends, inside its scope: set if the
                                # deadline fired, whether the handler let the cancellation
                                # out or not (a shutdown cancels the same scope, earlier).
                                run.timed_out = scope is not None and (
                                    scope.cancel_called and anyio.current_time() >= scope.deadline
                                )
                                run.phase = Phase.HANDLED
                                # The heartbeat lives exactly as long as the handler
                                # (most never start: their first wait is not over).
                                if timer is not None and not timer.discard(run):
                                    assert heartbeats is not None
                                    heartbeats.cancel_scope.cancel()
                if expired:
                    if REPLY_TO in ctx.custom:
                        # The producer waiting for its result learns that it expired.
                        await reply(
                            self._client,
                            run,
                            (directive, reason, None),
                            _SETTLE_TIMEOUT,
                            expired=True,
                        )
                    outcome = await self._settle(run, directive, reason, None, expired=True)
                else:
                    verdict = self._verdict(run, span, directive, reason, limit)
                    if verdict is None:
                        outcome = Settled.LEASE_LOST
                    else:
                        if REPLY_TO in ctx.custom:
                            # Its result goes out before the settle (_replies).
                            verdict = await reply(self._client, run, verdict, _SETTLE_TIMEOUT)
                        outcome = await self._settle(run, *verdict)
                self._job_finished(run, outcome)
                if self._on_outcome is not None:
                    report = report_outcome(
                        self._on_outcome, ctx, outcome_of(outcome, run), run.error, run.log
                    )
                    if run.stop_reason is None:
                        await report
                    else:
                        # Released by a shutdown, which may have cancelled this very task
                        # (_stopped_here): reported shielded, and bounded like the nack.
                        with anyio.move_on_after(_SETTLE_TIMEOUT, shield=True):
                            await report
            if stopped is not None:
                raise stopped
        finally:
            if outcome is None:
                # run() was cancelled from outside, or something failed that is not an
                # Exception: nothing was settled, and on_outcome is not called.
                self._job_finished(run, Settled.CANCELLED)
            self._job_ended(run)

    def _start_deadlines(self, tg: anyio.abc.TaskGroup, native: Native) -> anyio.CancelScope:
        """Start the task that keeps the settles' bounds in ``tg``; cancelling the returned
        scope stops it (after the drain), and a settle after that keeps its own deadline
        (see ``_io._deadlines``)."""
        scope = anyio.CancelScope()
        deadlines = self._deadlines = Deadlines()
        self._native = native
        self._now = native.now

        async def serve() -> None:
            with scope:
                await deadlines.run(native)

        tg.start_soon(serve, name=f"sepp settle deadlines of {self.worker_id}")
        return scope

    def _start_heartbeat_timer(self, tg: anyio.abc.TaskGroup) -> anyio.CancelScope:
        """Start the jobs' heartbeat timer in ``tg`` if they have heartbeats; cancelling
        the returned scope stops it (after the drain: the jobs need it until then)."""
        scope = anyio.CancelScope()
        if self._heartbeats:
            timer = self._timer = HeartbeatTimer(self._heartbeat)

            async def serve() -> None:
                with scope:
                    await timer.serve()

            tg.start_soon(serve, name=f"sepp heartbeat timer of {self.worker_id}")
        return scope

    def _schedule_heartbeat(self, run: JobRun, group: anyio.abc.TaskGroup) -> None:
        """Have ``run``'s heartbeat start in ``group`` (the job's) when its first wait is
        over (``_heartbeat_timer``)."""
        assert self._timer is not None
        ctx = run.ctx
        run.granted_expiry = ctx.lease_expires_at
        if self._max_lease_time is not None:
            run.stop_extending_at = run.started + self._max_lease_time
        delay = heartbeat_delay(
            run,
            interval=self._interval,
            extend=self._auto_extend,
            wall_clock=wall_clock_of(self._client),
        )
        self._timer.add(run, group, anyio.current_time() + (delay or 0.0))

    def _heartbeat(self, run: JobRun) -> Coroutine[Any, Any, None]:
        """``run``'s heartbeat, for its task once its first wait is over (a plain
        function: no frame of its own)."""
        return heartbeat(
            run,
            lease=self._lease,
            interval=self._interval,
            extend=self._auto_extend,
            max_lease_time=self._max_lease_time,
            wall_clock=wall_clock_of(self._client),
            on_extended=self._accounts[run.lane].lease_extended,
            due=True,
        )

    def _job_started(self, run: JobRun) -> None:
        """Count ``run`` in."""
        run.started = self._now()
        attach_state(run.ctx, self._state)
        attach_enqueuer(run.ctx, self._client)  # for its follow-ups (JobCtx.enqueue)
        self._accounts[run.lane].job_started()

    def _job_finished(self, run: JobRun, outcome: Settled) -> None:
        """Count ``run`` out with its ``outcome`` (after its settle)."""
        elapsed = self._now() - run.started
        self._accounts[run.lane].job_finished(run.ctx.job_type, outcome, elapsed)

    def _job_ended(self, run: JobRun) -> None:
        """The job's task is over, however it ended: forget ``run``, give back what it holds."""
        lane: LaneRun = run.lane
        self._runs.discard(run)
        lane.runs.discard(run)
        # Still held when the job was not settled (lease lost, or run() cancelled).
        self._give_token_back(run)
        if run.phase is Phase.SETTLING:
            lane.settling -= 1
            assert lane.settles is not None
            lane.settles.give_back()
        if not self._runs and self._idle is not None:
            self._idle.set()
        if self._job_done is not None:
            self._finished += 1
            self._job_done.set()
            self._job_done = anyio.Event()

    def _unhandled(self, run: JobRun, span: Any) -> tuple[RetryDirective, str]:
        """The nack of a job whose type has no handler (and there is no catch-all): retried
        after the worker's retry policy's delay."""
        ctx = run.ctx
        delay = self._retry.delay(ctx.attempt)
        run.log.warning("no handler registered for this job type; %s", _then_retry(ctx, delay))
        _otel.mark_error(span, "no handler registered for the job type")
        return RetryDirective.after(delay), f"no handler registered for job_type {ctx.job_type!r}"

    def _verdict(
        self,
        run: JobRun,
        span: Any,
        directive: RetryDirective | None,
        reason: str,
        limit: float | None,
    ) -> tuple[RetryDirective | None, str, tuple[str, str] | None] | None:
        """What to settle, given the handler's own ``directive`` and ``reason`` (None and
        "" to ack), and log it: None when the lease was lost (nothing is settled then).

        The flags decide, not what the handler did with its cancellation: one that
        swallowed it and returned (or raised something else) gets the outcome the
        cancellation stands for.

        The third item is what a :class:`HandlerError` asked for and what follows, in
        words (:func:`_handler_asked`): not logged here but in the nack's own line, so a
        retry the handler asked for is one line, not two.
        """
        ctx = run.ctx
        error = run.error
        cancelled = run.lease_lost or run.timed_out or run.stop_reason is not None
        if error is not None:
            if cancelled:
                run.log.info(
                    "handler raised %s after it was cancelled; the cancellation decides the"
                    " outcome",
                    type(error).__name__,
                )
            elif isinstance(error, HandlerError):
                _otel.mark_error(span, str(error), error)
                return directive, reason, _handler_asked(error, ctx)
            else:
                assert directive is not None
                if directive.kind == "dead_letter":
                    then = "its type is in the retry policy's dead_letter_on: dead-lettered"
                else:
                    then = _then_retry(ctx, directive.delay or 0.0)
                run.log.error("handler raised %s; %s", type(error).__name__, then, exc_info=error)
                _otel.mark_error(span, f"handler raised {type(error).__name__}", error)
        if run.lease_lost:
            # The job may already belong to another worker: it is not settled here.
            self._accounts[run.lane].lease_lost(ctx.job_type)
            run.log.error("lease lost (%s); the job is not settled here", run.lost_reason)
            _otel.add_event(span, "sepp.lease_lost", {"sepp.lease_lost.reason": run.lost_reason})
            _otel.mark_error(span, f"lease lost: {run.lost_reason}")
            return None
        if run.timed_out:
            directive, reason = RetryDirective.default(), "timed out"
            run.log.warning(
                "handler timed out after %gs; %s", limit, _then_retry(ctx, _QUEUE_POLICY)
            )
            _otel.mark_error(span, reason)
        elif run.stop_reason is not None:
            directive = RetryDirective.after(0)
            reason = f"worker shut down before the handler finished ({run.stop_reason})"
            run.log.warning("handler cancelled: %s; %s", reason, _then_retry(ctx, 0.0))
            _otel.mark_error(span, reason)
        return directive, reason, None

    def _give_token_back(self, run: JobRun) -> None:
        """Return ``run``'s ``max_in_flight`` token to its lane, if it still holds it."""
        lane: LaneRun = run.lane
        token = lane.holding.pop(run, None)
        if token is not None:
            self._accounts[lane].slot_given_back()
            self._in_flight -= 1
            assert lane.limiter is not None
            lane.limiter.release_on_behalf_of(token)

    async def _hand_off(self, run: JobRun) -> None:
        """The job's outcome is decided: take a settle slot, then give the token back, so
        that the lane's next reserve need not wait for this ack or nack's round trip (see
        the capacity model in the module docs).

        When every settle slot is taken, this waits for one *holding the token*, so the
        reserve loop feels a slow server too. Called inside the settle's shielded scope
        (before its deadline is set): the outcome is decided and must not be lost; the
        wait ends when an earlier settle (bounded by its timeout) and its ``on_outcome``
        call are over.
        """
        lane: LaneRun = run.lane
        settles = lane.settles
        assert settles is not None
        if not settles.try_take():
            await settles.take()
        run.phase = Phase.SETTLING
        lane.settling += 1
        # Read first: the token wakes a reserve loop that waits for one.
        woken = lane.awaiting_token
        self._give_token_back(run)
        if woken:
            # Let the reserve loop, woken by the token, send its reserve before this job's
            # ack or nack goes out ("Order on the wire" in the module docs). Shielded like
            # the rest of the settle: the outcome is decided and is settled regardless. A
            # loop that is not waiting for a token (its reserve is on its way) has nothing
            # to send first: then the ack goes at once, without two task switches on trio.
            for _ in range(self._hand_off_yields):
                await self._native.checkpoint()

    async def _settle(
        self,
        run: JobRun,
        directive: RetryDirective | None,
        reason: str,
        asked: tuple[str, str] | None,
        *,
        expired: bool = False,
    ) -> Settled:
        """Ack (``directive`` None) or nack, shielded from cancellation, bounded in time.

        ``asked``: what a :class:`HandlerError` asked for and what follows, in words, for
        the nack's one line (which says both that and what became of the nack).
        ``expired``: the nack dead-letters a job reserved past its deadline.

        Returns the outcome: ``ACK``, ``RETRY``, ``DEAD_LETTER``, ``EXPIRED`` (an expired
        job's nack was answered) or ``SETTLE_FAILED`` (logged; the job will be
        redelivered).
        """
        ctx = run.ctx
        lane: LaneRun = run.lane
        accounts = self._accounts[lane]
        # One scope for the hand-off and the call: shielded from outer cancellation, and
        # cancelled at its deadline, which starts once a settle slot is taken. The
        # worker's deadline task keeps that deadline: on trio a scope's own costs a
        # twentieth of a job's CPU, and it almost never fires. (The backend's own scope:
        # on trio, anyio's is a wrapper around trio's.)
        with self._native.cancel_scope(shield=True) as bound:
            await self._hand_off(run)
            timer = self._deadlines.cancel_at(bound, self._now() + _SETTLE_TIMEOUT)
            try:
                if directive is None:
                    await self._client.ack(ctx)
                    accounts.acked(ctx.job_type)
                    if logger.isEnabledFor(logging.DEBUG):
                        run.log.debug("acked")
                    return Settled.ACK
                await self._wait_for_cancelled_reserve(lane)
                dead = await self._client.nack(ctx, directive, reason)
                if expired:
                    accounts.expired(ctx.job_type)
                    return Settled.EXPIRED
                outcome = Settled.DEAD_LETTER if dead else Settled.RETRY
                accounts.nacked(ctx.job_type, dead=dead)
                if dead:
                    if asked is None:
                        run.log.warning("nacked; dead-lettered (%s)", reason or "no reason")
                    else:
                        run.log.warning("nacked; dead-lettered: %s", "; ".join(filter(None, asked)))
                else:
                    if asked is None:
                        run.log.info("nacked for retry (%s)", reason or "no reason")
                    else:
                        run.log.info("nacked for retry: %s; %s", *asked)
                return outcome
            except JobNotFoundError:
                accounts.settle_failed()
                run.log.error(
                    "could not %s: job not found; either the lease was lost and the job will be"
                    " redelivered, or a retried attempt already succeeded and only its response"
                    " was lost",
                    _settling(directive, asked),
                )
                return Settled.SETTLE_FAILED
            except SeppError as exc:
                accounts.settle_failed()
                run.log.error(
                    "could not %s (%s); the job will be redelivered after its lease expires",
                    _settling(directive, asked),
                    exc,
                )
                return Settled.SETTLE_FAILED
            finally:
                timer.ended = True
        assert bound.cancelled_caught
        accounts.settle_failed()
        run.log.error(
            "%s did not finish within %gs; the job will be redelivered after its lease expires",
            _settling(directive, asked),
            _SETTLE_TIMEOUT,
        )
        return Settled.SETTLE_FAILED

    @staticmethod
    async def _wait_for_cancelled_reserve(lane: LaneRun) -> None:
        """If shutdown has cancelled a reserve that is still unwinding, wait until it has.

        A reserve cancelled here stays parked on the server until its stream reset
        arrives. A nack for retry sent before that reset would make the job ready while
        the dead reserve is still parked, and the server would lease it to that reserve,
        which nobody reads: the job would sit out a whole lease (or be dead-lettered as
        LEASE_EXPIRED on its last attempt) instead of going to the next worker at once.
        The reserve's cleanup sends the reset before it unwinds, so waiting for that
        puts the reset on the connection ahead of the nack. (Only the job's own lane
        matters: the other lanes' reserves are for other queues.)
        """
        scope, unwound = lane.reserve_scope, lane.reserve_unwound
        if scope is not None and scope.cancel_called and unwound is not None:
            await unwound.wait()
