"""Leases: auto-extension (granted lease, explicit interval, manual extends), lease loss,
job_timeout and max_lease_time. Both backends, virtual time."""

from __future__ import annotations

import itertools

import anyio
import pytest

from sepp_anyio import JobCtx, Payload, Worker
from sepp_anyio.testing import open_in_memory_client

from ._helpers import QUEUE, EngineSpy, Probe, enqueue, nack_kind, running, unavailable

pytestmark = pytest.mark.anyio


def _seconds(duration: object) -> float:
    assert duration is not None
    return float(duration.total_seconds())  # type: ignore[attr-defined]


async def test_auto_extend_keeps_a_2s_lease_alive_through_a_3s_handler() -> None:
    probe = Probe()

    async def slow(payload: Payload | None, ctx: JobCtx) -> None:
        await anyio.sleep(3)

    async with open_in_memory_client() as (client, engine):
        spy = EngineSpy(engine)
        worker = Worker(client, [QUEUE], lease=2.0, auto_extend=True)
        worker.handle("t", probe.handler(slow))
        [job_id] = await enqueue(client)
        async with running(worker):
            [ack] = await spy.wait_for("ack")
        assert (ack.request.job_id, ack.request.attempt) == (job_id, 1)
        assert probe.attempts() == [1]
        extends = spy.of("extend", ok=True)
        assert len(extends) >= 4
        assert {_seconds(c.request.lease_duration) for c in extends} == {2.0}
        stats = worker.statistics()
        assert (stats.processed, stats.lease_lost, stats.settle_errors) == (1, 0, 0)


async def test_without_auto_extend_the_same_job_outlives_its_lease() -> None:
    """The control for the test above: the 2 s lease runs out during the 3 s handler, the
    job is redelivered, and the late ack is refused (logged, not fatal)."""
    probe = Probe()

    async def slow(payload: Payload | None, ctx: JobCtx) -> None:
        if ctx.attempt == 1:
            await anyio.sleep(3)

    async with open_in_memory_client() as (client, engine):
        spy = EngineSpy(engine)
        worker = Worker(client, [QUEUE], lease=2.0)
        worker.handle("t", probe.handler(slow))
        await enqueue(client)
        async with running(worker):
            await spy.wait_for("ack", 2, ok=False)
        assert probe.attempts() == [1, 2]
        assert [(c.request.attempt, c.ok) for c in spy.of("ack")] == [(2, True), (1, False)]
        assert not spy.of("extend")
        stats = worker.statistics()
        assert (stats.processed, stats.settle_errors) == (1, 1)


async def test_auto_extend_follows_the_granted_lease_when_the_server_clamps() -> None:
    probe = Probe()

    async def slow(payload: Payload | None, ctx: JobCtx) -> None:
        await anyio.sleep(5)

    async with open_in_memory_client(limits={"max_lease_duration_ms": 2000}) as (client, engine):
        spy = EngineSpy(engine)
        worker = Worker(client, [QUEUE], lease=30.0, auto_extend=True)
        worker.handle("t", probe.handler(slow))
        await enqueue(client)
        async with running(worker):
            [ack] = await spy.wait_for("ack")
        assert ack.request.attempt == 1
        assert probe.attempts() == [1]
        [reserve] = [c for c in spy.of("reserve") if c.ok and c.reply.jobs]
        extends = spy.of("extend", ok=True)
        # Every extension asks for the configured lease again; the server grants 2 s.
        assert {_seconds(c.request.lease_duration) for c in extends} == {30.0}
        # A third of the *granted* 2 s, each time (a third of 30 s would have lost it).
        beats = [reserve.ended_at] + [c.at for c in extends]
        gaps = [b - a for a, b in itertools.pairwise(beats)]
        assert len(gaps) >= 6
        assert all(0.6 < gap < 0.7 for gap in gaps), gaps
        assert worker.statistics().lease_lost == 0


async def test_an_explicit_interval_is_used_as_is() -> None:
    async def slow(payload: Payload | None, ctx: JobCtx) -> None:
        await anyio.sleep(2.2)

    async with open_in_memory_client() as (client, engine):
        spy = EngineSpy(engine)
        worker = Worker(client, [QUEUE], lease=30.0, auto_extend=0.5)
        worker.handle("t", slow)
        await enqueue(client)
        async with running(worker):
            await spy.wait_for("ack")
        beats = [c.at for c in spy.of("extend", ok=True)]
        assert len(beats) == 4
        gaps = [b - a for a, b in itertools.pairwise(beats)]
        assert all(0.49 < gap < 0.51 for gap in gaps), gaps


