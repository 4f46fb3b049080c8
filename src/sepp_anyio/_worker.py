"""The Worker: reserve -> dispatch by job type -> ack/nack, as one anyio task group.

Shape (the reason this library exists)::

    run()
    └── task group (the worker's whole life)
        ├── reserve loop (the run() task itself)
        │     take a CapacityLimiter token, then reserve min(max_jobs, free tokens)
        └── one task per job, holding its token until the outcome is settled
              └── cancel scope shared by
                    ├── the handler
                    └── the heartbeat (extends the lease; cancels the scope if it is lost)

Under load with short handlers, when every job in flight is being acked, the reserve
loop waits for those jobs' tokens (up to half of ``max_in_flight``) before it reserves,
so a burst of acks is followed by one full reserve rather than a one-job reserve that
queues behind them at the server (see ``_gather_settling_tokens``).

Outcomes: a handler that returns acks; ``HandlerError.retry/retry_after/
permanent`` nacks with that directive; any other exception, and a job type
with no handler, nack with a backoff of ``min(2**attempt, 60)`` seconds (so a
job is never burned through its attempts in a hot loop); ``job_timeout`` nacks
for retry with reason "timed out". A job whose lease was lost is neither
acked nor nacked. Acks and nacks run shielded with a bounded timeout, so a
cancellation or a shutdown cannot lose an outcome that was already decided.

Shutdown stops reserving (a reserve in progress is cancelled; one that
already returned jobs still has them processed, since they are leased to this
worker), then drains: in-flight jobs finish, their leases still extended. With
``drain_timeout``, handlers still running when it passes are cancelled and
their jobs nacked for immediate retry (``RetryDirective.after(0)``), so
another worker can pick them up without waiting for the lease to expire.

Cancelling ``run()`` from outside is not graceful: everything is cancelled at
once, no job that was still running is settled (their leases expire and the
server redelivers them), and no task outlives ``run()``.
"""

from __future__ import annotations

import functools
import logging
import math
import os
import socket
import uuid
from collections.abc import Awaitable, Callable, Mapping, MutableMapping, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any, TypeAlias, TypeVar

import anyio
import anyio.abc

from . import _otel
from ._client import Client
from ._errors import DuplicateHandlerError, HandlerError, JobNotFoundError, SeppError
from ._lease import JobRun, heartbeat
from ._logcontext import install_record_factory, job_context
from ._types import Job, JobCtx, Payload, RetryDirective

__all__ = ["Handler", "ShutdownHandle", "Worker", "WorkerStatistics"]

logger = logging.getLogger("sepp_anyio.worker")

#: A job handler: ``async def handler(payload, ctx) -> None``.
Handler: TypeAlias = Callable[[Payload | None, JobCtx], Awaitable[None]]
H = TypeVar("H", bound=Handler)

# A reserve that comes back empty sooner than min(_EARLY_EMPTY, wait / 2) is
# "early" (a server draining at shutdown answers at once): pause before the
# next one instead of spinning.
_EARLY_EMPTY = 0.1
_EARLY_EMPTY_PAUSE = 0.25
# Upper bound on one ack or nack at the end of a job, shielded from
# cancellation: long enough for a retrying client, short enough that a dead
# server can't hold a shutdown hostage.
_SETTLE_TIMEOUT = 30.0
# Weight of the newest sample in the worker's moving averages of handler and settle times.
_SMOOTHING = 0.25
_MAX_FAILURE_BACKOFF = 60.0


def _failure_backoff(attempt: int) -> float:
    """Delay before a job whose handler crashed (or is missing) runs again."""
    return float(min(2 ** min(attempt, 16), _MAX_FAILURE_BACKOFF))


def _lone_error(group: BaseExceptionGroup[BaseException]) -> BaseException | None:
    """The single leaf of ``group`` (through nested single-member groups), if it is one
    exception that is not a cancellation; else None."""
    error: BaseException = group
    while isinstance(error, BaseExceptionGroup):
        if len(error.exceptions) != 1:
            return None
        error = error.exceptions[0]
    return None if isinstance(error, anyio.get_cancelled_exc_class()) else error


