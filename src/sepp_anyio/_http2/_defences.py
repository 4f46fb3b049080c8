"""The connection's defences and its protocol errors (a mixin of the connection).

Frame and header-block limits checked on each frame header before its payload is
waited for; the glitch budget for cheap useless frames and the run of empty ones; the
bound on control frames queued while the peer does not read; the server role's
keepalive enforcement and rapid-reset budget; the rules for frames on streams that do
not take them (closed, reset, never opened); and RFC 9113 section 5.4: a stream error
resets the stream and the connection goes on, a connection error queues GOAWAY and
closes it. The limits themselves and their defaults are :mod:`._limits`.

Everything here raises :class:`~._errors.ProtocolViolation` for the peer's error,
which :meth:`~._reader.Reader.receive_data` turns into a connection error; nothing
here raises to the caller.
"""

from __future__ import annotations

from . import _frames as F
from ._base import _ACK, _CONTINUATION, _HEADERS, _IDLE_PING_MIN_TIME, ConnectionBase
from ._errors import ErrorCode, ProtocolViolation
from ._events import ConnectionTerminated, Event, StreamReset
from ._stream import SEND_RST, Stream

__all__ = ["Defences"]


class Defences(ConnectionBase):
    """The limits and the protocol errors of a connection (see the module)."""

    __slots__ = ()

    # Limits ----------------------------------------------------------------

    def _reply(self, data: bytes) -> None:
        """Queue a control frame the peer's input made us send; too many of them waiting
        means the peer sends and does not read."""
        self._out.append(data)
        self.pending_output_bytes += len(data)
        self._control_frames += 1
        if self._control_frames > self.limits.max_queued_control_frames:
            raise ProtocolViolation(
                ErrorCode.ENHANCE_YOUR_CALM,
                f"more than {self.limits.max_queued_control_frames} control frames queued:"
                " the peer is not reading",
            )

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
        if not self._glitches.spend(self._now):
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

    def _refund(self, length: int) -> None:
        """Hand back connection credit for DATA nobody will consume."""
        increment = self._inbound.consume(length)
        if increment:
            self._reply(F.window_update(0, increment))

    # Frames on streams that do not take them -------------------------------

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

    # Keepalive enforcement (server role) -----------------------------------

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

    # Errors (RFC 9113 section 5.4) -----------------------------------------

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
        if not self._reset_budget.spend(self._now):
            raise ProtocolViolation(ErrorCode.ENHANCE_YOUR_CALM, "too_many_resets")

    def _connection_error(self, code: ErrorCode, reason: str, events: list[Event]) -> None:
        last = 0 if self.client_side else self._last_processed
        self._fail(last)
        self._queue(F.goaway(last, code, reason.encode("ascii", "replace")))
        self._partial.clear()
        self._block = None
        events.append(ConnectionTerminated(code, reason, last))
