"""Each defence of ``Limits`` keeps its bound, and the bound breaks without it.

Every test runs the hostile input twice: with the default limit (the bound holds) and
with that one limit off (set huge), to show the test can fail. Shapes and numbers from
``http2-hardening.md``; assertions are on counts and frame order, never on time.
"""

from __future__ import annotations

import dataclasses

import pytest

from sepp_anyio._http2 import (
    Connection,
    ConnectionTerminated,
    ErrorCode,
    Event,
    Limits,
    RequestHeadersTooLarge,
    RequestReceived,
    ResponseReceived,
    StreamReset,
)

from ._support import REQUEST, RESPONSE, Peer, client, describe, feed, raw, server

HUGE = 1 << 40
CALM = ErrorCode.ENHANCE_YOUR_CALM


def off(**fields: float) -> Limits:
    return dataclasses.replace(Limits(), **fields)  # type: ignore[arg-type]


def terminated(events: list[Event]) -> ConnectionTerminated | None:
    for event in events:
        if isinstance(event, ConnectionTerminated):
            return event
    return None


# Frame size ----------------------------------------------------------------


@pytest.mark.parametrize("limit_on", [True, False])
def test_oversized_frame_refused_on_its_header(limit_on: bool) -> None:
    """A header claiming 16 MiB: GOAWAY FRAME_SIZE at once, nothing of it buffered."""
    conn = client(None if limit_on else off(max_frame_size=(1 << 24) - 1))
    sid = conn.open_stream(REQUEST, end_stream=True)
    events = feed(conn, raw(0x0, 0, sid, b"", length=(1 << 24) - 1), *[b"\0" * 65536] * 4)
    if limit_on:
        end = terminated(events)
        assert end is not None and end.error_code == ErrorCode.FRAME_SIZE_ERROR
        assert conn.buffered_input_bytes == 0
    else:
        assert terminated(events) is None
        assert conn.buffered_input_bytes == 9 + 4 * 65536


def test_frame_of_max_size_plus_one() -> None:
    conn = client()
    sid = conn.open_stream(REQUEST, end_stream=True)
    assert (
        terminated(feed(conn, Peer().headers(sid, RESPONSE), Peer.data(sid, b"x" * 16384))) is None
    )
    end = terminated(feed(conn, raw(0x0, 0, sid, b"", length=16385)))
    assert end is not None and end.error_code == ErrorCode.FRAME_SIZE_ERROR


# CONTINUATION flood ----------------------------------------------------------


@pytest.mark.parametrize("limit_on", [True, False])
def test_continuation_flood(limit_on: bool) -> None:
    """HEADERS then 1000 CONTINUATIONs of 10 bytes: CALM after the 8th continuation."""
    limits = None if limit_on else off(max_continuations=HUGE)
    conn = client(limits)
    sid = conn.open_stream(REQUEST, end_stream=True)
    events = feed(conn, Peer.headers_block(sid, b"\x88", end_headers=False))
    high_water = 0
    frames = 0
    for _ in range(1000):
        events += conn.receive_data(Peer.continuation(sid, b"\x00" * 10, end_headers=False), 0.0)
        high_water = max(high_water, conn.buffered_header_bytes)
        if conn.closed:
            break
        frames += 1
    end = terminated(events)
    if limit_on:
        assert end is not None and end.error_code == CALM
        assert "CONTINUATION" in end.reason
        assert frames == 8
        assert high_water <= 48 << 10
    else:
        # Then only the block's byte budget stops it, at 32 KiB.
        assert frames > 8


@pytest.mark.parametrize("limit_on", [True, False])
def test_header_block_bytes_checked_on_the_frame_header(limit_on: bool) -> None:
    """Three 16 KiB CONTINUATIONs: GOAWAY at the third header, its payload unread."""
    conn = client(None if limit_on else off(max_header_block_bytes=HUGE, max_continuations=HUGE))
    sid = conn.open_stream(REQUEST, end_stream=True)
    fragment = b"\x00" * 16384
    events = feed(
        conn,
        Peer.headers_block(sid, fragment, end_headers=False),
        Peer.continuation(sid, fragment, end_headers=False),
        Peer.continuation(sid, fragment, end_headers=False)[:9],
    )
    end = terminated(events)
    if limit_on:
        assert end is not None and end.error_code == CALM and "32768" in end.reason
        assert conn.buffered_input_bytes == 0
    else:
        assert end is None
        assert conn.buffered_header_bytes == 2 * 16384


# Header lists and HPACK ---------------------------------------------------------


