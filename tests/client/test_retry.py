"""The client's RetryPolicy, with attempts counted on the server side.

A ``FaultyEngine`` in front of the in-process reference server fails the first N calls of
an RPC with a chosen status; the count of calls that reached it is the number of attempts.
Backoffs are zero here (timing and cancellation of the backoff sleep are in
``test_retry_timing.py``); the same rules over the real HTTP/2 transport are in
``test_network.py``.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import pytest

from sepp_anyio import (
    EnqueueAck,
    EnqueueRequest,
    JobNotFoundError,
    RetryPolicy,
    SeppError,
    StatusCode,
    TransportError,
)

from . import ALL_OPS, InMemory, Op, cancel_once_blocked, keyed, leased_ctx, open_client, prepared

pytestmark = pytest.mark.anyio

RETRIED = ["UNAVAILABLE", "DEADLINE_EXCEEDED", "ABORTED", "RESOURCE_EXHAUSTED"]
NOT_RETRIED = [
    "INVALID_ARGUMENT",
    "UNAUTHENTICATED",
    "INTERNAL",
    "CANCELLED",
    "PERMISSION_DENIED",
    "NOT_FOUND",
    "FAILED_PRECONDITION",
    "UNKNOWN",
    "DATA_LOSS",
    "UNIMPLEMENTED",
    "ALREADY_EXISTS",
    "OUT_OF_RANGE",
]
KEYLESS_RETRIED = {"UNAVAILABLE", "RESOURCE_EXHAUSTED"}

POLICY = RetryPolicy(max_attempts=4, initial_backoff=0.0, jitter=False)


def keyless(job_type: str = "t") -> EnqueueRequest:
    return EnqueueRequest("q", job_type)


RETRIED_OPS = [op for op in ALL_OPS if op.retried]
NEVER_RETRIED_OPS = [op for op in ALL_OPS if not op.retried]
ENQUEUE_OPS: dict[str, Callable[[InMemory, list[EnqueueRequest]], Awaitable[Any]]] = {
    "enqueue": lambda m, jobs: m.client.enqueue(jobs[0]),
    "enqueue_batch": lambda m, jobs: m.client.enqueue_batch(jobs),
    "enqueue_atomic": lambda m, jobs: m.client.enqueue_atomic(jobs),
}


# ------------------------------------------------------------------------------ the codes


@pytest.mark.parametrize("code", RETRIED)
@pytest.mark.parametrize("op", RETRIED_OPS, ids=str)
async def test_a_retryable_status_is_retried_until_the_call_succeeds(op: Op, code: str) -> None:
    async with prepared(op, POLICY, fail_first={op.rpc: (3, code)}) as (mem, ctx):
        await op.call(mem, ctx)
        assert mem.faults.calls[op.rpc] == 4


@pytest.mark.parametrize("code", NOT_RETRIED)
@pytest.mark.parametrize("op", RETRIED_OPS, ids=str)
async def test_any_other_status_fails_on_the_first_attempt(op: Op, code: str) -> None:
    async with prepared(op, POLICY, fail_first={op.rpc: (1, code)}) as (mem, ctx):
        with pytest.raises(SeppError) as caught:
            await op.call(mem, ctx)
        assert mem.faults.calls[op.rpc] == 1
    assert caught.value.code is StatusCode[code]


@pytest.mark.parametrize("code", RETRIED)
@pytest.mark.parametrize("op", RETRIED_OPS, ids=str)
async def test_the_last_failure_is_raised_once_max_attempts_is_reached(op: Op, code: str) -> None:
    policy = RetryPolicy(max_attempts=3, initial_backoff=0.0)
    async with prepared(op, policy, fail_first={op.rpc: (100, code)}) as (mem, ctx):
        with pytest.raises(SeppError) as caught:
            await op.call(mem, ctx)
        assert mem.faults.calls[op.rpc] == 3
    assert caught.value.code is StatusCode[code]
    assert caught.value.status_message == f"injected {code} #3"
    assert caught.value.__cause__ is None


@pytest.mark.parametrize("op", RETRIED_OPS, ids=str)
async def test_the_default_policy_makes_a_single_attempt(op: Op) -> None:
    async with prepared(op, RetryPolicy(), fail_first={op.rpc: (1, "UNAVAILABLE")}) as (
        mem,
        ctx,
    ):
        with pytest.raises(TransportError):
            await op.call(mem, ctx)
        assert mem.faults.calls[op.rpc] == 1


@pytest.mark.parametrize("code", RETRIED)
@pytest.mark.parametrize("op", NEVER_RETRIED_OPS, ids=str)
async def test_reserve_and_drain_are_never_retried(op: Op, code: str) -> None:
    policy = RetryPolicy(max_attempts=10, initial_backoff=0.0)
    async with prepared(op, policy, fail_first={op.rpc: (1, code)}) as (mem, ctx):
        with pytest.raises(SeppError) as caught:
            await op.call(mem, ctx)
        assert mem.faults.calls[op.rpc] == 1
        # The next call, a new one, succeeds: it was the policy that stopped at one.
        await op.call(mem, ctx)
        assert mem.faults.calls[op.rpc] == 2
    assert caught.value.code is StatusCode[code]


@pytest.mark.parametrize("op", RETRIED_OPS, ids=str)
async def test_cancelling_during_the_backoff_ends_the_call_without_another_attempt(
    op: Op,
) -> None:
    policy = RetryPolicy(max_attempts=3, initial_backoff=1000.0, jitter=False)
    async with prepared(op, policy, fail_first={op.rpc: (5, "UNAVAILABLE")}) as (mem, ctx):
        with anyio.fail_after(10):  # a safety net: the cancellation is immediate
            assert await cancel_once_blocked(lambda: op.call(mem, ctx))
        assert mem.faults.calls[op.rpc] == 1
        mem.faults.fail_first = {}
        await op.call(mem, ctx)  # the client is unharmed
        assert mem.faults.calls[op.rpc] == 2


# ------------------------------------------------------------------------------ keyless enqueue


@pytest.mark.parametrize("code", RETRIED)
@pytest.mark.parametrize("method", list(ENQUEUE_OPS))
async def test_an_enqueue_without_idempotency_keys_retries_only_safe_codes(
    method: str, code: str
) -> None:
    rpc = "EnqueueAtomic" if method == "enqueue_atomic" else "EnqueueBatch"
    async with open_client(retry=POLICY, fail_first={rpc: (1, code)}) as mem:
        call = ENQUEUE_OPS[method](mem, [keyless()])
        if code in KEYLESS_RETRIED:
            await call
            assert mem.faults.calls[rpc] == 2
        else:
            with pytest.raises(TransportError) as caught:
                await call
            assert caught.value.code is StatusCode[code]
            assert mem.faults.calls[rpc] == 1


@pytest.mark.parametrize("code", ["DEADLINE_EXCEEDED", "ABORTED"])
@pytest.mark.parametrize("method", ["enqueue_batch", "enqueue_atomic"])
async def test_one_keyless_job_makes_the_whole_batch_keyless(method: str, code: str) -> None:
    rpc = "EnqueueAtomic" if method == "enqueue_atomic" else "EnqueueBatch"
    async with open_client(retry=POLICY, fail_first={rpc: (1, code)}) as mem:
        with pytest.raises(TransportError):
            await ENQUEUE_OPS[method](mem, [keyed("a"), keyless("b"), keyed("c")])
        assert mem.faults.calls[rpc] == 1
        await ENQUEUE_OPS[method](mem, [keyed("a"), keyed("b")])
        assert mem.faults.calls[rpc] == 2  # no failure left: one attempt


def test_an_empty_idempotency_key_cannot_be_mistaken_for_a_key() -> None:
    # sepp-py treats a present-but-empty key as keyed and would retry ambiguous
    # failures; here an empty key cannot even be built.
    with pytest.raises(ValueError, match="idempotency_key must not be empty"):
        EnqueueRequest("q", "t", idempotency_key="")
    assert not EnqueueRequest("q", "t").has_idempotency_key
    assert EnqueueRequest("q", "t", idempotency_key="k").has_idempotency_key


# ------------------------------------------------------------------------------ lost replies


async def test_a_keyed_enqueue_whose_reply_was_lost_is_retried_and_deduplicated() -> None:
    async with open_client(
        retry=POLICY, lose_reply_first={"EnqueueBatch": (1, "DEADLINE_EXCEEDED")}
    ) as mem:
        ack = await mem.client.enqueue(keyed())
        assert mem.faults.calls["EnqueueBatch"] == 2
        assert mem.engine.stats()["q"].ready == 1
    assert isinstance(ack, EnqueueAck) and ack.deduplicated


async def test_a_keyless_enqueue_is_not_retried_after_an_ambiguous_failure() -> None:
    # Why the keyless rule exists: the first try did commit, so a retry would duplicate.
    async with open_client(
        retry=POLICY, lose_reply_first={"EnqueueBatch": (1, "DEADLINE_EXCEEDED")}
    ) as mem:
        with pytest.raises(TransportError):
            await mem.client.enqueue(keyless())
        assert mem.faults.calls["EnqueueBatch"] == 1
        assert mem.engine.stats()["q"].ready == 1


async def test_a_retried_ack_whose_first_reply_was_lost_sees_job_not_found() -> None:
    [op] = [op for op in ALL_OPS if op.name == "ack"]
    async with prepared(op, POLICY, lose_reply_first={"Ack": (1, "UNAVAILABLE")}) as (mem, ctx):
        assert ctx is not None
        with pytest.raises(JobNotFoundError):
            await mem.client.ack(ctx)
        assert mem.faults.calls["Ack"] == 2
        assert mem.engine.snapshot_job(ctx.id) is None  # the first try did ack it


async def test_a_retried_enqueue_sends_the_same_request_every_time() -> None:
    # A delay is resolved into scheduled_at once per call, not once per attempt.
    async with open_client(retry=POLICY, fail_first={"EnqueueBatch": (2, "UNAVAILABLE")}) as mem:
        await mem.client.enqueue(EnqueueRequest("q", "t", delay=30))
        first, second, third = mem.faults.requests["EnqueueBatch"]
    assert bytes(first) == bytes(second) == bytes(third)
    assert first.jobs[0].scheduled_at is not None


# ------------------------------------------------------------------------------ logging


async def test_each_retry_is_logged_with_the_rpc_code_and_attempt(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="sepp_anyio")
    async with open_client(retry=POLICY, fail_first={"GetServerInfo": (2, "ABORTED")}) as mem:
        await mem.client.server_info()
    retries = [r.getMessage() for r in caplog.records if r.name == "sepp_anyio"]
    assert len(retries) == 2
    assert retries[0].startswith("server_info failed with ABORTED (injected ABORTED #1); retry 1")
    assert "retry 2 of 3" in retries[1]


async def test_a_cancelled_call_is_neither_converted_nor_retried() -> None:
    async with open_client(retry=POLICY, hang_first={"Ack": 1}) as mem:
        ctx = await leased_ctx(mem)
        assert await cancel_once_blocked(lambda: mem.client.ack(ctx))
        assert mem.faults.calls["Ack"] == 1
        await mem.client.ack(ctx)  # the connection is still fine
