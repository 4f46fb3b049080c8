"""A producer's reply queue: :class:`Results` receives the results of its jobs, and a
:class:`ResultHandle` awaits one of them.

::

    render = sepp.Task("reports", "render", Spec, result=Report)
    async with sepp.Results(client, queue="results.web-1") as results:
        handle = await render.enqueue(client, spec, reply_to=results)
        report = await handle.result(timeout=60)

The wire format (custom fields, job type, envelope) is in :mod:`.._model._results`. This
module names :class:`~sepp_anyio.Task` only in annotations: ``_task`` imports it.
"""

from __future__ import annotations

import logging
import weakref
from collections import OrderedDict
from collections.abc import AsyncGenerator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import anyio
import anyio.abc

from .._model._checks import check_count, check_queue_name, check_seconds, check_str
from .._model._enqueue import EnqueueAck
from .._model._error_root import SeppError
from .._model._errors import ClientError
from .._model._job import Job
from .._model._results import (
    CORRELATION_ID,
    RESULT_JOB_TYPE,
    InvalidResultError,
    Result,
    ResultTimeoutError,
    read_result,
)
from .._model._retries import RetryDirective

if TYPE_CHECKING:
    from .._client import Client
    from ._task import Task

__all__ = ["ResultHandle", "Results"]

logger = logging.getLogger("sepp_anyio.results")

R = TypeVar("R")

#: How many results are kept for no waiting handle by default (oldest dropped beyond).
DEFAULT_KEEP = 1000
# Bounds on the ack of one result, shielded: a result taken in must be settled, but a dead
# server must not hold the closing of the block hostage.
_ACK_TIMEOUT = 30.0
# Backoff of the reserve loop after a transport failure: from 0.5 s, doubling, to 30 s.
_MIN_BACKOFF, _MAX_BACKOFF = 0.5, 30.0

#: What a result job brings: the result, or why it cannot be read.
Arrival = Result | InvalidResultError


class _Slot:
    """Where one job's result lands: set once, read by every handle of that job."""

    __slots__ = ("__weakref__", "arrival", "event")

    def __init__(self) -> None:
        self.event = anyio.Event()
        self.arrival: Arrival | SeppError | None = None

    def fill(self, arrival: Arrival | SeppError) -> None:
        if self.arrival is None:
            self.arrival = arrival
            self.event.set()


class ResultHandle(Generic[R]):
    """The result of one job, to be awaited: made by ``task.enqueue(..., reply_to=results)``
    or :meth:`Results.handle`.

    Attributes:
        job_id: the job's id.
        ack: the server's ack of the enqueue (None for a handle made by
            :meth:`Results.handle`).
    """

    __slots__ = ("_results", "_slot", "_task", "ack", "job_id")

    def __init__(
        self,
        results: Results,
        task: Task[Any, R],
        job_id: str,
        slot: _Slot,
        ack: EnqueueAck | None,
    ) -> None:
        self._results = results
        self._task = task
        self._slot = slot
        self.job_id = job_id
        self.ack = ack

    def __repr__(self) -> str:
        return f"<ResultHandle {self.job_id} of {self._task!r}>"

    @property
    def done(self) -> bool:
        """Whether the result (or failure) has arrived."""
        return self._slot.arrival is not None

    # The issue's public contract is ``handle.result(timeout=60)``, as for most peers'
    # result handles; a caller may still wrap it in its own anyio scope.
    async def result(self, *, timeout: float | None = None) -> R:  # noqa: ASYNC109
        """Wait for the job's result and return it, validated against the task's result
        type (None for a task without one). Awaiting it again returns it again.

        Cancellation: a cancelled wait changes nothing (the result still lands in this
        handle, and a later call returns it); the job itself is not cancelled.

        Args:
            timeout: seconds to wait at most (None: until the result arrives or the
                :class:`Results` closes).

        Raises:
            JobFailedError: the job failed for good; the error names the remote
                exception's type and message.
            ResultTimeoutError: (a ``TimeoutError``) nothing arrived within ``timeout``.
            InvalidResultError: the result is not a readable envelope, or its value does
                not validate against the task's result type.
            SeppError: the :class:`Results` closed (or was never entered) before the
                result arrived.
            InvalidArgumentError: a bad ``timeout``.
        """
        if timeout is not None:
            timeout = check_seconds(timeout, "timeout")
        slot = self._slot
        if slot.arrival is None:
            if not self._results.running:
                raise self._results.closed_error(self.job_id)
            try:
                with anyio.fail_after(timeout):
                    await slot.event.wait()
            except TimeoutError:
                raise ResultTimeoutError(
                    f"no result for job {self.job_id!r} within {timeout:g}s (it may still "
                    "arrive: it is then kept for Results.get)"
                ) from None
        arrival = slot.arrival
        if isinstance(arrival, SeppError):
            raise arrival
        assert arrival is not None
        arrival.raise_for_failure()
        return self._task.decode_result(arrival.value)


