"""The Worker: reserve -> dispatch by job type -> ack/nack, as one anyio task group.

Shape (the reason this library exists)::

    run()
    └── lifespan (entered before the first reserve, left after every job task ended)
        └── task group (the worker's whole life)
            ├── reserve loop per lane (the run() task itself when there is one lane)
            ├── the heartbeat timer (with heartbeats: auto_extend or max_lease_time)
            │     take a CapacityLimiter token, then the lane's rate tokens, then
            │     reserve min(max_jobs, free tokens, rate tokens)
            └── one task per job (on trio, in a nursery of trio's inside the group:
                ``_spawn``), holding its token until its outcome is decided, then a
                settle slot (and no token) until the ack or nack is done
                  └── the heartbeat's task group, whose cancel scope is the job's
                        ├── middleware, then the handler, in the handler's own scope
                        │   (a shutdown cancels it; its deadline is the job's timeout;
                        │   on asyncio without a timeout or a heartbeat there is none,
                        │   and a shutdown cancels the job's task: JobRun.handler_scope)
                        └── the heartbeat (extends the lease; cancels the job if lost),
                            started there by the heartbeat timer when its first wait
                            is over (``_heartbeat_timer``: most jobs end before)
            └── a collector per batch handler (:meth:`Worker.batch`), running its batches
                (the jobs of a batch type are started by the reserve loop, holding their
                tokens, but handed to it instead of a task of their own: see ``_batch``)

A worker given queue names has one lane of them (with ``max_in_flight`` and ``max_jobs``);
one given :class:`~sepp_anyio.Lane` objects has a lane, a limiter and a reserve loop per
``Lane`` (see ``_lane``). Typed tasks (:meth:`Worker.task`) decode and validate the
payload before the function runs (``_task_call``); ``on_outcome`` is told each delivery's
:class:`~sepp_anyio.Outcome` after it is settled (``_outcome``).

Capacity model (why a job gives its token back before its ack is answered). A lane's
``max_in_flight`` tokens bound the jobs whose handlers may run: the loop takes a token
before it reserves and asks only for the tokens it can take, so the worker never holds a
lease on a job it cannot start now. By Little's law each token carries at most one job per
``T``, the time the token is held, so a lane handles at most ``max_in_flight / T`` jobs a
second. If the token were held until the ack's reply came back, ``T`` would be ``reserve
RTT + handler + settle RTT``: on loopback the round trips are a fraction of a millisecond,
but between two machines each is milliseconds; at 2.5 ms each way, a token would carry a
1-ms job once per 11 ms, the handler running for one of them. So the token is given back
the moment the outcome is decided (the handler is over): the ack or nack then travels on a
separate *settle slot* (``max_in_flight`` of them per lane, held through the ack or nack
and ``on_outcome``), and the next reserve goes out while the acks are still in flight, so
``T = reserve RTT + handler`` (6 ms in that example, nearly twice the rate). Jobs leased to
the worker at once are bounded by ``2 * max_in_flight`` (handlers running, plus outcomes
being settled); the settle slots need no more room: by Little's law again they hold the
rate times the settle RTT in jobs, under ``max_in_flight`` whenever a settle is no slower
than a reserve plus a handler. When the settles are the bottleneck (a slow server), a
finished job waits for a slot *while still holding its token*, so the back-pressure reaches
the reserve loop and nothing more is leased. A job being settled is not one the worker has
to start: its outcome is known, and only its reply is on the way, so "never lease a job it
cannot start" still holds. Tokens come back as handlers end, without waiting for a reply,
so a burst of jobs that end together (one reserve's worth of short handlers) gives its
tokens back within one scheduling round and is reserved again in one full reserve; tokens
that come back one by one while a reserve is out are all asked for by the next one.

Order on the wire (why a finished job yields before its ack). The server answers the
calls of one connection roughly in the order they arrive. If a batch's acks went out
before the reserve that its tokens wake, the server would work through every ack before
it leased the next batch, and the worker would sit idle meanwhile; then the worker would
handle the new batch while the server sat idle. So a job that has given its token back
yields to the scheduler (without being a cancellation point) before it sends its ack or
nack: the woken reserve loop runs first, its reserve leaves ahead of the acks, and the
server leases the next batch while the worker is still sending the last one's acks.
asyncio runs ready tasks in the order they became ready, so one yield is enough; trio
runs each batch of ready tasks in a random direction, so a job yields twice there.

What the order cannot do: a server with group commit (the reference server is one) that
reads the reserve and the acks behind it in one piece commits them as one group and
answers them together, so the reserve's reply still waits for the acks' work. The worker
does not hold the acks back until the reserve is answered, nor keep a second reserve in
flight per lane: each cost more elsewhere than it gained (the A/B figures are in
docs/explanation/worker.rst). No reserve loop that reserves only free capacity can pass
``max_in_flight / (handler + unloaded reserve round trip)`` jobs a second (a token is held
from the reserve that brings its job until the handler ends).

Handlers are ``async def handler(payload, ctx)`` or plain ``def handler(payload, ctx)``;
which one is decided once, at registration (a ``functools.partial`` of either, a bound
method and an object whose ``__call__`` is ``async def`` count as what they wrap). An
async handler runs on the event loop. A plain one runs in a worker thread
(``anyio.to_thread.run_sync``, with a ``CapacityLimiter`` of ``sync_threads`` tokens of its
own), while its heartbeat keeps extending the lease on the event loop; if it returns an
awaitable (a lambda around an async function, say), that is awaited on the event loop.
Python cannot interrupt a thread: a cancellation (lost lease, ``job_timeout``, shutdown)
reaches the handler only when it calls ``anyio.from_thread.check_cancelled()`` (which
raises it) or returns; until then its job keeps its ``max_in_flight`` slot and its
thread, and ``run()`` does not return.

Outcomes: a handler that returns acks; ``HandlerError.retry/retry_after/
permanent`` nacks with that directive; any other exception, and a job type
with no handler, nack under the retry policy (the task's ``retry``, else the worker's;
by default a delay drawn below ``min(2**attempt, 60)`` seconds, so a job is never burned
through its attempts in a hot loop; an exception of a ``dead_letter_on`` type
dead-letters); ``job_timeout`` nacks for retry with reason "timed out". A job reserved
past its ``sepp.expires_at`` deadline is not run: it is nacked dead-lettered with reason
"expired". A job whose lease was lost is neither
acked nor nacked. When the worker cancels a handler (lost lease, ``job_timeout``,
``drain_timeout``, :meth:`Worker.cancel_in_flight`) it sets a flag first, and the flag
decides the outcome, whatever the handler does with the cancellation: one that swallows
it and returns normally (or raises something else) is still not acked. Acks and nacks
run shielded with a bounded timeout, so a cancellation or a shutdown cannot lose an
outcome that was already decided.

Shutdown stops reserving (a reserve in progress is cancelled; one that
already returned jobs still has them processed, since they are leased to this
worker), then drains: in-flight jobs finish, their leases still extended. With
``drain_timeout``, handlers still running when it passes are cancelled and
their jobs nacked for immediate retry (``RetryDirective.after(0)``), so
another worker can pick them up without waiting for the lease to expire.
A handler that ignores its cancellation holds the drain (and ``run()``) until it returns,
its lease still extended, so that no other worker gets the job meanwhile.

Misconfiguration: until one reserve of a ``run()`` has succeeded, a reserve refused with
:class:`~sepp_anyio.UnauthenticatedError` (a missing or wrong API key) or
:class:`~sepp_anyio.UnknownQueuesError` (a queue a strict server does not declare) is
permanent: ``run()`` raises it rather than retrying forever while looking healthy. After a
reserve has succeeded, the same errors (a key revoked, a queue removed by a server restart)
are retried with exponential backoff up to 30 s, logged at ERROR each time. Other reserve
errors (the server unavailable, ...) are retried every ``reserve_error_backoff`` seconds.
The first reserve after a failure is a short poll, so that the one that works again says so
at once: readiness, off once the failures have lasted ``unready_after`` seconds, comes
back, and the recovery is logged once at INFO (a long poll would answer only after
``wait``).

Cancelling ``run()`` from outside is not graceful: everything is cancelled at
once, no job that was still running is settled (their leases expire and the
server redelivers them), and no task outlives ``run()``.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import socket
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING, Any, Generic, Self, TypeAlias, TypeVar, overload

import anyio
import anyio.abc
import anyio.lowlevel
import anyio.to_thread

from .. import _otel
from .._client import Client
from .._cron import Cron
from .._health import LaneProbe, MetricsRegistry, WorkerHealth
from .._health._source import DEFAULT_MARGIN, DEFAULT_UNREADY_AFTER
from .._io._deadlines import Deadlines
from .._io._native import ANYIO, Native, native
from .._logcontext import job_log_records
from .._model._checks import check_count, check_seconds, check_str
from .._model._error_root import InvalidArgumentError, InvalidArgumentTypeError
from .._model._errors import (
    DuplicateHandlerError,
)
from .._model._job import JobCtx
from .._model._payload import Payload
from .._model._retry_policy import DEFAULT_RETRY, Retry
from .._tasks._task import Task
from .._tasks._task_call import typed_call
from . import _lifespan
from ._accounting import LaneAccounts
from ._batch import BatchCall, BatchCollector, BatchSpec, batch_target
from ._batch_item import BatchCtx, BatchItem
from ._crons import checked_cron, start_crons
from ._heartbeat_timer import HeartbeatTimer
from ._lane import Lane, LaneRun, lanes_of
from ._lease import JobRun
from ._middleware import Middleware, check_middleware
from ._outcome import OutcomeHook, check_outcome_hook
from ._registry import (
    AsyncHandler,
    H,
    Handler,
    HandlerAdapters,
    HandlerSignatureError,
    check_handler,
)
from ._reserving import MAX_REFUSED_BACKOFF, ReserveLoops
from ._spawn import job_starter, lone_error
from ._statistics import WorkerStatistics

if TYPE_CHECKING:
    from typing_extensions import TypeVar as DefaultTypeVar

    #: The type of the lifespan's value (``worker.state``); ``Any`` when not given.
    StateT = DefaultTypeVar("StateT", default=Any)
else:
    StateT = TypeVar("StateT")

__all__ = [
    "Handler",
    "HandlerSignatureError",
    "ShutdownHandle",
    "Worker",
    "WorkerStatistics",
    "check_handler",
]

logger = logging.getLogger("sepp_anyio.worker")

T = TypeVar("T")
_S = TypeVar("_S")
#: A typed task's result type.
R = TypeVar("R")

#: A batch handler: ``fn(items, ctx)``, ``async def`` or a plain ``def`` (run in a thread).
BatchFunction: TypeAlias = Callable[[list[BatchItem[T]], BatchCtx[_S]], Awaitable[None] | None]

#: The lane name of the single reserve loop in health probes and metrics.
_LANE = "default"


def default_worker_id() -> str:
    """``<host>-<pid>-<8 hex>``; the host from $HOSTNAME/$COMPUTERNAME if set."""
    host = os.environ.get("HOSTNAME") or os.environ.get("COMPUTERNAME") or socket.gethostname()
    return f"{host or 'unknown'}-{os.getpid()}-{uuid.uuid4().hex[:8]}"


def enclose_lifespan(worker: Worker, outer: AbstractAsyncContextManager[Any]) -> None:
    """Make ``outer`` the outermost part of ``worker``'s lifespan (internal).

    For ``sepp-anyio worker`` with a factory that yields: the code after the factory's
    yield must run inside :meth:`Worker.run`, after the drain, around whatever lifespan
    the worker was built with (whose state the handlers still see).
    """
    worker._lifespan = _lifespan.chained(outer, worker._lifespan)


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


class Worker(ReserveLoops, HandlerAdapters, anyio.AsyncContextManagerMixin, Generic[StateT]):
    """Processes jobs from ``queues`` with registered handlers.

    Generic in the type of its lifespan's value (:attr:`state`, ``ctx.state``); a bare
    ``Worker`` means ``Worker[Any]``.

    Args:
        client: a connected :class:`~sepp_anyio.Client` (it must outlive the worker).
        queues: the queues to reserve from, in priority order; or a list of
            :class:`~sepp_anyio.Lane`, each with its own queues and limits (then
            ``max_in_flight`` and ``max_jobs`` must not be given).
        lease: seconds of lease asked for at reserve and at each extension.
        max_in_flight: jobs handled at once (a CapacityLimiter's tokens); None: 16.
        max_jobs: most jobs per reserve; None means "all free capacity".
        wait: long-poll window of each reserve, in seconds (> 0).
        auto_extend: False; True to extend leases when a third of the granted
            lease is left; or a number of seconds for a fixed interval.
        reserve_error_backoff: pause after a failed reserve; also the first pause of the
            exponential backoff (doubling up to 30 s; 1 s when this is 0) after a reserve
            refused for its credentials or queues, once a reserve has succeeded (before
            that, such a refusal makes :meth:`run` raise).
        unready_after: seconds a lane's reserves may keep failing (the server gone or
            unreachable, a key revoked) before :meth:`readiness` (``/readyz``) turns false;
            it turns true again at the next reserve that succeeds, which is logged once at
            INFO with the count and length of the failures. 0: not ready from the first
            failure.
        worker_id: sent with every reserve/ack/nack/extend; default
            ``<host>-<pid>-<random>``.
        job_timeout: cancel a handler after this long and nack the job for
            retry with reason "timed out".
        max_lease_time: stop extending one job's lease after this long; it is
            then cancelled as lease-lost when its last lease runs out.
        drain_timeout: bound on the graceful drain at shutdown (see the
            module docs); None waits for every handler.
        sync_threads: worker threads for plain (non-async) handlers, shared by all of
            them; default ``max_in_flight``. A sync job waiting for a thread holds its
            ``max_in_flight`` slot, and its lease is still extended.
        lifespan: ``lifespan(worker)`` returns an async context manager (or is an async
            generator function yielding once): entered before the first reserve, left
            after the drain; what it yields is :attr:`state` and ``ctx.state`` (see
            ``_lifespan``).
        middleware: callables ``m(ctx)`` returning async context managers, entered in
            order around every handler call, inside its timeout (see ``_middleware``).
        on_outcome: ``on_outcome(ctx, outcome, error)``, sync or async, called once per
            delivery with its :class:`~sepp_anyio.Outcome` after the settle; its own
            failure is logged and changes nothing. For a job a shutdown released it runs
            shielded from the shutdown's cancellation, for at most 30 seconds, like the
            nack before it.
        retry: the :class:`~sepp_anyio.Retry` policy of every handler whose task has none
            of its own: the delay of the nack after a handler (or middleware) raised, and
            the exception types it dead-letters at once; a job type with no handler is
            retried after its delay too. None: ``Retry(backoff=2.0, factor=2.0,
            max_delay=60.0, jitter="full")``.

    Raises:
        InvalidArgumentError: a bad argument, naming it (no queues, a queue name the server
            would refuse, lease < 1 ms, wait <= 0, max_jobs/max_in_flight/sync_threads < 1,
            an empty worker_id, ...); also a ``ValueError``. The rules are the client's
            (``Client.reserve`` checks the same values alike).
        InvalidArgumentTypeError: an argument of the wrong type, naming it; also a
            ``TypeError``.
    """

    def __init__(
        self,
        client: Client,
        queues: Sequence[str] | Sequence[Lane],
        *,
        lease: float = 30.0,
        max_in_flight: int | None = None,
        max_jobs: int | None = None,
        wait: float = 30.0,
        auto_extend: bool | float = False,
        reserve_error_backoff: float = 1.0,
        unready_after: float = DEFAULT_UNREADY_AFTER,
        worker_id: str | None = None,
        job_timeout: float | None = None,
        max_lease_time: float | None = None,
        drain_timeout: float | None = None,
        sync_threads: int | None = None,
        lifespan: Callable[
            [Worker[StateT]], AbstractAsyncContextManager[StateT] | AsyncIterator[StateT]
        ]
        | None = None,
        middleware: Sequence[Middleware] = (),
        on_outcome: OutcomeHook | None = None,
        retry: Retry | None = None,
    ) -> None:
        # One lane of the names (with max_in_flight and max_jobs), or the Lanes given;
        # queue names and counts by the same rules as Client.reserve's, checked now.
        self._lanes = tuple(LaneRun(lane) for lane in lanes_of(queues, max_in_flight, max_jobs))
        self._queues = [queue for run in self._lanes for queue in run.lane.queues]
        self._lease = check_seconds(lease, "lease", minimum="millisecond")
        self._wait = check_seconds(wait, "wait", minimum="positive")
        # Default: as many threads as jobs may be in flight, over all lanes.
        self._max_in_flight = sum(run.lane.max_in_flight for run in self._lanes)
        self._sync_threads = (
            self._max_in_flight
            if sync_threads is None
            else check_count(sync_threads, "sync_threads")
        )
        # The threads' limiter, made by run() (a limiter belongs to one event loop).
        self._sync_limiter: anyio.CapacityLimiter | None = None
        self._interval: float | None
        if isinstance(auto_extend, bool):
            self._auto_extend, self._interval = auto_extend, None
        else:
            self._auto_extend = True
            self._interval = max(
                check_seconds(auto_extend, "auto_extend", minimum="positive"), 0.001
            )
        self._reserve_error_backoff = check_seconds(reserve_error_backoff, "reserve_error_backoff")
        self.worker_id = (
            default_worker_id() if worker_id is None else check_str(worker_id, "worker_id")
        )
        self._job_timeout = (
            None
            if job_timeout is None
            else check_seconds(job_timeout, "job_timeout", minimum="positive")
        )
        self._max_lease_time = (
            None
            if max_lease_time is None
            else check_seconds(max_lease_time, "max_lease_time", minimum="positive")
        )
        # Whether each job gets a heartbeat task (decided once, read per job).
        self._heartbeats = self._auto_extend or self._max_lease_time is not None
        self._drain_timeout = (
            None if drain_timeout is None else check_seconds(drain_timeout, "drain_timeout")
        )
        self._client = client
        # The handlers as registered (for the ``handlers`` view), and what a job calls:
        # the handler itself when it is async, else an adapter that runs it in a thread.
        # Decided once, at registration, so the hot path has no check of its own.
        self._handlers: dict[str, Handler] = {}
        self._calls: dict[str, AsyncHandler] = {}
        self._catch_all: Handler | None = None
        self._catch_all_call: AsyncHandler | None = None
        # Per job type, a typed task's own timeout (it wins over job_timeout).
        self._timeouts: dict[str, float] = {}
        # The retry policy of every handler, and per job type a typed task's own.
        if retry is not None and not isinstance(retry, Retry):
            raise InvalidArgumentTypeError(
                f"retry must be a sepp.Retry or None, got {type(retry).__name__}"
            )
        self._retry = DEFAULT_RETRY if retry is None else retry
        self._retries: dict[str, Retry] = {}
        self._lifespan = _lifespan.check_lifespan(lifespan)
        self._middleware = check_middleware(middleware)
        self._on_outcome = check_outcome_hook(on_outcome)
        self._state: Any = None
        self._has_state = lifespan is None
        # Whether a reserve of the current run() has succeeded (see _reserve), and how many
        # refused reserves in a row since (the exponent of their backoff).
        self._reserved_once = False
        self._refusals = 0

        self._shutdown_requested = False
        self._running = False
        self._stop: anyio.Event | None = None
        self._runs: set[JobRun] = set()
        # run(until_idle=True): whether it is on, and the count of jobs finished (the
        # lanes' idle marks compare with it) with an event it replaces at each finish.
        self._until_idle = False
        self._finished = 0
        self._job_done: anyio.Event | None = None
        self._idle: anyio.Event | None = None
        self._tg: anyio.abc.TaskGroup | None = None
        # Starts the jobs' heartbeats when due (one per run(), with heartbeats on).
        self._timer: HeartbeatTimer | None = None
        # The settles' bounds (a task per run(), see _start_deadlines) and the backend's
        # clock (anyio's until a run knows the backend).
        self._deadlines = Deadlines()
        self._native: Native = ANYIO
        self._now: Callable[[], float] = anyio.current_time
        # Jobs holding a max_in_flight token now, over all lanes, and the most ever at once
        # (the other counters are per lane).
        self._in_flight = 0
        self._max_seen = 0
        self._hand_off_yields = 1
        # Probes and metrics for serve_health. The margin covers the longest pause the loop
        # takes between two reserves (the backoff after a failed or refused reserve).
        self._health = WorkerHealth(
            wait=self._wait,
            margin=DEFAULT_MARGIN + max(self._reserve_error_backoff, MAX_REFUSED_BACKOFF),
            unready_after=check_seconds(unready_after, "unready_after"),
        )
        # Each lane's probe and metric series, labelled "default" for a worker of queue
        # names and by the lane's queues ("a+b") for a Lane.
        given_lanes = not isinstance(queues, str) and any(isinstance(q, Lane) for q in queues)
        self._probes: dict[LaneRun, LaneProbe] = {}
        # Every count of a lane, to its statistics, Prometheus and OpenTelemetry at once.
        self._accounts: dict[LaneRun, LaneAccounts] = {}
        for run in self._lanes:
            label = "+".join(run.lane.queues) if given_lanes else _LANE
            self._probes[run] = self._health.lane(label)
            prometheus = self._health.worker_metrics.lane(
                label, capacity=run.lane.max_in_flight, queues=run.lane.queues
            )
            self._accounts[run] = LaneAccounts(run, prometheus, client)
        self._crons: list[Cron[Any]] = []
        # Batch handlers by job type, and their collectors while running (``_batch``).
        self._batch_specs: dict[str, BatchSpec] = {}
        self._collectors: dict[str, BatchCollector] = {}
        self._all_collectors: tuple[BatchCollector, ...] = ()
        # run(job_limit=...): jobs this run may still take (None: no limit).
        self._jobs_left: int | None = None

    def __repr__(self) -> str:
        return f"<sepp_anyio.Worker {self.worker_id} queues={self._queues}>"

    # ------------------------------------------------------------ handlers

    def handler(self, job_type: str) -> Callable[[H], H]:
        """Decorator: register the decorated function (``async def`` or ``def``) for
        ``job_type``.

        Raises:
            DuplicateHandlerError: ``job_type`` already has a handler.
            TypeError: the function cannot be called as ``handler(payload, ctx)``.
        """

        def register(fn: H) -> H:
            self.handle(job_type, fn)
            return fn

        return register

    def handle(self, job_type: str, fn: Handler) -> Worker:
        """Register ``fn`` for ``job_type``; returns the worker (calls chain).

        ``fn`` is ``async def fn(payload, ctx)`` or a plain ``def fn(payload, ctx)``, which
        runs in a worker thread (see the module docs).

        Raises:
            DuplicateHandlerError: ``job_type`` already has a handler (use
                :meth:`replace_handler` to swap it).
            ValueError: ``job_type`` is not a non-empty str.
            InvalidArgumentTypeError: (a ``TypeError``) ``fn`` is not a function, or cannot
                be called as ``handler(payload, ctx)``; the message names the job type,
                what is expected and what was given.
        """
        call = self._checked(job_type, fn)
        if job_type in self._handlers:
            raise DuplicateHandlerError(job_type)
        self._handlers[job_type] = fn
        self._calls[job_type] = call
        self._timeouts.pop(job_type, None)
        self._retries.pop(job_type, None)
        return self

    def replace_handler(self, job_type: str, fn: Handler) -> Worker:
        """Register ``fn`` for ``job_type``, replacing any handler it had (checked as by
        :meth:`handle`; a running worker uses it from the next job on)."""
        call = self._checked(job_type, fn)
        self._handlers[job_type] = fn
        self._calls[job_type] = call
        self._timeouts.pop(job_type, None)
        self._forget_batch(job_type)
        self._retries.pop(job_type, None)
        return self

    def remove_handler(self, job_type: str) -> Worker:
        """Unregister ``job_type``'s handler (no error if it has none)."""
        self._handlers.pop(job_type, None)
        self._forget_batch(job_type)
        self._calls.pop(job_type, None)
        self._timeouts.pop(job_type, None)
        self._retries.pop(job_type, None)
        return self

    def task(
        self, task: Task[T, R]
    ) -> Callable[
        [Callable[[T, JobCtx[StateT]], Awaitable[R] | R]],
        Callable[[T, JobCtx[StateT]], Awaitable[R] | R],
    ]:
        """Decorator: handle ``task``'s job type with the decorated function, which is
        called as ``fn(value, ctx)`` with the payload decoded and validated as ``task``'s
        type.

        ``async def`` functions run on the event loop; plain ``def`` ones run in a worker
        thread, as sync handlers do (the payload is validated in that thread too). A
        payload that is not JSON or does not validate is dead-lettered on that attempt,
        with a reason naming the field (no retry can help it), and counted in
        ``statistics().nacked_dead_letter``. The task's ``timeout`` wins over the worker's
        ``job_timeout``, and its ``retry`` over the worker's ``retry``. For a job that asks
        for its result (``reply_to``), what the function returns is validated against the
        task's result type and sent to the reply queue before the job is acked (a value
        that does not validate fails the attempt).

        Raises:
            DuplicateHandlerError: the job type already has a handler.
            InvalidArgumentError: this worker does not reserve from ``task.queue``.
            TypeError: the function cannot be called as ``fn(value, ctx)``, or its first
                parameter is annotated with a class the task's values are not.
        """
        if not isinstance(task, Task):
            raise InvalidArgumentTypeError(
                f"Worker.task() takes a sepp.Task, got a {type(task).__name__}"
            )
        if task.queue not in self.queues:
            raise InvalidArgumentError(
                f"task {task!r} is enqueued to queue {task.queue!r}, which this worker does "
                f"not reserve from (queues: {list(self.queues)})"
            )

        def register(
            fn: Callable[[T, JobCtx[StateT]], Awaitable[R] | R],
        ) -> Callable[[T, JobCtx[StateT]], Awaitable[R] | R]:
            task.check_handler(fn)
            job_type = task.job_type
            if job_type in self._handlers:
                raise DuplicateHandlerError(job_type)
            what = f"task {task!r}"
            call = typed_call(task, fn, check_handler(what, fn), self._run_in_thread)
            self._handlers[job_type] = fn  # type: ignore[assignment]
            self._calls[job_type] = call
            if task.timeout is not None:
                self._timeouts[job_type] = task.timeout
            else:
                self._timeouts.pop(job_type, None)
            if task.retry is not None:
                self._retries[job_type] = task.retry
            else:
                self._retries.pop(job_type, None)
            return fn

        return register

    @overload
    def batch(
        self, task: Task[T], *, max_size: int = ..., max_wait: float = ...
    ) -> Callable[[BatchFunction[T, StateT]], BatchFunction[T, StateT]]: ...

    @overload
    def batch(
        self, task: str, *, max_size: int = ..., max_wait: float = ...
    ) -> Callable[
        [BatchFunction[Payload | None, StateT]], BatchFunction[Payload | None, StateT]
    ]: ...

    def batch(
        self, task: Task[Any] | str, *, max_size: int = 100, max_wait: float = 0.05
    ) -> Callable[[BatchFunction[Any, StateT]], BatchFunction[Any, StateT]]:
        """Decorator: handle the jobs of ``task`` (a :class:`~sepp_anyio.Task`, or a job type
        for raw payloads) in batches: ``fn(items, ctx)`` gets up to ``max_size`` jobs at
        once, a :class:`~sepp_anyio.BatchItem` each, and a :class:`~sepp_anyio.BatchCtx`.

        The worker gathers the jobs it reserves of that type, waiting at most ``max_wait``
        seconds after the first (less when the batch is full, when its lane has no room
        to reserve more, or at a shutdown), calls ``fn`` once, then acks or nacks each job
        as its item says (undecided: acked; when ``fn`` raises, settled as that exception
        would settle one job). Each job holds one ``max_in_flight`` slot, is extended by
        its own heartbeat while the batch runs, and gets its own ``on_outcome`` call. A
        task's ``timeout`` (else ``job_timeout``) bounds the whole batch; a shutdown's
        cancellation releases the undecided jobs for an immediate retry. A plain ``def``
        runs in a worker thread, as sync handlers do. A payload that does not validate is
        dead-lettered without reaching ``fn`` (payloads are decoded on the event loop, for
        a sync function too). Middleware is not entered around it.

        Args:
            task: the typed task, or a job type (``item.value`` is then the job's
                :class:`~sepp_anyio.Payload` or None).
            max_size: most jobs per call (>= 1).
            max_wait: seconds to wait for more jobs after the first (>= 0, and under the
                worker's ``lease``: a gathered job has no heartbeat yet).

        Raises:
            DuplicateHandlerError: the job type already has a handler.
            InvalidArgumentError: a bad ``max_size``/``max_wait``, or this worker does not
                reserve from ``task.queue``.
            InvalidArgumentTypeError: (a ``TypeError``) ``task`` is neither a ``Task`` nor a
                str, or the function cannot be called as ``fn(items, ctx)``.
            RuntimeError: the worker is running (register batch handlers before
                :meth:`run`).
        """
        target = batch_target(task, max_size, max_wait, self.queues, self._lease)
        job_type, size, wait = target.job_type, target.max_size, target.max_wait

        def register(fn: BatchFunction[Any, StateT]) -> BatchFunction[Any, StateT]:
            if self._running:
                raise RuntimeError("register batch handlers before run(): this worker is running")
            is_async = check_handler(target.what, fn)
            if job_type in self._handlers:
                raise DuplicateHandlerError(job_type)
            # A plain function runs in a thread as a sync handler does (the thread's call
            # is fn(items, ctx), the handler's fn(payload, ctx)).
            call: BatchCall = (
                fn  # type: ignore[assignment]
                if is_async
                else functools.partial(self._run_in_thread, fn)  # type: ignore[arg-type]
            )
            self._handlers[job_type] = fn  # type: ignore[assignment]
            self._calls.pop(job_type, None)
            self._timeouts.pop(job_type, None)
            if target.retry is not None:
                self._retries[job_type] = target.retry
            self._batch_specs[job_type] = BatchSpec(
                job_type, call, size, wait, target.decode, target.timeout
            )
            return fn

        return register

    def catch_all(self, fn: H) -> H:
        """Handle every job type without a handler of its own (replaces any
        earlier catch-all); returns ``fn``, so it works as a decorator.

        Raises:
            TypeError: ``fn`` cannot be called as ``handler(payload, ctx)``.
        """
        call = self._adapted(fn, check_handler("the catch-all", fn))
        self._catch_all = fn
        self._catch_all_call = call
        return fn

    def _checked(self, job_type: str, fn: Handler) -> AsyncHandler:
        check_str(job_type, "job_type")
        return self._adapted(fn, check_handler(f"job type {job_type!r}", fn))

    @property
    def handlers(self) -> Mapping[str, Handler]:
        """The registered handlers by job type (read-only view)."""
        return dict(self._handlers)

    def cron(self, cron: Cron[Any]) -> Worker:
        """Run ``cron``'s scheduler inside this worker: from :meth:`run`'s start until its
        shutdown signal (a draining worker enqueues nothing more), in the worker's own task
        group and through its client. Any number of workers may run the same crons: each
        slot is enqueued once (see :class:`~sepp_anyio.Cron`). Returns the worker.

        Raises:
            TypeError: ``cron`` is not a :class:`~sepp_anyio.Cron`.
            ValueError: a cron of the same name is already registered (their idempotency
                keys would collide).
            RuntimeError: the worker is running (register crons before :meth:`run`).
        """
        self._crons.append(checked_cron(cron, self._crons, self._running))
        return self

    @property
    def crons(self) -> tuple[Cron[Any], ...]:
        """The registered crons, in registration order."""
        return tuple(self._crons)

    # ------------------------------------------------------------ control

    def shutdown(self) -> None:
        """Stop reserving and drain; idempotent, callable from any task.

        A reserve in progress is cancelled at once (jobs it had already
        received are still processed). :meth:`run` returns when the drain is
        over. Calling it before :meth:`run` makes ``run`` return at once.
        """
        self._shutdown_requested = True
        self._health.mark_shutting_down()
        if self._stop is not None:
            self._stop.set()
        for lane in self._lanes:
            if lane.reserve_scope is not None:
                lane.reserve_scope.cancel()

    def cancel_in_flight(self, *, reason: str | None = None) -> None:
        """Shut down, and cancel the handlers still running right now.

        Their jobs are nacked for immediate retry (``RetryDirective.after(0)``),
        exactly as when ``drain_timeout`` passes, so another worker can take
        them at once instead of waiting for their leases to expire. That outcome
        is decided when they are cancelled: a handler that swallows the cancellation
        and returns (or raises something else) is nacked all the same. A handler
        whose outcome was already decided (it had returned; its ack is on its way)
        keeps it. Idempotent; callable from any task (not from another thread).

        :meth:`run` returns once every job is settled, which is only after every
        cancelled handler has returned: one that ignores the cancellation (a sync
        handler that never calls ``anyio.from_thread.check_cancelled()``, an async one
        that swallows it and goes on) holds ``run()`` until it does.

        Args:
            reason: why, for the nack's reason and the log (default:
                ``"cancel_in_flight() was called"``); a CLI passes its signal, say.
        """
        self.shutdown()
        cause = reason or "cancel_in_flight() was called"
        cancelled = sum(run.stop(cause) for run in list(self._runs))
        if cancelled:
            logger.warning(
                "worker %s cancelling %d running handler(s) (%s); their jobs are nacked for"
                " an immediate retry",
                self.worker_id,
                cancelled,
                cause,
            )

    @property
    def queues(self) -> tuple[str, ...]:
        """The queues this worker reserves from, in priority order."""
        return tuple(self._queues)

    def shutdown_handle(self) -> ShutdownHandle:
        """A handle whose ``shutdown()`` shuts this worker down."""
        return ShutdownHandle(self)

    def statistics(self) -> WorkerStatistics:
        """The worker's counters at this moment: totals, and ``lanes``, one
        :class:`~sepp_anyio.LaneStatistics` per lane in the order given (one lane of
        ``queues`` when no ``Lane`` was given)."""
        lanes = tuple(run.statistics() for run in self._lanes)
        return WorkerStatistics(
            in_flight=self._in_flight,
            processed=sum(lane.processed for lane in lanes),
            nacked_retry=sum(lane.nacked_retry for lane in lanes),
            nacked_dead_letter=sum(lane.nacked_dead_letter for lane in lanes),
            lease_lost=sum(lane.lease_lost for lane in lanes),
            settle_errors=sum(lane.settle_errors for lane in lanes),
            reserves=sum(lane.reserves for lane in lanes),
            reserve_errors=sum(lane.reserve_errors for lane in lanes),
            max_in_flight_seen=self._max_seen,
            lanes=lanes,
            expired=sum(lane.expired for lane in lanes),
        )

    # ------------------------------------------------------------ health (a HealthSource)

    def readiness(self) -> bool:
        """Whether the worker takes jobs: from :meth:`run`'s start until the first
        :meth:`shutdown`, except while a lane's reserves have been failing for
        ``unready_after`` seconds or more (``/readyz`` of :func:`~sepp_anyio.serve_health`)."""
        return self._health.readiness()

    def liveness(self, now: float) -> tuple[bool, str]:
        """Whether the reserve loop is alive at ``now`` (``anyio.current_time()``), with
        the reason in words: inside a reserve, waiting for free capacity, or past its last
        reserve by at most ``wait`` + a margin; also before :meth:`run` and while draining,
        not once :meth:`run` has returned (``/livez``)."""
        return self._health.liveness(now)

    @property
    def metrics(self) -> MetricsRegistry:
        """The worker's Prometheus metrics (``/metrics``): ``sepp_jobs_total``,
        ``sepp_jobs_in_flight``, ``sepp_job_duration_seconds``,
        ``sepp_reserve_errors_total``, ``sepp_lease_extensions_total``,
        ``sepp_settle_failures_total``, each with a ``lane`` label; and the autoscaling
        signals ``sepp_job_queue_wait_seconds`` (by ``queue``), ``sepp_worker_saturation``
        (time-weighted since the previous scrape) and ``sepp_worker_idle_reserves_total``
        (by ``lane``)."""
        return self._health.metrics

    @property
    def lanes(self) -> tuple[Lane, ...]:
        """The worker's lanes (one of ``queues`` when no ``Lane`` was given)."""
        return tuple(run.lane for run in self._lanes)

    @property
    def _reserve_scope(self) -> anyio.CancelScope | None:
        """A reserve in progress, if any lane has one (for tests that wait for it)."""
        return next((r.reserve_scope for r in self._lanes if r.reserve_scope), None)

    # ------------------------------------------------------------ running

    async def run(
        self,
        *,
        until_idle: bool = False,
        job_limit: int | None = None,
        task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        """Process jobs until :meth:`shutdown`, then drain and return.

        With ``until_idle=True`` ("burst" mode) it also shuts itself down once every
        lane's reserve has come back empty with nothing in flight (after the last job
        finished): what is ready has been done. Its reserves then poll without a long
        wait. A job nacked with a backoff, or scheduled for later, is not waited for.

        With ``job_limit``, the run takes at most that many jobs (no reserve asks for
        more than are left) and, once it has taken the last one, shuts down by itself:
        it drains them and returns (``sepp-anyio worker --max-jobs-per-child`` recycles
        processes with it).

        Calls ``task_status.started()`` once it is about to make its first reserve,
        before the server has answered it, so ``await task_group.start(worker.run)``
        returns when the worker is up (an idle queue does not hold it for a long poll).
        "Started" therefore does not mean "accepted by the server": if that first
        reserve (or any before one succeeds) is refused for a missing or wrong API key
        or an undeclared queue of a strict server, ``run()`` then raises that error; in
        ``async with worker`` it cancels the block's body and comes out of the block as
        itself. Once a reserve has succeeded, those errors are retried (see the module
        docs), as every other reserve error always is.

        Cancellation: cancels every handler at once; jobs still running are
        left to lease expiry (not settled); returns only when every task of
        the worker has ended, including a handler that swallows its cancellation
        and goes on (a sync handler's thread cannot be interrupted either). The
        same holds for a graceful shutdown: ``run()`` cannot return before such a
        handler does. ``KeyboardInterrupt`` and other non-``Exception`` errors
        propagate (a lone one as itself, not wrapped in exception groups).
        A worker can run once at a time.

        Raises:
            UnauthenticatedError: the server refused the credentials before any reserve
                of this run succeeded.
            UnknownQueuesError: a strict server does not declare a queue, before any
                reserve of this run succeeded. Either comes alone, whatever the number of
                lanes: the first lane refused ends the run, and the refusals of the others
                (cancelled then) are not raised.
            RuntimeError: the worker is already running.
            InvalidArgumentError, InvalidArgumentTypeError: a ``job_limit`` that is not
                an int >= 1.
        """
        if self._running:
            raise RuntimeError("this worker is already running")
        if job_limit is not None:
            check_count(job_limit, "job_limit")
        self._jobs_left = job_limit
        self._running = True
        self._stop = anyio.Event()
        if self._shutdown_requested:
            self._stop.set()
        backend = native()
        for lane in self._lanes:
            lane.start(backend.waiter)
        self._until_idle = bool(until_idle)
        self._job_done = anyio.Event() if until_idle else None
        self._sync_limiter = anyio.CapacityLimiter(self._sync_threads)
        self._reserved_once = False
        self._refusals = 0
        # asyncio runs ready tasks in the order they became ready, so one yield puts the
        # woken reserve loop ahead of this job's settle; trio runs each batch of ready
        # tasks in a random direction, so it takes two.
        loop = anyio.lowlevel.current_token().native_token
        self._hand_off_yields = 1 if isinstance(loop, asyncio.AbstractEventLoop) else 2
        # The job attributes on log records (_logcontext) for this run only: the first
        # running worker of the process installs the factory, the last one puts the
        # previous one back (after the "stopped" line, which carries them too).
        with job_log_records():
            metrics = _otel.metrics()
            if metrics.enabled:
                metrics.count_in_flight(self)
            logger.info(
                "worker %s starting on %s (max_in_flight=%d, lease=%gs)",
                self.worker_id,
                self._queues,
                self._max_in_flight,
                self._lease,
            )
            if self._lifespan is not None:
                self._state, self._has_state = None, False
            try:
                # The lifespan encloses the task group: set up before the first reserve (and
                # before started()), torn down once every job task has ended.
                async with (
                    _lifespan.enter(self._lifespan, self, self._keep_state),
                    anyio.create_task_group() as tg,
                ):
                    self._tg = tg
                    crons = await start_crons(tg, self._client, self._crons, self.worker_id)
                    self._start_batches(tg)
                    heartbeats = self._start_heartbeat_timer(tg)
                    deadlines = self._start_deadlines(tg, backend)
                    self._health.mark_started()
                    for accounts in self._accounts.values():
                        accounts.run_started()
                    if self._shutdown_requested:
                        self._health.mark_shutting_down()
                    task_status.started()
                    async with job_starter(tg) as jobs:
                        await self._reserve_loops(jobs)
                        crons.cancel()  # a worker that stops taking jobs stops scheduling them
                        self._close_batches()  # what they gathered runs now; then they end
                        await self._drain()
                    heartbeats.cancel()  # no job is left to start a heartbeat for
                    deadlines.cancel()  # nor a settle to bound
            except BaseExceptionGroup as group:
                # The task groups are an implementation detail: one error (a handler's
                # KeyboardInterrupt, say) comes out as itself, not nested in two groups.
                error = lone_error(group)
                if error is None:
                    raise
                raise error from None
            finally:
                self._health.mark_stopped()
                for accounts in self._accounts.values():
                    accounts.run_stopped()
                self._tg = None
                self._timer = None
                self._running = False
                self._stop = None
                self._job_done = None
                self._collectors, self._all_collectors = {}, ()
                for lane in self._lanes:
                    lane.reserve_scope = None
                logger.info("worker %s stopped", self.worker_id)

    def _keep_state(self, state: Any) -> None:
        self._state, self._has_state = state, True

    @property
    def state(self) -> StateT:
        """What the lifespan yielded (None without a lifespan); readable from setup on,
        and after :meth:`run` returns, until the next run.

        Raises:
            RuntimeError: the worker has a lifespan that has not been entered yet.
        """
        if not self._has_state:
            raise RuntimeError(
                "worker.state is set by its lifespan, which has not been entered yet "
                "(it is entered when run() starts)"
            )
        state: StateT = self._state
        return state

    @contextlib.asynccontextmanager
    async def __asynccontextmanager__(self) -> AsyncIterator[Self]:
        """``async with worker``: run the worker in the background until the block ends,
        then shut it down and drain (:meth:`run`'s rules).

        The block's own exception comes out as itself once the worker has drained. When
        :meth:`run` fails (a refused first reserve), the block is cancelled and comes out
        as that error, unwrapped.
        """
        body_error: BaseException | None = None
        try:
            async with anyio.create_task_group() as tg:
                await tg.start(self.run)
                try:
                    yield self
                except BaseException as exc:
                    # Not handed to the group (it would cancel the drain and come back
                    # wrapped); the worker drains either way, then it is re-raised.
                    body_error = exc
                finally:
                    self.shutdown()
        except BaseExceptionGroup as group:
            error = lone_error(group)
            if error is None:
                raise
            raise error from None
        if body_error is not None:
            raise body_error
