"""Lanes (``sepp.Lane``) and rate limits (``sepp.RateLimit``): each lane keeps its own
``max_in_flight``, a lane whose handlers block does not slow another's reserves, the token
bucket is taken before reserving and holds its rate under virtual time, conflicts are
refused naming them, ``statistics().lanes`` counts per lane; and ``run(until_idle=True)``.
Both backends, virtual time."""

from __future__ import annotations

from collections import Counter

import anyio
import pytest

from sepp_anyio import (
    HandlerError,
    InvalidArgumentError,
    InvalidArgumentTypeError,
    JobCtx,
    Lane,
    LaneStatistics,
    Payload,
    RateLimit,
    Worker,
)
from sepp_anyio.testing import open_in_memory_client

from ._helpers import EngineSpy, Probe, enqueue, running

pytestmark = pytest.mark.anyio


async def test_each_lane_keeps_its_own_max_in_flight() -> None:
    probes = {"a": Probe(), "b": Probe()}
    release = anyio.Event()

    async def wait_for_release(payload: Payload | None, ctx: JobCtx) -> None:
        await release.wait()

    async with open_in_memory_client() as (client, engine):
        spy = EngineSpy(engine)
        worker = Worker(
            client,
            [Lane(["a"], max_in_flight=2), Lane(["b"], max_in_flight=3)],
            auto_extend=True,
        )
        worker.handle("ta", probes["a"].handler(wait_for_release))
        worker.handle("tb", probes["b"].handler(wait_for_release))
        await enqueue(client, 10, queue="a", job_type="ta")
        await enqueue(client, 10, queue="b", job_type="tb")
        async with running(worker):
            await probes["a"].wait_starts(2)
            await probes["b"].wait_starts(3)
            await anyio.sleep(10)  # room for more, if a limit leaked
            stats = worker.statistics()
            assert [lane.in_flight for lane in stats.lanes] == [2, 3]
            assert stats.in_flight == 5
            release.set()
            await spy.wait_for("ack", 20)
        # Every reserve asked for the lane's own queues, within the lane's capacity.
        for call in spy.of("reserve"):
            queues = list(call.request.queues)
            assert queues in (["a"], ["b"])
            assert call.request.max_jobs <= (2 if queues == ["a"] else 3)
    assert (probes["a"].max_in_flight, probes["b"].max_in_flight) == (2, 3)
    stats = worker.statistics()
    assert stats.lanes == (
        LaneStatistics(("a",), 0, 10, 0, 0, 0, 0, stats.lanes[0].reserves, 0, 2),
        LaneStatistics(("b",), 0, 10, 0, 0, 0, 0, stats.lanes[1].reserves, 0, 3),
    )
    assert stats.processed == 20 and stats.max_in_flight_seen == 5
    assert stats.reserves == stats.lanes[0].reserves + stats.lanes[1].reserves


async def test_a_blocked_lane_does_not_slow_another_lanes_reserves() -> None:
    blocked, fast = Probe(), Probe()
    release = anyio.Event()

    async def wait_for_release(payload: Payload | None, ctx: JobCtx) -> None:
        await release.wait()

    async with open_in_memory_client() as (client, engine):
        spy = EngineSpy(engine)
        worker = Worker(
            client,
            [Lane(["slow"], max_in_flight=1), Lane(["fast"], max_in_flight=4)],
            auto_extend=True,
            wait=30.0,
        )
        worker.handle("slow", blocked.handler(wait_for_release))
        worker.handle("fast", fast.handler())
        await enqueue(client, 3, queue="slow", job_type="slow")
        async with running(worker):
            await blocked.wait_starts(1)
            started = anyio.current_time()
            # The slow lane is full (its reserve loop waits for capacity); the fast one
            # takes each job as it comes, without waiting for the other.
            for first in range(0, 12, 4):
                await enqueue(client, 4, queue="fast", job_type="fast", first=first)
                await spy.wait_for("ack", first + 4)
            assert anyio.current_time() - started < 0.1
            assert len(blocked.starts) == 1
            release.set()
            await spy.wait_for("ack", 15)


async def test_the_rate_limit_holds_its_rate_and_starts_with_a_burst() -> None:
    probe = Probe()
    async with open_in_memory_client() as (client, engine):
        spy = EngineSpy(engine)
        worker = Worker(client, [Lane(["r"], max_in_flight=8, rate=RateLimit(5, per=10.0))])
        worker.handle("t", probe.handler())
        await enqueue(client, 20, queue="r")
        async with running(worker):
            begin = anyio.current_time()
            await spy.wait_for("ack", 20)
    starts = sorted(at - begin for at, _ in probe.starts)
    # A burst of 5 at once, then one every 2 s (5 per 10 s).
    assert starts[:5] == pytest.approx([0.0] * 5, abs=0.01)
    assert starts[-1] == pytest.approx(30.0, abs=0.1)
    for index, at in enumerate(starts):
        # Never more than count + rate * t starts by time t.
        assert index + 1 <= 5 + at / 2.0 + 1e-6, (index, at)
    # The tokens were taken before reserving: no reserve asked for more than it could start.
    asked = [call.request.max_jobs for call in spy.of("reserve")]
    assert asked[0] == 5 and max(asked) <= 5
    got = sum(len(call.reply.jobs) for call in spy.of("reserve", ok=True))
    assert got == 20


