"""Our connection against h2's, on the same bytes (hypothesis), and as each other's peer.

Differential: our client and an h2 client (or our server and an h2 server) are put in
the same state and fed the same frames, drawn from a grammar of valid and hostile
frames, each frame cut in arbitrary pieces. Where the two must agree, they must make
the same events, fail with the same connection error code at the same frame, and send
the same replies (RST_STREAM, PING and SETTINGS ACKs, GOAWAY; WINDOW_UPDATE is left
out: when to hand credit back is a policy and ours differs).

Interop: our client with an h2 server, and an h2 client with our server, making random
calls (bodies across several windows, resets, pings) over arbitrary splits of the bytes.

Deliberate differences from h2 are pinned in :data:`DIFFERENCES` (both behaviours are
asserted, so a change in either shows) and left out of the grammar:

* A graceful GOAWAY: h2 closes its state machine on any GOAWAY and then treats the
  frames of the streams the peer is still finishing as protocol errors; we accept them
  (streams at or below last-stream-id finish normally) and report the streams above it
  as unprocessed.
* A malformed request or response (RFC 9113 section 8.1.1: bad field names or values,
  pseudo-header rules, connection-specific fields, trailers without END_STREAM, a
  content-length that the DATA does not match): a stream error (RST_STREAM
  PROTOCOL_ERROR) for us, as the RFC says; h2 makes it a connection error. Control
  characters other than HTAB in a value (RFC 9110 section 5.5) we reject; h2 lets them
  through.
* An undecodable header block: COMPRESSION_ERROR for us (RFC 9113 section 4.3); h2
  sends PROTOCOL_ERROR.
* RST_STREAM on an idle stream: a connection error for us (RFC 9113 section 6.4); h2
  ignores it.
* WINDOW_UPDATE of 0 on a stream: a stream error for us (section 6.9); h2 ends the
  connection.
* DATA beyond a stream's window: a stream error for us (section 6.9.1 allows either);
  h2 ends the connection.
* DATA on a stream both sides ended with END_STREAM: a connection error (STREAM_CLOSED)
  for us, as RFC 9113 section 5.1 says (h2spec http2/5.1/11); h2 answers RST_STREAM.
  (HEADERS there, h2spec http2/5.1/12, is a connection error for both: see
  :data:`AGREEMENTS`.)
* A stream made to depend on itself by a HEADERS frame's priority or a PRIORITY frame: a
  stream error (PROTOCOL_ERROR) for us, as RFC 7540 section 5.3.1 says (h2spec
  http2/5.3.1/1 and 5.3.1/2); h2 ends the connection. The grammar's priorities depend
  on stream 0.
* A CONTINUATION without a header block on a stream that was reset: a connection error
  for us, as RFC 9113 section 6.10 says for any such frame; h2 answers RST_STREAM once
  it has forgotten the stream, and ends the connection before. (The grammar sends it on
  an idle stream, where both end the connection.)
* A SETTINGS frame with more than 32 entries: a connection error for us
  (``http2-hardening.md`` section 3); h2 applies it. (An identifier repeated within the
  32 is applied in order by both, RFC 9113 section 6.5.3: the grammar repeats them.)
* An unsolicited SETTINGS ACK: we ignore it (it counts as a glitch); h2 reports it.
* An informational (1xx) response: we drop it; h2 reports it.
* Extension frames h2 knows (ALTSVC 0x0A, PRIORITY_UPDATE 0x10): we ignore them as
  unknown types; h2 parses them (and rejects malformed ones). The grammar's unknown
  types start at 0x20.
* Our defences (glitch and reset budgets, keepalive enforcement, header-list limit
  below h2's) have no counterpart in h2; the differential keeps below them.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

import h2.config
import h2.connection
import h2.events
import h2.exceptions
import hpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sepp_anyio._http2 import (
    Connection,
    DataReceived,
    ErrorCode,
    Limits,
    RequestReceived,
    StreamReset,
    TrailersReceived,
)

from ._differential import feed_h2, feed_ours, h2_connection, normal_h2, normal_ours, ours
from ._support import PREFACE, REQUEST, RESPONSE, TRAILERS, Peer, describe, raw, split

E = ErrorCode
# In the differential, our server's defences that h2 lacks are off (see the docstring).
NO_DEFENCES = Limits(keepalive_max_strikes=1 << 30)

pieces = st.lists(st.integers(min_value=1, max_value=40), max_size=4)


def replies(data: bytes) -> list[tuple[Any, ...]]:
    return [frame for frame in describe(data) if frame[0] not in ("WindowUpdate", "Headers")]


def acknowledge_h2(conn: h2.connection.H2Connection, events: list[h2.events.Event]) -> None:
    for event in events:
        if isinstance(event, h2.events.DataReceived) and event.flow_controlled_length:
            # (h2 refuses it for a stream it has closed meanwhile: nothing to hand back.)
            with contextlib.suppress(h2.exceptions.StreamClosedError):
                conn.acknowledge_received_data(event.flow_controlled_length, event.stream_id)


# The grammar ------------------------------------------------------------------


class Model:
    """What the scripted peer knows about each stream: 0 no headers yet, 1 open, 2 done."""

    def __init__(self, streams: dict[int, int], *, client_side: bool) -> None:
        self.streams = streams
        self.client_side = client_side
        self.peer = Peer()
        self.next_new = 1  # server role: the next stream the peer may open


def valid_frame(draw: Callable[..., Any], model: Model) -> bytes:
    """A frame a correct peer could send now."""
    streams = model.streams
    live = [sid for sid, phase in streams.items() if phase < 2]
    choices = ["ping", "ping_ack", "priority", "unknown", "window_conn", "settings"]
    if live:
        choices += ["headers", "data", "trailers", "rst", "window_stream"] * 2
    if not model.client_side:
        choices += ["new_request"] * 2
    kind = draw(st.sampled_from(choices))
    peer = model.peer
    if kind == "ping":
        return peer.ping(draw(st.binary(min_size=8, max_size=8)))
    if kind == "ping_ack":
        return peer.ping(draw(st.binary(min_size=8, max_size=8)), ack=True)
    if kind == "priority":
        return peer.priority(draw(st.sampled_from([1, 3, 5, 7, 9, 101])))
    if kind == "unknown":
        return raw(
            draw(st.integers(0x20, 0xFF)),
            draw(st.integers(0, 255)),
            1,
            draw(st.binary(max_size=20)),
        )
    if kind == "window_conn":
        return peer.window_update(0, draw(st.integers(1, 1 << 20)))
    if kind == "settings":
        # Identifiers may repeat (RFC 9113 section 6.5.3: processed in order).
        entries = draw(
            st.lists(
                st.tuples(st.sampled_from([1, 3, 4, 5, 6, 0x42]), st.integers(0, 1 << 20)),
                max_size=5,
            )
        )
        floors = {5: 16384, 3: 10}
        return peer.settings_entries(
            [(key, max(value, floors.get(key, 0))) for key, value in entries]
        )
    if kind == "new_request":
        sid = model.next_new
        model.next_new += 2
        end = draw(st.booleans())
        streams[sid] = 2 if end else 1
        extra = draw(
            st.lists(
                st.sampled_from([(b"x-a", b"1"), (b"x-b", b"\xe9t\xe9"), (b"grpc-timeout", b"5S")]),
                max_size=2,
            )
        )
        return _headers(draw, peer, sid, [*REQUEST, *extra], end)
    sid = draw(st.sampled_from(live))
    phase = streams[sid]
    if kind == "headers" and phase == 0:
        end = draw(st.booleans())
        streams[sid] = 2 if end else 1
        return _headers(draw, peer, sid, RESPONSE, end)
    if kind == "data" and phase == 1:
        end = draw(st.booleans())
        if end:
            streams[sid] = 2
        pad = draw(st.one_of(st.none(), st.integers(0, 30)))
        return peer.data(sid, draw(st.binary(max_size=300)), end_stream=end, pad=pad)
    if kind == "trailers" and phase == 1:
        streams[sid] = 2
        return _headers(draw, peer, sid, TRAILERS, True)
    if kind == "rst":
        streams[sid] = 2
        return peer.rst(sid, draw(st.sampled_from([0, 1, 2, 7, 8, 0x42])))
    # window_stream, or a kind that does not fit the stream's phase.
    return peer.window_update(sid, draw(st.integers(1, 1 << 16)))


def _headers(
    draw: Callable[..., Any], peer: Peer, sid: int, headers: list[tuple[bytes, bytes]], end: bool
) -> bytes:
    block = peer.block(headers)
    cuts = draw(st.lists(st.integers(1, max(1, len(block))), max_size=2, unique=True))
    if cuts and len(block) > 1:
        cuts = sorted(cut for cut in cuts if cut < len(block))
        parts = [block[a:b] for a, b in zip([0, *cuts], [*cuts, len(block)], strict=True)]
        out = peer.headers_block(sid, parts[0], end_stream=end, end_headers=len(parts) == 1)
        for index, part in enumerate(parts[1:], 2):
            out += peer.continuation(sid, part, end_headers=index == len(parts))
        return out
    pad = draw(st.one_of(st.none(), st.integers(0, 20)))
    return peer.headers_block(sid, block, end_stream=end, pad=pad, priority=draw(st.booleans()))


HOSTILE: dict[str, Callable[[Peer], bytes]] = {
    "frame over the max size": lambda p: raw(0x0, 0, 1, b"x" * 16385),
    "PING of 7 bytes": lambda p: raw(0x6, 0, 0, b"1234567"),
    "PING on a stream": lambda p: raw(0x6, 0, 1, b"12345678"),
    "SETTINGS ENABLE_PUSH 2": lambda p: p.settings({2: 2}),
    "SETTINGS window over 2**31 - 1": lambda p: p.settings({4: 1 << 31}),
    "SETTINGS frame size too small": lambda p: p.settings({5: 100}),
    "SETTINGS of 5 bytes": lambda p: raw(0x4, 0, 0, b"\0\x03\0\0\0"),
    "SETTINGS on a stream": lambda p: raw(0x4, 0, 1, b""),
    "DATA on stream 0": lambda p: raw(0x0, 0, 0, b"x"),
    "DATA on an idle stream": lambda p: p.data(201, b"x"),
    "HEADERS on stream 0": lambda p: raw(0x1, 0x4, 0, b"\x88"),
    "PUSH_PROMISE": lambda p: raw(0x5, 0x4, 1, b"\0\0\0\x02\x88"),
    "CONTINUATION without HEADERS": lambda p: p.continuation(201, b"\x88"),
    "header block interrupted": lambda p: p.headers_block(1, b"\x88", end_headers=False) + p.ping(),
    "WINDOW_UPDATE of 0 on the connection": lambda p: raw(0x8, 0, 0, b"\0\0\0\0"),
    "connection window overflow": lambda p: p.window_update(0, (1 << 31) - 1) * 2,
    "WINDOW_UPDATE of 5 bytes": lambda p: raw(0x8, 0, 0, b"\0\0\0\x01\0"),
    "RST_STREAM on stream 0": lambda p: raw(0x3, 0, 0, b"\0\0\0\x08"),
    "RST_STREAM of 3 bytes": lambda p: raw(0x3, 0, 1, b"\0\0\x08"),
    "GOAWAY on a stream": lambda p: raw(0x7, 0, 1, b"\0" * 8),
    "PRIORITY on stream 0": lambda p: raw(0x2, 0, 0, b"\0\0\0\0\x01"),
    "DATA padding beyond the frame": lambda p: raw(0x0, 0x8, 1, b"\x05abc"),
}


@st.composite
def scripts(draw: Callable[..., Any], client_side: bool) -> tuple[list[bytes], list[list[int]]]:
    if client_side:
        # Stream 1 and 5 open, stream 3 half-closed (local).
        model = Model({1: 0, 3: 0, 5: 0}, client_side=True)
    else:
        model = Model({}, client_side=False)
    frames = [valid_frame(draw, model) for _ in range(draw(st.integers(1, 25)))]
    if draw(st.booleans()):
        name = draw(st.sampled_from(sorted(HOSTILE)))
        frames.append(HOSTILE[name](model.peer))
    cuts = [draw(pieces) for _ in frames]
    return frames, cuts


# The two sides in the same state ----------------------------------------------------


def clients() -> tuple[h2.connection.H2Connection, Connection]:
    theirs, mine = h2_connection(client_side=True), ours(client_side=True)
    handshake = Peer.settings() + Peer.settings(ack=True)
    feed_h2(theirs, [handshake])
    feed_ours(mine, [handshake])
    for index in range(3):
        theirs.send_headers(theirs.get_next_available_stream_id(), REQUEST, end_stream=index == 1)
        mine.open_stream(REQUEST, end_stream=index == 1)
    theirs.data_to_send()
    mine.data_to_send()
    return theirs, mine


def servers() -> tuple[h2.connection.H2Connection, Connection]:
    theirs = h2_connection(client_side=False)
    mine = Connection(
        client_side=False, stream_window=65535, connection_window=65535, limits=NO_DEFENCES
    )
    handshake = PREFACE + Peer.settings() + Peer.settings(ack=True)
    feed_h2(theirs, [handshake])
    feed_ours(mine, [handshake])
    theirs.data_to_send()
    mine.data_to_send()
    return theirs, mine


def run_differential(
    theirs: h2.connection.H2Connection, mine: Connection, frames: list[bytes], cuts: list[list[int]]
) -> None:
    for number, (frame, cut) in enumerate(zip(frames, cuts, strict=True)):
        parts = split(frame, cut)
        their_events: list[Any] = []
        their_error = None
        for part in parts:
            try:
                raw_events = theirs.receive_data(part)
            except h2.exceptions.ProtocolError as exc:
                their_error = int(exc.error_code)
                break
            acknowledge_h2(theirs, raw_events)
            their_events += normal_h2(raw_events)
        my_raw: list[Any] = []
        for part in parts:
            events = mine.receive_data(part, 0.0)
            for event in events:
                if isinstance(event, DataReceived):
                    mine.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
            my_raw += events
        my_events, my_error = normal_ours(my_raw)
        assert (my_events, my_error) == (their_events, their_error), f"frame {number}: {frame!r}"
        assert replies(mine.data_to_send()) == replies(theirs.data_to_send()), f"frame {number}"
        if my_error is not None:
            return


@settings(max_examples=150, deadline=None)
@given(scripts(client_side=True))
def test_client_agrees_with_h2(script: tuple[list[bytes], list[list[int]]]) -> None:
    theirs, mine = clients()
    run_differential(theirs, mine, *script)


@settings(max_examples=150, deadline=None)
@given(scripts(client_side=False))
def test_server_agrees_with_h2(script: tuple[list[bytes], list[list[int]]]) -> None:
    theirs, mine = servers()
    run_differential(theirs, mine, *script)


# The documented differences --------------------------------------------------------


DIFFERENCES: dict[str, tuple[Callable[[Peer], bytes], Any, Any]] = {
    # name: (frames, h2's outcome, ours) as (events, connection error code)
    "graceful GOAWAY, then a stream below it finishes": (
        lambda p: p.goaway(1) + p.headers(1, RESPONSE, end_stream=True),
        ([], E.PROTOCOL_ERROR),
        (
            [("goaway", 0, 1, b""), ("response", 1, tuple(RESPONSE)), ("end", 1)],
            None,
        ),
    ),
    "uppercase field name": (
        lambda p: p.headers(1, [(b":status", b"200"), (b"X-A", b"1")]),
        ([], E.PROTOCOL_ERROR),
        ([("reset", 1, E.PROTOCOL_ERROR, False)], None),
    ),
    "control character in a value": (
        lambda p: p.headers(1, [(b":status", b"200"), (b"x-a", b"a\x07b")]),
        ([("response", 1, ((b":status", b"200"), (b"x-a", b"a\x07b")))], None),
        ([("reset", 1, E.PROTOCOL_ERROR, False)], None),
    ),
    "trailers without END_STREAM": (
        lambda p: p.headers(1, RESPONSE) + p.headers(1, TRAILERS),
        ([], E.PROTOCOL_ERROR),
        ([("response", 1, tuple(RESPONSE)), ("reset", 1, E.PROTOCOL_ERROR, False)], None),
    ),
    "content-length not matched": (
        lambda p: (
            p.headers(1, [*RESPONSE, (b"content-length", b"5")])
            + p.data(1, b"abc", end_stream=True)
        ),
        ([], E.PROTOCOL_ERROR),
        (
            [
                ("response", 1, (*RESPONSE, (b"content-length", b"5"))),
                ("reset", 1, E.PROTOCOL_ERROR, False),
            ],
            None,
        ),
    ),
    "undecodable header block": (
        lambda p: p.headers_block(1, b"\xff\xff\xff\xff\xff\xff"),
        ([], E.PROTOCOL_ERROR),
        ([], E.COMPRESSION_ERROR),
    ),
    "RST_STREAM on an idle stream": (
        lambda p: p.rst(7, 8),
        ([], None),
        ([], E.PROTOCOL_ERROR),
    ),
    "WINDOW_UPDATE of 0 on a stream": (
        lambda p: raw(0x8, 0, 1, b"\0\0\0\0"),
        ([], E.PROTOCOL_ERROR),
        ([("reset", 1, E.PROTOCOL_ERROR, False)], None),
    ),
    "DATA on a stream that closed normally": (
        lambda p: p.headers(3, RESPONSE, end_stream=True) + p.data(3, b"x"),
        ([("response", 3, tuple(RESPONSE)), ("end", 3)], None),
        ([("response", 3, tuple(RESPONSE)), ("end", 3)], E.STREAM_CLOSED),
    ),
    "HEADERS making a stream depend on itself": (
        lambda p: p.headers(1, RESPONSE, priority=True, depends_on=1),
        ([], E.PROTOCOL_ERROR),
        ([("reset", 1, E.PROTOCOL_ERROR, False)], None),
    ),
    "PRIORITY making a stream depend on itself": (
        lambda p: p.priority(1, depends_on=1),
        ([], E.PROTOCOL_ERROR),
        ([("reset", 1, E.PROTOCOL_ERROR, False)], None),
    ),
    "unsolicited SETTINGS ACK": (
        lambda p: p.settings(ack=True),
        ([("settings_ack",)], None),
        ([], None),
    ),
}


@pytest.mark.parametrize("name", sorted(DIFFERENCES))
def test_documented_difference(name: str) -> None:
    frames, h2_outcome, our_outcome = DIFFERENCES[name]
    theirs, mine = clients()
    data = frames(Peer())
    assert feed_h2(theirs, [data]) == h2_outcome
    assert feed_ours(mine, [data]) == our_outcome


# Cases h2spec checks where we used to differ from h2 (or from the RFC) and now agree:
# (role, frames one receive_data each, the outcome both must have).
AGREEMENTS: dict[str, tuple[bool, Callable[[Peer], list[bytes]], Any]] = {
    "http2/6.5.3/1: SETTINGS repeating an identifier": (
        True,
        lambda p: [p.settings_entries([(4, 100), (3, 1), (4, 1), (3, 2)])],
        ([("settings", {3: 2, 4: 1})], None),
    ),
    "http2/5.1/12: HEADERS on a stream that closed normally": (
        True,
        lambda p: [p.headers(3, RESPONSE, end_stream=True), p.headers(3, RESPONSE)],
        ([("response", 3, tuple(RESPONSE)), ("end", 3)], E.STREAM_CLOSED),
    ),
    "http2/5.1.1/2: a new stream below the highest": (
        False,
        lambda p: [p.headers(5, REQUEST, end_stream=True), p.headers(3, REQUEST, end_stream=True)],
        ([("request", 5, tuple(REQUEST)), ("end", 5)], E.PROTOCOL_ERROR),
    ),
    "HEADERS after the peer's RST_STREAM (a stream error)": (
        False,
        lambda p: [p.headers(1, REQUEST), p.rst(1, 8), p.headers(1, TRAILERS, end_stream=True)],
        (
            [("request", 1, tuple(REQUEST)), ("reset", 1, E.CANCEL, True)],
            None,
        ),
    ),
}


@pytest.mark.parametrize("name", sorted(AGREEMENTS))
def test_agreement_on_h2spec_cases(name: str) -> None:
    """Frame by frame the same events, error and replies (RST_STREAM, GOAWAY) as h2."""
    client_side, frames, outcome = AGREEMENTS[name]
    data = frames(Peer())
    theirs, mine = clients() if client_side else servers()
    assert feed_h2(theirs, data) == outcome
    assert feed_ours(mine, data) == outcome
    theirs, mine = clients() if client_side else servers()
    run_differential(theirs, mine, data, [[] for _ in data])


def test_stream_window_overrun_difference() -> None:
    theirs, _ = clients()
    theirs.increment_flow_control_window(1 << 20)
    mine = Connection(client_side=True, stream_window=65535, connection_window=1 << 20)
    feed_ours(mine, [Peer.settings()])
    mine.open_stream(REQUEST)
    peer = Peer()
    data = peer.headers(1, RESPONSE) + b"".join(peer.data(1, b"x" * 16384) for _ in range(4))
    events, error = feed_h2(theirs, [data])
    assert error == E.FLOW_CONTROL_ERROR
    events, error = feed_ours(mine, [data])
    assert error is None and events[-1] == ("reset", 1, E.FLOW_CONTROL_ERROR, False)


# Interop: each other's peer --------------------------------------------------------


def _body(size: int) -> bytes:
    return bytes(range(256)) * (size // 256) + bytes(size % 256)


# (request size, response size, reset by the client instead of finishing); the bodies
# are built from the sizes in the test (a failure then prints sizes, not 200 KB reprs).
sizes = st.one_of(st.integers(0, 100), st.integers(60_000, 200_000))
calls = st.lists(st.tuples(sizes, sizes, st.booleans()), min_size=1, max_size=6)


def shuttle(send: Callable[[], bytes], receive: Callable[[bytes], Any], cut: list[int]) -> Any:
    data = send()
    results = []
    for part in split(data, cut):
        results.append(receive(part))
    return results


@settings(max_examples=40, deadline=None)
@given(calls, st.lists(st.integers(1, 5000), max_size=8))
def test_our_client_with_an_h2_server(plan: list[tuple[int, int, bool]], cut: list[int]) -> None:
    script = [(_body(request), _body(response), cancel) for request, response, cancel in plan]
    server = h2_connection(client_side=False)
    client = Connection(client_side=True)
    received: dict[int, bytes] = {}
    responses: dict[int, bytes] = {}
    trailers: dict[int, Any] = {}
    resets: set[int] = set()
    bodies: dict[int, tuple[bytes, bytes, bool]] = {}
    pending: dict[int, memoryview] = {}
    server_pending: dict[int, memoryview] = {}

    def to_server() -> None:
        data = client.data_to_send()
        for part in split(data, cut):
            events = server.receive_data(part)
            # (A stream may end and be reset in the same read: h2 has closed it then.)
            gone = {e.stream_id for e in events if isinstance(e, h2.events.StreamReset)}
            for event in events:
                if isinstance(event, h2.events.DataReceived):
                    received[event.stream_id] = received.get(event.stream_id, b"") + event.data
                    acknowledge_h2(server, [event])
                elif isinstance(event, h2.events.StreamEnded) and event.stream_id not in gone:
                    sid = event.stream_id
                    server.send_headers(sid, RESPONSE)
                    server_pending[sid] = memoryview(bodies[sid][1])
                elif isinstance(event, h2.events.StreamReset):
                    server_pending.pop(event.stream_id, None)
        for sid, view in list(server_pending.items()):
            window = min(server.local_flow_control_window(sid), server.max_outbound_frame_size)
            chunk, rest = view[:window], view[window:]
            server.send_data(sid, chunk.tobytes())
            if rest:
                server_pending[sid] = rest
            else:
                del server_pending[sid]
                server.send_headers(sid, TRAILERS, end_stream=True)

    def to_client() -> None:
        data = server.data_to_send()
        for part in split(data, cut):
            for event in client.receive_data(part, 0.0):
                if isinstance(event, DataReceived):
                    responses[event.stream_id] = responses.get(event.stream_id, b"") + event.data
                    client.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
                elif isinstance(event, TrailersReceived):
                    trailers[event.stream_id] = event.headers
                elif isinstance(event, StreamReset):
                    resets.add(event.stream_id)
                assert not isinstance(event, StreamReset) or event.remote, event

    to_client()
    for request, response, cancel in script:
        sid = client.open_stream(REQUEST, extra=[(b"grpc-timeout", b"1S")], cache_key=b"k")
        bodies[sid] = (request, response, cancel)
        pending[sid] = memoryview(request)
    for _ in range(200):
        for sid, view in list(pending.items()):
            sent = client.send_data(sid, view, end_stream=True)
            if sent == len(view):
                del pending[sid]
            else:
                pending[sid] = view[sent:]
        for sid, (_, _, cancel) in bodies.items():
            if cancel and sid in received and sid not in resets and client.reset_stream(sid):
                resets.add(sid)
                pending.pop(sid, None)
        to_server()
        to_client()
        if not pending and not server_pending and not server.data_to_send():
            break
    for sid, (request, response, _) in bodies.items():
        if sid in resets:
            continue
        assert received[sid] == request
        assert responses.get(sid, b"") == response
        assert trailers[sid] == tuple(TRAILERS)
    assert not client.closed


@settings(max_examples=40, deadline=None)
@given(calls, st.lists(st.integers(1, 5000), max_size=8))
def test_an_h2_client_with_our_server(plan: list[tuple[int, int, bool]], cut: list[int]) -> None:
    script = [(_body(request), _body(response), cancel) for request, response, cancel in plan]
    client = h2_connection(client_side=True)
    server = Connection(client_side=False)
    received: dict[int, bytes] = {}
    responses: dict[int, bytes] = {}
    trailers: dict[int, Any] = {}
    ended: set[int] = set()
    bodies: dict[int, tuple[bytes, bytes, bool]] = {}
    pending: dict[int, bytes] = {}
    server_pending: dict[int, memoryview] = {}
    reset: set[int] = set()

    def to_server() -> None:
        for part in split(client.data_to_send(), cut):
            for event in server.receive_data(part, 0.0):
                if isinstance(event, RequestReceived):
                    assert event.headers[:4] == tuple(REQUEST[:4])
                elif isinstance(event, DataReceived):
                    received[event.stream_id] = received.get(event.stream_id, b"") + event.data
                    server.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
                    if event.end_stream:
                        server.send_headers(event.stream_id, RESPONSE, cache_key=b"r")
                        server_pending[event.stream_id] = memoryview(bodies[event.stream_id][1])
                elif isinstance(event, StreamReset):
                    assert event.remote, event
                    server_pending.pop(event.stream_id, None)
                    server.release_stream(event.stream_id)
        for sid, view in list(server_pending.items()):
            sent = server.send_data(sid, view)
            if sent == len(view):
                del server_pending[sid]
                server.send_headers(sid, TRAILERS, end_stream=True, cache_key=b"t")
                server.release_stream(sid)
            else:
                server_pending[sid] = view[sent:]

    def to_client() -> None:
        for part in split(server.data_to_send(), cut):
            for event in client.receive_data(part):
                if isinstance(event, h2.events.DataReceived):
                    responses[event.stream_id] = responses.get(event.stream_id, b"") + event.data
                    acknowledge_h2(client, [event])
                elif isinstance(event, h2.events.TrailersReceived):
                    trailers[event.stream_id] = tuple(event.headers)
                elif isinstance(event, h2.events.StreamEnded):
                    ended.add(event.stream_id)
                assert not isinstance(event, h2.events.ConnectionTerminated), event

    to_server()
    to_client()
    for request, response, cancel in script:
        sid = client.get_next_available_stream_id()
        client.send_headers(sid, [*REQUEST, hpack.NeverIndexedHeaderTuple(b"grpc-timeout", b"1S")])
        bodies[sid] = (request, response, cancel)
        pending[sid] = request
    for _ in range(200):
        for sid, body in list(pending.items()):
            window = min(client.local_flow_control_window(sid), client.max_outbound_frame_size)
            chunk, rest = body[:window], body[window:]
            client.send_data(sid, chunk, end_stream=not rest)
            if rest:
                pending[sid] = rest
            else:
                del pending[sid]
        for sid, (_, _, cancel) in bodies.items():
            if cancel and sid in responses and sid not in ended and sid not in reset:
                client.reset_stream(sid, 8)
                reset.add(sid)
        to_server()
        to_client()
        if not pending and not server_pending and not server.data_to_send():
            break
    for sid, (request, response, _) in bodies.items():
        if sid in reset:
            continue
        assert received[sid] == request
        assert responses.get(sid, b"") == response
        assert trailers[sid] == tuple(TRAILERS)
    assert not server.closed
    assert server.active_requests == 0


def test_h2_reads_our_goaway_and_resets() -> None:
    """The frames we send on errors are what h2 expects to read."""
    client = h2.connection.H2Connection(
        h2.config.H2Configuration(client_side=True, validate_outbound_headers=False)
    )
    client.initiate_connection()
    server = Connection(client_side=False)
    client.receive_data(server.data_to_send())
    server.receive_data(client.data_to_send(), 0.0)
    client.receive_data(server.data_to_send())
    sid = client.get_next_available_stream_id()
    client.send_headers(sid, [(b":method", b"POST"), (b":path", b"/")])  # no :scheme
    server.receive_data(client.data_to_send(), 0.0)
    events = client.receive_data(server.data_to_send())
    assert [(type(e).__name__, getattr(e, "error_code", None)) for e in events] == [
        ("StreamReset", E.PROTOCOL_ERROR)
    ]
    server.send_goaway(E.ENHANCE_YOUR_CALM, debug_data=b"calm")
    (event,) = client.receive_data(server.data_to_send())
    assert isinstance(event, h2.events.ConnectionTerminated)
    assert (event.error_code, event.last_stream_id, event.additional_data) == (
        E.ENHANCE_YOUR_CALM,
        0,
        b"calm",
    )
