"""``sepp_anyio.testing.Harness`` and the ``sepp_harness`` fixture: run_until_settled (ready,
scheduled and retried jobs on virtual time; bounded, with a clear error), and the readers
jobs / dead_letters / results. Both backends, virtual time (tests/worker/conftest.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, assert_type

import anyio
import pytest

import sepp_anyio as sepp
from sepp_anyio.testing import DeadLetteredJob, Harness, NotSettledError, QueuedJob

pytestmark = pytest.mark.anyio


@dataclass
class Welcome:
    user_id: int


send_welcome = sepp.Task("emails", "send_welcome", Welcome, max_attempts=3)
other = sepp.Task("emails", "other", int)


async def test_run_until_settled_waits_for_scheduled_jobs_and_retries(
    sepp_harness: Harness,
) -> None:
    client = sepp_harness.client
    await send_welcome.enqueue(client, Welcome(1))
    await send_welcome.enqueue(client, Welcome(2))
    await send_welcome.enqueue(client, Welcome(3), delay=900.0)  # 15 minutes ahead
    worker = sepp.Worker(client, ["emails"])
    seen: list[tuple[int, int]] = []

    @worker.task(send_welcome)
    async def welcome(value: Welcome, ctx: sepp.JobCtx) -> None:
        seen.append((value.user_id, ctx.attempt))
        if value.user_id == 2 and ctx.attempt == 1:
            raise sepp.HandlerError.retry_after("flaky", 30.0)

    started = anyio.current_time()
    stats = await sepp_harness.run_until_settled(worker)
    assert sorted(seen) == [(1, 1), (2, 1), (2, 2), (3, 1)]
    assert stats.processed == 3 and stats.nacked_retry == 1
    assert anyio.current_time() - started >= 900.0  # virtual time: none really passed
    assert sepp_harness.jobs("emails") == []
    assert worker.statistics().in_flight == 0


async def test_scheduled_false_leaves_scheduled_jobs_queued(sepp_harness: Harness) -> None:
    client = sepp_harness.client
    await send_welcome.enqueue(client, Welcome(1))
    later = await send_welcome.enqueue(client, Welcome(2), delay=600.0)
    worker = sepp.Worker(client, ["emails"])
    handled: list[int] = []

    @worker.task(send_welcome)
    async def welcome(value: Welcome, ctx: sepp.JobCtx) -> None:
        handled.append(value.user_id)

    await sepp_harness.run_until_settled(worker, scheduled=False)
    assert handled == [1]
    [job] = sepp_harness.jobs("emails", send_welcome)
    assert (job.id, job.state, job.value) == (later.job_id, "scheduled", Welcome(2))
    assert job.due_at is not None and job.due_at > job.enqueued_at


async def test_jobs_decode_typed_payloads_in_server_order(sepp_harness: Harness) -> None:
    client = sepp_harness.client
    await send_welcome.enqueue(client, Welcome(1), priority=1)
    await other.enqueue(client, 5)
    await send_welcome.enqueue(client, Welcome(2), priority=9, custom={"tenant": "acme"})
    queued = sepp_harness.jobs("emails")
    assert [(j.job_type, j.state, j.value) for j in queued] == [
        ("send_welcome", "ready", None),
        ("send_welcome", "ready", None),
        ("other", "ready", None),
    ]
    typed = sepp_harness.jobs("emails", send_welcome)
    # mypy --strict: the values are the task's type.
    assert_type(typed, list[QueuedJob[Welcome]])
    assert_type(sepp_harness.dead_letters("emails", other), list[DeadLetteredJob[int]])
    assert [j.value for j in typed] == [Welcome(2), Welcome(1)]  # priority 9 first
    assert typed[0].custom == {"tenant": "acme"}
    assert typed[0].payload is not None and typed[0].payload.json() == {"user_id": 2}
    assert [j.value for j in sepp_harness.jobs("emails", other)] == [5]
    # A job the worker holds shows as in flight.
    [job] = await client.reserve(["emails"], lease=30.0, wait=0, max_jobs=1)
    states = {j.id: j.state for j in sepp_harness.jobs("emails")}
    assert states[job.ctx.id] == "in_flight"
    assert sepp_harness.jobs("nothing-here") == []


async def test_a_payload_that_does_not_validate_is_reported(sepp_harness: Harness) -> None:
    await sepp_harness.client.enqueue(
        sepp.EnqueueRequest(
            "emails", "send_welcome", payload=sepp.Payload.from_json({"user_id": "x"})
        )
    )
    with pytest.raises(sepp.TaskPayloadError, match="user_id"):
        sepp_harness.jobs("emails", send_welcome)


async def test_dead_letters_are_read_with_their_cause_and_value(sepp_harness: Harness) -> None:
    client = sepp_harness.client
    await send_welcome.enqueue(client, Welcome(4))
    worker = sepp.Worker(client, ["emails"])

    @worker.task(send_welcome)
    async def welcome(value: Welcome, ctx: sepp.JobCtx) -> None:
        raise sepp.HandlerError.permanent("no such user")

    await sepp_harness.run_until_settled(worker)
    [dead] = sepp_harness.dead_letters("emails", send_welcome)
    assert (dead.cause, dead.value, dead.final_attempt) == ("rejected", Welcome(4), 1)
    assert dead.reason is not None and "no such user" in dead.reason
    assert [d.id for d in sepp_harness.dead_letters("emails")] == [dead.id]
    assert sepp_harness.dead_letters("emails", other) == []
    assert sepp_harness.jobs("emails") == []


def _result(job_id: str, envelope: Any) -> sepp.EnqueueRequest:
    """A result job as the worker sends it (the fixed wire format)."""
    return sepp.EnqueueRequest(
        "replies",
        "sepp.result",
        payload=sepp.Payload.from_json(envelope),
        custom={"sepp.correlation_id": job_id},
    )


async def test_results_are_decoded_from_the_wire_format(sepp_harness: Harness) -> None:
    client = sepp_harness.client
    welcomed = await send_welcome.enqueue(client, Welcome(1))
    counted = await other.enqueue(client, 1)
    await client.enqueue(_result(welcomed.job_id, {"ok": True, "value": {"sent": True}}))
    await client.enqueue(
        _result(
            counted.job_id,
            {"ok": False, "error": {"type": "ValueError", "message": "too small"}},
        )
    )
    await client.enqueue(sepp.EnqueueRequest("replies", "not-a-result"))
    results = sepp_harness.results("replies")
    assert [(r.job_id, r.ok, r.value, r.error_type, r.error_message) for r in results] == [
        (welcomed.job_id, True, {"sent": True}, None, None),
        (counted.job_id, False, None, "ValueError", "too small"),
    ]
    # With a task: only the results of its jobs.
    [mine] = sepp_harness.results("replies", send_welcome)
    assert mine.job_id == welcomed.job_id
    [failed] = sepp_harness.results("replies", other)
    assert failed.error_type == "ValueError"


async def test_a_result_that_is_not_an_envelope_is_refused(sepp_harness: Harness) -> None:
    await sepp_harness.client.enqueue(_result("some-job", {"value": 1}))
    with pytest.raises(sepp.SeppError, match='no boolean "ok"'):
        sepp_harness.results("replies")


async def test_a_worker_that_never_settles_fails_within_max_time() -> None:
    async with Harness() as harness:
        await harness.client.enqueue(sepp.EnqueueRequest("emails", "stuck"))
        # A lease longer than max_time: the job is in flight all along.
        worker = sepp.Worker(harness.client, ["emails"], wait=5.0, lease=3600.0)
        cancelled = anyio.Event()

        @worker.handler("stuck")
        async def stuck(payload: sepp.Payload | None, ctx: sepp.JobCtx) -> None:
            try:
                await anyio.sleep_forever()
            finally:
                cancelled.set()

        started = anyio.current_time()
        with pytest.raises(NotSettledError) as caught:
            await harness.run_until_settled(worker, max_time=120.0)
        assert anyio.current_time() - started == pytest.approx(120.0, abs=1.0)
        message = str(caught.value)
        assert "max_time=120s passed" in message
        assert "'emails': 0 ready, 1 in flight, 0 scheduled" in message
        assert caught.value.queues["emails"].inflight == 1
        # The handler was cancelled and its job nacked for a retry before it returned.
        assert cancelled.is_set()
        assert [job.state for job in harness.jobs("emails")] == ["ready"]


async def test_a_job_that_enqueues_itself_forever_fails_at_max_jobs() -> None:
    async with Harness() as harness:
        await harness.client.enqueue(sepp.EnqueueRequest("emails", "again"))
        worker = sepp.Worker(harness.client, ["emails"])

        @worker.handler("again")
        async def again(payload: sepp.Payload | None, ctx: sepp.JobCtx) -> None:
            await harness.client.enqueue(sepp.EnqueueRequest("emails", "again"))

        with pytest.raises(NotSettledError, match="took its max_jobs=25 jobs") as caught:
            await harness.run_until_settled(worker, max_jobs=25)
        assert caught.value.handled == 25
        assert caught.value.queues["emails"].ready == 1


async def test_bad_limits_are_refused(sepp_harness: Harness) -> None:
    worker = sepp.Worker(sepp_harness.client, ["emails"])
    with pytest.raises(sepp.InvalidArgumentError, match="max_jobs"):
        await sepp_harness.run_until_settled(worker, max_jobs=0)
    with pytest.raises(sepp.InvalidArgumentError, match="max_time"):
        await sepp_harness.run_until_settled(worker, max_time=0)
    with pytest.raises(TypeError, match=r"sepp\.Worker"):
        await sepp_harness.run_until_settled(object())  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"sepp\.Task"):
        sepp_harness.jobs("emails", "send_welcome")  # type: ignore[call-overload]


async def test_the_harness_keeps_dead_letters_unless_configured_not_to() -> None:
    async with Harness(storage={"dead_letter_retention_ms": 0}) as harness:
        await harness.client.enqueue(sepp.EnqueueRequest("q", "doomed", max_attempts=1))
        worker = sepp.Worker(harness.client, ["q"])

        @worker.handler("doomed")
        async def doomed(payload: sepp.Payload | None, ctx: sepp.JobCtx) -> None:
            raise sepp.HandlerError.permanent("no")

        await harness.run_until_settled(worker)
        assert harness.dead_letters("q") == []
    with pytest.raises(RuntimeError, match="inside `async with"):
        harness.client  # noqa: B018


async def test_a_handler_that_outlives_its_lease_is_waited_for(sepp_harness: Harness) -> None:
    # One attempt and a 5 s lease: at 5 s the server dead-letters the job (nothing ready
    # or in flight there), but the handler still runs in the worker.
    client = sepp_harness.client
    await client.enqueue(sepp.EnqueueRequest("emails", "stuck", max_attempts=1))
    worker = sepp.Worker(client, ["emails"], lease=5.0)

    @worker.handler("stuck")
    async def stuck(payload: sepp.Payload | None, ctx: sepp.JobCtx) -> None:
        await anyio.sleep_forever()

    with pytest.raises(NotSettledError, match="1 job\\(s\\) running in the worker"):
        await sepp_harness.run_until_settled(worker, max_time=60.0)
    [dead] = sepp_harness.dead_letters("emails")
    assert dead.cause == "lease_expired"
