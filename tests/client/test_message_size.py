"""Requests over the server's limits, against the reference server over real loopback
sockets, both backends on virtual time (the server runs in the test's own event loop).

A payload over the queue's limit (2 MiB against 1 MiB) is the server's per-job rejection
(:class:`PayloadTooLarge`), which names the queue's limit. A request over the server's
message limit (20 MB against 16 MiB) used to come back as ``UnexpectedStatusError: ...
OUT_OF_RANGE ...`` quoting only the 16 MiB; it is a :class:`RequestTooLargeError` naming
both limits, and once the server has stated its limit the client refuses the next such
request before sending anything (the server sees no call), for ``remember_message_limit``
seconds.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio
import pytest

import sepp_anyio as sepp
from sepp_anyio.server import Engine, LimitsConfig, NetworkServer, ServerConfig
from tests.server_hostile._vclock import VIRTUAL_BACKENDS, virtual_backend

pytestmark = pytest.mark.anyio

QUEUE = "uploads"
MIB = 1 << 20
#: What the reference server (and the real sepp server) default to.
MESSAGE_LIMIT = 16 * MIB
PAYLOAD_LIMIT = 1 * MIB
#: The new user's 20 MB payload: over the message limit, so the server refuses it unread.
HUGE = 20_000_000
#: Its request on the wire: the payload and 41 bytes of protobuf around it.
HUGE_REQUEST = HUGE + 41


@pytest.fixture(params=VIRTUAL_BACKENDS)
def anyio_backend(request: pytest.FixtureRequest) -> tuple[str, dict[str, Any]]:
    return virtual_backend(request)


@asynccontextmanager
async def reference_server(**limits: Any) -> AsyncIterator[tuple[NetworkServer, Engine]]:
    """The reference server with these ``[limits]`` (the rest default), in this loop."""
    config = ServerConfig(limits=LimitsConfig(**limits))
    async with Engine(config) as engine, NetworkServer(engine, port=0, shutdown_grace=1.0) as net:
        yield net, engine


class CallsSeen:
    """Counts the calls the server has started, one per request it received.

    Over every connection seen so far, not only the open ones: a server may close an idle
    connection (the client then opens another) while a test waits on virtual time.
    """

    def __init__(self, net: NetworkServer) -> None:
        self._net = net
        self._connections: set[Any] = set()

    def __call__(self) -> int:
        self._connections.update(self._net.connections)
        return sum(connection.calls_started for connection in self._connections)


def job(size: int) -> sepp.EnqueueRequest:
    return sepp.EnqueueRequest(QUEUE, "scan", payload=sepp.Payload(b"x" * size, "image/png"))


Enqueue = Callable[[sepp.Client, list[sepp.EnqueueRequest]], Awaitable[object]]


async def _enqueue(client: sepp.Client, jobs: list[sepp.EnqueueRequest]) -> object:
    (request,) = jobs
    return await client.enqueue(request)


async def _batch(client: sepp.Client, jobs: list[sepp.EnqueueRequest]) -> object:
    return await client.enqueue_batch(jobs)


async def _atomic(client: sepp.Client, jobs: list[sepp.EnqueueRequest]) -> object:
    return await client.enqueue_atomic(jobs)


METHODS = [
    pytest.param(_enqueue, "enqueue_batch", id="enqueue"),
    pytest.param(_batch, "enqueue_batch", id="enqueue_batch"),
    pytest.param(_atomic, "enqueue_atomic", id="enqueue_atomic"),
]


async def _live_depth(engine: Engine) -> int:
    stats = engine.stats()
    return stats[QUEUE].live_depth if QUEUE in stats else 0


# ---------------------------------------------------------------------------- payload limit


async def test_a_payload_over_the_queues_limit_names_that_limit() -> None:
    async with reference_server() as (net, engine), sepp.connect(net.address) as client:
        with pytest.raises(sepp.JobRejectedError) as rejected:
            await client.enqueue(job(2 * MIB))
        assert str(rejected.value) == (
            "the server rejected the job: payload is 2097152 bytes, over the queue's limit of "
            "1048576 bytes"
        )
        assert await client.enqueue_batch([job(2 * MIB)]) == [
            sepp.PayloadTooLarge(limit=PAYLOAD_LIMIT, actual=2 * MIB)
        ]
        with pytest.raises(sepp.BatchValidationError) as refused:
            await client.enqueue_atomic([job(10), job(2 * MIB)])
        assert [str(error) for error in refused.value.errors] == [
            "job 1: payload is 2097152 bytes, over the queue's limit of 1048576 bytes"
        ]
        assert await _live_depth(engine) == 0


# ---------------------------------------------------------------------------- message limit


@pytest.mark.parametrize(("call", "rpc"), METHODS)
async def test_a_request_over_the_message_limit_names_both_limits_and_is_not_sent_again(
    call: Enqueue, rpc: str
) -> None:
    async with reference_server() as (net, engine), sepp.connect(net.address) as client:
        # The server's refusal, unread: the message limit and, read from the server info
        # the client fetches on this path, the payload limit that is the one to mind.
        with pytest.raises(sepp.RequestTooLargeError) as first:
            await call(client, [job(HUGE)])
        refused = first.value
        assert str(refused) == (
            f"{rpc}: the request is {HUGE_REQUEST} bytes, over the server's message limit of "
            f"{MESSAGE_LIMIT} bytes, which refused it unread; the server's payload limit is "
            f"{PAYLOAD_LIMIT} bytes per job (a queue may set its own)"
        )
        assert isinstance(refused, sepp.InvalidRequestError) and isinstance(refused, ValueError)
        assert (refused.code, refused.sent) == (sepp.StatusCode.OUT_OF_RANGE, True)
        assert (refused.size, refused.limit, refused.payload_limit) == (
            HUGE_REQUEST,
            MESSAGE_LIMIT,
            PAYLOAD_LIMIT,
        )

        # The limit is known now: the next one is refused before anything is sent.
        calls_seen = CallsSeen(net)
        seen = calls_seen()
        with pytest.raises(sepp.RequestTooLargeError) as second:
            await call(client, [job(HUGE)])
        assert calls_seen() == seen, "the oversized request reached the server"
        assert str(second.value) == (
            f"{rpc}: the request is {HUGE_REQUEST} bytes, over the server's message limit of "
            f"{MESSAGE_LIMIT} bytes (not sent: the server stated this limit when it refused a "
            f"request); the server's payload limit is {PAYLOAD_LIMIT} bytes per job (a queue "
            "may set its own)"
        )
        assert (second.value.code, second.value.sent) == (None, False)

        # Nothing was enqueued, and the connection serves the next call.
        assert await _live_depth(engine) == 0
        ack = await client.enqueue(job(100))
        [reserved] = await client.reserve([QUEUE], lease=30.0, wait=0.0, max_jobs=10)
        assert reserved.ctx.id == ack.job_id


async def test_a_batch_over_the_message_limit_says_it_can_be_split() -> None:
    limits = {"max_message_bytes": 64 * 1024, "max_payload_bytes": 16 * 1024}
    batch = [job(10 * 1024) for _ in range(10)]
    async with reference_server(**limits) as (net, engine), sepp.connect(net.address) as client:
        with pytest.raises(sepp.RequestTooLargeError) as refused:
            await client.enqueue_batch(batch)
        size = refused.value.size
        assert size is not None and size > 10 * 10 * 1024
        assert str(refused.value) == (
            f"enqueue_batch: the request is {size} bytes, over the server's message limit of "
            "65536 bytes, which refused it unread; the server's payload limit is 16384 bytes "
            "per job (a queue may set its own); the batch of 10 jobs can be split"
        )
        # Split, it goes through.
        for part in (batch[:5], batch[5:]):
            results = await client.enqueue_batch(part)
            assert all(isinstance(result, sepp.EnqueueAck) for result in results)
        assert await _live_depth(engine) == 10


async def test_a_request_under_a_known_limit_is_still_sent() -> None:
    limits = {"max_message_bytes": 64 * 1024, "max_payload_bytes": 64 * 1024}
    async with reference_server(**limits) as (net, engine), sepp.connect(net.address) as client:
        with pytest.raises(sepp.RequestTooLargeError):
            await client.enqueue(job(65 * 1024))
        # Just under the limit (measured exactly, not by the cheap bound), and far under.
        near = 64 * 1024 - 64
        for size in (near, 10):
            await client.enqueue(job(size))
        assert await _live_depth(engine) == 2


async def test_the_limit_is_remembered_for_remember_message_limit_seconds() -> None:
    async with (
        reference_server() as (net, _engine),
        sepp.connect(net.address, remember_message_limit=60.0) as client,
    ):
        with pytest.raises(sepp.RequestTooLargeError) as info:
            await client.enqueue(job(HUGE))
        assert info.value.sent
        calls_seen = CallsSeen(net)
        calls_seen()
        await anyio.sleep(59.0)  # virtual time
        seen = calls_seen()
        with pytest.raises(sepp.RequestTooLargeError) as info:
            await client.enqueue(job(HUGE))
        assert not info.value.sent and calls_seen() == seen
        # Forgotten: the server may have been restarted with a larger limit, so the next
        # one is sent again (and refused, and the limit learnt again).
        await anyio.sleep(2.0)
        with pytest.raises(sepp.RequestTooLargeError) as info:
            await client.enqueue(job(HUGE))
        assert info.value.sent and calls_seen() == seen + 1
        with pytest.raises(sepp.RequestTooLargeError) as info:
            await client.enqueue(job(HUGE))
        assert not info.value.sent


async def test_remember_message_limit_zero_sends_every_request() -> None:
    async with (
        reference_server() as (net, _engine),
        sepp.connect(net.address, remember_message_limit=0) as client,
    ):
        for _ in range(2):
            with pytest.raises(sepp.RequestTooLargeError) as info:
                await client.enqueue(job(HUGE))
            assert info.value.sent and info.value.code == sepp.StatusCode.OUT_OF_RANGE


@pytest.mark.parametrize("value", [-1.0, float("nan"), float("inf")])
def test_remember_message_limit_is_checked(value: float) -> None:
    with pytest.raises(sepp.InvalidArgumentError, match="remember_message_limit"):
        sepp.connect("127.0.0.1:1", remember_message_limit=value)
