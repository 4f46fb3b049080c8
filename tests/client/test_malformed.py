"""Crafted replies from a real grpclib server, over the real transport, on both backends:
replies that break the protocol, bad jobs among good ones, and what each request carries
on the wire.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

import sepp_anyio
from sepp_anyio import (
    BatchResultCountMismatchError,
    BatchValidationError,
    DeadLetterCause,
    EnqueueAck,
    EnqueueRequest,
    JobRejectedError,
    JobValidationError,
    MalformedResponseError,
    MalformedServerInfoError,
    Payload,
    QueueFull,
    RetryDirective,
    RetryPolicy,
    TraceContext,
    UnknownQueue,
    UnknownRejection,
)
from sepp_anyio._proto.google.protobuf import Empty
from sepp_anyio._proto.sepp import v1 as pb
from tests.support.servers import ScriptedGrpclibServer

pytestmark = pytest.mark.anyio

T0 = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
PRE_EPOCH = datetime(1969, 12, 31, tzinfo=UTC)
LATER = T0 + timedelta(days=1)
TP = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
RETRYING = RetryPolicy(max_attempts=5, initial_backoff=0)


@pytest.fixture(scope="module")
def shared_server() -> Iterator[ScriptedGrpclibServer]:
    with ScriptedGrpclibServer() as server:
        yield server


@pytest.fixture
def server(shared_server: ScriptedGrpclibServer) -> ScriptedGrpclibServer:
    shared_server.script()
    return shared_server


def jobs(n: int) -> list[EnqueueRequest]:
    return [EnqueueRequest("q", f"t{i}") for i in range(n)]


def ok(job_id: str, deduplicated: bool = False) -> Any:
    return pb.JobResult(success=pb.EnqueueResponse(job_id=job_id, deduplicated=deduplicated))


def pb_job(**overrides: Any) -> Any:
    fields: dict[str, Any] = {
        "id": "job-1",
        "job_type": "t",
        "priority": 3,
        "enqueued_at": T0,
        "attempt": 1,
        "max_attempts": 3,
        "lease_expires_at": T0 + timedelta(seconds=30),
        "queue": "q",
    }
    fields.update(overrides)
    return pb.Job(**fields)


def unreadable(caplog: pytest.LogCaptureFixture, what: str) -> list[str]:
    """The ERROR lines reporting an item left out of a reply (``what`` is in each)."""
    return [
        record.getMessage()
        for record in caplog.records
        if record.levelno == logging.ERROR
        and "cannot decode" in record.getMessage()
        and what in record.getMessage()
    ]


# ------------------------------------------------------------------------------ enqueue_batch


@pytest.mark.parametrize(("sent", "answered"), [(2, 1), (2, 3), (1, 0), (3, 0)])
async def test_a_batch_reply_with_the_wrong_number_of_results_is_malformed(
    server: ScriptedGrpclibServer, sent: int, answered: int
) -> None:
    reply = pb.EnqueueBatchResponse(results=[ok(f"id-{i}") for i in range(answered)])
    server.script(replies={"EnqueueBatch": reply})
    async with sepp_anyio.connect(server.address, retry=RETRYING) as client:
        call = client.enqueue(jobs(1)[0]) if sent == 1 else client.enqueue_batch(jobs(sent))
        with pytest.raises(BatchResultCountMismatchError) as caught:
            await call
    assert (caught.value.expected, caught.value.got) == (sent, answered)
    assert isinstance(caught.value, MalformedResponseError)
    assert server.calls("EnqueueBatch") == 1  # a broken reply is not retried


@pytest.mark.parametrize(
    "bad",
    [pb.JobResult(), pb.JobResult(success=pb.EnqueueResponse(job_id=""))],
    ids=["no outcome", "no job id"],
)
async def test_a_batch_result_without_a_usable_outcome_is_malformed(
    server: ScriptedGrpclibServer, bad: Any
) -> None:
    server.script(replies={"EnqueueBatch": pb.EnqueueBatchResponse(results=[ok("a"), bad])})
    async with sepp_anyio.connect(server.address) as client:
        with pytest.raises(MalformedResponseError) as caught:
            await client.enqueue_batch(jobs(2))
    assert not isinstance(caught.value, BatchResultCountMismatchError)


async def test_a_rejection_with_an_unknown_reason_is_an_unknown_rejection(
    server: ScriptedGrpclibServer,
) -> None:
    reply = pb.EnqueueBatchResponse(
        results=[
            ok("a", deduplicated=True),
            pb.JobResult(rejection=pb.JobRejection()),
            pb.JobResult(rejection=pb.JobRejection(queue_full=pb.QueueFull(queue="q", limit=9))),
        ]
    )
    server.script(replies={"EnqueueBatch": reply})
    async with sepp_anyio.connect(server.address) as client:
        results = await client.enqueue_batch(jobs(3))
        server.script(replies={"EnqueueBatch": pb.EnqueueBatchResponse(results=[reply.results[1]])})
        with pytest.raises(JobRejectedError) as caught:
            await client.enqueue(jobs(1)[0])
    assert results == [EnqueueAck("a", deduplicated=True), UnknownRejection(), QueueFull("q", 9)]
    assert isinstance(caught.value.rejection, UnknownRejection)


# ------------------------------------------------------------------------------ enqueue_atomic


async def test_an_atomic_success_with_the_wrong_number_of_acks_is_malformed(
    server: ScriptedGrpclibServer,
) -> None:
    reply = pb.EnqueueAtomicResponse(
        success=pb.EnqueueAtomicSuccess(responses=[pb.EnqueueResponse(job_id="a")])
    )
    server.script(replies={"EnqueueAtomic": reply})
    async with sepp_anyio.connect(server.address) as client:
        with pytest.raises(BatchResultCountMismatchError) as caught:
            await client.enqueue_atomic(jobs(2))
    assert (caught.value.expected, caught.value.got) == (2, 1)


async def test_an_atomic_reply_without_outcome_is_malformed(
    server: ScriptedGrpclibServer,
) -> None:
    server.script(replies={"EnqueueAtomic": pb.EnqueueAtomicResponse()})
    async with sepp_anyio.connect(server.address) as client:
        with pytest.raises(MalformedResponseError, match="neither a success nor a rejection"):
            await client.enqueue_atomic(jobs(1))


async def test_an_atomic_refusal_keeps_the_servers_indexes_and_reasons(
    server: ScriptedGrpclibServer,
) -> None:
    failure = pb.BatchValidationFailure(
        errors=[
            pb.JobValidationError(
                index=2, rejection=pb.JobRejection(unknown_queue=pb.UnknownQueue(queue="x"))
            ),
            pb.JobValidationError(index=0),  # no rejection: of unknown kind
        ]
    )
    server.script(replies={"EnqueueAtomic": pb.EnqueueAtomicResponse(rejection=failure)})
    async with sepp_anyio.connect(server.address) as client:
        with pytest.raises(BatchValidationError) as caught:
            await client.enqueue_atomic(jobs(3))
    assert caught.value.errors == [
        JobValidationError(2, UnknownQueue("x")),
        JobValidationError(0, UnknownRejection()),
    ]


# ------------------------------------------------------------------------------ reserve


BAD_JOBS = {
    "no id": pb_job(id=""),
    "no job type": pb_job(id="bad-type", job_type=""),
    "priority 12": pb_job(id="bad-priority", priority=12),
    "attempt 0": pb_job(id="bad-attempt", attempt=0),
    "no enqueued_at": pb_job(id="bad-enqueued", enqueued_at=None),
    "no lease expiry": pb_job(id="bad-lease", lease_expires_at=None),
    "pre-epoch lease expiry": pb_job(id="old-lease", lease_expires_at=PRE_EPOCH),
    "custom value unset": pb_job(id="bad-custom", custom={"k": pb.PrimitiveValue()}),
    "payload without encoding": pb_job(id="bad-payload", payload=pb.Payload(data=b"x")),
}


async def test_a_malformed_job_is_logged_and_dead_lettered_and_the_rest_delivered(
    server: ScriptedGrpclibServer, caplog: pytest.LogCaptureFixture
) -> None:
    """Each malformed job is left out and logged at ERROR; the reserve dead-letters every
    one whose id and attempt it can read (all but "no id" and "attempt 0"), once each."""
    good = [pb_job(id=f"good-{i}", job_type=f"t{i}") for i in range(3)]
    reply = pb.ReserveResponse(
        jobs=[good[0], *list(BAD_JOBS.values())[:5], good[1], *list(BAD_JOBS.values())[5:], good[2]]
    )
    server.script(
        replies={
            "Reserve": reply,
            "Nack": lambda request: pb.NackResponse(job_id=request.job_id, dead_lettered=True),
        }
    )
    caplog.set_level(logging.WARNING, logger="sepp_anyio")
    async with sepp_anyio.connect(server.address) as client:
        delivered = await client.reserve(["q"], lease=30, wait=0, max_jobs=20, worker_id="w-1")
    assert [job.ctx.id for job in delivered] == ["good-0", "good-1", "good-2"]
    assert [job.ctx.job_type for job in delivered] == ["t0", "t1", "t2"]
    assert all(job.ctx.worker_id == "w-1" and job.ctx._lease is not None for job in delivered)
    errors = unreadable(caplog, "")
    assert len(errors) == len(BAD_JOBS)
    assert any("priority 12 is out of range" in e and "dead-lettering it" in e for e in errors)
    assert any("'bad-lease'" in e and "lease_expires_at is missing" in e for e in errors)
    assert sum("cannot be dead-lettered" in e for e in errors) == 2
    nacks = {e.request.job_id: e.request for e in server.events if e.method == "Nack"}
    assert server.calls("Nack") == len(nacks) == len(BAD_JOBS) - 2
    assert set(nacks) == {
        "bad-type", "bad-priority", "bad-enqueued", "bad-lease", "old-lease", "bad-custom",
        "bad-payload",
    }  # fmt: skip
    for request in nacks.values():
        assert request.attempt == 1 and request.worker_id == "w-1"
        assert request.retry.dead_letter is not None
    assert "priority 12 is out of range" in nacks["bad-priority"].reason


async def test_a_reserve_of_only_malformed_jobs_returns_an_empty_list(
    server: ScriptedGrpclibServer,
) -> None:
    server.script(replies={"Reserve": pb.ReserveResponse(jobs=list(BAD_JOBS.values()))})
    async with sepp_anyio.connect(server.address) as client:
        assert await client.reserve(["q"], lease=30, wait=0) == []


async def test_bad_optional_fields_never_block_delivery(server: ScriptedGrpclibServer) -> None:
    reply = pb.ReserveResponse(
        jobs=[
            pb_job(
                trace_context=pb.TraceContext(traceparent="not-a-traceparent"),
                scheduled_at=PRE_EPOCH,
                payload=pb.Payload(data=b"", encoding="application/json"),
            )
        ]
    )
    server.script(replies={"Reserve": reply})
    async with sepp_anyio.connect(server.address) as client:
        [job] = await client.reserve(["q"], lease=30, wait=0)
    assert job.payload is None
    assert job.ctx.trace_context is None and job.ctx.scheduled_at is None


async def test_the_reserve_request_on_the_wire(server: ScriptedGrpclibServer) -> None:
    server.script(replies={"Reserve": pb.ReserveResponse()})
    async with sepp_anyio.connect(server.address, rpc_timeout=3.0) as client:
        await client.reserve(["a", "b"], lease=12.3456, wait=4.5, max_jobs=7, worker_id="w-9")
        await client.reserve(["a"], lease=1, wait=0)
    full, minimal = server.events
    assert full.request.queues == ["a", "b"]
    assert full.request.lease_duration == timedelta(milliseconds=12345)
    assert full.request.wait_timeout == timedelta(milliseconds=4500)
    assert (full.request.max_jobs, full.request.worker_id) == (7, "w-9")
    assert full.timeout == pytest.approx(14.5, abs=0.5)  # wait + 10 s, not rpc_timeout
    assert (minimal.request.max_jobs, minimal.request.worker_id) == (None, None)
    assert minimal.request.wait_timeout == timedelta(0)
    assert minimal.timeout == pytest.approx(10.0, abs=0.5)


# ------------------------------------------------------------------------------ ack / nack / extend


async def leased(client: sepp_anyio.Client, server: ScriptedGrpclibServer) -> sepp_anyio.JobCtx:
    server.script(replies={"Reserve": pb.ReserveResponse(jobs=[pb_job(attempt=4)])})
    [job] = await client.reserve(["q"], lease=30, wait=0, worker_id="w-1")
    return job.ctx


async def test_ack_echoes_the_job_id_attempt_and_worker_id(server: ScriptedGrpclibServer) -> None:
    async with sepp_anyio.connect(server.address) as client:
        ctx = await leased(client, server)
        server.script(replies={"Ack": pb.AckResponse(job_id="job-1")})
        await client.ack(ctx)
    [event] = server.events
    assert (event.request.job_id, event.request.attempt, event.request.worker_id) == (
        "job-1",
        4,
        "w-1",
    )


@pytest.mark.parametrize(
    ("directive", "branch", "value"),
    [
        (None, "default", Empty()),
        (RetryDirective.default(), "default", Empty()),
        (RetryDirective.after(2.5), "delay", timedelta(milliseconds=2500)),
        (RetryDirective.dead_letter(), "dead_letter", Empty()),
    ],
)
@pytest.mark.parametrize(("reason", "sent_reason"), [("", None), ("busy", "busy")])
async def test_nack_on_the_wire_and_its_dead_lettered_flag(
    server: ScriptedGrpclibServer,
    directive: RetryDirective | None,
    branch: str,
    value: Any,
    reason: str,
    sent_reason: str | None,
) -> None:
    import betterproto2

    async with sepp_anyio.connect(server.address) as client:
        ctx = await leased(client, server)
        flag = directive is not None and directive.kind == "dead_letter"
        server.script(replies={"Nack": pb.NackResponse(job_id="job-1", dead_lettered=flag)})
        assert await client.nack(ctx, directive, reason=reason) is flag
    [event] = server.events
    request = event.request
    assert (request.job_id, request.attempt, request.worker_id) == ("job-1", 4, "w-1")
    # An empty reason is left off the wire, not sent as "".
    assert request.reason == sent_reason
    assert betterproto2.which_one_of(request.retry, "strategy") == (branch, value)


async def test_extend_on_the_wire_and_a_reply_without_expiry(
    server: ScriptedGrpclibServer,
) -> None:
    async with sepp_anyio.connect(server.address) as client:
        ctx = await leased(client, server)
        server.script(replies={"Extend": pb.ExtendResponse(job_id="job-1", lease_expires_at=LATER)})
        assert await ctx.extend(45.5) == LATER
        [event] = server.events
        server.script(replies={"Extend": pb.ExtendResponse(job_id="job-1")})
        with pytest.raises(MalformedResponseError, match="lease_expires_at"):
            await ctx.extend(60)
        server.script(
            replies={"Extend": pb.ExtendResponse(job_id="job-1", lease_expires_at=PRE_EPOCH)}
        )
        with pytest.raises(MalformedResponseError):
            await client.extend(ctx, 60)
    assert event.request.lease_duration == timedelta(milliseconds=45500)
    assert (event.request.attempt, event.request.worker_id) == (4, "w-1")
    # The failed extensions left the known expiry where the good one put it.
    assert ctx.lease_expires_at == LATER
    assert ctx._lease is not None and ctx._lease.known_expiry == LATER


# ------------------------------------------------------------------------------ drain


def pb_record(job: Any, **overrides: Any) -> Any:
    fields: dict[str, Any] = {
        "job": job,
        "cause": pb.DeadLetterCause.REJECTED,
        "failed_at": T0,
        "final_attempt": 2,
        "last_reason": "nope",
    }
    fields.update(overrides)
    return pb.DeadLetterRecord(**fields)


async def test_a_malformed_dead_letter_is_skipped_and_the_rest_returned(
    server: ScriptedGrpclibServer, caplog: pytest.LogCaptureFixture
) -> None:
    reply = pb.DrainDeadLettersResponse(
        records=[
            pb_record(pb_job(id="d1")),
            pb_record(None),
            pb_record(pb_job(id="no-failed-at"), failed_at=None),
            pb_record(pb_job(id="no-queue", queue="")),
            pb_record(pb_job(id="d2", trace_context=pb.TraceContext(traceparent=TP)), cause=99),
        ]
    )
    server.script(replies={"DrainDeadLetters": reply})
    caplog.set_level(logging.WARNING, logger="sepp_anyio")
    async with sepp_anyio.connect(server.address, retry=RETRYING) as client:
        records = await client.drain_dead_letters(queue="q", max=10)
    assert [r.job_id for r in records] == ["d1", "d2"]
    assert records[0].cause is DeadLetterCause.REJECTED
    assert records[1].cause is DeadLetterCause.UNSPECIFIED  # a cause from a newer server
    assert records[1].trace_context == TraceContext(TP)
    errors = unreadable(caplog, "the drained record is not returned")
    assert len(errors) == 3
    assert any("'no-failed-at'" in e and "failed_at is missing" in e for e in errors)
    [event] = server.events
    assert (event.request.queue, event.request.max) == ("q", 10)


# ------------------------------------------------------------------------------ server info


def info(**overrides: Any) -> Any:
    fields: dict[str, Any] = {"server_version": "9.9.9", "server_time": T0}
    fields.update(overrides)
    return pb.GetServerInfoResponse(**fields)


@pytest.mark.parametrize(
    ("reply", "match"),
    [
        (info(server_version=""), "server_version is empty"),
        (info(server_time=None), "server_time is missing"),
        (info(server_time=PRE_EPOCH), "server_time is before 1970"),
    ],
    ids=["no version", "no time", "pre-epoch time"],
)
async def test_malformed_server_info_is_refused_and_not_retried(
    server: ScriptedGrpclibServer, reply: Any, match: str
) -> None:
    server.script(replies={"GetServerInfo": reply})
    async with sepp_anyio.connect(server.address, retry=RETRYING) as client:
        with pytest.raises(MalformedServerInfoError, match=match):
            await client.server_info()
    assert server.calls("GetServerInfo") == 1


async def test_a_minimal_server_info_is_accepted(server: ScriptedGrpclibServer) -> None:
    server.script(replies={"GetServerInfo": info(allowed_encodings=["json"])})
    async with sepp_anyio.connect(server.address) as client:
        result = await client.server_info()
    assert (result.version, result.server_time) == ("9.9.9", T0)
    assert (result.max_wait_timeout, result.max_enqueue_batch) == (0.0, 0)
    assert result.allowed_encodings == ("json",)


async def test_payload_bytes_survive_the_transport_unchanged(
    server: ScriptedGrpclibServer,
) -> None:
    data = bytes(range(256)) * 40
    server.script(
        replies={
            "Reserve": pb.ReserveResponse(
                jobs=[pb_job(payload=pb.Payload(data=data, encoding="application/x-raw"))]
            )
        }
    )
    async with sepp_anyio.connect(server.address) as client:
        [job] = await client.reserve(["q"], lease=30, wait=0)
        await client.enqueue(EnqueueRequest("q", "t", payload=Payload(data, "application/x-raw")))
    assert job.payload == Payload(data, "application/x-raw")
    sent = server.events[-1].request.jobs[0].payload
    assert (sent.data, sent.encoding) == (data, "application/x-raw")