def _list_of(size: int) -> list[tuple[bytes, bytes]]:
    """A response header list of exactly ``size`` bytes (RFC 9113 count)."""
    headers = [*RESPONSE]
    used = sum(len(n) + len(v) + 32 for n, v in headers)
    headers.append((b"x-pad", b"v" * (size - used - len(b"x-pad") - 32)))
    return headers


@pytest.mark.parametrize(
    ("size", "accepted"), [((16 << 10) - 1, True), (16 << 10, True), ((16 << 10) + 1, False)]
)
def test_response_header_list_limit(size: int, accepted: bool) -> None:
    conn = client()
    sid = conn.open_stream(REQUEST, end_stream=True)
    events = feed(conn, Peer().headers(sid, _list_of(size)))
    if accepted:
        assert [type(event) for event in events] == [ResponseReceived]
    else:
        assert [(type(e), getattr(e, "error_code", None)) for e in events] == [
            (StreamReset, ErrorCode.CANCEL)
        ]
        assert not conn.closed
    # With the limit off, the same list is taken.
    events = feed(client(off(max_header_list_size=HUGE)), b"")
    conn = client(off(max_header_list_size=HUGE))
    conn.open_stream(REQUEST, end_stream=True)
    assert [type(e) for e in feed(conn, Peer().headers(1, _list_of(size)))] == [ResponseReceived]


@pytest.mark.parametrize(
    ("size", "too_large"), [((16 << 10) - 1, False), (16 << 10, False), ((16 << 10) + 1, True)]
)
def test_request_header_list_limit(size: int, too_large: bool) -> None:
    conn = server()
    headers = [*REQUEST]
    used = sum(len(n) + len(v) + 32 for n, v in headers)
    headers.append((b"x-pad", b"v" * (size - used - len(b"x-pad") - 32)))
    events = feed(conn, Peer().headers(1, headers))
    assert [type(event) for event in events] == [
        RequestHeadersTooLarge if too_large else RequestReceived
    ]
    if too_large:
        assert isinstance(events[0], RequestHeadersTooLarge) and events[0].size == size
        assert conn.reset_budget == Limits().reset_budget - 1
        assert conn.active_requests == 1  # still to be answered and released


@pytest.mark.parametrize("limit_on", [True, False])
def test_hpack_bomb(limit_on: bool) -> None:
    """Index a 4 KiB header, then send a block of references to it: CALM once the
    decoded list passes 32 KiB (so at most 32 KiB + 4 KiB is ever decoded)."""
    conn = server(None if limit_on else off(max_decoded_header_bytes=HUGE))
    peer = Peer()
    # :method POST, :scheme http, :path / from the static table, then the cookie, which
    # the peer's encoder indexes as entry 62 (a 4000-byte value: the entry must fit the
    # 4096-byte table with its 32 bytes of overhead).
    static = b"\x83\x86\x84"
    first = static + peer.block([(b"cookie", b"c" * 4000)])
    events = feed(conn, peer.headers_block(1, first, end_stream=True))
    assert [type(event) for event in events] == [RequestReceived]
    bomb = static + b"\xbe" * 2000  # one byte per 4 KiB field: 8 MiB decoded
    events = feed(conn, peer.headers_block(3, bomb, end_stream=True))
    end = terminated(events)
    if limit_on:
        assert end is not None and end.error_code == CALM
        assert "32768" in end.reason
    else:
        assert end is None
        assert [type(event) for event in events] == [RequestHeadersTooLarge]


# Floods and peers that do not read ------------------------------------------------


@pytest.mark.parametrize("limit_on", [True, False])
def test_ping_flood_without_reading(limit_on: bool) -> None:
    """2000 PINGs from a peer that never reads: closed, with the output bounded."""
    conn = client(None if limit_on else off(max_queued_control_frames=HUGE))
    peak = 0
    for _ in range(2000):
        conn.receive_data(Peer.ping(), 0.0)
        peak = max(peak, conn.pending_output_bytes)
    if limit_on:
        assert conn.closed
        assert peak <= (1 << 20) + 17 * 1024
        assert conn.queued_control_frames == 1001
    else:
        assert not conn.closed
        assert conn.queued_control_frames == 2000


@pytest.mark.parametrize("limit_on", [True, False])
def test_settings_flood_without_reading(limit_on: bool) -> None:
    conn = client(None if limit_on else off(max_queued_control_frames=HUGE, glitch_burst=HUGE))
    for _ in range(2000):
        conn.receive_data(Peer.settings({4: 65535}), 0.0)
    assert conn.closed is limit_on


