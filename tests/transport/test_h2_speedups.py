"""The h2 speed-ups change cost only: decoded headers and frame handling stay the same."""

from __future__ import annotations

import contextlib
import re
import struct
from typing import Any

import h2.config
import h2.connection
import h2.events
import h2.exceptions
import h2.settings
import hpack
from hypothesis import given, settings
from hypothesis import strategies as st

from sepp_anyio._transport._connection import (
    _CachingDecoder,
    _CachingEncoder,
    _H2Connection,
)
from sepp_anyio._transport._h2quiet import QUIET_FRAMES, install_quiet_frames

names = st.sampled_from([b"grpc-status", b"grpc-message", b"content-type", b"x-a", b"x-b"])
values = st.sampled_from([b"0", b"1", b"application/grpc", b"ok", b"a" * 40, b""])
blocks = st.lists(st.lists(st.tuples(names, values), min_size=1, max_size=4), max_size=30)
# Between blocks the encoder may shrink or grow its table (a size update in the next block).
sizes = st.lists(st.sampled_from([None, None, None, 0, 64, 4096]), min_size=30, max_size=30)


@settings(max_examples=200, deadline=None)
@given(blocks, sizes, st.booleans())
def test_caching_decoder_decodes_like_hpack(
    header_blocks: list[list[tuple[bytes, bytes]]], table_sizes: list[int | None], huffman: bool
) -> None:
    encoder = hpack.Encoder()
    plain, caching = hpack.Decoder(), _CachingDecoder()
    for headers, size in zip(header_blocks, table_sizes, strict=False):
        if size is not None:
            encoder.header_table_size = size
        # Each header list twice: the second block is often references only, which the
        # caching decoder serves from its cache from the next time on.
        for _ in range(2):
            block = encoder.encode(headers, huffman=huffman)
            expected = plain.decode(block, raw=True)
            got = caching.decode(block, raw=True)
            assert got == expected == headers
            assert [type(h) for h in got] == [type(h) for h in expected]
        assert list(caching.header_table.dynamic_entries) == list(
            plain.header_table.dynamic_entries
        )


def test_caching_decoder_serves_repeated_reference_blocks_from_its_cache() -> None:
    encoder = hpack.Encoder()
    decoder = _CachingDecoder()
    headers = [(b":status", b"200"), (b"content-type", b"application/grpc")]
    first = encoder.encode(headers)
    assert decoder.decode(first, raw=True) == headers  # inserts content-type: not cached
    second = encoder.encode(headers)  # references only now
    assert decoder.decode(second, raw=True) == headers
    assert bytes(second) in decoder._cache
    cached = decoder.decode(second, raw=True)
    cached.append((b"x", b"y"))  # the caller may change its list; the cache keeps its own
    assert decoder.decode(second, raw=True) == headers
    # Any insertion invalidates: the same bytes may now mean other headers.
    decoder.decode(encoder.encode([(b"x-new", b"v")]), raw=True)
    assert decoder._cache[bytes(second)][0] != decoder._version


def test_received_frames_have_cheap_reprs_and_the_same_handling() -> None:
    config: dict[str, Any] = {
        "header_encoding": None,
        "validate_outbound_headers": False,
        "normalize_outbound_headers": False,
        "validate_inbound_headers": False,
    }
    client = _H2Connection(h2.config.H2Configuration(client_side=True, **config))
    # The frames that reach h2's own path (all of them, with the fast path off).
    client._fast_receive = False
    server = h2.connection.H2Connection(h2.config.H2Configuration(client_side=False, **config))
    client.initiate_connection()
    server.initiate_connection()
    server.receive_data(client.data_to_send())
    client.receive_data(server.data_to_send())
    server.receive_data(client.data_to_send())

    stream_id = client.get_next_available_stream_id()
    client.send_headers(stream_id, [(b":method", b"POST"), (b":path", b"/x")], end_stream=True)
    server.receive_data(client.data_to_send())
    server.send_headers(stream_id, [(b":status", b"200")])
    server.send_data(stream_id, b"payload")
    server.send_headers(stream_id, [(b"grpc-status", b"0")], end_stream=True)
    data = server.data_to_send()

    frames: list[Any] = []
    buffer = client.incoming_buffer
    original_next = type(buffer).__next__

    def spy(self: Any) -> Any:
        frame = original_next(self)
        frames.append(frame)
        return frame

    type(buffer).__next__ = spy  # type: ignore[method-assign]
    try:
        events = client.receive_data(data)
    finally:
        type(buffer).__next__ = original_next  # type: ignore[method-assign]
    kinds = [type(event) for event in events]
    assert kinds == [
        h2.events.ResponseReceived,
        h2.events.DataReceived,
        h2.events.TrailersReceived,
        h2.events.StreamEnded,
    ]
    assert frames and all(type(frame) in QUIET_FRAMES.values() for frame in frames)
    assert repr(frames[0]) == f"HeadersFrame(stream_id={stream_id})"


