"""Driving our connection and h2's with the same bytes, and comparing what they make of them.

Both are put in the same state (the same streams opened, the same handshake), then fed
the same frames, one ``receive_data`` per frame (each possibly cut in pieces). Their
events are reduced to a common form; a connection error is the error code (h2 raises,
we report :class:`ConnectionTerminated`).
"""

from __future__ import annotations

from typing import Any

import h2.config
import h2.connection
import h2.events
import h2.exceptions
import h2.settings

from sepp_anyio._http2 import (
    Connection,
    ConnectionTerminated,
    DataReceived,
    Event,
    GoAwayReceived,
    PingAcknowledged,
    PingReceived,
    RemoteSettingsChanged,
    RequestReceived,
    ResponseReceived,
    SettingsAcknowledged,
    StreamReset,
    TrailersReceived,
    WindowUpdated,
)

KNOWN_SETTINGS = {1, 2, 3, 4, 5, 6}
Normal = tuple[Any, ...]


def h2_connection(*, client_side: bool) -> h2.connection.H2Connection:
    """h2 with RFC header validation on, and the same local settings as ours (no push,
    a 16 KiB header list, 64 KiB windows)."""
    conn = h2.connection.H2Connection(
        h2.config.H2Configuration(client_side=client_side, header_encoding=None)
    )
    values = {
        h2.settings.SettingCodes.MAX_HEADER_LIST_SIZE: 16384,
        h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: 65535,
    }
    if client_side:
        values[h2.settings.SettingCodes.ENABLE_PUSH] = 0
    else:
        values[h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS] = 100
    conn.local_settings = h2.settings.Settings(client=client_side, initial_values=values)
    conn.initiate_connection()
    return conn


def ours(*, client_side: bool) -> Connection:
    return Connection(client_side=client_side, stream_window=65535, connection_window=65535)


def normal_h2(events: list[h2.events.Event]) -> list[Normal]:
    out: list[Normal] = []
    for event in events:
        if isinstance(event, h2.events.RequestReceived):
            out.append(("request", event.stream_id, tuple(event.headers)))
        elif isinstance(event, h2.events.ResponseReceived):
            out.append(("response", event.stream_id, tuple(event.headers)))
        elif isinstance(event, h2.events.TrailersReceived):
            out.append(("trailers", event.stream_id, tuple(event.headers)))
        elif isinstance(event, h2.events.DataReceived):
            out.append(("data", event.stream_id, event.data, event.flow_controlled_length))
        elif isinstance(event, h2.events.StreamEnded):
            out.append(("end", event.stream_id))
        elif isinstance(event, h2.events.StreamReset):
            out.append(("reset", event.stream_id, int(event.error_code), event.remote_reset))
        elif isinstance(event, h2.events.WindowUpdated):
            out.append(("window", event.stream_id, event.delta))
        elif isinstance(event, h2.events.RemoteSettingsChanged):
            changed = {
                int(key): value.new_value
                for key, value in event.changed_settings.items()
                if key in KNOWN_SETTINGS
            }
            out.append(("settings", changed))
        elif isinstance(event, h2.events.SettingsAcknowledged):
            out.append(("settings_ack",))
        elif isinstance(event, h2.events.PingReceived):
            out.append(("ping", event.ping_data))
        elif isinstance(event, h2.events.PingAckReceived):
            out.append(("ping_ack", event.ping_data))
        elif isinstance(event, h2.events.ConnectionTerminated):
            out.append(
                (
                    "goaway",
                    int(event.error_code or 0),
                    event.last_stream_id,
                    event.additional_data or b"",
                )
            )
        # InformationalResponseReceived, PriorityUpdated, UnknownFrameReceived,
        # AlternativeServiceAvailable: nothing of ours corresponds (see the test module).
    return out


def normal_ours(events: list[Event]) -> tuple[list[Normal], int | None]:
    out: list[Normal] = []
    error: int | None = None
    for event in events:
        if isinstance(event, RequestReceived):
            out.append(("request", event.stream_id, event.headers))
            if event.end_stream:
                out.append(("end", event.stream_id))
        elif isinstance(event, ResponseReceived):
            out.append(("response", event.stream_id, event.headers))
            if event.end_stream:
                out.append(("end", event.stream_id))
        elif isinstance(event, TrailersReceived):
            out.append(("trailers", event.stream_id, event.headers))
            out.append(("end", event.stream_id))
        elif isinstance(event, DataReceived):
            out.append(("data", event.stream_id, event.data, event.flow_controlled_length))
            if event.end_stream:
                out.append(("end", event.stream_id))
        elif isinstance(event, StreamReset):
            out.append(("reset", event.stream_id, int(event.error_code), event.remote))
        elif isinstance(event, WindowUpdated):
            out.append(("window", event.stream_id, event.delta))
        elif isinstance(event, RemoteSettingsChanged):
            out.append(("settings", {int(k): v for k, v in event.changed.items()}))
        elif isinstance(event, SettingsAcknowledged):
            out.append(("settings_ack",))
        elif isinstance(event, PingReceived):
            out.append(("ping", event.data))
        elif isinstance(event, PingAcknowledged):
            out.append(("ping_ack", event.data))
        elif isinstance(event, GoAwayReceived):
            out.append(("goaway", int(event.error_code), event.last_stream_id, event.debug_data))
        elif isinstance(event, ConnectionTerminated):
            error = int(event.error_code)
    return out, error


def feed_h2(
    conn: h2.connection.H2Connection, pieces: list[bytes]
) -> tuple[list[Normal], int | None]:
    events: list[Normal] = []
    for piece in pieces:
        try:
            events += normal_h2(conn.receive_data(piece))
        except h2.exceptions.ProtocolError as exc:
            return events, int(exc.error_code)
    return events, None


def feed_ours(conn: Connection, pieces: list[bytes]) -> tuple[list[Normal], int | None]:
    events: list[Event] = []
    for piece in pieces:
        events += conn.receive_data(piece, 0.0)
    return normal_ours(events)
