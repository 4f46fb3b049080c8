"""h2spec's cases that the codec failed (issue #29), by their ids, in both roles.

h2spec checks a server; each case is also played the other way round where it applies,
with a scripted server against our client (the client must not accept from a server
what the server refuses from a client). Around each case, the neighbouring situations
that must keep their old answer: late frames on a stream we reset stay ignored, a
stream error stays a stream error where RFC 9113 says so.

* http2/6.5.3/1: a SETTINGS frame may repeat an identifier; its values are processed in
  order, the last one wins, and each SETTINGS_INITIAL_WINDOW_SIZE moves the windows by
  its difference from the one before.
* http2/5.1/11 and 5.1/12: DATA or HEADERS on a stream both sides ended with END_STREAM
  is a connection error of type STREAM_CLOSED (section 5.1, "closed").
* http2/5.1.1/2: a new stream below one already opened is a connection error of type
  PROTOCOL_ERROR (section 5.1.1).
* http2/5.3.1/1 and 5.3.1/2: a HEADERS frame with the PRIORITY flag, or a PRIORITY frame,
  making a stream depend on itself is a stream error of type PROTOCOL_ERROR (RFC 7540
  section 5.3.1).
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from sepp_anyio._http2 import (
    Connection,
    DataReceived,
    ErrorCode,
    Limits,
    RemoteSettingsChanged,
    RequestReceived,
    ResponseReceived,
)

from ._support import REQUEST, RESPONSE, TRAILERS, Peer, client, describe, feed, raw, server
from .test_client_frames import blank, goaway, reasons, reset, rst, terminated

E = ErrorCode
REQ = tuple(REQUEST)
RESP = tuple(RESPONSE)
MAX_WINDOW = (1 << 31) - 1


def _served(conn: Connection, stream_id: int) -> None:
    """Our server answers ``stream_id`` completely (headers, then trailers)."""
    conn.send_headers(stream_id, RESPONSE)
    conn.send_headers(stream_id, TRAILERS, end_stream=True)
    conn.release_stream(stream_id)
    conn.data_to_send()


# ------------------------------------------------------------------ http2/6.5.3/1


def test_6_5_3_1_server_takes_a_repeated_setting_in_order() -> None:
    """h2spec: INITIAL_WINDOW_SIZE 100, then 1, then a request: the response's DATA
    comes one byte at a time. Before the fix: GOAWAY(PROTOCOL_ERROR, "SETTINGS frame
    repeats identifier 0x4")."""
    conn = server()
    events = feed(conn, Peer.settings_entries([(4, 100), (4, 1)]))
    assert events == [RemoteSettingsChanged({4: 1})]
    assert describe(conn.data_to_send()) == [("Settings", 0, ("ACK",), {})]
    feed(conn, Peer().headers(1, REQUEST, end_stream=True))
    conn.send_headers(1, RESPONSE)
    assert conn.send_data(1, b"hello") == 1
    assert [frame for frame in describe(conn.data_to_send()) if frame[0] == "Data"] == [
        ("Data", 1, (), b"h")
    ]
    assert not conn.closed


def test_6_5_3_1_client_takes_a_repeated_setting_in_order() -> None:
    """The same from a server: the open stream's send window goes 65,535 -> 100 -> 1."""
    conn = client()
    sid = conn.open_stream(REQUEST)
    conn.data_to_send()
    events = feed(conn, Peer.settings_entries([(4, 100), (3, 7), (4, 1), (3, 9)]))
    assert events == [RemoteSettingsChanged({4: 1, 3: 9})]
    assert conn.send_window(sid) == 1
    assert conn.peer_max_concurrent_streams == 9
    assert describe(conn.data_to_send()) == [("Settings", 0, ("ACK",), {})]


@pytest.mark.parametrize("client_side", [True, False])
def test_6_5_3_repeated_initial_window_overflows_on_the_way(client_side: bool) -> None:
    """Processed in order, a value that would take a window past 2**31 - 1 is a
    FLOW_CONTROL_ERROR even if a later value in the same frame brings it back (the net
    change would be 0); a peak that fits is applied and undone."""
    for peak, code in ((65535 + 60, E.FLOW_CONTROL_ERROR), (65535 + 50, None)):
        if client_side:
            conn = client()
            sid = conn.open_stream(REQUEST)
        else:
            conn = server()
            sid = 1
            feed(conn, Peer().headers(1, REQUEST))
        feed(conn, Peer.window_update(sid, MAX_WINDOW - 65535 - 50))
        assert conn.send_window(sid) == 65535  # (the connection's window is 65,535)
        events = feed(conn, Peer.settings_entries([(4, peak), (4, 65535)]))
        if code is None:
            assert events == [RemoteSettingsChanged({4: 65535})]
            assert conn._streams[sid].send_window == MAX_WINDOW - 50
        else:
            assert blank(events) == [terminated(code, 0 if client_side else 1)]


def test_the_number_of_settings_entries_stays_bounded() -> None:
    """The defence kept: more than ``max_settings_entries`` entries, repeats or not."""
    conn = client(Limits(max_settings_entries=4))
    events = feed(conn, Peer.settings_entries([(4, 100)] * 5))
    assert blank(events) == [terminated(E.ENHANCE_YOUR_CALM)]
    assert "5 entries" in reasons(events)


# ------------------------------------------------------------------ http2/5.1/11, 5.1/12


@pytest.mark.parametrize(
    "late",
    [
        pytest.param(lambda p: p.headers(1, REQUEST, end_stream=True), id="5.1-12-headers"),
        pytest.param(lambda p: p.data(1, b"test", end_stream=True), id="5.1-11-data"),
    ],
)
def test_5_1_server_frame_on_a_stream_both_sides_ended(late: Callable[[Peer], bytes]) -> None:
    """h2spec: a request with END_STREAM, its response to the end, then HEADERS (or
    DATA) on it again: GOAWAY(STREAM_CLOSED). Before the fix: RST_STREAM(STREAM_CLOSED),
    the connection open."""
    conn = server()
    peer = Peer()
    assert feed(conn, peer.headers(1, REQUEST, end_stream=True)) == [RequestReceived(1, REQ, True)]
    _served(conn, 1)
    events = feed(conn, late(peer))
    assert blank(events) == [terminated(E.STREAM_CLOSED, 1)]
    assert "both sides ended" in reasons(events)
    assert describe(conn.data_to_send()) == [goaway(E.STREAM_CLOSED, 1)]
    assert conn.closed


def test_5_1_12_client_headers_on_a_stream_both_sides_ended() -> None:
    """A server sending HEADERS on a call that completed: GOAWAY(STREAM_CLOSED)."""
    conn = client()
    peer = Peer()
    sid = conn.open_stream(REQUEST, end_stream=True)
    feed(conn, peer.headers(sid, RESPONSE), peer.headers(sid, TRAILERS, end_stream=True))
    conn.data_to_send()
    events = feed(conn, peer.headers(sid, TRAILERS, end_stream=True))
    assert blank(events) == [terminated(E.STREAM_CLOSED)]
    assert describe(conn.data_to_send()) == [goaway(E.STREAM_CLOSED)]
    assert conn.closed


def test_5_1_late_trailers_on_a_stream_we_reset_stay_ignored() -> None:
    """Section 5.1: frames on a stream *we* reset are ignored (minimally processed), in
    both roles: the client cancelled while the server's trailers were on their way; the
    server reset a request whose client was still sending."""
    conn = client()
    peer = Peer()
    sid = conn.open_stream(REQUEST, end_stream=True)
    conn.reset_stream(sid)
    conn.data_to_send()
    assert (
        feed(conn, peer.headers(sid, RESPONSE), peer.headers(sid, TRAILERS, end_stream=True)) == []
    )
    assert conn.data_to_send() == b"" and not conn.closed

    srv = server()
    peer = Peer()
    feed(srv, peer.headers(1, REQUEST), peer.data(1, b"x"))
    srv.reset_stream(1, E.NO_ERROR)
    srv.data_to_send()
    assert feed(srv, peer.data(1, b"y"), peer.headers(1, TRAILERS, end_stream=True)) == []
    assert srv.data_to_send() == b"" and not srv.closed
    # Later streams are served as before.
    assert feed(srv, peer.headers(3, REQUEST, end_stream=True)) == [RequestReceived(3, REQ, True)]


@pytest.mark.parametrize("client_side", [True, False])
def test_5_1_headers_after_the_peers_reset_is_a_stream_error(client_side: bool) -> None:
    """Section 5.1: a frame after the peer's own RST_STREAM is a stream error
    (STREAM_CLOSED); the connection goes on."""
    peer = Peer()
    if client_side:
        conn = client()
        sid = conn.open_stream(REQUEST)
        conn.data_to_send()
        feed(conn, peer.headers(sid, RESPONSE))
        late = peer.headers(sid, TRAILERS, end_stream=True)
    else:
        conn = server()
        sid = 1
        feed(conn, peer.headers(sid, REQUEST))
        late = peer.headers(sid, TRAILERS, end_stream=True)
    assert blank(feed(conn, Peer.rst(sid, 8))) == [reset(sid, E.CANCEL, remote=True)]
    assert feed(conn, late) == []
    assert describe(conn.data_to_send()) == [rst(sid, E.STREAM_CLOSED)]
    assert not conn.closed


def test_5_1_client_keeps_its_tolerance_for_streams_it_forgot() -> None:
    """Every odd id below the client's next one is a stream it opened: HEADERS on one it
    no longer remembers (reset more than ``reset_memory_seconds`` ago, say: late
    trailers on a slow link) get RST_STREAM(STREAM_CLOSED), not the connection."""
    conn = client(Limits(reset_memory_seconds=1.0))
    peer = Peer()
    sid = conn.open_stream(REQUEST, end_stream=True)
    conn.reset_stream(sid)
    conn.data_to_send()
    conn.receive_data(Peer.ping(), 0.0)
    conn.data_to_send()
    events = conn.receive_data(peer.headers(sid, TRAILERS, end_stream=True), 5.0)
    assert events == []
    assert describe(conn.data_to_send()) == [rst(sid, E.STREAM_CLOSED)]
    assert not conn.closed


# ------------------------------------------------------------------ http2/5.1.1/2


def test_5_1_1_2_server_new_stream_below_the_highest() -> None:
    """h2spec: HEADERS on 5, then HEADERS on 3: GOAWAY(PROTOCOL_ERROR, last stream 5).
    Before the fix: RST_STREAM(STREAM_CLOSED) on 3, the connection open."""
    conn = server()
    peer = Peer()
    events = feed(
        conn,
        peer.headers(5, REQUEST, end_stream=True) + peer.headers(3, REQUEST, end_stream=True),
    )
    assert blank(events) == [RequestReceived(5, REQ, True), terminated(E.PROTOCOL_ERROR, 5)]
    assert "stream ids must increase" in reasons(events)
    assert describe(conn.data_to_send()) == [goaway(E.PROTOCOL_ERROR, 5)]


@pytest.mark.parametrize(
    ("stream_id", "code"),
    [
        pytest.param(9, E.STREAM_CLOSED, id="remembered, ended normally (5.1/12)"),
        pytest.param(5, E.PROTOCOL_ERROR, id="forgotten"),
        pytest.param(3, E.PROTOCOL_ERROR, id="never opened"),
        pytest.param(1, E.PROTOCOL_ERROR, id="never opened, the lowest"),
    ],
)
def test_5_1_1_2_server_headers_below_the_highest(stream_id: int, code: ErrorCode) -> None:
    """Streams 5, 7, 9 served to the end, two of them remembered: HEADERS on a lower or
    equal id is a connection error either way; only a stream known to have ended
    normally is STREAM_CLOSED. The highest stream id decides; nothing is kept per
    stream beyond the bounded memory."""
    conn = server(Limits(reset_memory_streams=2))
    peer = Peer()
    for sid in (5, 7, 9):
        feed(conn, peer.headers(sid, REQUEST, end_stream=True))
        _served(conn, sid)
    events = feed(conn, peer.headers(stream_id, REQUEST, end_stream=True))
    assert blank(events) == [terminated(code, 9)]
    assert conn.closed


def test_5_1_1_client_refuses_streams_a_server_opens() -> None:
    """The client role: a server cannot open streams (push is off): HEADERS on an even
    id, a PUSH_PROMISE, or HEADERS on an odd id the client never used are connection
    errors (PROTOCOL_ERROR). (Regression guards: these held before the fix.)"""
    frames: Callable[[Peer], bytes]
    for frames in (
        lambda p: p.headers(2, RESPONSE),
        lambda p: p.headers(5, RESPONSE),
        lambda p: raw(0x5, 0x4, 1, b"\0\0\0\x02\x88"),
    ):
        conn = client()
        conn.open_stream(REQUEST, end_stream=True)
        conn.open_stream(REQUEST, end_stream=True)
        conn.data_to_send()
        events = feed(conn, frames(Peer()))
        assert blank(events)[-1:] == [terminated(E.PROTOCOL_ERROR)]
        assert conn.closed


# ------------------------------------------------------------------ http2/5.3.1/1, 5.3.1/2


def test_5_3_1_1_server_headers_depending_on_itself() -> None:
    """h2spec: a request whose HEADERS (PRIORITY flag) make stream 1 depend on itself:
    RST_STREAM(PROTOCOL_ERROR), never handed over; the connection goes on. Before the
    fix: the request was served."""
    conn = server()
    peer = Peer()
    events = feed(conn, peer.headers(1, REQUEST, end_stream=True, priority=True, depends_on=1))
    assert events == []
    assert describe(conn.data_to_send()) == [rst(1, E.PROTOCOL_ERROR)]
    assert not conn.closed and conn.active_requests == 0
    # The HPACK state stayed in step, and the next request is served.
    assert feed(conn, peer.headers(3, REQUEST, end_stream=True)) == [RequestReceived(3, REQ, True)]
    # Depending on another stream is fine.
    assert feed(conn, peer.headers(5, REQUEST, priority=True, depends_on=3)) == [
        RequestReceived(5, REQ, False)
    ]


def test_5_3_1_1_server_headers_depending_on_itself_across_continuation() -> None:
    """The same with the header block in HEADERS + CONTINUATION, and on trailers."""
    conn = server()
    peer = Peer()
    block = peer.block(REQUEST)
    frames = Peer.headers_block(
        1, block[:3], end_stream=True, end_headers=False, priority=True, depends_on=1
    ) + Peer.continuation(1, block[3:])
    assert feed(conn, frames) == []
    assert describe(conn.data_to_send()) == [rst(1, E.PROTOCOL_ERROR)]
    feed(conn, peer.headers(3, REQUEST))
    events = feed(conn, peer.headers(3, TRAILERS, end_stream=True, priority=True, depends_on=3))
    assert blank(events) == [reset(3, E.PROTOCOL_ERROR)]
    assert "depend on itself" in reasons(events)
    assert describe(conn.data_to_send()) == [rst(3, E.PROTOCOL_ERROR)]
    assert not conn.closed


def test_5_3_1_1_client_response_depending_on_itself() -> None:
    """A server's response HEADERS making the stream depend on itself: the call's stream
    is reset (PROTOCOL_ERROR); other calls go on."""
    conn = client()
    peer = Peer()
    first = conn.open_stream(REQUEST, end_stream=True)
    second = conn.open_stream(REQUEST, end_stream=True)
    conn.data_to_send()
    events = feed(conn, peer.headers(first, RESPONSE, priority=True, depends_on=first))
    assert blank(events) == [reset(first, E.PROTOCOL_ERROR)]
    assert describe(conn.data_to_send()) == [rst(first, E.PROTOCOL_ERROR)]
    events = feed(conn, peer.headers(second, RESPONSE), peer.data(second, b"x", end_stream=True))
    assert events == [ResponseReceived(second, RESP, False), DataReceived(second, b"x", 1, True)]


@pytest.mark.parametrize("client_side", [True, False])
def test_5_3_1_2_priority_depending_on_itself(client_side: bool) -> None:
    """h2spec: PRIORITY making (idle) stream 1 depend on itself: RST_STREAM
    (PROTOCOL_ERROR). On an open stream it is reset; on a closed one only answered;
    depending on another stream is ignored as before. Before the fix: all ignored."""
    peer = Peer()
    conn = client() if client_side else server()
    idle = 1 if not client_side else 7
    assert feed(conn, Peer.priority(idle, depends_on=idle)) == []
    assert describe(conn.data_to_send()) == [rst(idle, E.PROTOCOL_ERROR)]
    if client_side:
        sid = conn.open_stream(REQUEST)
    else:
        sid = 3
        feed(conn, peer.headers(sid, REQUEST))
    conn.data_to_send()
    assert feed(conn, Peer.priority(sid, depends_on=sid + 2)) == []
    events = feed(conn, Peer.priority(sid, depends_on=sid))
    assert blank(events) == [reset(sid, E.PROTOCOL_ERROR)]
    assert "PRIORITY makes stream" in reasons(events)
    assert describe(conn.data_to_send()) == [rst(sid, E.PROTOCOL_ERROR)]
    assert not conn.closed
    # (Closed now: answered again, nothing else.)
    assert feed(conn, Peer.priority(sid, depends_on=sid)) == []
    assert describe(conn.data_to_send()) == [rst(sid, E.PROTOCOL_ERROR)]


def test_5_3_1_2_self_dependent_priority_floods_hit_the_budgets() -> None:
    """Each answer costs the server a glitch and a reset token: a flood of them ends
    with ENHANCE_YOUR_CALM, not an unbounded queue of RST_STREAMs."""
    conn = server()
    events = feed(conn, b"".join(Peer.priority(sid, depends_on=sid) for sid in range(1, 1001, 2)))
    assert blank(events)[-1:] == [terminated(E.ENHANCE_YOUR_CALM)]
    assert "too_many_resets" in reasons(events)