header_names = st.binary(min_size=1, max_size=40).map(lambda b: b.lower())


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.tuples(header_names, st.binary(max_size=600)), min_size=1, max_size=5),
    st.integers(min_value=1, max_value=3),
)
def test_per_call_literals_decode_to_the_same_headers_and_leave_the_table_alone(
    tail: list[tuple[bytes, bytes]], calls: int
) -> None:
    encoder = _CachingEncoder()
    decoder = hpack.Decoder()
    constant = [(b":method", b"POST"), (b":path", b"/sepp.v1.QueueService/Ack")]
    per_call = [hpack.NeverIndexedHeaderTuple(name, value) for name, value in tail]
    for _ in range(calls):
        encoder.expect_prefix(b"/sepp.v1.QueueService/Ack", len(constant))
        entries_before = list(decoder.header_table.dynamic_entries)
        block = encoder.encode([*constant, *per_call])
        decoded = decoder.decode(block, raw=True)
        assert decoded == [*constant, *tail]
        # The per-call part arrives as never-indexed literals...
        assert all(isinstance(h, hpack.NeverIndexedHeaderTuple) for h in decoded[2:])
        # ...and adds nothing to the table (only the constant part may, on the first call).
        if entries_before:
            assert list(decoder.header_table.dynamic_entries) == entries_before


def _client_pair() -> tuple[Any, Any]:
    """Two connected client connections, identical except that the second one sends
    through h2's own stream class."""
    config: dict[str, Any] = {
        "header_encoding": None,
        "validate_outbound_headers": False,
        "normalize_outbound_headers": False,
        "validate_inbound_headers": False,
    }
    pair = []
    for fast in (True, False):
        client = _H2Connection(h2.config.H2Configuration(client_side=True, **config))
        if not fast:

            def plain_stream(stream_id: int, allowed: Any, client: Any = client) -> Any:
                return h2.connection.H2Connection._begin_new_stream(client, stream_id, allowed)

            client._begin_new_stream = plain_stream  # type: ignore[method-assign,assignment]
        server = h2.connection.H2Connection(h2.config.H2Configuration(client_side=False, **config))
        client.initiate_connection()
        server.initiate_connection()
        server.receive_data(client.data_to_send())
        client.receive_data(server.data_to_send())
        server.receive_data(client.data_to_send())
        pair.append(client)
    return pair[0], pair[1]


operations = st.lists(
    st.one_of(
        st.tuples(st.just("open"), st.integers(0, 40_000), st.booleans()),
        st.tuples(st.just("data"), st.integers(0, 3_000), st.booleans()),
        st.tuples(st.just("end"), st.just(0), st.just(False)),
        st.tuples(st.just("reset"), st.just(0), st.just(False)),
    ),
    max_size=25,
)