async def test_a_manual_extend_delays_the_next_automatic_one() -> None:
    """``ctx.extend`` moves the expiry the heartbeat follows; the heartbeat must not cut the
    longer lease the handler asked for back down to ``lease`` at its next beat."""

    async def long_job(payload: Payload | None, ctx: JobCtx) -> None:
        await anyio.sleep(0.5)
        await ctx.extend(30)
        await anyio.sleep(40)

    async with open_in_memory_client() as (client, engine):
        spy = EngineSpy(engine)
        worker = Worker(client, [QUEUE], lease=3.0, auto_extend=True)
        worker.handle("t", long_job)
        [job_id] = await enqueue(client)
        async with running(worker):
            await spy.wait_for("ack")
        manual, *automatic = spy.of("extend")
        assert _seconds(manual.request.lease_duration) == 30.0
        assert manual.at == pytest.approx(0.5)
        # No extension until less than `lease` (3 s) was left of the 30 s one ...
        assert automatic[0].at - manual.at > 27.0
        # ... so the granted expiry only ever moved later, and the job was never lost.
        expiries = [c.reply.lease_expires_at for c in spy.of("extend")]
        assert expiries == sorted(expiries)
        assert all(c.ok for c in spy.of("extend"))
        assert engine.snapshot_job(job_id) is None
        assert worker.statistics().lease_lost == 0


@pytest.mark.parametrize("swallow", [False, True], ids=["plain", "swallows-cancel"])
async def test_lease_taken_by_another_consumer_cancels_the_handler_which_never_acks(
    swallow: bool,
) -> None:
    probe = Probe()

    async def stubborn(payload: Payload | None, ctx: JobCtx) -> None:
        if swallow:
            with anyio.CancelScope(shield=False) as scope:
                try:
                    await anyio.sleep_forever()
                except anyio.get_cancelled_exc_class():
                    probe.cancelled.append(ctx)
                    # Swallowed: the handler returns normally after being cancelled.
                    scope.cancel()
            return
        await anyio.sleep_forever()

    async with open_in_memory_client() as (client, engine):
        spy = EngineSpy(engine)
        # Extends every 5 s, but the lease is 2 s: it runs out between two beats. One slot,
        # so that the worker does not reserve the job again itself.
        worker = Worker(
            client, [QUEUE], lease=2.0, auto_extend=5.0, max_in_flight=1, worker_id="slow"
        )
        worker.handle("t", probe.handler(stubborn))
        [job_id] = await enqueue(client)
        async with running(worker):
            await probe.wait_starts(1)
            [taken] = await client.reserve([QUEUE], lease=60.0, wait=30.0, worker_id="thief")
            assert (taken.ctx.id, taken.ctx.attempt) == (job_id, 2)
            await probe.wait_until(lambda: probe.in_flight == 0)
            [extend] = spy.of("extend")
            assert type(extend.error).__name__ == "EngineError"  # FAILED_PRECONDITION
        assert probe.cancelled, "the handler was not cancelled"
        worker_settles = [c for c in spy.calls if c.method in ("ack", "nack")]
        assert worker_settles == []  # neither acked nor nacked by the worker
        stats = worker.statistics()
        assert (stats.lease_lost, stats.processed, stats.settle_errors) == (1, 0, 0)
        # The new owner's lease is intact.
        await client.ack(taken.ctx)


async def test_a_job_settled_elsewhere_is_lost_on_not_found() -> None:
    probe = Probe()

    async def forever(payload: Payload | None, ctx: JobCtx) -> None:
        await anyio.sleep_forever()

    async with open_in_memory_client() as (client, engine):
        spy = EngineSpy(engine)
        worker = Worker(client, [QUEUE], lease=2.0, auto_extend=5.0, max_in_flight=1)
        worker.handle("t", probe.handler(forever))
        await enqueue(client)
        async with running(worker):
            await probe.wait_starts(1)
            [taken] = await client.reserve([QUEUE], lease=60.0, wait=30.0, worker_id="other")
            await client.ack(taken.ctx)
            await probe.wait_until(lambda: bool(probe.cancelled))
        [extend] = spy.of("extend")
        assert "not found" in str(extend.error)
        assert [c.method for c in spy.calls if c.method in ("ack", "nack")] == ["ack"]
        assert worker.statistics().lease_lost == 1


async def test_extend_errors_are_retried_until_the_known_expiry_passes() -> None:
    probe = Probe()

    async def forever(payload: Payload | None, ctx: JobCtx) -> None:
        if ctx.attempt == 1:
            await anyio.sleep_forever()

    async with open_in_memory_client() as (client, engine):
        spy = EngineSpy(engine)
        spy.reject["extend"] = lambda request: unavailable() if request.attempt == 1 else None
        worker = Worker(client, [QUEUE], lease=3.0, auto_extend=True)
        worker.handle("t", probe.handler(forever))
        await enqueue(client)
        async with running(worker):
            await probe.wait_starts(1)
            started = probe.starts[0][0]
            await probe.wait_until(lambda: bool(probe.cancelled))
            cancelled_at = anyio.current_time()
            await spy.wait_for("ack")  # attempt 2, after the server took the job back
        failed = spy.of("extend", ok=False)
        assert len(failed) >= 3
        # Failures before the expiry are retried; the first one after it ends the job.
        assert all(c.at - started < 3.0 for c in failed[:-1])
        assert 3.0 <= failed[-1].at - started < 3.01
        assert 3.0 <= cancelled_at - started < 3.01
        assert probe.attempts() == [1, 2]
        assert [c.request.attempt for c in spy.of("ack")] == [2]
        assert not spy.of("nack")
        assert worker.statistics().lease_lost == 1


