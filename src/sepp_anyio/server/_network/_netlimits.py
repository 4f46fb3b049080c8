"""The network side's limits: from ``[server]`` config to the HTTP/2 core's ``Limits`` and
the I/O layer's timeouts and connection caps.

Defaults come from ``http2-hardening.md`` (its "Ours (server)" paragraphs); each is a
``[server]`` key (``SEPP_SERVER__<KEY>`` in the environment), declared in ``_config``.
"""

from __future__ import annotations

from dataclasses import dataclass

from sepp_anyio._http2 import Limits

from .._config._sections import ServerSection

__all__ = ["NetworkLimits", "http2_limits", "network_limits"]


@dataclass(frozen=True, slots=True)
class NetworkLimits:
    """Timeouts (seconds) and caps the I/O layer enforces; 0 turns a timeout off."""

    #: TLS handshake, from accept.
    tls_handshake_timeout: float = 10.0
    #: The client's preface and first SETTINGS, from accept (after TLS); bytes trickling
    #: in do not extend it.
    handshake_timeout: float = 5.0
    #: Our SETTINGS acknowledged, from accept (SETTINGS_TIMEOUT otherwise).
    settings_ack_timeout: float = 10.0
    #: No call in progress this long (PINGs do not count): GOAWAY and close.
    idle_timeout: float = 300.0
    #: Nothing read this long: we PING; no ACK within ``ping_timeout``: close.
    ping_after: float = 60.0
    ping_timeout: float = 20.0
    #: Output pending and no progress writing it (a 64 KiB piece) for this long: close.
    write_timeout: float = 30.0
    #: The longest a call may run (its grpc-timeout is clamped to this).
    max_call_seconds: float = 600.0
    #: Connections open at once; a newcomer evicts one that has done least (``_admission``),
    #: and accepting pauses while none can be evicted.
    max_connections: int = 1024
    #: Connections from one IP address; a newcomer evicts one of them, or is closed at
    #: once if none can be evicted.
    max_connections_per_ip: int = 128
    #: Eviction on (True) or off (the caps refuse newcomers).
    evict_when_full: bool = True
    #: Shutdown: how long to wait for the PING after the first GOAWAY.
    goaway_ping_timeout: float = 5.0
    #: After an error GOAWAY (or the final one), how long the peer gets to hang up.
    close_linger: float = 1.0
    #: Request bytes being assembled on one connection; over it, the connection holds
    #: back the flow-control credit of what it buffers (``_reqbytes``).
    max_buffered_request_bytes_per_connection: int = 32 << 20
    #: The same across the server; over it, new streams are refused too.
    max_buffered_request_bytes: int = 256 << 20

    # Connection lifetime.
    #: Age at which a connection gets a graceful GOAWAY (jittered per connection by
    #: ``max_connection_age_jitter``); 0: never.
    max_connection_age: float = 3600.0
    #: Calls still running this long after the age GOAWAY are cancelled; 0: no bound.
    max_connection_age_grace: float = 360.0
    #: The age is drawn from ``max_connection_age * (1 +- jitter)`` for each connection,
    #: so that a fleet of clients connected at once does not reconnect at once.
    max_connection_age_jitter: float = 0.1


def _seconds(ms: int) -> float:
    return ms / 1000.0


def network_limits(section: ServerSection) -> NetworkLimits:
    """The I/O layer's limits from ``[server]``."""
    return NetworkLimits(
        tls_handshake_timeout=_seconds(section.tls_handshake_timeout_ms),
        handshake_timeout=_seconds(section.handshake_timeout_ms),
        settings_ack_timeout=_seconds(section.settings_ack_timeout_ms),
        idle_timeout=_seconds(section.idle_timeout_ms),
        ping_after=_seconds(section.keepalive_time_ms),
        ping_timeout=_seconds(section.keepalive_timeout_ms),
        write_timeout=_seconds(section.write_timeout_ms),
        max_call_seconds=_seconds(section.max_call_duration_ms),
        max_connections=section.max_connections,
        max_connections_per_ip=section.max_connections_per_ip,
        evict_when_full=section.evict_when_full,
        max_buffered_request_bytes_per_connection=(
            section.max_buffered_request_bytes_per_connection
        ),
        max_buffered_request_bytes=section.max_buffered_request_bytes,
        max_connection_age=_seconds(section.max_connection_age_ms),
        max_connection_age_grace=_seconds(section.max_connection_age_grace_ms),
    )


def http2_limits(section: ServerSection) -> Limits:
    """The HTTP/2 core's defences from ``[server]``."""
    return Limits(
        max_frame_size=section.http2_max_frame_size,
        max_header_list_size=section.http2_max_header_list_size,
        max_decoded_header_bytes=section.http2_max_decoded_header_bytes,
        max_header_block_bytes=section.http2_max_header_block_bytes,
        max_continuations=section.http2_max_continuations,
        max_queued_control_frames=section.http2_max_queued_control_frames,
        max_pending_output_bytes=section.http2_max_pending_output_bytes,
        glitch_burst=section.http2_glitch_burst,
        glitch_refill_per_second=float(section.http2_glitch_refill_per_second),
        max_consecutive_empty_frames=section.http2_max_consecutive_empty_frames,
        max_settings_entries=section.http2_max_settings_entries,
        max_concurrent_streams=section.http2_max_concurrent_streams,
        max_new_streams_per_read=section.http2_max_new_streams_per_read,
        reset_budget=section.http2_reset_budget,
        reset_refill_per_second=float(section.http2_reset_refill_per_second),
        keepalive_min_time=_seconds(section.keepalive_min_time_ms),
        keepalive_permit_without_stream=section.keepalive_permit_without_stream,
        keepalive_max_strikes=section.keepalive_max_strikes,
    )
