"""Batch handlers (``Worker.batch``): gather reserved jobs of one type, call the handler
once with all of them, then settle each job on its own.

Shape (inside the worker's task group)::

    a collector per batch registration (a task of the worker, from run() to the drain)
    └── its task group: one task per batch being run
          └── the batch's task group (its heartbeats), then the handler in the batch's
              one cancel scope; then one settle task per job

Gathering. The reserve loop starts each job of a batch type as it starts any job (it holds
one of its lane's ``max_in_flight`` tokens: capacity counts jobs, not batches) but hands it
to its collector instead of a job task. The collector runs a batch when it has
``max_size`` jobs, when ``max_wait`` seconds have passed since the first of them came, when
the lane the last one came from has no free token left (no more can come before one of
these ends), or when the reserve loops have stopped (a shutdown: what was leased is run
now, as single jobs are).

Running. The batch has one cancel scope: its deadline is the task's ``timeout`` (else
``job_timeout``), and a shutdown that cancels the jobs in flight (``drain_timeout``,
``cancel_in_flight()``) cancels it. Each job keeps its own heartbeat, in the batch's task
group, so every lease in the batch is extended while the handler runs; a lost lease marks
its job only (``item.lease_lost``), ends that job's heartbeat and never lets it be settled,
and the rest of the batch goes on. Every job's verdict then follows the single-job rules
(``JobRunner._verdict``): an item's own decision; else, when the handler raised, that
exception's verdict (a :class:`~sepp_anyio.HandlerError` its directive, anything else the
backoff for failed attempts); else the timeout's or the shutdown's; else an ack. A job
whose payload does not decode as the task's type is dead-lettered without being handed to
the handler. The jobs are settled concurrently, each through its lane's settle slots, and
``on_outcome`` is called once per job.

Middleware is not entered around a batch handler: it wraps one job's call.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Awaitable, Callable, Collection, Coroutine
from dataclasses import dataclass
from typing import Any

import anyio
import anyio.abc

from .._model._checks import check_count, check_seconds, check_str
from .._model._error_root import InvalidArgumentError, InvalidArgumentTypeError
from .._model._errors import HandlerError
from .._model._job import Job
from .._model._payload import Payload
from .._model._retries import RetryDirective
from .._model._retry_policy import Retry
from .._tasks._task import Task
from ._batch_item import BatchCtx, BatchItem
from ._job import _SETTLE_TIMEOUT, JobRunner, _failure_directive
from ._lease import JobRun, Phase
from ._outcome import Settled, outcome_of, report_outcome

__all__ = [
    "BatchCall",
    "BatchCollector",
    "BatchRunner",
    "BatchSpec",
    "BatchTarget",
    "batch_target",
]

logger = logging.getLogger("sepp_anyio.worker")

#: What a batch calls: ``call(items, batch_ctx)`` (a sync function wrapped to run in a
#: thread).
BatchCall = Callable[[list[BatchItem[Any]], BatchCtx[Any]], Awaitable[None]]

_NOTHING: contextlib.nullcontext[None] = contextlib.nullcontext()


@dataclass(frozen=True, slots=True)
class BatchSpec:
    """One batch registration (internal)."""

    job_type: str
    call: BatchCall
    max_size: int
    max_wait: float
    #: Decodes a job's payload into its item's value (a typed task's ``decode``); None
    #: hands the payload itself.
    decode: Callable[[Payload | None], Any] | None
    #: The task's own timeout (it wins over ``job_timeout``), for the whole batch.
    timeout: float | None


@dataclass(frozen=True, slots=True)
class BatchTarget:
    """What ``Worker.batch(task, max_size=..., max_wait=...)`` was asked for, checked."""

    job_type: str
    decode: Callable[[Payload | None], Any] | None
    timeout: float | None
    max_size: int
    max_wait: float
    #: The registration's name in error messages.
    what: str
    #: The task's own retry policy (None: the worker's).
    retry: Retry | None = None


def batch_target(
    task: object, max_size: object, max_wait: object, queues: Collection[str], lease: float
) -> BatchTarget:
    """Check the arguments of ``Worker.batch`` against the worker's queues and lease.

    Raises:
        InvalidArgumentError: a bad ``max_size``/``max_wait``, or the worker does not
            reserve from ``task.queue``.
        InvalidArgumentTypeError: ``task`` is neither a ``Task`` nor a str.
    """
    if isinstance(task, Task):
        if task.queue not in queues:
            raise InvalidArgumentError(
                f"task {task!r} is enqueued to queue {task.queue!r}, which this worker"
                f" does not reserve from (queues: {list(queues)})"
            )
        job_type, decode, timeout, retry = task.job_type, task.decode, task.timeout, task.retry
        what = f"the batch of task {task!r}"
    elif isinstance(task, str):
        job_type, decode, timeout, retry = check_str(task, "job_type"), None, None, None
        what = f"the batch of job type {task!r}"
    else:
        raise InvalidArgumentTypeError(
            f"Worker.batch() takes a sepp.Task or a job type (str), got a {type(task).__name__}"
        )
    size = check_count(max_size, "max_size")
    wait = check_seconds(max_wait, "max_wait")
    if wait >= lease:
        raise InvalidArgumentError(
            f"max_wait must be less than the worker's lease ({lease:g}s): a job"
            f" waiting for its batch has no heartbeat yet; got {max_wait}"
        )
    return BatchTarget(job_type, decode, timeout, size, wait, what, retry)


def _failure(exc: Exception, ctx: Any, policy: Retry) -> tuple[RetryDirective, str]:
    """What ``exc`` raised by a handler asks for one job: the single-job rules (a
    :class:`HandlerError`'s own request, else ``policy``: the task's or the worker's)."""
    if isinstance(exc, HandlerError):
        return exc.directive, exc.reason
    return (
        _failure_directive(policy, ctx, exc),
        f"batch handler raised {type(exc).__name__}: {exc}",
    )


class BatchCollector:
    """Gathers the jobs of one batch registration and runs them in batches (see the
    module docs); one per registration and ``Worker.run``."""

    __slots__ = ("_closed", "_pending", "_room_gone", "_run_batch", "_wake", "spec")

    def __init__(
        self,
        spec: BatchSpec,
        run_batch: Callable[[BatchSpec, list[tuple[JobRun, Job]]], Coroutine[Any, Any, None]],
    ) -> None:
        self.spec = spec
        self._run_batch = run_batch
        # (run, job, arrival time), in arrival order.
        self._pending: list[tuple[JobRun, Job, float]] = []
        self._wake = anyio.Event()
        self._closed = False
        self._room_gone = False

    def add(self, run: JobRun, job: Job) -> None:
        """Take a job started by a reserve loop (its token held, in the worker's runs)."""
        self._pending.append((run, job, anyio.current_time()))
        limiter = run.lane.limiter
        if limiter is not None and limiter.available_tokens == 0:
            # Its lane cannot reserve again before a job ends: waiting would gain nothing.
            self._room_gone = True
        self._wake.set()

    def close(self) -> None:
        """No more jobs will come (the reserve loops have stopped): run what is here now,
        then end."""
        self._closed = True
        self._wake.set()

    async def _changed(self) -> None:
        self._wake = anyio.Event()
        await self._wake.wait()

    def _ready(self) -> bool:
        return self._closed or self._room_gone or len(self._pending) >= self.spec.max_size

    async def serve(self) -> None:
        """Run batches until :meth:`close` and every batch is over.

        Cancellation (``run()`` cancelled): the batches running are cancelled with it, their
        jobs left unsettled, as single jobs are.
        """
        spec = self.spec
        async with anyio.create_task_group() as batches:
            while True:
                while not self._pending and not self._closed:
                    await self._changed()
                if not self._pending:
                    break
                first_at = self._pending[0][2]
                with anyio.move_on_at(first_at + spec.max_wait):
                    while not self._ready():
                        await self._changed()
                taken = self._pending[: spec.max_size]
                del self._pending[: spec.max_size]
                self._room_gone = False
                batches.start_soon(
                    self._run_batch,
                    spec,
                    [(run, job) for run, job, _at in taken],
                    name=f"sepp batch of {spec.job_type!r}",
                )


class BatchRunner(JobRunner):
    """Runs the batches of a :class:`~sepp_anyio.Worker` (a base class, like
    :class:`JobRunner`; the worker sets ``_batch_specs`` in its ``__init__``)."""

    _batch_specs: dict[str, BatchSpec]
    #: The collectors by job type while running: what the reserve loop hands jobs to (a
    #: type unregistered meanwhile is taken out, its collector still runs to the drain).
    _collectors: dict[str, BatchCollector]
    _all_collectors: tuple[BatchCollector, ...]
    _sync_limiter: anyio.CapacityLimiter | None

    def _start_batches(self, tg: anyio.abc.TaskGroup) -> None:
        """Start a collector per batch registration in ``tg`` (the worker's)."""
        self._collectors = {}
        for job_type, spec in self._batch_specs.items():
            collector = self._collectors[job_type] = BatchCollector(spec, self._run_batch)
            tg.start_soon(collector.serve, name=f"sepp batch collector of {job_type!r}")
        self._all_collectors = tuple(self._collectors.values())

    def _close_batches(self) -> None:
        """The reserve loops have stopped: the collectors run what they hold and end."""
        for collector in self._all_collectors:
            collector.close()

    def _forget_batch(self, job_type: str) -> None:
        """``job_type``'s batch handler is unregistered: new jobs of it are not batched."""
        self._batch_specs.pop(job_type, None)
        self._collectors.pop(job_type, None)

    async def _run_batch(self, spec: BatchSpec, taken: list[tuple[JobRun, Job]]) -> None:
        """Run one batch and settle each of its jobs (see the module docs).

        Cancellation from outside (``run()`` cancelled) and non-``Exception`` errors of the
        handler propagate, the jobs not yet settled left unsettled, unreported.
        """
        runs = [run for run, _job in taken]
        settled: set[JobRun] = set()
        try:
            for run in runs:
                self._job_started(run)
            items: list[tuple[JobRun, BatchItem[Any]]] = []
            handed: list[BatchItem[Any]] = []
            for run, job in taken:
                item = self._item(spec, run, job)
                items.append((run, item))
                # Stopped by a shutdown before the batch began (released below), or not
                # decodable (dead-lettered): not the handler's.
                if run.stop_reason is None and not item.decided:
                    handed.append(item)
            error: Exception | None = None
            limit = spec.timeout if spec.timeout is not None else self._job_timeout
            scope = anyio.CancelScope()
            if limit is not None:
                scope.deadline = anyio.current_time() + limit
            timed_out = False
            if handed:
                for item in handed:
                    # A shutdown's stop() of any of them cancels the batch.
                    item._run.handler_scope = scope
                timer = self._timer
                async with (
                    anyio.create_task_group() if timer is not None else _NOTHING
                ) as heartbeats:
                    if heartbeats is not None:
                        for item in handed:
                            # Its own scope, never entered: a lost lease (lose_lease cancels
                            # it) ends only that job's heartbeat, not the batch.
                            item._run.scope = anyio.CancelScope()
                            self._schedule_heartbeat(item._run, heartbeats)
                    with scope:
                        try:
                            ctx = BatchCtx(
                                job_type=spec.job_type,
                                size=len(handed),
                                worker_id=self.worker_id,
                                state=self._state,
                            )
                            await spec.call(handed, ctx)
                        except Exception as exc:
                            error = exc
                        finally:
                            timed_out = scope.cancel_called and anyio.current_time() >= (
                                scope.deadline
                            )
                            started = False
                            for item in handed:
                                item._closed = True
                                item._run.phase = Phase.HANDLED
                                if timer is not None and not timer.discard(item._run):
                                    started = True
                            if started:
                                assert heartbeats is not None
                                heartbeats.cancel_scope.cancel()
            async with anyio.create_task_group() as settles:
                for run, item in items:
                    verdict = self._item_verdict(run, item, error, timed_out, limit)
                    settles.start_soon(self._settle_item, run, verdict, settled)
        finally:
            for run in runs:
                if run not in settled:
                    self._job_finished(run, Settled.CANCELLED)
                self._job_ended(run)

    def _policy_of(self, run: JobRun) -> Retry:
        """The retry policy of ``run``'s job type: its task's, else the worker's."""
        return self._retries.get(run.ctx.job_type, self._retry)

    def _item(self, spec: BatchSpec, run: JobRun, job: Job) -> BatchItem[Any]:
        """``job``'s item; decided as dead-lettered when its payload does not decode."""
        if spec.decode is None:
            return BatchItem(run, job.payload)
        try:
            value = spec.decode(job.payload)
        except HandlerError as exc:  # TaskPayloadError: no retry can help it
            item: BatchItem[Any] = BatchItem(run, None)
            item.fail(exc)
            return item
        return BatchItem(run, value)

    def _item_verdict(
        self,
        run: JobRun,
        item: BatchItem[Any],
        error: Exception | None,
        timed_out: bool,
        limit: float | None,
    ) -> tuple[RetryDirective | None, str, tuple[str, str] | None] | None:
        """What to settle ``run`` with: its item's decision if it has one, else what the
        handler's ``error``, the timeout or the shutdown says, by the single-job rules
        (``_verdict``, which also logs it and counts a lost lease)."""
        directive: RetryDirective | None = None
        reason = ""
        if item.decided:
            # The handler's word stands over a timeout or a shutdown that came after it.
            run.stop_reason = None
            failed = item._error
            if failed is not None:
                run.error = failed
                directive, reason = _failure(failed, run.ctx, self._policy_of(run))
            else:
                directive, reason = item._directive, item._reason
        else:
            run.timed_out = timed_out
            if error is not None:
                run.error = error
                directive, reason = _failure(error, run.ctx, self._policy_of(run))
        return self._verdict(run, None, directive, reason, limit)

    async def _settle_item(
        self,
        run: JobRun,
        verdict: tuple[RetryDirective | None, str, tuple[str, str] | None] | None,
        settled: set[JobRun],
    ) -> None:
        """Settle one job of a batch and report its outcome (the tail of a job task)."""
        outcome = Settled.LEASE_LOST if verdict is None else await self._settle(run, *verdict)
        settled.add(run)
        self._job_finished(run, outcome)
        if self._on_outcome is not None:
            report = report_outcome(
                self._on_outcome, run.ctx, outcome_of(outcome, run), run.error, run.log
            )
            if run.stop_reason is None:
                await report
            else:
                # Released by a shutdown: reported shielded, bounded like the nack.
                with anyio.move_on_after(_SETTLE_TIMEOUT, shield=True):
                    await report
