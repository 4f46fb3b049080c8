"""Plain (non-async) handlers: they run in worker threads of their own limiter, while the
heartbeat keeps extending the lease on the event loop, and the worker's cancellations reach
them through ``anyio.from_thread.check_cancelled()``. Both backends, virtual time.

A thread does not run on virtual time: while one works, the event loop, having nothing else
to do, jumps its clock to the next timer. So every test here keeps leases alive with
``auto_extend`` (the heartbeat always beats the expiry), and a thread that must outlive
some virtual time blocks on a ``threading.Event`` the test sets from the event loop.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import anyio
import anyio.from_thread
import anyio.lowlevel
import pytest

from sepp_anyio import Client, JobCtx, Payload, Worker
from sepp_anyio._worker._registry import _is_async_callable
from sepp_anyio.testing import open_in_memory_client

from ._helpers import QUEUE, EngineSpy, enqueue, nack_kind, running

pytestmark = pytest.mark.anyio

#: Bound on a thread's wait for the test (real seconds): a test that breaks fails, not hangs.
GATE_TIMEOUT = 10.0


@dataclass(eq=False)
class Threads:
    """What sync handlers saw, reported to the event loop through ``anyio.from_thread``."""

    loop_thread: int = field(default_factory=threading.get_ident)
    idents: list[int] = field(default_factory=list)
    ctxs: list[JobCtx] = field(default_factory=list)
    inside: int = 0
    most_inside: int = 0
    cancelled: list[str] = field(default_factory=list)
    after_cancel: list[str] = field(default_factory=list)
    gate: threading.Event = field(default_factory=threading.Event)
    _changed: anyio.Event = field(default_factory=anyio.Event)

    def _notify(self) -> None:
        self._changed.set()
        self._changed = anyio.Event()

    def enter(self, ctx: JobCtx) -> None:
        """Called in the handler's thread: record the start on the event loop."""
        ident = threading.get_ident()

        def record() -> None:
            self.idents.append(ident)
            self.ctxs.append(ctx)
            self.inside += 1
            self.most_inside = max(self.most_inside, self.inside)
            self._notify()

        anyio.from_thread.run_sync(record)

    def leave(self) -> None:
        def record() -> None:
            self.inside -= 1
            self._notify()

        anyio.from_thread.run_sync(record)

    async def wait_until(self, predicate: Callable[[], bool]) -> None:
        while not predicate():
            await self._changed.wait()

    def blocking(self, *, honour_cancel: bool = True) -> Callable[[Payload | None, JobCtx], None]:
        """A sync handler that waits for ``gate``, then checks for cancellation (and either
        lets it out or, with ``honour_cancel=False``, swallows it and returns)."""
        # Read here, on the event loop: a worker thread has no async library to ask.
        cancelled_exc = anyio.get_cancelled_exc_class()

        def handle(payload: Payload | None, ctx: JobCtx) -> None:
            self.enter(ctx)
            try:
                assert self.gate.wait(GATE_TIMEOUT), "the test never opened the gate"
                try:
                    anyio.from_thread.check_cancelled()
                except cancelled_exc:
                    self.cancelled.append(ctx.id)
                    if honour_cancel:
                        raise
                self.after_cancel.append(ctx.id)
            finally:
                self.leave()

        return handle


def _quick(threads: Threads) -> Callable[[Payload | None, JobCtx], None]:
    def handle(payload: Payload | None, ctx: JobCtx) -> None:
        threads.enter(ctx)
        threads.leave()

    return handle


class _SyncCallable:
    def __init__(self, threads: Threads) -> None:
        self.threads = threads

    def __call__(self, payload: Payload | None, ctx: JobCtx) -> None:
        self.threads.enter(ctx)
        self.threads.leave()


def _register(worker: Worker, how: str, fn: Any) -> None:
    if how == "handle":
        worker.handle("t", fn)
    elif how == "decorator":
        worker.handler("t")(fn)
    elif how == "replace_handler":
        worker.handle("t", _quick(Threads()))
        worker.replace_handler("t", fn)
    else:
        assert how == "catch_all"
        worker.catch_all(fn)


@pytest.mark.parametrize("how", ["handle", "decorator", "replace_handler", "catch_all"])
async def test_a_sync_handler_runs_in_a_thread_and_its_job_is_acked(how: str) -> None:
    threads = Threads()
    async with open_in_memory_client() as (client, engine):
        spy = EngineSpy(engine)
        worker = Worker(client, [QUEUE], auto_extend=True, max_in_flight=4)
        _register(worker, how, _quick(threads))
        ids = await enqueue(client, 6)
        async with running(worker):
            acks = await spy.wait_for("ack", 6)
        assert sorted(c.request.job_id for c in acks) == sorted(ids)
        assert {c.request.attempt for c in acks} == {1}
        assert not spy.of("nack")
        assert len(threads.idents) == 6
        assert threads.loop_thread not in threads.idents  # never on the event loop
        assert worker.statistics().processed == 6