async def test_a_transient_extend_error_is_survived() -> None:
    async def slow(payload: Payload | None, ctx: JobCtx) -> None:
        await anyio.sleep(5)

    async with open_in_memory_client() as (client, engine):
        spy = EngineSpy(engine)
        spy.fail("extend", unavailable(), unavailable())
        worker = Worker(client, [QUEUE], lease=3.0, auto_extend=True)
        worker.handle("t", slow)
        await enqueue(client)
        async with running(worker):
            [ack] = await spy.wait_for("ack")
        assert ack.request.attempt == 1
        assert [c.ok for c in spy.of("extend")][:3] == [False, False, True]
        assert worker.statistics().lease_lost == 0


async def test_job_timeout_cancels_the_handler_and_nacks_for_retry() -> None:
    probe = Probe()

    async def slow_first(payload: Payload | None, ctx: JobCtx) -> None:
        if ctx.attempt == 1:
            await anyio.sleep(10)

    async with open_in_memory_client() as (client, engine):
        spy = EngineSpy(engine)
        worker = Worker(client, [QUEUE], job_timeout=1.5, lease=1.0, auto_extend=True)
        worker.handle("t", probe.handler(slow_first))
        await enqueue(client)
        async with running(worker):
            [ack] = await spy.wait_for("ack")
        [nack] = spy.of("nack")
        assert (nack.request.attempt, nack.request.reason, nack_kind(nack)) == (
            1,
            "timed out",
            ("default", None),
        )
        assert nack.at - probe.starts[0][0] == pytest.approx(1.5, abs=0.001)
        assert [ctx.attempt for ctx in probe.cancelled] == [1]
        assert ack.request.attempt == 2
        stats = worker.statistics()
        assert (stats.nacked_retry, stats.processed, stats.lease_lost) == (1, 1, 0)


async def test_max_lease_time_stops_extending_and_cancels_as_lease_lost() -> None:
    probe = Probe()

    async def forever_first(payload: Payload | None, ctx: JobCtx) -> None:
        if ctx.attempt == 1:
            await anyio.sleep_forever()

    async with open_in_memory_client() as (client, engine):
        spy = EngineSpy(engine)
        worker = Worker(client, [QUEUE], lease=2.0, auto_extend=True, max_lease_time=5.0)
        worker.handle("t", probe.handler(forever_first))
        await enqueue(client)
        async with running(worker):
            await probe.wait_starts(1)
            started = probe.starts[0][0]
            await probe.wait_until(lambda: bool(probe.cancelled))
            cancelled_at = anyio.current_time()
            cancelled_at_ms = engine.clock.now_ms()
            [ack] = await spy.wait_for("ack")
        extends = spy.of("extend")
        assert extends and all(c.at - started <= 5.0 for c in extends)
        # Cancelled when the last lease granted before max_lease_time ran out.
        assert 5.0 <= cancelled_at - started <= 7.0
        last_expiry_ms = round(extends[-1].reply.lease_expires_at.timestamp() * 1000)
        assert abs(cancelled_at_ms - last_expiry_ms) <= 2
        assert ack.request.attempt == 2  # redelivered by the server, not settled by us
        assert [c.request.attempt for c in spy.of("ack")] == [2]
        assert not spy.of("nack")
        assert worker.statistics().lease_lost == 1


async def test_max_lease_time_without_auto_extend_ends_the_job_with_its_lease() -> None:
    probe = Probe()

    async def forever(payload: Payload | None, ctx: JobCtx) -> None:
        await anyio.sleep_forever()

    async with open_in_memory_client() as (client, engine):
        spy = EngineSpy(engine)
        worker = Worker(client, [QUEUE], lease=2.0, max_lease_time=60.0)
        worker.handle("t", probe.handler(forever))
        await enqueue(client, max_attempts=1)
        async with running(worker):
            await probe.wait_until(lambda: bool(probe.cancelled))
            assert anyio.current_time() - probe.starts[0][0] == pytest.approx(2.0, abs=0.01)
        assert not spy.of("extend")
        assert not [c for c in spy.calls if c.method in ("ack", "nack")]
        assert worker.statistics().lease_lost == 1
