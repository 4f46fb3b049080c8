"""What the worker's log lines say about a job's next step: on its last attempt a failed
job is dead-lettered (no "retrying in 8s" first), a HandlerError reads as English, and a
cancellation names its real cause. Both backends, virtual time."""

from __future__ import annotations

import logging

import anyio
import pytest

from sepp_anyio import (
    Client,
    EnqueueAck,
    EnqueueRequest,
    HandlerError,
    JobCtx,
    Payload,
    StatusCode,
    Worker,
)
from sepp_anyio.server import EngineError
from sepp_anyio.testing import open_in_memory_client

from ._helpers import QUEUE, EngineSpy, Probe, running

pytestmark = pytest.mark.anyio

RETAIN = {"dead_letter_retention_ms": 3_600_000}


def _lines(caplog: pytest.LogCaptureFixture, job_id: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if job_id in r.getMessage()]


async def _enqueue(client: Client, how: str, *, job_type: str = "t", max_attempts: int) -> str:
    ack = await client.enqueue(
        EnqueueRequest(
            QUEUE, job_type, payload=Payload.from_json({"how": how}), max_attempts=max_attempts
        )
    )
    assert isinstance(ack, EnqueueAck)
    return ack.job_id


async def _fails(payload: Payload | None, ctx: JobCtx) -> None:
    assert payload is not None
    how = payload.json()["how"]
    if how == "crash":
        raise ValueError("boom")
    if how == "retry":
        raise HandlerError.retry("busy")
    if how == "retry_after":
        raise HandlerError.retry_after("rate limited", 8)
    assert how == "timeout"
    await anyio.sleep(3600)


@pytest.mark.parametrize("how", ["crash", "retry", "retry_after", "timeout", "no-handler"])
async def test_the_last_attempt_says_dead_lettered_not_retrying(
    how: str, caplog: pytest.LogCaptureFixture
) -> None:
    async with open_in_memory_client(storage=RETAIN) as (client, engine):
        spy = EngineSpy(engine)
        worker = Worker(client, [QUEUE], job_timeout=5.0, auto_extend=True)
        worker.handle("t", _fails)
        job_type = "unknown" if how == "no-handler" else "t"
        last = await _enqueue(client, how, job_type=job_type, max_attempts=1)
        # The same failure, not on the last attempt, for comparison.
        earlier = await _enqueue(client, how, job_type=job_type, max_attempts=5)
        with caplog.at_level(logging.DEBUG, "sepp_anyio.worker"):
            async with running(worker):
                await spy.wait_until(lambda: len(spy.of("nack", ok=True)) >= 2)
        [record] = engine.dead_letters()
        assert record.job.id == last
        lines = _lines(caplog, last)
        assert not [line for line in lines if "retrying" in line], lines
        assert any(
            "that was its last attempt (1/1), so it will be dead-lettered" in line for line in lines
        ), lines
        assert any("nacked; dead-lettered" in line for line in lines), lines
        lines = _lines(caplog, earlier)
        assert any("; retrying " in line for line in lines), lines
        assert not [line for line in lines if "dead-letter" in line], lines


@pytest.mark.parametrize(
    ("error", "level", "expected"),
    [
        (
            HandlerError.permanent("nope"),
            logging.WARNING,
            "nacked; dead-lettered: handler asked to dead-letter the job (nope)",
        ),
        (
            HandlerError.retry("busy"),
            logging.INFO,
            "nacked for retry: handler asked to retry the job (busy); retrying under the "
            "queue's retry policy",
        ),
        (
            HandlerError.retry_after("rate limited", 7.5),
            logging.INFO,
            "nacked for retry: handler asked to retry the job in 7.5s (rate limited); "
            "retrying in 7.5s",
        ),
        (
            HandlerError("", None),
            logging.INFO,
            "nacked for retry: handler asked to retry the job (no reason given); retrying "
            "under the queue's retry policy",
        ),
    ],
    ids=["dead-letter", "retry", "retry-after", "no-reason"],
)
async def test_a_handler_error_is_one_line_in_english(
    error: HandlerError, level: int, expected: str, caplog: pytest.LogCaptureFixture
) -> None:
    """What the handler asked for and what became of the nack, in one line (it was two
    INFO lines per retry: "handler asked to retry", then "nacked for retry")."""

    async def fails(payload: Payload | None, ctx: JobCtx) -> None:
        raise error

    async with open_in_memory_client() as (client, engine):
        spy = EngineSpy(engine)
        worker = Worker(client, [QUEUE])
        worker.handle("t", fails)
        job_id = await _enqueue(client, "any", max_attempts=3)
        with caplog.at_level(logging.INFO, "sepp_anyio.worker"):
            async with running(worker):
                await spy.wait_for("nack")
        # The first attempt's lines: a job nacked for an immediate retry may already be
        # running its second attempt (in the parked reserve) as the worker stops.
        first = f"job {job_id} (t, attempt 1/3)"
        records = [r for r in caplog.records if r.getMessage().startswith(first)]
        assert [(r.levelno, r.getMessage()) for r in records] == [(level, f"{first}: {expected}")]


