"""The worker against the network reference server, on both backends with real clocks; the
official asyncio client ``sepp-py`` observes the outcomes from its own event loop in a thread.

The server is the ``sepp_server`` fixture of this package's pytest plugin (``python -m
sepp_anyio.server --port 0 --memory`` in a subprocess, one per session); the dead-letter test
starts its own (``ServerProcess``) with dead-letter retention on.
"""

from __future__ import annotations

import asyncio
import logging
import os
import uuid
from collections.abc import Iterator
from datetime import timedelta

import anyio
import pytest
import sepp
from sepp.types import ReserveOptions

import sepp_anyio
from sepp_anyio import EnqueueRequest, HandlerError, JobCtx, Payload, Retry, Worker
from sepp_anyio.server import (
    ApiKey,
    AuthConfig,
    QueueConfig,
    ServerConfig,
    ServerSection,
    ServerThread,
)
from sepp_anyio.testing import ServerProcess
from sepp_anyio.testing.pytest_plugin import SeppTestServer

pytestmark = pytest.mark.anyio


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    """Real clocks here: sockets and a server in another process do not run on virtual time."""
    return str(request.param)


@pytest.fixture
def server_address(sepp_server: SeppTestServer) -> str:
    return sepp_server.address


@pytest.fixture(scope="module")
def retaining_server() -> Iterator[str]:
    """A server of its own that keeps dead letters (retention is boot-time configuration)."""
    env = dict(os.environ, SEPP_STORAGE__DEAD_LETTER_RETENTION_MS="3600000")
    server = ServerProcess("--memory", "--port", "0", "--log-level", "WARNING", env=env)
    server.start()
    try:
        yield server.address
    finally:
        server.stop()


def _queue() -> str:
    return f"net-{uuid.uuid4().hex[:12]}"


def _sepp_py_take(address: str, queue: str, wait: float) -> tuple[str, int] | None:
    """sepp-py (asyncio, grpcio) reserves one job from ``queue`` and acks it."""

    async def main() -> tuple[str, int] | None:
        client = await sepp.SeppClient.connect(address)
        try:
            options = ReserveOptions(
                [queue],
                timedelta(seconds=30),
                wait_timeout=timedelta(seconds=wait),
                worker_id="sepp-py",
            )
            jobs = await client.reserve(options)
            if not jobs:
                return None
            [job] = jobs
            await client.ack(job.ctx)
            return job.ctx.id, job.ctx.attempt
        finally:
            await client.close()

    return asyncio.run(main())


def _sepp_py_dead_letters(address: str, queue: str) -> list[tuple[str, str, str | None, int]]:
    async def main() -> list[tuple[str, str, str | None, int]]:
        client = await sepp.SeppClient.connect(address)
        try:
            records = await client.drain_dead_letters(queue, max_records=10)
            return [(r.job_id, r.cause.value, r.last_reason, r.final_attempt) for r in records]
        finally:
            await client.close()

    return asyncio.run(main())


async def test_a_job_our_worker_retries_is_reserved_by_sepp_py_as_attempt_2(
    server_address: str,
) -> None:
    queue = _queue()
    seen: list[int] = []
    async with sepp_anyio.connect(server_address) as client:
        worker = Worker(client, [queue], wait=5.0)

        @worker.handler("t")
        async def busy(payload: Payload | None, ctx: JobCtx) -> None:
            seen.append(ctx.attempt)
            worker.shutdown()  # this worker stops; the retry is someone else's
            raise HandlerError.retry("busy, try elsewhere")

        ack = await client.enqueue(EnqueueRequest(queue, "t", payload=Payload.from_json(1)))
        with anyio.fail_after(10):
            await worker.run()
        assert seen == [1]
        assert worker.statistics().nacked_retry == 1
    taken = await anyio.to_thread.run_sync(_sepp_py_take, server_address, queue, 5.0)
    assert taken == (ack.job_id, 2)


async def test_a_nack_during_shutdown_is_not_captured_by_the_cancelled_long_poll(
    server_address: str,
) -> None:
    """Regression: shutdown cancels the worker's parked reserve on the client at once, but
    the server keeps it parked until the stream reset arrives. A nack for retry that
    overtook the reset made the job ready for that dead reserve, which leased it to nobody:
    the job sat out a whole lease (or, on its last attempt, was dead-lettered unrun). The
    worker now lets the cancelled reserve unwind (and send its reset) before nacking. The
    race is timing-dependent, so it is run a few times."""
    async with sepp_anyio.connect(server_address) as client:
        for _ in range(5):
            queue = _queue()
            worker = Worker(client, [queue], wait=30.0)

            @worker.handler("t")
            async def busy(payload: Payload | None, ctx: JobCtx, worker: Worker = worker) -> None:
                worker.shutdown()
                raise HandlerError.retry("busy")

            ack = await client.enqueue(EnqueueRequest(queue, "t"))
            with anyio.fail_after(10):
                await worker.run()
            with anyio.fail_after(5):
                jobs = await client.reserve([queue], lease=5.0, wait=2.0)
            assert [(job.ctx.id, job.ctx.attempt) for job in jobs] == [(ack.job_id, 2)]
            await client.ack(jobs[0].ctx)


