"""Tests for the shop's handlers: the pytest plugin's test harness and trio's MockClock.

::

    python -m pytest examples/test_shop_jobs.py

Nothing to start: the ``sepp_harness`` fixture (from sepp-anyio's pytest plugin,
installed with the package) runs a reference server inside the test's own event loop, with
``harness.run_until_settled(worker)`` to run a worker until its queue is done and
``harness.jobs`` / ``harness.dead_letters`` to look at what is left. Under trio's
``MockClock(autojump_threshold=0)`` the server's timers run on the test's clock, so a 30 s
retry delay or a lease extended for minutes takes no real time, and every run sees the same
order of events.
"""

from __future__ import annotations

import itertools
from typing import Any

import anyio
import pytest
import trio.testing

import sepp_anyio as sepp
import shop_jobs
from sepp_anyio.testing import Harness

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> tuple[str, dict[str, Any]]:
    """trio, on a virtual clock that jumps ahead whenever every task is waiting."""
    return ("trio", {"clock": trio.testing.MockClock(autojump_threshold=0)})


def order(**fields: Any) -> sepp.Payload:
    return sepp.Payload.from_json({"order": 1, **fields})


async def test_a_confirmation_is_sent_and_acked(sepp_harness: Harness) -> None:
    client = sepp_harness.client
    ack = await client.enqueue(
        sepp.EnqueueRequest("shop", "send_confirmation", payload=order(email="ada@example.com"))
    )
    [queued] = sepp_harness.jobs("shop")
    assert (queued.id, queued.job_type, queued.state) == (ack.job_id, "send_confirmation", "ready")
    stats = await sepp_harness.run_until_settled(shop_jobs.make_worker(client))
    assert stats.processed == 1
    assert stats.nacked_retry == stats.nacked_dead_letter == 0
    assert sepp_harness.jobs("shop") == []  # acked jobs are gone from the server


async def test_a_confirmation_without_address_is_dead_lettered_at_once(
    sepp_harness: Harness,
) -> None:
    client = sepp_harness.client
    await client.enqueue(sepp.EnqueueRequest("shop", "send_confirmation", payload=order()))
    stats = await sepp_harness.run_until_settled(shop_jobs.make_worker(client))
    assert stats.nacked_dead_letter == 1
    assert stats.processed == stats.nacked_retry == 0
    # The harness's server keeps dead letters (a plain one keeps none unless configured).
    [dead] = sepp_harness.dead_letters("shop")
    assert (dead.cause, dead.final_attempt) == ("rejected", 1)
    assert dead.reason == "the order has no e-mail address"


async def test_a_gateway_timeout_is_retried_30_seconds_later(
    sepp_harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    client = sepp_harness.client
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
    # Retried jobs wait on the server, scheduled: run_until_settled waits for them too.
    stats = await sepp_harness.run_until_settled(shop_jobs.make_worker(client))
    assert stats.processed == 1
    assert stats.nacked_retry == 2
    # Two 30 s retry delays, on the virtual clock: the test itself takes milliseconds.
    gaps = [later - earlier for earlier, later in itertools.pairwise(calls)]
    assert gaps == [pytest.approx(30.0, abs=0.5)] * 2


async def test_a_declined_card_is_not_retried(sepp_harness: Harness) -> None:
    client = sepp_harness.client
    await client.enqueue(
        sepp.EnqueueRequest(
            "shop", "charge_card", payload=order(card="tok_declined", amount_cents=500)
        )
    )
    stats = await sepp_harness.run_until_settled(shop_jobs.make_worker(client))
    assert stats.nacked_dead_letter == 1
    assert stats.nacked_retry == 0 and stats.processed == 0


async def test_a_long_resize_keeps_its_lease(sepp_harness: Harness) -> None:
    client = sepp_harness.client
    # 6,000 megapixels: a minute of work against a 10 s lease (virtual time again).
    await client.enqueue(
        sepp.EnqueueRequest("shop", "resize_photo", payload=order(megapixels=6000))
    )
    started = anyio.current_time()
    stats = await sepp_harness.run_until_settled(shop_jobs.make_worker(client))
    assert stats.processed == 1
    assert anyio.current_time() - started >= 59.99  # 6,000 sleeps of 0.01 s
    assert stats.lease_lost == 0  # auto_extend kept it: no other worker got the job
