"""What our send methods put on the wire, in both roles, and when they refuse."""

from __future__ import annotations

import hpack
import pytest
from hyperframe.frame import ContinuationFrame, HeadersFrame

from sepp_anyio._http2 import (
    MAX_STREAM_ID,
    Connection,
    ConnectionClosedError,
    DataReceived,
    ErrorCode,
    HeaderListTooLargeError,
    LocalProtocolError,
    RequestReceived,
    StreamClosedError,
    StreamIdsExhaustedError,
    TooManyStreamsError,
)

from ._support import REQUEST, RESPONSE, TRAILERS, Peer, client, describe, feed, parse, raw, server


def closed(conn: Connection) -> bool:
    """(A function: mypy would keep ``conn.closed`` narrowed across ``conn.close()``.)"""
    return conn.closed


def blocks(data: bytes) -> list[bytes]:
    """The header blocks in ``data`` (HEADERS + CONTINUATIONs joined)."""
    out: list[bytes] = []
    for frame in parse(data):
        if isinstance(frame, HeadersFrame):
            out.append(bytes(frame.data))
        elif isinstance(frame, ContinuationFrame):
            out[-1] += bytes(frame.data)
    return out


def test_stream_ids_are_odd_and_increasing() -> None:
    conn = client()
    assert [conn.open_stream(REQUEST, end_stream=True) for _ in range(3)] == [1, 3, 5]
    frames = describe(conn.data_to_send())
    assert frames == [
        ("Headers", 1, ("END_HEADERS", "END_STREAM")),
        ("Headers", 3, ("END_HEADERS", "END_STREAM")),
        ("Headers", 5, ("END_HEADERS", "END_STREAM")),
    ]
    assert conn.open_streams == 3


def test_headers_decode_on_the_peer_with_extra_never_indexed() -> None:
    conn = client()
    decoder = hpack.Decoder()
    for key in (b"k", b"k", None):
        conn.open_stream(REQUEST, extra=[(b"grpc-timeout", b"5S")], cache_key=key)
        (block,) = blocks(conn.data_to_send())
        headers = decoder.decode(block, raw=True)
        assert headers == [*REQUEST, (b"grpc-timeout", b"5S")]
        assert isinstance(headers[-1], hpack.NeverIndexedHeaderTuple)


def test_cached_block_is_references_only() -> None:
    conn = client()
    sizes = []
    for _ in range(3):
        conn.open_stream(REQUEST, cache_key=b"k")
        sizes.append(len(blocks(conn.data_to_send())[0]))
    # First: literals that enter the table; then one byte per header.
    assert sizes[0] > sizes[1] == sizes[2] == len(REQUEST)


def test_table_size_change_is_signalled_in_the_next_block() -> None:
    conn = client()
    decoder = hpack.Decoder()
    for _ in range(2):
        conn.open_stream(REQUEST, cache_key=b"k")
        decoder.decode(blocks(conn.data_to_send())[0])
    conn.receive_data(Peer.settings({1: 0}), 0.0)
    conn.data_to_send()
    conn.open_stream(REQUEST, cache_key=b"k")
    (block,) = blocks(conn.data_to_send())
    assert block[0] == 0x20  # a dynamic table size update to 0 first
    decoder.max_allowed_table_size = 0
    assert decoder.decode(block, raw=True) == REQUEST
    assert decoder.header_table_size == 0


def test_encoder_table_never_exceeds_our_cap() -> None:
    conn = client(settings={1: 1 << 20})
    conn.open_stream([*REQUEST, (b"x-big", b"v" * 5000)])
    decoder = hpack.Decoder()
    decoder.decode(blocks(conn.data_to_send())[0])
    # The peer offered 1 MiB; our encoder stays at 4096, so a 4096-byte peer table fits.
    assert decoder.header_table_size == 4096