@pytest.mark.parametrize("shape", ["partial", "callable-object", "lambda"])
async def test_other_sync_callables_run_in_threads(shape: str) -> None:
    threads = Threads()

    def with_extra(payload: Payload | None, ctx: JobCtx, extra: Threads) -> None:
        extra.enter(ctx)
        extra.leave()

    handler: Any
    if shape == "partial":
        handler = functools.partial(with_extra, extra=threads)
    elif shape == "callable-object":
        handler = _SyncCallable(threads)
    else:
        handler = lambda payload, ctx: _quick(threads)(payload, ctx)  # noqa: E731
    async with open_in_memory_client() as (client, engine):
        spy = EngineSpy(engine)
        worker = Worker(client, [QUEUE], auto_extend=True)
        worker.handle("t", handler)
        await enqueue(client, 2)
        async with running(worker):
            await spy.wait_for("ack", 2)
        assert len(threads.idents) == 2
        assert threads.loop_thread not in threads.idents


class _AsyncCallable:
    def __init__(self, seen: list[int]) -> None:
        self.seen = seen

    async def __call__(self, payload: Payload | None, ctx: JobCtx) -> None:
        await anyio.lowlevel.checkpoint()
        self.seen.append(threading.get_ident())

    async def method(self, payload: Payload | None, ctx: JobCtx) -> None:
        await anyio.lowlevel.checkpoint()
        self.seen.append(threading.get_ident())


async def _async_with_extra(payload: Payload | None, ctx: JobCtx, seen: list[int]) -> None:
    await anyio.lowlevel.checkpoint()
    seen.append(threading.get_ident())


@pytest.mark.parametrize(
    "shape", ["partial", "callable-object", "bound-method", "lambda-returning-a-coroutine"]
)
async def test_async_callables_run_on_the_event_loop(shape: str) -> None:
    """``functools.partial`` of an async function, an object with an async ``__call__`` and a
    bound async method are async handlers; a plain function that returns a coroutine runs in
    a thread, and the coroutine it returns is awaited on the event loop."""
    seen: list[int] = []
    handler: Any
    if shape == "partial":
        handler = functools.partial(_async_with_extra, seen=seen)
    elif shape == "callable-object":
        handler = _AsyncCallable(seen)
    elif shape == "bound-method":
        handler = _AsyncCallable(seen).method
    else:
        handler = lambda payload, ctx: _async_with_extra(payload, ctx, seen)  # noqa: E731
    async with open_in_memory_client() as (client, engine):
        spy = EngineSpy(engine)
        worker = Worker(client, [QUEUE], auto_extend=True)
        worker.handle("t", handler)
        await enqueue(client, 2)
        async with running(worker):
            await spy.wait_for("ack", 2)
        assert seen == [threading.get_ident()] * 2
        assert not spy.of("nack")


def test_async_or_sync_is_decided_from_what_the_callable_is() -> None:
    seen: list[int] = []

    def plain(payload: Payload | None, ctx: JobCtx) -> None:
        return None

    assert _is_async_callable(_async_with_extra)
    assert _is_async_callable(functools.partial(_async_with_extra, seen=seen))
    assert _is_async_callable(functools.partial(functools.partial(_async_with_extra), seen=[]))
    assert _is_async_callable(_AsyncCallable(seen))
    assert _is_async_callable(_AsyncCallable(seen).method)
    assert _is_async_callable(functools.partial(_AsyncCallable(seen)))
    assert not _is_async_callable(plain)
    assert not _is_async_callable(functools.partial(plain))
    assert not _is_async_callable(_SyncCallable(Threads()))
    assert not _is_async_callable(lambda payload, ctx: _async_with_extra(payload, ctx, seen))
    assert not _is_async_callable(print)


async def test_the_lease_is_extended_while_a_sync_handler_blocks() -> None:
    threads = Threads()
    async with open_in_memory_client() as (client, engine):
        spy = EngineSpy(engine)
        worker = Worker(client, [QUEUE], lease=2.0, auto_extend=True)
        worker.handle("t", threads.blocking())
        [job_id] = await enqueue(client)
        async with running(worker):
            await threads.wait_until(lambda: bool(threads.ctxs))
            # The thread blocks; the heartbeat on the event loop goes on extending.
            await spy.wait_for("extend", 5)
            threads.gate.set()
            [ack] = await spy.wait_for("ack")
        assert (ack.request.job_id, ack.request.attempt) == (job_id, 1)
        assert threads.after_cancel == [job_id]
        stats = worker.statistics()
        assert (stats.processed, stats.lease_lost, stats.settle_errors) == (1, 0, 0)


def _sync_limiter(worker: Worker) -> anyio.CapacityLimiter:
    limiter = worker._sync_limiter
    assert limiter is not None
    return limiter


