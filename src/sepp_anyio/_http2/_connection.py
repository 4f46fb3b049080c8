"""One HTTP/2 connection, sans-IO: bytes in -> events out, send methods -> bytes out.

:class:`Connection` does no I/O, has no clock and starts no tasks (the h11 shape): the
caller feeds it what it read with :meth:`Connection.receive_data` and gets events
back, calls send methods that queue frames, and writes what
:meth:`Connection.data_to_send` returns. One class plays both roles (``client_side``);
the client role opens streams, the server role answers them. Anything time-based
(budget refills, how long a reset is remembered, keepalive enforcement) uses the
``now`` passed to :meth:`Connection.receive_data`.

The class is assembled from one mixin per side over a shared base (see
:mod:`._base`): :class:`~._reader.Reader` (with :class:`~._defences.Defences`) and
:class:`~._sender.Sender`. What moves the connection as a whole is decided in
:mod:`._state`, what moves a stream in :mod:`._stream`; the parts only read those
states and feed them inputs. This module holds the read-only view (the properties).

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

from ._base import MAX_STREAM_ID
from ._reader import Reader
from ._sender import Sender

__all__ = ["MAX_STREAM_ID", "Connection"]


class Connection(Reader, Sender):
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

    __slots__ = ()

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
    def should_pause_reading(self) -> bool:
        """Whether the I/O layer should stop reading until the output drains: the
        queued output is at ``limits.max_pending_output_bytes`` or more (a peer that
        does not read our replies must not make them pile up)."""
        return self.pending_output_bytes >= self.limits.max_pending_output_bytes

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
    def reset_budget(self) -> int:
        """Server role: what is left of the rapid-reset budget (refilled up to the
        ``now`` of the last ``receive_data``)."""
        return self._reset_budget.tokens(self._now)

    @property
    def glitch_budget(self) -> int:
        """What is left of the glitch budget (refilled up to the ``now`` of the last
        ``receive_data``)."""
        return self._glitches.tokens(self._now)

    @property
    def encoder_table(self) -> tuple[tuple[bytes, bytes], ...]:
        """Our HPACK encoder's dynamic table, newest entry first (what the headers we
        sent have indexed)."""
        return self._encoder.dynamic_entries

    @property
    def remembered_resets(self) -> int:
        """How many streams we reset are remembered."""
        return len(self._resets)
