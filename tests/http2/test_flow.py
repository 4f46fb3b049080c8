"""Flow control: when we hand credit back, what a peer may send, and the send windows."""

from __future__ import annotations

import pytest

from sepp_anyio._http2 import (
    Connection,
    ConnectionTerminated,
    DataReceived,
    ErrorCode,
    StreamReset,
    WindowUpdated,
)
from sepp_anyio._http2._flow import InboundWindow, grow

from ._support import REQUEST, RESPONSE, Peer, client, describe, feed, server

MAX = (1 << 31) - 1


def test_inbound_window_policy() -> None:
    window = InboundWindow(100)
    assert window.receive(60)
    assert window.consume(30) == 0
    assert window.consume(30) == 60  # half a window consumed: hand it all back
    assert window.available == 100
    assert not window.receive(101)
    assert window.receive(10)
    # More than was received is clamped: the peer is never granted beyond the window.
    assert window.consume(1000) == 0
    assert window.unacked == 10
    assert window.consume(1000) == 0
    assert window.available + window.unacked == 100


def test_grow() -> None:
    assert grow(10, 5) == 15
    assert grow(MAX - 1, 1) == MAX
    assert grow(MAX, 1) is None


def test_window_update_after_half_a_stream_window() -> None:
    conn = client(stream_window=65535)
    sid = conn.open_stream(REQUEST, end_stream=True)
    conn.data_to_send()
    feed(
        conn,
        Peer().headers(sid, RESPONSE),
        Peer.data(sid, b"x" * 16384),
        Peer.data(sid, b"x" * 16384),
    )
    conn.acknowledge_received_data(16384, sid)
    assert conn.data_to_send() == b""
    conn.acknowledge_received_data(16384, sid)
    assert describe(conn.data_to_send()) == [("WindowUpdate", 1, (), 32768)]


def test_window_update_after_half_the_connection_window() -> None:
    conn = client(stream_window=1 << 20, connection_window=65535)
    sid = conn.open_stream(REQUEST, end_stream=True)
    conn.data_to_send()
    feed(conn, Peer().headers(sid, RESPONSE), *(Peer.data(sid, b"x" * 16384) for _ in range(2)))
    conn.acknowledge_received_data(16384, sid)
    assert conn.data_to_send() == b""
    conn.acknowledge_received_data(16384, sid)
    assert describe(conn.data_to_send()) == [("WindowUpdate", 0, (), 32768)]


def test_acknowledging_more_than_received_grants_nothing_extra() -> None:
    conn = client(stream_window=65535, connection_window=65535)
    sid = conn.open_stream(REQUEST, end_stream=True)
    conn.data_to_send()
    data = [Peer.data(sid, b"x" * 16384), Peer.data(sid, b"x" * 16384), Peer.data(sid, b"x" * 7232)]
    feed(conn, Peer().headers(sid, RESPONSE), *data)
    conn.acknowledge_received_data(1 << 20, sid)
    conn.acknowledge_received_data(1 << 20, sid)
    frames = describe(conn.data_to_send())
    assert frames == [("WindowUpdate", 0, (), 40000), ("WindowUpdate", 1, (), 40000)]


def test_padding_counts_against_the_window() -> None:
    conn = client(stream_window=65535)
    sid = conn.open_stream(REQUEST, end_stream=True)
    conn.data_to_send()
    events = feed(
        conn,
        Peer().headers(sid, RESPONSE),
        *(Peer.data(sid, b"x" * 200, pad=255) for _ in range(143)),
    )
    assert all(not isinstance(event, StreamReset) for event in events)
    # Each frame takes 456 bytes of window: 143 of them fit in 65535, the next does not.
    events = feed(conn, Peer.data(sid, b"x" * 200, pad=255))
    assert [(type(e).__name__, getattr(e, "error_code", None)) for e in events] == [
        ("StreamReset", ErrorCode.FLOW_CONTROL_ERROR)
    ]


def test_data_beyond_the_stream_window_is_a_stream_error() -> None:
    conn = client(stream_window=65535)
    sid = conn.open_stream(REQUEST, end_stream=True)
    conn.data_to_send()
    data = [Peer.data(sid, b"x" * 16384) for _ in range(3)] + [Peer.data(sid, b"x" * 16384)]
    events = feed(conn, Peer().headers(sid, RESPONSE), *data)
    assert isinstance(events[-1], StreamReset)
    assert events[-1].error_code == ErrorCode.FLOW_CONTROL_ERROR
    assert not conn.closed
    assert ("RstStream", 1, (), ErrorCode.FLOW_CONTROL_ERROR) in describe(conn.data_to_send())


