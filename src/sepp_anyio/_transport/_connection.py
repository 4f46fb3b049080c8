"""One HTTP/2 connection to a gRPC server, driven by anyio.

A :class:`Connection` wraps a connected byte stream and an ``h2`` state
machine. Its :meth:`Connection.run` task (owned by the channel's task group)
reads frames and dispatches them to the calls waiting on them; a second task
sends keepalive PINGs. Callers never read from the socket themselves.

Invariants that keep a shared connection healthy:

* All h2 state changes happen synchronously between awaits, and every write
  goes through :meth:`Connection.flush`, which runs shielded: a cancelled
  caller can never leave half a frame on the wire (trio would mark the stream
  broken, and the peer would see garbage).
* The reader never raises for connection trouble: it records ``failure`` and
  wakes every waiter, who then raise UNAVAILABLE themselves. That keeps
  connection errors out of the channel's task group, so they can't wrap the
  caller's own exceptions in an ExceptionGroup.
* Received DATA is acknowledged (window handed back) as soon as it is parsed.
  Memory stays bounded because each stream refuses a message announced larger
  than ``max_receive_message_bytes``, and a unary call refuses any byte after
  its one message (the call fails and its stream is reset with CANCEL, so a
  hostile server cannot make it buffer more than one message plus its
  prefix); waiting for the consumer before acknowledging is what deadlocked
  the lab prototype on messages larger than the window.
"""

from __future__ import annotations

import contextlib
import logging
import os
import struct
from collections import deque
from typing import TYPE_CHECKING, Any

import anyio
import anyio.abc
import anyio.lowlevel
import h2.config
import h2.connection
import h2.errors
import h2.events
import h2.exceptions
import h2.frame_buffer
import h2.settings
import h2.stream
import h2.utilities
import hpack
from grpclib.const import Status
from grpclib.exceptions import GRPCError
from hyperframe.frame import (
    Frame,
    GoAwayFrame,
)

from ._framing import (
    CompressedMessageError,
    ExtraMessageError,
    MessageDecoder,
    MessageTooLargeError,
)
from ._h2quiet import install_quiet_frames
from ._malformed import MalformedReplyError

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["CallState", "Connection"]

logger = logging.getLogger("sepp_anyio.transport")

# Our receive windows. HTTP/2's 64 KiB default throttles large messages to a
# trickle of WINDOW_UPDATE round trips; these are the values the lab measured.
STREAM_WINDOW = 1 << 20
CONNECTION_WINDOW = 16 << 20
_READ_SIZE = 1 << 18
_NO_SCOPE = contextlib.nullcontext()

_RST_TO_STATUS = {
    h2.errors.ErrorCodes.NO_ERROR: Status.INTERNAL,
    h2.errors.ErrorCodes.PROTOCOL_ERROR: Status.INTERNAL,
    h2.errors.ErrorCodes.INTERNAL_ERROR: Status.INTERNAL,
    h2.errors.ErrorCodes.FLOW_CONTROL_ERROR: Status.INTERNAL,
    h2.errors.ErrorCodes.SETTINGS_TIMEOUT: Status.INTERNAL,
    h2.errors.ErrorCodes.FRAME_SIZE_ERROR: Status.INTERNAL,
    h2.errors.ErrorCodes.REFUSED_STREAM: Status.UNAVAILABLE,
    h2.errors.ErrorCodes.CANCEL: Status.CANCELLED,
    h2.errors.ErrorCodes.COMPRESSION_ERROR: Status.INTERNAL,
    h2.errors.ErrorCodes.CONNECT_ERROR: Status.INTERNAL,
    h2.errors.ErrorCodes.ENHANCE_YOUR_CALM: Status.RESOURCE_EXHAUSTED,
    h2.errors.ErrorCodes.INADEQUATE_SECURITY: Status.PERMISSION_DENIED,
    h2.errors.ErrorCodes.HTTP_1_1_REQUIRED: Status.INTERNAL,
}


def status_for_reset(code: int) -> Status:
    """The gRPC status for a stream the server reset with ``code``."""
    try:
        return _RST_TO_STATUS[h2.errors.ErrorCodes(code)]
    except ValueError:
        return Status.INTERNAL


_CLOSED_BY_RESET = frozenset(
    {h2.stream.StreamClosedBy.SEND_RST_STREAM, h2.stream.StreamClosedBy.RECV_RST_STREAM}
)


