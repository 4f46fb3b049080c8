"""Fault scenarios: a worker keeps going, and nothing is lost, while the network and the
server misbehave.

Every scenario runs on both backends against a real reference server with a SQLite
database: through :class:`~tests.reliability._proxy.FaultProxy` for network faults (a
subprocess server), or a :class:`~tests.reliability._servers.FaultServer` for faults of the
server itself.  Each ends with the accounting of ``_ledger``: every job acked exactly once,
or dead-lettered with the expected cause, and every redelivery justified.  The report line
of each run is printed (``pytest -s`` shows it).

Timings are small on purpose (1 s leases, 0.2 s keepalive), so that a scenario takes a few
seconds; nothing waits for a fixed time: the tests wait for events, for the proxy's
counters, or for the server's database to reach a state, always with a bound.
"""

from __future__ import annotations

import os
import random
import signal
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import pytest

import sepp_anyio
from sepp_anyio import Client, JobCtx, Payload, RetryPolicy, StatusCode, Worker
from sepp_anyio.server import JobState, ServerProcess

from ._ledger import Ledger, Report, count_live, job_row
from ._proxy import Direction, FaultProxy
from ._servers import FaultServer, start_process
from ._wait import eventually

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.skipif(os.name != "posix", reason="SIGKILL, SO_LINGER, /proc"),
]

#: Retries of transient failures, quick enough for a test (about 1.5 s over 6 tries).
RETRY = RetryPolicy(max_attempts=6, initial_backoff=0.05, max_backoff=0.5)
LEASE = 1.0
#: For scenarios that assert nothing was redelivered: a lease that a slow round trip on a
#: loaded machine cannot outlast (a settle that really is lost still comes back in 10 s,
#: well inside every scenario's bound, and is then counted as the redelivery it is).
SAFE_LEASE = 10.0


def _queue() -> str:
    return f"rel-{uuid.uuid4().hex[:10]}"


def _worker(client: Client, ledger: Ledger, body: Any = None, **options: Any) -> Worker:
    settings: dict[str, Any] = {
        "lease": LEASE,
        "wait": 30.0,
        "max_in_flight": 4,
        "auto_extend": True,
        "reserve_error_backoff": 0.05,
    }
    settings.update(options)
    worker = Worker(client, [ledger.queue], **settings)
    worker.handle("t", ledger.handler(body))
    return worker


async def _all_settled(db: Path, queue: str, *, within: float = 30.0) -> None:
    await eventually(
        lambda: count_live(str(db), queue) == 0,
        within=within,
        what="every job settled",
        blocking=True,
    )


def _finish(ledger: Ledger, db: Path, scenario: str, **options: Any) -> Report:
    report = ledger.check(str(db), scenario, **options)
    print("\n" + report.summary())
    report.assert_ok()
    return report


async def _work(
    client: Client,
    ledger: Ledger,
    db: Path,
    during: Callable[[Worker], Awaitable[None]] | None = None,
    *,
    body: Any = None,
    within: float = 30.0,
    **options: Any,
) -> Worker:
    """Run a worker until every job of the ledger's queue is settled, doing ``during``
    meanwhile; returns the worker once it has shut down and drained."""
    worker = _worker(client, ledger, body, **options)
    async with anyio.create_task_group() as tg:
        await tg.start(worker.run)
        if during is not None:
            await during(worker)
        await _all_settled(db, ledger.queue, within=within)
        worker.shutdown()
    return worker


def _runs_of(ledger: Ledger, tag: str) -> list[int]:
    return [run.attempt for run in ledger.runs if run.tag == tag]


# ------------------------------------------------------------------ the server dies


