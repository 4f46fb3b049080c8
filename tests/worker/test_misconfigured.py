"""A misconfigured worker does not look healthy: until one reserve of a run has succeeded, a
refused API key or an undeclared queue of a strict server makes ``run()`` raise the client's
error; after one has, the same refusals are retried with exponential backoff (up to 30 s),
logged at ERROR and counted. The in-process reference server enforces both (its auth and
strict mode are those of the network server); both backends, virtual time."""

from __future__ import annotations

import itertools
import logging
from dataclasses import replace
from typing import Any

import anyio
import pytest

from sepp_anyio import Lane, UnauthenticatedError, UnknownQueuesError, Worker
from sepp_anyio.server import ApiKey, AuthConfig, QueueConfig
from sepp_anyio.testing import open_in_memory_client

from ._helpers import QUEUE, EngineSpy, Probe, enqueue, running

pytestmark = pytest.mark.anyio

KEYED: dict[str, Any] = {"auth": {"api_keys": ["right"]}}
STRICT: dict[str, Any] = {"server": {"strict_queues": True}, "queues": [{"name": "declared"}]}


@pytest.mark.parametrize("key", [None, "wrong"], ids=["no-key", "wrong-key"])
async def test_a_refused_api_key_makes_run_raise_at_once(key: str | None) -> None:
    async with open_in_memory_client(api_key=key, **KEYED) as (client, engine):
        spy = EngineSpy(engine)
        worker = Worker(client, [QUEUE], reserve_error_backoff=1.0)
        worker.handle("t", Probe().handler())
        started = anyio.current_time()
        with pytest.raises(UnauthenticatedError) as info:
            await worker.run()
        assert anyio.current_time() == started  # no retry, no backoff
        assert info.value.status_message in (
            "missing API key; expected an `authorization: Bearer <key>` header",
            "invalid API key",
        )
        assert len(spy.calls) == 0  # refused before the engine (auth comes first)
        stats = worker.statistics()
        assert (stats.reserves, stats.reserve_errors) == (1, 1)


ITERATIONS = 20


@pytest.mark.parametrize("lanes", [1, 2, 5])
async def test_every_lane_refused_is_one_error_whatever_the_number_of_lanes(lanes: int) -> None:
    """Each lane's first reserve is refused; ``run()`` raises one ``UnauthenticatedError``,
    not an exception group of one per lane: the first refusal ends the run, the others are
    suppressed. (With two lanes it used to be a group about half the time: whether the
    second lane's refusal arrived before the first one's cancelled it.)"""
    async with open_in_memory_client(api_key="wrong", **KEYED) as (client, _):
        for iteration in range(ITERATIONS):
            worker = Worker(client, [Lane([f"q{lane}"]) for lane in range(lanes)])
            worker.handle("t", Probe().handler())
            with anyio.fail_after(10), pytest.raises(UnauthenticatedError) as info:
                await worker.run()
            assert info.value.status_message == "invalid API key", iteration
            stats = worker.statistics()
            assert stats.reserve_errors >= 1 and stats.processed == 0


async def test_lanes_refused_for_different_reasons_raise_the_first_refusal() -> None:
    """A lane on an undeclared queue and lanes whose reserves would pass: the one refusal
    comes out as itself and the other lanes are cancelled."""
    async with open_in_memory_client(**STRICT) as (client, _):
        for _iteration in range(ITERATIONS):
            worker = Worker(
                client, [Lane(["declared"]), Lane(["undeclared"]), Lane(["also-undeclared"])]
            )
            worker.handle("t", Probe().handler())
            with anyio.fail_after(60), pytest.raises(UnknownQueuesError):
                await worker.run()


async def test_an_undeclared_queue_of_a_strict_server_makes_run_raise_at_once() -> None:
    async with open_in_memory_client(**STRICT) as (client, engine):
        spy = EngineSpy(engine)
        worker = Worker(client, ["declared", "undeclared"])
        worker.handle("t", Probe().handler())
        with pytest.raises(UnknownQueuesError) as info:
            await worker.run()
        assert "undeclared" in (info.value.status_message or "")
        assert len(spy.of("reserve")) == 1
        # The same worker on declared queues only is fine.
        good = Worker(client, ["declared"])
        good.handle("t", Probe().handler())
        await enqueue(client, queue="declared")
        async with running(good):
            await spy.wait_for("ack")


async def test_started_means_about_to_reserve_and_the_error_follows() -> None:
    """``task_group.start(worker.run)`` returns before the server has answered; the
    refusal then comes out of ``run()`` (here, through the caller's task group)."""
    async with open_in_memory_client(api_key="wrong", **KEYED) as (client, _):
        worker = Worker(client, [QUEUE])
        worker.handle("t", Probe().handler())
        reached = False

        async def start_then_wait() -> None:
            nonlocal reached
            async with anyio.create_task_group() as tg:
                await tg.start(worker.run)
                reached = True  # started: the first reserve is on its way

        with pytest.raises(ExceptionGroup) as info:
            await start_then_wait()
        assert reached
        assert info.group_contains(UnauthenticatedError, depth=1)