def test_large_headers_go_out_in_continuations() -> None:
    conn = client()
    big = [*REQUEST, (b"x-big", b"v" * 40000)]
    conn.open_stream(big, end_stream=True)
    data = conn.data_to_send()
    frames = describe(data)
    assert frames[0] == ("Headers", 1, ("END_STREAM",))
    assert frames[1] == ("Continuation", 1, ())
    assert frames[-1] == ("Continuation", 1, ("END_HEADERS",))
    assert all(
        len(frame.data) <= 16384
        for frame in parse(data)
        if isinstance(frame, HeadersFrame | ContinuationFrame)
    )
    assert hpack.Decoder(max_header_list_size=1 << 20).decode(blocks(data)[0], raw=True) == big


def test_peer_max_concurrent_streams() -> None:
    conn = client(settings={3: 2})
    conn.open_stream(REQUEST)
    conn.open_stream(REQUEST)
    with pytest.raises(TooManyStreamsError):
        conn.open_stream(REQUEST)
    conn.reset_stream(1)
    assert conn.open_stream(REQUEST) == 5


def test_assumed_max_concurrent_streams_before_settings() -> None:
    from sepp_anyio._http2 import Connection, Limits

    conn = Connection(client_side=True, limits=Limits(assumed_max_concurrent_streams=1))
    conn.open_stream(REQUEST)
    with pytest.raises(TooManyStreamsError):
        conn.open_stream(REQUEST)


def test_stream_ids_run_out() -> None:
    conn = client()
    # (No test can open 2**30 streams: start near the end.)
    conn._next_stream_id = MAX_STREAM_ID - 2
    assert conn.stream_ids_left == 2
    assert conn.open_stream(REQUEST, end_stream=True) == MAX_STREAM_ID - 2
    assert conn.open_stream(REQUEST, end_stream=True) == MAX_STREAM_ID
    assert conn.stream_ids_left == 0
    with pytest.raises(StreamIdsExhaustedError):
        conn.open_stream(REQUEST)


def test_peer_max_header_list_size() -> None:
    conn = client(settings={6: 300})
    conn.open_stream(REQUEST, cache_key=b"k")
    with pytest.raises(HeaderListTooLargeError, match="exceeds the peer's limit of 300"):
        conn.open_stream(REQUEST, extra=[(b"x-big", b"v" * 200)], cache_key=b"k")
    # Nothing was queued or changed by the refusal.
    conn.data_to_send()
    assert conn.open_stream(REQUEST, cache_key=b"k") == 3


def test_send_data_respects_windows_and_frame_size() -> None:
    conn = client(settings={4: 20000})
    sid = conn.open_stream(REQUEST)
    conn.data_to_send()
    body = bytes(range(256)) * 200  # 51200 bytes
    assert conn.send_window(sid) == 20000
    sent = conn.send_data(sid, body, end_stream=True)
    assert sent == 20000
    frames = describe(conn.data_to_send())
    assert [(name, len(data), flags) for name, _, flags, data in frames] == [
        ("Data", 16384, ()),
        ("Data", 3616, ()),
    ]
    assert conn.send_window(sid) == 0
    assert conn.send_data(sid, body[sent:], end_stream=True) == 0
    events = conn.receive_data(Peer.window_update(sid, 40000), 0.0)
    assert [type(event).__name__ for event in events] == ["WindowUpdated"]
    assert conn.send_window(sid) == 40000
    assert conn.send_data(sid, body[sent:], end_stream=True) == 31200
    frames = describe(conn.data_to_send())
    assert frames[-1][2] == ("END_STREAM",)
    assert b"".join(frame[3] for frame in frames) == body[sent:]
    with pytest.raises(StreamClosedError):
        conn.send_data(sid, b"x")


def test_larger_peer_frame_size() -> None:
    conn = client(settings={5: 1 << 20, 4: 1 << 20})
    conn.receive_data(Peer.window_update(0, 1 << 20), 0.0)
    sid = conn.open_stream(REQUEST)
    assert conn.send_data(sid, b"x" * 100000, end_stream=True) == 100000
    frames = describe(conn.data_to_send())
    assert [len(frame[3]) for frame in frames if frame[0] == "Data"] == [100000]


