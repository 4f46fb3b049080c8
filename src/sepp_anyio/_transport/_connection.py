"""One HTTP/2 connection to a gRPC server, driven by anyio.

A :class:`Connection` wraps a connected byte stream and our own sans-IO HTTP/2
connection (:class:`sepp_anyio._http2.Connection`, client role). Its
:meth:`Connection.run` task (owned by the channel's task group) reads frames and
dispatches their events to the calls waiting on them; a second task sends
keepalive PINGs. Callers never read from the socket themselves.

Invariants that keep a shared connection healthy:

* All HTTP/2 state changes happen synchronously between awaits, and every write
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
* The reader stops reading while the HTTP/2 connection's queued output is over
  its bound (``should_pause_reading``): a server that sends and never reads
  cannot make our replies (PING and SETTINGS ACKs, WINDOW_UPDATEs) pile up.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections import deque
from typing import TYPE_CHECKING

import anyio
import anyio.abc
import anyio.lowlevel

from .. import _http2
from .._grpc import (
    CompressedMessageError,
    ExtraMessageError,
    GrpcError,
    MalformedReplyError,
    MessageDecoder,
    MessageTooLargeError,
)
from .._http2 import ErrorCode
from .._io import EagerStream, PumpStream
from .._io._native import ANYIO, Native, Waiter
from .._model._error_root import StatusCode

if TYPE_CHECKING:
    from collections.abc import Callable, Hashable, Sequence

    from .._http2 import Headers

__all__ = ["CallState", "Connection", "deadline_exceeded"]

logger = logging.getLogger("sepp_anyio.transport")

# Our receive windows. HTTP/2's 64 KiB default throttles large messages to a
# trickle of WINDOW_UPDATE round trips; these are the values the lab measured.
STREAM_WINDOW = 1 << 20
CONNECTION_WINDOW = 16 << 20
# The largest header list (response headers, trailers) we accept, advertised as
# SETTINGS_MAX_HEADER_LIST_SIZE: what the transport accepted on h2 (1 MiB), with
# the HPACK decoder's own bound above it.
MAX_HEADER_LIST_SIZE = 1 << 20
_LIMITS = _http2.Limits(
    max_header_list_size=MAX_HEADER_LIST_SIZE,
    max_decoded_header_bytes=2 * MAX_HEADER_LIST_SIZE,
    max_header_block_bytes=MAX_HEADER_LIST_SIZE,
    max_continuations=(MAX_HEADER_LIST_SIZE >> 14) + 1,
)
_READ_SIZE = 1 << 18
# The server's first bytes kept: enough to tell a TLS record (5) and a SETTINGS frame
# header (9) from anything else, and to quote the first line of a text reply.
_FIRST_BYTES = 64
_NO_SCOPE = contextlib.nullcontext()


_RST_TO_STATUS = {
    ErrorCode.NO_ERROR: StatusCode.INTERNAL,
    ErrorCode.PROTOCOL_ERROR: StatusCode.INTERNAL,
    ErrorCode.INTERNAL_ERROR: StatusCode.INTERNAL,
    ErrorCode.FLOW_CONTROL_ERROR: StatusCode.INTERNAL,
    ErrorCode.SETTINGS_TIMEOUT: StatusCode.INTERNAL,
    ErrorCode.FRAME_SIZE_ERROR: StatusCode.INTERNAL,
    ErrorCode.REFUSED_STREAM: StatusCode.UNAVAILABLE,
    ErrorCode.CANCEL: StatusCode.CANCELLED,
    ErrorCode.COMPRESSION_ERROR: StatusCode.INTERNAL,
    ErrorCode.CONNECT_ERROR: StatusCode.INTERNAL,
    ErrorCode.ENHANCE_YOUR_CALM: StatusCode.RESOURCE_EXHAUSTED,
    ErrorCode.INADEQUATE_SECURITY: StatusCode.PERMISSION_DENIED,
    ErrorCode.HTTP_1_1_REQUIRED: StatusCode.INTERNAL,
}


def status_for_reset(code: int) -> StatusCode:
    """The gRPC status for a stream the server reset with ``code``."""
    try:
        return _RST_TO_STATUS[ErrorCode(code)]
    except ValueError:
        return StatusCode.INTERNAL


def _looks_like_tls(data: bytes) -> bool:
    """Whether ``data`` starts like a TLS record (as the channel tells it: a handshake or
    alert record of major version 3)."""
    return len(data) >= 2 and data[0] in (21, 22) and data[1] == 3


def _cannot_start_settings(data: bytes, max_frame_size: int) -> bool:
    """Whether ``data``, the first bytes a server sent (fewer than 9 are judged as far as
    they go), cannot begin a SETTINGS frame: a multiple of 6 bytes long and at most our
    ``max_frame_size``, type 0x4, no ACK flag, stream 0."""
    head = data[:9]
    # The smallest length these bytes allow (missing ones as 0).
    length = int.from_bytes(head[:3].ljust(3, b"\0"), "big")
    if length > max_frame_size or (len(head) >= 3 and length % 6):
        return True
    if len(head) > 3 and head[3] != 0x4:
        return True
    if len(head) > 4 and head[4] & 0x1:
        return True
    stream = head[5:]
    return bool(stream) and bool(stream[0] & 0x7F or any(stream[1:]))


def _excerpt(data: bytes) -> str:
    """The first line of a text reply, quoted; else the first bytes."""
    line = data.split(b"\n", 1)[0].strip()[:40]
    if line and all(32 <= byte < 127 for byte in line):
        return f'"{line.decode("ascii")}"'
    return repr(data[:9])


def deadline_exceeded() -> GrpcError:
    """The error of a call whose own timeout has passed."""
    return GrpcError(StatusCode.DEADLINE_EXCEEDED, "deadline exceeded (client-side timeout)")


def _code_name(code: int) -> str:
    try:
        return ErrorCode(code).name
    except ValueError:
        return f"{code:#x}"


class CallState:
    """What the reader has learned about one HTTP/2 stream (one RPC).

    The call's task waits on :attr:`waiter`; the reader fills in fields and
    calls :meth:`wake`. One waiter at a time: a call is driven by one task.
    """

    __slots__ = (
        "decoder",
        "ended",
        "failure",
        "finished",
        "headers",
        "reset_code",
        "stream_id",
        "trailers",
        "unprocessed",
        "until_end",
        "waiter",
        "wanted",
    )

    def __init__(
        self, stream_id: int, max_message_size: int, max_messages: int | None = None
    ) -> None:
        self.stream_id = stream_id
        self.headers: Headers | None = None
        self.trailers: Headers | None = None
        self.decoder = MessageDecoder(max_message_size, max_messages)
        self.ended = False
        # Set when the call's stream has let go of it (Connection.release_call).
        self.finished = False
        self.reset_code: int | None = None
        # A local verdict on this stream (oversized message, GOAWAY above our
        # id, connection loss); raised to the caller at its next wait.
        self.failure: GrpcError | None = None
        # True when the server provably never processed the request (it
        # refused the stream, or a GOAWAY put it above last_stream_id).
        self.unprocessed = False
        self.waiter: Waiter | None = None
        # What the waiting task waits for (set with the waiter): the reader wakes it
        # only once that holds, or the call failed or was reset. A unary response
        # usually arrives in two reads (headers and message, then trailers); waking
        # the caller after the first would cost a task switch for nothing.
        self.wanted: Callable[[CallState], bool] | None = None
        # The same for the most common wait, a unary response's end, as a flag: no
        # predicate to call on each of the response's three events.
        self.until_end = False

    def wake(self) -> None:
        waiter = self.waiter
        if waiter is None:
            return
        if self.failure is None and self.reset_code is None:
            if self.until_end:
                if not self.ended:
                    return
            else:
                wanted = self.wanted
                if wanted is not None and not wanted(self):
                    return
        self.waiter = None
        waiter.set()

    def fail(self, error: GrpcError) -> None:
        if self.failure is None:
            self.failure = error
        self.wake()

    # The channel's deadline task (_io._deadlines) keeps the call's own timeout.

    def over(self) -> bool:
        """Whether the call needs no deadline any more: its response has arrived in
        full, or its stream has let go of it."""
        return self.ended or self.finished

    def expire(self) -> None:
        """The call's own timeout has passed: fail it (waking its task)."""
        self.fail(deadline_exceeded())

    def abandon(self, deadline: float) -> None:
        """Nothing to do: the deadline task ends only as its channel closes, and closing
        fails every call still in flight."""


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
        native: Native = ANYIO,
    ) -> None:
        self._stream = stream
        #: The backend's clock and waiters (see _native).
        self.native = native
        # Our own TCP streams write without an await when the kernel takes the bytes at
        # once (see flush); anyio's (TLS) streams always await.
        self._eager = stream if isinstance(stream, EagerStream) else None
        self.label = label
        self.max_receive_message_bytes = max_receive_message_bytes
        self._keepalive_interval = keepalive_interval
        self._keepalive_timeout = keepalive_timeout
        # Queues the preface, our SETTINGS and the connection window's update.
        self.h2 = _http2.Connection(
            client_side=True,
            stream_window=STREAM_WINDOW,
            connection_window=CONNECTION_WINDOW,
            limits=_LIMITS,
        )
        self.calls: dict[int, CallState] = {}
        # Set once the connection can carry no new call; existing calls may
        # still finish (after a graceful GOAWAY) unless failure is also set.
        self.draining = False
        self.failure: GrpcError | None = None
        self.ready = anyio.Event()
        # Set when run() has finished and the socket is closed.
        self.closed = anyio.Event()
        self._flushing = False
        # Whether a coalesced write is scheduled (flush_soon).
        self._write_scheduled = False
        # Set (and replaced) each time a flush finishes: the reader waits on it while
        # the output is over its bound.
        self._flushed: anyio.Event | None = None
        # A connection error we found in the server's input: reported after the
        # GOAWAY that says so has been sent.
        self._terminated: GrpcError | None = None
        self._open_streams = 0
        # The peer's MAX_CONCURRENT_STREAMS, refreshed when its settings change.
        self._max_streams = self.h2.peer_max_concurrent_streams
        self._slot_waiters: deque[anyio.Event] = deque()
        self._window_waiters: list[anyio.Event] = []
        self._ping_ack: anyio.Event | None = None
        self._ping_payload = b""
        # The first bytes the server sent (up to 64): enough to tell a TLS record (a
        # plaintext client talking to a TLS server), and something that is not HTTP/2 at
        # all (an HTTP/1 server on the port), from HTTP/2 when the handshake fails.
        self.first_bytes = b""
        self._scope: anyio.CancelScope | None = None
        # The channel forgets a connection through this once it has closed.
        self.on_closed: Callable[[Connection], None] | None = None

    # ------------------------------------------------------------ state

    @property
    def usable(self) -> bool:
        """Whether a new call may start on this connection."""
        return self.failure is None and not self.draining

    def unavailable(self, what: str) -> GrpcError:
        return GrpcError(StatusCode.UNAVAILABLE, f"{what} ({self.label})")

    def fail(self, error: GrpcError) -> None:
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
        if self._flushed is not None:
            self._flushed.set()
        if self._scope is not None:
            self._scope.cancel()

    def close_soon(self) -> None:
        """Stop the reader; used once a draining connection has no calls."""
        if self.failure is None:
            self.fail(self.unavailable("connection closed"))

    def goodbye(self) -> None:
        """Queue a final GOAWAY (NO_ERROR) for the channel's close; flush it afterwards."""
        if self.failure is None:
            self.h2.close()

    # ------------------------------------------------------------ writing

    def flush_now(self) -> bool:
        """The part of :meth:`flush` that needs no await; True when nothing is left for
        :meth:`flush` to do.

        The usual case: one call in flight (nothing to coalesce with), the kernel takes
        the bytes at once, and nothing awaits, so nothing needs shielding either. A
        failed write fails the connection (then nothing is left to do).
        """
        h2conn = self.h2
        if self._flushing or self.failure is not None or not h2conn.pending_output_bytes:
            return True
        eager = self._eager
        if eager is None or len(self.calls) > 1:
            return False
        try:
            return eager.write_now(h2conn.data_to_send())
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError) as exc:
            self.fail(self.unavailable(f"connection lost while writing: {exc!r}"))
            return True

    def flush_soon(self) -> bool:
        """:meth:`flush_now`, or else, where the backend has a plain callback for it
        (asyncio's ``call_soon``), one write of everything queued once the tasks ready now
        have queued their frames too: True when the caller need not await :meth:`flush`.

        For a call's request, whose task waits for the reply anyway: the write needs no
        task, so no shielding (nothing can cancel it) and no yield of the caller's. False
        where the backend has no such callback, while the output waits for room in the
        kernel (the caller's :meth:`flush` waits for it: the backpressure), and without a
        stream that writes synchronously.
        """
        if self.flush_now():
            return True
        call_soon = self.native.call_soon
        eager = self._eager
        if call_soon is None or eager is None or eager.writing_paused:
            return False
        if not self._write_scheduled:
            self._write_scheduled = True
            call_soon(self._scheduled_write)
        return True

    def _scheduled_write(self) -> None:
        """flush_soon's write, from the event loop's callback."""
        self._write_scheduled = False
        # A flush in progress writes what is queued (it loops until nothing is).
        if self._flushing or self.failure is not None or not self.h2.pending_output_bytes:
            return
        eager = self._eager
        assert eager is not None
        try:
            # What the kernel does not take now stays with the stream, which writes it
            # before anything later; the next flush() waits for it.
            eager.write_now(self.h2.data_to_send())
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError) as exc:
            self.fail(self.unavailable(f"connection lost while writing: {exc!r}"))

    async def flush(self, *, shield: bool = True) -> None:
        """Send everything the HTTP/2 connection has queued.

        Runs shielded, so cancellation can't cut a frame in half. Only one task
        writes at a time; a task that finds a write in progress returns at
        once, because the writer loops until the queue is empty and so sends
        its frames too (this also coalesces concurrent calls into fewer
        writes). A dead peer can't block the writer forever: the keepalive
        task closes the stream, which aborts the pending write. Returns once
        what was queued is with the kernel, including what an earlier
        :meth:`flush_now` left with the stream for want of room there.
        """
        eager = self._eager
        if self.flush_now() and (
            self._flushing or self.failure is not None or eager is None or not eager.writing_paused
        ):
            return
        h2conn = self.h2
        lone = len(self.calls) <= 1
        self._flushing = True
        try:
            with self.native.cancel_scope(shield=True) if shield else _NO_SCOPE:
                if not lone:
                    # Other calls are in flight and often queue frames in this
                    # same loop iteration (a worker acking a burst of jobs):
                    # yield once so that one write carries them all. Each
                    # write costs a syscall plus the kernel's loopback/TCP
                    # path, which dominates the client's CPU per call. A lone
                    # call skips this and keeps its latency.
                    await self.native.checkpoint()
                while True:
                    data = h2conn.data_to_send()
                    while data:
                        await self._stream.send(data)
                        data = h2conn.data_to_send()
                    if eager is not None:
                        await eager.drained()
                    # Frames queued while the kernel's buffer was full: their callers
                    # found this flush running and left the writing to it.
                    if not h2conn.pending_output_bytes:
                        break
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError) as exc:
            self.fail(self.unavailable(f"connection lost while writing: {exc!r}"))
        finally:
            self._flushing = False
            flushed, self._flushed = self._flushed, None
            if flushed is not None:
                flushed.set()

    async def _drain_output(self) -> None:
        """Wait until the queued output is under its bound (or the link fails)."""
        while self.h2.should_pause_reading and self.failure is None:
            if not self._flushing:
                await self.flush(shield=False)
                continue
            flushed = self._flushed
            if flushed is None:
                flushed = self._flushed = anyio.Event()
            await flushed.wait()

    # ------------------------------------------------------------ stream slots

    def try_acquire_slot(self) -> bool:
        """Take a free stream slot if one is free now and nobody queues for one."""
        if (
            self.failure is None
            and not self.draining
            and not self._slot_waiters
            and self._open_streams < self._max_streams
        ):
            self._open_streams += 1
            return True
        return False

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
        if self._slot_waiters:
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

    def open_call(
        self,
        headers: Sequence[tuple[bytes, bytes]],
        extra: Sequence[tuple[bytes, bytes]],
        cache_key: Hashable,
        *,
        end_stream: bool,
        max_messages: int | None = None,
    ) -> CallState:
        """Open a stream with the request's headers and track it.

        Synchronous: the HEADERS frame is queued, :meth:`flush` sends it. The caller
        holds a slot (:meth:`acquire_slot`); on an error the slot is given back.

        Args:
            headers: the constant headers (the same for every call with
                ``cache_key``), through the HPACK table.
            extra: per-call headers, sent as literals never indexed.
            cache_key: names ``headers`` for the encoder's cache.
            end_stream: whether the request has no body.
            max_messages: 1 for a unary response.

        Raises:
            GrpcError: UNAVAILABLE when the connection takes no new stream (it is
                closing, or its stream ids are used up): nothing was sent, so the
                call may go to another connection. INTERNAL when the request's
                headers exceed the server's SETTINGS_MAX_HEADER_LIST_SIZE.
        """
        h2conn = self.h2
        try:
            stream_id = h2conn.open_stream(
                headers, end_stream=end_stream, extra=extra, cache_key=cache_key
            )
        except _http2.HeaderListTooLargeError as exc:
            self.release_slot()
            raise GrpcError(
                StatusCode.INTERNAL, f"the request's headers are too large: {exc}"
            ) from None
        except _http2.LocalProtocolError as exc:
            # Closed, GOAWAY exchanged, ids exhausted, or the server lowered its
            # stream limit meanwhile: this connection takes no new call.
            self.release_slot()
            self.draining = True
            if not self.calls:
                self.close_soon()
            raise self.unavailable(f"cannot open a stream: {exc}") from None
        if stream_id + 2 > _http2.MAX_STREAM_ID:  # (h2conn.stream_ids_left is 0)
            # That was the last stream id: the next call needs a new connection.
            self.draining = True
        call = CallState(stream_id, self.max_receive_message_bytes, max_messages)
        self.calls[stream_id] = call
        return call

    def release_call(self, call: CallState) -> None:
        """Forget a finished call and free its slot (synchronous, no I/O)."""
        call.finished = True
        if self.calls.pop(call.stream_id, None) is not None:
            self._open_streams -= 1  # (release_slot)
            if self._slot_waiters:
                self._grant_slots()
        if self.draining and not self.calls:
            self.close_soon()

    def reset_call(self, call: CallState, code: int = ErrorCode.CANCEL) -> bool:
        """Queue RST_STREAM for a call still open on the wire; True if queued."""
        if self.failure is not None:
            return False
        return self.h2.reset_stream(call.stream_id, code)

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
        h2conn = self.h2
        receive = self._stream.receive
        pump = self._stream.pump if isinstance(self._stream, PumpStream) else None
        consume = self._consume
        try:
            while True:
                if pump is not None:
                    # Input is parsed in the transport's callback (see _consume), and
                    # this task is woken only for what needs it: a flush that waits,
                    # the output over its bound, a protocol error.
                    await pump(consume)
                else:
                    consume(await receive(_READ_SIZE))
                # WINDOW_UPDATEs and PING/SETTINGS ACKs the events produced.
                # Unshielded: the reader is only cancelled when the whole
                # connection is being torn down, and then a cut write is moot.
                await self.flush(shield=False)
                if self._terminated is not None:
                    # The GOAWAY telling the server why has gone out (or could not).
                    self.fail(self._terminated)
                    return
                if h2conn.should_pause_reading:
                    await self._drain_output()
        except anyio.EndOfStream:
            self.fail(self._not_http2() or self.unavailable("connection closed by the server"))
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError) as exc:
            self.fail(self._not_http2() or self.unavailable(f"connection lost: {exc!r}"))

    def _consume(self, data: bytes) -> bool:
        """Feed what was read to the HTTP/2 connection and dispatch its events; False when
        the reader's task must take over (see :meth:`_read_loop`).

        The pump's handler (on asyncio it runs in the transport's read callback), and the
        reader's own step on a stream without a pump, which ignores what it returns.
        """
        if len(self.first_bytes) < _FIRST_BYTES:
            self.first_bytes += data[: _FIRST_BYTES - len(self.first_bytes)]
        h2conn = self.h2
        calls = self.calls
        for event in h2conn.receive_data(data, self.native.now()):
            # A unary response's three events inline (see _dispatch for all of them).
            kind = type(event)
            if kind is _http2.ResponseReceived:
                assert isinstance(event, _http2.ResponseReceived)
                call = calls.get(event.stream_id)
                if call is not None:
                    call.headers = event.headers
                    if event.end_stream:
                        self._ended(call)
                    # (A call waiting for its response's end has nothing to see yet.)
                    if call.waiter is not None and (call.ended or not call.until_end):
                        call.wake()
            elif kind is _http2.DataReceived:
                assert isinstance(event, _http2.DataReceived)
                self._on_data(event)
            elif kind is _http2.TrailersReceived:
                assert isinstance(event, _http2.TrailersReceived)
                call = calls.get(event.stream_id)
                if call is not None:
                    call.trailers = event.headers
                    call.ended = True
                    if self._window_waiters:  # (as _ended does)
                        self._wake_window_waiters()
                    if call.waiter is not None:
                        call.wake()
            else:
                self._dispatch(event)
        if self._terminated is not None:
            return False
        pending = h2conn.pending_output_bytes
        if not pending:
            return True  # (the usual read: nothing to answer)
        if pending >= h2conn.limits.max_pending_output_bytes:
            return False  # (should_pause_reading)
        # What flush_now leaves (flush() coalesces) is for the task. (A failed write has
        # failed the connection, which cancels the task.)
        return self.flush_now()

    def _not_http2(self) -> GrpcError | None:
        """The error to report if the server's first bytes were not HTTP/2 at all (an
        HTTP/1 server, or another protocol, on the port), else None.

        An HTTP/2 server's first frame is a SETTINGS frame (RFC 9113 section 3.4); text
        read as a frame header is a frame of millions of bytes of some other type, and
        the protocol error that makes ("frame of 3940676 bytes exceeds ...") would not
        tell the user what is wrong. A TLS record is left to the channel, which says to
        use TLS.
        """
        first = self.first_bytes
        if self.h2.handshake_complete or not first or _looks_like_tls(first):
            return None
        if not _cannot_start_settings(first, self.h2.limits.max_frame_size):
            return None
        return self.unavailable(
            f"not an HTTP/2 (gRPC) server (it answered {_excerpt(first)}); is this the right port?"
        )

    async def _keepalive(self) -> None:
        """PING every interval, also while idle; a missing ACK kills the link.

        A long-poll reserve can sit silent for minutes; without this, a peer
        that vanished (or a NAT that dropped the mapping) would only be noticed
        at the TCP retransmission timeout, many minutes later.
        """
        assert self._keepalive_interval is not None
        while True:
            await anyio.sleep(self._keepalive_interval)
            if self.h2.closed:
                return
            ack = self._ping_ack = anyio.Event()
            self._ping_payload = os.urandom(8)
            self.h2.send_ping(self._ping_payload)
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

    def _dispatch(self, event: _http2.Event) -> None:
        """What an event other than a response's headers, DATA or trailers does
        (:meth:`_consume` handles those three)."""
        kind = type(event)
        if kind is _http2.StreamReset:
            assert isinstance(event, _http2.StreamReset)
            self._on_reset(event)
        elif kind is _http2.WindowUpdated:
            self._wake_window_waiters()
        elif kind is _http2.RemoteSettingsChanged:
            # The limit may have grown, and a new initial window changes every
            # stream's send window.
            self._max_streams = self.h2.peer_max_concurrent_streams
            self.ready.set()
            self._grant_slots()
            self._wake_window_waiters()
        elif kind is _http2.PingAcknowledged:
            assert isinstance(event, _http2.PingAcknowledged)
            if self._ping_ack is not None and event.data == self._ping_payload:
                self._ping_ack.set()
        elif kind is _http2.GoAwayReceived:
            assert isinstance(event, _http2.GoAwayReceived)
            self._on_goaway(event)
        elif kind is _http2.ConnectionTerminated:
            assert isinstance(event, _http2.ConnectionTerminated)
            self._terminated = self._not_http2() or self.unavailable(
                f"HTTP/2 protocol error from the server: {event.reason}"
            )

    def _ended(self, call: CallState) -> None:
        call.ended = True
        # A sender waiting for window on this stream must stop (see Stream._send_body).
        if self._window_waiters:
            self._wake_window_waiters()

    def _on_reset(self, event: _http2.StreamReset) -> None:
        call = self.calls.get(event.stream_id)
        if call is None:
            return
        if event.remote:
            call.reset_code = event.error_code
            if event.error_code == ErrorCode.REFUSED_STREAM and call.headers is None:
                call.unprocessed = True
            call.wake()
        else:
            # The server broke HTTP/2 on this stream (a malformed response, say); the
            # HTTP/2 connection reset the stream and goes on.
            if event.error_code == ErrorCode.CANCEL:
                # Over our header list limit (the reason names it).
                call.fail(GrpcError(StatusCode.RESOURCE_EXHAUSTED, event.reason))
            else:
                call.fail(
                    MalformedReplyError(
                        f"the server broke HTTP/2 on the call's stream"
                        f" ({_code_name(event.error_code)}): {event.reason}"
                    )
                )
        # No window will ever come for a reset stream: a sender waiting for it must
        # see the reset now, not at the next update of another stream.
        self._wake_window_waiters()

    def _on_data(self, event: _http2.DataReceived) -> None:
        stream_id = event.stream_id
        size = event.flow_controlled_length
        if size:
            self.h2.acknowledge_received_data(size, stream_id)
        call = self.calls.get(stream_id)
        if call is None:
            return
        if call.failure is None and event.data:
            try:
                call.decoder.feed(event.data)
            except MessageTooLargeError as exc:
                call.fail(
                    GrpcError(
                        StatusCode.RESOURCE_EXHAUSTED,
                        f"received message of {exc.length} bytes exceeds "
                        f"max_receive_message_bytes={exc.limit}",
                    )
                )
                self.reset_call(call)
                return
            except CompressedMessageError as exc:
                call.fail(GrpcError(StatusCode.INTERNAL, str(exc)))
                self.reset_call(call)
                return
            except ExtraMessageError as exc:
                call.fail(MalformedReplyError(f"the server sent {exc}"))
                self.reset_call(call)
                return
        if event.end_stream:
            self._ended(call)
        # (A call waiting for its response's end has nothing to see yet: a waiter woken
        # by a failure or a reset is gone already.)
        if call.waiter is not None and (call.ended or not call.until_end):
            call.wake()

    def _on_goaway(self, event: _http2.GoAwayReceived) -> None:
        code = event.error_code
        reason = f"server sent GOAWAY ({_code_name(code)})"
        self.draining = True
        # Streams above last_stream_id were never processed: safe to retry.
        for stream_id in event.unprocessed:
            call = self.calls.get(stream_id)
            if call is not None:
                call.unprocessed = True
                call.fail(self.unavailable(f"{reason}; the call was not processed"))
        if code != ErrorCode.NO_ERROR:
            self.fail(self.unavailable(reason))
            return
        # A graceful GOAWAY: the calls the server is still finishing go on;
        # `draining` stops new ones.
        self._wake_slot_waiters_all()
        if not self.calls:
            self.close_soon()
