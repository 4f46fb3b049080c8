"""Time-dependent client behaviour in virtual time: backoff delays, cancellable backoff,
local deadlines (rpc_timeout and the reserve's wait + 10 s), lease expiry.

Every test runs on trio with ``MockClock(autojump_threshold=0)``: whenever all tasks are
blocked the clock jumps to the next deadline, so a 1000 s backoff takes no real time and
times are exact. The reference server runs in-process on the same clock.
"""

from __future__ import annotations

import itertools
from typing import Any

import anyio
import pytest
import trio.testing

from sepp_anyio import (
    EnqueueRequest,
    JobNotFoundError,
    RetryDirective,
    RetryPolicy,
    StatusCode,
    TransportError,
)

from . import cancel_once_blocked, leased_ctx, open_client

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> tuple[str, dict[str, Any]]:
    """Only trio, with a fresh autojumping MockClock per test."""
    return ("trio", {"clock": trio.testing.MockClock(autojump_threshold=0)})


def gaps(times: list[float]) -> list[float]:
    return [later - earlier for earlier, later in itertools.pairwise(times)]


# ------------------------------------------------------------------------------ backoff


async def test_backoff_grows_by_the_multiplier_up_to_max_backoff() -> None:
    policy = RetryPolicy(
        max_attempts=6, initial_backoff=1.0, multiplier=2.0, max_backoff=5.0, jitter=False
    )
    async with open_client(retry=policy, fail_first={"GetServerInfo": (5, "UNAVAILABLE")}) as mem:
        await mem.client.server_info()
        times = mem.faults.call_times["GetServerInfo"]
    assert gaps(times) == pytest.approx([1.0, 2.0, 4.0, 5.0, 5.0])


async def test_jitter_scales_each_delay_into_half_to_full() -> None:
    policy = RetryPolicy(max_attempts=8, initial_backoff=1.0, multiplier=2.0, max_backoff=1000)
    async with open_client(retry=policy, fail_first={"Ack": (7, "ABORTED")}) as mem:
        ctx = await leased_ctx(mem, lease=300)
        await mem.client.ack(ctx)
        observed = gaps(mem.faults.call_times["Ack"])
    nominal = [2.0**i for i in range(7)]
    assert len(observed) == 7
    for gap, full in zip(observed, nominal, strict=True):
        assert 0.5 * full - 1e-9 <= gap < full
    assert len({round(g / f, 6) for g, f in zip(observed, nominal, strict=True)}) > 1


async def test_an_ambient_deadline_interrupts_the_backoff_sleep() -> None:
    policy = RetryPolicy(max_attempts=3, initial_backoff=100.0, jitter=False)
    async with open_client(retry=policy, fail_first={"GetServerInfo": (5, "UNAVAILABLE")}) as mem:
        start = anyio.current_time()
        with pytest.raises(TimeoutError):
            with anyio.fail_after(5):
                await mem.client.server_info()
        assert anyio.current_time() - start == pytest.approx(5.0)
        assert mem.faults.calls["GetServerInfo"] == 1


async def test_cancelling_during_the_backoff_ends_the_call_at_once() -> None:
    policy = RetryPolicy(max_attempts=3, initial_backoff=1000.0, jitter=False)
    async with open_client(retry=policy, fail_first={"Nack": (5, "RESOURCE_EXHAUSTED")}) as mem:
        ctx = await leased_ctx(mem)
        start = anyio.current_time()
        assert await cancel_once_blocked(lambda: mem.client.nack(ctx))
        assert anyio.current_time() == start
        assert mem.faults.calls["Nack"] == 1


# ------------------------------------------------------------------------------ deadlines


async def test_an_expired_rpc_timeout_is_a_deadline_exceeded_transport_error() -> None:
    async with open_client(rpc_timeout=2.0, hang_first={"Ack": 1}) as mem:
        ctx = await leased_ctx(mem)
        start = anyio.current_time()
        with pytest.raises(TransportError) as caught:
            await mem.client.ack(ctx)
        assert anyio.current_time() - start == pytest.approx(2.0)
    assert caught.value.code is StatusCode.DEADLINE_EXCEEDED
    assert "deadline exceeded" in (caught.value.status_message or "")


