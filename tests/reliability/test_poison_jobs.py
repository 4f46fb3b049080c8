"""One bad job must not block the others (a poison message), over the real transport.

A grpclib test server answers a reserve with 100 jobs, one of which carries a Timestamp
beyond year 9999.  Decoded as a whole, the reply was unreadable, so none of the 99 good
jobs was ever handled and their leases ran out again and again.  Now the jobs are read
one by one: the 99 are delivered, the poisoned one is dead-lettered exactly once by the
reserve itself, with a reason naming the field, and logged at ERROR.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import anyio
import pytest

import sepp_anyio
from sepp_anyio import JobCtx, Payload, Worker
from sepp_anyio._proto.google.protobuf import Timestamp
from sepp_anyio._proto.sepp import v1 as pb
from tests.support.servers import ScriptedGrpclibServer

pytestmark = pytest.mark.anyio

T0 = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
YEAR_10000 = 253402300800
POISONED = "job-042"
FIELD = "Job.scheduled_at: timestamp out of range"


@pytest.fixture(scope="module")
def shared_server() -> Iterator[ScriptedGrpclibServer]:
    with ScriptedGrpclibServer() as server:
        yield server


@pytest.fixture
def server(shared_server: ScriptedGrpclibServer) -> ScriptedGrpclibServer:
    shared_server.script()
    return shared_server


def _field(number: int, payload: bytes) -> bytes:
    assert len(payload) < 128
    return bytes([number << 3 | 2, len(payload)]) + payload


def _job(job_id: str) -> bytes:
    return bytes(
        pb.Job(
            id=job_id,
            job_type="t",
            payload=pb.Payload(data=job_id.encode(), encoding="text/plain"),
            enqueued_at=T0,
            attempt=2,
            max_attempts=5,
            lease_expires_at=T0 + timedelta(seconds=30),
            queue="q",
        )
    )


def _hundred_jobs_one_poisoned() -> tuple[bytes, list[str]]:
    ids = [f"job-{i:03d}" for i in range(100)]
    body = b""
    for job_id in ids:
        job = _job(job_id)
        if job_id == POISONED:
            job += _field(11, bytes(Timestamp(seconds=YEAR_10000)))
        body += _varint_field(1, job)
    return body, [job_id for job_id in ids if job_id != POISONED]


def _varint_field(number: int, payload: bytes) -> bytes:
    length = len(payload)
    out = bytearray([number << 3 | 2])
    while length > 0x7F:
        out.append((length & 0x7F) | 0x80)
        length >>= 7
    out.append(length)
    return bytes(out) + payload


def raw_reply(data: bytes) -> Any:
    """A ReserveResponse that the server encodes as exactly ``data``."""
    cls = type(
        "RawReserveResponse",
        (pb.ReserveResponse,),
        {"SerializeToString": lambda self: data, "__bytes__": lambda self: data},
    )
    return cls()


def _script(server: ScriptedGrpclibServer, data: bytes, **extra: Any) -> None:
    first = threading.Event()

    def reserve(request: Any) -> Any:
        # The 100 jobs once; then nothing (the poisoned one is not redelivered: it was
        # dead-lettered, and the good ones were acked).
        if first.is_set():
            return pb.ReserveResponse()
        first.set()
        return raw_reply(data)

    server.script(
        replies={
            "Reserve": reserve,
            "Ack": lambda r: pb.AckResponse(job_id=r.job_id),
            "Nack": lambda r: pb.NackResponse(job_id=r.job_id, dead_lettered=True),
            **extra,
        }
    )


def _nacks(server: ScriptedGrpclibServer) -> list[Any]:
    return [event.request for event in server.events if event.method == "Nack"]


async def test_the_worker_handles_99_good_jobs_and_the_poisoned_one_is_dead_lettered_once(
    server: ScriptedGrpclibServer, caplog: pytest.LogCaptureFixture
) -> None:
    data, good = _hundred_jobs_one_poisoned()
    _script(server, data)
    handled: list[str] = []
    done = anyio.Event()
    async with sepp_anyio.connect(server.address) as client:
        worker = Worker(client, ["q"], wait=0.05, max_in_flight=128, max_jobs=100)

        @worker.handler("t")
        async def handle(payload: Payload | None, ctx: JobCtx) -> None:
            assert payload is not None and payload.text() == ctx.id
            handled.append(ctx.id)
            if len(handled) == len(good):
                done.set()

        with anyio.fail_after(20):
            async with worker:
                await done.wait()
    assert sorted(handled) == good
    assert worker.statistics().processed == len(good)
    assert server.calls("Ack") == len(good)
    [nack] = _nacks(server)
    assert (nack.job_id, nack.attempt) == (POISONED, 2)
    assert nack.retry.dead_letter is not None
    assert FIELD in nack.reason
    assert nack.worker_id == worker.worker_id
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1
    assert f"job {POISONED!r} (attempt 2, queue 'q', job type 't')" in errors[0]
    assert FIELD in errors[0] and "dead-lettering it" in errors[0]


async def test_reserve_returns_the_readable_jobs_after_dead_lettering_the_poisoned_one(
    server: ScriptedGrpclibServer,
) -> None:
    data, good = _hundred_jobs_one_poisoned()
    _script(server, data)
    async with sepp_anyio.connect(server.address) as client:
        jobs = await client.reserve(["q"], lease=30, wait=0, max_jobs=100, worker_id="w-7")
        # Dead-lettered before the reserve returned, so every user of the client is
        # protected, not only the Worker.
        [nack] = _nacks(server)
    assert [job.ctx.id for job in jobs] == good
    assert (nack.job_id, nack.worker_id) == (POISONED, "w-7")


async def test_the_dead_letter_nack_is_shielded_from_cancelling_the_reserve(
    server: ScriptedGrpclibServer,
) -> None:
    """A worker shutting down cancels its reserve; a reply already received is still
    dead-lettered (the nack runs shielded), and its good jobs are still returned."""
    data, good = _hundred_jobs_one_poisoned()
    nack_arrived = threading.Event()
    release = threading.Event()

    async def nack(request: Any) -> Any:
        nack_arrived.set()
        await anyio.to_thread.run_sync(release.wait, 10)
        return pb.NackResponse(job_id=request.job_id, dead_lettered=True)

    _script(server, data, Nack=nack)
    jobs: list[sepp_anyio.Job] | None = None
    async with sepp_anyio.connect(server.address) as client:
        with anyio.CancelScope() as scope:

            async def cancel_once_the_nack_is_sent() -> None:
                await anyio.to_thread.run_sync(nack_arrived.wait, 10)
                scope.cancel()
                release.set()

            async with anyio.create_task_group() as tg:
                tg.start_soon(cancel_once_the_nack_is_sent)
                with anyio.fail_after(10):
                    jobs = await client.reserve(["q"], lease=30, wait=0, max_jobs=100)
    assert jobs is not None and [job.ctx.id for job in jobs] == good
    [event] = [e for e in server.events if e.method == "Nack"]
    await anyio.to_thread.run_sync(lambda: server.wait_for(lambda e: e is event and e.finished))
    assert event.status == "OK" and not event.cancelled


async def test_the_dead_letter_nacks_are_bounded(
    server: ScriptedGrpclibServer,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A server that never answers the nack cannot hold the reserve: it gives up after
    UNREADABLE_JOB_NACK_TIMEOUT (shortened here) and returns the good jobs."""
    import sepp_anyio._client._client

    monkeypatch.setattr(sepp_anyio._client._client, "UNREADABLE_JOB_NACK_TIMEOUT", 0.3)
    data, good = _hundred_jobs_one_poisoned()
    _script(server, data)
    server.script(
        replies={"Reserve": raw_reply(data)},
        hang_first={"Nack": 1},
    )
    async with sepp_anyio.connect(server.address) as client:
        with anyio.fail_after(10):
            jobs = await client.reserve(["q"], lease=30, wait=0, max_jobs=100)
    assert [job.ctx.id for job in jobs] == good
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert any("could not dead-letter" in e or "gave up dead-lettering" in e for e in errors)


async def test_a_poisoned_dead_letter_is_logged_and_the_others_returned(
    server: ScriptedGrpclibServer, caplog: pytest.LogCaptureFixture
) -> None:
    def record(job_id: str) -> bytes:
        return bytes(pb.DeadLetterRecord(job=pb.Job.FromString(_job(job_id)), failed_at=T0))

    poisoned = _job("d-1") + _field(11, bytes(Timestamp(seconds=YEAR_10000)))
    bad = _varint_field(1, poisoned) + bytes([0x20, 4])  # final_attempt 4
    data = _varint_field(1, record("d-0")) + _varint_field(1, bad) + _varint_field(1, record("d-2"))
    reply_cls = type(
        "RawDrain",
        (pb.DrainDeadLettersResponse,),
        {"SerializeToString": lambda self: data, "__bytes__": lambda self: data},
    )
    server.script(replies={"DrainDeadLetters": reply_cls()})
    async with sepp_anyio.connect(server.address) as client:
        records = await client.drain_dead_letters(max=10)
    assert [r.job_id for r in records] == ["d-0", "d-2"]
    [error] = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert "job 'd-1' (attempt 4, queue 'q', job type 't')" in error
    assert FIELD in error and "not returned" in error