@settings(max_examples=100, deadline=None)
@given(operations)
def test_fast_stream_sends_the_same_bytes_and_keeps_the_same_state(
    ops: list[tuple[str, int, bool]],
) -> None:
    fast, plain = _client_pair()
    open_ids: list[int] = []
    for op, size, flag in ops:
        results = []
        for client in (fast, plain):
            try:
                if op == "open":
                    stream_id = client.get_next_available_stream_id()
                    headers = [
                        (b":method", b"POST"),
                        (b":scheme", b"http"),
                        (b":path", b"/sepp.v1.QueueService/Ack"),
                        (b":authority", b"127.0.0.1:1"),
                        hpack.NeverIndexedHeaderTuple(b"x-big", b"v" * size),
                    ]
                    client.send_headers(stream_id, headers, end_stream=flag)
                elif not open_ids:
                    continue
                elif op == "data":
                    client.send_data(open_ids[-1], b"d" * size, end_stream=flag)
                elif op == "end":
                    client.end_stream(open_ids[-1])
                else:
                    client.reset_stream(open_ids[-1])
                results.append(("ok", client.data_to_send()))
            except h2.exceptions.H2Error as exc:
                results.append((type(exc).__name__, client.data_to_send()))
        if op == "open":
            open_ids.append(max(fast.streams))
        if results:
            assert results[0] == results[1], op
    assert fast.streams.keys() == plain.streams.keys()
    for stream_id, stream in fast.streams.items():
        other = plain.streams[stream_id]
        assert type(stream).__name__ == "_FastStream"
        assert stream.state_machine.state == other.state_machine.state
        assert stream.outbound_flow_control_window == other.outbound_flow_control_window
        assert stream.request_method == other.request_method
        assert stream._authority == other._authority
    assert fast.outbound_flow_control_window == plain.outbound_flow_control_window


def test_quiet_frames_on_a_server_connection_give_the_same_events() -> None:
    """The reference server installs the quiet frames on grpclib's h2 connections."""
    config: dict[str, Any] = {"header_encoding": None}
    results = []
    for quiet in (True, False):
        client = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True, **config))
        server = h2.connection.H2Connection(h2.config.H2Configuration(client_side=False, **config))
        if quiet:
            install_quiet_frames(server)
        client.initiate_connection()
        server.initiate_connection()
        events = server.receive_data(client.data_to_send())
        client.receive_data(server.data_to_send())
        client.send_headers(
            1,
            [
                (b":method", b"POST"),
                (b":scheme", b"http"),
                (b":path", b"/x"),
                (b":authority", b"a"),
            ],
        )
        client.send_data(1, b"body", end_stream=True)
        client.ping(b"12345678")
        events += server.receive_data(client.data_to_send())
        results.append(([type(event) for event in events], server.data_to_send()))
    assert results[0] == results[1]
    assert h2.events.RequestReceived in results[0][0]
    assert h2.events.DataReceived in results[0][0]


def test_closed_streams_are_still_forgotten() -> None:
    """open_outbound_streams skips h2's per-stream walk, but closed streams still go."""
    config: dict[str, Any] = {"header_encoding": None}
    client = _H2Connection(h2.config.H2Configuration(client_side=True, **config))
    server = h2.connection.H2Connection(h2.config.H2Configuration(client_side=False, **config))
    client.initiate_connection()
    server.initiate_connection()
    server.receive_data(client.data_to_send())
    client.receive_data(server.data_to_send())
    request = [(b":method", b"POST"), (b":scheme", b"http"), (b":path", b"/x")]
    sizes = []
    for _ in range(200):
        stream_id = client.get_next_available_stream_id()
        client.send_headers(stream_id, [*request, (b":authority", b"a")], end_stream=True)
        server.receive_data(client.data_to_send())
        server.send_headers(stream_id, [(b":status", b"200")], end_stream=True)
        client.receive_data(server.data_to_send())
        sizes.append(len(client.streams))
    assert max(sizes) <= _H2Connection._CULL_EVERY
    assert min(sizes[_H2Connection._CULL_EVERY :]) <= 1


_CONFIG: dict[str, Any] = {
    "header_encoding": None,
    "validate_outbound_headers": False,
    "normalize_outbound_headers": False,
    "validate_inbound_headers": False,
}
_REQUEST = [
    (b":method", b"POST"),
    (b":scheme", b"http"),
    (b":path", b"/sepp.v1.QueueService/Ack"),
    (b":authority", b"127.0.0.1:1"),
]

