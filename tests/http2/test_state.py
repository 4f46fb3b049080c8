"""The per-stream state machine, and the memory of streams we reset."""

from __future__ import annotations

import itertools

import pytest

from sepp_anyio._http2._closed import ResetStreams
from sepp_anyio._http2._errors import LocalProtocolError
from sepp_anyio._http2._stream import TRANSITIONS, Input, State, Stream

from ._support import REQUEST, RESPONSE, TRAILERS, Peer, client, describe, feed, server

# A path through the table from idle to each state (the table is the only way to set one).
_PATHS = {
    State.IDLE: (),
    State.OPEN: (Input.SEND_HEADERS,),
    State.HALF_CLOSED_LOCAL: (Input.SEND_HEADERS, Input.SEND_END_STREAM),
    State.HALF_CLOSED_REMOTE: (Input.RECV_HEADERS, Input.RECV_END_STREAM),
    State.CLOSED: (Input.SEND_HEADERS, Input.SEND_RST),
}


def _at(state: State) -> Stream:
    stream = Stream(1, 0, 0)
    for what in _PATHS[state]:
        stream.apply(what)
    assert stream.state == state
    return stream


def test_every_pair_follows_the_table() -> None:
    for state, what in itertools.product(State, Input):
        stream = _at(state)
        expected = TRANSITIONS.get((state, what))
        assert stream.advance(what) is (expected is not None)
        now = expected if expected is not None else state
        assert stream.state == now
        # The two flags follow the state, whatever the path.
        assert stream.open_for_sending is (now in (State.OPEN, State.HALF_CLOSED_REMOTE))
        assert stream.open_for_receiving is (now in (State.OPEN, State.HALF_CLOSED_LOCAL))


def test_apply_raises_where_advance_refuses() -> None:
    for state, what in itertools.product(State, Input):
        stream = _at(state)
        expected = TRANSITIONS.get((state, what))
        if expected is None:
            with pytest.raises(LocalProtocolError, match=f"{what.name} not allowed in"):
                stream.apply(what)
            assert stream.state == state
        else:
            assert stream.apply(what) == expected == stream.state


def test_rfc_9113_paths() -> None:
    # A client's unary call: idle -> open -> half-closed (local) -> closed.
    stream = Stream(1, 0, 0)
    for what, state in [
        (Input.SEND_HEADERS, State.OPEN),
        (Input.SEND_DATA, State.OPEN),
        (Input.SEND_END_STREAM, State.HALF_CLOSED_LOCAL),
        (Input.RECV_HEADERS, State.HALF_CLOSED_LOCAL),
        (Input.RECV_DATA, State.HALF_CLOSED_LOCAL),
        (Input.RECV_END_STREAM, State.CLOSED),
    ]:
        assert stream.advance(what)
        assert stream.state == state
    # The server's side of it.
    stream = Stream(1, 0, 0)
    for what, state in [
        (Input.RECV_HEADERS, State.OPEN),
        (Input.RECV_END_STREAM, State.HALF_CLOSED_REMOTE),
        (Input.SEND_HEADERS, State.HALF_CLOSED_REMOTE),
        (Input.SEND_END_STREAM, State.CLOSED),
    ]:
        assert stream.advance(what)
        assert stream.state == state
    # Nothing leaves closed; sending after our END_STREAM is refused.
    assert not any(stream.advance(what) for what in Input)
    stream = _at(State.HALF_CLOSED_LOCAL)
    assert not stream.advance(Input.SEND_DATA)
    assert not stream.advance(Input.SEND_HEADERS)
    # A reset closes any open state.
    for state in (State.OPEN, State.HALF_CLOSED_LOCAL, State.HALF_CLOSED_REMOTE):
        for what in (Input.SEND_RST, Input.RECV_RST):
            stream = _at(state)
            assert stream.advance(what) and stream.state == State.CLOSED


def test_streams_leave_the_connection_when_closed() -> None:
    conn = client()
    peer = Peer()
    sid = conn.open_stream(REQUEST, end_stream=True)
    assert repr(conn._streams[sid]) == "<Stream 1 HALF_CLOSED_LOCAL>"
    feed(conn, peer.headers(sid, RESPONSE), peer.headers(sid, TRAILERS, end_stream=True))
    assert conn.open_streams == 0
    srv = server()
    feed(srv, Peer().headers(1, REQUEST), Peer.data(1, b"", end_stream=True))
    assert srv.open_streams == 1
    srv.send_headers(1, RESPONSE)
    srv.send_headers(1, TRAILERS, end_stream=True)
    assert srv.open_streams == 0
    # Until released, the request still counts against MAX_CONCURRENT_STREAMS.
    assert srv.active_requests == 1
    srv.release_stream(1)
    srv.release_stream(1)
    assert srv.active_requests == 0


def test_reset_memory_is_bounded_in_time_and_number() -> None:
    resets = ResetStreams(ttl=1.0, limit=3)
    for stream_id in (1, 3, 5, 7):
        resets.add(stream_id, 100)
    assert 1 not in resets and len(resets) == 3
    resets.stamp(10.0)
    resets.add(9, 100)
    resets.stamp(10.5)
    assert [(sid, entry[0]) for sid, entry in resets.ids.items()] == [
        (5, 10.0),
        (7, 10.0),
        (9, 10.5),
    ]
    resets.stamp(11.2)
    assert 5 not in resets and 9 in resets
    resets.stamp(12.0)
    assert len(resets) == 0


def test_late_frames_on_a_reset_stream_ignored_then_forgotten() -> None:
    conn = client()
    sid = conn.open_stream(REQUEST)
    conn.reset_stream(sid)
    conn.data_to_send()
    assert conn.receive_data(Peer.data(sid, b"late"), 100.0) == []
    assert conn.data_to_send() == b""
    assert conn.receive_data(Peer.data(sid, b"late"), 100.9) == []
    assert conn.remembered_resets == 1
    # More than a second later: forgotten, so a frame on it is the peer's error again.
    assert conn.receive_data(Peer.data(sid, b"late"), 101.5) == []
    assert conn.remembered_resets == 1  # the RST_STREAM(STREAM_CLOSED) we just sent
    assert describe(conn.data_to_send()) == [("RstStream", 1, (), 5)]


def test_reset_memory_knows_what_was_in_flight() -> None:
    resets = ResetStreams(ttl=1.0, limit=10)
    resets.add(1, 100)
    assert resets.late_data(3, 10) is None
    assert resets.late_data(1, 60) is True
    assert resets.late_data(1, 40) is True
    assert resets.late_data(1, 1) is False
    assert resets.late_headers(1) is True
    assert resets.late_headers(1) is True
    assert resets.late_headers(1) is False


def test_cancelled_calls_with_responses_in_flight_cost_no_glitches() -> None:
    """300 calls cancelled with a 64 KiB response each still arriving: no glitch."""
    conn = client(stream_window=65535, connection_window=(1 << 31) - 1, settings={3: 1000})
    peer = Peer()
    sids = [conn.open_stream(REQUEST, end_stream=True) for _ in range(300)]
    for sid in sids:
        conn.reset_stream(sid)
    for sid in sids:
        late = peer.headers(sid, RESPONSE) + b"".join(
            Peer.data(sid, b"x" * 16383) for _ in range(4)
        )
        late += peer.headers(sid, TRAILERS, end_stream=True)
        assert conn.receive_data(late, 0.0) == []
    assert conn.glitch_budget == 1000
    assert not conn.closed
    # Beyond what was in flight, it is abuse again.
    conn.receive_data(Peer.data(sids[-1], b"x" * 100), 0.0)
    assert conn.glitch_budget == 999