async def test_sepp_py_sees_a_crash_backed_off_then_redelivered(server_address: str) -> None:
    queue = _queue()
    async with sepp_anyio.connect(server_address) as client:
        # The default policy's first delay, without its jitter: exactly 2 s.
        unjittered = Retry(backoff=2.0, max_delay=60.0, jitter=None)
        worker = Worker(client, [queue], wait=5.0, retry=unjittered)

        @worker.handler("t")
        async def crashes(payload: Payload | None, ctx: JobCtx) -> None:
            worker.shutdown()
            raise ValueError("bug")

        ack = await client.enqueue(EnqueueRequest(queue, "t"))
        with anyio.fail_after(10):
            await worker.run()
        nacked_at = anyio.current_time()
    # Backed off 2 s: sepp-py gets nothing in the first second ...
    assert await anyio.to_thread.run_sync(_sepp_py_take, server_address, queue, 1.0) is None
    # ... and attempt 2 (not a burned attempt 3) once the backoff is over.
    taken = await anyio.to_thread.run_sync(_sepp_py_take, server_address, queue, 5.0)
    assert taken == (ack.job_id, 2)
    assert anyio.current_time() - nacked_at >= 1.9


async def test_a_permanent_failure_is_a_dead_letter_for_sepp_py(retaining_server: str) -> None:
    server_address = retaining_server
    queue = _queue()
    async with sepp_anyio.connect(server_address) as client:
        worker = Worker(client, [queue], wait=5.0)

        @worker.handler("t")
        async def bad(payload: Payload | None, ctx: JobCtx) -> None:
            worker.shutdown()
            raise HandlerError.permanent("cannot parse")

        ack = await client.enqueue(EnqueueRequest(queue, "t"))
        with anyio.fail_after(10):
            await worker.run()
        assert worker.statistics().nacked_dead_letter == 1
    records = await anyio.to_thread.run_sync(_sepp_py_dead_letters, server_address, queue)
    assert records == [(ack.job_id, "rejected", "cannot parse", 1)]


async def test_jobs_are_processed_with_leases_extended_over_the_network(
    server_address: str,
) -> None:
    queue = _queue()
    done = anyio.Event()
    attempts: list[int] = []
    async with sepp_anyio.connect(server_address) as client:
        # The lease is short, but with room for a loaded machine: the first extension goes
        # out a third of the way in (1 s here), so a stall of up to 2 s of the client's loop
        # or the server process is survived. (With a 1 s lease, a stall of 0.67 s lost all
        # eight leases once on CI; with 0.3 s, an ack's 0.2 s slack failed once in five runs.)
        worker = Worker(client, [queue], lease=3.0, auto_extend=True, max_in_flight=8, wait=5.0)

        @worker.handler("t")
        async def slow(payload: Payload | None, ctx: JobCtx) -> None:
            attempts.append(ctx.attempt)
            await anyio.sleep(4.0)  # past the 3 s lease: it lives only if extended
            if len(attempts) == 8:
                done.set()

        await client.enqueue_batch([EnqueueRequest(queue, "t") for _ in range(8)])
        with anyio.fail_after(20):
            async with worker:
                await done.wait()
        stats = worker.statistics()
        assert (stats.processed, stats.lease_lost, stats.settle_errors) == (8, 0, 0)
        assert attempts == [1] * 8
        assert stats.max_in_flight_seen == 8
    # Nothing is left for anyone else.
    assert await anyio.to_thread.run_sync(_sepp_py_take, server_address, queue, 0.5) is None


async def test_shutdown_ends_a_network_long_poll_promptly(server_address: str) -> None:
    async with sepp_anyio.connect(server_address) as client:
        worker = Worker(client, [_queue()], wait=30.0)

        @worker.handler("t")
        async def never_called(payload: Payload | None, ctx: JobCtx) -> None:
            raise AssertionError("no job was enqueued")

        with anyio.fail_after(5):
            async with anyio.create_task_group() as tg:
                await tg.start(worker.run)
                # Give the reserve time to reach the server and park there (the assertions
                # hold either way; this only makes the interesting case the likely one).
                await anyio.sleep(0.2)
                asked = anyio.current_time()
                worker.shutdown()
        assert anyio.current_time() - asked < 1.0
        # The connection is still usable after the abandoned call.
        assert (await client.server_info()).version


@pytest.fixture(scope="module")
def guarded_server() -> Iterator[ServerThread]:
    """A network server of its own that wants an API key and declares its queues."""
    config = ServerConfig(
        auth=AuthConfig(api_keys=(ApiKey("right"),)),
        server=ServerSection(strict_queues=True),
        queues=(QueueConfig(name="declared"),),
    )
    with ServerThread(config) as running:
        yield running