@pytest.mark.parametrize("sync_threads", [None, 2])
async def test_sync_threads_bounds_the_threads_in_use(sync_threads: int | None) -> None:
    threads = Threads()
    async with open_in_memory_client() as (client, engine):
        spy = EngineSpy(engine)
        worker = Worker(
            client, [QUEUE], auto_extend=True, max_in_flight=4, sync_threads=sync_threads
        )
        worker.handle("t", threads.blocking())
        await enqueue(client, 4)
        expected = 4 if sync_threads is None else sync_threads  # default: max_in_flight
        async with running(worker):
            await threads.wait_until(lambda: threads.inside == expected)
            await anyio.wait_all_tasks_blocked()
            limiter = _sync_limiter(worker)
            assert limiter.total_tokens == expected
            assert limiter.borrowed_tokens == expected
            # Every job holds its slot; those without a thread wait for one.
            assert worker.statistics().in_flight == 4
            assert limiter.statistics().tasks_waiting == 4 - expected
            threads.gate.set()
            await spy.wait_for("ack", 4)
        assert threads.most_inside == expected
        assert worker.statistics().max_in_flight_seen == 4


async def _started_then(
    client: Client, worker: Worker, threads: Threads, act: Callable[[], Any]
) -> None:
    """Run ``worker`` until its one job is in its thread, ``await act()``, then open the
    gate and let ``run()`` finish (shut down)."""
    async with anyio.create_task_group() as tg:
        await tg.start(worker.run)
        await threads.wait_until(lambda: bool(threads.ctxs))
        await act()
        threads.gate.set()
        worker.shutdown()


@pytest.mark.parametrize("honour_cancel", [True, False], ids=["raises", "swallows"])
async def test_job_timeout_reaches_the_thread_and_nacks_for_retry(honour_cancel: bool) -> None:
    threads = Threads()
    async with open_in_memory_client() as (client, engine):
        spy = EngineSpy(engine)
        worker = Worker(client, [QUEUE], job_timeout=5.0, auto_extend=True, max_in_flight=1)
        worker.handle("t", threads.blocking(honour_cancel=honour_cancel))
        [job_id] = await enqueue(client)

        async def past_the_timeout() -> None:
            await anyio.sleep(6.0)
            # Python cannot stop the thread: the job still holds its slot.
            assert worker.statistics().in_flight == 1
            assert not spy.of("nack")

        await _started_then(client, worker, threads, past_the_timeout)
        [nack] = spy.of("nack")
        assert (nack.request.job_id, nack.request.reason, nack_kind(nack)) == (
            job_id,
            "timed out",
            ("default", None),
        )
        assert threads.cancelled == [job_id]
        assert threads.after_cancel == ([] if honour_cancel else [job_id])
        assert not spy.of("ack")


async def test_a_lost_lease_reaches_the_thread_and_nothing_is_settled() -> None:
    threads = Threads()
    async with open_in_memory_client() as (client, engine):
        spy = EngineSpy(engine)
        worker = Worker(client, [QUEUE], lease=2.0, max_lease_time=60.0, max_in_flight=1)
        worker.handle("t", threads.blocking())
        await enqueue(client)

        async def past_the_lease() -> None:
            await anyio.sleep(3.0)

        await _started_then(client, worker, threads, past_the_lease)
        assert len(threads.cancelled) == 1
        assert not [c for c in spy.calls if c.method in ("ack", "nack")]
        assert worker.statistics().lease_lost == 1


@pytest.mark.parametrize("how", ["drain_timeout", "cancel_in_flight"])
async def test_a_shutdown_cancel_reaches_the_thread_and_retries_at_once(how: str) -> None:
    threads = Threads()
    async with open_in_memory_client() as (client, engine):
        spy = EngineSpy(engine)
        drain = 1.0 if how == "drain_timeout" else None
        worker = Worker(client, [QUEUE], auto_extend=True, drain_timeout=drain)
        worker.handle("t", threads.blocking())
        [job_id] = await enqueue(client)
        returned = anyio.Event()

        async def run_and_flag() -> None:
            await worker.run()
            returned.set()

        async with anyio.create_task_group() as tg:
            tg.start_soon(run_and_flag)
            await threads.wait_until(lambda: bool(threads.ctxs))
            if how == "drain_timeout":
                worker.shutdown()
                await anyio.sleep(2.0)
            else:
                worker.cancel_in_flight()
            await anyio.wait_all_tasks_blocked()
            # run() cannot return while the thread runs.
            assert not returned.is_set()
            assert worker.statistics().in_flight == 1
            threads.gate.set()
        [nack] = spy.of("nack")
        assert (nack.request.job_id, nack_kind(nack)) == (job_id, ("after", 0.0))
        assert how in (nack.request.reason or "")
        assert threads.cancelled == [job_id]


async def test_a_sync_handler_can_extend_its_lease_through_the_event_loop() -> None:
    extended: list[Any] = []

    def extends(payload: Payload | None, ctx: JobCtx) -> None:
        extended.append(anyio.from_thread.run(ctx.extend, 600.0))

    async with open_in_memory_client() as (client, engine):
        spy = EngineSpy(engine)
        worker = Worker(client, [QUEUE], auto_extend=True)
        worker.handle("t", extends)
        await enqueue(client)
        async with running(worker):
            [ack] = await spy.wait_for("ack")
        assert ack.request.attempt == 1
        [manual] = [c for c in spy.of("extend", ok=True) if _seconds(c) == 600.0]
        assert extended == [manual.reply.lease_expires_at]


def _seconds(call: Any) -> float:
    return float(call.request.lease_duration.total_seconds())
