"""EnqueueBatch / EnqueueAtomic: whole-call checks, the 14 rejections and their order,
commit-time rules, resolved values and idempotency keys (protocol §3.2, §3.10)."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from sepp_anyio import StatusCode
from sepp_anyio._proto.sepp import v1 as pb
from sepp_anyio.server import (
    EngineError,
    JobState,
    LimitsConfig,
    ManualClock,
    QueueConfig,
    ServerConfig,
    ServerSection,
    StorageConfig,
)
from sepp_anyio.server._engine._engine import rpc_of

from ._helpers import (
    T0,
    ack,
    atomic,
    enqueue,
    enqueue_results,
    job,
    ms,
    nack,
    rejection,
    reserve,
    running,
    td,
    ts,
)

pytestmark = pytest.mark.anyio

STRICT = ServerConfig(
    server=ServerSection(strict_queues=True),
    queues=(QueueConfig(name="q"), QueueConfig(name="typed", allowed_job_types=("a", "b"))),
)


# ---------------------------------------------------------------- whole-request checks


@pytest.mark.parametrize("method", ["enqueue_batch", "enqueue_atomic"])
async def test_empty_batch_is_invalid_argument(method: str) -> None:
    async with running() as engine:
        with pytest.raises(EngineError) as info:
            await getattr(rpc_of(engine), method)(pb.EnqueueBatchRequest(jobs=[]))
    assert info.value.status is StatusCode.INVALID_ARGUMENT
    assert info.value.message == "batch must contain at least one job"


@pytest.mark.parametrize("method", ["enqueue_batch", "enqueue_atomic"])
async def test_batch_over_max_enqueue_batch(method: str) -> None:
    config = ServerConfig(limits=LimitsConfig(max_enqueue_batch=2))
    async with running(config) as engine:
        with pytest.raises(EngineError) as info:
            await getattr(rpc_of(engine), method)(pb.EnqueueBatchRequest(jobs=[job()] * 3))
        assert info.value.status is StatusCode.INVALID_ARGUMENT
        assert info.value.message == "batch exceeds max_enqueue_batch (2)"
        assert engine.stats() == {}


# ---------------------------------------------------------------- the rejections


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"queue": ""}, "queue must not be empty"),
        ({"queue": ".."}, "queue must not be '.' or '..'"),
        ({"queue": "a/b"}, "queue must not contain '/'"),
        ({"queue": "a\nb"}, "queue must not contain control characters"),
        ({"job_type": ""}, "job_type must not be empty"),
        ({"payload": pb.Payload(data=b"", encoding="json")}, "payload.data must not be empty"),
        ({"payload": pb.Payload(data=b"x", encoding="")}, "payload.encoding must not be empty"),
        ({"idempotency_key": ""}, "idempotency_key must not be empty"),
        ({"priority": 10}, "priority must be <= 9"),
        ({"max_attempts": 0}, "max_attempts must be >= 1"),
        (
            {"trace_context": pb.TraceContext(traceparent="")},
            "trace_context.traceparent must not be empty",
        ),
        ({"custom": {"": pb.PrimitiveValue(int_value=1)}}, "custom key must not be empty"),
        ({"custom": {"k": pb.PrimitiveValue()}}, "custom[k] must set a value"),
    ],
)
async def test_invalid_request_rejection(fields: dict[str, Any], message: str) -> None:
    fields.setdefault("queue", "q")
    async with running() as engine:
        assert await rejection(engine, job(**fields)) == (
            "invalid_request",
            pb.InvalidRequest(message=message),
        )


async def test_unknown_queue_rejection_in_strict_mode() -> None:
    async with running(STRICT) as engine:
        branch, detail = await rejection(engine, job("nope"))
        assert (branch, detail.queue) == ("unknown_queue", "nope")
        await enqueue(engine, job("q"))


async def test_queue_name_too_long_rejection() -> None:
    config = ServerConfig(limits=LimitsConfig(max_queue_name_bytes=4))
    async with running(config) as engine:
        branch, detail = await rejection(engine, job("ééé"))  # 6 UTF-8 bytes
        assert (branch, detail.limit, detail.actual) == ("queue_name_too_long", 4, 6)


async def test_job_type_name_too_long_rejection() -> None:
    config = ServerConfig(limits=LimitsConfig(max_job_type_bytes=3))
    async with running(config) as engine:
        branch, detail = await rejection(engine, job(job_type="abcd"))
        assert (branch, detail.limit, detail.actual) == ("job_type_name_too_long", 3, 4)


async def test_job_type_not_allowed_rejection() -> None:
    async with running(STRICT) as engine:
        branch, detail = await rejection(engine, job("typed", "c"))
        assert (branch, detail.job_type, detail.allowed) == (
            "job_type_not_allowed",
            "c",
            ["a", "b"],
        )
        await enqueue(engine, job("typed", "a"))


async def test_idempotency_key_too_long_rejection() -> None:
    config = ServerConfig(limits=LimitsConfig(max_idempotency_key_bytes=2))
    async with running(config) as engine:
        branch, detail = await rejection(engine, job(idempotency_key="abc"))
        assert (branch, detail.limit, detail.actual) == ("idempotency_key_too_long", 2, 3)


async def test_payload_too_large_rejection_is_per_queue() -> None:
    config = ServerConfig(
        limits=LimitsConfig(max_payload_bytes=4),
        queues=(QueueConfig(name="big", max_payload_bytes=8),),
    )
    async with running(config) as engine:
        branch, detail = await rejection(engine, job(payload=b"12345"))
        assert (branch, detail.limit, detail.actual) == ("payload_too_large", 4, 5)
        await enqueue(engine, job("big", payload=b"12345"), job(payload=b"1234"))


async def test_encoding_not_allowed_rejection() -> None:
    config = ServerConfig(limits=LimitsConfig(allowed_encodings=("json", "msgpack")))
    async with running(config) as engine:
        bad = job(payload=pb.Payload(data=b"x", encoding="JSON"))  # exact, case-sensitive
        branch, detail = await rejection(engine, bad)
        assert (branch, detail.encoding, detail.allowed) == (
            "encoding_not_allowed",
            "JSON",
            ["json", "msgpack"],
        )
        await enqueue(engine, job(payload=pb.Payload(data=b"x", encoding="json")))


async def test_empty_encoding_list_rejects_payloads_only() -> None:
    config = ServerConfig(limits=LimitsConfig(allowed_encodings=()))
    async with running(config) as engine:
        assert (await rejection(engine, job(payload=b"x")))[0] == "encoding_not_allowed"
        await enqueue(engine, job())


async def test_custom_entries_too_many_rejection() -> None:
    config = ServerConfig(limits=LimitsConfig(max_custom_entries=2))
    custom = {k: pb.PrimitiveValue(bool_value=True) for k in "abc"}
    async with running(config) as engine:
        branch, detail = await rejection(engine, job(custom=custom))
        assert (branch, detail.limit, detail.actual) == ("custom_entries_too_many", 2, 3)


async def test_custom_key_too_long_rejection_reports_first_key_in_sorted_order() -> None:
    config = ServerConfig(limits=LimitsConfig(max_custom_key_bytes=2))
    custom = {k: pb.PrimitiveValue(int_value=1) for k in ("zzzz", "ok", "bbb")}
    async with running(config) as engine:
        branch, detail = await rejection(engine, job(custom=custom))
        assert (branch, detail.key, detail.limit, detail.actual) == (
            "custom_key_too_long",
            "bbb",
            2,
            3,
        )


async def test_custom_map_byte_accounting() -> None:
    # key bytes + value: string = UTF-8 length, double and int = 8, bool = 1.
    custom = {
        "s": pb.PrimitiveValue(string_value="é"),  # 1 + 2
        "d": pb.PrimitiveValue(double_value=0.5),  # 1 + 8
        "i": pb.PrimitiveValue(int_value=-1),  # 1 + 8
        "b": pb.PrimitiveValue(bool_value=False),  # 1 + 1
    }
    exact = ServerConfig(limits=LimitsConfig(max_custom_total_bytes=23))
    async with running(exact) as engine:
        await enqueue(engine, job(custom=custom))
    tight = ServerConfig(limits=LimitsConfig(max_custom_total_bytes=22))
    async with running(tight) as engine:
        branch, detail = await rejection(engine, job(custom=custom))
        assert (branch, detail.limit, detail.actual) == ("custom_map_too_large", 22, 23)


async def test_scheduled_too_far_rejection() -> None:
    config = ServerConfig(limits=LimitsConfig(max_schedule_horizon_ms=60_000))
    async with running(config) as engine:
        at_horizon = ts(T0 + 60_000)
        await enqueue(engine, job(scheduled_at=at_horizon))
        too_far = ts(T0 + 60_001)
        branch, detail = await rejection(engine, job(scheduled_at=too_far))
        assert branch == "scheduled_too_far"
        assert detail.horizon == td(60)
        assert detail.actual == too_far


async def test_queue_full_rejection_counts_earlier_jobs_of_the_batch() -> None:
    config = ServerConfig(queues=(QueueConfig(name="q", max_queue_depth=2),))
    async with running(config) as engine:
        results = await enqueue_results(engine, job(), job(), job(), job("other"))
        assert [branch for branch, _ in results] == ["success", "success", "queue_full", "success"]
        assert (results[2][1].queue, results[2][1].limit) == ("q", 2)


async def test_queue_depth_zero_rejects_everything() -> None:
    config = ServerConfig(limits=LimitsConfig(max_queue_depth=0))
    async with running(config) as engine:
        assert (await rejection(engine, job()))[0] == "queue_full"


async def test_queue_full_counts_inflight_and_scheduled_but_not_dead_letters() -> None:
    config = ServerConfig(
        limits=LimitsConfig(max_queue_depth=2),
        storage=StorageConfig(dead_letter_retention_ms=60_000),
    )
    async with running(config) as engine:
        await enqueue(engine, job(), job(scheduled_at=ts(T0 + 5000)))
        [leased] = await reserve(engine)
        assert (await rejection(engine, job()))[0] == "queue_full"
        assert await nack(engine, leased, dead_letter=True)
        await enqueue(engine, job())  # the dead letter does not count


async def test_dedup_hits_skip_the_capacity_check() -> None:
    config = ServerConfig(limits=LimitsConfig(max_queue_depth=1))
    async with running(config) as engine:
        [first] = await enqueue(engine, job(idempotency_key="k"))
        results = await enqueue_results(engine, job(idempotency_key="k"))
        assert results[0][1] == pb.EnqueueResponse(job_id=first, deduplicated=True)


async def test_queue_closing_rejection_even_for_a_dedup_hit() -> None:
    async with running() as engine:
        await enqueue(engine, job(idempotency_key="k"))
        engine.close_queue("q")
        assert await rejection(engine, job(idempotency_key="k")) == (
            "queue_closing",
            pb.QueueClosing(queue="q"),
        )
        assert (await rejection(engine, job()))[0] == "queue_closing"
        engine.reopen_queue("q")
        await enqueue(engine, job())


# ---------------------------------------------------------------- classification order


def _over(*, strict: bool = True, **limits: Any) -> ServerConfig:
    return ServerConfig(
        server=ServerSection(strict_queues=strict),
        limits=LimitsConfig(**limits),
        queues=(QueueConfig(name="q", allowed_job_types=("ok",)),),
    )


ORDER_CASES = [
    # (config, job fields, expected winner): each job fails the expected check and the next.
    (_over(), {"queue": "", "job_type": ""}, "invalid_request"),
    (_over(max_queue_name_bytes=1), {"queue": "zz", "job_type": "ok"}, "unknown_queue"),
    (
        _over(strict=False, max_queue_name_bytes=1, max_job_type_bytes=1),
        {"queue": "zz", "job_type": "xx"},
        "queue_name_too_long",
    ),
    (_over(max_job_type_bytes=1), {"job_type": "xx"}, "job_type_name_too_long"),
    (_over(max_idempotency_key_bytes=1), {"idempotency_key": "kk"}, "job_type_not_allowed"),
    (
        _over(max_idempotency_key_bytes=1, max_payload_bytes=1),
        {"job_type": "ok", "idempotency_key": "kk", "payload": b"xx"},
        "idempotency_key_too_long",
    ),
    (
        _over(max_payload_bytes=1, allowed_encodings=()),
        {"job_type": "ok", "payload": b"xx"},
        "payload_too_large",
    ),
    (
        _over(allowed_encodings=(), max_custom_entries=1),
        {"job_type": "ok", "payload": b"x", "custom": {"a": 1, "b": 2}},
        "encoding_not_allowed",
    ),
    (
        _over(max_custom_entries=1, max_custom_key_bytes=1),
        {"job_type": "ok", "custom": {"aa": 1, "b": 2}},
        "custom_entries_too_many",
    ),
    (
        _over(max_custom_key_bytes=1, max_custom_total_bytes=1),
        {"job_type": "ok", "custom": {"aa": 1}},
        "custom_key_too_long",
    ),
    (
        _over(max_custom_total_bytes=1, max_schedule_horizon_ms=1),
        {"job_type": "ok", "custom": {"a": 1}, "scheduled_at": ts(T0 + 10)},
        "custom_map_too_large",
    ),
]


@pytest.mark.parametrize(
    ("config", "fields", "winner"), ORDER_CASES, ids=[case[2] for case in ORDER_CASES]
)
async def test_classification_order_first_failing_check_wins(
    config: ServerConfig, fields: dict[str, Any], winner: str
) -> None:
    fields = {"queue": "q", "job_type": "other", **fields}
    if "custom" in fields:
        fields["custom"] = {k: pb.PrimitiveValue(int_value=v) for k, v in fields["custom"].items()}
    async with running(config) as engine:
        assert (await rejection(engine, job(**fields)))[0] == winner


# ---------------------------------------------------------------- resolved values


async def test_accepted_job_resolved_values_and_echo() -> None:
    config = ServerConfig(queues=(QueueConfig(name="q", default_priority=4),))
    async with running(config) as engine:
        [job_id] = await enqueue(
            engine,
            job(
                payload=b'{"a": 1}',
                trace_context=pb.TraceContext(traceparent="00-ab-cd-01", tracestate="k=v"),
                custom={"n": pb.PrimitiveValue(double_value=1.0)},
            ),
        )
        assert uuid.UUID(job_id).version == 4
        assert job_id == job_id.lower()
        [leased] = await reserve(engine, lease=10)
        assert leased.id == job_id
        assert leased.queue == "q"
        assert leased.job_type == "t"
        assert leased.priority == 4
        assert leased.attempt == 1
        assert leased.max_attempts == 3
        assert leased.enqueued_at == ts(T0)
        assert leased.lease_expires_at == ts(T0 + 10_000)
        assert leased.payload == pb.Payload(data=b'{"a": 1}', encoding="application/json")
        assert leased.trace_context == pb.TraceContext(traceparent="00-ab-cd-01", tracestate="k=v")
        assert leased.custom["n"].double_value == 1.0
        assert leased.scheduled_at is None


async def test_max_attempts_default_and_ceiling_clamp() -> None:
    config = ServerConfig(
        queues=(QueueConfig(name="q", default_max_attempts=5, max_attempts_ceiling=7),)
    )
    async with running(config) as engine:
        await enqueue(engine, job(), job(max_attempts=2), job(max_attempts=1000))
        jobs = await reserve(engine, max_jobs=3)
        assert sorted(j.max_attempts for j in jobs) == [2, 5, 7]


async def test_past_scheduled_at_is_ready_at_once_and_echoed() -> None:
    async with running() as engine:
        past = ts(T0 - 5000)
        await enqueue(engine, job(scheduled_at=past))
        [leased] = await reserve(engine)
        assert leased.scheduled_at == past


async def test_future_scheduled_at_waits_then_becomes_ready() -> None:
    clock = ManualClock(T0)
    async with running(clock=clock) as engine:
        at = ts(T0 + 5000)
        [job_id] = await enqueue(engine, job(scheduled_at=at))
        snapshot = engine.snapshot_job(job_id)
        assert snapshot is not None
        assert snapshot.state is JobState.SCHEDULED
        assert await reserve(engine) == []
        await clock.advance(4.999)
        assert await reserve(engine) == []
        await clock.advance(0.001)
        [leased] = await reserve(engine)
        assert (leased.scheduled_at, leased.enqueued_at) == (at, ts(T0))


async def test_times_truncated_to_milliseconds() -> None:
    async with running() as engine:
        at = ts(T0 + 1000).replace(microsecond=999)
        await enqueue(engine, job(scheduled_at=at))
        snapshot = next(iter(engine._state._jobs.values()))
        assert snapshot.scheduled_at_ms == ms(at) == T0 + 1000


async def test_mixed_batch_results_in_request_order() -> None:
    async with running() as engine:
        results = await enqueue_results(engine, job(), job(priority=11), job("a/b"), job())
        assert [branch for branch, _ in results] == [
            "success",
            "invalid_request",
            "invalid_request",
            "success",
        ]
        assert engine.stats()["q"].ready == 2


# ---------------------------------------------------------------- idempotency keys


async def test_dedup_returns_original_id_whatever_the_state() -> None:
    config = ServerConfig(storage=StorageConfig(dead_letter_retention_ms=1000))
    async with running(config) as engine:
        [a] = await enqueue(engine, job(idempotency_key="a"))
        [b] = await enqueue(engine, job(idempotency_key="b"))
        jobs = {j.id: j for j in await reserve(engine, max_jobs=2)}
        await ack(engine, jobs[a])
        await nack(engine, jobs[b], dead_letter=True)
        for key, original in (("a", a), ("b", b)):
            results = await enqueue_results(engine, job(idempotency_key=key))
            assert results == [("success", pb.EnqueueResponse(job_id=original, deduplicated=True))]
        assert engine.stats()["q"].live_depth == 0


async def test_dedup_scope_is_queue_and_key() -> None:
    async with running() as engine:
        [a] = await enqueue(engine, job("q1", idempotency_key="k"))
        [b] = await enqueue(engine, job("q2", idempotency_key="k"))
        assert a != b


async def test_same_key_twice_in_one_batch_is_deduplicated() -> None:
    async with running() as engine:
        results = await enqueue_results(engine, job(idempotency_key="k"), job(idempotency_key="k"))
        first, second = (value for _, value in results)
        assert second == pb.EnqueueResponse(job_id=first.job_id, deduplicated=True)
        assert engine.stats()["q"].ready == 1


async def test_dedup_window_expiry_creates_a_new_job() -> None:
    clock = ManualClock(T0)
    config = ServerConfig(
        storage=StorageConfig(dedup_window_ms=10_000),
        queues=(QueueConfig(name="short", dedup_window_ms=1000),),
    )
    async with running(config, clock=clock) as engine:
        [a] = await enqueue(engine, job(idempotency_key="k"))
        [s] = await enqueue(engine, job("short", idempotency_key="k"))
        await clock.advance(1)
        [s2] = await enqueue(engine, job("short", idempotency_key="k"))
        assert s2 != s
        assert (await enqueue_results(engine, job(idempotency_key="k")))[0][1].job_id == a
        await clock.advance(9)
        [a2] = await enqueue(engine, job(idempotency_key="k"))
        assert a2 != a


async def test_dedup_window_is_the_boot_value() -> None:
    clock = ManualClock(T0)
    config = ServerConfig(storage=StorageConfig(dedup_window_ms=1000))
    async with running(config, clock=clock) as engine:
        engine.reload(ServerConfig(storage=StorageConfig(dedup_window_ms=60_000)))
        [a] = await enqueue(engine, job(idempotency_key="k"))
        await clock.advance(1)
        [b] = await enqueue(engine, job(idempotency_key="k"))
        assert a != b


# ---------------------------------------------------------------- EnqueueAtomic


async def test_atomic_lists_every_failing_index_and_commits_nothing() -> None:
    async with running() as engine:
        outcome = await atomic(engine, job(), job(priority=12), job(), job(job_type=""))
        assert outcome == ("rejection", [(1, "invalid_request"), (3, "invalid_request")])
        assert engine.stats() == {}


async def test_atomic_closing_queue_lists_its_jobs() -> None:
    async with running() as engine:
        engine.close_queue("c")
        outcome = await atomic(engine, job("c"), job("q"), job("c"))
        assert outcome == ("rejection", [(0, "queue_closing"), (2, "queue_closing")])
        assert "q" not in engine.stats()


async def test_atomic_capacity_check_is_conservative_and_lists_the_queue() -> None:
    config = ServerConfig(queues=(QueueConfig(name="q", max_queue_depth=2),))
    async with running(config) as engine:
        await enqueue(engine, job(idempotency_key="k"))
        # One live job + two in the batch > 2, although the first is a dedup hit.
        outcome = await atomic(engine, job(idempotency_key="k"), job("other"), job())
        assert outcome == ("rejection", [(0, "queue_full"), (2, "queue_full")])
        assert engine.stats()["q"].ready == 1


async def test_atomic_success_dedups_and_inserts_everything() -> None:
    async with running() as engine:
        [existing] = await enqueue(engine, job(idempotency_key="k"))
        branch, responses = await atomic(
            engine,
            job(idempotency_key="k"),
            job(),
            job(idempotency_key="n"),
            job(idempotency_key="n"),
        )
        assert branch == "success"
        assert responses[0] == pb.EnqueueResponse(job_id=existing, deduplicated=True)
        assert not responses[1].deduplicated
        assert responses[3] == pb.EnqueueResponse(job_id=responses[2].job_id, deduplicated=True)
        assert engine.stats()["q"].ready == 3
