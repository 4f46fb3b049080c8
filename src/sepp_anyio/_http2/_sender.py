"""The sending side of the connection: send methods -> bytes out (a mixin).

Opening streams, headers and trailers (HPACK-encoded, split into CONTINUATIONs over
the peer's MAX_FRAME_SIZE, checked against its MAX_HEADER_LIST_SIZE), DATA within the
windows, resets, WINDOW_UPDATEs for consumed data, PING, GOAWAY and close, and
:meth:`Sender.data_to_send`, which hands over everything queued. Outbound headers are
not validated: the caller builds them. Misuse raises
:class:`~._errors.LocalProtocolError` (or a subclass) and changes nothing.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

from . import _frames as F
from ._base import (
    _CONTINUATION,
    _DATA,
    _END_HEADERS,
    _END_STREAM,
    _HEADERS,
    MAX_STREAM_ID,
    ConnectionBase,
    _pack_header,
)
from ._errors import (
    ConnectionClosedError,
    ErrorCode,
    HeaderListTooLargeError,
    LimitsError,
    LocalProtocolError,
    StreamClosedError,
    StreamIdsExhaustedError,
    TooManyStreamsError,
)
from ._settings import UNLIMITED
from ._stream import CLOSED, SEND_END_STREAM, SEND_HEADERS, SEND_RST, Stream

__all__ = ["Sender"]


class Sender(ConnectionBase):
    """What a connection sends (see the module)."""

    __slots__ = ()

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

    def data_to_send(self) -> bytes:
        """Everything queued to send, and forget it (b"" if nothing is)."""
        out = self._out
        if not out:
            return b""
        data = out[0] if len(out) == 1 and type(out[0]) is bytes else b"".join(out)
        out.clear()
        self.pending_output_bytes = 0
        self._control_frames = 0
        return data

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
            self.pending_output_bytes += 9 + size
            return
        kind = _HEADERS
        for offset in range(0, size, max_frame):
            chunk = block[offset : offset + max_frame]
            if offset + max_frame >= size:
                flags |= _END_HEADERS
            length = len(chunk)
            out.append(_pack_header(length >> 8, length & 0xFF, kind, flags, stream_id))
            out.append(chunk)
            self.pending_output_bytes += 9 + length
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
                self.pending_output_bytes += 9 + size
        else:
            view = memoryview(data)
            offset = 0
            while offset < allowed:
                length = min(max_frame, allowed - offset)
                last = offset + length == size
                flags = _END_STREAM if ends and last else 0
                out.append(_pack_header(length >> 8, length & 0xFF, _DATA, flags, stream_id))
                out.append(view[offset : offset + length])
                self.pending_output_bytes += 9 + length
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
        self.pending_output_bytes += 13
        return True

    def credit_reset_budget(self, count: int = 1) -> None:
        """Server role: give ``count`` tokens back to the rapid-reset budget (up to its
        burst).

        For the I/O layer, which knows what the core cannot: a peer's RST_STREAM on a
        request whose handler had already started is an ordinary cancellation (the
        server did the work, and MAX_CONCURRENT_STREAMS, counted until the handler
        unwinds, bounds it); the rapid-reset pattern resets requests before any handler
        runs. Crediting those resets back keeps a client that cancels many calls from
        being taken for an attacker.
        """
        self._reset_budget.give(self._now, count)

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
        self.pending_output_bytes += 13

    def send_ping(self, data: bytes) -> None:
        """Send a PING with an 8-byte payload; its ACK comes as :class:`PingAcknowledged`.

        Raises:
            ValueError: ``data`` is not 8 bytes.
            ConnectionClosedError: the connection is closed.
        """
        if len(data) != 8:
            raise LimitsError("a PING payload is 8 bytes")
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