def test_reading_a_peer_keeps_the_queue_empty() -> None:
    conn = client()
    for _ in range(2000):
        conn.receive_data(Peer.ping(), 0.0)
        conn.data_to_send()
    assert not conn.closed


@pytest.mark.parametrize("limit_on", [True, False])
def test_pause_reading_over_the_output_bound(limit_on: bool) -> None:
    conn = server(None if limit_on else off(max_pending_output_bytes=HUGE))
    conn.receive_data(
        Peer.settings({4: (1 << 31) - 1}) + Peer.window_update(0, (1 << 31) - 65536), 0.0
    )
    conn.receive_data(Peer().headers(1, REQUEST, end_stream=True), 0.0)
    conn.send_headers(1, RESPONSE)
    conn.send_data(1, b"x" * (1 << 20))
    assert conn.pending_output_bytes > 1 << 20
    assert conn.should_pause_reading is limit_on
    conn.data_to_send()
    assert not conn.should_pause_reading


@pytest.mark.parametrize("limit_on", [True, False])
def test_empty_data_flood(limit_on: bool) -> None:
    """2000 empty DATA frames: CALM (the run of empty frames stops it first)."""
    limits = None if limit_on else off(max_consecutive_empty_frames=HUGE, glitch_burst=HUGE)
    conn = client(limits)
    sid = conn.open_stream(REQUEST, end_stream=True)
    feed(conn, Peer().headers(sid, RESPONSE))
    frames = 0
    for _ in range(2000):
        conn.receive_data(Peer.data(sid, b""), 0.0)
        if conn.closed:
            break
        frames += 1
    assert frames == (10 if limit_on else 2000)


def test_empty_frames_must_be_consecutive() -> None:
    conn = client()
    sid = conn.open_stream(REQUEST, end_stream=True)
    feed(conn, Peer().headers(sid, RESPONSE))
    for _ in range(20):
        feed(conn, *[Peer.data(sid, b"")] * 10, Peer.data(sid, b"x"))
    assert not conn.closed


@pytest.mark.parametrize("limit_on", [True, False])
def test_glitch_budget(limit_on: bool) -> None:
    """PRIORITY frames: 200 are tolerated, 1100 close the connection."""
    conn = client(None if limit_on else off(glitch_burst=HUGE))
    feed(conn, *[Peer.priority(1)] * 200)
    assert not conn.closed
    feed(conn, *[Peer.priority(1)] * 900)
    assert conn.closed is limit_on


def test_glitch_budget_refills_with_the_callers_clock() -> None:
    conn = client()
    # 1100 PRIORITY frames over 10 seconds: 330 tokens come back meanwhile.
    for i in range(1100):
        conn.receive_data(Peer.priority(1), i / 110)
    assert not conn.closed
    assert 200 < conn.glitch_budget < 300


@pytest.mark.parametrize("limit_on", [True, False])
def test_remembered_resets_are_bounded(limit_on: bool) -> None:
    """10,000 cancelled calls on one connection: the memory of resets stays bounded."""
    conn = client(None if limit_on else off(reset_memory_streams=HUGE), settings={3: 1 << 20})
    for _ in range(10_000):
        conn.reset_stream(conn.open_stream(REQUEST))
    conn.receive_data(Peer.ping(), 0.0)
    assert conn.remembered_resets == (500 if limit_on else 10_000)
    assert conn.open_streams == 0
    # And a second later they are all forgotten.
    conn.receive_data(Peer.ping(), 1.5)
    assert conn.remembered_resets == 0


# Server role -------------------------------------------------------------------


@pytest.mark.parametrize("limit_on", [True, False])
def test_max_concurrent_streams(limit_on: bool) -> None:
    """The 101st request while 100 are unreleased is refused, also before our SETTINGS
    are acknowledged; a released slot takes a new one."""
    conn = Connection(
        client_side=False, limits=Limits() if limit_on else off(max_concurrent_streams=HUGE)
    )
    conn.data_to_send()
    peer = Peer()
    data = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + Peer.settings()
    data += b"".join(peer.headers(2 * i + 1, REQUEST, end_stream=True) for i in range(101))
    events = conn.receive_data(data, 0.0)
    assert not conn.settings_acknowledged
    received = [event for event in events if isinstance(event, RequestReceived)]
    if limit_on:
        assert len(received) == 100
        assert ("RstStream", 201, (), ErrorCode.REFUSED_STREAM) in describe(conn.data_to_send())
        conn.release_stream(1)
        events = conn.receive_data(peer.headers(203, REQUEST, end_stream=True), 0.0)
        assert [type(event) for event in events] == [RequestReceived]
    else:
        assert len(received) == 101


