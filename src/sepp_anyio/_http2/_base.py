"""What every part of the connection shares: its slots, its construction, the queue.

:class:`ConnectionBase` holds every attribute of a connection (``__slots__``: a
connection is one flat object, and each part reads its fields directly, with no
helper object in between on the hot paths). The parts are mixins over it, one idea
each, combined by :class:`~._connection.Connection`:

* :mod:`._defences`: the limits and the protocol errors (RFC 9113 section 5.4);
* :mod:`._reader`: bytes in -> events out (subclasses the defences, which it calls);
* :mod:`._sender`: the send methods -> bytes out.

The connection's phase, GOAWAYs and handshake are :class:`~._state.ConnectionState`,
the first base; each stream's state is :class:`~._stream.Stream`'s table.
"""

from __future__ import annotations

from collections.abc import Hashable

from .._bucket import TokenBucket
from . import _frames as F
from ._closed import EndedStreams, ResetStreams
from ._errors import LimitsError
from ._flow import DEFAULT_WINDOW, MAX_WINDOW, InboundWindow
from ._hpack import HeaderDecoder, HeaderEncoder
from ._limits import Limits
from ._settings import (
    DEFAULT_HEADER_TABLE_SIZE,
    DEFAULT_MAX_FRAME_SIZE,
    MAX_MAX_FRAME_SIZE,
    UNLIMITED,
    PeerSettings,
    SettingCode,
)
from ._state import ConnectionState
from ._stream import Stream

__all__ = ["DEFAULT_LIMITS", "MAX_STREAM_ID", "ConnectionBase"]

#: The largest stream id (31 bits).
MAX_STREAM_ID = (1 << 31) - 1
DEFAULT_LIMITS = Limits()
_MAX_SETTING = (1 << 32) - 1
# Keepalive enforcement without open streams when such pings are not permitted
# (grpc-go's fixed value).
_IDLE_PING_MIN_TIME = 7200.0
# RST_STREAM/WINDOW_UPDATE frames tolerated on a stream after it completed, and after
# the peer reset it (one RST answering each of our frames still in flight).
_LATE_FRAMES_AFTER_COMPLETION = 3
_LATE_FRAMES_AFTER_PEER_RESET = 8

_DATA = F.DATA
_HEADERS = F.HEADERS
_CONTINUATION = F.CONTINUATION
_END_STREAM = F.END_STREAM
_END_HEADERS = F.END_HEADERS
_PADDED = F.PADDED
_PRIORITY_FLAG = F.PRIORITY_FLAG
_ACK = F.ACK
_BARE_HEADERS = F.END_HEADERS | F.PADDED | F.PRIORITY_FLAG
_unpack_header = F.HEADER.unpack_from
_pack_header = F.HEADER.pack


