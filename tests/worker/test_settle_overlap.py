"""The worker over a network with latency: a job gives its ``max_in_flight`` token back once
its outcome is decided, so the next reserve goes out while the acks are still in flight, and
the acks and nacks in flight are bounded by settle slots of their own (the capacity model of
``sepp_anyio._worker``). Both backends, virtual time: :class:`Network` delays every call to
the in-process engine each way, so each round trip costs exactly what it would between two
machines, and every timing below is exact."""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import pytest

from sepp_anyio import HandlerError, JobCtx, Lane, Outcome, Payload, Worker
from sepp_anyio.server import Engine
from sepp_anyio.server._engine._engine import rpc_of
from sepp_anyio.testing import open_in_memory_client

from ._helpers import QUEUE, EngineSpy, Probe, enqueue

pytestmark = pytest.mark.anyio

#: Seconds each way (2.5 ms: a 5 ms round trip, as in the benchmark's latency column).
ONE_WAY = 0.0025
METHODS = ("reserve", "ack", "nack", "extend")


class Network:
    """Wraps the engine's reserve/ack/nack/extend so each request reaches it ``delay``
    seconds after it was sent, and its reply comes back ``delay`` seconds after the engine
    answered (``slow`` overrides the delay per method). Counts the calls in flight per
    method (and as ``"settle"``, acks and nacks together) and, at the engine, the jobs
    leased and not yet settled, with their maxima.

    Wrap before :class:`EngineSpy`, so the spy sees what the worker sees: ``at`` is when a
    call was sent, ``ended_at`` when its reply arrived.
    """

    def __init__(
        self,
        engine: Engine,
        delay: float,
        *,
        slow_jobs: Callable[[str], float | None] | None = None,
        **slow: float,
    ) -> None:
        self.delay = {method: slow.get(method, delay) for method in METHODS}
        #: Per job id, a delay of its acks and nacks instead (None: the method's).
        self.slow_jobs = slow_jobs
        self.in_flight: Counter[str] = Counter()
        self.most: Counter[str] = Counter()
        self.leased = 0
        self.most_leased = 0
        rpc = rpc_of(engine)
        for method in METHODS:
            setattr(rpc, method, self._wrap(method, getattr(rpc, method)))

    def _wrap(self, method: str, real: Callable[[Any], Awaitable[Any]]) -> Any:
        async def call(request: Any) -> Any:
            delay = self.delay[method]
            if method in ("ack", "nack") and self.slow_jobs is not None:
                slow = self.slow_jobs(request.job_id)
                delay = delay if slow is None else slow
            # "settle": acks and nacks together.
            kinds = (method, "settle") if method in ("ack", "nack") else (method,)
            for kind in kinds:
                self.in_flight[kind] += 1
                self.most[kind] = max(self.most[kind], self.in_flight[kind])
            try:
                await anyio.sleep(delay)
                reply = await real(request)
                if method == "reserve":
                    self.leased += len(reply.jobs)
                    self.most_leased = max(self.most_leased, self.leased)
                elif method in ("ack", "nack"):
                    self.leased -= 1
                await anyio.sleep(delay)
                return reply
            finally:
                for kind in kinds:
                    self.in_flight[kind] -= 1

        return call


@pytest.mark.parametrize("max_in_flight", [1, 4])
async def test_the_next_reserve_goes_out_while_the_acks_are_on_their_way(
    max_in_flight: int,
) -> None:
    async with open_in_memory_client() as (client, engine):
        Network(engine, ONE_WAY)
        spy = EngineSpy(engine)
        worker = Worker(client, [QUEUE], max_in_flight=max_in_flight, wait=30.0)
        worker.handle("t", Probe().handler())
        await enqueue(client, 5 * max_in_flight)
        async with anyio.create_task_group() as tg:
            await tg.start(worker.run)
            await spy.wait_for("ack", 5 * max_in_flight)
            worker.shutdown()
        reserves = [c for c in spy.of("reserve", ok=True) if c.reply.jobs]
        acks = spy.of("ack", ok=True)
        assert [len(c.reply.jobs) for c in reserves] == [max_in_flight] * 5
        for before, after in itertools.pairwise(reserves):
            # The jobs of one reserve are acked, and the next reserve, for all of them,
            # is sent in the same instant, not a round trip later.
            batch = [a for a in acks if a.request.job_id in {j.id for j in before.reply.jobs}]
            assert {a.at for a in batch} == {after.at}
            assert [a.ended_at for a in batch] == pytest.approx(
                [after.at + 2 * ONE_WAY] * len(batch)
            )
            assert after.request.max_jobs == max_in_flight


