"""Engine: every semantic of the sepp server, on anyio, behind one async handler per RPC.

Theory of operation
-------------------
::

    async with Engine(config, store, clock)      store.open() -> rebuild QueueState
      task group
        committer task    group commit: writes of many RPCs -> one store transaction
        timer task        sleeps until the earliest deadline (scheduled promotion, lease
                          expiry, dedup expiry, dead-letter retention), capped at
                          storage.sweep_interval_ms; woken early by an earlier deadline
    RPC handlers run in the *caller's* task (the network adapter's handler, or a test).

The handlers take and return the generated ``sepp.v1`` messages, so they are not public:
they are private methods of :class:`Engine`, and the two adapters that speak the wire (the
network service and ``testing``'s in-process channel) reach them through :func:`rpc_of`,
the engine's :class:`EngineRpc`.  The adapters read a handler from that object on every
call, so a test that replaces a field of it (fault injection, a spy) changes what is served.

An RPC validates, then mutates the in-memory ``QueueState`` synchronously (no await between
reading and writing the state, so RPCs never interleave inside a mutation), submits the
resulting writes to the committer and waits until they are durable before replying.  Parked
reserves are woken by the committer only after the commit that made a job ready.

Invariant: every reply, including NOT_FOUND and other answers that only *read* the state,
is sent after the state it describes is durable (reads submit an empty barrier ticket).

Storage failure: a failed commit is retried until it succeeds (``_committer.py`` states the
rule); meanwhile :attr:`Engine.storage_failed` is true, health answers NOT_SERVING, and every
RPC that would touch the queue state is refused with UNAVAILABLE "storage unavailable: ..."
*before* it touches it (so refusing changes nothing and the call may be retried).
GetServerInfo, which reads only the configuration, still answers.  The timer pauses until
the store has recovered.

All times are integer milliseconds from the injected :class:`~sepp_anyio.server.Clock`.
Methods must be called from the event loop the engine runs in.
"""

from __future__ import annotations

import logging
import math
from collections import Counter
from collections.abc import AsyncGenerator, Awaitable, Callable, Iterable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, Self, final

import anyio
import betterproto2
from anyio.abc import TaskStatus

from sepp_anyio._model._error_root import StatusCode
from sepp_anyio._model._groups import unwrap
from sepp_anyio._proto.sepp import v1 as pb
from sepp_anyio._version import __version__

from .._config._config import ServerConfig
from .._config._sections import QueueLimits
from .._errors import EngineError
from .._store._memory import MemoryStore
from .._store._records import (
    DeadLetter,
    DeadLetterCause,
    DedupEntry,
    JobState,
    QueueStats,
    StoredJob,
)
from .._store._store import Store
from ._clock import Clock
from ._committer import Committer, Ticket
from ._console_ops import (
    Activity,
    DeadLetterPage,
    JobPage,
    LeaseHolders,
    list_dead_letters,
    list_jobs,
    oldest_ready_ms,
    purge,
    requeue,
)
from ._convert import (
    custom_from_pb,
    dead_letter_to_pb,
    duration_ms,
    job_to_pb,
    ms_duration,
    ms_timestamp,
    timestamp_ms,
)
from ._ids import JobIds
from ._policy import retry_delay_ms
from ._state import Changes, QueueState
from ._validate import (
    ack_problem,
    classify_enqueue,
    drain_problem,
    extend_problem,
    nack_problem,
    quote,
    reserve_problem,
)

logger = logging.getLogger(__name__)


class _Waiter:
    """A parked reserve.  Woken by cancelling the scope of its sleep."""

    __slots__ = ("scope", "woken")

    def __init__(self) -> None:
        self.woken = False
        self.scope: anyio.CancelScope | None = None

    def wake(self) -> None:
        self.woken = True
        if self.scope is not None:
            self.scope.cancel()


def _invalid(problem: str | None) -> None:
    if problem is not None:
        raise EngineError(StatusCode.INVALID_ARGUMENT, problem)


@dataclass(slots=True)
class EngineRpc:
    """The per-RPC handlers of one engine (internal; get them with :func:`rpc_of`).

    Each field starts as the engine's own handler of that RPC (its private method of the
    same name, documented there: what it raises, what cancelling it leaves behind).  The
    fields are writable on purpose: tests wrap or replace one to inject faults or record
    calls, and the adapters look the handler up here on every call.
    """

    enqueue_batch: Callable[[pb.EnqueueBatchRequest], Awaitable[pb.EnqueueBatchResponse]]
    enqueue_atomic: Callable[[pb.EnqueueBatchRequest], Awaitable[pb.EnqueueAtomicResponse]]
    reserve: Callable[[pb.ReserveRequest], Awaitable[pb.ReserveResponse]]
    ack: Callable[[pb.AckRequest], Awaitable[pb.AckResponse]]
    nack: Callable[[pb.NackRequest], Awaitable[pb.NackResponse]]
    extend: Callable[[pb.ExtendRequest], Awaitable[pb.ExtendResponse]]
    drain_dead_letters: Callable[
        [pb.DrainDeadLettersRequest], Awaitable[pb.DrainDeadLettersResponse]
    ]
    get_server_info: Callable[[pb.GetServerInfoRequest], Awaitable[pb.GetServerInfoResponse]]