async def test_server_killed_and_restarted_mid_run(tmp_path: Path) -> None:
    """kill -9 in the middle of a run, down for longer than a lease, restarted on the same
    database: no acked job comes back, no job is lost; the jobs in flight at the crash are
    redelivered once their leases have expired, and their late acks do not count."""
    db = tmp_path / "sepp.sqlite3"
    ledger = Ledger(_queue())
    server: ServerProcess = await anyio.to_thread.run_sync(lambda: start_process(db))
    try:
        with FaultProxy(server.port) as proxy:
            async with sepp_anyio.connect(proxy.address, retry=RETRY) as client:
                ledger.instrument(client)
                await ledger.enqueue(client, 150)

                async def crash(worker: Worker) -> None:
                    nonlocal server
                    await ledger.wait_acked(40)
                    os.kill(server.pid, signal.SIGKILL)
                    status = await anyio.to_thread.run_sync(server.wait, 10.0)
                    assert status == -signal.SIGKILL
                    # The outage outlasts a lease (the fault, not a synchronisation): the
                    # leases held at the crash run out while the server is down, and the
                    # acks of their jobs exhaust their retries.
                    await anyio.sleep(LEASE + 0.5)
                    server = await anyio.to_thread.run_sync(lambda: start_process(db))
                    proxy.upstream_port = server.port

                pace = random.Random(7)

                async def work(payload: Payload | None, ctx: JobCtx) -> None:
                    # Some handlers are mid-run at the crash; their leases may run out
                    # while the server is down.
                    await anyio.sleep(pace.uniform(0.0, 0.1))

                worker = await _work(client, ledger, db, crash, body=work, max_in_flight=8)
    finally:
        await anyio.to_thread.run_sync(server.stop)
    report = _finish(ledger, db, "kill -9 + restart")
    assert report.acked == 150
    assert worker.statistics().reserve_errors >= 1
    # Jobs in flight at the crash came back once their leases had expired.
    assert report.redelivered_after_lease_expiry >= 1 and report.settle_errors >= 1


# ------------------------------------------------------------------ connection resets


async def test_connection_reset_during_reserve(
    shared_server: ServerProcess, shared_db: Path
) -> None:
    """The server leases a job to a parked reserve whose reply never arrives (the connection
    is reset with RST first): the job comes back once that lease expires, as attempt 2."""
    ledger = Ledger(_queue())
    with FaultProxy(shared_server.port) as proxy:
        async with (
            sepp_anyio.connect(proxy.address, retry=RETRY) as client,
            sepp_anyio.connect(shared_server.address) as producer,
        ):
            ledger.instrument(client)
            await ledger.enqueue(producer, 40)

            async def reset_while_reserving(worker: Worker) -> None:
                await ledger.wait_acked(40)
                await anyio.to_thread.run_sync(proxy.hold, "down")
                [victim] = await ledger.enqueue(producer, 1)
                victim_id = ledger.tags[victim]

                def leased() -> bool:
                    row = job_row(str(shared_db), victim_id)
                    return row is not None and row[0] == JobState.INFLIGHT

                await eventually(
                    leased, within=10, what="the victim leased by the reserve", blocking=True
                )
                assert await anyio.to_thread.run_sync(proxy.reset_all) >= 1
                await ledger.enqueue(producer, 40)
                victim_tags.append(victim)

            victim_tags: list[str] = []
            worker = await _work(client, ledger, shared_db, reset_while_reserving)
    report = _finish(ledger, shared_db, "reset during reserve")
    assert _runs_of(ledger, victim_tags[0]) == [2]
    assert report.lost_deliveries >= 1
    assert worker.statistics().reserve_errors >= 1
    assert proxy.accepted >= 2


@pytest.mark.parametrize("direction", ["up", "down"], ids=["request-lost", "reply-lost"])
async def test_connection_reset_during_ack(
    shared_server: ServerProcess, shared_db: Path, direction: Direction
) -> None:
    """The connection is reset while an ack is on the wire: before the server saw it (the
    retry acks the job) or after the server applied it (the retry finds it gone).  Either
    way the job is acked once and never redelivered."""
    ledger = Ledger(_queue())
    victim = f"{ledger.queue}/t/10"
    handled = anyio.Event()
    with FaultProxy(shared_server.port) as proxy:

        async def body(payload: Payload | None, ctx: JobCtx) -> None:
            if payload is not None and payload.data.decode() == victim:
                # The reserve that brought this job went out ahead of the previous job's
                # ack, whose reply may still be on its way: wait for it, so that with
                # everything the worker sends or receives parked from now on, the next
                # thing on the wire is this job's ack.
                await ledger.wait_acked(10)
                await anyio.to_thread.run_sync(proxy.hold, direction)
                handled.set()

        async def reset_during_ack(worker: Worker) -> None:
            await handled.wait()
            victim_id = ledger.tags[victim]
            if direction == "up":
                await anyio.to_thread.run_sync(proxy.wait_held, "up")
                assert job_row(str(shared_db), victim_id) is not None, "the ack got through"
            else:
                await eventually(
                    lambda: job_row(str(shared_db), victim_id) is None,
                    within=10,
                    what="the ack applied",
                    blocking=True,
                )
            assert await anyio.to_thread.run_sync(proxy.reset_all) >= 1

        async with sepp_anyio.connect(proxy.address, retry=RETRY) as client:
            ledger.instrument(client)
            await ledger.enqueue(client, 30)
            await _work(
                client,
                ledger,
                shared_db,
                reset_during_ack,
                body=body,
                max_in_flight=1,
                lease=SAFE_LEASE,
            )
    report = _finish(ledger, shared_db, f"reset during ack ({direction})")
    assert report.acked == 30
    assert _runs_of(ledger, victim) == [1]
    # The victim's token came back when its handler ended, so the next reserve went out
    # beside its ack. Request lost: the server never saw that reserve either. Reply lost:
    # the server may have leased it the next job (if it read the reserve before the reset),
    # whose reply the reset lost too, so that one job (not the victim) comes back when its
    # lease runs out.
    assert report.redelivered_after_lease_expiry <= (1 if direction == "down" else 0)
    [settle] = [s for s in ledger.settles if s.job_id == ledger.tags[victim]]
    # Request lost: the retry acked it.  Reply lost: the retry found it already gone.
    assert settle.ok is (direction == "up"), settle


