"""h2spec's cases that the reference server failed (issue #29), end to end: a raw HTTP/2
client (``_harness.Attacker``) against the server over loopback, on both backends.

The codec's own tests (``tests/http2/test_h2spec.py``) cover both roles frame by frame;
these show that the server as it runs (its calls, its flushes, its reading) answers the
same way. Every wait is bounded by a deadline.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
from hyperframe.frame import DataFrame, Frame, GoAwayFrame, HeadersFrame, RstStreamFrame

from tests.http2._support import Peer

from ._harness import GRPC_REQUEST, Attacker, hostile_server

pytestmark = pytest.mark.anyio

SERVER_INFO = GRPC_REQUEST()
#: A gRPC message frame holding an empty GetServerInfoRequest.
EMPTY_MESSAGE = b"\x00\x00\x00\x00\x00"
PROTOCOL_ERROR, STREAM_CLOSED = 0x1, 0x5
WAIT = 10.0


async def _read_until(attacker: Attacker, found: Callable[[Frame], bool]) -> Frame:
    """The first frame the server sent for which ``found`` holds (within ``WAIT``)."""
    deadline = time.monotonic() + WAIT
    while True:
        for frame in attacker.frames:
            if found(frame):
                return frame
        left = deadline - time.monotonic()
        assert left > 0, f"not found in {WAIT}s: {attacker.frames}"
        assert await attacker.read(left), f"EOF before it came: {attacker.frames}"


def _ends(stream_id: int) -> Callable[[Frame], bool]:
    return lambda f: (
        isinstance(f, HeadersFrame | DataFrame)
        and f.stream_id == stream_id
        and "END_STREAM" in f.flags
    )


async def _call(attacker: Attacker, stream_id: int) -> None:
    """A GetServerInfo call on ``stream_id``, read to its end."""
    await attacker.send(
        attacker.peer.headers(stream_id, SERVER_INFO)
        + Peer.data(stream_id, EMPTY_MESSAGE, end_stream=True)
    )
    await _read_until(attacker, _ends(stream_id))


async def _goaway(attacker: Attacker) -> GoAwayFrame:
    frame = await _read_until(attacker, lambda f: isinstance(f, GoAwayFrame) and f.error_code != 0)
    assert isinstance(frame, GoAwayFrame)
    return frame


async def test_6_5_3_1_repeated_initial_window_size() -> None:
    """SETTINGS_INITIAL_WINDOW_SIZE 100 then 1 in one frame: acknowledged, and the reply
    comes one byte per DATA frame. (Before: GOAWAY PROTOCOL_ERROR.)"""
    async with hostile_server() as server, Attacker.connect(server.port) as attacker:
        await attacker.send(Peer.settings_entries([(4, 100), (4, 1)]))
        await attacker.send(
            attacker.peer.headers(1, SERVER_INFO) + Peer.data(1, EMPTY_MESSAGE, end_stream=True)
        )
        data = await _read_until(attacker, lambda f: isinstance(f, DataFrame) and f.stream_id == 1)
        assert isinstance(data, DataFrame) and len(data.data) == 1
        assert not any(isinstance(f, GoAwayFrame) for f in attacker.frames)
        # One more byte per WINDOW_UPDATE.
        await attacker.send(Peer.window_update(1, 1))
        await _read_until(
            attacker, lambda f: isinstance(f, DataFrame) and f.stream_id == 1 and f is not data
        )


async def test_5_1_12_headers_on_a_stream_both_sides_ended() -> None:
    """A call to its end, then HEADERS on its stream: GOAWAY(STREAM_CLOSED). (Before:
    RST_STREAM and the connection kept.)"""
    async with hostile_server() as server, Attacker.connect(server.port) as attacker:
        await _call(attacker, 1)
        await attacker.send(attacker.peer.headers(1, SERVER_INFO, end_stream=True))
        goaway = await _goaway(attacker)
        assert goaway.error_code == STREAM_CLOSED
        assert goaway.last_stream_id == 1


async def test_5_1_1_2_a_new_stream_below_the_highest() -> None:
    """HEADERS on stream 5, then on 3: GOAWAY(PROTOCOL_ERROR), last stream 5. (Before:
    RST_STREAM on 3 and the connection kept.)"""
    async with hostile_server() as server, Attacker.connect(server.port) as attacker:
        peer = attacker.peer
        await attacker.send(
            peer.headers(5, SERVER_INFO)
            + Peer.data(5, EMPTY_MESSAGE, end_stream=True)
            + peer.headers(3, SERVER_INFO, end_stream=True)
        )
        goaway = await _goaway(attacker)
        assert goaway.error_code == PROTOCOL_ERROR
        assert goaway.last_stream_id == 5


@pytest.mark.parametrize("via", ["HEADERS", "PRIORITY"])
async def test_5_3_1_a_stream_depending_on_itself(via: str) -> None:
    """5.3.1/1 (HEADERS with the PRIORITY flag) and 5.3.1/2 (a PRIORITY frame) making
    stream 1 depend on itself: RST_STREAM(PROTOCOL_ERROR) on it, and the connection
    serves the next call. (Before: accepted silently.)"""
    async with hostile_server() as server, Attacker.connect(server.port) as attacker:
        if via == "HEADERS":
            frames = attacker.peer.headers(
                1, SERVER_INFO, end_stream=True, priority=True, depends_on=1
            )
        else:
            frames = Peer.priority(1, depends_on=1)
        await attacker.send(frames)
        reset = await _read_until(attacker, lambda f: isinstance(f, RstStreamFrame))
        assert isinstance(reset, RstStreamFrame)
        assert (reset.stream_id, reset.error_code) == (1, PROTOCOL_ERROR)
        await _call(attacker, 3)
        assert not any(isinstance(f, GoAwayFrame) for f in attacker.frames)
        assert not any(isinstance(f, HeadersFrame) and f.stream_id == 1 for f in attacker.frames)