# What the server does next. Stream choices index the streams opened so far (or name
# stream 0, a stream never opened, and the newest one); raw frames are built byte by byte,
# with arbitrary flags (padding, priority, a header block left open), so that the fast path
# sees everything it must hand to h2, and broken frames it must fail on as h2 does.
_streams = st.sampled_from(["first", "last", "zero", "unknown", "middle"])
# (type, flags, payload): well-formed and broken frames the server's h2 would never send.
_raw_frames = st.one_of(
    st.sampled_from(
        [
            (0x0, 0x0, b"abc"),
            (0x0, 0x1, b"abc"),
            (0x0, 0x8, b"\x03abc\x00\x00\x00"),  # padded
            (0x0, 0x9, b"\x01abc\x00"),
            (0x0, 0x8, b"\x09ab"),  # padding longer than the frame
            (0x0, 0x0, b"z" * 20_000),  # above the 16 KiB frame size limit
            (0x0, 0x0, b"w" * 16_000),
            (0x1, 0x4, b"\x88"),  # :status 200 (static table: no table change)
            (0x1, 0x5, b"\x88"),
            (0x1, 0x24, b"\x00\x00\x00\x00\x10\x88"),  # with priority
            (0x1, 0x0C, b"\x02\x88\x00\x00"),  # padded
            (0x1, 0x0, b"\x88"),  # header block continues...
            (0x9, 0x4, b"\x88"),  # ...in a CONTINUATION
            (0x1, 0x4, b"\xff\xff\xff"),  # not HPACK
            (0x1, 0x5, b"\x0f\x2f\x01\x31"),  # a content-length literal
            (0x3, 0x0, b"\x00\x00\x00\x08"),
            (0x8, 0x0, b"\x00\x00\x01\x00"),
            (0x6, 0x0, b"12345678"),
            (0xA, 0x0, b"??"),
        ]
    ),
    st.tuples(st.sampled_from([0x0, 0x1]), st.integers(0, 255), st.just(b"\x88")),
)
_respond = st.tuples(
    st.just("respond"), _streams, st.sampled_from([0, 5, 300, 40_000]), st.sampled_from([None, 2])
)
_server_ops = st.lists(
    st.one_of(
        # A whole unary response (headers, message, trailers), the common case, weighted up.
        *[_respond] * 4,
        *[st.tuples(st.just("open"), st.booleans())] * 4,
        st.tuples(st.just("headers"), _streams, st.booleans(), st.sampled_from([0, 1, 40])),
        st.tuples(
            st.just("data"),
            _streams,
            st.sampled_from([0, 1, 5, 300, 20_000, 70_000]),
            st.booleans(),
            st.sampled_from([None, None, 0, 3]),
        ),
        st.tuples(st.just("trailers"), _streams),
        st.tuples(st.just("reset"), _streams),
        st.tuples(st.just("connection"), st.sampled_from(["ping", "window", "settings"])),
        st.tuples(
            st.just("raw"), st.lists(st.tuples(_raw_frames, _streams), min_size=1, max_size=3)
        ),
    ),
    min_size=1,
    max_size=40,
)


