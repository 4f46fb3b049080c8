"""``Harness``: an in-process server for tests, with what a test asserts about it.

::

    async with sepp_anyio.testing.Harness() as harness:
        await send_welcome.enqueue(harness.client, Welcome(user_id=7))
        await harness.run_until_settled(worker)
        assert harness.jobs("emails") == []

It is :func:`~sepp_anyio.testing.open_in_memory_client` (the reference server's engine in
the test's own event loop, a real :class:`~sepp_anyio.Client` on it) plus readers of the
engine's state and a bounded way to run a worker until its queues are done. It reads the
engine only through its public API (``stats``, ``snapshot_job``, ``dead_letters``) and a
store of its own around the real one (``_recording_store``), which tells it which jobs
exist and wakes it at every change.
"""

from __future__ import annotations

import math
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any, TypeVar, overload

import anyio
import anyio.abc

from .._client import Client
from .._model._checks import check_count, check_queue_name, check_seconds
from .._model._error_root import InvalidArgumentTypeError, SeppError
from .._model._groups import unwrap
from .._model._retries import RetryPolicy
from .._tasks._task import Task
from .._worker._facade import Worker
from .._worker._statistics import WorkerStatistics
from ..server import Clock, Engine, MemoryStore, QueueStats, ServerConfig, Store, StoredJob
from ._in_memory import open_in_memory_client
from ._recording_store import RecordingStore
from ._records import (
    RESULT_JOB_TYPE,
    DeadLetteredJob,
    QueuedJob,
    ResultMessage,
    dead_lettered_job,
    payload_of,
    queued_job,
    result_message,
)

__all__ = [
    "DEFAULT_DEAD_LETTER_RETENTION_MS",
    "DEFAULT_MAX_JOBS",
    "DEFAULT_MAX_TIME",
    "Harness",
    "NotSettledError",
]

T = TypeVar("T")

#: Jobs one :meth:`Harness.run_until_settled` lets the worker take before it gives up: far
#: more than a test enqueues, few enough that a job that re-enqueues itself fails fast.
DEFAULT_MAX_JOBS = 10_000
#: Seconds (of the event loop's clock: virtual in the suite's tests) one
#: :meth:`Harness.run_until_settled` waits: a day, so retries with backoff and jobs
#: scheduled hours ahead still come due on a virtual clock.
DEFAULT_MAX_TIME = 86_400.0
#: The harness's server keeps dead letters for a week (unless its config says otherwise),
#: so that :meth:`Harness.dead_letters` sees them; the reference server's default keeps
#: none.
DEFAULT_DEAD_LETTER_RETENTION_MS = 7 * 86_400_000
#: Seconds between two checks of run_until_settled's condition when nothing is committed:
#: a handler that ends without settling (its lease was lost) changes nothing on the
#: server, and is seen by the next check.
_RECHECK = 1.0


class NotSettledError(SeppError):
    """:meth:`Harness.run_until_settled` gave up: the worker's queues still had jobs ready,
    in flight or scheduled when its ``max_time`` or ``max_jobs`` ran out.

    Attributes:
        queues: the counts of the worker's queues then.
        handled: the jobs the worker finished during the call.
    """

    def __init__(self, message: str, *, queues: Mapping[str, QueueStats], handled: int) -> None:
        super().__init__(message)
        self.queues = dict(queues)
        self.handled = handled


def _handled(stats: WorkerStatistics) -> int:
    return stats.processed + stats.nacked_retry + stats.nacked_dead_letter + stats.lease_lost


def _sections_with_retention(
    config: Mapping[str, Any] | None, sections: Mapping[str, Any]
) -> dict[str, Any]:
    merged = {**(config or {}), **sections}
    storage = merged.get("storage")
    if storage is None:
        merged["storage"] = {"dead_letter_retention_ms": DEFAULT_DEAD_LETTER_RETENTION_MS}
    elif isinstance(storage, Mapping) and "dead_letter_retention_ms" not in storage:
        merged["storage"] = {
            **storage,
            "dead_letter_retention_ms": DEFAULT_DEAD_LETTER_RETENTION_MS,
        }
    return merged