async def test_a_reserve_that_gets_fewer_jobs_gives_the_tokens_back() -> None:
    probe = Probe()
    async with open_in_memory_client() as (client, engine):
        spy = EngineSpy(engine)
        worker = Worker(client, [Lane(["r"], rate=RateLimit(4, per=60.0))], wait=1.0)
        worker.handle("t", probe.handler())
        async with running(worker):
            await enqueue(client, 1, queue="r")
            await spy.wait_for("ack")
            await anyio.sleep(5)  # empty reserves meanwhile take (and return) tokens
            await enqueue(client, 3, queue="r")
            await spy.wait_for("ack", 4)
    # One used, three left: the second batch needs no refill.
    assert probe.starts[-1][0] - probe.starts[1][0] < 0.01
    assert probe.starts[1][0] - probe.starts[0][0] < 7.0


async def test_until_idle_returns_once_every_lane_is_empty() -> None:
    seen: Counter[str] = Counter()
    async with open_in_memory_client() as (client, engine):
        spy = EngineSpy(engine)
        worker = Worker(client, [Lane(["a"], max_in_flight=2), Lane(["b"])], wait=30.0)

        @worker.handler("ta")
        async def on_a(payload: Payload | None, ctx: JobCtx) -> None:
            seen["a"] += 1
            await anyio.sleep(1)
            assert payload is not None
            if payload.json()["n"] == 3:
                # A follow-up for the other lane, which may already be idle.
                await enqueue(client, 1, queue="b", job_type="tb")

        @worker.handler("tb")
        async def on_b(payload: Payload | None, ctx: JobCtx) -> None:
            seen["b"] += 1

        @worker.handler("later")
        async def later(payload: Payload | None, ctx: JobCtx) -> None:
            raise HandlerError.retry_after("not now", 600)

        await enqueue(client, 4, queue="a", job_type="ta")
        await enqueue(client, 2, queue="b", job_type="tb")
        await enqueue(client, 1, queue="b", job_type="later")
        begin = anyio.current_time()
        with anyio.fail_after(60):
            await worker.run(until_idle=True)
        took = anyio.current_time() - begin
    assert seen == Counter(a=4, b=3)
    # The nacked job's 600 s backoff was not waited for, nor a long poll.
    assert took < 10
    assert all(not c.request.wait_timeout for c in spy.of("reserve"))
    stats = worker.statistics()
    assert (stats.processed, stats.nacked_retry, stats.in_flight) == (7, 1, 0)


async def test_until_idle_with_nothing_to_do_returns_at_once() -> None:
    async with open_in_memory_client() as (client, engine):
        spy = EngineSpy(engine)
        worker = Worker(client, ["q"])
        with anyio.fail_after(1):
            await worker.run(until_idle=True)
        assert len(spy.of("reserve")) == 1


def test_lane_conflicts_are_refused_naming_them() -> None:
    client = object()
    lanes = [Lane(["a"]), Lane(["b"])]
    with pytest.raises(InvalidArgumentError, match="max_in_flight cannot be given with lanes"):
        Worker(client, lanes, max_in_flight=4)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="max_in_flight and max_jobs cannot"):
        Worker(client, lanes, max_in_flight=4, max_jobs=2)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="not a mix"):
        Worker(client, [Lane(["a"]), "b"])  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="queue 'a' is in lane 0 and lane 1"):
        Worker(client, [Lane(["a"]), Lane(["b", "a"])])  # type: ignore[arg-type]
    worker = Worker(client, lanes)  # type: ignore[arg-type]
    assert worker.queues == ("a", "b") and worker.lanes == tuple(lanes)


@pytest.mark.parametrize(
    ("make", "error", "pattern"),
    [
        (lambda: Lane([]), InvalidArgumentError, "Lane queues must name at least one"),
        (lambda: Lane("a"), InvalidArgumentTypeError, "Lane queues must be a sequence"),
        (lambda: Lane([""]), InvalidArgumentError, r"Lane queues\[0\]"),
        (lambda: Lane(["a"], max_in_flight=0), InvalidArgumentError, "Lane max_in_flight"),
        (lambda: Lane(["a"], max_jobs=1.5), InvalidArgumentTypeError, "Lane max_jobs"),  # type: ignore[arg-type]
        (lambda: Lane(["a"], rate=5), InvalidArgumentTypeError, "Lane rate"),  # type: ignore[arg-type]
        (lambda: RateLimit(0, per=1), InvalidArgumentError, "RateLimit count"),
        (lambda: RateLimit(1, per=0), InvalidArgumentError, "RateLimit per"),
        (lambda: RateLimit(1, per=float("inf")), InvalidArgumentError, "RateLimit per"),
        (lambda: RateLimit(1, per="1"), InvalidArgumentTypeError, "RateLimit per"),  # type: ignore[arg-type]
    ],
)
def test_lane_and_rate_limit_argument_errors(
    make: object, error: type[Exception], pattern: str
) -> None:
    with pytest.raises(error, match=pattern):
        make()  # type: ignore[operator]


async def test_until_idle_sees_jobs_that_finish_while_a_reserve_is_on_its_way() -> None:
    async with open_in_memory_client() as (client, engine):
        spy = EngineSpy(engine)
        # The second reserve (sent while the jobs run) answers only after they finished:
        # their finish must not be missed, or the worker would wait for it forever.
        spy.stall["reserve"] = [0.0, 5.0]
        worker = Worker(client, ["q"])

        @worker.handler("t")
        async def handle(payload: Payload | None, ctx: JobCtx) -> None:
            await anyio.sleep(1)

        await enqueue(client, 3)
        with anyio.fail_after(60):
            await worker.run(until_idle=True)
        assert worker.statistics().processed == 3
        assert anyio.current_time() < 10