@pytest.mark.parametrize("direction", ["up", "down"], ids=["request-lost", "reply-lost"])
async def test_connection_reset_during_extend(
    shared_server: ServerProcess, shared_db: Path, direction: Direction
) -> None:
    """The connection is reset while a lease extension is on the wire: the heartbeat's
    retry extends on a new connection, the handler is never cancelled, the job is acked."""
    ledger = Ledger(_queue())
    victim = f"{ledger.queue}/t/5"
    with FaultProxy(shared_server.port) as proxy:

        async def body(payload: Payload | None, ctx: JobCtx) -> None:
            if payload is None or payload.data.decode() != victim:
                return
            # The previous job's ack is settled first (its reply could otherwise be
            # parked with this job's extension).
            await ledger.wait_acked(5)
            known = ctx.lease_expires_at
            known_ms = int(known.timestamp() * 1000)
            await anyio.to_thread.run_sync(proxy.hold, direction)
            if direction == "up":
                await anyio.to_thread.run_sync(proxy.wait_held, "up")
            else:

                def extended() -> bool:
                    row = job_row(str(shared_db), ctx.id)
                    return row is not None and row[1] > known_ms

                await eventually(extended, within=10, what="an extension applied", blocking=True)
            assert ctx.lease_expires_at == known, "the extension's reply got through"
            assert await anyio.to_thread.run_sync(proxy.reset_all) >= 1
            # The heartbeat extends again, over a new connection.
            await eventually(lambda: ctx.lease_expires_at != known, within=10, what="an extension")

        async with sepp_anyio.connect(proxy.address, retry=RETRY) as client:
            ledger.instrument(client)
            await ledger.enqueue(client, 12)
            # Long enough for the reconnect and the retried extension on a loaded machine,
            # short enough that the heartbeat (every third of it) extends during the test.
            worker = await _work(client, ledger, shared_db, body=body, max_in_flight=1, lease=3.0)
    report = _finish(ledger, shared_db, f"reset during extend ({direction})")
    assert report.acked == 12
    assert _runs_of(ledger, victim) == [1]
    assert worker.statistics().lease_lost == 0
    assert proxy.accepted >= 2


# ------------------------------------------------------------------ half-open connection


async def test_half_open_connection_during_a_long_poll(
    shared_server: ServerProcess, shared_db: Path
) -> None:
    """The link goes silent (no RST, nothing gets through) while the worker sits in a 30 s
    long poll: keepalive notices within a fraction of a second, the worker reconnects and
    processes the jobs enqueued afterwards."""
    ledger = Ledger(_queue())
    with FaultProxy(shared_server.port) as proxy:
        async with (
            sepp_anyio.connect(
                proxy.address, retry=RETRY, keepalive_interval=0.2, keepalive_timeout=0.3
            ) as client,
            sepp_anyio.connect(shared_server.address) as producer,
        ):
            ledger.instrument(client)
            await ledger.enqueue(producer, 20)

            async def go_silent(worker: Worker) -> None:
                await ledger.wait_acked(20)
                # Idle, with a reserve in progress: the worker is in (or entering) its
                # long poll.
                await eventually(
                    lambda: not worker.statistics().in_flight and worker._reserve_scope is not None,
                    within=10,
                    what="an idle worker in its long poll",
                )
                errors = worker.statistics().reserve_errors
                assert await anyio.to_thread.run_sync(proxy.blackhole) == 1
                await eventually(  # TCP alone would take many minutes
                    lambda: worker.statistics().reserve_errors > errors,
                    within=5,
                    what="keepalive to notice the dead link",
                )
                await anyio.to_thread.run_sync(proxy.wait_accepted, 2)
                await ledger.enqueue(producer, 20)

            worker = await _work(client, ledger, shared_db, go_silent)
    report = _finish(ledger, shared_db, "half-open during long poll")
    assert report.acked == 40
    assert worker.statistics().reserve_errors >= 1