class Harness(anyio.AsyncContextManagerMixin):
    """An in-process sepp server for tests: ``async with Harness() as harness:``.

    Args:
        config: a :class:`~sepp_anyio.server.ServerConfig`, TOML text, or a mapping of the
            TOML's sections; keyword arguments name sections too (as for
            :func:`open_in_memory_client`). Given as sections (or not at all), the server
            keeps dead letters for a week unless ``storage.dead_letter_retention_ms`` says
            otherwise, so :meth:`dead_letters` sees them; a ``ServerConfig`` or TOML text is
            used as it is.
        store: the engine's store (default: a new :class:`~sepp_anyio.server.MemoryStore`).
        clock: the engine's clock (default: the event loop's, so a virtual clock drives
            the server too).
        api_key: sent with every call (for a config with ``[auth]``).
        retry: the client's retry policy.
        rpc_timeout: the client's per-call timeout.

    Works on asyncio and trio. Inside the block, :attr:`client` talks to the server and
    :attr:`engine` is the server itself. Leaving it shuts the server down and closes the
    client (see :func:`open_in_memory_client`, also for cancellation).

    Raises:
        ConfigError: a bad config; the message names the key.
        InvalidArgumentTypeError: both a ``ServerConfig`` (or TOML text) and sections.
    """

    def __init__(
        self,
        config: ServerConfig | Mapping[str, Any] | str | None = None,
        *,
        store: Store | None = None,
        clock: Clock | None = None,
        api_key: str | None = None,
        retry: RetryPolicy | None = None,
        rpc_timeout: float = 30.0,
        **sections: Any,
    ) -> None:
        if isinstance(config, ServerConfig | str):
            if sections:
                raise InvalidArgumentTypeError(
                    "pass either a ServerConfig (or TOML text) or config sections, not both"
                )
            self._config: ServerConfig | Mapping[str, Any] | str = config
        else:
            self._config = _sections_with_retention(config, sections)
        self._store = RecordingStore(store if store is not None else MemoryStore())
        self._clock = clock
        self._api_key = api_key
        self._retry = retry
        self._rpc_timeout = rpc_timeout
        self._client: Client | None = None
        self._engine: Engine | None = None

    @asynccontextmanager
    async def __asynccontextmanager__(self) -> AsyncIterator[Harness]:
        if self._client is not None:
            raise RuntimeError("this Harness is already entered")
        async with open_in_memory_client(
            self._config,
            store=self._store,
            clock=self._clock,
            api_key=self._api_key,
            retry=self._retry,
            rpc_timeout=self._rpc_timeout,
        ) as (client, engine):
            self._client, self._engine = client, engine
            try:
                yield self
            finally:
                self._client = self._engine = None

    @property
    def client(self) -> Client:
        """The client connected to the harness's server (inside the block only).

        Raises:
            RuntimeError: outside ``async with``.
        """
        if self._client is None:
            raise RuntimeError("Harness.client is there inside `async with Harness() as h:`")
        return self._client

    @property
    def engine(self) -> Engine:
        """The server (inside the block only; raises as :attr:`client`)."""
        if self._engine is None:
            raise RuntimeError("Harness.engine is there inside `async with Harness() as h:`")
        return self._engine

    # ------------------------------------------------------------ running a worker

    def _pending(self, queues: tuple[str, ...], scheduled: bool) -> dict[str, QueueStats]:
        """The worker's queues that still have work (ready, in flight, or scheduled when
        those count), with their counts."""
        stats = self.engine.stats()
        pending = {}
        for queue in queues:
            counts = stats.get(queue)
            if counts is None:
                continue
            if counts.ready or counts.inflight or (scheduled and counts.scheduled):
                pending[queue] = counts
        return pending

    async def run_until_settled(
        self,
        worker: Worker[Any],
        *,
        scheduled: bool = True,
        max_jobs: int = DEFAULT_MAX_JOBS,
        max_time: float = DEFAULT_MAX_TIME,
    ) -> WorkerStatistics:
        """Run ``worker`` until its queues are settled, then stop it and return its
        statistics.

        Settled: no job of the worker's queues is ready or in flight, and (with
        ``scheduled``, the default) none is scheduled either: jobs enqueued with a delay
        and jobs waiting for a retry are waited for, which on a virtual clock (trio's
        ``MockClock(autojump_threshold=0)``, or the suite's virtual-time asyncio loop)
        takes no real time. With ``scheduled=False`` they are left where they are. Dead
        letters are settled. The worker stops as after :meth:`~sepp_anyio.Worker.shutdown`: what it
        had in flight is finished, and its ``on_outcome`` hook has been called for every
        job, when this returns.

        The condition is checked at start and after every change the server commits; the
        worker's own in-flight count must be 0 too, and while only that is left it is
        checked once a second as well (a handler whose lease was lost ends without a
        change on the server). The worker runs with
        ``run(job_limit=max_jobs)``.

        Args:
            worker: a worker of this harness's client that is not running.
            scheduled: also wait for scheduled jobs (default True).
            max_jobs: most jobs the worker may take during the call (>= 1).
            max_time: most seconds (on the event loop's clock) the call waits (> 0).

        Raises:
            NotSettledError: not settled within ``max_time``, or once the worker had taken
                ``max_jobs`` jobs (a handler that never returns, a job retried forever, a
                job that enqueues another every time); the message names the queues and
                their counts. Handlers still running then are cancelled and their jobs
                nacked for a retry (:meth:`~sepp_anyio.Worker.cancel_in_flight`).
            RuntimeError: the worker is already running.
            InvalidArgumentError, InvalidArgumentTypeError: a bad ``max_jobs`` or
                ``max_time``.
            UnauthenticatedError, UnknownQueuesError: as :meth:`~sepp_anyio.Worker.run`.

        Cancellation: cancels the worker as cancelling :meth:`~sepp_anyio.Worker.run`
        does (jobs still running are left to lease expiry).
        """
        if not isinstance(worker, Worker):
            raise InvalidArgumentTypeError(
                f"run_until_settled() takes a sepp.Worker, got a {type(worker).__name__}"
            )
        check_count(max_jobs, "max_jobs")
        max_time = check_seconds(max_time, "max_time", minimum="positive")
        queues = worker.queues
        handled_before = _handled(worker.statistics())
        stopped = anyio.Event()
        pending: dict[str, QueueStats] = {}
        done = at_limit = False
        in_flight = 0

        async def run(*, task_status: anyio.abc.TaskStatus[None]) -> None:
            try:
                await worker.run(job_limit=max_jobs, task_status=task_status)
            finally:
                stopped.set()

        def settled() -> bool:
            nonlocal pending
            pending = self._pending(queues, scheduled)
            # The worker's own count too: a handler whose lease ran out is gone from the
            # server's counts but still running here.
            return not pending and worker.statistics().in_flight == 0

        try:
            async with anyio.create_task_group() as tg:
                await tg.start(run)
                with anyio.move_on_after(max_time):
                    while not settled() and not stopped.is_set():
                        # Only the worker's own jobs left: they may end without a change
                        # on the server, so look again after a while.
                        with anyio.move_on_after(math.inf if pending else _RECHECK):
                            await _either(self._store.changed(), stopped)
                done = settled()
                # Stopped by itself: it took its job_limit (or failed, which raises below).
                at_limit = stopped.is_set()
                in_flight = worker.statistics().in_flight
                if done:
                    worker.shutdown()
                else:
                    worker.cancel_in_flight(reason="run_until_settled() gave up")
        except BaseExceptionGroup as group:
            error = unwrap(group)
            if error is group:
                raise
            raise error from None
        if not done:
            handled = _handled(worker.statistics()) - handled_before
            counts = "; ".join(
                f"{queue!r}: {c.ready} ready, {c.inflight} in flight, {c.scheduled} scheduled"
                for queue, c in pending.items()
            )
            if in_flight:
                counts += f"{'; ' if counts else ''}{in_flight} job(s) running in the worker"
            why = (
                f"the worker took its max_jobs={max_jobs} jobs"
                if at_limit
                else f"max_time={max_time:g}s passed"
            )
            raise NotSettledError(
                f"run_until_settled(): the worker's queues did not settle ({why}; it"
                f" finished {handled} job(s)): {counts}. A handler that never returns, a"
                " job retried forever or one that enqueues another each time does this;"
                " raise max_jobs or max_time if the work is just long",
                queues=pending,
                handled=handled,
            )
        return worker.statistics()

    # ------------------------------------------------------------ reading the server

    def _live(self, queue: str) -> list[StoredJob]:
        """The queue's live jobs now, in the order the server hands ready ones out."""
        check_queue_name(queue, "queue")
        jobs = []
        for job_id in list(self._store.live.get(queue, ())):
            job = self.engine.snapshot_job(job_id)
            if job is not None:
                jobs.append(job)
        jobs.sort(key=lambda job: job.ready_key)
        return jobs

    @overload
    def jobs(self, queue: str, task: Task[T]) -> list[QueuedJob[T]]: ...

    @overload
    def jobs(self, queue: str, task: None = None) -> list[QueuedJob[None]]: ...

    def jobs(self, queue: str, task: Task[Any] | None = None) -> list[QueuedJob[Any]]:
        """What is in ``queue`` now: ready, scheduled and in-flight jobs (not dead
        letters), ordered as the server hands them out (higher priority first, then in
        enqueue order).

        With ``task``, only that task's jobs (its job type), each with ``value``, its
        payload decoded and validated by the task.

        Raises:
            TaskPayloadError: a job of ``task``'s type whose payload does not validate.
            InvalidArgumentError: an invalid queue name.
        """
        live = self._live(queue)
        if task is None:
            return [queued_job(job, None) for job in live]
        _check_task(task)
        return [
            queued_job(job, task.decode(payload_of(job)))
            for job in live
            if job.job_type == task.job_type
        ]

    @overload
    def dead_letters(self, queue: str, task: Task[T]) -> list[DeadLetteredJob[T]]: ...

    @overload
    def dead_letters(self, queue: str, task: None = None) -> list[DeadLetteredJob[None]]: ...

    def dead_letters(self, queue: str, task: Task[Any] | None = None) -> list[DeadLetteredJob[Any]]:
        """The dead letters of ``queue``, oldest first, without draining them (they are
        kept for the server's ``storage.dead_letter_retention_ms``: a week by default in a
        harness). With ``task``, only its jobs, each with its decoded ``value``.

        Raises:
            TaskPayloadError: a job of ``task``'s type whose payload does not validate.
            InvalidArgumentError: an invalid queue name.
        """
        check_queue_name(queue, "queue")
        records = self.engine.dead_letters(queue)
        if task is None:
            return [dead_lettered_job(record, None) for record in records]
        _check_task(task)
        out = []
        for record in records:
            if record.job.job_type == task.job_type:
                out.append(dead_lettered_job(record, task.decode(payload_of(record.job))))
        return out

    def results(self, queue: str, task: Task[Any] | None = None) -> list[ResultMessage[Any]]:
        """The results waiting in reply queue ``queue`` (jobs of type ``sepp.result``;
        see :class:`ResultMessage` for the format), in the order they arrived, not taken.

        With ``task``, only the results of that task's jobs (the harness remembers the job
        type of every job it saw), their values validated by the task's result type when
        it has one (its ``decode_result``, whose error for a value that does not validate
        comes out as it is).

        Raises:
            SeppError: a ``sepp.result`` job that is not a result envelope.
            InvalidArgumentError: an invalid queue name.
        """
        if task is not None:
            _check_task(task)
        decode = None if task is None else task.decode_result
        out: list[ResultMessage[Any]] = []
        for job in sorted(self._live(queue), key=lambda job: job.seq):
            if job.job_type != RESULT_JOB_TYPE:
                continue
            job_id, ok, value, error_type, error_message = result_message(job)
            if task is not None:
                origin = self._store.seen.get(job_id)
                if origin is None or origin[1] != task.job_type:
                    continue
                if ok and decode is not None:
                    value = decode(value)
            out.append(
                ResultMessage(
                    id=job.id,
                    job_id=job_id,
                    ok=ok,
                    value=value,
                    error_type=error_type,
                    error_message=error_message,
                )
            )
        return out


def _check_task(task: object) -> None:
    if not isinstance(task, Task):
        raise InvalidArgumentTypeError(f"task must be a sepp.Task, got a {type(task).__name__}")


async def _either(first: anyio.Event, second: anyio.Event) -> None:
    """Wait until either event is set."""
    if first.is_set() or second.is_set():
        return
    async with anyio.create_task_group() as tg:

        async def wake_on(event: anyio.Event) -> None:
            await event.wait()
            tg.cancel_scope.cancel()

        tg.start_soon(wake_on, first)
        tg.start_soon(wake_on, second)