class _ResetStreams(dict[int, "h2.stream.StreamClosedBy | None"]):
    """h2's record of closed streams, keeping only the streams closed by RST_STREAM.

    h2 remembers how each of the last 65,536 closed streams was closed (11 MiB at
    that size), so that a late frame on a stream closed by a reset is a stream error
    rather than a connection error. A frame on a stream that ended normally is a
    connection error whether it is remembered or not: only resets are worth the
    memory. Without this, every long-lived connection grew by 11 MiB over its first
    65,536 calls.
    """

    def __init__(self, limit: int) -> None:
        super().__init__()
        self._limit = limit

    def __setitem__(self, stream_id: int, closed_by: h2.stream.StreamClosedBy | None) -> None:
        if closed_by not in _CLOSED_BY_RESET:
            return
        super().__setitem__(stream_id, closed_by)
        if len(self) > self._limit:
            del self[next(iter(self))]


_FRAME_HEADER = struct.Struct(">HBBBL")
_DATA, _HEADERS, _CONTINUATION = 0x0, 0x1, 0x9
_END_STREAM, _END_HEADERS, _PADDED, _PRIORITY = 0x1, 0x4, 0x8, 0x20
_CLIENT_OPEN = h2.connection.ConnectionState.CLIENT_OPEN
# The stream states in which a received DATA or HEADERS frame is not a closed-stream case.
_RECEIVING = frozenset({h2.stream.StreamState.OPEN, h2.stream.StreamState.HALF_CLOSED_LOCAL})


class _H2Connection(h2.connection.H2Connection):
    """h2's connection, with graceful GOAWAY handling on the receiving side.

    h2 closes its state machine on *any* GOAWAY, drops our queued output and
    then treats every later frame as a protocol error, including the frames
    of calls the server promised to finish (those up to last_stream_id). A
    graceful GOAWAY (NO_ERROR) allows exactly those, so for it we keep the
    machine open and the output intact; ``Connection.draining`` makes sure
    no new stream is started on the connection afterwards. This has to
    happen while h2 parses the frame: frames after the GOAWAY often arrive
    in the same read.

    Its record of closed streams keeps only reset ones (see ``_ResetStreams``).
    """

    def __init__(self, config: h2.config.H2Configuration) -> None:
        super().__init__(config=config)
        self._closed_streams = _ResetStreams(self.MAX_CLOSED_STREAMS)
        self.decoder = _CachingDecoder()
        self.decoder.max_header_list_size = self.DEFAULT_MAX_HEADER_LIST_SIZE
        install_quiet_frames(self)

    def has_data_to_send(self) -> bool:
        """Whether :meth:`data_to_send` would return anything (without taking it)."""
        return bool(self._data_to_send)

    # h2 reads this before opening each stream: it walks every stream it knows to
    # count the open ones (and forgets the closed ones on the way), O(streams in
    # flight) per call. Its check is redundant here: Connection never opens a
    # stream without a slot under the peer's MAX_CONCURRENT_STREAMS
    # (acquire_slot), and a call's slot is freed only after its stream has closed.
    # So the walk runs only every _CULL_EVERY new streams, to forget closed ones.
    _CULL_EVERY = 32
    _new_streams = 0

    @property
    def open_outbound_streams(self) -> int:
        self._new_streams += 1
        if self._new_streams % self._CULL_EVERY == 0:
            self._open_streams(int(self.config.client_side))
        return 0

    def _begin_new_stream(
        self, stream_id: int, allowed_ids: h2.connection.AllowedStreamIDs
    ) -> h2.stream.H2Stream:
        stream = super()._begin_new_stream(stream_id, allowed_ids)
        if type(stream) is h2.stream.H2Stream:
            stream.__class__ = _FastStream
        return stream

    # Received frames a unary call lives on: h2's general path parses each into a
    # hyperframe object (flag sets, padding fields), dispatches it through the
    # connection, and only then reaches the stream: about 15 microseconds a frame,
    # three frames a call. receive_data hands these straight to the stream (h2's
    # own H2Stream.receive_data/receive_headers, so the stream semantics are h2's)
    # when nothing unusual is going on; everything else, and everything after the
    # first frame that isn't such a frame, goes through h2's path unchanged.
    # _fast_receive is a switch for the differential test.
    _fast_receive = True

    def receive_data(self, data: Any) -> list[h2.events.Event]:
        buffer = self.incoming_buffer
        if (
            not self._fast_receive
            or buffer._data
            or buffer._headers_buffer
            or self.state_machine.state is not _CLIENT_OPEN
            or not isinstance(data, bytes)
        ):
            return super().receive_data(data)
        events: list[h2.events.Event] = []
        streams = self.streams
        max_frame = self.max_inbound_frame_size
        size = len(data)
        pos = 0
        while size - pos >= 9:
            high, low, kind, flags, stream_id = _FRAME_HEADER.unpack_from(data, pos)
            length = (high << 8) | low
            end = pos + 9 + length
            if end > size or length > max_frame:
                break
            if kind == _DATA:
                if flags & _PADDED:
                    break
            elif kind == _HEADERS:
                if flags & (_PADDED | _PRIORITY) or not flags & _END_HEADERS:
                    break
            else:
                break
            stream = streams.get(stream_id & 0x7FFFFFFF)
            if stream is None or stream.state_machine.state not in _RECEIVING:
                break
            try:
                if kind == _DATA:
                    # As h2's _receive_data_frame, with the connection known to be open.
                    self._inbound_flow_control_window_manager.window_consumed(length)
                    events += stream.receive_data(
                        data[pos + 9 : end], bool(flags & _END_STREAM), length
                    )[1]
                else:
                    # As h2's _receive_headers_frame for a stream we opened.
                    headers = h2.connection._decode_headers(self.decoder, data[pos + 9 : end])
                    events += stream.receive_headers(
                        headers, bool(flags & _END_STREAM), self.config.header_encoding
                    )[1]
            except h2.exceptions.ProtocolError as exc:
                # h2's frame buffer would still hold the frames after this one.
                buffer.add_data(data[end:])
                self._terminate_connection(exc.error_code)
                raise
            pos = end
        if pos < size:
            events += super().receive_data(data[pos:] if pos else data)
        return events

    def _receive_goaway_frame(
        self, frame: GoAwayFrame
    ) -> tuple[list[Frame], list[h2.events.Event]]:
        if frame.error_code != h2.errors.ErrorCodes.NO_ERROR:
            return super()._receive_goaway_frame(frame)
        event = h2.events.ConnectionTerminated()
        event.error_code = h2.errors.ErrorCodes.NO_ERROR
        event.last_stream_id = frame.last_stream_id
        event.additional_data = frame.additional_data or None
        return [], [event]