@pytest.mark.parametrize("max_in_flight", [1, 4, 16])
async def test_the_next_reserve_is_sent_ahead_of_the_acks(max_in_flight: int) -> None:
    """The tokens of a finished batch wake the reserve loop, and the batch's acks wait for
    it: the next reserve reaches the server first, so the server leases the next batch
    before it spends its time on the acks (one server's work overlapping the worker's)."""
    async with open_in_memory_client() as (client, engine):
        Network(engine, ONE_WAY)
        spy = EngineSpy(engine)
        worker = Worker(client, [QUEUE], max_in_flight=max_in_flight, wait=30.0)
        worker.handle("t", Probe().handler())
        await enqueue(client, 5 * max_in_flight)
        async with anyio.create_task_group() as tg:
            await tg.start(worker.run)
            await spy.wait_for("ack", 5 * max_in_flight)
            worker.shutdown()
        order = [c for c in spy.calls if c.method in ("reserve", "ack")]
        reserves = [
            i for i, c in enumerate(order) if c.method == "reserve" and c.ok and c.reply.jobs
        ]
        assert len(reserves) == 5
        for before, after in itertools.pairwise(reserves):
            ids = {j.id for j in order[before].reply.jobs}
            acked_at = [
                i for i, c in enumerate(order) if c.method == "ack" and c.request.job_id in ids
            ]
            assert len(acked_at) == max_in_flight
            assert after < min(acked_at), [c.method for c in order]


async def test_throughput_is_max_in_flight_per_reserve_round_trip_plus_handler() -> None:
    """Little's law: each token carries one job per (reserve RTT + handler), not per
    (reserve RTT + handler + ack RTT): 40 jobs of 10 ms at 4 in flight take 10 cycles of
    15 ms, plus the last ack's round trip (holding the token through the ack: 10 x 20)."""
    handler_time = 0.010
    probe = Probe()

    async def work(payload: Payload | None, ctx: JobCtx) -> None:
        await anyio.sleep(handler_time)

    async with open_in_memory_client() as (client, engine):
        Network(engine, ONE_WAY)
        spy = EngineSpy(engine)
        worker = Worker(client, [QUEUE], max_in_flight=4, wait=30.0)
        worker.handle("t", probe.handler(work))
        await enqueue(client, 40)
        started = anyio.current_time()
        async with anyio.create_task_group() as tg:
            await tg.start(worker.run)
            acks = await spy.wait_for("ack", 40)
            worker.shutdown()
        rtt = 2 * ONE_WAY
        last_ack_back = max(a.ended_at for a in acks) - started
        assert last_ack_back == pytest.approx(10 * (rtt + handler_time) + rtt)
        assert probe.max_in_flight == 4


async def test_settles_in_flight_are_bounded_and_a_slow_server_stops_the_reserves() -> None:
    """Acks and nacks that take a second each: no more than ``max_in_flight`` of them are
    ever in flight, no more than ``max_in_flight`` handlers run, no reserve asks for more
    than the free handler capacity, and the jobs leased at once stay within twice
    ``max_in_flight`` (those running and those being settled): a finished job waiting for
    a settle slot keeps its token, so nothing more is leased meanwhile."""
    probe = Probe()

    async def work(payload: Payload | None, ctx: JobCtx) -> None:
        assert payload is not None
        if payload.json()["n"] % 3 == 0:
            raise HandlerError.permanent("every third job fails")

    async with open_in_memory_client() as (client, engine):
        network = Network(engine, ONE_WAY, ack=1.0, nack=1.0)
        spy = EngineSpy(engine)
        worker = Worker(client, [QUEUE], max_in_flight=4, wait=30.0)
        # What the worker says is in flight as each reserve is sent.
        spy.annotate = lambda call: worker.statistics().in_flight
        worker.handle("t", probe.handler(work))
        await enqueue(client, 30)
        async with anyio.create_task_group() as tg:
            await tg.start(worker.run)
            await spy.wait_until(
                lambda: len([c for c in spy.calls if c.method in ("ack", "nack") and c.ok]) == 30
            )
            worker.shutdown()
        stats = worker.statistics()
        assert (stats.processed, stats.nacked_dead_letter, stats.in_flight) == (20, 10, 0)
        assert network.in_flight["ack"] == network.in_flight["nack"] == 0
        assert network.most["settle"] == 4  # the settle slots were all used, never more
        assert probe.max_in_flight <= 4 and stats.max_in_flight_seen == 4
        assert network.most_leased == 8  # reached: the reserve overlapped the settles
        for call in spy.of("reserve"):
            assert call.request.max_jobs + call.note <= 4, (call.request.max_jobs, call.note)