# ------------------------------------------------------------------ a slow network


async def test_slow_network_latency_and_bandwidth(
    shared_server: ServerProcess, shared_db: Path
) -> None:
    """20 ms each way and 64 KiB/s per direction: slower, but nothing lost or leased twice."""
    ledger = Ledger(_queue())
    with FaultProxy(shared_server.port) as proxy:
        proxy.set_latency(0.02)
        proxy.set_bandwidth(64 * 1024)
        async with sepp_anyio.connect(proxy.address, retry=RETRY) as client:
            ledger.instrument(client)
            await ledger.enqueue(client, 60)
            worker = await _work(client, ledger, shared_db, max_in_flight=8, lease=SAFE_LEASE)
    report = _finish(ledger, shared_db, "latency 20 ms + 64 KiB/s")
    assert report.acked == 60
    assert report.redelivered_after_lease_expiry == 0
    assert worker.statistics().lease_lost == 0


# ------------------------------------------------------------------ a struggling server


@pytest.mark.parametrize("status", [StatusCode.RESOURCE_EXHAUSTED, StatusCode.UNAVAILABLE])
async def test_server_refusing_calls_for_a_while(tmp_path: Path, status: StatusCode) -> None:
    """The server answers every call with RESOURCE_EXHAUSTED (or UNAVAILABLE) for a while:
    reserves back off, acks and extensions are retried, and everything is done once it
    recovers."""
    db = tmp_path / "sepp.sqlite3"
    ledger = Ledger(_queue())
    with FaultServer(db) as server:
        async with sepp_anyio.connect(server.address, retry=RETRY) as client:
            ledger.instrument(client)
            await ledger.enqueue(client, 120)

            async def struggle(worker: Worker) -> None:
                await ledger.wait_acked(30)
                server.fail_next(80, status)
                await anyio.to_thread.run_sync(server.wait_failures_done)

            async def work(payload: Payload | None, ctx: JobCtx) -> None:
                await anyio.sleep(0.005)

            worker = await _work(client, ledger, db, struggle, body=work)
        stats = worker.statistics()
    report = _finish(ledger, db, f"server answering {status.name} x80")
    assert report.acked == 120
    assert sum(server.failed.values()) == 80
    assert server.failed["reserve"] >= 1 and stats.reserve_errors >= 1


async def test_a_burst_of_goaways(tmp_path: Path) -> None:
    """GOAWAY after GOAWAY while jobs are in flight: the client finishes every call on the
    old connections, moves to new ones, and closes the old ones once they are idle."""
    db = tmp_path / "sepp.sqlite3"
    ledger = Ledger(_queue())
    with FaultServer(db) as server:
        async with sepp_anyio.connect(server.address, retry=RETRY) as client:
            ledger.instrument(client)
            await ledger.enqueue(client, 150)

            async def goaways(worker: Worker) -> None:
                for round_ in range(1, 16):
                    await ledger.wait_acked(round_ * 8)
                    for _ in range(3):
                        server.goaway_all()

            async def work(payload: Payload | None, ctx: JobCtx) -> None:
                await anyio.sleep(0.005)

            worker = await _work(client, ledger, db, goaways, body=work, wait=1.0, lease=SAFE_LEASE)
            channel: Any = client._channel
            # Old connections close once their last call is done; one is left.
            await eventually(
                lambda: len(channel._connections) <= 1,
                within=10,
                what="the old connections to close",
            )
            [conn] = channel._connections
            assert not conn.calls and conn._open_streams == 0
        stats = worker.statistics()
    report = _finish(ledger, db, "45 GOAWAYs")
    assert report.acked == 150
    assert server.goaways >= 15
    # A graceful GOAWAY loses nothing: no call failed, nothing had to be redelivered.
    assert report.redelivered_after_lease_expiry == 0
    assert stats.settle_errors == 0 and stats.reserve_errors == 0