@pytest.mark.parametrize("key", [None, "wrong"], ids=["no-key", "wrong-key"])
async def test_a_worker_with_a_refused_key_raises_instead_of_retrying(
    guarded_server: ServerThread, key: str | None
) -> None:
    async with sepp_anyio.connect(guarded_server.address, api_key=key) as client:
        worker = Worker(client, ["declared"], wait=5.0)

        @worker.handler("t")
        async def never_called(payload: Payload | None, ctx: JobCtx) -> None:
            raise AssertionError("no job can be reserved")

        with anyio.fail_after(10), pytest.raises(sepp_anyio.UnauthenticatedError):
            await worker.run()
        assert worker.statistics().reserves == 1


@pytest.mark.parametrize("lanes", [1, 2, 5])
async def test_a_worker_of_many_lanes_with_a_wrong_key_raises_one_error(
    guarded_server: ServerThread, lanes: int
) -> None:
    """Over a real connection, where the lanes' refusals arrive in whatever order the
    network gives: always one ``UnauthenticatedError`` (it used to be an exception group of
    one per lane about half the time)."""
    async with sepp_anyio.connect(guarded_server.address, api_key="wrong") as client:
        for iteration in range(20):
            worker = Worker(client, [sepp_anyio.Lane([f"q{n}"]) for n in range(lanes)])

            @worker.handler("t")
            async def never_called(payload: Payload | None, ctx: JobCtx) -> None:
                raise AssertionError("no job can be reserved")

            with anyio.fail_after(10), pytest.raises(sepp_anyio.UnauthenticatedError):
                await worker.run()
            assert 1 <= worker.statistics().reserves <= lanes, iteration


async def test_a_worker_on_an_undeclared_queue_of_a_strict_server_raises(
    guarded_server: ServerThread,
) -> None:
    async with sepp_anyio.connect(guarded_server.address, api_key="right") as client:
        worker = Worker(client, ["declared", "typo"], wait=5.0)

        @worker.handler("t")
        async def never_called(payload: Payload | None, ctx: JobCtx) -> None:
            raise AssertionError("no job can be reserved")

        with anyio.fail_after(10), pytest.raises(sepp_anyio.UnknownQueuesError) as info:
            async with worker:
                await anyio.sleep_forever()
        assert '"typo"' in (info.value.status_message or "")
        # With the right key and declared queues, the same server serves it.
        ack = await client.enqueue(EnqueueRequest("declared", "t"))
        fixed = Worker(client, ["declared"], wait=5.0)
        done = anyio.Event()

        @fixed.handler("t")
        async def handled(payload: Payload | None, ctx: JobCtx) -> None:
            assert ctx.id == ack.job_id
            done.set()

        with anyio.fail_after(10):
            async with fixed:
                await done.wait()
        assert fixed.statistics().processed == 1


class _WorkerLog(logging.Handler):
    """The worker's log records as they come, with an event per record (emitted on the
    event loop's thread, by the worker itself)."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.records: list[logging.LogRecord] = []
        self._changed = anyio.Event()

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)
        self._changed.set()
        self._changed = anyio.Event()

    def matching(self, text: str) -> list[logging.LogRecord]:
        return [r for r in self.records if text in r.getMessage()]

    async def wait_for(self, text: str, count: int = 1) -> list[logging.LogRecord]:
        with anyio.fail_after(20):
            while len(self.matching(text)) < count:
                await self._changed.wait()
        return self.matching(text)


async def test_a_server_gone_makes_the_worker_unready_and_its_return_is_logged_once() -> None:
    """The server stopped (connections refused), then started again on the same port: not
    ready once the reserves have failed for ``unready_after``, ready again with one INFO
    line as soon as a reserve works (it stayed ready through the whole outage and said
    nothing when it came back)."""
    log = _WorkerLog()
    worker_logger = logging.getLogger("sepp_anyio.worker")
    worker_logger.addHandler(log)
    level = worker_logger.level
    worker_logger.setLevel(logging.INFO)
    server = ServerThread(ServerConfig())
    await anyio.to_thread.run_sync(server.start)
    try:
        async with sepp_anyio.connect(server.address) as client:
            worker = Worker(client, ["q"], wait=2.0, reserve_error_backoff=0.2, unready_after=0.5)
            worker.handle("t", lambda payload, ctx: None)
            async with anyio.create_task_group() as tg:
                await tg.start(worker.run)
                assert worker.readiness()
                await anyio.to_thread.run_sync(server.stop)
                # The 4th failure comes at least 3 backoffs (0.6 s) after the 1st.
                await log.wait_for("reserve failed", 4)
                assert not worker.readiness()
                server = ServerThread(ServerConfig(), port=server.port)
                await anyio.to_thread.run_sync(server.start)
                [again] = await log.wait_for("again after")
                assert worker.readiness()
                worker.shutdown()
    finally:
        await anyio.to_thread.run_sync(server.stop)
        worker_logger.removeHandler(log)
        worker_logger.setLevel(level)
    assert again.levelno == logging.INFO
    failed = len(log.matching("reserve failed"))
    assert again.getMessage().startswith(
        f"worker {worker.worker_id} reserving from q again after {failed} failed attempts over"
    ), again.getMessage()
    assert len(log.matching("again after")) == 1