async def test_a_handler_error_on_the_last_attempt_is_one_dead_letter_line(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def fails(payload: Payload | None, ctx: JobCtx) -> None:
        raise HandlerError.retry_after("busy", 5)

    async with open_in_memory_client(storage=RETAIN) as (client, engine):
        spy = EngineSpy(engine)
        worker = Worker(client, [QUEUE])
        worker.handle("t", fails)
        job_id = await _enqueue(client, "any", max_attempts=1)
        with caplog.at_level(logging.INFO, "sepp_anyio.worker"):
            async with running(worker):
                await spy.wait_for("nack")
        records = [r for r in caplog.records if job_id in r.getMessage()]
        assert [(r.levelno, r.getMessage()) for r in records] == [
            (
                logging.WARNING,
                f"job {job_id} (t, attempt 1/1): nacked; dead-lettered: handler asked to retry"
                " the job in 5s (busy); that was its last attempt (1/1), so it will be"
                " dead-lettered",
            )
        ]


async def test_a_failed_nack_still_says_what_the_handler_asked(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def fails(payload: Payload | None, ctx: JobCtx) -> None:
        raise HandlerError.retry("busy")

    async with open_in_memory_client() as (client, engine):
        spy = EngineSpy(engine)
        spy.fail("nack", EngineError(StatusCode.NOT_FOUND, "no such job"))
        worker = Worker(client, [QUEUE])
        worker.handle("t", fails)
        job_id = await _enqueue(client, "any", max_attempts=3)
        with caplog.at_level(logging.INFO, "sepp_anyio.worker"):
            async with running(worker):
                await spy.wait_for("nack", ok=False)
        # run() returned: the job's settle, and its log line, are over.
        assert worker.statistics().settle_errors == 1
        records = [r for r in caplog.records if job_id in r.getMessage()]
        assert [r.levelno for r in records] == [logging.ERROR], records
        message = records[0].getMessage()
        expected = (
            f"job {job_id} (t, attempt 1/3): could not nack (handler asked to retry the job"
            " (busy)): job not found;"
        )
        assert message.startswith(expected), message


@pytest.mark.parametrize(
    ("reason", "cause"),
    [(None, "cancel_in_flight() was called"), ("SIGINT received again", "SIGINT received again")],
)
async def test_cancel_in_flight_names_its_cause_in_the_nack_and_the_log(
    reason: str | None, cause: str, caplog: pytest.LogCaptureFixture
) -> None:
    probe = Probe()

    async def forever(payload: Payload | None, ctx: JobCtx) -> None:
        await anyio.sleep_forever()

    async with open_in_memory_client() as (client, engine):
        spy = EngineSpy(engine)
        worker = Worker(client, [QUEUE])  # no drain_timeout at all
        worker.handle("t", probe.handler(forever))
        job_id = await _enqueue(client, "any", max_attempts=3)
        with caplog.at_level(logging.INFO, "sepp_anyio.worker"):
            async with running(worker):
                await probe.wait_starts(1)
                worker.cancel_in_flight(reason=reason)
                [nack] = await spy.wait_for("nack")
        assert nack.request.reason == f"worker shut down before the handler finished ({cause})"
        messages = [r.getMessage() for r in caplog.records]
        assert not [m for m in messages if "drain_timeout" in m], messages
        assert any(f"cancelling 1 running handler(s) ({cause})" in m for m in messages), messages
        assert any(
            m.startswith(f"job {job_id} (t, attempt 1/3): handler cancelled: worker shut down")
            and cause in m
            and m.endswith("retrying at once")
            for m in messages
        ), messages


async def test_the_drain_timeout_is_named_when_it_is_the_cause(
    caplog: pytest.LogCaptureFixture,
) -> None:
    probe = Probe()

    async def forever(payload: Payload | None, ctx: JobCtx) -> None:
        await anyio.sleep_forever()

    async with open_in_memory_client() as (client, engine):
        spy = EngineSpy(engine)
        worker = Worker(client, [QUEUE], drain_timeout=2.5)
        worker.handle("t", probe.handler(forever))
        await _enqueue(client, "any", max_attempts=3)
        with caplog.at_level(logging.INFO, "sepp_anyio.worker"):
            async with running(worker):
                await probe.wait_starts(1)
        [nack] = spy.of("nack")
        assert nack.request.reason == (
            "worker shut down before the handler finished (drain_timeout of 2.5s passed)"
        )