def _pick(choice: str, opened: list[int]) -> int:
    if choice == "zero":
        return 0
    if choice == "unknown":
        return (max(opened) if opened else 1) + 100
    if not opened:
        return 1
    return {"first": opened[0], "last": opened[-1], "middle": opened[len(opened) // 2]}[choice]


def _state(client: Any) -> Any:
    return (
        client.state_machine.state,
        client._inbound_flow_control_window_manager.current_window_size,
        client.outbound_flow_control_window,
        {
            stream_id: (
                stream.state_machine.state,
                stream._inbound_window_manager.current_window_size,
                stream.outbound_flow_control_window,
            )
            for stream_id, stream in client.streams.items()
        },
        bytes(client.incoming_buffer._data),
        len(client.incoming_buffer._headers_buffer),
        dict(client._closed_streams),
    )


@settings(max_examples=300, deadline=None)
@given(_server_ops, st.data())
def test_fast_receive_gives_the_same_events_state_and_errors_as_h2(
    ops: list[tuple[Any, ...]], data: st.DataObject
) -> None:
    """Received bytes give the same events, state, output and errors with the fast
    receive path as through h2's own, for any server traffic and any read splits."""
    fast = _H2Connection(h2.config.H2Configuration(client_side=True, **_CONFIG))
    plain = _H2Connection(h2.config.H2Configuration(client_side=True, **_CONFIG))
    plain._fast_receive = False
    server = h2.connection.H2Connection(h2.config.H2Configuration(client_side=False, **_CONFIG))
    for client in (fast, plain):
        client.initiate_connection()
        client.increment_flow_control_window(1 << 20)
    server.initiate_connection()
    opened: list[int] = []
    dead = False

    def client_output() -> bytes:
        out = fast.data_to_send()
        assert plain.data_to_send() == out
        return out

    def to_server(out: bytes) -> None:
        with contextlib.suppress(h2.exceptions.ProtocolError):
            server.receive_data(out)

    def to_clients(wire: bytes) -> None:
        nonlocal dead
        while wire and not dead:
            # Mostly whole reads (what the fast path takes), sometimes a frame cut short.
            cut = data.draw(
                st.one_of(st.just(len(wire)), st.integers(1, len(wire))), label="read size"
            )
            chunk, wire = wire[:cut], wire[cut:]
            outcomes: list[tuple[str, Any]] = []
            for client in (fast, plain):
                try:
                    events = client.receive_data(chunk)
                except h2.exceptions.ProtocolError as exc:
                    # hpack names the buffer it failed on by address.
                    message = re.sub(r"<memory at 0x[0-9a-f]+>", "<memory>", str(exc))
                    outcomes.append((type(exc).__name__, message))
                    continue
                for event in events:
                    if isinstance(event, h2.events.DataReceived) and event.flow_controlled_length:
                        client.acknowledge_received_data(
                            event.flow_controlled_length, event.stream_id
                        )
                outcomes.append(("events", [repr(event) for event in events]))
            assert outcomes[0] == outcomes[1]
            assert _state(fast) == _state(plain)
            to_server(client_output())
            dead = outcomes[0][0] != "events"

    to_server(client_output())
    to_clients(server.data_to_send())
    # A first call opens the connection (h2's state machine leaves IDLE with it).
    for op in [("open", True), *ops]:
        if dead:
            break
        kind = op[0]
        if kind == "open":
            stream_id = fast.get_next_available_stream_id()
            refused = []
            for client in (fast, plain):
                try:
                    client.send_headers(stream_id, _REQUEST, end_stream=op[1])
                except h2.exceptions.ProtocolError as exc:
                    # The server said GOAWAY (an event, not an error).
                    refused.append(str(exc))
            assert len(refused) in (0, 2)
            if refused:
                assert refused[0] == refused[1]
                break
            opened.append(stream_id)
            to_server(client_output())
            continue
        try:
            if kind == "headers":
                extra = [(b"x-pad", b"p" * op[3])] if op[3] else []
                headers = [(b":status", b"200"), (b"content-type", b"application/grpc"), *extra]
                server.send_headers(_pick(op[1], opened), headers, end_stream=op[2])
            elif kind == "data":
                stream_id = _pick(op[1], opened)
                size = min(op[2], server.local_flow_control_window(stream_id))
                server.send_data(stream_id, b"m" * size, end_stream=op[3], pad_length=op[4])
            elif kind == "respond":
                stream_id = _pick(op[1], opened)
                size = min(op[2], server.local_flow_control_window(stream_id) - 100)
                server.send_headers(stream_id, [(b":status", b"200")])
                for start in range(0, size, 16_000):
                    chunk = b"r" * min(16_000, size - start)
                    server.send_data(stream_id, chunk, pad_length=op[3])
                server.send_headers(stream_id, [(b"grpc-status", b"0")], end_stream=True)
            elif kind == "trailers":
                server.send_headers(_pick(op[1], opened), [(b"grpc-status", b"0")], end_stream=True)
            elif kind == "reset":
                server.reset_stream(_pick(op[1], opened))
            elif op[1] == "ping":
                server.ping(b"12345678")
            elif op[1] == "window":
                server.increment_flow_control_window(1000)
            else:
                server.update_settings({h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS: 7})
        except (h2.exceptions.H2Error, KeyError):
            # Not a valid server move in this state: nothing sent.
            pass
        wire = server.data_to_send()
        if kind == "raw":
            for (frame_type, flags, body), choice in op[1]:
                length = len(body)
                header = (length >> 8, length & 0xFF, frame_type, flags, _pick(choice, opened))
                wire += struct.pack(">HBBBL", *header) + body
        to_clients(wire)
