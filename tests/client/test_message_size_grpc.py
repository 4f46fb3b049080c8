"""Size refusals of other gRPC servers, over real HTTP/2, both backends: grpc-go, grpcio
and grpc-java answer a request over their message limit with RESOURCE_EXHAUSTED, which
used to read as an overloaded server and be *retried* (the same oversized request sent
again at each try). It is a :class:`RequestTooLargeError` naming the limit, tried once.

(The reference server's own refusal, OUT_OF_RANGE, is in ``test_message_size``.)
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest
from grpclib.const import Status
from grpclib.exceptions import GRPCError

import sepp_anyio as sepp
from tests.support.servers import GrpcioTestServer, ScriptedGrpclibServer

pytestmark = pytest.mark.anyio

LIMIT = 64 * 1024
#: Several tries with no pause to speak of: a retried refusal would show at once.
RETRYING = sepp.RetryPolicy(max_attempts=4, initial_backoff=0.001, max_backoff=0.001)


def _job(size: int) -> sepp.EnqueueRequest:
    return sepp.EnqueueRequest("q", "t", payload=sepp.Payload(b"x" * size, "bytes"))


@pytest.fixture(scope="module")
def grpcio_server() -> Iterator[GrpcioTestServer]:
    with GrpcioTestServer(max_message_size=LIMIT) as server:
        yield server


@pytest.fixture(scope="module")
def shared_scripted() -> Iterator[ScriptedGrpclibServer]:
    with ScriptedGrpclibServer() as server:
        yield server


def _go_style(request: Any) -> Any:
    """What grpc-go answers for a request over its limit (the test server itself has none)."""
    size = len(bytes(request))
    if size > LIMIT:
        raise GRPCError(
            Status.RESOURCE_EXHAUSTED,
            f"grpc: received message larger than max ({size} vs. {LIMIT})",
        )
    return None  # not reached by these tests: only oversized requests are sent to it


async def test_grpc_core_refuses_with_resource_exhausted_and_it_is_not_retried(
    grpcio_server: GrpcioTestServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="sepp_anyio")
    async with sepp.connect(grpcio_server.address, retry=RETRYING) as client:
        with pytest.raises(sepp.RequestTooLargeError) as refused:
            await client.enqueue(_job(100_000))
        error = refused.value
        assert (error.code, error.sent, error.limit) == (
            sepp.StatusCode.RESOURCE_EXHAUSTED,
            True,
            LIMIT,
        )
        assert not isinstance(error, sepp.OverloadedError)
        assert str(error).startswith(
            f"enqueue_batch: the request is {error.size} bytes, over the server's message "
            f"limit of {LIMIT} bytes, which refused it unread"
        )
        assert [r for r in caplog.records if "retry" in r.getMessage()] == []
        # Known now: refused before sending; a request under it still goes through.
        with pytest.raises(sepp.RequestTooLargeError) as again:
            await client.enqueue_atomic([_job(100_000)])
        assert not again.value.sent
        await client.enqueue(_job(1000))


async def test_a_grpc_go_refusal_is_tried_once_and_not_sent_again(
    shared_scripted: ScriptedGrpclibServer,
) -> None:
    shared_scripted.script(replies={"EnqueueBatch": _go_style})
    async with sepp.connect(shared_scripted.address, retry=RETRYING) as client:
        with pytest.raises(sepp.RequestTooLargeError) as refused:
            await client.enqueue_batch([_job(40_000), _job(40_000)])
        error = refused.value
        assert shared_scripted.calls("EnqueueBatch") == 1
        # This server's info is unusable (no server time): the payload limit is left out,
        # and the error is still the size refusal.
        assert shared_scripted.calls("GetServerInfo") == 1
        assert str(error) == (
            f"enqueue_batch: the request is {error.size} bytes, over the server's message "
            f"limit of {LIMIT} bytes, which refused it unread; the batch of 2 jobs can be split"
        )
        with pytest.raises(sepp.RequestTooLargeError) as again:
            await client.enqueue(_job(70_000))
        assert not again.value.sent
        assert shared_scripted.calls("EnqueueBatch") == 1
