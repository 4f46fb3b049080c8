"""How a connection's writes leave: requests started together share a write, and a write
the kernel does not take at once is finished, on both backends, against scripted peers.
"""

from __future__ import annotations

import threading
from datetime import UTC, datetime
from typing import Any

import anyio
import anyio.to_thread
import h2.connection
import h2.events
import pytest
from h2.settings import SettingCodes

from sepp_anyio._proto.sepp import v1 as pb
from sepp_anyio._transport import UNARY_UNARY, Channel
from tests.support.servers import RawH2Server, Send

pytestmark = pytest.mark.anyio

MAX_WINDOW = 2**31 - 1
GRPC_HEADERS = [(":status", "200"), ("content-type", "application/grpc")]
# Far more than the kernel buffers between two sockets on loopback while the reader does
# not read (tcp_wmem and the receive window then stay at a few MiB at most).
BIG_BODY = 24 * 2**20


def _reply_body() -> bytes:
    info = bytes(pb.GetServerInfoResponse(server_version="v", server_time=datetime.now(UTC)))
    return b"\x00" + len(info).to_bytes(4, "big") + info


def _answering_at_end(blocked: threading.Event, release: threading.Event) -> Any:
    """A peer with windows as large as HTTP/2 allows that stops reading at the first
    request's headers until ``release`` (``blocked`` says it has stopped), and answers a
    request once the whole of it has arrived."""
    body = _reply_body()
    widened = threading.Event()

    def handler(conn: h2.connection.H2Connection, event: h2.events.Event, send: Send) -> None:
        if not widened.is_set():
            # The connection's window from the default 65,535 bytes to the largest.
            widened.set()
            conn.increment_flow_control_window(MAX_WINDOW - 65_535)
        if isinstance(event, h2.events.RequestReceived) and not blocked.is_set():
            blocked.set()
            release.wait(30)
        elif isinstance(event, h2.events.StreamEnded):
            assert event.stream_id is not None
            conn.send_headers(event.stream_id, GRPC_HEADERS)
            conn.send_data(event.stream_id, body)
            conn.send_headers(event.stream_id, [("grpc-status", "0")], end_stream=True)
        send()

    return handler


async def test_a_request_larger_than_the_kernel_takes_at_once_is_written_whole() -> None:
    """Regression: a request whose bytes the kernel did not take at once (the peer's
    windows are large, it reads slowly) kept the rest with the stream, and the call's
    flush returned without writing it: the request never ended, and on trio the call
    waited for its reply for ever."""
    blocked, release = threading.Event(), threading.Event()
    reply: Any = None
    settings = {SettingCodes.INITIAL_WINDOW_SIZE: MAX_WINDOW}
    with RawH2Server(_answering_at_end(blocked, release), settings=settings) as raw:
        try:
            async with Channel("127.0.0.1", raw.port) as channel:

                async def call() -> None:
                    nonlocal reply
                    stream = channel.request(
                        "/sepp.v1.QueueService/Ack",
                        UNARY_UNARY,
                        pb.AckRequest,
                        pb.GetServerInfoResponse,
                        timeout=60,
                    )
                    async with stream:
                        await stream.send_message(
                            pb.AckRequest(job_id="x" * BIG_BODY, attempt=1), end=True
                        )
                        reply = await stream.recv_message()

                with anyio.fail_after(30):
                    async with anyio.create_task_group() as tg:
                        tg.start_soon(call)
                        # The peer reads the headers, then nothing until released: the
                        # client's write is left with most of the body.
                        await anyio.to_thread.run_sync(blocked.wait, 30)
                        release.set()
        finally:
            release.set()
    assert isinstance(reply, pb.GetServerInfoResponse)
    assert reply.server_version == "v"


def _answering_each(seen: list[int], first: threading.Event) -> Any:
    """A peer that answers every request but the first, once it has arrived whole
    (``first`` is set when that one has arrived)."""
    body = _reply_body()

    def handler(conn: h2.connection.H2Connection, event: h2.events.Event, send: Send) -> None:
        if isinstance(event, h2.events.RequestReceived):
            assert event.stream_id is not None
            seen.append(event.stream_id)
            first.set()
        elif isinstance(event, h2.events.StreamEnded):
            assert event.stream_id is not None
            if event.stream_id != 1:  # the first call is left waiting
                conn.send_headers(event.stream_id, GRPC_HEADERS)
                conn.send_data(event.stream_id, body)
                conn.send_headers(event.stream_id, [("grpc-status", "0")], end_stream=True)
        elif isinstance(event, h2.events.DataReceived) and event.stream_id is not None:
            conn.acknowledge_received_data(event.flow_controlled_length or 0, event.stream_id)
        send()

    return handler


async def test_requests_started_together_leave_in_one_write() -> None:
    """With another call in flight, the requests of calls started in the same turn of the
    event loop (a worker acking a burst of jobs) leave in one write, not one each."""
    seen: list[int] = []
    first = threading.Event()
    calls = 16
    with RawH2Server(_answering_each(seen, first)) as raw:
        async with Channel("127.0.0.1", raw.port) as channel:
            stub = pb.QueueServiceStub(channel)
            await channel.connect()
            conn = channel.ready_connection()
            assert conn is not None
            writes: list[int] = []
            stream = conn._stream
            write_now = stream.write_now  # type: ignore[attr-defined]

            def counted(data: bytes) -> bool:
                writes.append(len(data))
                ok: bool = write_now(data)
                return ok

            stream.write_now = counted  # type: ignore[attr-defined]
            replies: list[Any] = []
            with anyio.fail_after(10):
                async with anyio.create_task_group() as tg:
                    # The first call stays in flight (the peer never answers it).
                    tg.start_soon(stub.get_server_info, pb.GetServerInfoRequest())
                    assert await anyio.to_thread.run_sync(first.wait, 5)
                    before = len(writes)

                    async def one() -> None:
                        replies.append(await stub.get_server_info(pb.GetServerInfoRequest()))

                    async with anyio.create_task_group() as burst:
                        for _ in range(calls):
                            burst.start_soon(one)
                    tg.cancel_scope.cancel()
    assert len(replies) == calls
    # The burst's requests, then the acknowledgements of what their replies carried.
    burst_writes = writes[before:]
    assert burst_writes, writes
    assert len(burst_writes) <= 1 + calls // 2, burst_writes
    assert sum(1 for size in burst_writes if size > 200) == 1, burst_writes
