"""The client and the worker fed malformed replies by a test server, over the real transport.

``tests/client/test_malformed.py`` covers replies that decode but break the protocol (no
oneof outcome, the wrong number of results, pre-1970 times, an unknown dead-letter cause,
bad jobs among good ones).  This adds replies that do not decode, or only decode because
betterproto2 does not check wire types: garbage bytes, fields with the wrong wire type,
times out of any range, enum values out of range, unknown oneof branches on the wire, and
servers that hang or answer before the request is complete.  The outcome is always the
documented error (``ServerInternalError`` "could not decode", ``MalformedResponseError``,
a deadline), or the bad part skipped; never an unhandled exception, never a hang.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import anyio
import h2.errors
import h2.events
import pytest

import sepp_anyio
from sepp_anyio import (
    EnqueueRequest,
    JobCtx,
    MalformedResponseError,
    MalformedServerInfoError,
    Payload,
    RetryPolicy,
    ServerInternalError,
    StatusCode,
    TransportError,
    UnknownRejection,
    Worker,
)
from sepp_anyio._proto.google.protobuf import Duration, Timestamp
from sepp_anyio._proto.sepp import v1 as pb
from tests.support.servers import RawH2Server, ScriptedGrpclibServer

pytestmark = pytest.mark.anyio

T0 = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
RETRYING = RetryPolicy(max_attempts=3, initial_backoff=0)


@pytest.fixture(scope="module")
def shared_server() -> Iterator[ScriptedGrpclibServer]:
    with ScriptedGrpclibServer() as server:
        yield server


@pytest.fixture
def server(shared_server: ScriptedGrpclibServer) -> ScriptedGrpclibServer:
    shared_server.script()
    return shared_server


def raw_reply(reply_type: type[Any], data: bytes) -> Any:
    """An instance of ``reply_type`` that the server encodes as exactly ``data``."""
    cls = type(
        f"Raw{reply_type.__name__}",
        (reply_type,),
        {"SerializeToString": lambda self: data, "__bytes__": lambda self: data},
    )
    return cls()


def _field(number: int, payload: bytes) -> bytes:
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        low, value = value & 0x7F, value >> 7
        out.append(low | (0x80 if value else 0))
        if not value:
            return bytes(out)


def good_job(job_id: str = "job-1") -> Any:
    return pb.Job(
        id=job_id,
        job_type="t",
        enqueued_at=T0,
        attempt=1,
        max_attempts=3,
        lease_expires_at=T0 + timedelta(seconds=30),
        queue="q",
    )


CALLS: dict[str, Any] = {
    "EnqueueBatch": lambda c: c.enqueue_batch([EnqueueRequest("q", "t")]),
    "EnqueueAtomic": lambda c: c.enqueue_atomic([EnqueueRequest("q", "t")]),
    "Reserve": lambda c: c.reserve(["q"], lease=5, wait=0),
    "DrainDeadLetters": lambda c: c.drain_dead_letters(max=5),
    "GetServerInfo": lambda c: c.server_info(),
}
REPLY_TYPES = {
    "EnqueueBatch": pb.EnqueueBatchResponse,
    "EnqueueAtomic": pb.EnqueueAtomicResponse,
    "Reserve": pb.ReserveResponse,
    "DrainDeadLetters": pb.DrainDeadLettersResponse,
    "GetServerInfo": pb.GetServerInfoResponse,
    "Ack": pb.AckResponse,
    "Nack": pb.NackResponse,
    "Extend": pb.ExtendResponse,
}
GARBAGE = {
    "random bytes": bytes(range(256))[::-7] * 3,
    "truncated field": b"\x0a\x40abc",
    "invalid wire type 7": b"\x0f\x01",
    "fixed64 where a string is": b"\x09" + b"\x00" * 8,
    "invalid utf-8": b"\x0a\x02\xff\xfe",
}


async def _leased_ctx(client: sepp_anyio.Client, server: ScriptedGrpclibServer) -> JobCtx:
    server.script(replies={"Reserve": pb.ReserveResponse(jobs=[good_job()])})
    [job] = await client.reserve(["q"], lease=30, wait=0)
    return job.ctx


# ------------------------------------------------------------------ garbage bodies


@pytest.mark.parametrize("garbage", sorted(GARBAGE))
@pytest.mark.parametrize("rpc", sorted(REPLY_TYPES))
async def test_garbage_as_a_reply_is_an_undecodable_reply(
    server: ScriptedGrpclibServer, rpc: str, garbage: str
) -> None:
    async with sepp_anyio.connect(server.address, retry=RETRYING) as client:
        ctx = await _leased_ctx(client, server) if rpc in ("Ack", "Nack", "Extend") else None
        server.script(replies={rpc: raw_reply(REPLY_TYPES[rpc], GARBAGE[garbage])})
        calls: dict[str, Any] = {
            **CALLS,
            "Ack": lambda c: c.ack(ctx),
            "Nack": lambda c: c.nack(ctx),
            "Extend": lambda c: c.extend(ctx, 10),
        }
        # Undecodable; or, if the bytes happen to decode (betterproto2 reads a truncated
        # field as far as it goes), a reply that breaks the protocol, or even one that is
        # usable.  Never anything else.
        try:
            await calls[rpc](client)
        except ServerInternalError as exc:
            assert exc.code is StatusCode.INTERNAL and "could not decode" in str(exc)  # noqa: PT017
        except (MalformedResponseError, MalformedServerInfoError):
            pass
        # The connection is fine for the next call.
        server.script()
        [ack] = await client.enqueue_batch([EnqueueRequest("q", "t", payload=Payload(b"x", "b"))])
        assert isinstance(ack, sepp_anyio.EnqueueAck)
        assert server.calls("EnqueueBatch") == 1


# ------------------------------------------------------------------ wrong wire types

WRONG_WIRE_TYPES: dict[str, tuple[str, bytes]] = {
    # field 1 (jobs) as a varint: betterproto2 decodes the list of jobs as [1]
    "reserve: a job as a number": ("Reserve", b"\x08\x01"),
    # field 1 (jobs) as a group: [None]
    "reserve: a job as a group": ("Reserve", b"\x0b"),
    "enqueue: a result as a number": ("EnqueueBatch", b"\x08\x01"),
    "atomic: the outcome as a number": ("EnqueueAtomic", b"\x08\x01"),
    "atomic: an ack's job id as a number": (
        "EnqueueAtomic",
        _field(1, _field(1, _field(1, b"") + b"\x08\x07")),
    ),
    "drain: a record as a number": ("DrainDeadLetters", b"\x08\x01"),
    "info: the version as a number": ("GetServerInfo", b"\x08\x01"),
    "info: the server time as a number": ("GetServerInfo", b"\x0a\x01v\x18\x05"),
}


@pytest.mark.parametrize("case", sorted(WRONG_WIRE_TYPES))
async def test_a_field_with_the_wrong_wire_type_is_an_undecodable_reply(
    server: ScriptedGrpclibServer, case: str
) -> None:
    """Regression: betterproto2 decodes a field with the wrong wire type into a value of the
    wrong type (``jobs == [1]``), and reading it raised AttributeError/TypeError out of the
    client.  Now the reply is refused as undecodable, as protobuf and prost refuse it."""
    rpc, data = WRONG_WIRE_TYPES[case]
    server.script(replies={rpc: raw_reply(REPLY_TYPES[rpc], data)})
    async with sepp_anyio.connect(server.address) as client:
        with pytest.raises(ServerInternalError, match="wrong wire type"):
            await CALLS[rpc](client)


async def test_a_job_whose_id_has_the_wrong_wire_type_is_left_out(
    server: ScriptedGrpclibServer, caplog: pytest.LogCaptureFixture
) -> None:
    """The jobs of a reserve are decoded one by one: a job whose id is a varint does not
    decode, has no readable id (so it cannot be dead-lettered), and is logged at ERROR
    and left out; the good job next to it is delivered."""
    bad = _field(1, b"\x08\x05" + bytes(good_job())[8:])
    server.script(
        replies={"Reserve": raw_reply(pb.ReserveResponse, bad + _field(1, bytes(good_job())))}
    )
    async with sepp_anyio.connect(server.address) as client:
        [job] = await client.reserve(["q"], lease=5, wait=0)
    assert job.ctx.id == "job-1"
    [error] = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert "Job.id has the wrong wire type" in error and "cannot be dead-lettered" in error
    assert server.calls("Nack") == 0


async def test_a_dead_letter_whose_cause_has_the_wrong_wire_type_is_left_out(
    server: ScriptedGrpclibServer, caplog: pytest.LogCaptureFixture
) -> None:
    bad = _field(1, _field(1, bytes(good_job("d0"))) + _field(2, b"x") + b"\x20\x03")
    good = _field(1, bytes(pb.DeadLetterRecord(job=good_job("d1"), failed_at=T0)))
    server.script(replies={"DrainDeadLetters": raw_reply(pb.DrainDeadLettersResponse, bad + good)})
    async with sepp_anyio.connect(server.address) as client:
        [record] = await client.drain_dead_letters(max=5)
    assert record.job_id == "d1"
    [error] = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert "DeadLetterRecord.cause has the wrong wire type" in error
    # What could be read of it is in the line: it is gone from the server.
    assert "'d0'" in error and "attempt 3" in error and "queue 'q'" in error


async def test_an_ack_whose_job_id_has_the_wrong_wire_type_fails_the_batch_naming_it(
    server: ScriptedGrpclibServer,
) -> None:
    """A batch's results cannot be left out (one per job, in order): an unreadable one
    fails the call, naming its index and field, and listing the jobs accepted."""
    ok = _field(1, _field(1, _field(1, b"ok-1")))
    bad = _field(1, _field(1, b"\x08\x07"))
    server.script(replies={"EnqueueBatch": raw_reply(pb.EnqueueBatchResponse, ok + bad)})
    async with sepp_anyio.connect(server.address, retry=RETRYING) as client:
        with pytest.raises(MalformedResponseError) as caught:
            await client.enqueue_batch([EnqueueRequest("q", "t")] * 2)
    message = str(caught.value)
    assert "result for job 1 cannot be decoded" in message
    assert "EnqueueResponse.job_id has the wrong wire type" in message
    assert "accepted 1 job(s): 0: ok-1" in message
    assert server.calls("EnqueueBatch") == 1


async def test_an_extend_reply_with_the_wrong_wire_type(server: ScriptedGrpclibServer) -> None:
    async with sepp_anyio.connect(server.address) as client:
        ctx = await _leased_ctx(client, server)
        server.script(replies={"Extend": raw_reply(pb.ExtendResponse, b"\x0a\x01x\x10\x05")})
        with pytest.raises(ServerInternalError, match="wrong wire type"):
            await ctx.extend(10)
        assert ctx.lease_expires_at == T0 + timedelta(seconds=30)


# ------------------------------------------------------------------ times and enums out of range


def _job_with_expiry(timestamp: bytes) -> bytes:
    job = bytes(pb.Job(id="bad-time", job_type="t", enqueued_at=T0, attempt=1, queue="q"))
    return _field(1, job + _field(9, timestamp))


@pytest.mark.parametrize(
    "timestamp",
    [
        pytest.param(bytes(Timestamp(seconds=2**62)), id="year 10^11"),
        pytest.param(bytes(Timestamp(seconds=-(2**62))), id="before year 1"),
        pytest.param(bytes(Timestamp(seconds=253402300800)), id="year 10000"),
    ],
)
async def test_a_time_out_of_any_range(
    server: ScriptedGrpclibServer, timestamp: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    """A Timestamp Python cannot represent makes a reply undecodable (betterproto2
    converts while decoding): the documented undecodable-reply error naming the field,
    for every RPC that carries a time; in a reserve only that job is lost (and
    dead-lettered), since the jobs are decoded one by one."""
    replies = {
        "Reserve": raw_reply(pb.ReserveResponse, _job_with_expiry(timestamp)),
        "Nack": lambda r: pb.NackResponse(job_id=r.job_id, dead_lettered=True),
        "Extend": raw_reply(pb.ExtendResponse, b"\x0a\x01x" + _field(2, timestamp)),
        "GetServerInfo": raw_reply(pb.GetServerInfoResponse, b"\x0a\x01v" + _field(3, timestamp)),
    }
    async with sepp_anyio.connect(server.address) as client:
        ctx = await _leased_ctx(client, server)
        server.script(replies=replies)
        assert await client.reserve(["q"], lease=5, wait=0) == []
        [nack] = [e.request for e in server.events if e.method == "Nack"]
        assert nack.job_id == "bad-time" and nack.retry.dead_letter is not None
        assert "Job.lease_expires_at: timestamp out of range" in nack.reason
        with pytest.raises(ServerInternalError, match="could not decode ExtendResponse") as e:
            await ctx.extend(10)
        assert "ExtendResponse.lease_expires_at: timestamp out of range" in str(e.value)
        with pytest.raises(ServerInternalError, match="could not decode GetServerInfoResponse"):
            await client.server_info()


async def test_nanos_out_of_range_are_normalised_not_fatal(
    server: ScriptedGrpclibServer,
) -> None:
    odd = bytes(Timestamp(seconds=int((T0 + timedelta(seconds=30)).timestamp()), nanos=-1))
    server.script(replies={"Reserve": raw_reply(pb.ReserveResponse, _job_with_expiry(odd))})
    async with sepp_anyio.connect(server.address) as client:
        [job] = await client.reserve(["q"], lease=5, wait=0)
    assert T0 < job.ctx.lease_expires_at <= T0 + timedelta(seconds=30)


async def test_durations_out_of_range_in_server_info(server: ScriptedGrpclibServer) -> None:
    data = (
        b"\x0a\x01v"
        + _field(3, bytes(Timestamp(seconds=1)))
        + _field(17, bytes(Duration(seconds=2**62)))
    )
    server.script(replies={"GetServerInfo": raw_reply(pb.GetServerInfoResponse, data)})
    async with sepp_anyio.connect(server.address) as client:
        with pytest.raises(ServerInternalError, match="could not decode") as caught:
            await client.server_info()
    assert "GetServerInfoResponse.max_wait_timeout: duration out of range" in str(caught.value)


@pytest.mark.parametrize("cause", [5, 2**31 - 1, 2**40, 2**64 - 1])
async def test_a_dead_letter_cause_out_of_range_is_unspecified(
    server: ScriptedGrpclibServer, cause: int
) -> None:
    record = bytes(pb.DeadLetterRecord(job=good_job("d1"), failed_at=T0)) + b"\x10" + _varint(cause)
    server.script(
        replies={"DrainDeadLetters": raw_reply(pb.DrainDeadLettersResponse, _field(1, record))}
    )
    async with sepp_anyio.connect(server.address) as client:
        [drained] = await client.drain_dead_letters(max=5)
    assert drained.cause is sepp_anyio.DeadLetterCause.UNSPECIFIED


# ------------------------------------------------------------------ unknown oneof branches


async def test_an_unknown_rejection_branch_on_the_wire(server: ScriptedGrpclibServer) -> None:
    """A rejection reason from a newer server (field 15) is an unknown rejection, not an
    error; an unknown *outcome* of a result (field 3) breaks the protocol."""
    rejection = _field(15, b"\x0a\x01q")
    reply = _field(1, _field(2, rejection)) + _field(1, _field(1, b"\x0a\x02ok"))
    server.script(replies={"EnqueueBatch": raw_reply(pb.EnqueueBatchResponse, reply)})
    async with sepp_anyio.connect(server.address) as client:
        first, second = await client.enqueue_batch([EnqueueRequest("q", "t")] * 2)
        assert first == UnknownRejection(15)
        assert isinstance(second, sepp_anyio.EnqueueAck) and second.job_id == "ok"
        server.script(
            replies={"EnqueueBatch": raw_reply(pb.EnqueueBatchResponse, _field(1, _field(3, b"")))}
        )
        with pytest.raises(MalformedResponseError, match="neither a success nor a rejection"):
            await client.enqueue_batch([EnqueueRequest("q", "t")])
        server.script(
            replies={"EnqueueAtomic": raw_reply(pb.EnqueueAtomicResponse, _field(3, b"\x08\x01"))}
        )
        with pytest.raises(MalformedResponseError, match="neither a success nor a rejection"):
            await client.enqueue_atomic([EnqueueRequest("q", "t")])


# ------------------------------------------------------------------ hangs


async def test_a_hung_call_ends_at_its_deadline(server: ScriptedGrpclibServer) -> None:
    server.script(hang_first={"GetServerInfo": 1, "Ack": 1})
    async with sepp_anyio.connect(server.address, rpc_timeout=0.3) as client:
        with anyio.fail_after(10), pytest.raises(TransportError) as caught:
            await client.server_info()
        assert caught.value.code is StatusCode.DEADLINE_EXCEEDED
        server.script(
            replies={"GetServerInfo": pb.GetServerInfoResponse(server_version="v", server_time=T0)}
        )
        assert (await client.server_info()).version == "v"  # the connection is fine


async def test_a_worker_survives_hung_reserves_and_a_hung_ack(
    server: ScriptedGrpclibServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Reserves that never answer end at their deadline (wait + slack, shortened here) and
    are retried after the backoff; an ack that never answers ends at the RPC deadline and is
    counted as a settle error.  The worker keeps working and shuts down promptly."""
    import sepp_anyio._client._client

    # Long enough that an answered reserve or ack never hits its deadline on a loaded
    # machine (0.2 s did, and counted a third reserve error), short enough for a quick test.
    monkeypatch.setattr(sepp_anyio._client._client, "RESERVE_DEADLINE_SLACK", 1.0)
    delivered = 0

    def reserve(request: Any) -> Any:
        nonlocal delivered
        delivered += 1
        return pb.ReserveResponse(jobs=[good_job(f"job-{delivered}")])

    server.script(
        replies={"Reserve": reserve, "Ack": lambda r: pb.AckResponse(job_id=r.job_id)},
        hang_first={"Reserve": 2, "Ack": 1},
    )
    handled: list[str] = []
    done = anyio.Event()
    async with sepp_anyio.connect(server.address, rpc_timeout=1.0) as client:
        worker = Worker(client, ["q"], wait=0.1, max_in_flight=1, reserve_error_backoff=0.01)

        @worker.handler("t")
        async def handle(payload: Payload | None, ctx: JobCtx) -> None:
            handled.append(ctx.id)
            if len(handled) == 3:
                done.set()

        with anyio.fail_after(15):
            async with worker:
                await done.wait()
    stats = worker.statistics()
    assert stats.reserve_errors == 2
    assert handled[:3] == ["job-1", "job-2", "job-3"]
    assert stats.settle_errors >= 1 and stats.processed >= 2