class ConnectionBase(ConnectionState):
    """The attributes of a connection, its construction, and what all parts use.

    See :class:`~._connection.Connection` for the arguments.
    """

    __slots__ = (
        "_block",
        "_block_end_stream",
        "_block_frames",
        "_block_self_dependent",
        "_block_stream",
        "_careful",
        "_control_frames",
        "_decoder",
        "_empty_run",
        "_encoder",
        "_ended",
        "_glitches",
        "_header_sizes",
        "_highest_peer_stream",
        "_inbound",
        "_last_ping_at",
        "_last_processed",
        "_max_inbound_frame",
        "_new_streams_read",
        "_next_stream_id",
        "_now",
        "_out",
        "_partial",
        "_peer",
        "_ping_reset_pending",
        "_ping_strikes",
        "_preface_got",
        "_reset_budget",
        "_resets",
        "_send_window",
        "_stream_threshold",
        "_stream_window",
        "_streams",
        "_unreleased",
        "client_side",
        "limits",
        "pending_output_bytes",
    )

    def __init__(
        self,
        *,
        client_side: bool,
        stream_window: int | None = None,
        connection_window: int | None = None,
        limits: Limits = DEFAULT_LIMITS,
    ) -> None:
        if stream_window is None:
            stream_window = 4 << 20 if client_side else 1 << 20
        if connection_window is None:
            connection_window = 16 << 20 if client_side else 4 << 20
        for name, value in (
            ("stream_window", stream_window),
            ("connection_window", connection_window),
        ):
            if not DEFAULT_WINDOW <= value <= MAX_WINDOW:
                raise LimitsError(f"{name} must be within 65535 .. 2**31 - 1, not {value}")
        if not DEFAULT_MAX_FRAME_SIZE <= limits.max_frame_size <= MAX_MAX_FRAME_SIZE:
            raise LimitsError("max_frame_size must be within 2**14 .. 2**24 - 1")
        ConnectionState.__init__(self)
        self.client_side = client_side
        self.limits = limits
        self._streams: dict[int, Stream] = {}
        self._out: list[bytes | memoryview] = []
        #: Bytes queued and not yet taken by :meth:`data_to_send` (read-only outside:
        #: a plain attribute, read after every read of the peer's input).
        self.pending_output_bytes = 0
        self._control_frames = 0
        self._next_stream_id = 1 if client_side else 2
        self._highest_peer_stream = 0
        self._last_processed = 0
        self._unreleased: set[int] = set()
        self._peer = PeerSettings(
            client_side=client_side,
            max_entries=limits.max_settings_entries,
            max_concurrent_streams=limits.assumed_max_concurrent_streams
            if client_side
            else UNLIMITED,
        )
        self._send_window = DEFAULT_WINDOW
        self._inbound = InboundWindow(connection_window)
        self._stream_window = stream_window
        self._stream_threshold = max(1, stream_window >> 1)
        self._max_inbound_frame = limits.max_frame_size
        self._encoder = HeaderEncoder(limits.max_encoder_table_size)
        self._decoder = HeaderDecoder(
            max_decoded_bytes=limits.max_decoded_header_bytes,
            table_size=DEFAULT_HEADER_TABLE_SIZE,
        )
        self._header_sizes: dict[Hashable, int] = {}
        self._resets = ResetStreams(
            ttl=limits.reset_memory_seconds, limit=limits.reset_memory_streams
        )
        # Streams that completed, or that the peer reset, recently: how they ended, and
        # how many more RST_STREAM/WINDOW_UPDATE frames the peer may still send on them:
        # RFC 9113 section 5.1 allows them "for a short period" after our END_STREAM (a
        # client cancelling as the reply arrives), and a peer that reset a stream
        # answers each of our frames still in flight with another RST_STREAM (python h2
        # does).
        self._ended = EndedStreams(limit=limits.reset_memory_streams)
        self._glitches = TokenBucket(limits.glitch_burst, limits.glitch_refill_per_second)
        self._reset_budget = TokenBucket(limits.reset_budget, limits.reset_refill_per_second)
        self._empty_run = 0
        self._new_streams_read = 0
        self._ping_strikes = 0
        self._last_ping_at: float | None = None
        self._ping_reset_pending = False
        self._now = 0.0
        self._partial = bytearray()
        self._preface_got = len(F.CLIENT_PREFACE) if client_side else 0
        self._block: bytearray | None = None
        self._block_stream = 0
        self._block_end_stream = False
        self._block_self_dependent = False
        self._block_frames = 0
        # Until the peer's first SETTINGS, every frame header takes the careful path.
        self._careful = True

        settings: dict[int, int] = {}
        if client_side:
            settings[SettingCode.ENABLE_PUSH] = 0
        else:
            # (A SETTINGS value has 32 bits: a larger limit is advertised as the largest.)
            settings[SettingCode.MAX_CONCURRENT_STREAMS] = min(
                limits.max_concurrent_streams, _MAX_SETTING
            )
        if stream_window != DEFAULT_WINDOW:
            settings[SettingCode.INITIAL_WINDOW_SIZE] = stream_window
        if limits.max_frame_size != DEFAULT_MAX_FRAME_SIZE:
            settings[SettingCode.MAX_FRAME_SIZE] = limits.max_frame_size
        settings[SettingCode.MAX_HEADER_LIST_SIZE] = min(limits.max_header_list_size, _MAX_SETTING)
        if client_side:
            self._queue(F.CLIENT_PREFACE)
        self._queue(F.settings(settings))
        if connection_window > DEFAULT_WINDOW:
            self._queue(F.window_update(0, connection_window - DEFAULT_WINDOW))

    def _queue(self, data: bytes) -> None:
        self._out.append(data)
        self.pending_output_bytes += len(data)

    def _is_idle(self, stream_id: int) -> bool:
        """Whether ``stream_id`` was never opened (it is not in the dict either)."""
        if stream_id & 1:
            if self.client_side:
                return stream_id >= self._next_stream_id
            return stream_id > self._highest_peer_stream
        # Even ids would be a server's pushed streams: push is refused, none exists.
        return True

    def _completed(self, stream: Stream) -> None:
        """Both sides ended ``stream`` normally."""
        stream_id = stream.stream_id
        del self._streams[stream_id]
        self._ended.add(stream_id, _LATE_FRAMES_AFTER_COMPLETION, peer_reset=False)
        if not self.client_side:
            self._reset_budget.give(self._now)
