"""Every client method against the in-process reference server, on both backends.

Error statuses are provoked the honest way, through the server's own settings (auth, strict
mode, limits, retention, lease expiry, a failing store), not injected; see
``test_status_mapping.py`` for the codes the reference server never produces.
Time is the server's ``ManualClock``, so leases, schedules and expiries are exact.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import anyio
import pytest
from opentelemetry import trace

import sepp_anyio
from sepp_anyio import (
    AttemptMismatchError,
    BatchValidationError,
    ClientError,
    CustomEntriesTooMany,
    CustomKeyTooLong,
    CustomMapTooLarge,
    DeadLetterCause,
    EmptyBatchError,
    EncodingNotAllowed,
    EnqueueAck,
    EnqueueRequest,
    IdempotencyKeyTooLong,
    InvalidRequest,
    InvalidRequestError,
    Job,
    JobCtx,
    JobNotFoundError,
    JobRejectedError,
    JobRejection,
    JobTypeNameTooLong,
    JobTypeNotAllowed,
    JobValidationError,
    LeaseError,
    Payload,
    PayloadTooLarge,
    QueueClosing,
    QueueFull,
    QueueNameTooLong,
    ReserveError,
    RetryDirective,
    ScheduledTooFar,
    StatusCode,
    TraceContext,
    UnauthenticatedError,
    UnknownQueue,
    UnknownQueuesError,
)
from sepp_anyio.server import ManualClock, MemoryStore
from sepp_anyio.server._network._auth import MISSING_KEY, WRONG_KEY
from sepp_anyio.server._store._records import StoreContents, Write
from sepp_anyio.testing import open_in_memory_client

from . import cancel_once_blocked, open_client

pytestmark = pytest.mark.anyio

T0_MS = 1_700_000_000_000
T0 = datetime(1970, 1, 1, tzinfo=UTC) + timedelta(milliseconds=T0_MS)
TP = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
DATA = Payload.from_json({"user": 42})
RETAIN = {"dead_letter_retention_ms": 3_600_000}


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def req(queue: str = "q", job_type: str = "t", **fields: Any) -> EnqueueRequest:
    return EnqueueRequest(queue, job_type, **fields)


async def one_job(client: sepp_anyio.Client, queue: str = "q", **options: Any) -> Job:
    options.setdefault("lease", 30.0)
    options.setdefault("wait", 0)
    [job] = await client.reserve([queue], **options)
    return job


# ------------------------------------------------------------------------------ enqueue


async def test_enqueue_round_trips_every_field_to_the_reserved_job() -> None:
    clock = ManualClock(T0_MS)
    custom = {"tenant": "acme", "n": -(2**63), "ratio": 0.25, "vip": True, "off": False}
    request = req(
        payload=DATA,
        priority=7,
        max_attempts=4,
        custom=custom,
        trace_context=TraceContext(TP, "vendor=x"),
        scheduled_at=at(-1),
    )
    async with open_in_memory_client(clock=clock) as (client, _):
        ack = await client.enqueue(request)
        assert isinstance(ack, EnqueueAck)
        assert not ack.deduplicated
        job = await one_job(client, lease=30.0, worker_id="w-1")
    assert job.payload == DATA
    ctx = job.ctx
    assert (ctx.id, ctx.queue, ctx.job_type) == (ack.job_id, "q", "t")
    assert (ctx.priority, ctx.attempt, ctx.max_attempts) == (7, 1, 4)
    assert ctx.custom == custom
    assert ctx.custom["vip"] is True and ctx.custom["n"] == -(2**63)
    assert ctx.trace_context == TraceContext(TP, "vendor=x")
    assert (ctx.enqueued_at, ctx.scheduled_at, ctx.lease_expires_at) == (T0, at(-1), at(30))
    assert ctx.worker_id == "w-1"


async def test_enqueue_without_optionals_gets_the_queue_defaults() -> None:
    async with open_in_memory_client(
        queues=[{"name": "q", "default_priority": 3, "default_max_attempts": 5}]
    ) as (client, _):
        await client.enqueue(req())
        job = await one_job(client)
    assert job.payload is None
    assert (job.ctx.priority, job.ctx.max_attempts, job.ctx.custom) == (3, 5, {})
    assert job.ctx.scheduled_at is None
    # With an OpenTelemetry SDK installed (tests/otel installs one for the
    # session) the client's own span is stamped into the job; without one, nothing.
    tracing = not isinstance(
        trace.get_tracer_provider(), trace.ProxyTracerProvider | trace.NoOpTracerProvider
    )
    assert (job.ctx.trace_context is not None) == tracing


async def test_enqueue_with_a_repeated_idempotency_key_is_deduplicated() -> None:
    async with open_in_memory_client() as (client, engine):
        first = await client.enqueue(req(idempotency_key="signup-42"))
        again = await client.enqueue(req(idempotency_key="signup-42", payload=DATA))
        other_queue = await client.enqueue(req("other", idempotency_key="signup-42"))
        assert again == EnqueueAck(first.job_id, deduplicated=True)
        assert other_queue.job_id != first.job_id and not other_queue.deduplicated
        assert engine.stats()["q"].ready == 1


async def test_a_scheduled_job_is_not_delivered_before_its_time() -> None:
    clock = ManualClock(T0_MS)
    async with open_in_memory_client(clock=clock) as (client, _):
        await client.enqueue(req(scheduled_at=at(60)))
        assert await client.reserve(["q"], lease=30, wait=0) == []
        await clock.advance(60)
        job = await one_job(client)
    assert job.ctx.scheduled_at == at(60)


async def test_a_delayed_job_is_scheduled_from_the_send_time() -> None:
    async with open_in_memory_client() as (client, engine):
        before = datetime.now(UTC)
        ack = await client.enqueue(req(delay=3600))
        stored = engine.snapshot_job(ack.job_id)
        assert stored is not None
        assert await client.reserve(["q"], lease=30, wait=0) == []
    due = datetime(1970, 1, 1, tzinfo=UTC) + timedelta(milliseconds=stored.scheduled_at_ms or 0)
    # The delay runs on the in-process server's clock (wall time anchored once,
    # then advanced by the event loop's monotonic clock): a few ms from
    # datetime.now() at most.
    slack = timedelta(milliseconds=50)
    assert before + timedelta(seconds=3600) - slack <= due
    assert due <= datetime.now(UTC) + timedelta(seconds=3600) + slack


async def test_a_delay_is_counted_on_the_servers_clock_in_process() -> None:
    # The in-process harness hands the client the server's clock (as it does for leases),
    # so a delay means the same thing under a ManualClock as against a real server.
    clock = ManualClock(T0_MS)
    async with open_in_memory_client(clock=clock) as (client, engine):
        ack = await client.enqueue(req(delay=60.0005))
        stored = engine.snapshot_job(ack.job_id)
        assert stored is not None and stored.scheduled_at_ms == T0_MS + 60_000
        assert await client.reserve(["q"], lease=30, wait=0) == []
        await clock.advance(60)
        job = await one_job(client)
    assert job.ctx.scheduled_at == at(60)


REJECTED: list[Any] = [
    pytest.param(
        {"server": {"strict_queues": True}, "queues": [{"name": "q"}]},
        req("other"),
        UnknownQueue("other"),
        id="unknown_queue",
    ),
    pytest.param(
        {"limits": {"max_payload_bytes": 4}},
        req(payload=Payload(b"12345", "application/octet-stream")),
        PayloadTooLarge(4, 5),
        id="payload_too_large",
    ),
    pytest.param(
        {"limits": {"allowed_encodings": ["application/json", "json"]}},
        req(payload=Payload(b"a,b", "text/csv")),
        EncodingNotAllowed("text/csv", ("application/json", "json")),
        id="encoding_not_allowed",
    ),
    pytest.param(
        {"queues": [{"name": "q", "allowed_job_types": ["send"]}]},
        req(job_type="rm_rf"),
        JobTypeNotAllowed("rm_rf", ("send",)),
        id="job_type_not_allowed",
    ),
    pytest.param(
        {"limits": {"max_custom_entries": 1}},
        req(custom={"a": 1, "b": 2}),
        CustomEntriesTooMany(1, 2),
        id="custom_entries_too_many",
    ),
    pytest.param(
        {"limits": {"max_custom_total_bytes": 8}},
        req(custom={"k": "abcdefgh"}),
        CustomMapTooLarge(8, 9),
        id="custom_map_too_large",
    ),
    pytest.param(
        {"limits": {"max_custom_key_bytes": 2}},
        req(custom={"abc": True}),
        CustomKeyTooLong("abc", 2, 3),
        id="custom_key_too_long",
    ),
    pytest.param(
        {"limits": {"max_queue_name_bytes": 3}},
        req("long"),
        QueueNameTooLong(3, 4),
        id="queue_name_too_long",
    ),
    pytest.param(
        {"limits": {"max_job_type_bytes": 3}},
        req(job_type="long"),
        JobTypeNameTooLong(3, 4),
        id="job_type_name_too_long",
    ),
    pytest.param(
        {"limits": {"max_idempotency_key_bytes": 3}},
        req(idempotency_key="long"),
        IdempotencyKeyTooLong(3, 4),
        id="idempotency_key_too_long",
    ),
    pytest.param(
        {"limits": {"max_schedule_horizon_ms": 1500}},
        req(scheduled_at=at(3600)),
        ScheduledTooFar(1.5, at(3600)),
        id="scheduled_too_far",
    ),
]


@pytest.mark.parametrize(("sections", "request_", "rejection"), REJECTED)
async def test_enqueue_rejection_raises_job_rejected_error_with_the_typed_reason(
    sections: dict[str, Any], request_: EnqueueRequest, rejection: JobRejection
) -> None:
    async with open_in_memory_client(clock=ManualClock(T0_MS), **sections) as (client, engine):
        with pytest.raises(JobRejectedError) as caught:
            await client.enqueue(request_)
        # The batch form returns the same rejection as a value, not an exception.
        assert await client.enqueue_batch([request_]) == [rejection]
        assert all(stats.live_depth == 0 for stats in engine.stats().values())
    assert caught.value.rejection == rejection
    assert type(caught.value.rejection) is type(rejection)
    assert not rejection.transient
    assert not isinstance(caught.value, ClientError)
    assert caught.value.code is None
    assert str(rejection) in str(caught.value)


async def test_enqueue_to_a_full_queue_is_rejected_as_transient_queue_full() -> None:
    async with open_in_memory_client(limits={"max_queue_depth": 1}) as (client, _):
        await client.enqueue(req())
        with pytest.raises(JobRejectedError) as caught:
            await client.enqueue(req())
        await client.ack((await one_job(client)).ctx)
        await client.enqueue(req())  # room again
    assert caught.value.rejection == QueueFull("q", 1)
    assert caught.value.rejection.transient


async def test_enqueue_to_a_closing_queue_is_rejected_as_transient_queue_closing() -> None:
    async with open_in_memory_client() as (client, engine):
        engine.close_queue("q")
        with pytest.raises(JobRejectedError) as caught:
            await client.enqueue(req())
        await client.enqueue(req("other"))
    assert caught.value.rejection == QueueClosing("q")
    assert caught.value.rejection.transient


def test_the_client_refuses_c1_control_characters_in_queue_names_like_the_server() -> None:
    # The server's rule is Unicode's Cc category (C0, DEL *and* C1); the local check
    # mirrors it so the mistake points at the argument instead of coming back as
    # InvalidRequest from the server.
    for bad in ("q\x85", "q\x9f", "q\x80"):
        with pytest.raises(ValueError, match="control characters"):
            req(bad)
    req("q\xa0")  # NBSP is not a control character


async def test_a_structurally_invalid_job_is_rejected_as_invalid_request() -> None:
    # The client validates everything the server would call InvalidRequest, so build
    # the request as a client without those checks (sepp-py, say) would send it.
    bad = req()
    object.__setattr__(bad, "queue", "q\x85")
    async with open_in_memory_client() as (client, _):
        with pytest.raises(JobRejectedError) as caught:
            await client.enqueue(bad)
    assert caught.value.rejection == InvalidRequest("queue must not contain control characters")


# ------------------------------------------------------------------------------ enqueue_batch


async def test_enqueue_batch_returns_one_result_per_job_in_request_order() -> None:
    async with open_in_memory_client(limits={"max_payload_bytes": 4}) as (client, engine):
        results = await client.enqueue_batch(
            [
                req(job_type="a", idempotency_key="k1"),
                req(payload=Payload(b"too big", "application/octet-stream")),
                req(job_type="b"),
                req(job_type="c", idempotency_key="k1"),  # dedups against job 0
            ]
        )
        assert engine.stats()["q"].ready == 2
    first, rejected, third, dedup = results
    assert isinstance(first, EnqueueAck) and not first.deduplicated
    assert rejected == PayloadTooLarge(4, 7)
    assert isinstance(third, EnqueueAck) and third.job_id != first.job_id
    assert dedup == EnqueueAck(first.job_id, deduplicated=True)


@pytest.mark.parametrize("method", ["enqueue_batch", "enqueue_atomic"])
async def test_an_empty_batch_raises_empty_batch_error_without_an_rpc(method: str) -> None:
    async with open_client() as mem:
        with pytest.raises(EmptyBatchError) as caught:
            await getattr(mem.client, method)([])
        with pytest.raises(EmptyBatchError):
            await getattr(mem.client, method)(iter(()))
        assert mem.faults.total_calls == 0
        assert mem.channel.calls == 0
    assert isinstance(caught.value, ClientError)


@pytest.mark.parametrize("method", ["enqueue_batch", "enqueue_atomic"])
async def test_a_batch_over_the_server_limit_is_an_invalid_request(method: str) -> None:
    async with open_in_memory_client(limits={"max_enqueue_batch": 2}) as (client, _):
        with pytest.raises(InvalidRequestError) as caught:
            await getattr(client, method)([req(), req(), req()])
    assert caught.value.code is StatusCode.INVALID_ARGUMENT
    assert caught.value.status_message == "batch exceeds max_enqueue_batch (2)"


async def test_a_batch_element_of_the_wrong_type_is_refused_before_the_rpc() -> None:
    async with open_client() as mem:
        with pytest.raises(TypeError, match=r"jobs\[1\] must be an EnqueueRequest"):
            await mem.client.enqueue_batch([req(), {"queue": "q"}])  # type: ignore[list-item]
        assert mem.faults.total_calls == 0


# ------------------------------------------------------------------------------ enqueue_atomic


async def test_enqueue_atomic_enqueues_every_job() -> None:
    async with open_in_memory_client() as (client, _):
        acks = await client.enqueue_atomic([req(job_type=f"t{i}") for i in range(3)])
        jobs = await client.reserve(["q"], lease=30, wait=0, max_jobs=10)
    # Same priority and millisecond: the server breaks the tie by job id, not by position.
    assert sorted(ack.job_id for ack in acks) == sorted(job.ctx.id for job in jobs)
    assert {job.ctx.job_type for job in jobs} == {"t0", "t1", "t2"}


async def test_enqueue_atomic_reports_every_refused_index_and_enqueues_nothing() -> None:
    sections: dict[str, Any] = {
        "limits": {"max_payload_bytes": 4},
        "queues": [{"name": "q", "allowed_job_types": ["ok"]}],
    }
    async with open_in_memory_client(**sections) as (client, engine):
        with pytest.raises(BatchValidationError) as caught:
            await client.enqueue_atomic(
                [
                    req(job_type="ok"),
                    req(job_type="ok", payload=Payload(b"12345", "application/octet-stream")),
                    req(job_type="ok"),
                    req(job_type="nope"),
                ]
            )
        assert engine.stats()["q"].live_depth == 0
    assert caught.value.errors == [
        JobValidationError(1, PayloadTooLarge(4, 5)),
        JobValidationError(3, JobTypeNotAllowed("nope", ("ok",))),
    ]
    assert not isinstance(caught.value, ClientError)


async def test_enqueue_atomic_over_the_queue_depth_refuses_every_job_of_that_queue() -> None:
    async with open_in_memory_client(queues=[{"name": "q", "max_queue_depth": 2}]) as (
        client,
        engine,
    ):
        with pytest.raises(BatchValidationError) as caught:
            await client.enqueue_atomic([req(), req("other"), req(), req()])
        assert all(stats.live_depth == 0 for stats in engine.stats().values())
    assert caught.value.errors == [JobValidationError(i, QueueFull("q", 2)) for i in (0, 2, 3)]


# ------------------------------------------------------------------------------ reserve


async def test_reserve_returns_an_empty_list_when_no_job_is_ready() -> None:
    async with open_in_memory_client() as (client, _):
        assert await client.reserve(["q"], lease=30, wait=0) == []


async def test_reserve_long_polls_until_the_wait_ends_empty() -> None:
    clock = ManualClock(T0_MS)
    result: list[list[Job]] = []
    async with open_in_memory_client(clock=clock) as (client, _), anyio.create_task_group() as tg:

        async def poll() -> None:
            result.append(await client.reserve(["q"], lease=30, wait=5))

        tg.start_soon(poll)
        await clock.advance(4.999)
        assert result == []
        await clock.advance(0.001)
    assert result == [[]]


async def test_reserve_long_poll_is_woken_by_an_enqueue() -> None:
    clock = ManualClock(T0_MS)
    result: list[list[Job]] = []
    async with open_in_memory_client(clock=clock) as (client, _), anyio.create_task_group() as tg:

        async def poll() -> None:
            result.append(await client.reserve(["a", "q"], lease=30, wait=60))

        tg.start_soon(poll)
        await anyio.wait_all_tasks_blocked()
        assert result == []
        ack = await client.enqueue(req())
    [[job]] = result
    assert job.ctx.id == ack.job_id


async def test_reserve_honours_max_jobs_queue_order_and_priority() -> None:
    async with open_in_memory_client() as (client, _):
        await client.enqueue_batch(
            [req("b", "b-low"), req("a", "a-low"), req("a", "a-high", priority=9)]
        )
        first = await client.reserve(["a", "b"], lease=30, wait=0, max_jobs=2)
        rest = await client.reserve(["a", "b"], lease=30, wait=0, max_jobs=5)
        assert await client.reserve(["a", "b"], lease=30, wait=0, max_jobs=5) == []
    assert [job.ctx.job_type for job in first] == ["a-high", "a-low"]
    assert [job.ctx.job_type for job in rest] == ["b-low"]


async def test_reserve_reports_the_granted_lease_not_the_requested_one() -> None:
    async with open_in_memory_client(
        clock=ManualClock(T0_MS), limits={"max_lease_duration_ms": 10_000}
    ) as (client, _):
        await client.enqueue(req())
        job = await one_job(client, lease=600)
    assert job.ctx.lease_expires_at == at(10)
    assert job.ctx._lease is not None
    assert job.ctx._lease.known_expiry == at(10)


async def test_reserve_of_an_undeclared_queue_in_strict_mode_raises_unknown_queues() -> None:
    async with open_in_memory_client(server={"strict_queues": True}, queues=[{"name": "q"}]) as (
        client,
        _,
    ):
        assert await client.reserve(["q"], lease=30, wait=0) == []
        with pytest.raises(UnknownQueuesError) as caught:
            await client.reserve(["q", "nope", "nada"], lease=30, wait=0)
    error = caught.value
    assert isinstance(error, ReserveError) and not isinstance(error, ClientError)
    assert error.code is StatusCode.FAILED_PRECONDITION
    assert error.status_message == 'queue(s) not declared (strict mode): ["nope", "nada"]'


@pytest.mark.parametrize(
    ("sections", "queues", "message"),
    [
        ({"limits": {"max_reserve_queues": 1}}, ["a", "b"], "reserve exceeds max_reserve_queues"),
        ({"limits": {"max_queue_name_bytes": 3}}, ["long"], "exceeds max_queue_name_bytes (3)"),
        # A name against the structural rule (control characters...) no longer reaches the
        # server: the client refuses it first (tests/test_checks.py).
    ],
)
async def test_reserve_refused_by_the_server_limits_is_an_invalid_request(
    sections: dict[str, Any], queues: list[str], message: str
) -> None:
    async with open_in_memory_client(**sections) as (client, _):
        with pytest.raises(InvalidRequestError) as caught:
            await client.reserve(queues, lease=30, wait=0)
    assert caught.value.code is StatusCode.INVALID_ARGUMENT
    assert message in (caught.value.status_message or "")


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"queues": []}, ValueError),
        ({"queues": ["q", ""]}, ValueError),
        ({"queues": "q"}, TypeError),
        ({"lease": 0}, ValueError),
        ({"lease": float("inf")}, ValueError),
        ({"wait": -1}, ValueError),
        ({"max_jobs": 0}, ValueError),
        ({"max_jobs": True}, TypeError),
        ({"worker_id": ""}, ValueError),
    ],
)
async def test_reserve_arguments_are_checked_before_any_rpc(
    kwargs: dict[str, Any], error: type[Exception]
) -> None:
    call: dict[str, Any] = {"queues": ["q"], "lease": 30.0, "wait": 0, **kwargs}
    async with open_client() as mem:
        with pytest.raises(error):
            await mem.client.reserve(call.pop("queues"), **call)
        assert mem.faults.total_calls == 0


# ------------------------------------------------------------------------------ ack


async def test_ack_settles_the_job_and_a_second_ack_is_job_not_found() -> None:
    async with open_in_memory_client() as (client, engine):
        await client.enqueue(req())
        job = await one_job(client, worker_id="w-1")
        await client.ack(job.ctx)
        assert engine.snapshot_job(job.ctx.id) is None
        with pytest.raises(JobNotFoundError) as caught:
            await client.ack(job.ctx)
    assert isinstance(caught.value, LeaseError) and not isinstance(caught.value, ClientError)
    assert caught.value.code is StatusCode.NOT_FOUND
    assert caught.value.status_message == "job not found"


async def settle(client: sepp_anyio.Client, op: str, ctx: JobCtx) -> None:
    if op == "ack":
        await client.ack(ctx)
    elif op == "nack":
        await client.nack(ctx)
    elif op == "extend":
        await client.extend(ctx, 30)
    else:
        await ctx.extend(30)


LEASE_OPS = ["ack", "nack", "extend", "ctx.extend"]


@pytest.mark.parametrize("op", LEASE_OPS)
async def test_after_the_lease_expired_a_lease_call_is_job_not_found(op: str) -> None:
    clock = ManualClock(T0_MS)
    async with open_in_memory_client(clock=clock) as (client, _):
        await client.enqueue(req(max_attempts=1))
        job = await one_job(client, lease=10)
        await clock.advance(10)  # the last attempt's lease ran out: dead-lettered
        with pytest.raises(JobNotFoundError):
            await settle(client, op, job.ctx)
    assert job.ctx.lease_expires_at == at(10)


@pytest.mark.parametrize("op", LEASE_OPS)
async def test_a_lease_call_with_a_stale_attempt_is_attempt_mismatch(op: str) -> None:
    clock = ManualClock(T0_MS)
    async with open_in_memory_client(clock=clock) as (client, _):
        await client.enqueue(req())
        stale = await one_job(client, lease=10)
        await clock.advance(10)
        fresh = await one_job(client, lease=10)
        assert (fresh.ctx.id, fresh.ctx.attempt) == (stale.ctx.id, 2)
        with pytest.raises(AttemptMismatchError) as caught:
            await settle(client, op, stale.ctx)
        await settle(client, op, fresh.ctx)
    assert isinstance(caught.value, LeaseError)
    assert caught.value.code is StatusCode.FAILED_PRECONDITION
    assert caught.value.status_message == "attempt mismatch"


# ------------------------------------------------------------------------------ nack


async def test_nack_with_the_default_directive_redelivers_the_job_at_once() -> None:
    async with open_in_memory_client() as (client, _):
        await client.enqueue(req(max_attempts=3))
        job = await one_job(client)
        assert await client.nack(job.ctx) is False
        again = await one_job(client)
    assert (again.ctx.id, again.ctx.attempt) == (job.ctx.id, 2)


async def test_nack_after_a_delay_holds_the_job_back_that_long() -> None:
    clock = ManualClock(T0_MS)
    async with open_in_memory_client(clock=clock) as (client, _):
        await client.enqueue(req())
        job = await one_job(client)
        assert await client.nack(job.ctx, RetryDirective.after(5.0), reason="busy") is False
        await clock.advance(4.999)
        assert await client.reserve(["q"], lease=30, wait=0) == []
        await clock.advance(0.001)
        again = await one_job(client)
    assert again.ctx.attempt == 2


@pytest.mark.parametrize(("reason", "stored"), [("", None), ("poison pill", "poison pill")])
async def test_nack_dead_letter_returns_true_and_an_empty_reason_is_not_sent(
    reason: str, stored: str | None
) -> None:
    async with open_in_memory_client(storage=RETAIN) as (client, _):
        await client.enqueue(req(max_attempts=5))
        job = await one_job(client)
        assert await client.nack(job.ctx, RetryDirective.dead_letter(), reason=reason) is True
        [record] = await client.drain_dead_letters()
    assert record.cause is DeadLetterCause.REJECTED
    assert record.last_reason == stored
    assert record.final_attempt == 1


async def test_nack_on_the_last_attempt_dead_letters_the_job() -> None:
    async with open_in_memory_client(storage=RETAIN) as (client, _):
        await client.enqueue(req(max_attempts=1))
        job = await one_job(client)
        assert await client.nack(job.ctx, reason="boom") is True
        [record] = await client.drain_dead_letters()
        assert await client.reserve(["q"], lease=30, wait=0) == []
    assert (record.cause, record.last_reason) == (DeadLetterCause.ATTEMPTS_EXHAUSTED, "boom")


async def test_nack_dead_lettered_is_true_even_without_retention() -> None:
    async with open_in_memory_client() as (client, _):
        await client.enqueue(req())
        job = await one_job(client)
        assert await client.nack(job.ctx, RetryDirective.dead_letter()) is True
        assert await client.drain_dead_letters(max=10) == []


async def test_nack_reason_must_be_a_string() -> None:
    async with open_client() as mem:
        ctx = JobCtx(
            id="x", queue="q", job_type="t", priority=0, attempt=1, max_attempts=1,
            enqueued_at=T0, scheduled_at=None, lease_expires_at=T0,
        )  # fmt: skip
        with pytest.raises(TypeError, match="reason must be a str"):
            await mem.client.nack(ctx, reason=None)  # type: ignore[arg-type]
        assert mem.faults.total_calls == 0


# ------------------------------------------------------------------------------ extend


async def test_ctx_extend_updates_the_known_expiry_and_lease_expires_at() -> None:
    clock = ManualClock(T0_MS)
    async with open_in_memory_client(clock=clock) as (client, _):
        await client.enqueue(req())
        job = await one_job(client, lease=30)
        lease = job.ctx._lease
        assert lease is not None and lease.known_expiry == at(30)
        await clock.advance(10)
        assert await job.ctx.extend(60) == at(70)
        assert job.ctx.lease_expires_at == at(70)
        assert lease.known_expiry == at(70)
        await clock.advance(50)  # past the original expiry, within the new one
        await client.ack(job.ctx)


async def test_client_extend_extends_the_lease_but_not_the_known_expiry() -> None:
    clock = ManualClock(T0_MS)
    async with open_in_memory_client(clock=clock) as (client, _):
        await client.enqueue(req())
        job = await one_job(client, lease=30)
        await clock.advance(10)
        assert await client.extend(job.ctx, 90) == at(100)
        # Only ctx.extend (through the lease) updates what the worker's heartbeat reads.
        assert job.ctx.lease_expires_at == at(30)
        assert job.ctx._lease is not None and job.ctx._lease.known_expiry == at(30)
        await clock.advance(80)  # the server did extend: at(90) is still within the lease
        await client.ack(job.ctx)


async def test_extend_is_clamped_to_the_queue_maximum_lease() -> None:
    clock = ManualClock(T0_MS)
    async with open_in_memory_client(
        clock=clock, queues=[{"name": "q", "max_lease_duration_ms": 20_000}]
    ) as (client, _):
        await client.enqueue(req())
        job = await one_job(client, lease=5)
        assert job.ctx.lease_expires_at == at(5)
        assert await job.ctx.extend(3600) == at(20)
        assert job.ctx.lease_expires_at == at(20)


async def test_a_failed_or_cancelled_ctx_extend_leaves_the_known_expiry_alone() -> None:
    clock = ManualClock(T0_MS)
    async with open_client(clock=clock, hang_first={"Extend": 1}) as mem:
        await mem.client.enqueue(req())
        job = await one_job(mem.client, lease=30)
        assert await cancel_once_blocked(lambda: job.ctx.extend(60))
        assert job.ctx.lease_expires_at == at(30)
        await mem.client.ack(job.ctx)
        with pytest.raises(JobNotFoundError):
            await job.ctx.extend(60)
        assert job.ctx.lease_expires_at == at(30)
        assert job.ctx._lease is not None and job.ctx._lease.known_expiry == at(30)


async def test_extend_arguments_are_checked_before_any_rpc() -> None:
    async with open_client() as mem:
        await mem.client.enqueue(req())
        job = await one_job(mem.client)
        calls = mem.faults.total_calls
        for bad in (0, -1, float("nan"), 0.0001):
            with pytest.raises(ValueError, match="seconds"):
                await job.ctx.extend(bad)
        for bad in (0, -1, float("inf")):
            with pytest.raises(ValueError, match="seconds"):
                await mem.client.extend(job.ctx, bad)
        assert mem.faults.total_calls == calls
    orphan = JobCtx(
        id="x", queue="q", job_type="t", priority=0, attempt=1, max_attempts=1,
        enqueued_at=T0, scheduled_at=None, lease_expires_at=T0,
    )  # fmt: skip
    with pytest.raises(RuntimeError, match="no lease attached"):
        await orphan.extend(30)


# ------------------------------------------------------------------------------ drain


async def dead_letter(
    client: sepp_anyio.Client, clock: ManualClock, *requests: EnqueueRequest
) -> list[str]:
    """Dead-letter each job, one second apart (records are ordered by failure time)."""
    ids = []
    for request in requests:
        await client.enqueue(request)
        job = await one_job(client, request.queue)
        assert await client.nack(job.ctx, RetryDirective.dead_letter(), reason=request.job_type)
        ids.append(job.ctx.id)
        await clock.advance(1)
    return ids


async def test_drain_dead_letters_removes_and_returns_records_oldest_first() -> None:
    clock = ManualClock(T0_MS)
    async with open_in_memory_client(clock=clock, storage=RETAIN) as (client, engine):
        a1, b1, a2 = await dead_letter(
            client, clock, req("a", "a1"), req("b", "b1"), req("a", "a2")
        )
        assert [r.job_id for r in await client.drain_dead_letters(queue="a", max=10)] == [a1, a2]
        assert await client.drain_dead_letters(queue="a", max=10) == []
        [record] = await client.drain_dead_letters(max=10)
        assert engine.dead_letters() == []
    assert record.job_id == b1
    assert (record.queue, record.job_type, record.last_reason) == ("b", "b1", "b1")
    assert (record.cause, record.failed_at, record.final_attempt) == (
        DeadLetterCause.REJECTED,
        at(1),
        1,
    )


async def test_drain_dead_letters_max_limits_each_call() -> None:
    clock = ManualClock(T0_MS)
    async with open_in_memory_client(clock=clock, storage=RETAIN) as (client, _):
        ids = await dead_letter(
            client, clock, req(job_type="1"), req(job_type="2"), req(job_type="3")
        )
        assert [r.job_id for r in await client.drain_dead_letters()] == ids[:1]
        assert [r.job_id for r in await client.drain_dead_letters(max=1)] == ids[1:2]
        assert [r.job_id for r in await client.drain_dead_letters(max=5)] == ids[2:]


async def test_drain_with_max_zero_returns_nothing_without_an_rpc() -> None:
    clock = ManualClock(T0_MS)
    async with open_client(clock=clock, storage=RETAIN) as mem:
        await dead_letter(mem.client, clock, req())
        calls = mem.faults.calls["DrainDeadLetters"]
        assert await mem.client.drain_dead_letters(max=0) == []
        assert mem.faults.calls["DrainDeadLetters"] == calls == 0
        assert len(mem.engine.dead_letters()) == 1  # nothing was drained


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [({"max": -1}, ValueError), ({"max": 1.5}, TypeError), ({"queue": ""}, ValueError)],
)
async def test_drain_arguments_are_checked_before_any_rpc(
    kwargs: dict[str, Any], error: type[Exception]
) -> None:
    async with open_client() as mem:
        with pytest.raises(error):
            await mem.client.drain_dead_letters(**kwargs)
        assert mem.faults.total_calls == 0


async def test_a_lease_expired_dead_letter_has_no_reason_and_replays_as_a_fresh_job() -> None:
    clock = ManualClock(T0_MS)
    original = req(
        payload=DATA,
        priority=6,
        max_attempts=1,
        custom={"tenant": "acme"},
        trace_context=TraceContext(TP),
        idempotency_key="once",
        scheduled_at=at(-5),
    )
    async with open_in_memory_client(clock=clock, storage=RETAIN) as (client, _):
        ack = await client.enqueue(original)
        await one_job(client, lease=10)
        await clock.advance(10)
        [record] = await client.drain_dead_letters()
        replay = record.to_enqueue_request()
        again = await client.enqueue(replay)
        job = await one_job(client)
    assert (record.cause, record.last_reason) == (DeadLetterCause.LEASE_EXPIRED, None)
    assert (record.failed_at, record.scheduled_at) == (at(10), at(-5))
    assert replay.idempotency_key is None and replay.scheduled_at is None
    assert not again.deduplicated and again.job_id != ack.job_id
    assert job.payload == DATA
    ctx = job.ctx
    assert (ctx.priority, ctx.attempt, ctx.max_attempts) == (6, 1, 1)
    assert (ctx.custom, ctx.trace_context, ctx.scheduled_at) == (
        {"tenant": "acme"},
        TraceContext(TP),
        None,
    )


# ------------------------------------------------------------------------------ server_info


async def test_server_info_reports_the_server_configuration() -> None:
    async with open_in_memory_client(
        clock=ManualClock(T0_MS),
        server={"strict_queues": True},
        limits={
            "max_payload_bytes": 1234,
            "allowed_encodings": ["application/json"],
            "max_lease_duration_ms": 20_500,
            "max_wait_timeout_ms": 7_000,
            "max_enqueue_batch": 17,
            "max_reserve_batch": 18,
            "max_reserve_queues": 19,
            "max_schedule_horizon_ms": 86_400_000,
        },
        storage=RETAIN,
    ) as (client, _):
        info = await client.server_info()
    assert info.version == sepp_anyio.__version__
    assert info.supported_protocol_versions == ("v1",)
    assert info.server_time == T0
    assert (info.restricts_encodings, info.allowed_encodings) == (True, ("application/json",))
    assert info.max_payload_bytes == 1234
    assert (info.max_lease_duration, info.max_wait_timeout) == (20.5, 7.0)
    assert info.max_schedule_horizon == 86_400.0
    assert (info.max_enqueue_batch, info.max_reserve_batch, info.max_reserve_queues) == (
        17,
        18,
        19,
    )
    assert info.strict_queues is True
    assert info.dead_letter_retention_enabled is True


async def test_server_info_defaults() -> None:
    async with open_in_memory_client() as (client, _):
        info = await client.server_info()
    assert (info.restricts_encodings, info.allowed_encodings) == (False, ())
    assert (info.strict_queues, info.dead_letter_retention_enabled) == (False, False)
    assert abs(info.server_time - datetime.now(UTC)) < timedelta(minutes=1)


# ------------------------------------------------------------------------------ auth


def _unleased_ctx() -> JobCtx:
    return JobCtx(
        id="0b1c4a8e-7d2c-4f3e-9a61-3c5b2d1e0f9a", queue="q", job_type="t", priority=0,
        attempt=1, max_attempts=1, enqueued_at=T0, scheduled_at=None, lease_expires_at=T0,
    )  # fmt: skip


async def _every_rpc(client: sepp_anyio.Client) -> list[tuple[str, BaseException | None]]:
    ctx = _unleased_ctx()
    calls: list[tuple[str, Any]] = [
        ("enqueue", lambda: client.enqueue(req())),
        ("enqueue_batch", lambda: client.enqueue_batch([req()])),
        ("enqueue_atomic", lambda: client.enqueue_atomic([req()])),
        ("reserve", lambda: client.reserve(["q"], lease=30, wait=0)),
        ("ack", lambda: client.ack(ctx)),
        ("nack", lambda: client.nack(ctx)),
        ("extend", lambda: client.extend(ctx, 30)),
        ("drain_dead_letters", lambda: client.drain_dead_letters()),
        ("server_info", lambda: client.server_info()),
    ]
    outcomes: list[tuple[str, BaseException | None]] = []
    for name, call in calls:
        try:
            await call()
        except Exception as exc:  # collected and asserted on by the caller
            outcomes.append((name, exc))
        else:
            outcomes.append((name, None))
    return outcomes


@pytest.mark.parametrize(
    ("api_key", "message"), [(None, MISSING_KEY), ("wrong", WRONG_KEY), ("k2x", WRONG_KEY)]
)
async def test_every_rpc_without_a_valid_key_is_unauthenticated(
    api_key: str | None, message: str
) -> None:
    async with open_client(api_key=api_key, auth={"api_keys": ["k1", "k2"]}) as mem:
        outcomes = await _every_rpc(mem.client)
        assert mem.faults.total_calls == 0  # refused before reaching the engine
    assert len(outcomes) == 9
    for name, error in outcomes:
        assert isinstance(error, UnauthenticatedError), name
        assert not isinstance(error, LeaseError), name
        assert error.code is StatusCode.UNAUTHENTICATED, name
        assert error.status_message == message, name


async def test_every_rpc_with_a_valid_key_is_served() -> None:
    async with open_client(api_key="k2", auth={"api_keys": ["k1", "k2"]}) as mem:
        outcomes = await _every_rpc(mem.client)
        assert mem.faults.total_calls == 9
        assert mem.faults.calls["EnqueueBatch"] == 2  # enqueue is a batch of one
    errors = {name: type(error) for name, error in outcomes if error is not None}
    # The made-up context is not leased: the lease RPCs got past auth to the engine.
    assert errors == {"ack": JobNotFoundError, "nack": JobNotFoundError, "extend": JobNotFoundError}


async def test_an_empty_key_list_refuses_everyone() -> None:
    async with open_client(api_key="k1", auth={"api_keys": []}) as mem:
        with pytest.raises(UnauthenticatedError):
            await mem.client.server_info()


# ------------------------------------------------------------------------------ internal errors


class BrokenStore:
    """A memory store whose commits fail once ``broken`` is set (``failed`` is set then)."""

    def __init__(self) -> None:
        self.inner = MemoryStore()
        self.broken = False
        self.failed = anyio.Event()

    @property
    def transactions(self) -> int:
        return self.inner.transactions

    async def open(self) -> StoreContents:
        return await self.inner.open()

    async def commit(self, writes: Sequence[Write]) -> None:
        if self.broken:
            self.failed.set()
            raise OSError("disk on fire")
        await self.inner.commit(writes)

    async def aclose(self) -> None:
        await self.inner.aclose()


async def test_a_failing_store_is_unavailable_to_new_calls_which_the_client_retries() -> None:
    # The server holds the call whose commit failed and retries it; new calls are refused
    # with UNAVAILABLE before they change anything, so the client's policy retries them.
    store = BrokenStore()
    policy = sepp_anyio.RetryPolicy(max_attempts=3, initial_backoff=0)
    held: list[EnqueueAck] = []
    async with open_client(store=store, retry=policy) as mem:
        await mem.client.enqueue(req(idempotency_key="a"))
        store.broken = True

        async def enqueue_held() -> None:
            held.append(await mem.client.enqueue(req(idempotency_key="b")))

        async with anyio.create_task_group() as tg:
            tg.start_soon(enqueue_held)
            await store.failed.wait()
            with pytest.raises(sepp_anyio.TransportError) as caught:
                await mem.client.enqueue(req(idempotency_key="c"))
            assert mem.faults.calls["EnqueueBatch"] == 1 + 1 + 3
            assert "v1" in (await mem.client.server_info()).supported_protocol_versions
            store.broken = False
        assert [ack.deduplicated for ack in held] == [False]
        assert not (await mem.client.enqueue(req(idempotency_key="c"))).deduplicated
    assert caught.value.code is StatusCode.UNAVAILABLE
    assert caught.value.status_message is not None
    assert caught.value.status_message.startswith("storage unavailable: writes are failing")
