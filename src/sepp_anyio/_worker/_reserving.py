"""The reserve loops: take capacity, reserve, start the jobs, back off after a failure or
a refusal, stop when idle (``until_idle``) or after ``job_limit`` jobs, then drain.

:class:`ReserveLoops` is the part of :class:`~sepp_anyio.Worker` that leases jobs; the
rules (never lease a job that cannot start now, refusals before the first success are
permanent) are in :mod:`._facade`'s docstring.
"""

from __future__ import annotations

import logging

import anyio
import anyio.abc
import anyio.lowlevel
import anyio.to_thread

from .._health import LaneProbe
from .._model._errors import (
    SeppError,
    UnauthenticatedError,
    UnknownQueuesError,
)
from .._model._job import Job
from ._batch import BatchRunner
from ._job import JOB_TASK_NAME
from ._lane import LaneRun
from ._lease import JobRun
from ._spawn import JobStarter

logger = logging.getLogger("sepp_anyio.worker")


# A reserve that comes back empty sooner than min(_EARLY_EMPTY, wait / 2) is
# "early" (a server draining at shutdown answers at once): pause before the
# next one instead of spinning.
_EARLY_EMPTY = 0.1
_EARLY_EMPTY_PAUSE = 0.25

# Ceiling of the exponential backoff after a refused reserve (auth, undeclared queue).
MAX_REFUSED_BACKOFF = 30.0

# The first of those pauses when reserve_error_backoff is 0 (a refusal is never hot-looped).
_MIN_REFUSED_BACKOFF = 1.0


