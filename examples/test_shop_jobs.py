"""Tests for the shop's handlers: the pytest plugin's in-process server and trio's MockClock.

::

    python -m pytest examples/test_shop_jobs.py

Nothing to start: the ``sepp_in_memory`` fixture (from sepp-anyio's pytest plugin,
installed with the package) runs a reference server inside the test's own event loop, and
``open_in_memory_client`` does the same with a chosen configuration. Under trio's
``MockClock(autojump_threshold=0)`` the server's timers run on the test's clock, so a 30 s
retry delay or a lease extended for minutes takes no real time, and every run sees the same
order of events.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import anyio
import pytest
import trio.testing

import sepp_anyio as sepp
import shop_jobs
from sepp_anyio.server import Engine
from sepp_anyio.testing import open_in_memory_client

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> tuple[str, dict[str, Any]]:
    """trio, on a virtual clock that jumps ahead whenever every task is waiting."""
    return ("trio", {"clock": trio.testing.MockClock(autojump_threshold=0)})


async def run_until_idle(worker: sepp.Worker) -> sepp.WorkerStatistics:
    """Run ``worker`` until every job that is ready has been handled, then return its
    counters (``run(until_idle=True)``: it stops once a reserve finds nothing to do)."""
    with anyio.fail_after(3600):  # virtual seconds: a hang fails fast, in real time too
        await worker.run(until_idle=True)
    return worker.statistics()


async def run_worker_until(
    worker: sepp.Worker, done: Callable[[sepp.WorkerStatistics], bool]
) -> sepp.WorkerStatistics:
    """Run ``worker`` until ``done(statistics)``, then shut it down (it drains): for jobs
    retried with a backoff, which ``until_idle`` does not wait for.

    Polling is fine here: on the virtual clock a 0.1 s sleep takes no real time.
    """
    async with worker:
        with anyio.fail_after(3600):  # virtual seconds: a hang fails fast, in real time too
            while not done(worker.statistics()):  # noqa: ASYNC110
                await anyio.sleep(0.1)
    return worker.statistics()


def order(**fields: Any) -> sepp.Payload:
    return sepp.Payload.from_json({"order": 1, **fields})


async def test_a_confirmation_is_sent_and_acked(sepp_in_memory: tuple[sepp.Client, Engine]) -> None:
    client, engine = sepp_in_memory
    ack = await client.enqueue(
        sepp.EnqueueRequest("shop", "send_confirmation", payload=order(email="ada@example.com"))
    )
    stats = await run_until_idle(shop_jobs.make_worker(client))
    assert stats.processed == 1
    assert stats.nacked_retry == stats.nacked_dead_letter == 0
    assert engine.snapshot_job(ack.job_id) is None  # acked jobs are gone from the server


async def test_a_confirmation_without_address_is_dead_lettered_at_once() -> None:
    # Dead letters are kept only when the server is told to: configure the in-process one.
    async with open_in_memory_client(storage={"dead_letter_retention_ms": 60_000}) as (
        client,
        _,
    ):
        await client.enqueue(sepp.EnqueueRequest("shop", "send_confirmation", payload=order()))
        stats = await run_until_idle(shop_jobs.make_worker(client))
        assert stats.nacked_dead_letter == 1
        assert stats.processed == stats.nacked_retry == 0
        (record,) = await client.drain_dead_letters("shop", max=10)
        assert record.cause is sepp.DeadLetterCause.REJECTED
        assert record.final_attempt == 1
        assert record.last_reason == "the order has no e-mail address"


async def test_a_gateway_timeout_is_retried_30_seconds_later(
    sepp_in_memory: tuple[sepp.Client, Engine], monkeypatch: pytest.MonkeyPatch
) -> None:
    client, _ = sepp_in_memory
    calls: list[float] = []

    async def flaky_charge(card: str, amount_cents: int) -> str:
        calls.append(anyio.current_time())
        if len(calls) < 3:
            raise shop_jobs.GatewayTimeout()
        return "ch_1"

    monkeypatch.setattr(shop_jobs.payments, "charge", flaky_charge)
    await client.enqueue(
        sepp.EnqueueRequest("shop", "charge_card", payload=order(card="tok_visa", amount_cents=500))
    )
    stats = await run_worker_until(shop_jobs.make_worker(client), lambda s: s.processed == 1)
    assert stats.nacked_retry == 2
    # Two 30 s retry delays, on the virtual clock: the test itself takes milliseconds.
    gaps = [later - earlier for earlier, later in itertools.pairwise(calls)]
    assert gaps == [pytest.approx(30.0, abs=0.5)] * 2


async def test_a_declined_card_is_not_retried(
    sepp_in_memory: tuple[sepp.Client, Engine],
) -> None:
    client, _ = sepp_in_memory
    await client.enqueue(
        sepp.EnqueueRequest(
            "shop", "charge_card", payload=order(card="tok_declined", amount_cents=500)
        )
    )
    stats = await run_until_idle(shop_jobs.make_worker(client))
    assert stats.nacked_dead_letter == 1
    assert stats.nacked_retry == 0 and stats.processed == 0


async def test_a_long_resize_keeps_its_lease(
    sepp_in_memory: tuple[sepp.Client, Engine],
) -> None:
    client, _ = sepp_in_memory
    # 6,000 megapixels: a minute of work against a 10 s lease (virtual time again).
    await client.enqueue(
        sepp.EnqueueRequest("shop", "resize_photo", payload=order(megapixels=6000))
    )
    started = anyio.current_time()
    stats = await run_until_idle(shop_jobs.make_worker(client))
    assert stats.processed == 1
    assert anyio.current_time() - started >= 59.99  # 6,000 sleeps of 0.01 s
    assert stats.lease_lost == 0  # auto_extend kept it: no other worker got the job
