"""A unary call carries one request message: a second one is answered with INTERNAL.

A raw HTTP/2 peer (``tests/http2/_support``'s scripted frames) sends two length-prefixed
messages on one call to the in-process server, on both backends.  The first message is not
acted on: an ``EnqueueBatch`` followed by a second message enqueues nothing.
"""

from __future__ import annotations

import uuid

import anyio
import pytest
from hyperframe.frame import DataFrame, HeadersFrame

import sepp_anyio as sepp
from sepp_anyio._proto.sepp import v1 as pb
from sepp_anyio._wire._codec import encode
from tests.http2._support import Peer
from tests.server_hostile._harness import GRPC_REQUEST, Attacker, decode_headers, hostile_server

pytestmark = pytest.mark.anyio

SERVER_INFO = "/sepp.v1.QueueService/GetServerInfo"
HEALTH = "/grpc.health.v1.Health/Check"
ENQUEUE = "/sepp.v1.QueueService/EnqueueBatch"
INTERNAL = "13"


def _message(body: bytes = b"") -> bytes:
    return b"\x00" + len(body).to_bytes(4, "big") + body


async def _answer(attacker: Attacker, stream_id: int) -> dict[str, str]:
    """The headers that end ``stream_id`` (trailers, or a trailers-only response)."""
    with anyio.fail_after(5):
        while True:
            for frame in attacker.frames:
                if (
                    isinstance(frame, HeadersFrame)
                    and frame.stream_id == stream_id
                    and "END_STREAM" in frame.flags
                ):
                    return decode_headers(attacker.peer, bytes(frame.data))
            assert await attacker.read(1.0), "the server closed the connection"


def _replied(attacker: Attacker, stream_id: int) -> bool:
    return any(isinstance(f, DataFrame) and f.stream_id == stream_id for f in attacker.frames)


@pytest.mark.parametrize("path", [SERVER_INFO, HEALTH])
@pytest.mark.parametrize("split", ["one frame", "two frames", "one byte more"])
async def test_a_second_message_is_internal(path: str, split: str) -> None:
    async with hostile_server() as server, Attacker.connect(server.port) as attacker:
        headers = attacker.peer.headers(1, GRPC_REQUEST(path))
        if split == "one frame":
            await attacker.send(headers + Peer.data(1, _message() + _message(), end_stream=True))
        elif split == "two frames":
            await attacker.send(headers + Peer.data(1, _message()))
            # Most likely after the server has taken the first message (either way: INTERNAL).
            await attacker.read(0.05)
            await attacker.send(Peer.data(1, _message(), end_stream=True))
        else:
            await attacker.send(headers + Peer.data(1, _message() + b"\x00", end_stream=True))
        answer = await _answer(attacker, 1)
        assert answer["grpc-status"] == INTERNAL, answer
        assert "second" in answer["grpc-message"]
        assert not _replied(attacker, 1)
        # The connection goes on: the same call with one message is served.
        await attacker.send(
            attacker.peer.headers(3, GRPC_REQUEST(path)) + Peer.data(3, _message(), end_stream=True)
        )
        answer = await _answer(attacker, 3)
        assert answer["grpc-status"] == "0", answer
        assert _replied(attacker, 3)


async def test_the_first_message_is_not_acted_on() -> None:
    """EnqueueBatch + a second message: INTERNAL, and no job was enqueued."""
    queue = f"second-{uuid.uuid4().hex[:8]}"
    batch = encode(pb.EnqueueBatchRequest(jobs=[pb.EnqueueRequest(queue=queue, job_type="t")]))
    async with hostile_server() as server, Attacker.connect(server.port) as attacker:
        await attacker.send(
            attacker.peer.headers(1, GRPC_REQUEST(ENQUEUE))
            + Peer.data(1, _message(batch) + _message(batch), end_stream=True)
        )
        answer = await _answer(attacker, 1)
        assert answer["grpc-status"] == INTERNAL, answer
        async with sepp.connect(server.address) as client:
            assert await client.reserve([queue], lease=5.0, wait=0.0) == []
            # Sent once, the same batch is enqueued (the request itself is fine).
            await attacker.send(
                attacker.peer.headers(3, GRPC_REQUEST(ENQUEUE))
                + Peer.data(3, _message(batch), end_stream=True)
            )
            assert (await _answer(attacker, 3))["grpc-status"] == "0"
            assert len(await client.reserve([queue], lease=5.0, wait=0.0)) == 1