class ReserveLoops(BatchRunner):
    """The reserve loops of a :class:`~sepp_anyio.Worker` (a base class: the worker sets
    every attribute declared here in its ``__init__``)."""

    _lanes: tuple[LaneRun, ...]
    _wait: float
    _reserve_error_backoff: float
    _drain_timeout: float | None
    _jobs_left: int | None
    _until_idle: bool
    _reserved_once: bool
    _refusals: int
    _max_seen: int
    _stop: anyio.Event | None
    _probes: dict[LaneRun, LaneProbe]

    def shutdown(self) -> None:
        """Stop reserving and drain (the worker's own, :meth:`Worker.shutdown`)."""
        raise NotImplementedError

    async def _reserve_loops(self, jobs: JobStarter) -> None:
        """Every lane's reserve loop, starting job tasks with ``jobs``; returns when all of
        them have stopped.

        Raises:
            UnauthenticatedError, UnknownQueuesError: the first lane's refusal (see
                :meth:`_reserve`), alone, whatever the number of lanes.
        """
        if len(self._lanes) == 1:
            await self._reserve_loop(jobs, self._lanes[0])
            return
        # The first refusal ends the run; the other lanes' (their reserves were refused in
        # the same round, before the cancellation reached them) are the same news, and
        # would make run() raise an exception group instead of the one documented error.
        refusal: UnauthenticatedError | UnknownQueuesError | None = None

        async def lane_loop(lane: LaneRun) -> None:
            nonlocal refusal
            try:
                await self._reserve_loop(jobs, lane)
            except (UnauthenticatedError, UnknownQueuesError) as exc:
                if refusal is None:
                    refusal = exc
                    loops.cancel_scope.cancel()

        # One task per lane, so that one lane waiting for capacity, for its rate limit or
        # for a long poll never holds another's reserves.
        async with anyio.create_task_group() as loops:
            for index, lane in enumerate(self._lanes):
                loops.start_soon(lane_loop, lane, name=f"sepp lane {index}")
        if refusal is not None:
            raise refusal

    async def _reserve_loop(self, jobs: JobStarter, lane: LaneRun) -> None:
        stop = self._stop
        limiter = lane.limiter
        assert stop is not None and limiter is not None
        probe = self._probes[lane]
        while not stop.is_set():
            first = object()
            holding = False
            reserved: list[Job] | None = None
            # What the reserve may ask for: free capacity, max_jobs, the rate's tokens.
            allowed = 0
            quiet, finished = False, self._finished
            unwound = lane.reserve_unwound = anyio.Event()
            with anyio.CancelScope() as scope:
                lane.reserve_scope = scope
                if stop.is_set():
                    scope.cancel()
                # The token is taken *before* reserving, so the worker never
                # leases a job it has no room to start.
                probe.waiting_for_capacity(anyio.current_time())
                lane.awaiting_token = True
                try:
                    await limiter.acquire_on_behalf_of(first)
                finally:
                    lane.awaiting_token = False
                holding = True
                free = 1 + int(limiter.available_tokens)
                allowed = free if lane.lane.max_jobs is None else min(lane.lane.max_jobs, free)
                if self._jobs_left is not None:
                    allowed = min(allowed, self._jobs_left)
                if lane.bucket is not None:
                    # Before reserving, like the capacity: a job is leased only when it
                    # may start at once.
                    allowed = await lane.bucket.take(allowed)
                # Nothing in flight anywhere as it is sent: an empty answer means idle.
                quiet, finished = not self._runs, self._finished
                probe.reserving(anyio.current_time())
                reserved = await self._reserve(lane, allowed)
            probe.between(anyio.current_time())
            lane.reserve_scope = None
            unwound.set()
            if lane.bucket is not None and allowed:
                lane.bucket.give_back(allowed - len(reserved or ()))
            if not reserved:
                # Failed (already backed off), empty, or interrupted by
                # shutdown; a reserve that *returned* jobs is never dropped.
                if holding:
                    limiter.release_on_behalf_of(first)
                if self._until_idle and reserved is not None:
                    await self._idle_or_next(lane, quiet, finished)
                continue
            lane.idle_at = None
            for index, job in enumerate(reserved):
                token: object = first if index == 0 else object()
                if index:
                    # We asked for no more than the free capacity, so a token is
                    # normally free at once (no checkpoint needed); if not, we wait,
                    # shielded: the job is leased to us and still runs.
                    try:
                        limiter.acquire_on_behalf_of_nowait(token)
                    except anyio.WouldBlock:
                        with anyio.CancelScope(shield=True):
                            await limiter.acquire_on_behalf_of(token)
                self._start_job(jobs, lane, token, job)
            self._took(len(reserved))

    def _took(self, count: int) -> None:
        """``count`` jobs were taken: at ``run(job_limit=...)``'s limit, shut down."""
        if self._jobs_left is None:
            return
        self._jobs_left -= count
        if self._jobs_left <= 0:
            logger.info(
                "worker %s took its job_limit of jobs; draining and stopping", self.worker_id
            )
            self.shutdown()

    async def _idle_or_next(self, lane: LaneRun, quiet: bool, finished: int) -> None:
        """run(until_idle=True), after an empty reserve: stop the worker if every lane is
        idle, else wait for the next job to finish anywhere (it may have enqueued more,
        or made room) before this lane reserves again.

        A lane is idle when a reserve that started with nothing in flight in the whole
        worker came back empty; the mark holds until a job finishes (its count changes).
        A job nacked with a backoff is not ready, so it is not waited for.

        Args:
            quiet: nothing was in flight when the empty reserve was sent.
            finished: the count of finished jobs then: a job that finished while the
                reserve was on its way is a reason to reserve again at once.
        """
        if self._finished != finished:
            return
        if quiet:
            lane.idle_at = self._finished
        if not self._runs and all(run.idle_at == self._finished for run in self._lanes):
            logger.info("worker %s: every lane is idle; stopping (until_idle)", self.worker_id)
            self.shutdown()
            return
        job_done = self._job_done
        assert job_done is not None
        stop = self._stop
        assert stop is not None
        async with anyio.create_task_group() as either:

            async def wake_on(event: anyio.Event) -> None:
                await event.wait()
                either.cancel_scope.cancel()

            either.start_soon(wake_on, job_done)
            either.start_soon(wake_on, stop)

    async def _reserve(self, lane: LaneRun, count: int) -> list[Job] | None:
        """One reserve; None after a failure (logged, backed off).

        Raises:
            UnauthenticatedError, UnknownQueuesError: refused before any reserve of this
                run succeeded (a misconfigured worker; see the module docs).
        """
        accounts = self._accounts[lane]
        accounts.reserve_started()
        started = anyio.current_time()
        probe = self._probes[lane]
        # until_idle: a short poll (an empty answer is what it waits for). After a failure
        # too: an empty answer then says at once that reserves work again (for readiness
        # and the log), where a long poll would say so only after ``wait``.
        short = self._until_idle or probe.failing
        try:
            jobs = await self._client.reserve(
                lane.lane.queues,
                lease=self._lease,
                wait=0.0 if short else self._wait,
                max_jobs=count,
                worker_id=self.worker_id,
            )
        except SeppError as exc:
            probe.reserve_failed(anyio.current_time())
            accounts.reserve_failed()
            if not isinstance(exc, UnauthenticatedError | UnknownQueuesError):
                logger.warning(
                    "reserve failed (%s); retrying in %gs", exc, self._reserve_error_backoff
                )
                await self._pause(self._reserve_error_backoff)
                return None
            if not self._reserved_once:
                # Nothing has ever worked with this configuration: retrying would only
                # look healthy while doing nothing. run() raises it instead.
                raise
            # It worked before (a key revoked, a queue dropped at a server restart): keep
            # trying, but slower and slower, and loudly.
            base = self._reserve_error_backoff or _MIN_REFUSED_BACKOFF
            delay = min(base * 2 ** min(self._refusals, 32), max(MAX_REFUSED_BACKOFF, base))
            self._refusals += 1
            logger.error(
                "reserve refused (%s: %s); retrying in %gs", type(exc).__name__, exc, delay
            )
            await self._pause(delay)
            return None
        self._reserved_once = True
        self._refusals = 0
        recovered = probe.reserve_succeeded(anyio.current_time())
        if recovered is not None:
            failures, seconds = recovered
            logger.info(
                "worker %s reserving from %s again after %d failed attempt%s over %.1fs",
                self.worker_id,
                ", ".join(lane.lane.queues),
                failures,
                "" if failures == 1 else "s",
                seconds,
            )
        accounts.reserve_answered(jobs)
        if (
            not jobs
            and not short
            and anyio.current_time() - started < min(_EARLY_EMPTY, self._wait / 2)
        ):
            await self._pause(_EARLY_EMPTY_PAUSE)
        return jobs

    async def _pause(self, seconds: float) -> None:
        """Sleep, but wake up early when shutdown is requested."""
        stop = self._stop
        assert stop is not None
        with anyio.move_on_after(seconds):
            await stop.wait()

    async def _drain(self) -> None:
        if not self._runs:
            return
        logger.info("worker %s draining %d in-flight job(s)", self.worker_id, len(self._runs))
        idle = self._idle = anyio.Event()
        if self._drain_timeout is None:
            await idle.wait()
            return
        with anyio.move_on_after(self._drain_timeout):
            await idle.wait()
        if self._runs:
            cause = f"drain_timeout of {self._drain_timeout:g}s passed"
            cancelled = sum(run.stop(cause) for run in list(self._runs))
            if cancelled:
                logger.warning(
                    "drain_timeout (%gs) passed; cancelling %d handler(s) and nacking their"
                    " jobs for immediate retry",
                    self._drain_timeout,
                    cancelled,
                )
            # The cancelled handlers (and the settles on their way) end the drain; one that
            # ignores its cancellation holds it until it returns.
            await idle.wait()

    # ------------------------------------------------------------ one job

    def _start_job(self, jobs: JobStarter, lane: LaneRun, token: object, job: Job) -> None:
        # The handler gets a scope of its own only when a timeout or a heartbeat needs one,
        # or when its task has no handle to stop it by (JobRun.handler_scope, _spawn).
        # A job of a batch handler's type goes to its collector; its batch has the scope.
        collector = self._collectors.get(job.ctx.job_type) if self._collectors else None
        scoped = collector is None and (
            jobs.scoped
            or self._timer is not None
            or self._timeouts.get(job.ctx.job_type, self._job_timeout) is not None
        )
        run = JobRun(
            job.ctx, lane=lane, handler_scope=self._native.cancel_scope() if scoped else None
        )
        self._runs.add(run)
        lane.runs.add(run)
        lane.holding[run] = token
        self._accounts[lane].slot_taken()
        self._in_flight += 1
        self._max_seen = max(self._max_seen, self._in_flight)
        lane.max_seen = max(lane.max_seen, len(lane.holding))
        if collector is not None:
            collector.add(run, job)
            return
        run.task = task = jobs.start(self._job_task, job, run, JOB_TASK_NAME)
        if task is not None and run.stop_reason is not None and run.handler_scope is None:
            task.cancel()  # stopped while an eager task factory ran its first steps
