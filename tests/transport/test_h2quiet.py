"""The quiet frames (``_transport/_h2quiet.py``) change cost only: h2 handles them the same.

The client transport no longer uses h2; the reference server still installs the quiet
frames on grpclib's h2 connections until it moves to ``_http2`` (issue 16).
"""

from __future__ import annotations

from typing import Any

import h2.config
import h2.connection
import h2.events

from sepp_anyio._transport._h2quiet import QUIET_FRAMES, install_quiet_frames


def test_received_frames_have_cheap_reprs_and_the_same_handling() -> None:
    config: dict[str, Any] = {
        "header_encoding": None,
        "validate_outbound_headers": False,
        "normalize_outbound_headers": False,
        "validate_inbound_headers": False,
    }
    client = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True, **config))
    install_quiet_frames(client)
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