def test_data_beyond_the_connection_window_is_a_connection_error() -> None:
    conn = client(stream_window=1 << 20, connection_window=65535)
    sid = conn.open_stream(REQUEST, end_stream=True)
    conn.data_to_send()
    data = [Peer.data(sid, b"x" * 16384) for _ in range(4)]
    events = feed(conn, Peer().headers(sid, RESPONSE), *data)
    assert isinstance(events[-1], ConnectionTerminated)
    assert events[-1].error_code == ErrorCode.FLOW_CONTROL_ERROR


def test_data_nobody_reads_is_refunded_to_the_connection() -> None:
    conn = client(stream_window=65535, connection_window=65535)
    sid = conn.open_stream(REQUEST, end_stream=True)
    conn.reset_stream(sid)
    conn.data_to_send()
    # Far more than the connection window, on a stream we reset: ignored, and refunded.
    for _ in range(10):
        assert feed(conn, Peer.data(sid, b"x" * 16384)) == []
    frames = describe(conn.data_to_send())
    assert frames and all(frame[:2] == ("WindowUpdate", 0) for frame in frames)
    assert sum(frame[3] for frame in frames) >= 10 * 16384 - 32768
    assert not conn.closed


def test_initial_window_size_change_applies_to_open_streams() -> None:
    conn = client()
    sid = conn.open_stream(REQUEST)
    assert conn.send_data(sid, b"x" * 1000) == 1000
    # 65535 -> 0: the stream's window goes to -1000.
    events = conn.receive_data(Peer.settings({4: 0}), 0.0)
    assert conn.send_window(sid) == 0
    assert conn.send_data(sid, b"y") == 0
    assert [type(event).__name__ for event in events] == ["RemoteSettingsChanged"]
    conn.receive_data(Peer.window_update(sid, 1500), 0.0)
    assert conn.send_window(sid) == 500
    # New streams start at the new initial window.
    other = conn.open_stream(REQUEST)
    assert conn.send_window(other) == 0
    conn.receive_data(Peer.settings({4: 70000}), 0.0)
    # The streams are at 70500 and 70000 now; the connection's 64535 is the bound.
    assert conn.send_window(sid) == conn.send_window(other) == 64535


def test_initial_window_size_overflowing_a_stream_is_a_connection_error() -> None:
    conn = client()
    sid = conn.open_stream(REQUEST)
    conn.receive_data(Peer.window_update(sid, MAX - 65535 - 5), 0.0)
    events = conn.receive_data(Peer.settings({4: 65535 + 6}), 0.0)
    assert isinstance(events[-1], ConnectionTerminated)
    assert events[-1].error_code == ErrorCode.FLOW_CONTROL_ERROR
    assert "overflows" in events[-1].reason


def test_window_updated_events_wake_senders() -> None:
    conn = server()
    conn.receive_data(Peer().headers(1, REQUEST, end_stream=True), 0.0)
    conn.send_headers(1, RESPONSE)
    assert conn.send_data(1, b"x" * 70000) == 65535
    events = conn.receive_data(Peer.window_update(0, 10) + Peer.window_update(1, 10), 0.0)
    assert events == [WindowUpdated(0, 10), WindowUpdated(1, 10)]
    assert conn.send_window(1) == 10


@pytest.mark.parametrize("window", [65534, MAX + 1])
def test_window_arguments_are_checked(window: int) -> None:
    with pytest.raises(ValueError, match="stream_window"):
        Connection(client_side=True, stream_window=window)
    with pytest.raises(ValueError, match="connection_window"):
        Connection(client_side=True, connection_window=window)


def test_server_data_flow() -> None:
    conn = server(stream_window=65535, connection_window=65535)
    data = [Peer.data(1, b"x" * 16384), Peer.data(1, b"x" * 16384), Peer.data(1, b"x" * 7232)]
    events = feed(conn, Peer().headers(1, REQUEST), *data)
    assert events[-1] == DataReceived(1, b"x" * 7232, 7232, False)
    for event in events[1:]:
        assert isinstance(event, DataReceived)
        conn.acknowledge_received_data(event.flow_controlled_length, 1)
    assert describe(conn.data_to_send()) == [
        ("WindowUpdate", 0, (), 32768),
        ("WindowUpdate", 1, (), 32768),
    ]
