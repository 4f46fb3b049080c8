"""A slow but live reader is not taken for a stalled one: the write timeout measures
progress, not how long the whole of the queued output takes.

The link is an in-memory byte stream that carries 4 KiB to the client each time the
client pulls, one pull a (virtual) second: a 4 KiB/s link, exactly, on either backend.  A
real socket cannot be paced like this on virtual time: how fast a reader with a tiny
receive buffer drains it depends on the kernel's delayed-ACK timers, which run on real
time.  The server's side is the real :class:`ServedConnection` over a real engine.
"""

from __future__ import annotations

import datetime
from typing import Any

import anyio
import anyio.abc
import pytest
from hyperframe.frame import Frame, HeadersFrame

from sepp_anyio._http2 import Limits
from sepp_anyio._proto.sepp import v1 as pb
from sepp_anyio.server import Engine
from sepp_anyio.server._engine._engine import rpc_of
from sepp_anyio.server._network._netlimits import NetworkLimits
from sepp_anyio.server._network._served import ServedConnection
from sepp_anyio.server._network._service import MessageCodec, QueueService
from tests.http2._support import PREFACE, Peer

from ._harness import GRPC_REQUEST
from ._vclock import VIRTUAL_BACKENDS, virtual_backend

pytestmark = pytest.mark.anyio

PIECE = 4096
PAYLOAD_BYTES = 256 << 10


@pytest.fixture(params=VIRTUAL_BACKENDS)
def anyio_backend(request: pytest.FixtureRequest) -> tuple[str, dict[str, Any]]:
    return virtual_backend(request)


class SlowLink(anyio.abc.ByteStream):
    """The server's end of a link that hands the client ``PIECE`` bytes per pull."""

    def __init__(self) -> None:
        self._to_server, self._inbound = anyio.create_memory_object_stream[bytes](64)
        self._outbound, self.to_client = anyio.create_memory_object_stream[bytes](0)

    async def feed(self, data: bytes) -> None:
        """The client sends ``data``."""
        await self._to_server.send(data)

    async def receive(self, max_bytes: int = 65536) -> bytes:
        try:
            return await self._inbound.receive()
        except anyio.ClosedResourceError:
            raise anyio.EndOfStream from None

    async def send(self, item: bytes) -> None:
        for start in range(0, len(item), PIECE):
            await self._outbound.send(item[start : start + PIECE])

    async def send_eof(self) -> None:
        await self._outbound.aclose()

    async def aclose(self) -> None:
        await self._outbound.aclose()
        await self._inbound.aclose()
        await self._to_server.aclose()


def _frames(buffer: bytearray) -> list[Frame]:
    frames = []
    view = bytes(buffer)
    offset = 0
    while len(view) - offset >= 9:
        length = int.from_bytes(view[offset : offset + 3], "big")
        if len(view) - offset < 9 + length:
            break
        frame, _ = Frame.parse_frame_header(memoryview(view[offset : offset + 9]))
        frame.parse_body(memoryview(view[offset + 9 : offset + 9 + length]))
        frames.append(frame)
        offset += 9 + length
    return frames


async def test_slow_reader_is_not_cut_by_the_write_timeout() -> None:
    """Eight Reserve replies of 256 KiB (2 MiB) over a 4 KiB/s link take over 8 minutes,
    far beyond the 30 s write timeout; bytes keep moving, so the connection stays and
    every reply arrives.  (Keepalive and idle are off: the client here only reads.)"""
    calls = 8
    queue = "slow-link"
    job = pb.EnqueueRequest(
        queue=queue, job_type="t", payload=pb.Payload(data=b"x" * PAYLOAD_BYTES, encoding="b")
    )
    async with Engine() as engine, anyio.create_task_group() as tg:
        await rpc_of(engine).enqueue_batch(pb.EnqueueBatchRequest(jobs=[job] * calls))
        link = SlowLink()
        connection = ServedConnection(
            link,
            routes=QueueService(engine).routes(),
            codec=MessageCodec(engine.config.limits.max_message_bytes),
            limits=Limits(),
            net=NetworkLimits(ping_after=0.0, idle_timeout=0.0),
        )
        tg.start_soon(connection.run)
        peer = Peer()
        window = (1 << 31) - 1
        reserve = bytes(
            pb.ReserveRequest(
                queues=[queue], max_jobs=1, lease_duration=datetime.timedelta(minutes=30)
            )
        )
        body = b"\x00" + len(reserve).to_bytes(4, "big") + reserve
        await link.feed(
            PREFACE
            + Peer.settings({0x4: window})  # SETTINGS_INITIAL_WINDOW_SIZE
            + Peer.settings(ack=True)
            + Peer.window_update(0, window - 65_535)
            + b"".join(
                peer.headers(2 * i + 1, GRPC_REQUEST("/sepp.v1.QueueService/Reserve"))
                + Peer.data(2 * i + 1, body, end_stream=True)
                for i in range(calls)
            )
        )
        started = anyio.current_time()
        received = bytearray()
        ended: list[Frame] = []
        for _ in range(2 * calls * PAYLOAD_BYTES // PIECE):
            await anyio.sleep(1.0)  # the link's pace: a piece a second
            try:
                received += await link.to_client.receive()
            except anyio.EndOfStream:
                break
            ended = [
                f
                for f in _frames(received)
                if isinstance(f, HeadersFrame) and "END_STREAM" in f.flags
            ]
            if len(ended) == calls:
                break
        took = anyio.current_time() - started
        assert connection.ended_by is None
        assert len(ended) == calls
        assert took > calls * PAYLOAD_BYTES / PIECE  # a piece a second, all the way
        tg.cancel_scope.cancel()
    await link.to_client.aclose()