async def test_async_with_worker_raises_the_refusal_as_itself_and_cancels_the_body() -> None:
    body_cancelled = False
    async with open_in_memory_client(**STRICT) as (client, _):
        worker = Worker(client, ["undeclared"])
        worker.handle("t", Probe().handler())

        async def body() -> None:
            nonlocal body_cancelled
            async with worker:
                try:
                    await anyio.sleep_forever()
                except anyio.get_cancelled_exc_class():
                    body_cancelled = True
                    raise

        with pytest.raises(UnknownQueuesError):
            await body()
        assert body_cancelled
        # The caller's task is not left cancelled: it goes on.
        await anyio.sleep(1)
        with anyio.fail_after(1):
            await anyio.sleep(0.5)


@pytest.mark.parametrize("refusal", ["key-revoked", "queue-undeclared"])
async def test_after_a_reserve_succeeded_refusals_are_retried_with_exponential_backoff(
    refusal: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A key revoked or a queue dropped from a strict server's config while the worker runs
    is retried, every time twice as late up to 30 s, and logged at ERROR; once the server
    accepts again, jobs flow."""
    probe = Probe()
    async with open_in_memory_client(api_key="right", **KEYED) as (client, engine):
        spy = EngineSpy(engine)
        worker = Worker(client, [QUEUE], wait=1.0, reserve_error_backoff=0.5)
        worker.handle("t", probe.handler())
        accepting = engine.config
        if refusal == "key-revoked":
            refusing = replace(accepting, auth=AuthConfig(api_keys=(ApiKey("other"),)))
        else:
            refusing = replace(
                accepting,
                server=replace(accepting.server, strict_queues=True),
                queues=(QueueConfig(name="elsewhere"),),
            )
        with caplog.at_level(logging.WARNING, "sepp_anyio.worker"):
            async with running(worker):
                await spy.wait_for("reserve", 1)  # an empty reserve: a success
                engine.reload(refusing)
                # The first refusal comes when the parked reserve (wait=1) is over, at +0
                # or +1, then after 0.5 + 1 + 2 + 4 + 8 + 16 + 30 + 30 = 91.5 s come 8
                # more; the next would be 30 s later, beyond the 120 s.
                await anyio.sleep(120)
                engine.reload(accepting)
                await enqueue(client)
                await spy.wait_for("ack")
        refused = [r for r in caplog.records if "reserve refused" in r.getMessage()]
        assert {r.levelno for r in refused} == {logging.ERROR}
        delays = [r.getMessage().rsplit(" ", 1)[1] for r in refused]
        assert delays == ["0.5s", "1s", "2s", "4s", "8s", "16s", "30s", "30s", "30s"]
        name = "UnauthenticatedError" if refusal == "key-revoked" else "UnknownQueuesError"
        assert all(name in r.getMessage() for r in refused)
        if refusal == "queue-undeclared":  # these reach the engine: their times are known
            at = [c.at for c in spy.of("reserve") if type(c.error).__name__ == "EngineError"]
            gaps = [b - a for a, b in itertools.pairwise(at)]
            assert gaps == pytest.approx([0.5, 1, 2, 4, 8, 16, 30, 30])
        stats = worker.statistics()
        assert stats.reserve_errors == 9
        assert stats.processed == 1
        assert probe.attempts() == [1]


async def test_the_backoff_starts_over_after_a_successful_reserve(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async with open_in_memory_client(api_key="right", **KEYED) as (client, engine):
        spy = EngineSpy(engine)
        worker = Worker(client, [QUEUE], wait=1.0, reserve_error_backoff=0)
        worker.handle("t", Probe().handler())
        accepting = engine.config
        refusing = replace(accepting, auth=AuthConfig(api_keys=()))
        with caplog.at_level(logging.ERROR, "sepp_anyio.worker"):
            async with running(worker):
                await spy.wait_for("reserve", 1)
                engine.reload(refusing)
                # Refused at t, t+1, t+3 (t is 0 or 1, as the parked reserve ends); 1 s
                # first, since the setting is 0: a refusal is never retried in a hot loop.
                await anyio.sleep(4.5)
                engine.reload(accepting)
                await anyio.sleep(5.0)  # the pause ends, and reserves succeed again
                engine.reload(refusing)
                await anyio.sleep(2.5)  # refused at t and t+1 only: started over
        delays = [
            r.getMessage().rsplit(" ", 1)[1]
            for r in caplog.records
            if "reserve refused" in r.getMessage()
        ]
        assert delays == ["1s", "2s", "4s", "1s", "2s"]