class _RawFrame:
    """A frame already in wire form, for ``H2Connection._prepare_for_sending`` (which
    needs only ``serialize()`` and ``body_len``)."""

    __slots__ = ("_wire", "body_len")

    def __init__(self, kind: int, flags: int, stream_id: int, body: bytes) -> None:
        length = len(body)
        self.body_len = length
        self._wire = (
            _FRAME_HEADER.pack(length >> 8, length & 0xFF, kind, flags, stream_id & 0x7FFFFFFF)
            + body
        )

    def serialize(self) -> bytes:
        return self._wire


class _FastStream(h2.stream.H2Stream):
    """h2's stream, sending a client's HEADERS and DATA frames without building
    hyperframe objects for them.

    With header validation and normalisation off (our configuration), h2's own
    path does the same state transitions and flow-control accounting, then
    builds frame objects (flags sets, padding fields) only to serialise them at
    once: about a third of the cost of starting a unary call. Here the same
    transitions and accounting happen and the frames are written directly.
    Anything else (server side, padding, validation on) takes h2's path.
    tests/transport/test_h2_speedups.py checks the bytes and the stream state
    against h2's own path.
    """

    def send_headers(self, headers: Any, encoder: Any, end_stream: bool = False) -> Any:
        config = self.config
        if (
            not config.client_side
            or config.validate_outbound_headers
            or config.normalize_outbound_headers
        ):
            return super().send_headers(headers, encoder, end_stream)
        # The state changes before encoding, as in h2: encoding changes the
        # compression context irreversibly.
        self.state_machine.process_input(h2.stream.StreamInputs.SEND_HEADERS)
        block = encoder.encode(headers)
        size = self.max_outbound_frame_size or len(block) or 1
        flags = _END_STREAM if end_stream else 0
        if end_stream:
            self.state_machine.process_input(h2.stream.StreamInputs.SEND_END_STREAM)
        if len(block) <= size:
            frames = [_RawFrame(_HEADERS, flags | _END_HEADERS, self.stream_id, block)]
        else:
            chunks = [block[i : i + size] for i in range(0, len(block), size)]
            frames = [_RawFrame(_HEADERS, flags, self.stream_id, chunks[0])]
            for chunk in chunks[1:-1]:
                frames.append(_RawFrame(_CONTINUATION, 0, self.stream_id, chunk))
            frames.append(_RawFrame(_CONTINUATION, _END_HEADERS, self.stream_id, chunks[-1]))
        if self.state_machine.trailers_sent and not end_stream:
            raise h2.exceptions.ProtocolError("Trailers must have END_STREAM set.")
        if self._authority is None:
            self._authority = h2.utilities.authority_from_headers(headers)
        self.request_method = h2.utilities.extract_method_header(headers)
        return frames

    def send_data(
        self, data: bytes | memoryview, end_stream: bool = False, pad_length: int | None = None
    ) -> Any:
        if pad_length is not None:
            return super().send_data(data, end_stream, pad_length)
        self.state_machine.process_input(h2.stream.StreamInputs.SEND_DATA)
        body = data.tobytes() if isinstance(data, memoryview) else data
        flags = 0
        if end_stream:
            self.state_machine.process_input(h2.stream.StreamInputs.SEND_END_STREAM)
            flags = _END_STREAM
        self.outbound_flow_control_window -= len(body)
        assert self.outbound_flow_control_window >= 0 or not body
        return [_RawFrame(_DATA, flags, self.stream_id, body)]