def rpc_of(engine: Engine) -> EngineRpc:
    """``engine``'s RPC handlers (internal): what the network service and the in-process
    channel call, one field per RPC of ``sepp.v1.QueueService``.  Always the same object
    for one engine."""
    return engine._rpc


@final
class Engine(anyio.AsyncContextManagerMixin):
    """The reference server's core.  Use as ``async with Engine(config, store, clock) as e:``.

    Args:
        config: the configuration (default: all defaults).  Storage settings, dedup windows
            and dead-letter retention are read once here; the rest follows :meth:`reload`.
        store: where jobs are kept (default: a fresh :class:`MemoryStore`).
        clock: the time source (default: :class:`Clock`, the wall clock advanced by the
            event loop's clock).

    Entering opens the store and recovers everything in it (expired leases are handled by the
    timer right away).  Leaving shuts down (parked reserves return empty), commits what is
    queued, stops the timer and closes the store; later calls raise UNAVAILABLE.

    Calls reach it over the network (:class:`NetworkServer`) or in-process
    (:func:`~sepp_anyio.testing.open_in_memory_client`, :class:`~sepp_anyio.testing.MemoryChannel`);
    its per-RPC handlers, which speak the wire's messages, are internal.  Whole-call failures
    are answered with the protocol's status and message (:class:`EngineError` inside the
    server).  Cancelling an RPC while it waits for its commit does not undo it: the change is
    made and committed anyway.

    Cancellation: an RPC changes the engine's state before its one wait (for the commit), so
    a cancelled call loses only its reply (each handler says what that means).  Cancelled
    while entering, the engine leaves the store closed.  Leaving because of a cancellation
    still shuts down and closes the store (shielded), but the commit task is cancelled with
    the rest: writes not yet committed may not be durable, and the calls waiting for them
    get UNAVAILABLE.  A clean stop leaves the ``async with`` normally.
    """

    def __init__(
        self,
        config: ServerConfig | None = None,
        store: Store | None = None,
        clock: Clock | None = None,
    ) -> None:
        self._config = config if config is not None else ServerConfig()
        # Restart-only settings are always read from the boot config.
        self._boot = self._config
        self._store: Store = store if store is not None else MemoryStore()
        self._clock = clock if clock is not None else Clock()
        self._state = QueueState(
            dead_letter_retention_ms=self._boot.storage.dead_letter_retention_ms
        )
        self._committer: Committer | None = None
        self._waiters: dict[str, set[_Waiter]] = {}
        self._shutdown = False
        self._running = False
        self._closed = False
        self._timer_scope: anyio.CancelScope | None = None
        self._timer_target: int | None = None
        # A seam for tests that need reproducible ids (property-based tests replay examples).
        self._new_job_id: Callable[[], str] = JobIds()
        # What the web console shows beyond the state: rates and who holds each lease.
        self._activity = Activity()
        self._holders = LeaseHolders()
        self._started_ms: int | None = None
        self._rpc = EngineRpc(
            enqueue_batch=self._enqueue_batch,
            enqueue_atomic=self._enqueue_atomic,
            reserve=self._reserve,
            ack=self._ack,
            nack=self._nack,
            extend=self._extend,
            drain_dead_letters=self._drain_dead_letters,
            get_server_info=self._get_server_info,
        )

    # ------------------------------------------------------------------ lifecycle

    @asynccontextmanager
    async def __asynccontextmanager__(self) -> AsyncGenerator[Self]:
        if self._running or self._closed:
            raise RuntimeError("an Engine can be entered only once")
        contents = await self._store.open()
        try:
            self._state.load(contents)
            self._started_ms = self._clock.now_ms()
            committer = self._committer = Committer(self._store)
            try:
                async with anyio.create_task_group() as tg:
                    await tg.start(committer.run)
                    timer_lifetime = anyio.CancelScope()
                    await tg.start(self._run_timer, timer_lifetime)
                    self._running = True
                    try:
                        yield self
                    finally:
                        self._running = False
                        self._closed = True
                        self.shutdown()
                        timer_lifetime.cancel()
                        # The committer returns once everything submitted is durable.
                        committer.close()
            except BaseExceptionGroup as group:
                # The engine's own tasks do not raise, so a lone exception comes from the
                # body of the `async with`: give it back unwrapped, as if there were no group.
                error = unwrap(group)
                if error is not group:
                    raise error from None
                raise
        finally:
            with anyio.CancelScope(shield=True):
                await self._store.aclose()

    def shutdown(self) -> None:
        """Begin shutdown: parked reserves return an empty reply at once, and so do later ones.

        Leased jobs are not handed back (their leases expire, after a restart if need be).
        Other RPCs keep working until the engine is left.  Idempotent; synchronous.
        """
        self._shutdown = True
        for waiters in self._waiters.values():
            for waiter in tuple(waiters):
                waiter.wake()

    @property
    def shutting_down(self) -> bool:
        """True once :meth:`shutdown` has been called (or the engine has been left)."""
        return self._shutdown

    @property
    def config(self) -> ServerConfig:
        """The live configuration."""
        return self._config

    @property
    def clock(self) -> Clock:
        return self._clock

    @property
    def store(self) -> Store:
        return self._store

    def reload(self, config: ServerConfig) -> None:
        """Hot reload: limits, queues and strict mode follow *config* from now on.

        As in the real server, storage settings, dedup windows and dead-letter retention keep
        their boot values.
        """
        self._config = config

    def close_queue(self, queue: str) -> None:
        """Admin hook: mark *queue* as being deleted; enqueues get ``QueueClosing``."""
        self._state.set_closing(queue, True)

    def reopen_queue(self, queue: str) -> None:
        """Admin hook: undo :meth:`close_queue`."""
        self._state.set_closing(queue, False)

    # ------------------------------------------------------------------ introspection

    def stats(self) -> dict[str, QueueStats]:
        """Counts per queue (every queue seen so far and every declared queue)."""
        return self._state.stats(q.name for q in self._config.queues)

    def snapshot_job(self, job_id: str) -> StoredJob | None:
        """The live job (ready, scheduled or inflight) with this id, or None."""
        return self._state.job(job_id.lower())

    @property
    def storage_failed(self) -> bool:
        """True while the store is failing to commit (health then answers NOT_SERVING).

        Set by a failed commit, cleared when a retry of it succeeds; see the module docstring.
        """
        return self._committer is not None and self._committer.failed

    def dead_letters(self, queue: str | None = None) -> list[DeadLetter]:
        """The retained dead letters, oldest first, without draining them."""
        return self._state.dead_letters(queue)

    # ------------------------------------------------------------------ plumbing

    def _begin(self, *, touches_state: bool = True) -> Committer:
        """The committer, once the engine is known to be able to take this call.

        Call it before touching the state (see the module docstring on storage failure).
        """
        if not self._running or self._committer is None:
            if self._closed:
                raise EngineError(StatusCode.UNAVAILABLE, "server is shut down")
            raise RuntimeError("the Engine is not running; use `async with Engine(...)`")
        if touches_state:
            self._committer.check()
        return self._committer

    def _submit(self, ch: Changes) -> Ticket:
        assert self._committer is not None
        after_commit = None
        if ch.ready_queues:
            queues = frozenset(ch.ready_queues)

            def after_commit() -> None:
                self._wake(queues)

        ticket = self._committer.submit(ch.writes, after_commit)
        if ch.earliest_deadline is not None:
            self._poke_timer(ch.earliest_deadline)
        return ticket

    async def _commit(self, ch: Changes) -> None:
        await self._submit(ch).wait()

    def _wake(self, queues: Iterable[str]) -> None:
        for queue in queues:
            for waiter in tuple(self._waiters.get(queue, ())):
                waiter.wake()

    def _poke_timer(self, deadline_ms: int) -> None:
        if (
            self._timer_scope is not None
            and self._timer_target is not None
            and deadline_ms < self._timer_target
        ):
            self._timer_scope.cancel()

    async def _run_timer(
        self, lifetime: anyio.CancelScope, *, task_status: TaskStatus[None]
    ) -> None:
        interval = self._boot.storage.sweep_interval_ms
        limit = self._boot.storage.sweep_limit
        committer = self._committer
        assert committer is not None
        with lifetime:
            task_status.started()
            while True:
                # A sweep while the store fails would only pile up writes behind the held
                # group; deadlines that pass meanwhile are handled once it has recovered.
                await committer.wait_recovered()
                if lifetime.cancel_called:
                    # Shutting down: the committer no longer takes writes. A wake-up of
                    # the sleep below and this cancellation can come together, and the
                    # wake-up's scope may swallow the cancellation's delivery (seen with a
                    # 1 ms lease expiring as the engine closed: UNAVAILABLE from exit).
                    return
                now = self._clock.now_ms()
                ch = Changes()
                more = self._state.sweep(now, limit, ch)
                if ch.writes:
                    # Not awaited: the committer wakes parked reserves once this is durable.
                    self._submit(ch)
                if more:
                    await anyio.lowlevel.checkpoint()
                    continue
                next_deadline = self._state.next_deadline()
                target = now + interval
                if next_deadline is not None and next_deadline < target:
                    target = next_deadline
                self._timer_target = target
                with anyio.CancelScope() as scope:
                    self._timer_scope = scope
                    await self._clock.sleep_until_ms(target)
                self._timer_scope = None
                self._timer_target = None

    # ------------------------------------------------------------------ enqueue

    def _check_batch(self, request: Any) -> list[Any]:
        jobs = list(request.jobs)
        if not jobs:
            raise EngineError(StatusCode.INVALID_ARGUMENT, "batch must contain at least one job")
        limit = self._config.limits.max_enqueue_batch
        if len(jobs) > limit:
            raise EngineError(
                StatusCode.INVALID_ARGUMENT, f"batch exceeds max_enqueue_batch ({limit})"
            )
        return jobs

    def _insert(self, job: Any, limits: QueueLimits, now: int, ch: Changes) -> str:
        job_id = self._new_job_id()
        scheduled_at = None if job.scheduled_at is None else timestamp_ms(job.scheduled_at)
        later = scheduled_at is not None and scheduled_at > now
        requested_attempts = job.max_attempts
        max_attempts = min(
            limits.default_max_attempts if requested_attempts is None else requested_attempts,
            limits.max_attempts_ceiling,
        )
        record = StoredJob(
            id=job_id,
            queue=job.queue,
            job_type=job.job_type,
            state=JobState.SCHEDULED if later else JobState.READY,
            priority=limits.default_priority if job.priority is None else job.priority,
            enqueued_at_ms=now,
            seq=self._state.take_seq(),
            attempt=1,
            max_attempts=max_attempts,
            due_ms=scheduled_at if later and scheduled_at is not None else 0,
            scheduled_at_ms=scheduled_at,
            payload_data=None if job.payload is None else bytes(job.payload.data),
            payload_encoding=None if job.payload is None else job.payload.encoding,
            traceparent=None if job.trace_context is None else job.trace_context.traceparent,
            tracestate=None if job.trace_context is None else job.trace_context.tracestate,
            custom=custom_from_pb(job.custom),
        )
        dedup = None
        if job.idempotency_key is not None:
            # The window is the boot-time one: hot reload does not change it.
            window = self._boot.limits_for(job.queue).dedup_window_ms
            dedup = DedupEntry(
                queue=job.queue,
                key=job.idempotency_key,
                job_id=job_id,
                enqueued_at_ms=now,
                deadline_ms=now + window,
            )
        self._state.insert(record, ch, dedup)
        self._activity.record(job.queue, "enqueue", now)
        return job_id

    def _enqueue_one(self, job: Any, now: int, ch: Changes) -> Any:
        """Commit-time rules of a best-effort enqueue; returns a JobResult."""
        queue = job.queue
        if self._state.is_closing(queue):
            return pb.JobResult(
                rejection=pb.JobRejection(queue_closing=pb.QueueClosing(queue=queue))
            )
        if job.idempotency_key is not None:
            hit = self._state.dedup_hit(queue, job.idempotency_key, now)
            if hit is not None:
                return pb.JobResult(
                    success=pb.EnqueueResponse(job_id=hit.job_id, deduplicated=True)
                )
        limits = self._config.limits_for(queue)
        cap = limits.max_queue_depth
        # Jobs accepted earlier in this batch are already in live_depth; dedup hits never are.
        if cap is not None and self._state.live_depth(queue) >= cap:
            return pb.JobResult(
                rejection=pb.JobRejection(queue_full=pb.QueueFull(queue=queue, limit=cap))
            )
        job_id = self._insert(job, limits, now, ch)
        return pb.JobResult(success=pb.EnqueueResponse(job_id=job_id, deduplicated=False))

    async def _enqueue_batch(self, request: pb.EnqueueBatchRequest) -> pb.EnqueueBatchResponse:
        """EnqueueBatch: best effort, one ``JobResult`` per job in request order.

        Each job is classified (§3.2, first failing check wins), then, in order: a closing
        queue gives ``QueueClosing``, a live idempotency row gives the existing id with
        ``deduplicated=true`` (also for a key repeated inside the batch), a full queue gives
        ``QueueFull``, otherwise the job is inserted.

        Raises:
            EngineError: INVALID_ARGUMENT for an empty or oversized batch; UNAVAILABLE
                "storage unavailable: ..." while the store is failing (nothing was enqueued) and
                after close; INTERNAL "storage commit failed" if the engine stopped while the
                store still failed to commit the jobs (they may or may not be committed).

        Cancellation: the jobs are enqueued (and committed) anyway; only the reply with their
        ids is lost (resending with the same idempotency keys finds them).
        """
        self._begin()
        jobs = self._check_batch(request)
        config = self._config
        now = self._clock.now_ms()
        ch = Changes()
        results = []
        for job in jobs:
            rejection = classify_enqueue(job, config, now)
            if rejection is not None:
                results.append(pb.JobResult(rejection=rejection))
            else:
                results.append(self._enqueue_one(job, now, ch))
        await self._commit(ch)
        return pb.EnqueueBatchResponse(results=results)

    async def _enqueue_atomic(self, request: pb.EnqueueBatchRequest) -> pb.EnqueueAtomicResponse:
        """EnqueueAtomic: all jobs or none.

        A ``BatchValidationFailure`` lists every failing index: first every job failing
        classification; else every job of a closing queue (``QueueClosing``); else every job
        of each queue whose live depth plus its jobs in the batch exceeds ``max_queue_depth``
        (``QueueFull``; would-be dedup hits count, conservatively).  Otherwise every job is
        dedup-checked and inserted in one transaction.

        Raises:
            EngineError: as :meth:`_enqueue_batch`.

        Cancellation: as :meth:`_enqueue_batch`: all the jobs are enqueued anyway (or, after
        a rejection, none); only the reply is lost.
        """
        self._begin()
        jobs = self._check_batch(request)
        config = self._config
        now = self._clock.now_ms()
        errors = [
            pb.JobValidationError(index=index, rejection=rejection)
            for index, job in enumerate(jobs)
            if (rejection := classify_enqueue(job, config, now)) is not None
        ]
        if not errors:
            errors = [
                pb.JobValidationError(
                    index=index,
                    rejection=pb.JobRejection(queue_closing=pb.QueueClosing(queue=job.queue)),
                )
                for index, job in enumerate(jobs)
                if self._state.is_closing(job.queue)
            ]
        if not errors:
            wanted = Counter(job.queue for job in jobs)
            full = {
                queue: cap
                for queue, count in wanted.items()
                if (cap := config.limits_for(queue).max_queue_depth) is not None
                and self._state.live_depth(queue) + count > cap
            }
            errors = [
                pb.JobValidationError(
                    index=index,
                    rejection=pb.JobRejection(
                        queue_full=pb.QueueFull(queue=job.queue, limit=full[job.queue])
                    ),
                )
                for index, job in enumerate(jobs)
                if job.queue in full
            ]
        ch = Changes()
        if errors:
            await self._commit(ch)  # barrier: the answer read the live state
            return pb.EnqueueAtomicResponse(rejection=pb.BatchValidationFailure(errors=errors))
        responses = []
        for job in jobs:
            hit = None
            if job.idempotency_key is not None:
                hit = self._state.dedup_hit(job.queue, job.idempotency_key, now)
            if hit is not None:
                responses.append(pb.EnqueueResponse(job_id=hit.job_id, deduplicated=True))
            else:
                job_id = self._insert(job, config.limits_for(job.queue), now, ch)
                responses.append(pb.EnqueueResponse(job_id=job_id, deduplicated=False))
        await self._commit(ch)
        return pb.EnqueueAtomicResponse(success=pb.EnqueueAtomicSuccess(responses=responses))

    # ------------------------------------------------------------------ reserve

    async def _reserve(self, request: pb.ReserveRequest) -> pb.ReserveResponse:
        """Reserve (long poll): lease up to ``max_jobs`` ready jobs from ``queues``.

        Queues are walked in request order, best job first.  Returns as soon as at least one
        job is leased; otherwise parks until a job becomes ready in one of the queues, the
        (clamped) wait ends, or shutdown, and returns an empty reply in the last two cases.
        The lease is clamped to the smallest ``max_lease_duration_ms`` of the listed queues,
        with a 1 ms floor.

        Cancellation while parked: nothing happens.  While committing: the jobs stay leased
        to nobody and are redelivered when the lease expires.

        Raises:
            EngineError: INVALID_ARGUMENT (validation, too many queues, a queue name too
                long); FAILED_PRECONDITION for undeclared queues in strict mode; UNAVAILABLE and
                INTERNAL as :meth:`_enqueue_batch`.
        """
        committer = self._begin()
        _invalid(reserve_problem(request))
        config = self._config
        queues: list[str] = list(request.queues)
        if len(queues) > config.limits.max_reserve_queues:
            raise EngineError(
                StatusCode.INVALID_ARGUMENT,
                f"reserve exceeds max_reserve_queues ({config.limits.max_reserve_queues})",
            )
        name_limit = config.limits.max_queue_name_bytes
        for queue in queues:
            if len(queue.encode()) > name_limit:
                raise EngineError(
                    StatusCode.INVALID_ARGUMENT,
                    f"queue name {quote(queue)} exceeds max_queue_name_bytes ({name_limit})",
                )
        if config.server.strict_queues:
            unknown = [q for q in dict.fromkeys(queues) if not config.is_declared(q)]
            if unknown:
                listed = ", ".join(quote(q) for q in unknown)
                raise EngineError(
                    StatusCode.FAILED_PRECONDITION,
                    f"queue(s) not declared (strict mode): [{listed}]",
                )
        ceiling = min(config.limits_for(q).max_lease_duration_ms for q in queues)
        lease_ms = max(1, min(duration_ms(request.lease_duration), ceiling))
        max_jobs = min(
            max(1 if request.max_jobs is None else request.max_jobs, 1),
            config.limits.max_reserve_batch,
        )
        wait_ms = 0 if request.wait_timeout is None else duration_ms(request.wait_timeout)
        deadline = self._clock.now_ms() + min(wait_ms, config.limits.max_wait_timeout_ms)

        waiter = _Waiter()
        names = set(queues)
        for name in names:
            self._waiters.setdefault(name, set()).add(waiter)
        try:
            while True:
                waiter.woken = False
                if self._shutdown:
                    return pb.ReserveResponse(jobs=[])
                # A call already cancelled (its stream reset, perhaps together with the
                # wake-up; a backend may deliver that only at a later checkpoint) must not
                # lease: jobs leased to a reply nobody reads sit out their lease (found
                # when a nack overtook the reset of a long poll). -inf: "cancelled".
                if anyio.current_effective_deadline() == -math.inf:
                    return pb.ReserveResponse(jobs=[])
                # Woken after a wait: the store may have failed meanwhile.
                committer.check()
                now = self._clock.now_ms()
                ch = Changes()
                jobs = self._state.reserve(queues, lease_ms, max_jobs, now, ch)
                if jobs:
                    self._holders.leased(jobs, request.worker_id, self._state)
                    await self._commit(ch)
                    return pb.ReserveResponse(jobs=[job_to_pb(job) for job in jobs])
                if now >= deadline:
                    return pb.ReserveResponse(jobs=[])
                if waiter.woken:
                    continue
                with anyio.CancelScope() as scope:
                    waiter.scope = scope
                    await self._clock.sleep_until_ms(deadline)
                waiter.scope = None
        finally:
            for name in names:
                waiters = self._waiters.get(name)
                if waiters is not None:
                    waiters.discard(waiter)
                    if not waiters:
                        del self._waiters[name]

    # ------------------------------------------------------------------ ack / nack / extend

    async def _leased(self, job_id: str, attempt: int) -> StoredJob:
        """The inflight job, or NOT_FOUND / FAILED_PRECONDITION.

        Invariant: returns without awaiting on success, so the caller mutates the job it saw.
        """
        job = self._state.inflight(job_id.lower())
        if job is not None and job.attempt == attempt:
            return job
        await self._commit(Changes())  # barrier: the answer read the live state
        if job is None:
            raise EngineError(StatusCode.NOT_FOUND, "job not found")
        raise EngineError(StatusCode.FAILED_PRECONDITION, "attempt mismatch")

    async def _ack(self, request: pb.AckRequest) -> pb.AckResponse:
        """Ack: delete the inflight job (its idempotency row stays until its deadline).

        Raises:
            EngineError: INVALID_ARGUMENT; NOT_FOUND "job not found" if the job is not
                inflight; FAILED_PRECONDITION "attempt mismatch"; UNAVAILABLE and INTERNAL as
                :meth:`_enqueue_batch`.

        Cancellation: the job is deleted (and the deletion committed) anyway.
        """
        self._begin()
        _invalid(ack_problem(request))
        job = await self._leased(request.job_id, request.attempt)
        ch = Changes()
        self._state.ack(job, ch)
        self._activity.record(job.queue, "ack", self._clock.now_ms())
        await self._commit(ch)
        return pb.AckResponse(job_id=request.job_id)

    async def _nack(self, request: pb.NackRequest) -> pb.NackResponse:
        """Nack: dead-letter or requeue the inflight job.

        ``dead_letter`` strategy: dead letter with cause REJECTED.  Else on the last attempt
        (``attempt >= max_attempts``): ATTEMPTS_EXHAUSTED.  Else the job is requeued with
        attempt + 1 at its original position, after an explicit ``delay`` (capped by the
        queue's schedule horizon) or the queue's retry policy (0 by default).
        ``dead_lettered`` is true on both dead-letter paths, even with retention disabled.

        Raises:
            EngineError: as :meth:`_ack`, plus INVALID_ARGUMENT for a retry without a
                strategy or with a negative delay.

        Cancellation: the job is requeued or dead-lettered anyway; only the reply (whether
        it was dead-lettered) is lost.
        """
        self._begin()
        _invalid(nack_problem(request))
        job = await self._leased(request.job_id, request.attempt)
        now = self._clock.now_ms()
        strategy, delay = ("", None)
        if request.retry is not None:
            strategy, delay = betterproto2.which_one_of(request.retry, "strategy")
        ch = Changes()
        dead_lettered = True
        if strategy == "dead_letter":
            self._state.dead_letter(job, DeadLetterCause.REJECTED, request.reason, now, ch)
        elif job.attempt >= job.max_attempts:
            self._state.dead_letter(
                job, DeadLetterCause.ATTEMPTS_EXHAUSTED, request.reason, now, ch
            )
        else:
            dead_lettered = False
            limits = self._config.limits_for(job.queue)
            if strategy == "delay" and delay is not None:
                delay_ms = min(duration_ms(delay), limits.max_schedule_horizon_ms)
            else:
                delay_ms = retry_delay_ms(limits, job.id, job.attempt)
            self._state.requeue(job, now, delay_ms, ch)
        self._activity.record(job.queue, "nack", now)
        await self._commit(ch)
        return pb.NackResponse(job_id=request.job_id, dead_lettered=dead_lettered)

    async def _extend(self, request: pb.ExtendRequest) -> pb.ExtendResponse:
        """Extend: the lease now ends at *now* + the requested lease (floor 1 ms) clamped to
        the queue's ``max_lease_duration_ms``.  The attempt is unchanged.

        Raises:
            EngineError: as :meth:`_ack`, plus INVALID_ARGUMENT for a missing or
                non-positive ``lease_duration``.

        Cancellation: the lease is extended anyway; only the new expiry is not reported.
        """
        self._begin()
        _invalid(extend_problem(request))
        job = await self._leased(request.job_id, request.attempt)
        ceiling = self._config.limits_for(job.queue).max_lease_duration_ms
        lease_ms = min(max(1, duration_ms(request.lease_duration)), ceiling)
        expires = self._clock.now_ms() + lease_ms
        ch = Changes()
        self._state.extend(job, expires, ch)
        await self._commit(ch)
        return pb.ExtendResponse(job_id=request.job_id, lease_expires_at=ms_timestamp(expires))

    # ------------------------------------------------------------------ dead letters, info

    async def _drain_dead_letters(
        self, request: pb.DrainDeadLettersRequest
    ) -> pb.DrainDeadLettersResponse:
        """DrainDeadLetters: remove and return up to ``max`` records, oldest first.

        ``max`` is clamped to [1, ``max_reserve_batch``]; at most ``storage.sweep_limit``
        records are examined, so a filtered drain may come back short.  Destructive.  With
        retention disabled there are no records and the reply is always empty.

        Raises:
            EngineError: INVALID_ARGUMENT (empty queue, max 0); UNAVAILABLE and INTERNAL
                as :meth:`_enqueue_batch`.

        Cancellation: the records are removed anyway and are lost with the reply (and the
        warning is not logged), so a drain whose records matter must not be cancelled.
        """
        self._begin()
        _invalid(drain_problem(request))
        requested = 1 if request.max is None else request.max
        max_records = min(max(requested, 1), self._config.limits.max_reserve_batch)
        ch = Changes()
        records = self._state.drain(request.queue, max_records, self._boot.storage.sweep_limit, ch)
        await self._commit(ch)
        # Removing records is destructive, worth a warning; finding none is not (a dlq
        # drain of an empty dead-letter store, or of a server that keeps none).
        logger.log(
            logging.WARNING if records else logging.INFO,
            "drained %d dead-letter record(s) from %s",
            len(records),
            "all queues" if request.queue is None else f"queue {request.queue!r}",
        )
        return pb.DrainDeadLettersResponse(records=[dead_letter_to_pb(r) for r in records])

    async def _get_server_info(
        self, request: pb.GetServerInfoRequest | None = None
    ) -> pb.GetServerInfoResponse:
        """GetServerInfo: global limits (per-queue overrides are not advertised).

        Answers while the store is failing too: it reads only the configuration.

        Raises:
            EngineError: UNAVAILABLE after close.

        Cancellation: a plain cancellation point; nothing changes.
        """
        self._begin(touches_state=False)
        await anyio.lowlevel.checkpoint()
        config = self._config
        limits = config.limits
        defaults = config.default_limits
        return pb.GetServerInfoResponse(
            server_version=__version__,
            supported_protocol_versions=["v1"],
            server_time=ms_timestamp(self._clock.now_ms()),
            restricts_encodings=defaults.allowed_encodings is not None,
            allowed_encodings=list(defaults.allowed_encodings or ()),
            max_payload_bytes=defaults.max_payload_bytes,
            max_custom_entries=defaults.max_custom_entries,
            max_custom_total_bytes=defaults.max_custom_total_bytes,
            max_custom_key_bytes=defaults.max_custom_key_bytes,
            max_queue_name_bytes=limits.max_queue_name_bytes,
            max_job_type_bytes=limits.max_job_type_bytes,
            max_idempotency_key_bytes=limits.max_idempotency_key_bytes,
            max_schedule_horizon=ms_duration(defaults.max_schedule_horizon_ms),
            max_enqueue_batch=limits.max_enqueue_batch,
            max_reserve_batch=limits.max_reserve_batch,
            max_reserve_queues=limits.max_reserve_queues,
            max_wait_timeout=ms_duration(limits.max_wait_timeout_ms),
            max_lease_duration=ms_duration(defaults.max_lease_duration_ms),
            strict_queues=config.server.strict_queues,
            dead_letter_retention_enabled=self._boot.dead_letter_retention_enabled,
        )

    # ------------------------------------------------------------------ the web console
    # Reads are synchronous snapshots, bounded by their page (``_console_ops``); actions go
    # through the committer like an RPC's writes.

    @property
    def started_at_ms(self) -> int | None:
        """When the engine finished loading its store (clock ms), None before."""
        return self._started_ms

    def list_jobs(
        self,
        queue: str,
        *,
        states: frozenset[JobState] | None = None,
        job_type: str | None = None,
        cursor: int = 0,
        page_size: int = 50,
    ) -> JobPage:
        """A page of *queue*'s live jobs in insertion order, filtered by state and type.

        Looks at no more than ``storage.sweep_limit`` jobs per call (a sparse filter may give
        a short page with a ``next_cursor``).  Synchronous: never waits.
        """
        return list_jobs(
            self._state,
            queue,
            states=states,
            job_type=job_type,
            cursor=max(cursor, 0),
            page_size=max(page_size, 1),
            scan_limit=self._boot.storage.sweep_limit,
        )

    def list_dead_letters(
        self, queue: str | None = None, *, cursor: int = 0, page_size: int = 50
    ) -> DeadLetterPage:
        """A page of retained dead letters, oldest first (bounded as :meth:`list_jobs`)."""
        return list_dead_letters(
            self._state,
            queue,
            cursor=max(cursor, 0),
            page_size=max(page_size, 1),
            scan_limit=self._boot.storage.sweep_limit,
        )

    def dead_letter(self, job_id: str) -> DeadLetter | None:
        """The retained dead letter of this job id, or None."""
        return self._state.dead_letter_of(job_id.lower())

    def idempotency_key(self, job_id: str) -> str | None:
        """The idempotency key the job was enqueued with, while its dedup window lasts."""
        return self._state.idempotency_key(job_id.lower())

    def lease_holder(self, job: StoredJob) -> str | None:
        """The ``worker_id`` the job's current lease was granted to (None if not leased, or
        if the reserve gave none)."""
        return self._holders.holder(job)

    def oldest_ready_at_ms(self, queue: str) -> int | None:
        """When *queue*'s oldest ready job was enqueued (clock ms), None if none is ready."""
        return oldest_ready_ms(self._state, queue, self._boot.storage.sweep_limit)

    def rates(self, queue: str) -> dict[str, int]:
        """Enqueues, acks and nacks of *queue* over the last minute, by name."""
        return self._activity.per_minute(queue, self._clock.now_ms())

    async def requeue_dead_letters(
        self, queue: str | None = None, job_id: str | None = None
    ) -> list[StoredJob]:
        """Requeue one dead letter (*job_id*) or up to ``storage.sweep_limit`` of *queue*
        (all queues if None) as new ready jobs with their old ids, at attempt 1.

        Committed like an RPC's writes before returning; the dead letters are gone and the
        jobs are ready in the store.  An unknown *job_id* requeues nothing.

        Raises:
            EngineError: UNAVAILABLE while the store fails or after close.

        Cancellation: the requeue happens anyway (only the returned list is lost).
        """
        self._begin()
        ch = Changes()
        jobs = requeue(
            self._state,
            queue,
            None if job_id is None else job_id.lower(),
            self._clock.now_ms(),
            self._boot.storage.sweep_limit,
            ch,
        )
        await self._commit(ch)
        if jobs:
            logger.info("console: requeued %d dead letter(s)", len(jobs))
        return jobs

    async def purge_dead_letters(
        self, queue: str | None = None, job_id: str | None = None
    ) -> list[DeadLetter]:
        """Delete one dead letter (*job_id*) or up to ``storage.sweep_limit`` of *queue*
        (all queues if None) for good; committed before returning.

        Raises:
            EngineError: as :meth:`requeue_dead_letters`.

        Cancellation: as :meth:`requeue_dead_letters`.
        """
        self._begin()
        ch = Changes()
        records = purge(
            self._state,
            queue,
            None if job_id is None else job_id.lower(),
            self._boot.storage.sweep_limit,
            ch,
        )
        await self._commit(ch)
        if records:
            logger.warning("console: purged %d dead letter(s)", len(records))
        return records