@pytest.mark.parametrize("limit_on", [True, False])
def test_new_streams_per_read(limit_on: bool) -> None:
    limits = (
        off(max_concurrent_streams=HUGE)
        if limit_on
        else off(max_concurrent_streams=HUGE, max_new_streams_per_read=HUGE)
    )
    conn = server(limits)
    peer = Peer()
    data = b"".join(peer.headers(2 * i + 1, REQUEST, end_stream=True) for i in range(300))
    events = conn.receive_data(data, 0.0)
    assert len([e for e in events if isinstance(e, RequestReceived)]) == (200 if limit_on else 300)
    # The count is per read.
    assert [
        type(e) for e in conn.receive_data(peer.headers(601, REQUEST, end_stream=True), 0.0)
    ] == [RequestReceived]


@pytest.mark.parametrize("limit_on", [True, False])
def test_rapid_reset(limit_on: bool) -> None:
    """10,000 x (HEADERS with END_STREAM to a slow handler, RST_STREAM CANCEL): CALM
    long before the end; at most 100 requests are handed over at a time."""
    # (Off: the glitch budget too, which also catches the RSTs of refused streams.)
    conn = server(None if limit_on else off(reset_budget=HUGE, glitch_burst=HUGE))
    peer = Peer()
    handed_over = 0
    pairs = 0
    end = None
    for i in range(10_000):
        stream_id = 2 * i + 1
        events = conn.receive_data(
            peer.headers(stream_id, REQUEST, end_stream=True) + peer.rst(stream_id, 8), 0.0
        )
        conn.data_to_send()
        handed_over += sum(isinstance(event, RequestReceived) for event in events)
        pairs += 1
        end = terminated(events)
        if end is not None:
            break
    if limit_on:
        assert end is not None and end.error_code == CALM and end.reason == "too_many_resets"
        assert pairs == 200
        assert handed_over == 100  # the slow handlers were never released
        assert end.last_stream_id == 199
    else:
        assert end is None and pairs == 10_000
        assert handed_over == 100


def test_rapid_reset_budget_refills_and_completed_streams_give_back() -> None:
    conn = server()
    peer = Peer()
    for i in range(150):
        stream_id = 2 * i + 1
        conn.receive_data(
            peer.headers(stream_id, REQUEST, end_stream=True) + peer.rst(stream_id, 8), 0.0
        )
        conn.release_stream(stream_id)
    assert conn.reset_budget == 50
    # 5 seconds later: +50.
    conn.receive_data(peer.headers(301, REQUEST, end_stream=True), 5.0)
    conn.send_headers(301, [*RESPONSE, (b"grpc-status", b"0")], end_stream=True)
    # ... and the completed stream gave one back (capped at 200).
    assert conn.reset_budget == 101
    for i in range(151, 250):
        stream_id = 2 * i + 1
        conn.receive_data(
            peer.headers(stream_id, REQUEST, end_stream=True) + peer.rst(stream_id, 8), 5.0
        )
        conn.release_stream(stream_id)
    assert not conn.closed


@pytest.mark.parametrize("credited", [True, False])
def test_credited_resets_do_not_exhaust_the_budget(credited: bool) -> None:
    """A caller crediting each reset back (its handler had started) keeps the connection;
    without the credit, the same 300 resets end it with CALM."""
    conn = server()
    peer = Peer()
    end = None
    for i in range(300):
        stream_id = 2 * i + 1
        events = conn.receive_data(
            peer.headers(stream_id, REQUEST, end_stream=True) + peer.rst(stream_id, 8), 0.0
        )
        end = end or terminated(events)
        if credited and any(isinstance(event, StreamReset) for event in events):
            conn.credit_reset_budget()
        conn.release_stream(stream_id)
    if credited:
        assert end is None and not conn.closed
        assert conn.reset_budget == Limits().reset_budget
    else:
        assert end is not None and end.error_code == CALM and end.reason == "too_many_resets"


def test_one_late_reset_after_completion_is_not_a_glitch() -> None:
    """A client cancelling as the reply arrives resets a stream the server completed
    (RFC 9113 section 5.1 allows it): no glitch for that RST (3 such late frames are
    tolerated per stream), one for the 4th."""
    conn = server()
    peer = Peer()
    for i in range(50):
        stream_id = 2 * i + 1
        conn.receive_data(peer.headers(stream_id, REQUEST, end_stream=True), 0.0)
        conn.send_headers(stream_id, [*RESPONSE, (b"grpc-status", b"0")], end_stream=True)
        conn.release_stream(stream_id)
        events = conn.receive_data(peer.rst(stream_id, 8), 0.0)
        assert events == []
    assert conn.glitch_budget == Limits().glitch_burst
    assert conn.receive_data(peer.rst(99, 8) * 2, 0.0) == []
    assert conn.glitch_budget == Limits().glitch_burst
    conn.receive_data(peer.rst(99, 8), 0.0)
    assert conn.glitch_budget == Limits().glitch_burst - 1