class _CachingDecoder(hpack.Decoder):
    """An HPACK decoder that remembers the headers of small header blocks made of
    references only.

    A gRPC server answers every unary call with the same response headers
    (``:status``, ``content-type``) and, when all is well, the same trailers
    (``grpc-status: 0``); once those are in the dynamic table, each block is a
    few index bytes, identical call after call. Decoding them again costs h2
    about 10 microseconds a block. A block whose decoding left the dynamic table
    unchanged decodes the same way for as long as the table does not change, so
    its result is cached keyed by its bytes and by a version number that every
    insertion into, or eviction from, the table bumps.
    """

    _MAX_CACHED_BLOCK = 64
    _MAX_ENTRIES = 64

    def __init__(self) -> None:
        super().__init__()
        self._version = 0
        table = self.header_table
        original_add = table.add
        original_shrink = table._shrink

        def add(name: bytes, value: bytes) -> Any:
            self._version += 1
            return original_add(name, value)

        def shrink() -> None:
            self._version += 1
            original_shrink()

        table.add = add  # type: ignore[method-assign]
        table._shrink = shrink  # type: ignore[method-assign]
        self._cache: dict[bytes, tuple[int, list[Any]]] = {}

    def decode(self, data: bytes, raw: bool = False) -> Any:
        if not raw or len(data) > self._MAX_CACHED_BLOCK:
            return super().decode(data, raw)
        key = bytes(data)
        cached = self._cache.get(key)
        if cached is not None and cached[0] == self._version:
            return list(cached[1])
        before = self._version
        headers = super().decode(data, raw)
        if self._version == before:
            if len(self._cache) >= self._MAX_ENTRIES:
                self._cache.clear()
            self._cache[key] = (before, list(headers))
        return headers


class _CachingEncoder(hpack.Encoder):
    """An HPACK encoder that reuses the encoding of each request's constant headers.

    A request's headers are a constant part (pseudo-headers, te, content-type,
    user-agent, constant metadata: the same for every call of a method) and a
    per-call part (grpc-timeout, traceparent, ...), which the channel sends as
    never-indexed literals, so they never change the dynamic table. Once the
    constant headers are all in the table, encoding them yields references
    only, and as long as nothing is added to the table those bytes are the
    same every time: they are cached per method, keyed by a version number
    that every table insertion bumps. This removes most of the encoding cost
    of a unary call (h2's encoder is pure Python and searches the table for
    every header).

    The caller announces the constant prefix with :meth:`expect_prefix` right
    before ``h2.send_headers`` (which encodes synchronously).
    """

    def __init__(self) -> None:
        super().__init__()
        self._version = 0
        original_add = self.header_table.add

        def add(name: bytes, value: bytes) -> Any:
            self._version += 1
            return original_add(name, value)

        self.header_table.add = add  # type: ignore[method-assign]
        self._cache: dict[bytes, tuple[int, bytes]] = {}
        self._prefix: tuple[bytes, int] | None = None

    def expect_prefix(self, key: bytes, count: int) -> None:
        """The next header block starts with ``count`` constant headers named by ``key``."""
        self._prefix = (key, count)

    def encode(self, headers: Any, huffman: bool = True) -> bytes:
        prefix, self._prefix = self._prefix, None
        if prefix is None or self.header_table.resized or not isinstance(headers, list):
            return super().encode(headers, huffman)
        key, count = prefix
        cached = self._cache.get(key)
        if cached is not None and cached[0] == self._version:
            head = cached[1]
        else:
            before = self._version
            head = super().encode(headers[:count], huffman)
            if self._version == before:
                # Pure references: valid until the next insertion.
                self._cache[key] = (before, head)
        if len(headers) > count:
            return head + self._encode_per_call(headers[count:])
        return head

    def _encode_per_call(self, headers: list[Any]) -> bytes:
        """The per-call headers (grpc-timeout, trace context, call metadata), which the
        channel marks never-indexed: literals that never touch the dynamic table, so
        they are written directly (RFC 7541 6.2.3, literal name, no Huffman coding)
        instead of through hpack's table search, about 4% of a worker's CPU."""
        out = bytearray()
        for header in headers:
            if not isinstance(header, hpack.NeverIndexedHeaderTuple):
                return bytes(super().encode(headers, huffman=False))
            name, value = header
            out.append(0x10)
            _append_hpack_string(out, name)
            _append_hpack_string(out, value)
        return bytes(out)