async def test_in_flight_counts_handlers_and_the_drain_still_waits_for_the_acks() -> None:
    """A job whose ack is on its way no longer holds a ``max_in_flight`` slot (so
    ``statistics().in_flight`` does not count it), but the worker still owes its settle:
    shutdown drains it, ``on_outcome`` hears of it after the reply, and ``run()`` returns
    only then."""
    outcomes: list[tuple[float, Outcome]] = []

    def on_outcome(ctx: JobCtx, outcome: Outcome, error: BaseException | None) -> None:
        outcomes.append((anyio.current_time(), outcome))

    async with open_in_memory_client() as (client, engine):
        network = Network(engine, ONE_WAY, ack=5.0)
        spy = EngineSpy(engine)
        worker = Worker(client, [QUEUE], max_in_flight=2, wait=30.0, on_outcome=on_outcome)
        worker.handle("t", Probe().handler())
        await enqueue(client, 2)
        async with anyio.create_task_group() as tg:
            await tg.start(worker.run)
            await spy.wait_until(lambda: len(spy.of("ack")) == 2)
            stats = worker.statistics()
            assert (stats.in_flight, stats.lanes[0].in_flight, stats.processed) == (0, 0, 0)
            worker.shutdown()
            asked = anyio.current_time()
        returned = anyio.current_time()
        acks = spy.of("ack", ok=True)
        assert len(acks) == 2 and network.in_flight["ack"] == 0
        assert returned - asked >= 10.0 - 1e-9  # the acks' 5 s each way
        assert [o for _, o in outcomes] == [Outcome.ACKED, Outcome.ACKED]
        assert min(t for t, _ in outcomes) >= max(a.ended_at for a in acks)
        assert worker.statistics().processed == 2


async def test_until_idle_waits_for_a_nack_in_flight_and_takes_the_retry() -> None:
    """``run(until_idle=True)``: a reserve that goes out while a nack for an immediate retry
    is still on its way comes back empty, but the worker is not idle: the job is ready
    again once the nack is answered, and this run handles its second attempt too."""
    probe = Probe()

    async def fail_once(payload: Payload | None, ctx: JobCtx) -> None:
        if ctx.attempt == 1:
            raise HandlerError.retry_after("once more", 0)

    async with open_in_memory_client() as (client, engine):
        network = Network(engine, ONE_WAY, nack=3.0)
        spy = EngineSpy(engine)
        worker = Worker(client, [QUEUE], max_in_flight=4)
        worker.handle("t", probe.handler(fail_once))
        await enqueue(client, 1)
        await worker.run(until_idle=True)
        (nack,) = spy.of("nack", ok=True)
        # A reserve was sent (and came back empty) while the nack was in flight.
        assert any(
            nack.at <= c.at < nack.ended_at and not c.reply.jobs for c in spy.of("reserve", ok=True)
        )
        assert probe.attempts() == [1, 2]
        assert network.in_flight["nack"] == network.in_flight["ack"] == 0
        assert engine.stats()[QUEUE].live_depth == 0
        stats = worker.statistics()
        assert (stats.processed, stats.nacked_retry, stats.in_flight) == (1, 1, 0)


async def test_each_lane_has_its_own_settle_slots() -> None:
    """A lane whose acks crawl fills its own settle slots and stops its own reserves; the
    other lane's jobs go on at the network's pace."""
    probes = {"a": Probe(), "b": Probe()}
    async with open_in_memory_client() as (client, engine):
        slow_ids: set[str] = set()
        Network(engine, ONE_WAY, slow_jobs=lambda job_id: 5.0 if job_id in slow_ids else None)
        spy = EngineSpy(engine)
        worker = Worker(
            client, [Lane(["a"], max_in_flight=2), Lane(["b"], max_in_flight=2)], wait=30.0
        )
        worker.handle("ta", probes["a"].handler())
        worker.handle("tb", probes["b"].handler())
        slow_ids.update(await enqueue(client, 6, queue="a", job_type="ta"))
        fast_ids = set(await enqueue(client, 20, queue="b", job_type="tb"))
        started = anyio.current_time()
        async with anyio.create_task_group() as tg:
            await tg.start(worker.run)
            await spy.wait_until(
                lambda: (
                    len([c for c in spy.of("ack", ok=True) if c.request.job_id in fast_ids]) == 20
                )
            )
            # Lane b: ten reserves of two, each a round trip plus nothing, the last ack's
            # round trip on top; all while lane a's first acks are still on their way.
            assert anyio.current_time() - started == pytest.approx(11 * 2 * ONE_WAY)
            # Lane a: two acks in flight, two more jobs handled and waiting for a settle
            # slot with their tokens, so no third reserve (the sixth job stays ready).
            assert len(probes["a"].finished) == 4
            assert len([c for c in spy.of("reserve") if list(c.request.queues) == ["a"]]) == 2
            assert engine.stats()["a"].ready == 2
            stats = worker.statistics()
            assert [lane.in_flight for lane in stats.lanes] == [2, 0]
            await spy.wait_until(lambda: len(spy.of("ack", ok=True)) == 26)
            worker.shutdown()
        assert worker.statistics().processed == 26