async def test_a_local_deadline_expiry_is_retried_like_the_server_status() -> None:
    policy = RetryPolicy(max_attempts=3, initial_backoff=0.5, jitter=False)
    async with open_client(retry=policy, rpc_timeout=2.0, hang_first={"Extend": 2}) as mem:
        ctx = await leased_ctx(mem, lease=60)
        start = anyio.current_time()
        await ctx.extend(60)
        assert gaps(mem.faults.call_times["Extend"]) == pytest.approx([2.5, 3.0])
        # 2 s timeout, 0.5 s backoff, 2 s timeout, 1 s backoff, then the answer.
        assert anyio.current_time() - start == pytest.approx(5.5)
        assert ctx.lease_expires_at == ctx._lease.known_expiry  # type: ignore[union-attr]


@pytest.mark.parametrize(("key", "attempts"), [(None, 1), ("k", 2)])
async def test_a_timed_out_enqueue_is_retried_only_when_every_job_is_keyed(
    key: str | None, attempts: int
) -> None:
    policy = RetryPolicy(max_attempts=3, initial_backoff=0.0)
    async with open_client(retry=policy, rpc_timeout=1.0, hang_first={"EnqueueBatch": 1}) as mem:
        call = mem.client.enqueue(EnqueueRequest("q", "t", idempotency_key=key))
        if attempts == 1:
            with pytest.raises(TransportError) as caught:
                await call
            assert caught.value.code is StatusCode.DEADLINE_EXCEEDED
        else:
            await call
        assert mem.faults.calls["EnqueueBatch"] == attempts


async def test_the_reserve_deadline_is_its_wait_plus_ten_seconds_and_it_is_not_retried() -> None:
    policy = RetryPolicy(max_attempts=5, initial_backoff=0.0)
    async with open_client(retry=policy, rpc_timeout=1.0, hang_first={"Reserve": 1}) as mem:
        start = anyio.current_time()
        with pytest.raises(TransportError) as caught:
            await mem.client.reserve(["q"], lease=30, wait=5)
        assert anyio.current_time() - start == pytest.approx(15.0)
        assert mem.faults.calls["Reserve"] == 1
    assert caught.value.code is StatusCode.DEADLINE_EXCEEDED


async def test_a_long_poll_longer_than_rpc_timeout_ends_empty_not_in_a_timeout() -> None:
    async with open_client(rpc_timeout=1.0, limits={"max_wait_timeout_ms": 200_000}) as mem:
        start = anyio.current_time()
        assert await mem.client.reserve(["q"], lease=30, wait=120) == []
        assert anyio.current_time() - start == pytest.approx(120.0)
        # The server clamps the wait; the client's deadline (wait + 10 s) never fires first.
        start = anyio.current_time()
        assert await mem.client.reserve(["q"], lease=30, wait=3600) == []
        assert anyio.current_time() - start == pytest.approx(200.0)


# ------------------------------------------------------------------------------ leases


async def test_a_lease_expires_in_virtual_time_and_the_job_is_redelivered() -> None:
    async with open_client() as mem:
        ctx = await leased_ctx(mem, lease=30)
        await anyio.sleep(30.001)
        with pytest.raises(JobNotFoundError):
            await mem.client.ack(ctx)
        [again] = await mem.client.reserve(["q"], lease=30, wait=0)
    assert (again.ctx.id, again.ctx.attempt) == (ctx.id, 2)


async def test_a_nack_delay_wakes_a_parked_reserve_when_it_is_due() -> None:
    async with open_client() as mem:
        ctx = await leased_ctx(mem)
        await mem.client.nack(ctx, RetryDirective.after(7.5))
        start = anyio.current_time()
        [again] = await mem.client.reserve(["q"], lease=30, wait=60)
        assert anyio.current_time() - start == pytest.approx(7.5, abs=0.002)
    assert again.ctx.attempt == 2