def _append_hpack_string(out: bytearray, data: bytes) -> None:
    """An HPACK string literal without Huffman coding: 7-bit-prefix length, then bytes."""
    length = len(data)
    if length < 127:
        out.append(length)
    else:
        out.append(127)
        length -= 127
        while length >= 128:
            out.append((length & 0x7F) | 0x80)
            length >>= 7
        out.append(length)
    out += data


class CallState:
    """What the reader has learned about one HTTP/2 stream (one RPC).

    The call's task waits on :attr:`waiter`; the reader fills in fields and
    calls :meth:`wake`. One waiter at a time: a call is driven by one task.
    """

    __slots__ = (
        "decoder",
        "ended",
        "failure",
        "headers",
        "reset_code",
        "stream_id",
        "trailers",
        "unprocessed",
        "waiter",
        "wanted",
    )

    def __init__(
        self, stream_id: int, max_message_size: int, max_messages: int | None = None
    ) -> None:
        self.stream_id = stream_id
        self.headers: list[tuple[bytes, bytes]] | None = None
        self.trailers: list[tuple[bytes, bytes]] | None = None
        self.decoder = MessageDecoder(max_message_size, max_messages)
        self.ended = False
        self.reset_code: int | None = None
        # A local verdict on this stream (oversized message, GOAWAY above our
        # id, connection loss); raised to the caller at its next wait.
        self.failure: GRPCError | None = None
        # True when the server provably never processed the request (it
        # refused the stream, or a GOAWAY put it above last_stream_id).
        self.unprocessed = False
        self.waiter: anyio.Event | None = None
        # What the waiting task waits for (set with the waiter): the reader wakes it
        # only once that holds, or the call failed or was reset. A unary response
        # usually arrives in two reads (headers and message, then trailers); waking
        # the caller after the first would cost a task switch for nothing.
        self.wanted: Callable[[CallState], bool] | None = None

    def wake(self) -> None:
        waiter = self.waiter
        if waiter is not None:
            wanted = self.wanted
            if (
                wanted is not None
                and self.failure is None
                and self.reset_code is None
                and not wanted(self)
            ):
                return
            self.waiter = None
            waiter.set()

    def fail(self, error: GRPCError) -> None:
        if self.failure is None:
            self.failure = error
        self.wake()