def default_worker_id() -> str:
    """``<host>-<pid>-<8 hex>``; the host from $HOSTNAME/$COMPUTERNAME if set."""
    host = os.environ.get("HOSTNAME") or os.environ.get("COMPUTERNAME") or socket.gethostname()
    return f"{host or 'unknown'}-{os.getpid()}-{uuid.uuid4().hex[:8]}"


class _JobLog(logging.LoggerAdapter[logging.Logger]):
    """Prefixes every line with the job's id, type and attempt."""

    def process(
        self, msg: Any, kwargs: MutableMapping[str, Any]
    ) -> tuple[Any, MutableMapping[str, Any]]:
        assert self.extra is not None
        ctx: JobCtx = self.extra["ctx"]  # type: ignore[assignment]
        return (
            f"job {ctx.id} ({ctx.job_type}, attempt {ctx.attempt}/{ctx.max_attempts}): {msg}",
            kwargs,
        )


@dataclass(frozen=True, slots=True)
class WorkerStatistics:
    """A snapshot of a worker's counters (see :meth:`Worker.statistics`)."""

    #: Jobs currently being handled (each holds one of ``max_in_flight`` slots).
    in_flight: int
    #: Jobs acked.
    processed: int
    #: Jobs nacked for another attempt.
    nacked_retry: int
    #: Jobs nacked onto the dead-letter path (permanent, or out of attempts).
    nacked_dead_letter: int
    #: Jobs whose lease was lost while running (cancelled, not settled).
    lease_lost: int
    #: Acks or nacks that failed (the job will be redelivered, or already was settled).
    settle_errors: int
    #: Reserve calls made, and those that failed.
    reserves: int
    reserve_errors: int
    #: The most jobs that were ever in flight at once.
    max_in_flight_seen: int


class ShutdownHandle:
    """Asks a worker to shut down gracefully; idempotent, callable from any task."""

    __slots__ = ("_worker",)

    def __init__(self, worker: Worker) -> None:
        self._worker = worker

    def shutdown(self) -> None:
        """Stop reserving and drain (see :meth:`Worker.shutdown`)."""
        self._worker.shutdown()

    @property
    def is_shutdown(self) -> bool:
        """Whether shutdown has been requested."""
        return self._worker._shutdown_requested


def _check_seconds(value: object, name: str, *, allow_zero: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"{name} must be a number of seconds, got {type(value).__name__}")
    ok = value >= 0 if allow_zero else value > 0
    if not (ok and math.isfinite(value)):
        bound = ">= 0" if allow_zero else "> 0"
        raise ValueError(f"{name} must be a finite number of seconds {bound}, got {value!r}")
    return float(value)


