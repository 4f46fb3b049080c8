"""The reading side of the connection: bytes in -> events out (a mixin).

Input is parsed straight from the bytes received: each 9-byte frame header is
unpacked at an offset and checked (:meth:`~._defences.Defences._check_header`) before
its payload is waited for, so a hostile length never makes us buffer more than one
frame; only an incomplete frame at the end of a read is kept. Unpadded DATA within
both windows and whole unpadded HEADERS blocks take an inline path in
:meth:`Reader._parse`; everything else its handler below. Every stream transition goes
through :class:`~._stream.Stream` (checked against ``open_for_receiving`` first).
"""

from __future__ import annotations

import hpack

from . import _frames as F
from ._base import (
    _ACK,
    _BARE_HEADERS,
    _CONTINUATION,
    _DATA,
    _END_HEADERS,
    _END_STREAM,
    _HEADERS,
    _LATE_FRAMES_AFTER_PEER_RESET,
    _PADDED,
    _PRIORITY_FLAG,
    _unpack_header,
)
from ._defences import Defences
from ._errors import ErrorCode, ProtocolViolation, error_code
from ._events import (
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
from ._flow import grow
from ._headers import REQUEST, RESPONSE, TRAILERS, check
from ._hpack import Decoded
from ._settings import UNLIMITED, SettingCode
from ._stream import CLOSED, RECV_END_STREAM, RECV_HEADERS, RECV_RST, Stream

__all__ = ["Reader"]


class Reader(Defences):
    """What a connection does with the bytes it is given (see the module)."""

    __slots__ = ()

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
        # (The decoder's own first step, here: most blocks are ones seen before.)
        decoded = self._decoder.known.get(block) or self._decode(block)
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

    # Stream ends -----------------------------------------------------------

    def _end_remote(self, stream: Stream) -> None:
        """The peer ended its side of ``stream``."""
        if stream.apply(RECV_END_STREAM) == CLOSED:
            self._completed(stream)


_KIND = {REQUEST: "request", RESPONSE: "response", TRAILERS: "trailers"}


def _depends_on_itself(what: str, stream_id: int) -> str:
    return f"{what} makes stream {stream_id} depend on itself (RFC 7540 section 5.3.1)"