class Connection:
    """An HTTP/2 client connection carrying gRPC calls.

    Created by the channel after the TCP (and TLS) handshake; the channel runs
    :meth:`run` in its task group and waits for :attr:`ready`.
    """

    def __init__(
        self,
        stream: anyio.abc.ByteStream,
        *,
        label: str,
        max_receive_message_bytes: int,
        keepalive_interval: float | None,
        keepalive_timeout: float,
    ) -> None:
        self._stream = stream
        self.label = label
        self.max_receive_message_bytes = max_receive_message_bytes
        self._keepalive_interval = keepalive_interval
        self._keepalive_timeout = keepalive_timeout
        self.h2 = _H2Connection(
            config=h2.config.H2Configuration(
                client_side=True,
                header_encoding=None,
                # We build well-formed headers ourselves and read only a few
                # response headers; h2's per-header validation costs more than
                # the rest of a unary call's header handling.
                validate_outbound_headers=False,
                normalize_outbound_headers=False,
                validate_inbound_headers=False,
                normalize_inbound_headers=False,
            )
        )
        self.encoder = _CachingEncoder()
        self.h2.encoder = self.encoder
        self.calls: dict[int, CallState] = {}
        # Set once the connection can carry no new call; existing calls may
        # still finish (after a graceful GOAWAY) unless failure is also set.
        self.draining = False
        self.failure: GRPCError | None = None
        self.ready = anyio.Event()
        # Set when run() has finished and the socket is closed.
        self.closed = anyio.Event()
        self._flushing = False
        self._open_streams = 0
        # The peer's MAX_CONCURRENT_STREAMS, read from h2 when its settings change (h2's
        # settings lookups cost more than the rest of taking a slot).
        self._max_streams = self.h2.remote_settings.max_concurrent_streams
        self._slot_waiters: deque[anyio.Event] = deque()
        self._window_waiters: list[anyio.Event] = []
        self._ping_ack: anyio.Event | None = None
        self._ping_payload = b""
        # The first bytes the server sent (up to 5): enough to tell a TLS record (a
        # plaintext client talking to a TLS server) from HTTP/2 when the handshake fails.
        self.first_bytes = b""
        self._scope: anyio.CancelScope | None = None
        # The channel forgets a connection through this once it has closed.
        self.on_closed: Callable[[Connection], None] | None = None

        self.h2.local_settings = h2.settings.Settings(
            client=True,
            initial_values={
                h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: STREAM_WINDOW,
                h2.settings.SettingCodes.ENABLE_PUSH: 0,
                h2.settings.SettingCodes.MAX_HEADER_LIST_SIZE: 1 << 20,
            },
        )
        self.h2.initiate_connection()
        self.h2.increment_flow_control_window(CONNECTION_WINDOW - 65535)

    # ------------------------------------------------------------ state

    @property
    def usable(self) -> bool:
        """Whether a new call may start on this connection."""
        return self.failure is None and not self.draining

    def unavailable(self, what: str) -> GRPCError:
        return GRPCError(Status.UNAVAILABLE, f"{what} ({self.label})")

    def fail(self, error: GRPCError) -> None:
        """Mark the connection dead and wake everyone; idempotent."""
        if self.failure is None:
            self.failure = error
            logger.debug("connection %s failed: %s", self.label, error.message)
        self.draining = True
        self.ready.set()
        for call in self.calls.values():
            # A call whose response has fully arrived is complete, even if
            # its task hasn't read it yet: the loss of the link is not its.
            if not call.ended:
                call.fail(error)
        self._wake_slot_waiters_all()
        self._wake_window_waiters()
        if self._ping_ack is not None:
            self._ping_ack.set()
        if self._scope is not None:
            self._scope.cancel()

    def close_soon(self) -> None:
        """Stop the reader; used once a draining connection has no calls."""
        if self.failure is None:
            self.fail(self.unavailable("connection closed"))

    # ------------------------------------------------------------ writing

    async def flush(self, *, shield: bool = True) -> None:
        """Send everything h2 has queued.

        Runs shielded, so cancellation can't cut a frame in half. Only one task
        writes at a time; a task that finds a write in progress returns at
        once, because the writer loops until h2's buffer is empty and so sends
        its frames too (this also coalesces concurrent calls into fewer
        writes). A dead peer can't block the writer forever: the keepalive
        task closes the stream, which aborts the pending write.
        """
        if self._flushing or self.failure is not None or not self.h2.has_data_to_send():
            return
        self._flushing = True
        try:
            with anyio.CancelScope(shield=True) if shield else _NO_SCOPE:
                if len(self.calls) > 1:
                    # Other calls are in flight and often queue frames in this
                    # same loop iteration (a worker acking a burst of jobs):
                    # yield once so that one write carries them all. Each
                    # write costs a syscall plus the kernel's loopback/TCP
                    # path, which dominates the client's CPU per call. A lone
                    # call skips this and keeps its latency.
                    await anyio.lowlevel.checkpoint()
                data = self.h2.data_to_send()
                while data:
                    await self._stream.send(data)
                    data = self.h2.data_to_send()
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError) as exc:
            self.fail(self.unavailable(f"connection lost while writing: {exc!r}"))
        finally:
            self._flushing = False

    # ------------------------------------------------------------ stream slots

    async def acquire_slot(self) -> None:
        """Wait for room under the server's MAX_CONCURRENT_STREAMS.

        Waiters are served first come, first served, and each finished stream
        wakes exactly one of them (waking all would cost O(n^2) for hundreds of
        queued calls). Raises UNAVAILABLE if the connection stops taking new
        calls meanwhile; the caller then retries on a fresh connection.
        """
        if not self._slot_waiters and self._open_streams < self._max_streams:
            self._open_streams += 1
            return
        waiter = anyio.Event()
        self._slot_waiters.append(waiter)
        try:
            await waiter.wait()
        except BaseException:
            try:
                self._slot_waiters.remove(waiter)
            except ValueError:
                # We were granted a slot just as we were cancelled: pass it on.
                if self.usable:
                    self.release_slot()
            raise
        if not self.usable:
            raise self.failure or self.unavailable("connection is going away")

    def release_slot(self) -> None:
        self._open_streams -= 1
        self._grant_slots()

    def _grant_slots(self) -> None:
        limit = self._max_streams
        while self._slot_waiters and self._open_streams < limit:
            self._open_streams += 1
            self._slot_waiters.popleft().set()

    def _wake_slot_waiters_all(self) -> None:
        while self._slot_waiters:
            self._slot_waiters.popleft().set()

    # ------------------------------------------------------------ send windows

    async def wait_for_window(self) -> None:
        """Sleep until the peer grants more send window (or the link fails)."""
        waiter = anyio.Event()
        self._window_waiters.append(waiter)
        try:
            await waiter.wait()
        finally:
            if waiter in self._window_waiters:
                self._window_waiters.remove(waiter)

    def _wake_window_waiters(self) -> None:
        waiters, self._window_waiters = self._window_waiters, []
        for waiter in waiters:
            waiter.set()

    # ------------------------------------------------------------ calls

    def open_call(self, stream_id: int, *, max_messages: int | None = None) -> CallState:
        """Track a new stream; ``max_messages=1`` for a unary response."""
        call = CallState(stream_id, self.max_receive_message_bytes, max_messages)
        self.calls[stream_id] = call
        return call

    def release_call(self, call: CallState) -> None:
        """Forget a finished call and free its slot (synchronous, no I/O)."""
        if self.calls.pop(call.stream_id, None) is not None:
            self.release_slot()
        if self.draining and not self.calls:
            self.close_soon()

    def reset_call(self, call: CallState, code: int = h2.errors.ErrorCodes.CANCEL) -> bool:
        """Queue RST_STREAM for a call still open on the wire; True if queued."""
        if self.failure is not None:
            return False
        try:
            self.h2.reset_stream(call.stream_id, code)
        except (h2.exceptions.StreamClosedError, h2.exceptions.ProtocolError):
            return False
        return True

    # ------------------------------------------------------------ the tasks

    async def run(self) -> None:
        """Read and dispatch frames until the connection ends; never raises.

        Cancellation (the channel closing) is re-raised after the connection
        has been marked failed and the socket closed.
        """
        try:
            with anyio.CancelScope() as self._scope:
                async with anyio.create_task_group() as tg:
                    if self._keepalive_interval is not None:
                        tg.start_soon(self._keepalive)
                    await self._read_loop()
                    tg.cancel_scope.cancel()
        finally:
            self.fail(self.unavailable("connection closed"))
            with anyio.CancelScope(shield=True), anyio.move_on_after(1.0):
                await self._stream.aclose()
            self.closed.set()
            if self.on_closed is not None:
                self.on_closed(self)

    async def _read_loop(self) -> None:
        try:
            while True:
                data = await self._stream.receive(_READ_SIZE)
                if len(self.first_bytes) < 5:
                    self.first_bytes += data[: 5 - len(self.first_bytes)]
                events = self.h2.receive_data(data)
                for event in events:
                    self._dispatch(event)
                # WINDOW_UPDATEs and PING/SETTINGS ACKs the events produced.
                # Unshielded: the reader is only cancelled when the whole
                # connection is being torn down, and then a cut write is moot.
                await self.flush(shield=False)
        except anyio.EndOfStream:
            self.fail(self.unavailable("connection closed by the server"))
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError) as exc:
            self.fail(self.unavailable(f"connection lost: {exc!r}"))
        except h2.exceptions.ProtocolError as exc:
            self.fail(self.unavailable(f"HTTP/2 protocol error from the server: {exc}"))

    async def _keepalive(self) -> None:
        """PING every interval, also while idle; a missing ACK kills the link.

        A long-poll reserve can sit silent for minutes; without this, a peer
        that vanished (or a NAT that dropped the mapping) would only be noticed
        at the TCP retransmission timeout, many minutes later.
        """
        assert self._keepalive_interval is not None
        while True:
            await anyio.sleep(self._keepalive_interval)
            ack = self._ping_ack = anyio.Event()
            self._ping_payload = os.urandom(8)
            self.h2.ping(self._ping_payload)
            await self.flush()
            with anyio.move_on_after(self._keepalive_timeout):
                await ack.wait()
            if not ack.is_set():
                self.fail(
                    self.unavailable(
                        f"keepalive PING not acknowledged within {self._keepalive_timeout:g}s;"
                        " the server is unreachable"
                    )
                )
                return

    # ------------------------------------------------------------ dispatch

    def _dispatch(self, event: h2.events.Event) -> None:
        kind = type(event)
        if kind is h2.events.DataReceived:
            assert isinstance(event, h2.events.DataReceived)
            self._on_data(event)
        elif kind is h2.events.ResponseReceived:
            assert isinstance(event, h2.events.ResponseReceived)
            call = self.calls.get(event.stream_id)
            if call is not None:
                call.headers = event.headers
                call.wake()
        elif kind is h2.events.TrailersReceived:
            assert isinstance(event, h2.events.TrailersReceived)
            call = self.calls.get(event.stream_id)
            if call is not None:
                call.trailers = event.headers
                call.wake()
        elif kind is h2.events.StreamEnded:
            assert isinstance(event, h2.events.StreamEnded)
            call = self.calls.get(event.stream_id)
            if call is not None:
                call.ended = True
                call.wake()
                # A sender waiting for window on this stream must stop (see _send_body).
                self._wake_window_waiters()
        elif kind is h2.events.StreamReset:
            assert isinstance(event, h2.events.StreamReset)
            call = self.calls.get(event.stream_id)
            if call is not None:
                call.reset_code = event.error_code
                if event.error_code == h2.errors.ErrorCodes.REFUSED_STREAM and call.headers is None:
                    call.unprocessed = True
                call.wake()
                # No window will ever come for a reset stream: a sender waiting for it must
                # see the reset now, not at the next update of another stream.
                self._wake_window_waiters()
        elif kind is h2.events.WindowUpdated:
            self._wake_window_waiters()
        elif kind is h2.events.RemoteSettingsChanged:
            # The limit may have grown, and a new initial window changes every
            # stream's send window.
            self._max_streams = self.h2.remote_settings.max_concurrent_streams
            self.ready.set()
            self._grant_slots()
            self._wake_window_waiters()
        elif kind is h2.events.PingAckReceived:
            assert isinstance(event, h2.events.PingAckReceived)
            if self._ping_ack is not None and event.ping_data == self._ping_payload:
                self._ping_ack.set()
        elif kind is h2.events.ConnectionTerminated:
            assert isinstance(event, h2.events.ConnectionTerminated)
            self._on_goaway(event)

    def _on_data(self, event: h2.events.DataReceived) -> None:
        stream_id = event.stream_id
        assert stream_id is not None
        size = event.flow_controlled_length or 0
        if size:
            self.h2.acknowledge_received_data(size, stream_id)
        call = self.calls.get(stream_id)
        if call is None or call.failure is not None or event.data is None:
            return
        try:
            call.decoder.feed(event.data)
        except MessageTooLargeError as exc:
            call.fail(GRPCError(Status.RESOURCE_EXHAUSTED, str(exc)))
            self.reset_call(call)
        except CompressedMessageError as exc:
            call.fail(GRPCError(Status.INTERNAL, str(exc)))
            self.reset_call(call)
        except ExtraMessageError as exc:
            call.fail(MalformedReplyError(str(exc)))
            self.reset_call(call)
        else:
            call.wake()

    def _on_goaway(self, event: h2.events.ConnectionTerminated) -> None:
        last = event.last_stream_id if event.last_stream_id is not None else 0
        code = event.error_code
        reason = f"server sent GOAWAY ({code!r})"
        self.draining = True
        # Streams above last_stream_id were never processed: safe to retry.
        for stream_id, call in list(self.calls.items()):
            if stream_id > last:
                call.unprocessed = True
                call.fail(self.unavailable(f"{reason}; the call was not processed"))
        if code != h2.errors.ErrorCodes.NO_ERROR:
            self.fail(self.unavailable(reason))
            return
        # A graceful GOAWAY: _H2Connection kept h2 open for the calls the
        # server is still finishing; `draining` stops new ones.
        self._wake_slot_waiters_all()
        if not self.calls:
            self.close_soon()