class Worker:
    """Processes jobs from ``queues`` with registered handlers.

    Args:
        client: a connected :class:`~sepp_anyio.Client` (it must outlive the worker).
        queues: the queues to reserve from, in priority order.
        lease: seconds of lease asked for at reserve and at each extension.
        max_in_flight: jobs handled at once (a CapacityLimiter's tokens).
        max_jobs: most jobs per reserve; None means "all free capacity".
        wait: long-poll window of each reserve, in seconds (> 0).
        auto_extend: False; True to extend leases when a third of the granted
            lease is left; or a number of seconds for a fixed interval.
        reserve_error_backoff: pause after a failed reserve.
        worker_id: sent with every reserve/ack/nack/extend; default
            ``<host>-<pid>-<random>``.
        job_timeout: cancel a handler after this long and nack the job for
            retry with reason "timed out".
        max_lease_time: stop extending one job's lease after this long; it is
            then cancelled as lease-lost when its last lease runs out.
        drain_timeout: bound on the graceful drain at shutdown (see the
            module docs); None waits for every handler.

    Raises:
        ValueError: a bad argument, naming it (empty queues or queue name,
            lease/wait <= 0, max_jobs/max_in_flight < 1, empty worker_id, ...).
    """

    def __init__(
        self,
        client: Client,
        queues: Sequence[str],
        *,
        lease: float = 30.0,
        max_in_flight: int = 16,
        max_jobs: int | None = None,
        wait: float = 30.0,
        auto_extend: bool | float = False,
        reserve_error_backoff: float = 1.0,
        worker_id: str | None = None,
        job_timeout: float | None = None,
        max_lease_time: float | None = None,
        drain_timeout: float | None = None,
    ) -> None:
        if isinstance(queues, str):
            raise TypeError("queues must be a sequence of queue names, not a single str")
        self._queues = list(queues)
        if not self._queues:
            raise ValueError("queues must name at least one queue")
        for index, name in enumerate(self._queues):
            if not isinstance(name, str) or not name:
                raise ValueError(f"queues[{index}] must be a non-empty str, got {name!r}")
        self._lease = _check_seconds(lease, "lease")
        self._wait = _check_seconds(wait, "wait")
        for name, count in (("max_in_flight", max_in_flight), ("max_jobs", max_jobs)):
            if count is None:
                continue
            if isinstance(count, bool) or not isinstance(count, int):
                raise TypeError(f"{name} must be an int, got {type(count).__name__}")
            if count < 1:
                raise ValueError(f"{name} must be >= 1, got {count}")
        self._max_in_flight = max_in_flight
        self._max_jobs = max_jobs
        self._interval: float | None
        if isinstance(auto_extend, bool):
            self._auto_extend, self._interval = auto_extend, None
        else:
            self._auto_extend = True
            self._interval = max(_check_seconds(auto_extend, "auto_extend"), 0.001)
        self._reserve_error_backoff = _check_seconds(
            reserve_error_backoff, "reserve_error_backoff", allow_zero=True
        )
        if worker_id is not None and (not isinstance(worker_id, str) or not worker_id):
            raise ValueError("worker_id must be a non-empty str (or None for a generated one)")
        self.worker_id = worker_id if worker_id is not None else default_worker_id()
        self._job_timeout = (
            None if job_timeout is None else _check_seconds(job_timeout, "job_timeout")
        )
        self._max_lease_time = (
            None if max_lease_time is None else _check_seconds(max_lease_time, "max_lease_time")
        )
        self._drain_timeout = (
            None
            if drain_timeout is None
            else _check_seconds(drain_timeout, "drain_timeout", allow_zero=True)
        )
        self._client = client
        self._handlers: dict[str, Handler] = {}
        self._catch_all: Handler | None = None

        self._shutdown_requested = False
        self._running = False
        self._stop: anyio.Event | None = None
        self._reserve_scope: anyio.CancelScope | None = None
        # Set once the current reserve has unwound (see _wait_for_cancelled_reserve).
        self._reserve_unwound: anyio.Event | None = None
        self._runs: set[JobRun] = set()
        # The reserve loop's wait for settling jobs' tokens (see _gather_settling_tokens):
        # how many it gathers, recent handler and settle durations (moving averages, in
        # seconds) and the event a returning token sets.
        self._batch = min(self._max_jobs or max_in_flight, max(1, max_in_flight // 2))
        self._handler_time = 0.0
        self._settle_time = 0.0
        self._settling = 0  # jobs in flight whose ack or nack is on its way
        self._token_back: anyio.Event | None = None
        self._idle: anyio.Event | None = None
        self._tg: anyio.abc.TaskGroup | None = None
        self._cm_tg: anyio.abc.TaskGroup | None = None
        # Counters behind statistics().
        self._processed = 0
        self._nacked_retry = 0
        self._nacked_dead = 0
        self._lease_lost = 0
        self._settle_errors = 0
        self._reserves = 0
        self._reserve_errors = 0
        self._max_seen = 0

    def __repr__(self) -> str:
        return f"<sepp_anyio.Worker {self.worker_id} queues={self._queues}>"

    # ------------------------------------------------------------ handlers

    def handler(self, job_type: str) -> Callable[[H], H]:
        """Decorator: register the decorated coroutine function for ``job_type``.

        Raises:
            DuplicateHandlerError: ``job_type`` already has a handler.
        """

        def register(fn: H) -> H:
            self.handle(job_type, fn)
            return fn

        return register

    def handle(self, job_type: str, fn: Handler) -> Worker:
        """Register ``fn`` for ``job_type``; returns the worker (calls chain).

        Raises:
            DuplicateHandlerError: ``job_type`` already has a handler (use
                :meth:`replace_handler` to swap it).
        """
        self._check_handler(job_type, fn)
        if job_type in self._handlers:
            raise DuplicateHandlerError(
                f"a handler for job type {job_type!r} is already registered"
            )
        self._handlers[job_type] = fn
        return self

    def replace_handler(self, job_type: str, fn: Handler) -> Worker:
        """Register ``fn`` for ``job_type``, replacing any handler it had."""
        self._check_handler(job_type, fn)
        self._handlers[job_type] = fn
        return self

    def remove_handler(self, job_type: str) -> Worker:
        """Unregister ``job_type``'s handler (no error if it has none)."""
        self._handlers.pop(job_type, None)
        return self

    def catch_all(self, fn: H) -> H:
        """Handle every job type without a handler of its own (replaces any
        earlier catch-all); returns ``fn``, so it works as a decorator."""
        if not callable(fn):
            raise TypeError("the catch-all handler must be an async callable")
        self._catch_all = fn
        return fn

    @staticmethod
    def _check_handler(job_type: str, fn: Handler) -> None:
        if not isinstance(job_type, str) or not job_type:
            raise ValueError(f"job_type must be a non-empty str, got {job_type!r}")
        if not callable(fn):
            raise TypeError(f"the handler for {job_type!r} must be an async callable")

    @property
    def handlers(self) -> Mapping[str, Handler]:
        """The registered handlers by job type (read-only view)."""
        return dict(self._handlers)

    # ------------------------------------------------------------ control

    def shutdown(self) -> None:
        """Stop reserving and drain; idempotent, callable from any task.

        A reserve in progress is cancelled at once (jobs it had already
        received are still processed). :meth:`run` returns when the drain is
        over. Calling it before :meth:`run` makes ``run`` return at once.
        """
        self._shutdown_requested = True
        if self._stop is not None:
            self._stop.set()
        if self._reserve_scope is not None:
            self._reserve_scope.cancel()

    def cancel_in_flight(self) -> None:
        """Shut down, and cancel the handlers still running right now.

        Their jobs are nacked for immediate retry (``RetryDirective.after(0)``),
        exactly as when ``drain_timeout`` passes, so another worker can take
        them at once instead of waiting for their leases to expire. A handler
        that finishes anyway (it swallowed the cancellation) keeps its own
        outcome. Idempotent; callable from any task. :meth:`run` returns once
        every job is settled.
        """
        self.shutdown()
        for run in list(self._runs):
            run.drain_cancelled = True
            run.scope.cancel()

    @property
    def queues(self) -> tuple[str, ...]:
        """The queues this worker reserves from, in priority order."""
        return tuple(self._queues)

    def shutdown_handle(self) -> ShutdownHandle:
        """A handle whose ``shutdown()`` shuts this worker down."""
        return ShutdownHandle(self)

    def statistics(self) -> WorkerStatistics:
        """The worker's counters at this moment."""
        return WorkerStatistics(
            in_flight=len(self._runs),
            processed=self._processed,
            nacked_retry=self._nacked_retry,
            nacked_dead_letter=self._nacked_dead,
            lease_lost=self._lease_lost,
            settle_errors=self._settle_errors,
            reserves=self._reserves,
            reserve_errors=self._reserve_errors,
            max_in_flight_seen=self._max_seen,
        )

    # ------------------------------------------------------------ running

    async def run(
        self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """Process jobs until :meth:`shutdown`, then drain and return.

        Calls ``task_status.started()`` once it is about to reserve, so
        ``await task_group.start(worker.run)`` returns when the worker is up.

        Cancellation: cancels every handler at once; jobs still running are
        left to lease expiry (not settled); returns only when every task of
        the worker has ended. ``KeyboardInterrupt`` and other non-``Exception``
        errors propagate (a lone one as itself, not wrapped in exception groups).
        A worker can run once at a time.
        """
        if self._running:
            raise RuntimeError("this worker is already running")
        self._running = True
        self._stop = anyio.Event()
        if self._shutdown_requested:
            self._stop.set()
        limiter = anyio.CapacityLimiter(self._max_in_flight)
        install_record_factory()
        logger.info(
            "worker %s starting on %s (max_in_flight=%d, lease=%gs)",
            self.worker_id,
            self._queues,
            self._max_in_flight,
            self._lease,
        )
        try:
            async with anyio.create_task_group() as tg:
                self._tg = tg
                task_status.started()
                await self._reserve_loop(tg, limiter)
                await self._drain()
        except BaseExceptionGroup as group:
            # The task groups are an implementation detail: one error (a handler's
            # KeyboardInterrupt, say) comes out as itself, not nested in two groups.
            error = _lone_error(group)
            if error is None:
                raise
            raise error from None
        finally:
            self._tg = None
            self._running = False
            self._stop = None
            self._reserve_scope = None
            logger.info("worker %s stopped", self.worker_id)

    async def __aenter__(self) -> Worker:
        """Run the worker in the background until the block ends, then drain."""
        tg = anyio.create_task_group()
        await tg.__aenter__()
        self._cm_tg = tg
        try:
            await tg.start(self.run)
        except BaseException as exc:
            await tg.__aexit__(type(exc), exc, exc.__traceback__)
            raise
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        tg, self._cm_tg = self._cm_tg, None
        assert tg is not None
        self.shutdown()
        try:
            # The body's own exception is not handed to the group (it would
            # come back wrapped); the worker drains either way.
            await tg.__aexit__(None, None, None)
        except BaseExceptionGroup as group:
            error = _lone_error(group)
            if error is None:
                raise
            raise error from None

    async def _reserve_loop(self, tg: anyio.abc.TaskGroup, limiter: anyio.CapacityLimiter) -> None:
        stop = self._stop
        assert stop is not None
        while not stop.is_set():
            first = object()
            holding = False
            jobs: list[Job] | None = None
            unwound = self._reserve_unwound = anyio.Event()
            with anyio.CancelScope() as scope:
                self._reserve_scope = scope
                if stop.is_set():
                    scope.cancel()
                # The token is taken *before* reserving, so the worker never
                # leases a job it has no room to start.
                await limiter.acquire_on_behalf_of(first)
                holding = True
                await self._gather_settling_tokens(limiter)
                jobs = await self._reserve(limiter)
            self._reserve_scope = None
            unwound.set()
            if not jobs:
                # Failed (already backed off), empty, or interrupted by
                # shutdown; a reserve that *returned* jobs is never dropped.
                if holding:
                    limiter.release_on_behalf_of(first)
                continue
            for index, job in enumerate(jobs):
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
                self._start_job(tg, limiter, token, job)

    async def _gather_settling_tokens(self, limiter: anyio.CapacityLimiter) -> None:
        """Before a reserve, when every job in flight is being settled and handlers have
        lately been quicker than their acks, wait for those jobs' tokens until half the
        capacity (or ``max_jobs``) is free.

        With short handlers, jobs finish in bursts: a reserve's worth of them acks at once,
        and the first token back would start a reserve for that one job, which the server
        then answers only after the other acks, and the rest of the capacity waits a whole
        round trip more. Their tokens are about to come back (a settle is one round trip,
        bounded by its timeout), so asking once for half the capacity makes fewer, fuller
        reserves, and the worker handles one half while the server settles the other.
        When a handler is still running, or handlers take longer than acks, a reserve
        right away keeps the handlers busy instead, so there is no wait. Cancelled with
        the reserve (shutdown).
        """
        if (
            self._settle_time <= self._handler_time
            or 1 + int(limiter.available_tokens) >= self._batch
            or not self._runs
            or self._settling < len(self._runs)
        ):
            return
        # No job starts while this loop waits, so the jobs in flight are the ones waited for.
        try:
            while self._runs and 1 + int(limiter.available_tokens) < self._batch:
                token_back = self._token_back = anyio.Event()
                await token_back.wait()
        finally:
            self._token_back = None

    def _token_returned(self, limiter: anyio.CapacityLimiter) -> None:
        """A job's token is back: wake a reserve waiting on settling jobs once it has
        what it waits for."""
        token_back = self._token_back
        if token_back is not None and (
            not self._runs or 1 + int(limiter.available_tokens) >= self._batch
        ):
            token_back.set()

    async def _reserve(self, limiter: anyio.CapacityLimiter) -> list[Job] | None:
        """One reserve; None after a failure (logged, backed off)."""
        free = 1 + int(limiter.available_tokens)
        count = free if self._max_jobs is None else min(self._max_jobs, free)
        self._reserves += 1
        started = anyio.current_time()
        try:
            jobs = await self._client.reserve(
                self._queues,
                lease=self._lease,
                wait=self._wait,
                max_jobs=count,
                worker_id=self.worker_id,
            )
        except SeppError as exc:
            self._reserve_errors += 1
            metrics = _otel.metrics()
            if metrics.enabled:
                metrics.reserves_failed.add(1)
            logger.warning("reserve failed (%s); retrying in %gs", exc, self._reserve_error_backoff)
            await self._pause(self._reserve_error_backoff)
            return None
        metrics = _otel.metrics()
        if metrics.enabled:
            metrics.reserves_completed.add(1, {"jobs": "some" if jobs else "empty"})
        if not jobs and anyio.current_time() - started < min(_EARLY_EMPTY, self._wait / 2):
            await self._pause(_EARLY_EMPTY_PAUSE)
        return jobs

    async def _wait_for_cancelled_reserve(self) -> None:
        """If shutdown has cancelled a reserve that is still unwinding, wait until it has.

        A reserve cancelled here stays parked on the server until its stream reset
        arrives. A nack for retry sent before that reset would make the job ready while
        the dead reserve is still parked, and the server would lease it to that reserve,
        which nobody reads: the job would sit out a whole lease (or be dead-lettered as
        LEASE_EXPIRED on its last attempt) instead of going to the next worker at once.
        The reserve's cleanup sends the reset before it unwinds, so waiting for that
        puts the reset on the connection ahead of the nack.
        """
        scope, unwound = self._reserve_scope, self._reserve_unwound
        if scope is not None and scope.cancel_called and unwound is not None:
            await unwound.wait()

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
            logger.warning(
                "drain_timeout (%gs) passed; cancelling %d handler(s) and nacking their jobs"
                " for immediate retry",
                self._drain_timeout,
                len(self._runs),
            )
            for run in list(self._runs):
                run.drain_cancelled = True
                run.scope.cancel()

    # ------------------------------------------------------------ one job

    def _start_job(
        self, tg: anyio.abc.TaskGroup, limiter: anyio.CapacityLimiter, token: object, job: Job
    ) -> None:
        run = JobRun(job.ctx)
        self._runs.add(run)
        self._max_seen = max(self._max_seen, len(self._runs))
        tg.start_soon(self._job_task, limiter, token, job, run, name=f"sepp job {job.ctx.id}")

    async def _job_task(
        self, limiter: anyio.CapacityLimiter, token: object, job: Job, run: JobRun
    ) -> None:
        try:
            await self._process(job, run)
        finally:
            self._runs.discard(run)
            if run.settling:
                self._settling -= 1
            limiter.release_on_behalf_of(token)
            self._token_returned(limiter)
            if not self._runs and self._idle is not None:
                self._idle.set()

    async def _process(self, job: Job, run: JobRun) -> None:
        """Handle one job inside its CONSUMER span, with its log context and metrics."""
        ctx = job.ctx
        metrics = _otel.metrics()

        def attributes() -> dict[str, Any]:
            return {
                "messaging.destination.name": ctx.queue,
                "messaging.message.id": ctx.id,
                "messaging.client.id": self.worker_id,
                "sepp.job.type": ctx.job_type,
                "sepp.job.attempt": ctx.attempt,
            }

        with (
            job_context(ctx, self.worker_id),
            _otel.process_span(ctx.trace_context, attributes) as span,
        ):
            # Read once: the +1 and the -1 must go to the same place.
            measured = metrics.enabled
            started = 0.0
            if measured:
                metrics.in_flight.add(1)
                started = anyio.current_time()
            outcome = "cancelled"
            try:
                outcome = await self._handle(job, run, span)
            finally:
                if measured:
                    metrics.in_flight.add(-1)
                    metrics.duration.record(
                        anyio.current_time() - started,
                        {"job_type": ctx.job_type, "outcome": outcome},
                    )

    async def _handle(self, job: Job, run: JobRun, span: Any) -> str:
        """Run the handler and settle the job; return the outcome's name."""
        ctx = job.ctx
        log = _JobLog(logger, {"ctx": ctx})
        run.started = anyio.current_time()
        handler = self._handlers.get(ctx.job_type) or self._catch_all
        if handler is None:
            delay = _failure_backoff(ctx.attempt)
            log.warning("no handler registered for this job type; retrying in %gs", delay)
            _otel.mark_error(span, "no handler registered for the job type")
            return await self._settle(
                run,
                log,
                RetryDirective.after(delay),
                f"no handler registered for job_type {ctx.job_type!r}",
            )

        directive: RetryDirective | None = None  # None: ack
        reason = ""
        with run.scope:
            if self._auto_extend or self._max_lease_time is not None:
                async with anyio.create_task_group() as tg:
                    tg.start_soon(
                        functools.partial(
                            heartbeat,
                            run,
                            lease=self._lease,
                            interval=self._interval,
                            extend=self._auto_extend,
                            max_lease_time=self._max_lease_time,
                            wall_clock=self._client._wall_clock,
                            log=log,
                        )
                    )
                    try:
                        directive, reason = await self._call(handler, job, log, span)
                    finally:
                        # The heartbeat lives exactly as long as the handler.
                        tg.cancel_scope.cancel()
            else:
                # Nothing to watch: no heartbeat task, no task group (cheaper per job).
                directive, reason = await self._call(handler, job, log, span)

        if run.lease_lost:
            # The flag decides, even if the handler swallowed the cancellation
            # and returned: the job may already belong to another worker.
            self._lease_lost += 1
            log.error("lease lost (%s); the job is not settled here", run.lost_reason)
            _otel.add_event(span, "sepp.lease_lost", {"sepp.lease_lost.reason": run.lost_reason})
            _otel.mark_error(span, f"lease lost: {run.lost_reason}")
            metrics = _otel.metrics()
            if metrics.enabled:
                metrics.lease_lost.add(1, {"job_type": ctx.job_type})
            return "lease_lost"
        if run.drain_cancelled and run.scope.cancelled_caught:
            directive = RetryDirective.after(0)
            reason = "worker shut down before the handler finished (drain_timeout)"
            _otel.mark_error(span, reason)
        return await self._settle(run, log, directive, reason)

    async def _call(
        self,
        handler: Handler,
        job: Job,
        log: logging.LoggerAdapter[logging.Logger],
        span: Any = None,
    ) -> tuple[RetryDirective | None, str]:
        """Run the handler; return the outcome: ``(None, "")`` to ack, else the nack's
        directive and reason. Cancellation and non-``Exception`` errors propagate."""
        try:
            if self._job_timeout is None:
                await handler(job.payload, job.ctx)
            else:
                with anyio.move_on_after(self._job_timeout) as timeout:
                    await handler(job.payload, job.ctx)
                if timeout.cancelled_caught:
                    log.warning("handler timed out after %gs", self._job_timeout)
                    _otel.mark_error(span, "timed out")
                    return RetryDirective.default(), "timed out"
        except HandlerError as exc:
            log.info("handler asked for %s", exc)
            _otel.mark_error(span, str(exc), exc)
            return exc.directive, exc.reason
        except Exception as exc:
            delay = _failure_backoff(job.ctx.attempt)
            log.exception("handler raised %s; retrying in %gs", type(exc).__name__, delay)
            _otel.mark_error(span, f"handler raised {type(exc).__name__}", exc)
            return RetryDirective.after(delay), f"handler raised {type(exc).__name__}: {exc}"
        return None, ""

    async def _settle(
        self,
        run: JobRun,
        log: logging.LoggerAdapter[logging.Logger],
        directive: RetryDirective | None,
        reason: str,
    ) -> str:
        """Ack (``directive`` None) or nack, shielded from cancellation, bounded in time.

        Returns the outcome: ``"ack"``, ``"retry"``, ``"dead_letter"`` or
        ``"settle_failed"`` (logged; the job will be redelivered).
        """
        ctx = run.ctx
        metrics = _otel.metrics()
        labels = {"job_type": ctx.job_type}
        run.settling = True
        self._settling += 1
        started = anyio.current_time()
        self._handler_time += (started - run.started - self._handler_time) * _SMOOTHING
        # One scope: shielded from outer cancellation, but cancelled by its own deadline.
        with anyio.CancelScope(shield=True, deadline=started + _SETTLE_TIMEOUT) as bound:
            try:
                if directive is None:
                    await self._client.ack(ctx)
                    self._processed += 1
                    if metrics.enabled:
                        metrics.processed.add(1, labels)
                    log.debug("acked")
                    return "ack"
                await self._wait_for_cancelled_reserve()
                dead = await self._client.nack(ctx, directive, reason)
                outcome = "dead_letter" if dead else "retry"
                if metrics.enabled:
                    metrics.nacked.add(1, {**labels, "outcome": outcome})
                if dead:
                    self._nacked_dead += 1
                    log.warning("nacked; dead-lettered (%s)", reason or "no reason")
                else:
                    self._nacked_retry += 1
                    log.info("nacked for retry (%s)", reason or "no reason")
                return outcome
            except JobNotFoundError:
                self._settle_errors += 1
                log.error(
                    "could not %s: job not found; either the lease was lost and the job will be"
                    " redelivered, or a retried attempt already succeeded and only its response"
                    " was lost",
                    "ack" if directive is None else "nack",
                )
                return "settle_failed"
            except SeppError as exc:
                self._settle_errors += 1
                log.error(
                    "could not %s (%s); the job will be redelivered after its lease expires",
                    "ack" if directive is None else "nack",
                    exc,
                )
                return "settle_failed"
            finally:
                took = anyio.current_time() - started
                self._settle_time += (took - self._settle_time) * _SMOOTHING
        assert bound.cancelled_caught
        self._settle_errors += 1
        log.error(
            "%s did not finish within %gs; the job will be redelivered after its lease expires",
            "ack" if directive is None else "nack",
            _SETTLE_TIMEOUT,
        )
        return "settle_failed"