# ------------------------------------------------------------------ answers before the request ends


def _answer_then_reset(conn: Any, event: Any, send: Any) -> None:
    """Answer RESOURCE_EXHAUSTED as soon as the headers arrive, then RST_STREAM(NO_ERROR)
    without reading the body (RFC 9113 8.1: a complete response before the request)."""
    if isinstance(event, h2.events.RequestReceived):
        assert event.stream_id is not None
        conn.send_headers(
            event.stream_id,
            [
                (":status", "200"),
                ("content-type", "application/grpc"),
                ("grpc-status", "8"),
                ("grpc-message", "too big for me"),
            ],
            end_stream=True,
        )
        conn.reset_stream(event.stream_id, h2.errors.ErrorCodes.NO_ERROR)
    send()


async def test_an_answer_before_the_request_is_complete_is_the_answer() -> None:
    """Regression: a server that answers before reading the whole request and then resets
    the stream with NO_ERROR (what grpclib does for a request over its size limit) made the
    client report the reset as INTERNAL "the server reset the stream" instead of the
    server's status; and a sender waiting for flow-control window on that stream waited
    for an unrelated window update."""
    with RawH2Server(_answer_then_reset) as raw:
        async with sepp_anyio.connect(raw.address) as client:
            big = EnqueueRequest("q", "t", payload=Payload(b"z" * (4 << 20), "b"))
            with anyio.fail_after(10), pytest.raises(sepp_anyio.OverloadedError) as caught:
                await client.enqueue_batch([big])
            assert caught.value.status_message == "too big for me"