def test_a_few_resets_after_the_peers_own_are_not_glitches() -> None:
    """A peer that reset a stream answers each of our frames still in flight with another
    RST_STREAM (python h2): 8 are tolerated, the 9th is a glitch."""
    conn = server()
    peer = Peer()
    conn.receive_data(peer.headers(1, REQUEST) + peer.rst(1, 8), 0.0)
    conn.release_stream(1)
    for _ in range(8):
        assert conn.receive_data(peer.rst(1, 5), 0.0) == []
    assert conn.glitch_budget == Limits().glitch_burst
    conn.receive_data(peer.rst(1, 5), 0.0)
    assert conn.glitch_budget == Limits().glitch_burst - 1


def test_crossing_resets_are_not_glitches() -> None:
    """We reset a stream while the peer resets it too: its RST is not a glitch (once)."""
    conn = server()
    peer = Peer()
    conn.receive_data(peer.headers(1, REQUEST), 0.0)
    conn.reset_stream(1, ErrorCode.CANCEL)
    conn.release_stream(1)
    assert conn.receive_data(peer.rst(1, 8), 0.0) == []
    assert conn.glitch_budget == Limits().glitch_burst
    conn.receive_data(peer.rst(1, 8), 0.0)
    assert conn.glitch_budget == Limits().glitch_burst - 1


def test_nghttp2_shape_burst_plus_resets() -> None:
    conn = server(off(reset_budget=3))
    peer = Peer()
    data = b"".join(peer.headers(i, REQUEST) + peer.rst(i, 8) for i in (1, 3, 5, 7, 9))
    conn.receive_data(data, 0.0)
    goaways = [frame for frame in describe(conn.data_to_send()) if frame[0] == "GoAway"]
    assert goaways == [("GoAway", 0, (), 5, CALM)]


@pytest.mark.parametrize("limit_on", [True, False])
def test_keepalive_enforcement(limit_on: bool) -> None:
    """PINGs every second: the third strike ends the connection (too_many_pings)."""
    conn = server(None if limit_on else off(keepalive_max_strikes=HUGE))
    events: list[Event] = []
    for second in range(10):
        events += conn.receive_data(Peer.ping(), float(second))
        if conn.closed:
            break
    end = terminated(events)
    if limit_on:
        assert end is not None and end.error_code == CALM and end.reason == "too_many_pings"
        assert second == 3
        goaway = describe(conn.data_to_send())[-1]
        assert goaway[:2] == ("GoAway", 0)
        assert conn.receive_data(Peer.ping(), 20.0) == []
    else:
        assert end is None


def test_keepalive_pings_every_30_seconds_survive_an_hour() -> None:
    conn = server()
    for minute in range(120):
        conn.receive_data(Peer.ping(), minute * 30.0)
    assert not conn.closed


def test_keepalive_without_streams_when_not_permitted() -> None:
    conn = server(off(keepalive_permit_without_stream=False))
    for second in (0.0, 60.0, 120.0, 180.0):
        conn.receive_data(Peer.ping(), second)
    assert conn.closed
    # With a stream open, pings a minute apart are fine.
    conn = server(off(keepalive_permit_without_stream=False))
    conn.receive_data(Peer().headers(1, REQUEST), 0.0)
    for second in (0.0, 60.0, 120.0, 180.0):
        conn.receive_data(Peer.ping(), second)
    assert not conn.closed


def test_keepalive_strikes_reset_when_we_send() -> None:
    conn = server()
    conn.receive_data(Peer().headers(1, REQUEST), 0.0)
    conn.send_headers(1, RESPONSE)
    for second in (0.0, 1.0, 2.0):  # the first is free, then two strikes
        conn.receive_data(Peer.ping(), second)
    conn.send_data(1, b"x")  # our DATA: strikes start over at the next PING
    for second in (3.0, 4.0, 5.0):
        conn.receive_data(Peer.ping(), second)
    assert not conn.closed
    conn.receive_data(Peer.ping(), 6.0)
    assert conn.closed


def test_a_client_does_not_enforce_keepalive() -> None:
    conn = client()
    for _ in range(100):
        conn.receive_data(Peer.ping(), 0.0)
        conn.data_to_send()
    assert not conn.closed