def test_end_stream_and_trailers_rules() -> None:
    conn = server()
    conn.receive_data(Peer().headers(1, REQUEST), 0.0)
    conn.send_headers(1, RESPONSE)
    with pytest.raises(LocalProtocolError, match="trailers"):
        conn.send_headers(1, TRAILERS)
    conn.send_data(1, b"x")
    conn.send_headers(1, TRAILERS, end_stream=True)
    with pytest.raises(StreamClosedError):
        conn.send_data(1, b"x")
    with pytest.raises(StreamClosedError):
        conn.send_headers(1, TRAILERS, end_stream=True)
    assert describe(conn.data_to_send()) == [
        ("Headers", 1, ("END_HEADERS",)),
        ("Data", 1, (), b"x"),
        ("Headers", 1, ("END_HEADERS", "END_STREAM")),
    ]
    # The client still sends: its stream is half-closed (local) on our side.
    events = conn.receive_data(Peer.data(1, b"tail", end_stream=True), 0.0)
    assert events == [DataReceived(1, b"tail", 4, True)]
    assert conn.open_streams == 0


def test_a_server_does_not_open_streams() -> None:
    with pytest.raises(LocalProtocolError):
        server().open_stream(REQUEST)


def test_end_stream_sends_an_empty_data_frame() -> None:
    conn = client()
    sid = conn.open_stream(REQUEST)
    conn.data_to_send()
    conn.end_stream(sid)
    assert describe(conn.data_to_send()) == [("Data", 1, ("END_STREAM",), b"")]
    with pytest.raises(StreamClosedError):
        conn.end_stream(sid)


def test_reset_stream() -> None:
    conn = client()
    sid = conn.open_stream(REQUEST)
    conn.data_to_send()
    assert conn.reset_stream(sid) is True
    assert conn.reset_stream(sid) is False
    assert conn.reset_stream(99) is False
    assert describe(conn.data_to_send()) == [("RstStream", 1, (), ErrorCode.CANCEL)]
    assert conn.remembered_resets == 1
    with pytest.raises(StreamClosedError):
        conn.send_data(sid, b"x")


def test_ping() -> None:
    conn = client()
    conn.send_ping(b"abcdefgh")
    assert describe(conn.data_to_send()) == [("Ping", 0, (), b"abcdefgh")]
    with pytest.raises(ValueError, match="8 bytes"):
        conn.send_ping(b"short")


def test_client_goaway_and_close() -> None:
    conn = client()
    conn.open_stream(REQUEST)
    conn.data_to_send()
    conn.send_goaway()
    assert describe(conn.data_to_send()) == [("GoAway", 0, (), 0, 0)]
    with pytest.raises(ConnectionClosedError):
        conn.open_stream(REQUEST)
    assert not conn.closed
    conn.close()
    assert closed(conn)
    with pytest.raises(ConnectionClosedError):
        conn.send_ping(b"12345678")
    assert conn.receive_data(Peer.ping(), 0.0) == []


def test_open_stream_after_goaway_received() -> None:
    conn = client()
    conn.receive_data(Peer.goaway(0), 0.0)
    with pytest.raises(ConnectionClosedError):
        conn.open_stream(REQUEST)


