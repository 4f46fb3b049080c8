"""Shared pieces of the worker tests: a spy on the in-process engine, enqueue shortcuts, and
handler probes that report through events (never a sleep standing in for synchronisation)."""

from __future__ import annotations

import math
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import anyio
import anyio.abc
import anyio.to_thread
import pytest

from sepp_anyio import Client, EnqueueRequest, JobCtx, Payload, StatusCode, Worker
from sepp_anyio.server import Engine, EngineError
from sepp_anyio.server._engine._engine import rpc_of

__all__ = [
    "Call",
    "EngineSpy",
    "Probe",
    "enqueue",
    "nack_kind",
    "real_time_limit",
    "running",
    "unavailable",
]

QUEUE = "q"
METHODS = ("reserve", "ack", "nack", "extend")


@dataclass(eq=False)
class Call:
    """One RPC as the engine received it."""

    method: str
    at: float
    request: Any
    reply: Any = None
    error: BaseException | None = None
    done: bool = False
    ended_at: float = math.nan
    #: What ``EngineSpy.annotate`` returned when the call arrived.
    note: Any = None

    @property
    def ok(self) -> bool:
        return self.done and self.error is None


class EngineSpy:
    """Wraps the engine's reserve/ack/nack/extend to record every request (a spy on a real
    server: the engine still answers). ``fail(method, *errors)`` makes the next calls of a
    method raise those errors instead of reaching the engine."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.calls: list[Call] = []
        self._failures: dict[str, list[BaseException]] = {m: [] for m in METHODS}
        self._changed = anyio.Event()
        #: Called with each call as it arrives; its result is stored in ``call.note``.
        self.annotate: Callable[[Call], Any] | None = None
        #: Per method: called with each request; an exception it returns is raised instead
        #: of reaching the engine.
        self.reject: dict[str, Callable[[Any], BaseException | None]] = {}
        #: Per method: seconds the next calls take before reaching the engine (popped in
        #: order; ``math.inf`` never answers).
        self.stall: dict[str, list[float]] = {m: [] for m in METHODS}
        rpc = rpc_of(engine)
        for method in METHODS:
            setattr(rpc, method, self._wrap(method, getattr(rpc, method)))

    def _wrap(self, method: str, real: Callable[[Any], Awaitable[Any]]) -> Any:
        async def spy(request: Any) -> Any:
            call = Call(method, anyio.current_time(), request)
            if self.annotate is not None:
                call.note = self.annotate(call)
            self.calls.append(call)
            self._notify()
            try:
                failures = self._failures[method]
                if failures:
                    raise failures.pop(0)
                stalls = self.stall[method]
                if stalls:
                    await anyio.sleep(stalls.pop(0))
                rule = self.reject.get(method)
                error = None if rule is None else rule(request)
                if error is not None:
                    raise error
                call.reply = await real(request)
                return call.reply
            except BaseException as exc:
                call.error = exc
                raise
            finally:
                call.done = True
                call.ended_at = anyio.current_time()
                self._notify()

        return spy

    def _notify(self) -> None:
        self._changed.set()
        self._changed = anyio.Event()

    def fail(self, method: str, *errors: BaseException) -> None:
        self._failures[method].extend(errors)

    def of(self, method: str, *, ok: bool | None = None) -> list[Call]:
        """The calls of ``method`` in arrival order (only the successful ones with ok=True)."""
        return [c for c in self.calls if c.method == method and (ok is None or c.ok == ok)]

    async def wait_until(self, predicate: Callable[[], bool]) -> None:
        """Wait until ``predicate()`` holds, re-checking after every recorded call event."""
        while not predicate():
            await self._changed.wait()

    async def wait_for(self, method: str, count: int = 1, *, ok: bool = True) -> list[Call]:
        """Wait until ``count`` calls of ``method`` have finished (successfully by default)."""

        def finished() -> list[Call]:
            return [c for c in self.of(method) if c.done and (not ok or c.error is None)]

        await self.wait_until(lambda: len(finished()) >= count)
        return finished()


def unavailable(message: str = "injected outage") -> EngineError:
    return EngineError(StatusCode.UNAVAILABLE, message)


def nack_kind(call: Call) -> tuple[str, float | None]:
    """A recorded nack's directive: ``(kind, delay in seconds)``, kind being ``"default"``,
    ``"after"`` or ``"dead_letter"``."""
    retry = call.request.retry
    if retry is None:
        return ("none", None)
    if retry.delay is not None:
        return ("after", retry.delay.total_seconds())
    if retry.dead_letter is not None:
        return ("dead_letter", None)
    return ("default", None)


async def enqueue(
    client: Client,
    count: int = 1,
    *,
    job_type: str = "t",
    queue: str = QUEUE,
    first: int = 0,
    **options: Any,
) -> list[str]:
    """Enqueue ``count`` jobs with JSON payloads ``{"n": first + i}``; return their ids.

    Jobs of one batch share their enqueue time, so the server delivers them in id order,
    not in the order given here."""
    requests = [
        EnqueueRequest(queue, job_type, payload=Payload.from_json({"n": first + i}), **options)
        for i in range(count)
    ]
    ids: list[str] = []
    for start in range(0, len(requests), 256):
        results = await client.enqueue_batch(requests[start : start + 256])
        for result in results:
            job_id = getattr(result, "job_id", None)
            assert isinstance(job_id, str), result
            ids.append(job_id)
    return ids


@asynccontextmanager
async def running(worker: Worker) -> AsyncIterator[anyio.abc.TaskGroup]:
    """Start ``worker.run`` in a task group (returns once it is reserving); on exit, shut the
    worker down and wait for ``run`` to return."""
    async with anyio.create_task_group() as tg:
        await tg.start(worker.run)
        try:
            yield tg
        finally:
            worker.shutdown()


@asynccontextmanager
async def real_time_limit(seconds: float) -> AsyncIterator[None]:
    """Fail the test if the block runs for more than ``seconds`` of real time.

    On a virtual clock ``fail_after`` cannot catch a task that spins without ever waiting
    for a timer: the clock only moves when every task waits, so it stands still and the
    deadline never comes. This watches the wall clock from a thread (a thread's wait does
    not hold a virtual clock back) and cancels the block when the time is up.
    """
    done = threading.Event()
    expired = False
    try:
        async with anyio.create_task_group() as tg:

            async def watch() -> None:
                nonlocal expired
                if not await anyio.to_thread.run_sync(done.wait, seconds, abandon_on_cancel=True):
                    expired = True
                    tg.cancel_scope.cancel()

            tg.start_soon(watch)
            try:
                yield
            finally:
                done.set()
    except BaseExceptionGroup as group:
        # The block's own failure, as itself (the watcher never fails).
        if len(group.exceptions) == 1:
            raise group.exceptions[0] from None
        raise
    if expired:
        pytest.fail(f"the block ran for more than {seconds:g}s of real time (a spin?)")


@dataclass(eq=False)
class Probe:
    """What handlers saw: each start as ``(time, ctx)``, the in-flight count and its maximum,
    cancellations, and an event per start count."""

    starts: list[tuple[float, JobCtx]] = field(default_factory=list)
    payloads: list[Any] = field(default_factory=list)
    finished: list[JobCtx] = field(default_factory=list)
    cancelled: list[JobCtx] = field(default_factory=list)
    in_flight: int = 0
    max_in_flight: int = 0
    _changed: anyio.Event = field(default_factory=anyio.Event)

    def enter(self, payload: Payload | None, ctx: JobCtx) -> None:
        self.starts.append((anyio.current_time(), ctx))
        self.payloads.append(None if payload is None else payload.json())
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        self._notify()

    def leave(self, ctx: JobCtx, *, cancelled: bool = False) -> None:
        self.in_flight -= 1
        (self.cancelled if cancelled else self.finished).append(ctx)
        self._notify()

    def _notify(self) -> None:
        self._changed.set()
        self._changed = anyio.Event()

    async def wait_until(self, predicate: Callable[[], bool]) -> None:
        while not predicate():
            await self._changed.wait()

    async def wait_starts(self, count: int) -> None:
        await self.wait_until(lambda: len(self.starts) >= count)

    def attempts(self) -> Sequence[int]:
        return [ctx.attempt for _, ctx in self.starts]

    def handler(
        self, body: Callable[[Payload | None, JobCtx], Awaitable[None]] | None = None
    ) -> Callable[[Payload | None, JobCtx], Awaitable[None]]:
        """A handler that records itself around ``body`` (default: return at once)."""

        async def handle(payload: Payload | None, ctx: JobCtx) -> None:
            self.enter(payload, ctx)
            try:
                if body is not None:
                    await body(payload, ctx)
            except anyio.get_cancelled_exc_class():
                self.leave(ctx, cancelled=True)
                raise
            except BaseException:
                self.leave(ctx)
                raise
            self.leave(ctx)

        return handle
