"""The connection's defences against hostile peers: limits with their defaults (the budgets
are ``sepp_anyio._bucket`` token buckets).

Every number comes from ``http2-hardening.md`` (its "Ours" paragraphs and summary
table); the section is named next to each field. All of them are settings of
:class:`Limits`, so the reference server can take them from its configuration and the
tests can switch one off (set it huge) to show the bound it keeps.

Limits that need time (the budgets' refill, keepalive enforcement) use the ``now`` the
caller passes to ``Connection.receive_data``: the connection has no clock.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Limits"]


@dataclass(frozen=True, slots=True)
class Limits:
    """Per-connection limits. The defaults are the recommended ones for both roles;
    the fields marked "server" only act in the server role."""

    #: SETTINGS_MAX_FRAME_SIZE we advertise; a longer frame is refused on its 9-byte
    #: header, before any of the payload is buffered (FRAME_SIZE_ERROR). Section 4.
    max_frame_size: int = 16384
    #: SETTINGS_MAX_HEADER_LIST_SIZE we advertise and enforce on each decoded header
    #: list (name + value + 32 per field): over it is a stream error. Section 4.
    max_header_list_size: int = 16 << 10
    #: The HPACK decoder's own bound on a decoded list; over it the decoder stops
    #: (its state is lost) and the connection ends with ENHANCE_YOUR_CALM. Section 4.
    max_decoded_header_bytes: int = 32 << 10
    #: Encoded bytes of one header block (HEADERS + CONTINUATIONs), checked on each
    #: frame header before the payload is buffered. Section 2.
    max_header_block_bytes: int = 32 << 10
    #: CONTINUATION frames in one header block. Section 2.
    max_continuations: int = 8
    #: Control frames (SETTINGS/PING ACKs, RST_STREAM, WINDOW_UPDATE) queued and not
    #: yet taken by ``data_to_send``; more means the peer is not reading. Section 3.
    max_queued_control_frames: int = 1000
    #: Queued output at which ``Connection.should_pause_reading`` turns true. Section 3.
    max_pending_output_bytes: int = 1 << 20
    #: Glitch bucket: burst and refill per second. Counts empty non-final DATA,
    #: PRIORITY, unknown frame types, WINDOW_UPDATE/RST_STREAM on closed streams,
    #: SETTINGS after the first, frames on streams we reset. Section 3.
    glitch_burst: int = 1000
    glitch_refill_per_second: float = 33.0
    #: Empty non-final DATA/HEADERS/CONTINUATION frames in a row. Section 3.
    max_consecutive_empty_frames: int = 10
    #: Entries in one SETTINGS frame. Section 3.
    max_settings_entries: int = 32
    #: How long, and how many, streams we reset are remembered (late frames on them
    #: are ignored). Section 1 ("Ours (client)"). ``reset_memory_streams`` also bounds
    #: the memory of how the other closed streams ended (``_closed.EndedStreams``).
    reset_memory_seconds: float = 1.0
    reset_memory_streams: int = 500
    #: Server: SETTINGS_MAX_CONCURRENT_STREAMS we advertise and enforce, counting
    #: requests handed to the caller until it releases them (REFUSED_STREAM beyond,
    #: also before our SETTINGS are acknowledged). Section 1 and 6.
    max_concurrent_streams: int = 100
    #: Server: new streams accepted in one ``receive_data`` call (REFUSED_STREAM
    #: beyond). Section 1.
    max_new_streams_per_read: int = 200
    #: Server: the rapid-reset budget (CVE-2023-44487). Starts full; -1 for each peer
    #: RST_STREAM on a stream that had not completed and for each RST_STREAM we send
    #: for a peer's error (malformed or refused request, ...); +1 for each completed
    #: stream; refills per second. Empty: GOAWAY ENHANCE_YOUR_CALM. Section 1.
    reset_budget: int = 200
    reset_refill_per_second: float = 10.0
    #: Server: keepalive enforcement. A PING sooner than this after the previous one
    #: (or after our last HEADERS/DATA) is a strike. Section 6.
    keepalive_min_time: float = 10.0
    #: Server: whether pings are allowed while no stream is open; if not, the minimum
    #: time between pings without streams is 2 hours.
    keepalive_permit_without_stream: bool = True
    #: Server: strikes allowed; the next one ends the connection (``too_many_pings``).
    keepalive_max_strikes: int = 2
    #: Client: the peer's MAX_CONCURRENT_STREAMS assumed until its SETTINGS arrive.
    assumed_max_concurrent_streams: int = 100
    #: The largest HPACK table our encoder uses, whatever the peer offers. Section 4.
    max_encoder_table_size: int = 4096
