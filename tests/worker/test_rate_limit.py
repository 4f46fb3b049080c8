"""The lanes' token bucket on virtual clocks: each wait for a token moves the clock to that
token's refill, for thousands of refills at rates whose float arithmetic rounds (a wait
that rounded to no time left the clock standing still and the loop spinning), and a
rate-limited lane runs its jobs to the end at its rate. Both backends, virtual time; a
real-time guard turns a spin into a failure rather than a hang."""

from __future__ import annotations

import anyio
import pytest

from sepp_anyio import JobCtx, Lane, Payload, RateLimit, Worker
from sepp_anyio._worker._lane import RateGate
from sepp_anyio.testing import open_in_memory_client

from ._helpers import enqueue, real_time_limit

pytestmark = pytest.mark.anyio

# Rates whose refill times are not exact in binary (1/5 s, 0.7/3 s, ...), one exact (1/4 s).
LIMITS = [
    RateLimit(5, per=1.0),
    RateLimit(3, per=0.7),
    RateLimit(7, per=1.3),
    RateLimit(10, per=0.1),
    RateLimit(1, per=0.3),
    RateLimit(4, per=1.0),
]
TOKENS = 3000


@pytest.mark.parametrize("limit", LIMITS, ids=lambda limit: f"{limit.count}per{limit.per:g}")
@pytest.mark.parametrize("offset", [0.0, 12345.678], ids=["clock0", "clock12345"])
async def test_the_bucket_makes_progress_for_thousands_of_refills(
    limit: RateLimit, offset: float
) -> None:
    rate = limit.count / limit.per
    # The clock's magnitude changes how the refill times round.
    await anyio.sleep(offset)
    bucket = RateGate(limit)
    expected_end = (TOKENS - limit.count) / rate
    async with real_time_limit(30):
        with anyio.fail_after(expected_end + 10):
            begin = anyio.current_time()
            granted = 0
            for _ in range(TOKENS):
                granted += await bucket.take(1)
                at = anyio.current_time() - begin
                # Never more than the burst plus what the rate earned by now.
                assert granted <= limit.count + at * rate + 1e-6, (granted, at)
    # And not fewer: each wait ended at its token's own refill time.
    assert granted == TOKENS
    assert anyio.current_time() - begin == pytest.approx(expected_end, rel=1e-6)


async def test_the_bucket_grants_what_it_has_and_takes_back_what_was_not_used() -> None:
    bucket = RateGate(RateLimit(5, per=1.0))
    async with real_time_limit(30):
        with anyio.fail_after(1000):
            begin = anyio.current_time()
            assert await bucket.take(3) == 3
            assert await bucket.take(10) == 2  # the rest of the burst
            assert anyio.current_time() == begin
            granted = 0
            # Many rounds of "ask for 4, use 1, give 3 back" take one refill each.
            for _ in range(2000):
                got = await bucket.take(4)
                assert got == 1
                bucket.give_back(got - 1)
                granted += 1
            assert anyio.current_time() - begin == pytest.approx(granted / 5.0, rel=1e-6)
            # A full bucket earns nothing while idle: after a long rest, one burst only.
            await anyio.sleep(100)
            assert await bucket.take(100) == 5


async def test_a_rate_limited_lane_runs_every_job_at_its_rate() -> None:
    """The issue's case: 20 jobs, ``RateLimit(5, per=1.0)``, 10 in flight, used to stop at 9
    jobs with the clock stuck at 1 s. A burst of 5 at once, then one every 0.2 s: the last
    starts at 3 s."""
    starts: list[float] = []
    all_done = anyio.Event()

    async def handle(payload: Payload | None, ctx: JobCtx) -> None:
        starts.append(anyio.current_time())
        if len(starts) == 20:
            all_done.set()

    async with open_in_memory_client() as (client, _engine):
        worker = Worker(client, [Lane(["r"], rate=RateLimit(5, per=1.0), max_in_flight=10)])
        worker.handle("t", handle)
        await enqueue(client, 20, queue="r")
        async with real_time_limit(30), anyio.create_task_group() as tg:
            begin = anyio.current_time()
            await tg.start(worker.run)
            with anyio.fail_after(60):
                await all_done.wait()
            worker.shutdown()
    assert worker.statistics().processed == 20
    relative = sorted(at - begin for at in starts)
    assert relative[:5] == pytest.approx([0.0] * 5, abs=0.01)
    assert relative[-1] == pytest.approx(3.0, abs=0.05)
    for index, at in enumerate(relative):
        assert index + 1 <= 5 + at * 5.0 + 1e-6, (index, at)