class Results(anyio.AsyncContextManagerMixin):
    """A producer's reply queue: results of the jobs enqueued with ``reply_to=`` it.

    ``async with Results(client, queue=...) as results:`` reserves ``queue`` in a task of
    its own task group for as long as the block runs, resolves waiting handles by the
    result's correlation id (the job id), acks each result, and keeps results that arrive
    for no waiting handle (a handle dropped, a producer restarted) until
    :meth:`get` asks for them: at most ``keep``, the oldest dropped beyond (counted in
    :attr:`dropped`).

    One queue per producer instance: two :class:`Results` reserving the same queue take
    each other's results. A result job that is not one (another job type, no correlation
    id) is dead-lettered with a reason.

    Guarantees: a result is delivered at least once (it is acked only after it was
    stored) and sent once per job within the server's deduplication window (its
    idempotency key is the job id). While the producer is gone, its results stay in its
    queue until it comes back (then :meth:`get` or :meth:`handle` finds them) or they are
    drained.

    Leaving the block stops the reserve (cancelled, a job it had just leased is
    redelivered after ``lease``) and wakes every waiting handle with a :class:`SeppError`.

    Args:
        client: the client it reserves and acks with.
        queue: the reply queue (the server's queue-name rules apply).
        keep: how many results waiting for :meth:`get` are kept at most (>= 0).
        lease: the lease of each reserved result, in seconds.
        wait: how long each reserve waits on the server, in seconds.

    A reserve that fails with a :class:`ClientError` (the server unreachable, overloaded,
    failing) is retried after a pause, from 0.5 s doubling to 30 s, and logged.

    Raises:
        InvalidArgumentError, InvalidArgumentTypeError: a bad argument (named).
        UnknownQueuesError: (from the block, in an exception group, cancelling its body)
            ``queue`` is not declared on a strict server.
    """

    def __init__(
        self,
        client: Client,
        queue: str,
        *,
        keep: int = DEFAULT_KEEP,
        lease: float = 30.0,
        wait: float = 30.0,
    ) -> None:
        self._client = client
        self._queue = check_queue_name(queue, "Results queue")
        self._keep = check_count(keep, "Results keep", minimum=0)
        self._lease = check_seconds(lease, "Results lease", minimum="millisecond")
        self._wait = check_seconds(wait, "Results wait")
        # The handles' slots by job id: weak, so a dropped handle's result is kept for get()
        # instead of landing in a slot nobody reads.
        self._waiting: weakref.WeakValueDictionary[str, _Slot] = weakref.WeakValueDictionary()
        self._kept: OrderedDict[str, Arrival] = OrderedDict()
        self._dropped = 0
        self._received = 0
        self._running = False

    def __repr__(self) -> str:
        return f"<sepp_anyio.Results queue={self._queue!r}>"

    @property
    def queue(self) -> str:
        """The reply queue."""
        return self._queue

    @property
    def running(self) -> bool:
        """Whether the block is running (the queue is being reserved)."""
        return self._running

    @property
    def kept(self) -> int:
        """How many results wait for :meth:`get` now."""
        return len(self._kept)

    @property
    def dropped(self) -> int:
        """How many kept results were dropped, oldest first, to stay within ``keep``."""
        return self._dropped

    @property
    def received(self) -> int:
        """How many results were received and acked."""
        return self._received

    def handle(
        self, task: Task[Any, R], job_id: str, *, ack: EnqueueAck | None = None
    ) -> ResultHandle[R]:
        """A handle on ``job_id``'s result, read as ``task``'s result type: for a job
        enqueued with ``task.request(..., reply_to=...)`` (a batch), or by an earlier run
        of this producer. A result already kept for it is moved into the handle.

        Raises:
            InvalidArgumentError: an empty ``job_id``.
        """
        check_str(job_id, "job_id")
        slot = self._waiting.get(job_id)
        if slot is None:
            slot = self._waiting[job_id] = _Slot()
            kept = self._kept.pop(job_id, None)
            if kept is not None:
                slot.fill(kept)
        return ResultHandle(self, task, job_id, slot, ack)

    def get(self, job_id: str) -> Result | None:
        """Take the kept result of ``job_id`` (it is removed), or None if there is none.

        The :class:`Result` is not checked against a task's type: ``task.decode_result
        (result.value)`` does that, ``result.raise_for_failure()`` raises a failure.

        Raises:
            InvalidResultError: the result that arrived for it was not readable.
        """
        arrival = self._kept.pop(job_id, None)
        if isinstance(arrival, InvalidResultError):
            raise arrival
        return arrival

    def closed_error(self, job_id: str) -> SeppError:
        """The error of a handle waiting while this is not running."""
        return SeppError(
            f"the Results of queue {self._queue!r} is not running (use it in 'async with'), "
            f"so the result of job {job_id!r} cannot arrive"
        )

    @asynccontextmanager
    async def __asynccontextmanager__(self) -> AsyncGenerator[Results]:
        if self._running:
            raise RuntimeError(f"{self!r} is already running")
        async with anyio.create_task_group() as tg:
            self._running = True
            try:
                tg.start_soon(self._serve, name=f"sepp results of {self._queue}")
                yield self
            finally:
                self._running = False
                tg.cancel_scope.cancel()
                for job_id, slot in list(self._waiting.items()):
                    slot.fill(self.closed_error(job_id))  # (a filled slot keeps its result)
                self._waiting.clear()

    async def _serve(self) -> None:
        """Reserve the queue until cancelled, taking in every result it brings."""
        backoff = _MIN_BACKOFF
        while True:
            try:
                jobs = await self._client.reserve(
                    [self._queue], lease=self._lease, wait=self._wait, max_jobs=100
                )
            except ClientError as exc:
                # The server unreachable, overloaded or failing: retried, as a worker's
                # reserve loop does. (An undeclared queue, a ReserveError, is not.)
                logger.warning(
                    "reserving results from %r failed (%s); retrying in %gs",
                    self._queue,
                    exc,
                    backoff,
                )
                await anyio.sleep(backoff)
                backoff = min(backoff * 2, _MAX_BACKOFF)
                continue
            backoff = _MIN_BACKOFF
            for job in jobs:
                await self._take(job)

    async def _take(self, job: Job) -> None:
        """Store one reserved result and ack it (shielded, bounded): it is in memory now."""
        ctx = job.ctx
        correlation = ctx.custom.get(CORRELATION_ID)
        with anyio.move_on_after(_ACK_TIMEOUT, shield=True):
            try:
                if ctx.job_type != RESULT_JOB_TYPE or not isinstance(correlation, str):
                    reason = (
                        f"not a result: job_type {ctx.job_type!r} (expected "
                        f"{RESULT_JOB_TYPE!r}), {CORRELATION_ID} {correlation!r}"
                    )
                    logger.error("dead-lettering job %s of %r: %s", ctx.id, self._queue, reason)
                    await self._client.nack(ctx, RetryDirective.dead_letter(), reason)
                    return
                arrival: Arrival
                try:
                    arrival = read_result(correlation, job.payload)
                except InvalidResultError as exc:
                    arrival = exc
                self._arrived(correlation, arrival)
                await self._client.ack(ctx)
                self._received += 1
            except SeppError as exc:
                logger.error(
                    "could not settle result %s of %r (%s); it is redelivered after its lease",
                    ctx.id,
                    self._queue,
                    exc,
                )

    def _arrived(self, job_id: str, arrival: Arrival) -> None:
        # The slot stays while a handle holds it (weakly here): another handle of the job
        # finds the result in it, and a result delivered twice (its ack lost) fills it once.
        slot = self._waiting.get(job_id)
        if slot is not None:
            slot.fill(arrival)
            return
        if self._keep == 0:
            self._dropped += 1
            return
        self._kept[job_id] = arrival
        self._kept.move_to_end(job_id)
        while len(self._kept) > self._keep:
            dropped, _ = self._kept.popitem(last=False)
            self._dropped += 1
            logger.warning(
                "dropped the kept result of job %s (more than keep=%d results wait for get)",
                dropped,
                self._keep,
            )
