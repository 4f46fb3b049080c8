"""One HTTP/2 connection, sans-IO: bytes in -> events out, send methods -> bytes out.

:class:`Connection` does no I/O, has no clock and starts no tasks (the h11 shape): the
caller feeds it what it read with :meth:`Connection.receive_data` and gets events
back, calls send methods that queue frames, and writes what
:meth:`Connection.data_to_send` returns. One class plays both roles (``client_side``);
the client role opens streams, the server role answers them. Anything time-based
(budget refills, how long a reset is remembered, keepalive enforcement) uses the
``now`` passed to :meth:`Connection.receive_data`.

Theory of operation:

* Input is parsed straight from the bytes received: each 9-byte frame header is
  unpacked at an offset and **checked before its payload is waited for** (length against
  our SETTINGS_MAX_FRAME_SIZE, fixed sizes of control frames, the running size and count
  of a header block's CONTINUATIONs), so a hostile length never makes us buffer more
  than one frame. Only an incomplete frame at the end of a read is kept.
* Errors follow RFC 9113 section 5.4. A stream error queues RST_STREAM, reports
  :class:`~._events.StreamReset` (``remote=False``, with the reason) if the caller knows
  the stream, and the connection goes on. A connection error queues GOAWAY with the
  code and the reason as debug data, reports :class:`~._events.ConnectionTerminated`
  and closes the connection: the rest of the input is discarded and further input is
  ignored. Neither raises: only the caller's own misuse raises
  (:class:`~._errors.LocalProtocolError`).
* Streams live in one dict while open and are dropped as they close. Of closed streams
  the ones *we* reset are remembered for a bounded time and number, so late frames on
  them are ignored, and the others by number only, with how they ended
  (:mod:`._closed`). RFC 9113 section 5.1: HEADERS or DATA on a stream both sides ended
  is a connection error (STREAM_CLOSED); on a stream the peer reset, a stream error
  (STREAM_CLOSED). A stream id at or below the highest one seen that is remembered as
  neither decides by itself: in the server role HEADERS on it open a stream out of order
  (section 5.1.1: a connection error, PROTOCOL_ERROR); DATA, and anything in the client
  role (where every such id is a stream we opened, and late trailers after our reset
  are the likely frame), get a stream error (STREAM_CLOSED). Memory per connection is
  bounded by the open streams, the two memories and one frame of input.
* A stream cannot depend on itself (RFC 7540 section 5.3.1, which h2spec checks): a
  HEADERS frame with the PRIORITY flag, or a PRIORITY frame, saying so is a stream error
  (PROTOCOL_ERROR). Other priority information is ignored (RFC 9113 section 5.3.2).
* Flow control: DATA the caller is given must be handed back with
  :meth:`Connection.acknowledge_received_data`; the connection decides when to send
  WINDOW_UPDATE (:mod:`._flow`). DATA nobody will read (closed or refused streams) is
  refunded at once. :meth:`Connection.send_data` sends what the windows allow and
  returns how much that was; :class:`~._events.WindowUpdated` says when to try again.
* GOAWAY received: no new streams; our streams above its last-stream-id were not
  processed and are closed and listed in :class:`~._events.GoAwayReceived` (they may be
  retried elsewhere); those at or below it go on, and their frames keep being accepted
  (a graceful GOAWAY lets them finish). An error GOAWAY closes the connection.
* Defences (:mod:`._limits`): frame and header-block limits on each frame header,
  decoded header-list limits, a glitch budget for cheap useless frames, a bound on
  control frames queued while the peer does not read, and
  :attr:`Connection.should_pause_reading` over the output bound. The server role adds
  MAX_CONCURRENT_STREAMS enforcement (counting requests until the caller releases them),
  a cap on new streams per read, the rapid-reset budget and keepalive enforcement.

Outbound headers are not validated: the caller builds them (the gRPC layer checks
metadata before it gets here).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

import hpack

from . import _frames as F
from ._closed import EndedStreams, ResetStreams
from ._errors import (
    ConnectionClosedError,
    ErrorCode,
    HeaderListTooLargeError,
    LocalProtocolError,
    ProtocolViolation,
    StreamClosedError,
    StreamIdsExhaustedError,
    TooManyStreamsError,
    error_code,
)
from ._events import (
    ConnectionTerminated,
    DataReceived,
    Event,
    GoAwayReceived,
    PingAcknowledged,
    PingReceived,
    RemoteSettingsChanged,
    RequestHeadersTooLarge,
    RequestReceived,
    ResponseReceived,
    SettingsAcknowledged,
    StreamReset,
    TrailersReceived,
    WindowUpdated,
)
from ._flow import DEFAULT_WINDOW, MAX_WINDOW, InboundWindow, grow
from ._headers import REQUEST, RESPONSE, TRAILERS, check
from ._hpack import Decoded, HeaderDecoder, HeaderEncoder
from ._limits import Limits, TokenBucket
from ._settings import (
    DEFAULT_HEADER_TABLE_SIZE,
    DEFAULT_MAX_FRAME_SIZE,
    MAX_MAX_FRAME_SIZE,
    UNLIMITED,
    PeerSettings,
    SettingCode,
)
from ._state import ConnectionState
from ._stream import (
    CLOSED,
    RECV_END_STREAM,
    RECV_HEADERS,
    RECV_RST,
    SEND_END_STREAM,
    SEND_HEADERS,
    SEND_RST,
    Stream,
)

__all__ = ["MAX_STREAM_ID", "Connection"]

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


class Connection(ConnectionState):
    """An HTTP/2 connection in the client or the server role.

    The connection preface (a client's magic string) and our SETTINGS are queued at
    construction: write :meth:`data_to_send` as soon as the transport is up.

    Args:
        client_side: the role.
        stream_window: our SETTINGS_INITIAL_WINDOW_SIZE, the receive window of each
            stream (at least 65,535). Default: 4 MiB for a client, 1 MiB for a server.
        connection_window: the connection's receive window (at least 65,535), raised
            from 65,535 by a WINDOW_UPDATE right after our SETTINGS. Default: 16 MiB
            for a client, 4 MiB for a server.
        limits: the defences, see :class:`~._limits.Limits`.
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
        "_out_bytes",
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
                raise ValueError(f"{name} must be within 65535 .. 2**31 - 1, not {value}")
        if not DEFAULT_MAX_FRAME_SIZE <= limits.max_frame_size <= MAX_MAX_FRAME_SIZE:
            raise ValueError("max_frame_size must be within 2**14 .. 2**24 - 1")
        ConnectionState.__init__(self)
        self.client_side = client_side
        self.limits = limits
        self._streams: dict[int, Stream] = {}
        self._out: list[bytes | memoryview] = []
        self._out_bytes = 0
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

    # ------------------------------------------------------------ state

    @property
    def open_streams(self) -> int:
        """Streams that are open or half-closed."""
        return len(self._streams)

    @property
    def active_requests(self) -> int:
        """Server role: requests handed over and not yet released (what
        MAX_CONCURRENT_STREAMS counts)."""
        return len(self._unreleased)

    @property
    def last_processed_stream_id(self) -> int:
        """Server role: the highest stream whose request was handed to the caller."""
        return self._last_processed

    @property
    def peer_max_concurrent_streams(self) -> int:
        """The peer's SETTINGS_MAX_CONCURRENT_STREAMS (a client assumes
        ``limits.assumed_max_concurrent_streams`` until the server's SETTINGS)."""
        return self._peer.max_concurrent_streams

    @property
    def max_outbound_frame_size(self) -> int:
        """The peer's SETTINGS_MAX_FRAME_SIZE."""
        return self._peer.max_frame_size

    @property
    def stream_ids_left(self) -> int:
        """Client role: how many more streams this connection can open."""
        if self._next_stream_id > MAX_STREAM_ID:
            return 0
        return (MAX_STREAM_ID - self._next_stream_id) // 2 + 1

    @property
    def pending_output_bytes(self) -> int:
        """Bytes queued and not yet taken by :meth:`data_to_send`."""
        return self._out_bytes

    @property
    def should_pause_reading(self) -> bool:
        """Whether the I/O layer should stop reading until the output drains: the
        queued output is at ``limits.max_pending_output_bytes`` or more (a peer that
        does not read our replies must not make them pile up)."""
        return self._out_bytes >= self.limits.max_pending_output_bytes

    @property
    def queued_control_frames(self) -> int:
        """Control frames queued in reply to the peer (ACKs, RST_STREAM for its errors,
        refunds) and not yet taken by :meth:`data_to_send`; frames the caller asked for
        do not count."""
        return self._control_frames

    @property
    def buffered_input_bytes(self) -> int:
        """Bytes of an incomplete frame kept from the last read (at most one frame)."""
        return len(self._partial)

    @property
    def buffered_header_bytes(self) -> int:
        """Encoded bytes of the header block being assembled from CONTINUATIONs."""
        block = self._block
        return 0 if block is None else len(block)

    @property
    def reset_budget(self) -> float:
        """Server role: what is left of the rapid-reset budget (refilled up to the
        ``now`` of the last ``receive_data``)."""
        self._reset_budget.refill(self._now)
        return self._reset_budget.tokens

    @property
    def glitch_budget(self) -> float:
        """What is left of the glitch budget (refilled up to the ``now`` of the last
        ``receive_data``)."""
        self._glitches.refill(self._now)
        return self._glitches.tokens

    @property
    def encoder_table(self) -> tuple[tuple[bytes, bytes], ...]:
        """Our HPACK encoder's dynamic table, newest entry first (what the headers we
        sent have indexed)."""
        return self._encoder.dynamic_entries

    @property
    def remembered_resets(self) -> int:
        """How many streams we reset are remembered."""
        return len(self._resets)

    def send_window(self, stream_id: int) -> int:
        """How many DATA bytes :meth:`send_data` could send on ``stream_id`` now
        (0 for a stream that is not open for sending)."""
        stream = self._streams.get(stream_id)
        if stream is None or not stream.open_for_sending:
            return 0
        window = stream.send_window
        if self._send_window < window:
            window = self._send_window
        # (A window can go below 0 when the peer lowers SETTINGS_INITIAL_WINDOW_SIZE.)
        return window if window > 0 else 0

    # ------------------------------------------------------------ output

    def _queue(self, data: bytes) -> None:
        self._out.append(data)
        self._out_bytes += len(data)

    def _reply(self, data: bytes) -> None:
        """Queue a control frame the peer's input made us send; too many of them waiting
        means the peer sends and does not read."""
        self._out.append(data)
        self._out_bytes += len(data)
        self._control_frames += 1
        if self._control_frames > self.limits.max_queued_control_frames:
            raise ProtocolViolation(
                ErrorCode.ENHANCE_YOUR_CALM,
                f"more than {self.limits.max_queued_control_frames} control frames queued:"
                " the peer is not reading",
            )

    def data_to_send(self) -> bytes:
        """Everything queued to send, and forget it (b"" if nothing is)."""
        out = self._out
        if not out:
            return b""
        data = out[0] if len(out) == 1 and type(out[0]) is bytes else b"".join(out)
        out.clear()
        self._out_bytes = 0
        self._control_frames = 0
        return data

    # ------------------------------------------------------------ receiving

    def receive_data(self, data: bytes, now: float) -> list[Event]:
        """Take bytes read from the peer; return the events they make.

        Args:
            data: the bytes, in any split (partial frames are kept until complete).
            now: the caller's monotonic clock, in seconds.

        Returns:
            The events, in order. After a connection error the last one is
            :class:`~._events.ConnectionTerminated`; a closed connection ignores its
            input and returns no events.
        """
        events: list[Event] = []
        if self._closed:
            return events
        self._now = now
        self._new_streams_read = 0
        if self._resets.ids:
            self._resets.stamp(now)
        if type(data) is not bytes:
            data = bytes(data)
        try:
            pos = 0
            if self._preface_got < 24:
                pos = self._receive_preface(data)
            if self._partial and pos < len(data):
                pos = self._complete_partial(data, pos, events)
            if pos < len(data) and not self._closed:
                pos = self._parse(data, pos, events)
                if pos < len(data) and not self._closed:
                    self._partial += data[pos:]
        except ProtocolViolation as exc:
            self._connection_error(exc.code, exc.reason, events)
        return events

    def _receive_preface(self, data: bytes) -> int:
        got = self._preface_got
        chunk = data[: 24 - got]
        if chunk != F.CLIENT_PREFACE[got : got + len(chunk)]:
            raise ProtocolViolation(ErrorCode.PROTOCOL_ERROR, "invalid connection preface")
        self._preface_got = got + len(chunk)
        return len(chunk)

    def _complete_partial(self, data: bytes, pos: int, events: list[Event]) -> int:
        """Finish the frame kept from the last read; return where ``data`` goes on."""
        partial = self._partial
        if len(partial) < 9:
            take = data[pos : pos + 9 - len(partial)]
            partial += take
            pos += len(take)
            if len(partial) < 9:
                return pos
            high, low, kind, flags, stream_id = _unpack_header(partial, 0)
            self._check_header((high << 8) | low, kind, flags, stream_id)
        need = 9 + ((partial[0] << 16) | (partial[1] << 8) | partial[2]) - len(partial)
        if len(data) - pos < need:
            partial += data[pos:]
            return len(data)
        frame = bytes(partial) + data[pos : pos + need]
        partial.clear()
        self._parse(frame, 0, events)
        return pos + need

    def _parse(self, buf: bytes, pos: int, events: list[Event]) -> int:
        """Handle the complete frames in ``buf`` from ``pos``; return where the first
        incomplete one starts (its header, if whole, has been checked)."""
        size = len(buf)
        max_frame = self._max_inbound_frame
        streams = self._streams
        inbound = self._inbound
        while size - pos >= 9:
            high, low, kind, flags, stream_id = _unpack_header(buf, pos)
            length = (high << 8) | low
            if kind > 1 or length > max_frame or self._careful:
                self._check_header(length, kind, flags, stream_id)
            end = pos + 9 + length
            if end > size:
                break
            stream_id &= 0x7FFFFFFF
            if kind == _DATA:
                # The common case inline: unpadded, non-empty (or final) DATA on a stream
                # that takes it, within both windows, without a content-length to check.
                # Anything else takes _on_data, which does the same and all the rest.
                stream = streams.get(stream_id)
                if (
                    stream is not None
                    and not flags & _PADDED
                    and (length or flags & _END_STREAM)
                    and stream.open_for_receiving
                    and length <= inbound.available
                    and length <= stream.recv_available
                    and stream.content_length < 0
                ):
                    inbound.available -= length
                    stream.recv_available -= length
                    self._empty_run = 0
                    if flags & _END_STREAM:
                        self._end_remote(stream)
                        events.append(DataReceived(stream_id, buf[pos + 9 : end], length, True))
                    else:
                        events.append(DataReceived(stream_id, buf[pos + 9 : end], length, False))
                else:
                    self._on_data(buf, pos + 9, end, flags, stream_id, events)
            elif kind == _HEADERS:
                if stream_id and flags & _BARE_HEADERS == _END_HEADERS:
                    # A whole header block without padding or priority (the common case).
                    self._empty_run = 0
                    self._on_header_block(
                        stream_id, bool(flags & _END_STREAM), buf[pos + 9 : end], events
                    )
                else:
                    self._on_headers(buf, pos + 9, end, flags, stream_id, events)
            else:
                self._on_other(kind, buf, pos + 9, end, flags, stream_id, events)
            pos = end
            if self._closed:
                return size
        return pos

    def _check_header(self, length: int, kind: int, flags: int, stream_id: int) -> None:
        """The checks a frame header allows before its payload is read."""
        limits = self.limits
        if not self._settings_received and (kind != F.SETTINGS or flags & _ACK):
            # Checked before the length: bytes that are not HTTP/2 at all (an HTTP/1
            # server's reply) read as a frame of millions of bytes, but what they break
            # is this rule (RFC 9113 section 3.4).
            raise ProtocolViolation(
                ErrorCode.PROTOCOL_ERROR, "the peer's first frame is not SETTINGS"
            )
        if length > self._max_inbound_frame:
            raise ProtocolViolation(
                ErrorCode.FRAME_SIZE_ERROR,
                f"frame of {length} bytes exceeds SETTINGS_MAX_FRAME_SIZE"
                f" {self._max_inbound_frame}",
            )
        block = self._block
        if block is not None:
            if kind != _CONTINUATION or stream_id & 0x7FFFFFFF != self._block_stream:
                raise ProtocolViolation(
                    ErrorCode.PROTOCOL_ERROR, "a header block was interrupted by another frame"
                )
            if self._block_frames >= limits.max_continuations:
                raise ProtocolViolation(
                    ErrorCode.ENHANCE_YOUR_CALM,
                    f"more than {limits.max_continuations} CONTINUATION frames in a header block",
                )
            if len(block) + length > limits.max_header_block_bytes:
                raise ProtocolViolation(
                    ErrorCode.ENHANCE_YOUR_CALM,
                    f"header block over {limits.max_header_block_bytes} bytes",
                )
            return
        if kind == _HEADERS:
            if length > limits.max_header_block_bytes:
                raise ProtocolViolation(
                    ErrorCode.ENHANCE_YOUR_CALM,
                    f"header block over {limits.max_header_block_bytes} bytes",
                )
        elif kind == _CONTINUATION:
            raise ProtocolViolation(
                ErrorCode.PROTOCOL_ERROR, "CONTINUATION without a header block to continue"
            )
        elif kind == F.PING:
            if length != 8:
                raise ProtocolViolation(ErrorCode.FRAME_SIZE_ERROR, f"PING of {length} bytes")
        elif kind == F.SETTINGS:
            if flags & _ACK and length:
                raise ProtocolViolation(ErrorCode.FRAME_SIZE_ERROR, "SETTINGS ACK with a payload")
            if length % 6:
                raise ProtocolViolation(
                    ErrorCode.FRAME_SIZE_ERROR, f"SETTINGS of {length} bytes (not a multiple of 6)"
                )
        elif kind == F.WINDOW_UPDATE or kind == F.RST_STREAM:
            if length != 4:
                name = "WINDOW_UPDATE" if kind == F.WINDOW_UPDATE else "RST_STREAM"
                raise ProtocolViolation(ErrorCode.FRAME_SIZE_ERROR, f"{name} of {length} bytes")
        elif kind == F.GOAWAY:
            if length < 8:
                raise ProtocolViolation(ErrorCode.FRAME_SIZE_ERROR, f"GOAWAY of {length} bytes")
        elif kind == F.PRIORITY and length != 5:
            raise ProtocolViolation(ErrorCode.FRAME_SIZE_ERROR, f"PRIORITY of {length} bytes")

    def _glitch(self, what: str) -> None:
        if not self._glitches.take(self._now):
            raise ProtocolViolation(
                ErrorCode.ENHANCE_YOUR_CALM, f"too many useless frames (the last: {what})"
            )

    def _empty_frame(self) -> None:
        self._empty_run += 1
        if self._empty_run > self.limits.max_consecutive_empty_frames:
            raise ProtocolViolation(
                ErrorCode.ENHANCE_YOUR_CALM,
                f"more than {self.limits.max_consecutive_empty_frames} empty frames in a row",
            )

    def _is_idle(self, stream_id: int) -> bool:
        """Whether ``stream_id`` was never opened (it is not in the dict either)."""
        if stream_id & 1:
            if self.client_side:
                return stream_id >= self._next_stream_id
            return stream_id > self._highest_peer_stream
        # Even ids would be a server's pushed streams: push is refused, none exists.
        return True

    # DATA ------------------------------------------------------------------

    def _on_data(
        self, buf: bytes, start: int, end: int, flags: int, stream_id: int, events: list[Event]
    ) -> None:
        length = end - start
        if flags & _PADDED:
            if not length or buf[start] >= length:
                raise ProtocolViolation(ErrorCode.PROTOCOL_ERROR, "DATA padding exceeds the frame")
            end -= buf[start]
            start += 1
        if not self._inbound.receive(length):
            raise ProtocolViolation(
                ErrorCode.FLOW_CONTROL_ERROR, "DATA beyond the connection's receive window"
            )
        end_stream = flags & _END_STREAM
        if start == end and not end_stream:
            self._empty_frame()
            self._glitch("empty DATA")
        else:
            self._empty_run = 0
        stream = self._streams.get(stream_id)
        if stream is None or not stream.open_for_receiving:
            self._refund(length)
            self._frame_on_closed(stream_id, stream, "DATA", events, length)
            return
        if length > stream.recv_available:
            self._refund(length)
            self._stream_error(
                stream,
                ErrorCode.FLOW_CONTROL_ERROR,
                "DATA beyond the stream's receive window",
                events,
            )
            return
        stream.recv_available -= length
        if stream.content_length >= 0:
            stream.content_length -= end - start
            if stream.content_length < 0 or (end_stream and stream.content_length):
                self._refund(length)
                self._stream_error(
                    stream, ErrorCode.PROTOCOL_ERROR, "DATA does not match content-length", events
                )
                return
        if end_stream:
            self._end_remote(stream)
            events.append(DataReceived(stream_id, buf[start:end], length, True))
        else:
            events.append(DataReceived(stream_id, buf[start:end], length, False))

    def _refund(self, length: int) -> None:
        """Hand back connection credit for DATA nobody will consume."""
        increment = self._inbound.consume(length)
        if increment:
            self._reply(F.window_update(0, increment))

    def _frame_on_closed(
        self,
        stream_id: int,
        stream: Stream | None,
        what: str,
        events: list[Event],
        length: int = -1,
    ) -> None:
        """DATA (of ``length`` flow-controlled bytes) or HEADERS (already decoded,
        ``length`` -1) on a stream that does not take them."""
        if stream_id == 0:
            raise ProtocolViolation(ErrorCode.PROTOCOL_ERROR, f"{what} on stream 0")
        if stream is not None:
            # Half-closed (remote): the peer already ended its side.
            self._stream_error(
                stream, ErrorCode.STREAM_CLOSED, f"{what} after the end of the stream", events
            )
            return
        if self._is_idle(stream_id):
            raise ProtocolViolation(ErrorCode.PROTOCOL_ERROR, f"{what} on idle stream {stream_id}")
        resets = self._resets
        late = (
            resets.late_data(stream_id, length) if length >= 0 else resets.late_headers(stream_id)
        )
        if late is not None:
            # Sent before the peer saw our reset (RFC 9113 section 5.1): ignored. More
            # than it can have had in flight is abuse.
            if not late:
                self._glitch(f"{what} on a stream we reset, beyond what was in flight")
            return
        ended = self._ended.ended_normally(stream_id)
        if ended:
            # The peer had ended its side itself, and we ours: no frame of ours that it
            # had not seen yet can explain this one (section 5.1, "closed").
            raise ProtocolViolation(
                ErrorCode.STREAM_CLOSED, f"{what} on stream {stream_id}, which both sides ended"
            )
        if ended is None and length < 0 and not self.client_side:
            # Nothing remembered of a client's stream at or below the highest it opened:
            # an attempt to open it out of order, or a stream closed long ago (section
            # 5.1 lets a frame that late be a PROTOCOL_ERROR too). gRPC clients send no
            # request trailers, so no HEADERS of theirs can be late.
            raise ProtocolViolation(
                ErrorCode.PROTOCOL_ERROR,
                f"HEADERS on stream {stream_id}, at or below stream"
                f" {self._highest_peer_stream} already opened (stream ids must increase)",
            )
        # After the peer's RST_STREAM (section 5.1: a stream error), or, forgotten, a
        # stream of ours that may have been one we reset: a stream error, not the
        # connection.
        self._glitch(f"{what} on a closed stream")
        self._reset_closed(stream_id, ErrorCode.STREAM_CLOSED, 0)

    # HEADERS and CONTINUATION ----------------------------------------------

    def _on_headers(
        self, buf: bytes, start: int, end: int, flags: int, stream_id: int, events: list[Event]
    ) -> None:
        if stream_id == 0:
            raise ProtocolViolation(ErrorCode.PROTOCOL_ERROR, "HEADERS on stream 0")
        self_dependent = False
        if flags & (_PADDED | _PRIORITY_FLAG):
            pad = 0
            if flags & _PADDED:
                if start == end:
                    raise ProtocolViolation(
                        ErrorCode.PROTOCOL_ERROR, "HEADERS padding exceeds the frame"
                    )
                pad = buf[start]
                start += 1
            if flags & _PRIORITY_FLAG:
                if start + 5 > end:
                    raise ProtocolViolation(
                        ErrorCode.PROTOCOL_ERROR, "HEADERS padding exceeds the frame"
                    )
                self_dependent = F.unpack_u32(buf, start) & 0x7FFFFFFF == stream_id
                start += 5
            if start + pad > end:
                raise ProtocolViolation(
                    ErrorCode.PROTOCOL_ERROR, "HEADERS padding exceeds the frame"
                )
            end -= pad
        if flags & _END_HEADERS:
            self._empty_run = 0
            self._on_header_block(
                stream_id, bool(flags & _END_STREAM), buf[start:end], events, self_dependent
            )
            return
        if start == end:
            self._empty_frame()
        else:
            self._empty_run = 0
        self._block = bytearray(buf[start:end])
        self._block_stream = stream_id
        self._block_end_stream = bool(flags & _END_STREAM)
        self._block_self_dependent = self_dependent
        self._block_frames = 0
        self._careful = True

    def _on_continuation(
        self, buf: bytes, start: int, end: int, flags: int, events: list[Event]
    ) -> None:
        block = self._block
        assert block is not None  # _check_header refused it otherwise
        block += buf[start:end]
        self._block_frames += 1
        if flags & _END_HEADERS:
            self._empty_run = 0
            self._block = None
            self._careful = not self._settings_received
            self._on_header_block(
                self._block_stream,
                self._block_end_stream,
                bytes(block),
                events,
                self._block_self_dependent,
            )
        elif start == end:
            self._empty_frame()
        else:
            self._empty_run = 0

    def _decode(self, block: bytes) -> Decoded:
        try:
            return self._decoder.decode(block)
        except hpack.OversizedHeaderListError:
            raise ProtocolViolation(
                ErrorCode.ENHANCE_YOUR_CALM,
                f"header list decodes to more than {self.limits.max_decoded_header_bytes} bytes",
            ) from None
        except (hpack.HPACKError, IndexError, ValueError, TypeError) as exc:
            # (hpack reports some malformed blocks as plain errors of Python's.)
            raise ProtocolViolation(
                ErrorCode.COMPRESSION_ERROR, f"undecodable header block: {exc}"
            ) from None

    def _on_header_block(
        self,
        stream_id: int,
        end_stream: bool,
        block: bytes,
        events: list[Event],
        self_dependent: bool = False,
    ) -> None:
        """A whole header block on ``stream_id``; ``self_dependent``: its HEADERS frame
        had the PRIORITY flag and made the stream depend on itself."""
        stream = self._streams.get(stream_id)
        if stream is None:
            if not self.client_side and stream_id & 1 and stream_id > self._highest_peer_stream:
                self._new_request(stream_id, end_stream, block, events, self_dependent)
                return
            if self._is_idle(stream_id):
                raise ProtocolViolation(
                    ErrorCode.PROTOCOL_ERROR, f"HEADERS on idle stream {stream_id}"
                )
            self._decode(block)  # keeps the HPACK table in step
            self._frame_on_closed(stream_id, None, "HEADERS", events)
            return
        decoded = self._decode(block)
        if not stream.open_for_receiving:
            self._frame_on_closed(stream_id, stream, "HEADERS", events)
            return
        if self_dependent:
            self._stream_error(
                stream, ErrorCode.PROTOCOL_ERROR, _depends_on_itself("HEADERS", stream_id), events
            )
            return
        if stream.headers_received:
            kind = TRAILERS
            if not end_stream:
                self._stream_error(
                    stream, ErrorCode.PROTOCOL_ERROR, "trailers without END_STREAM", events
                )
                return
        else:
            kind = RESPONSE if self.client_side else REQUEST
        if decoded.size > self.limits.max_header_list_size:
            what = "response headers" if kind == RESPONSE else "trailers"
            self._stream_error(
                stream,
                ErrorCode.CANCEL,
                f"{what} of {decoded.size} bytes exceed the limit of"
                f" {self.limits.max_header_list_size}",
                events,
            )
            return
        verdict = decoded.checks.get(kind)
        if verdict is None:
            verdict = decoded.checks[kind] = check(decoded.headers, kind)
        reason, content_length = verdict
        if reason is not None:
            self._stream_error(
                stream, ErrorCode.PROTOCOL_ERROR, f"malformed {_KIND[kind]}: {reason}", events
            )
            return
        headers = decoded.headers
        if kind == RESPONSE:
            if headers[0][1][0] == 0x31:  # "1": an informational response, dropped
                if end_stream:
                    self._stream_error(
                        stream,
                        ErrorCode.PROTOCOL_ERROR,
                        "informational response ends the stream",
                        events,
                    )
                return
            stream.headers_received = True
            stream.content_length = content_length
            if end_stream:
                if content_length > 0:
                    self._stream_error(
                        stream,
                        ErrorCode.PROTOCOL_ERROR,
                        "DATA does not match content-length",
                        events,
                    )
                    return
                self._end_remote(stream)
            events.append(ResponseReceived(stream_id, headers, end_stream))
            return
        # Trailers.
        if stream.content_length > 0:
            self._stream_error(
                stream, ErrorCode.PROTOCOL_ERROR, "DATA does not match content-length", events
            )
            return
        self._end_remote(stream)
        events.append(TrailersReceived(stream_id, headers))

    def _new_request(
        self,
        stream_id: int,
        end_stream: bool,
        block: bytes,
        events: list[Event],
        self_dependent: bool = False,
    ) -> None:
        """Server role: HEADERS opening a stream."""
        # Opening this stream closes every idle stream below it (RFC 9113 section 5.1.1).
        self._highest_peer_stream = stream_id
        decoded = self._decode(block)
        limits = self.limits
        goaway = self._goaway_sent
        if goaway is not None and stream_id > goaway:
            # Not processed, as our GOAWAY said; later frames on it are ignored too.
            self._resets.add(stream_id, self._stream_window)
            return
        if self_dependent:
            # Opened (and closed at once), like a malformed request: never handed over.
            self._refuse(stream_id, ErrorCode.PROTOCOL_ERROR)
            return
        self._new_streams_read += 1
        if self._new_streams_read > limits.max_new_streams_per_read:
            self._refuse(stream_id, ErrorCode.REFUSED_STREAM)
            return
        if len(self._unreleased) >= limits.max_concurrent_streams:
            self._refuse(stream_id, ErrorCode.REFUSED_STREAM)
            return
        stream = Stream(stream_id, self._peer.initial_window_size, self._stream_window)
        stream.apply(RECV_HEADERS)
        if end_stream:
            stream.apply(RECV_END_STREAM)
        stream.headers_received = True
        if decoded.size > limits.max_header_list_size:
            self._streams[stream_id] = stream
            self._unreleased.add(stream_id)
            self._last_processed = stream_id
            events.append(
                RequestHeadersTooLarge(
                    stream_id, decoded.size, limits.max_header_list_size, end_stream
                )
            )
            self._spend_reset_budget()
            return
        verdict = decoded.checks.get(REQUEST)
        if verdict is None:
            verdict = decoded.checks[REQUEST] = check(decoded.headers, REQUEST)
        reason, content_length = verdict
        if reason is None and end_stream and content_length > 0:
            reason = "DATA does not match content-length"
        if reason is not None:
            self._refuse(stream_id, ErrorCode.PROTOCOL_ERROR)
            return
        stream.content_length = content_length
        self._streams[stream_id] = stream
        self._unreleased.add(stream_id)
        self._last_processed = stream_id
        events.append(RequestReceived(stream_id, decoded.headers, end_stream))

    def _refuse(self, stream_id: int, code: ErrorCode) -> None:
        """Server role: reset a new stream before handing it over."""
        self._reset_closed(stream_id, code, self._stream_window)

    # Other frames ----------------------------------------------------------

    def _on_other(
        self,
        kind: int,
        buf: bytes,
        start: int,
        end: int,
        flags: int,
        stream_id: int,
        events: list[Event],
    ) -> None:
        if kind == _CONTINUATION:
            self._on_continuation(buf, start, end, flags, events)
            return
        self._empty_run = 0
        if kind == F.WINDOW_UPDATE:
            self._on_window_update(F.unpack_u32(buf, start) & 0x7FFFFFFF, stream_id, events)
        elif kind == F.RST_STREAM:
            self._on_rst_stream(F.unpack_u32(buf, start), stream_id, events)
        elif kind == F.SETTINGS:
            self._on_settings(buf, start, end, flags, stream_id, events)
        elif kind == F.PING:
            self._on_ping(buf[start:end], flags, stream_id, events)
        elif kind == F.GOAWAY:
            self._on_goaway(buf, start, end, stream_id, events)
        elif kind == F.PRIORITY:
            if stream_id == 0:
                raise ProtocolViolation(ErrorCode.PROTOCOL_ERROR, "PRIORITY on stream 0")
            self._glitch("PRIORITY")
            if F.unpack_u32(buf, start) & 0x7FFFFFFF == stream_id:
                self._on_self_dependent_priority(stream_id, events)
        elif kind == F.PUSH_PROMISE:
            raise ProtocolViolation(
                ErrorCode.PROTOCOL_ERROR, "PUSH_PROMISE although SETTINGS_ENABLE_PUSH is 0"
            )
        else:
            self._glitch(f"frame of unknown type {kind:#x}")

    def _on_self_dependent_priority(self, stream_id: int, events: list[Event]) -> None:
        """A PRIORITY frame making ``stream_id`` depend on itself: a stream error
        (PROTOCOL_ERROR) in any state, since PRIORITY may come on idle and closed
        streams too; only an open stream has anything to close (as Go does, an idle or
        closed one just gets the RST_STREAM)."""
        reason = _depends_on_itself("PRIORITY", stream_id)
        stream = self._streams.get(stream_id)
        if stream is not None:
            self._stream_error(stream, ErrorCode.PROTOCOL_ERROR, reason, events)
            return
        self._reply(F.rst_stream(stream_id, ErrorCode.PROTOCOL_ERROR))
        if not self.client_side:
            self._spend_reset_budget()

    def _on_window_update(self, increment: int, stream_id: int, events: list[Event]) -> None:
        if stream_id == 0:
            if increment == 0:
                raise ProtocolViolation(ErrorCode.PROTOCOL_ERROR, "WINDOW_UPDATE of 0")
            window = grow(self._send_window, increment)
            if window is None:
                raise ProtocolViolation(
                    ErrorCode.FLOW_CONTROL_ERROR, "WINDOW_UPDATE beyond 2**31 - 1"
                )
            self._send_window = window
            events.append(WindowUpdated(0, increment))
            return
        stream = self._streams.get(stream_id)
        if stream is None:
            if self._is_idle(stream_id):
                raise ProtocolViolation(
                    ErrorCode.PROTOCOL_ERROR, f"WINDOW_UPDATE on idle stream {stream_id}"
                )
            if not self._ended.late_frame(stream_id):
                self._glitch("WINDOW_UPDATE on a closed stream")
            return
        if increment == 0:
            self._stream_error(stream, ErrorCode.PROTOCOL_ERROR, "WINDOW_UPDATE of 0", events)
            return
        window = grow(stream.send_window, increment)
        if window is None:
            self._stream_error(
                stream, ErrorCode.FLOW_CONTROL_ERROR, "WINDOW_UPDATE beyond 2**31 - 1", events
            )
            return
        stream.send_window = window
        events.append(WindowUpdated(stream_id, increment))

    def _on_rst_stream(self, code: int, stream_id: int, events: list[Event]) -> None:
        if stream_id == 0:
            raise ProtocolViolation(ErrorCode.PROTOCOL_ERROR, "RST_STREAM on stream 0")
        stream = self._streams.pop(stream_id, None)
        if stream is None:
            if self._is_idle(stream_id):
                raise ProtocolViolation(
                    ErrorCode.PROTOCOL_ERROR, f"RST_STREAM on idle stream {stream_id}"
                )
            resets = self._resets.ids
            if stream_id in resets:
                # Our reset and the peer's crossed; it sends nothing more on the stream.
                del resets[stream_id]
            elif not self._ended.late_frame(stream_id):
                self._glitch("RST_STREAM on a closed stream")
            return
        stream.apply(RECV_RST)
        self._ended.add(stream_id, _LATE_FRAMES_AFTER_PEER_RESET, peer_reset=True)
        events.append(StreamReset(stream_id, error_code(code), True))
        if not self.client_side:
            # A stream reset before it completed: the rapid-reset pattern.
            self._spend_reset_budget()

    def _on_settings(
        self, buf: bytes, start: int, end: int, flags: int, stream_id: int, events: list[Event]
    ) -> None:
        if stream_id != 0:
            raise ProtocolViolation(ErrorCode.PROTOCOL_ERROR, "SETTINGS on a stream")
        if flags & _ACK:
            if not self._receive_settings_ack():
                self._glitch("unexpected SETTINGS ACK")
                return
            events.append(SettingsAcknowledged())
            return
        first = self._receive_settings()
        if not first:
            self._glitch("SETTINGS after the first")
        peer = self._peer
        old_window = peer.initial_window_size
        changed = peer.apply(F.unpack_settings(buf, start, end))
        if first:
            self._careful = self._block is not None
            if SettingCode.MAX_CONCURRENT_STREAMS not in changed:
                # Assumed only until the peer's SETTINGS: without the setting, no limit.
                peer.max_concurrent_streams = UNLIMITED
        # Each INITIAL_WINDOW_SIZE moves the windows by its difference from the value
        # before it (section 6.9.2), in the frame's order: a window overflows at the
        # largest value the frame went through if anywhere, and ends moved by the net
        # difference.
        delta = peer.initial_window_size - old_window
        peak = peer.initial_window_peak - old_window
        if delta or peak > 0:
            for stream in self._streams.values():
                if grow(stream.send_window, peak) is None:
                    raise ProtocolViolation(
                        ErrorCode.FLOW_CONTROL_ERROR,
                        "SETTINGS_INITIAL_WINDOW_SIZE change overflows a stream's window",
                    )
                stream.send_window += delta
        if SettingCode.HEADER_TABLE_SIZE in changed:
            self._encoder.set_table_size(peer.header_table_size)
        if SettingCode.MAX_HEADER_LIST_SIZE in changed:
            self._header_sizes.clear()
        self._reply(F.SETTINGS_ACK)
        events.append(RemoteSettingsChanged(changed))

    def _on_ping(self, payload: bytes, flags: int, stream_id: int, events: list[Event]) -> None:
        if stream_id != 0:
            raise ProtocolViolation(ErrorCode.PROTOCOL_ERROR, "PING on a stream")
        if flags & _ACK:
            events.append(PingAcknowledged(payload))
            return
        if not self.client_side:
            self._enforce_keepalive()
        self._reply(F.ping(payload, ack=True))
        events.append(PingReceived(payload))

    def _enforce_keepalive(self) -> None:
        """Server role: count a strike for a PING sooner than the policy allows
        (grpc-go's enforcement policy, ``http2-hardening.md`` section 6)."""
        now = self._now
        if self._ping_reset_pending:
            # We sent HEADERS or DATA since the last PING: strikes start over.
            self._ping_reset_pending = False
            self._ping_strikes = 0
            self._last_ping_at = now
            return
        last = self._last_ping_at
        self._last_ping_at = now
        if last is None:
            return
        limits = self.limits
        if self._streams or limits.keepalive_permit_without_stream:
            min_time = limits.keepalive_min_time
        else:
            min_time = _IDLE_PING_MIN_TIME
        if now - last < min_time:
            self._ping_strikes += 1
            if self._ping_strikes > limits.keepalive_max_strikes:
                raise ProtocolViolation(ErrorCode.ENHANCE_YOUR_CALM, "too_many_pings")

    def _on_goaway(
        self, buf: bytes, start: int, end: int, stream_id: int, events: list[Event]
    ) -> None:
        if stream_id != 0:
            raise ProtocolViolation(ErrorCode.PROTOCOL_ERROR, "GOAWAY on a stream")
        last, code = F.unpack_u32_pair(buf, start)
        last &= 0x7FFFFFFF
        self._receive_goaway(last, code)
        unprocessed: list[int] = []
        if self.client_side:
            for other in self._streams:
                if other > last:
                    unprocessed.append(other)
            for other in unprocessed:
                del self._streams[other]
                # (The peer will send nothing more on them.)
                self._resets.add(other, 0)
        events.append(
            GoAwayReceived(error_code(code), last, buf[start + 8 : end], tuple(unprocessed))
        )

    # ------------------------------------------------------------ errors

    def _stream_error(
        self, stream: Stream, code: ErrorCode, reason: str, events: list[Event]
    ) -> None:
        """The peer broke the protocol on ``stream``: reset it, the connection goes on."""
        stream_id = stream.stream_id
        del self._streams[stream_id]
        stream.apply(SEND_RST)
        events.append(StreamReset(stream_id, code, False, reason))
        self._reset_closed(stream_id, code, stream.recv_available)

    def _reset_closed(self, stream_id: int, code: ErrorCode, window: int) -> None:
        """Queue RST_STREAM for a stream no longer in the dict, for a peer's error; the
        peer may still have ``window`` bytes of DATA in flight on it."""
        self._resets.add(stream_id, window)
        self._reply(F.rst_stream(stream_id, code))
        if not self.client_side:
            self._spend_reset_budget()

    def _spend_reset_budget(self) -> None:
        if not self._reset_budget.take(self._now):
            raise ProtocolViolation(ErrorCode.ENHANCE_YOUR_CALM, "too_many_resets")

    def _connection_error(self, code: ErrorCode, reason: str, events: list[Event]) -> None:
        last = 0 if self.client_side else self._last_processed
        self._fail(last)
        self._queue(F.goaway(last, code, reason.encode("ascii", "replace")))
        self._partial.clear()
        self._block = None
        events.append(ConnectionTerminated(code, reason, last))

    # ------------------------------------------------------------ stream ends

    def _end_remote(self, stream: Stream) -> None:
        """The peer ended its side of ``stream``."""
        if stream.apply(RECV_END_STREAM) == CLOSED:
            self._completed(stream)

    def _completed(self, stream: Stream) -> None:
        """Both sides ended ``stream`` normally."""
        stream_id = stream.stream_id
        del self._streams[stream_id]
        self._ended.add(stream_id, _LATE_FRAMES_AFTER_COMPLETION, peer_reset=False)
        if not self.client_side:
            self._reset_budget.give()

    # ------------------------------------------------------------ sending

    def _header_list_size(
        self,
        headers: Sequence[tuple[bytes, bytes]],
        extra: Sequence[tuple[bytes, bytes]],
        key: Hashable | None,
    ) -> None:
        """Refuse to send a header list over the peer's SETTINGS_MAX_HEADER_LIST_SIZE."""
        limit = self._peer.max_header_list_size
        if limit >= UNLIMITED:
            return
        size = self._header_sizes.get(key) if key is not None else None
        if size is None:
            size = 32 * len(headers)
            for name, value in headers:
                size += len(name) + len(value)
            if key is not None:
                if len(self._header_sizes) >= 256:
                    self._header_sizes.clear()
                self._header_sizes[key] = size
        total = size + 32 * len(extra)
        for name, value in extra:
            total += len(name) + len(value)
        if total > limit:
            raise HeaderListTooLargeError(
                f"header list of {total} bytes exceeds the peer's limit of {limit}"
            )

    def _write_headers(self, stream_id: int, block: bytes, end_stream: bool) -> None:
        flags = _END_STREAM if end_stream else 0
        size = len(block)
        max_frame = self._peer.max_frame_size
        out = self._out
        if size <= max_frame:
            out.append(
                _pack_header(size >> 8, size & 0xFF, _HEADERS, flags | _END_HEADERS, stream_id)
            )
            out.append(block)
            self._out_bytes += 9 + size
            return
        kind = _HEADERS
        for offset in range(0, size, max_frame):
            chunk = block[offset : offset + max_frame]
            if offset + max_frame >= size:
                flags |= _END_HEADERS
            length = len(chunk)
            out.append(_pack_header(length >> 8, length & 0xFF, kind, flags, stream_id))
            out.append(chunk)
            self._out_bytes += 9 + length
            kind, flags = _CONTINUATION, 0

    def open_stream(
        self,
        headers: Sequence[tuple[bytes, bytes]],
        *,
        end_stream: bool = False,
        extra: Sequence[tuple[bytes, bytes]] = (),
        cache_key: Hashable | None = None,
    ) -> int:
        """Client role: open a stream by sending its request headers.

        Args:
            headers: the request headers, pseudo-headers first, encoded through the
                HPACK table.
            end_stream: whether the request has no body.
            extra: headers that follow, sent as literals never indexed (per-call values
                such as grpc-timeout, which would only fill the table).
            cache_key: with the same key the caller always passes the same
                ``headers``; their encoding is then reused (see ``_hpack``).

        Returns:
            The new stream's id.

        Raises:
            ConnectionClosedError: the connection is closed or a GOAWAY was exchanged.
            StreamIdsExhaustedError: no stream id is left; use a new connection.
            TooManyStreamsError: the peer's MAX_CONCURRENT_STREAMS are open.
            HeaderListTooLargeError: over the peer's MAX_HEADER_LIST_SIZE.
        """
        if not self.client_side:
            raise LocalProtocolError("a server does not open streams")
        self._check_new_stream()
        stream_id = self._next_stream_id
        if stream_id > MAX_STREAM_ID:
            raise StreamIdsExhaustedError("no stream ids left on this connection")
        if len(self._streams) >= self._peer.max_concurrent_streams:
            raise TooManyStreamsError(
                f"the peer allows {self._peer.max_concurrent_streams} concurrent streams"
            )
        self._header_list_size(headers, extra, cache_key)
        block = self._encoder.encode(headers, extra, cache_key)
        self._next_stream_id = stream_id + 2
        stream = Stream(stream_id, self._peer.initial_window_size, self._stream_window)
        stream.apply(SEND_HEADERS)
        if end_stream:
            stream.apply(SEND_END_STREAM)
        stream.headers_sent = True
        self._streams[stream_id] = stream
        self._write_headers(stream_id, block, end_stream)
        return stream_id

    def send_headers(
        self,
        stream_id: int,
        headers: Sequence[tuple[bytes, bytes]],
        *,
        end_stream: bool = False,
        extra: Sequence[tuple[bytes, bytes]] = (),
        cache_key: Hashable | None = None,
    ) -> None:
        """Send response headers (server role) or trailers (either role).

        The arguments are as for :meth:`open_stream`. Trailers (any HEADERS after the
        first) must have ``end_stream``.

        Raises:
            StreamClosedError: the stream is not open for sending.
            LocalProtocolError: trailers without ``end_stream``.
            HeaderListTooLargeError: over the peer's MAX_HEADER_LIST_SIZE.
            ConnectionClosedError: the connection is closed.
        """
        if self._closed:
            raise ConnectionClosedError("the connection is closed")
        stream = self._streams.get(stream_id)
        # (HEADERS keep the state: the table's answer is the open-for-sending check.)
        if stream is None or not stream.advance(SEND_HEADERS):
            raise StreamClosedError(stream_id, "sending headers")
        if stream.headers_sent and not end_stream:
            raise LocalProtocolError("trailers must end the stream")
        self._header_list_size(headers, extra, cache_key)
        block = self._encoder.encode(headers, extra, cache_key)
        stream.headers_sent = True
        self._write_headers(stream_id, block, end_stream)
        self._ping_reset_pending = True
        if end_stream:
            self._end_local(stream)

    def _end_local(self, stream: Stream) -> None:
        if stream.apply(SEND_END_STREAM) == CLOSED:
            self._completed(stream)

    def send_data(
        self, stream_id: int, data: bytes | memoryview, *, end_stream: bool = False
    ) -> int:
        """Send as much of ``data`` as the windows allow, in frames of the peer's
        MAX_FRAME_SIZE at most.

        ``end_stream`` is honoured only if all of ``data`` went out. ``data`` is
        referenced until :meth:`data_to_send`: do not change it meanwhile.

        Returns:
            How many bytes were sent; the rest waits for a :class:`WindowUpdated`.

        Raises:
            StreamClosedError: the stream is not open for sending.
            LocalProtocolError: a server's DATA before its response headers.
            ConnectionClosedError: the connection is closed.
        """
        if self._closed:
            raise ConnectionClosedError("the connection is closed")
        stream = self._streams.get(stream_id)
        if stream is None or not stream.open_for_sending:
            raise StreamClosedError(stream_id, "sending data")
        if not stream.headers_sent:
            raise LocalProtocolError("DATA before the response headers")
        size = len(data)
        allowed = stream.send_window
        if self._send_window < allowed:
            allowed = self._send_window
        if size < allowed:
            allowed = size
        if allowed < 0:
            allowed = 0
        ends = end_stream and allowed == size
        out = self._out
        max_frame = self._peer.max_frame_size
        if allowed == size and size <= max_frame:
            if size or ends:
                out.append(
                    _pack_header(
                        size >> 8, size & 0xFF, _DATA, _END_STREAM if ends else 0, stream_id
                    )
                )
                if size:
                    out.append(data)
                self._out_bytes += 9 + size
        else:
            view = memoryview(data)
            offset = 0
            while offset < allowed:
                length = min(max_frame, allowed - offset)
                last = offset + length == size
                flags = _END_STREAM if ends and last else 0
                out.append(_pack_header(length >> 8, length & 0xFF, _DATA, flags, stream_id))
                out.append(view[offset : offset + length])
                self._out_bytes += 9 + length
                offset += length
        stream.send_window -= allowed
        self._send_window -= allowed
        if allowed:
            self._ping_reset_pending = True
        if ends:
            self._end_local(stream)
        return allowed

    def end_stream(self, stream_id: int) -> None:
        """End our side of the stream (an empty DATA frame with END_STREAM).

        Raises:
            StreamClosedError: the stream is not open for sending.
            ConnectionClosedError: the connection is closed.
        """
        self.send_data(stream_id, b"", end_stream=True)

    def reset_stream(self, stream_id: int, code: int = ErrorCode.CANCEL) -> bool:
        """Reset a stream (RST_STREAM); late frames on it are ignored for a while.

        Returns:
            True if RST_STREAM was queued; False if the stream was not open (nothing
            to do).
        """
        stream = self._streams.pop(stream_id, None)
        if stream is None or self._closed:
            return False
        stream.apply(SEND_RST)
        self._resets.add(stream_id, stream.recv_available)
        self._out.append(F.rst_stream(stream_id, code))
        self._out_bytes += 13
        return True

    def credit_reset_budget(self, count: float = 1.0) -> None:
        """Server role: give ``count`` tokens back to the rapid-reset budget (up to its
        burst).

        For the I/O layer, which knows what the core cannot: a peer's RST_STREAM on a
        request whose handler had already started is an ordinary cancellation (the
        server did the work, and MAX_CONCURRENT_STREAMS, counted until the handler
        unwinds, bounds it); the rapid-reset pattern resets requests before any handler
        runs. Crediting those resets back keeps a client that cancels many calls from
        being taken for an attacker.
        """
        self._reset_budget.give(count)

    def release_stream(self, stream_id: int) -> None:
        """Server role: the request's handler has finished (after cancellation has
        unwound): the stream no longer counts against MAX_CONCURRENT_STREAMS. Releasing a
        stream twice, or one never handed over, does nothing."""
        self._unreleased.discard(stream_id)

    def acknowledge_received_data(self, length: int, stream_id: int) -> None:
        """The caller consumed ``length`` flow-controlled bytes of ``stream_id``.

        WINDOW_UPDATE frames are queued when half a window has been consumed (see
        ``_flow``). Acknowledging more than was received grants nothing extra.
        """
        if length <= 0 or self._closed:
            return
        increment = self._inbound.consume(length)
        if increment:
            self._queue_update(0, increment)
        stream = self._streams.get(stream_id)
        if stream is None or not stream.open_for_receiving:
            return
        room = self._stream_window - stream.recv_available - stream.recv_unacked
        if length > room:
            length = room
        unacked = stream.recv_unacked + length
        if unacked < self._stream_threshold:
            stream.recv_unacked = unacked
            return
        stream.recv_unacked = 0
        stream.recv_available += unacked
        self._queue_update(stream_id, unacked)

    def _queue_update(self, stream_id: int, increment: int) -> None:
        # (Not counted as a reply: each one needs half a window of DATA first.)
        self._out.append(F.window_update(stream_id, increment))
        self._out_bytes += 13

    def send_ping(self, data: bytes) -> None:
        """Send a PING with an 8-byte payload; its ACK comes as :class:`PingAcknowledged`.

        Raises:
            ValueError: ``data`` is not 8 bytes.
            ConnectionClosedError: the connection is closed.
        """
        if len(data) != 8:
            raise ValueError("a PING payload is 8 bytes")
        if self._closed:
            raise ConnectionClosedError("the connection is closed")
        self._queue(F.ping(data))

    def send_goaway(
        self,
        error_code: int = ErrorCode.NO_ERROR,
        *,
        last_stream_id: int | None = None,
        debug_data: bytes = b"",
    ) -> None:
        """Send GOAWAY: no new streams from the peer beyond ``last_stream_id``.

        A server's graceful shutdown is two of them: ``last_stream_id=MAX_STREAM_ID``
        with a PING, then (on its ACK, or after a few seconds) the default, the last
        request handed over. Streams opened above the last one sent are ignored.
        Requests at or below it still finish. With an error code the connection is
        closed afterwards.

        Args:
            error_code: NO_ERROR for a graceful GOAWAY.
            last_stream_id: default: the last processed request (a server), 0 (a client).
            debug_data: opaque bytes for the peer's logs.

        Raises:
            LocalProtocolError: ``last_stream_id`` above that of an earlier GOAWAY.
            ConnectionClosedError: the connection is closed.
        """
        if last_stream_id is None:
            last_stream_id = 0 if self.client_side else self._last_processed
        self._send_goaway(last_stream_id, error_code)
        self._queue(F.goaway(last_stream_id, error_code, debug_data))

    def close(self, error_code: int = ErrorCode.NO_ERROR, debug_data: bytes = b"") -> None:
        """Send a final GOAWAY (unless closed already) and close the connection."""
        last = self._close(0 if self.client_side else self._last_processed)
        if last is not None:
            self._queue(F.goaway(last, error_code, debug_data))


_KIND = {REQUEST: "request", RESPONSE: "response", TRAILERS: "trailers"}


def _depends_on_itself(what: str, stream_id: int) -> str:
    return f"{what} makes stream {stream_id} depend on itself (RFC 7540 section 5.3.1)"
