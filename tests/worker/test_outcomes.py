"""The worker's own cancellations decide the outcome, whatever the handler does with them:
``job_timeout`` nacks "timed out", ``drain_timeout`` and ``cancel_in_flight()`` nack for an
immediate retry, even when the handler swallows the cancellation and returns normally (or
raises something else). Both backends, virtual time."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import anyio
import pytest

from sepp_anyio import JobCtx, Payload, Worker
from sepp_anyio.testing import open_in_memory_client

from ._helpers import QUEUE, EngineSpy, Probe, enqueue, nack_kind, running

pytestmark = pytest.mark.anyio

Body = Callable[[Payload | None, JobCtx], Awaitable[None]]


def _swallowing(then: str, after: anyio.Event | None = None) -> Body:
    """A handler body that sleeps, swallows the cancellation, and then returns normally
    (``"returns"``), raises ValueError (``"raises"``), or first waits for ``after``."""

    async def body(payload: Payload | None, ctx: JobCtx) -> None:
        try:
            await anyio.sleep(3600)
        except anyio.get_cancelled_exc_class():
            pass  # swallowed: the cancellation does not get out of here
        if after is not None:
            # Shielded, as a handler that ignores cancellation would be; bounded, so that a
            # failing test ends instead of waiting for an event nobody will set.
            with anyio.CancelScope(shield=True), anyio.move_on_after(600):
                await after.wait()
        if then == "raises":
            raise ValueError("not my fault")

    return body


@pytest.mark.parametrize("then", ["returns", "raises"])
async def test_a_handler_that_swallows_its_job_timeout_is_still_nacked_as_timed_out(
    then: str,
) -> None:
    probe = Probe()
    async with open_in_memory_client() as (client, engine):
        spy = EngineSpy(engine)
        worker = Worker(client, [QUEUE], job_timeout=2.0, auto_extend=True)
        worker.handle("t", probe.handler(_swallowing(then)))
        [job_id] = await enqueue(client)
        async with running(worker):
            [nack] = await spy.wait_for("nack")
        assert (nack.request.job_id, nack.request.reason, nack_kind(nack)) == (
            job_id,
            "timed out",
            ("default", None),
        )
        assert nack.at - probe.starts[0][0] == pytest.approx(2.0, abs=0.001)
        assert not spy.of("ack")
        assert worker.statistics().nacked_retry == 1


@pytest.mark.parametrize("how", ["drain_timeout", "cancel_in_flight"])
@pytest.mark.parametrize("then", ["returns", "raises"])
async def test_a_handler_that_swallows_a_shutdown_cancel_is_nacked_for_immediate_retry(
    how: str, then: str
) -> None:
    """And ``run()`` cannot return before that handler does."""
    probe, release = Probe(), anyio.Event()
    async with open_in_memory_client() as (client, engine):
        spy = EngineSpy(engine)
        drain = 1.0 if how == "drain_timeout" else None
        worker = Worker(client, [QUEUE], lease=2.0, auto_extend=True, drain_timeout=drain)
        worker.handle("t", probe.handler(_swallowing(then, after=release)))
        [job_id] = await enqueue(client)
        returned = anyio.Event()

        async def run_and_flag() -> None:
            await worker.run()
            returned.set()

        async with anyio.create_task_group() as tg:
            tg.start_soon(run_and_flag)
            await probe.wait_starts(1)
            if how == "drain_timeout":
                worker.shutdown()
            else:
                worker.cancel_in_flight()
            # Long after the cancellation, the handler that swallowed it still runs, its
            # lease still extended, and run() waits for it.
            await anyio.sleep(30)
            assert not returned.is_set()
            assert worker.statistics().in_flight == 1
            assert not [c for c in spy.calls if c.method in ("ack", "nack")]
            assert len(spy.of("extend", ok=True)) >= 10
            release.set()
        [nack] = spy.of("nack")
        assert (nack.request.job_id, nack_kind(nack)) == (job_id, ("after", 0.0))
        reason = nack.request.reason or ""
        assert reason.startswith("worker shut down before the handler finished ("), reason
        assert how in reason
        assert not spy.of("ack")
        assert worker.statistics().nacked_retry == 1


async def test_cancel_in_flight_leaves_a_job_whose_handler_has_returned_alone() -> None:
    """The outcome of a handler that returned before the cancellation is its own: its ack
    (on its way) is not turned into a nack."""
    finished = anyio.Event()

    async def quick(payload: Payload | None, ctx: JobCtx) -> None:
        finished.set()

    async with open_in_memory_client() as (client, engine):
        spy = EngineSpy(engine)
        spy.stall["ack"].append(5.0)
        worker = Worker(client, [QUEUE])
        worker.handle("t", quick)
        [job_id] = await enqueue(client)
        async with anyio.create_task_group() as tg:
            await tg.start(worker.run)
            await spy.wait_until(lambda: bool(spy.of("ack")))
            assert finished.is_set()
            worker.cancel_in_flight()
        [ack] = spy.of("ack")
        assert ack.ok and ack.request.job_id == job_id
        assert not spy.of("nack")


async def test_cancel_in_flight_names_its_reason() -> None:
    probe = Probe()
    async with open_in_memory_client() as (client, engine):
        spy = EngineSpy(engine)
        worker = Worker(client, [QUEUE])
        worker.handle("t", probe.handler(_swallowing("returns")))
        await enqueue(client)
        async with running(worker):
            await probe.wait_starts(1)
            worker.cancel_in_flight(reason="SIGTERM received again")
            worker.cancel_in_flight(reason="ignored: the first reason stays")
            [nack] = await spy.wait_for("nack")
        assert nack.request.reason == (
            "worker shut down before the handler finished (SIGTERM received again)"
        )