def test_server_two_step_graceful_goaway() -> None:
    conn = server()
    peer = Peer()
    assert feed(conn, peer.headers(1, REQUEST, end_stream=True)) == [
        RequestReceived(1, tuple(REQUEST), True)
    ]
    conn.send_goaway(last_stream_id=MAX_STREAM_ID)
    conn.send_ping(b"shutdown")
    # A stream opened between the two GOAWAYs is served.
    assert feed(conn, peer.headers(3, REQUEST, end_stream=True)) == [
        RequestReceived(3, tuple(REQUEST), True)
    ]
    conn.send_goaway()
    assert describe(conn.data_to_send()) == [
        ("GoAway", 0, (), MAX_STREAM_ID, 0),
        ("Ping", 0, (), b"shutdown"),
        ("GoAway", 0, (), 3, 0),
    ]
    with pytest.raises(LocalProtocolError):
        conn.send_goaway(last_stream_id=5)
    # Above the last one: ignored (headers still decoded, so later blocks decode).
    assert feed(conn, peer.headers(5, REQUEST, end_stream=True) + peer.data(5, b"x")) == []
    assert conn.data_to_send() == b""
    # At or below it: finish normally.
    conn.send_headers(1, RESPONSE)
    conn.send_headers(1, TRAILERS, end_stream=True)
    conn.send_headers(3, [*RESPONSE, (b"grpc-status", b"0")], end_stream=True)
    assert conn.open_streams == 0
    assert not conn.closed


def test_server_error_goaway_closes() -> None:
    conn = server()
    conn.send_goaway(ErrorCode.ENHANCE_YOUR_CALM, debug_data=b"bye")
    assert describe(conn.data_to_send()) == [("GoAway", 0, (), 0, ErrorCode.ENHANCE_YOUR_CALM)]
    assert conn.closed


def test_no_sending_after_a_connection_error() -> None:
    conn = client()
    sid = conn.open_stream(REQUEST)
    conn.receive_data(raw(0x6, 0, 0, b"1"), 0.0)  # a 1-byte PING: connection error
    assert conn.closed
    with pytest.raises(ConnectionClosedError):
        conn.send_data(sid, b"x")
    with pytest.raises(ConnectionClosedError):
        conn.send_headers(sid, TRAILERS, end_stream=True)
    assert conn.reset_stream(sid) is False


def test_data_before_response_headers_is_refused() -> None:
    conn = server()
    conn.receive_data(Peer().headers(1, REQUEST, end_stream=True), 0.0)
    with pytest.raises(LocalProtocolError, match="before the response headers"):
        conn.send_data(1, b"x")


def test_a_server_refuses_a_request_before_its_body() -> None:
    conn = server(stream_window=65535, connection_window=65535)
    peer = Peer()
    events = feed(conn, peer.headers(1, REQUEST))
    assert events == [RequestReceived(1, tuple(REQUEST), False)]
    assert conn.reset_stream(1, ErrorCode.REFUSED_STREAM)
    conn.release_stream(1)
    assert describe(conn.data_to_send()) == [("RstStream", 1, (), ErrorCode.REFUSED_STREAM)]
    # The body the client sent meanwhile is dropped, and its credit handed back.
    for _ in range(4):
        assert feed(conn, Peer.data(1, b"x" * 16384)) == []
    assert describe(conn.data_to_send()) == [("WindowUpdate", 0, (), 32768)] * 2
    # (Our own reset does not count against the rapid-reset budget.)
    assert conn.reset_budget == 200


def test_max_concurrent_streams_unlimited_when_the_server_sets_none() -> None:
    conn = Connection(client_side=True)
    assert conn.peer_max_concurrent_streams == 100
    conn.receive_data(Peer.settings({4: 65535}), 0.0)
    assert conn.peer_max_concurrent_streams == 1 << 32
    conn.receive_data(Peer.settings({3: 5}), 0.0)
    assert conn.peer_max_concurrent_streams == 5


def test_encoder_table_shows_what_our_headers_indexed() -> None:
    conn = client()
    assert not conn.encoder_table
    conn.open_stream(
        [*REQUEST, (b"x-constant", b"1")],
        extra=[(b"grpc-timeout", b"5m")],
        end_stream=True,
    )
    table = conn.encoder_table
    assert table[0] == (b"x-constant", b"1")
    # Never-indexed extras stay out of the table.
    assert all(name != b"grpc-timeout" for name, _ in table)
