"""One served HTTP/2 connection: the I/O loop around the sans-IO core, on anyio.

:class:`ServedConnection` owns a connected byte stream (TCP, or TLS with ALPN ``h2``) and an
:class:`sepp_anyio._http2.Connection` in the server role.  :meth:`ServedConnection.run` runs
one task group per connection:

* the **reader** (the ``run`` task itself) feeds what it reads to the core and dispatches
  the events: a request starts a call task, DATA goes to its call, a reset cancels it.  It
  stops reading while the queued output is over its bound
  (``Connection.should_pause_reading``), so a client that sends and never reads cannot make
  replies pile up; and one busy connection cannot starve the others: the server's own
  streams (:mod:`sepp_anyio._io`) yield after a run of receives that found input waiting,
  and on any other stream the reader takes a checkpoint after each chunk;
* the **writer** writes whatever the core has queued, in pieces of 64 KiB, and closes
  the connection when a piece could not be written within ``write_timeout``;
* the **watchdog** keeps every timer of the connection, in one task (a task per timer
  would cost each idle connection kilobytes more, and a server holds thousands): the
  handshake timeout (preface and first SETTINGS, then our SETTINGS acknowledged), the idle
  timeout (no call for ``idle_timeout``: GOAWAY), dead-peer detection (a PING after
  ``ping_after`` of silence, closed without its ACK), and the connection's age: past its
  :attr:`ServedConnection.max_age` it gets the graceful shutdown sequence below, and is
  closed (cancelling its calls) ``max_connection_age_grace`` later if calls still run;
* the **call runners** (:mod:`._runners`: tasks reused from call to call, as many as run
  at once): each call has its own cancel scope, which its deadline (``grpc-timeout``, at
  most ``max_call_seconds``), a reset from the client, or the connection's end cancel.
  The stream is released to the core when the call's handler has returned, once
  cancellation has unwound, so MAX_CONCURRENT_STREAMS counts running handlers.

Request bytes being assembled count against this connection's and the server's budgets
(:mod:`._reqbytes`): over either, the calls hold back the flow-control credit of what they
buffer; over the server's, new requests are refused with RST_STREAM REFUSED_STREAM.

The core decides every protocol matter (limits, budgets, errors and their GOAWAYs); this
module only moves bytes, runs handlers and keeps time.  All core calls happen between
awaits, on the connection's own event loop, so no locking is needed.

When a connection cap is full, the server's admission (:mod:`._admission`) reads
:attr:`~ServedConnection.handshaken`, :attr:`~ServedConnection.idle_since` and
``calls_started`` to pick the connection that has done least, and is told through
``on_idle`` when the last call of one ends; an idle victim gets
:meth:`~ServedConnection.evict` (GOAWAY ``evicted``, then the usual close).

Graceful shutdown (:meth:`ServedConnection.begin_shutdown`): GOAWAY(2^31-1) and a PING;
on the PING's ACK (or after ``goaway_ping_timeout``) a second GOAWAY with the last request
handed over.  Requests that arrive in between are served; once no call is left the
connection flushes its output and gives the client ``close_linger`` to hang up.
"""

from __future__ import annotations

import contextlib
import logging
import math
import random
import ssl
from collections.abc import Callable, Mapping, Sequence
from typing import Final

import anyio
import anyio.abc
import anyio.lowlevel

from sepp_anyio._grpc import (
    OK_TRAILERS,
    RESPONSE_HEADERS,
    decode_timeout,
    metadata_problem,
    trailers,
    trailers_only,
)
from sepp_anyio._http2 import (
    MAX_STREAM_ID,
    Connection,
    ConnectionClosedError,
    ConnectionTerminated,
    DataReceived,
    ErrorCode,
    Limits,
    PingAcknowledged,
    RemoteSettingsChanged,
    RequestHeadersTooLarge,
    RequestReceived,
    SettingsAcknowledged,
    StreamClosedError,
    StreamReset,
    TrailersReceived,
    WindowUpdated,
)
from sepp_anyio._io import EagerStream
from sepp_anyio._io._deadlines import Deadlines
from sepp_anyio._io._native import ANYIO, Native, native
from sepp_anyio._model._error_root import StatusCode

from ._call import CallGone, ServerCall
from ._netlimits import NetworkLimits
from ._reqbytes import ConnectionRequestBytes, RequestBytes
from ._runners import Runners
from ._service import MessageCodec, Route

__all__ = ["ServedConnection"]

logger = logging.getLogger("sepp_anyio.server")

#: A call whose ``grpc-timeout`` is shorter than this is not run: it is answered
#: DEADLINE_EXCEEDED once its deadline has passed (running it would race the deadline).
_MIN_CALL_TIMEOUT: Final = 0.001
_READ_SIZE: Final = 65536
#: Output is written in pieces of at most this size; ``write_timeout`` bounds each, so a
#: client must take this much every ``write_timeout`` (64 KiB per 30 s: about 2 KiB/s).
_WRITE_PIECE: Final = 65536
_SHUTDOWN_PING: Final = b"shutdown"
#: Seconds without a call after which the call runners beyond a few end (:mod:`._runners`).
_TRIM_RUNNERS_AFTER: Final = 1.0
_KEEPALIVE_PING: Final = b"keepaliv"
_STREAM_GONE: Final = (StreamClosedError, ConnectionClosedError)
_IO_ERRORS: Final = (
    anyio.EndOfStream,
    anyio.BrokenResourceError,
    anyio.ClosedResourceError,
    ssl.SSLError,
    OSError,
)


class ServedConnection:
    """An HTTP/2 connection served to one client.

    Args:
        stream: the connected stream (TLS already negotiated, if any).
        routes: ``:path`` -> handler (``QueueService`` and ``HealthService`` mappings).
        codec: the message codec with the request-size limit.
        limits: the HTTP/2 core's defences.
        net: timeouts of the I/O layer.
        peer: the client's address, for logs.
        clock: the monotonic clock (default: the running backend's own, read once the
            connection runs, the same as ``anyio.current_time``: virtual under trio's
            MockClock).
        request_bytes: the server's count of request bytes being assembled (default: one of
            this connection's own, capped at ``net.max_buffered_request_bytes``).
        on_idle: called (synchronously) each time the last call in progress ends, so that
            the server's admission can see that this connection may be evicted now.
        fair_reads: the stream yields to the other tasks by itself after a run of receives
            that found input waiting (ours do, see :mod:`sepp_anyio._io`), so the reader
            need not yield after every chunk.
    """

    def __init__(
        self,
        stream: anyio.abc.ByteStream,
        *,
        routes: Mapping[str, Route],
        codec: MessageCodec,
        limits: Limits,
        net: NetworkLimits,
        peer: str = "?",
        clock: Callable[[], float] | None = None,
        request_bytes: RequestBytes | None = None,
        on_idle: Callable[[], None] | None = None,
        fair_reads: bool = False,
        deadlines: Deadlines | None = None,
    ) -> None:
        self.h2 = Connection(client_side=False, limits=limits)
        # The server's deadline task, which keeps the calls' grpc-timeouts (see _run_call);
        # without one (or on a clock of the caller's) each call's scope keeps its own.
        self._deadlines = deadlines if clock is None else None
        # Our own streams write without an await when the kernel takes the bytes at once.
        self._eager = stream if isinstance(stream, EagerStream) else None
        self._fair_reads = fair_reads
        self._on_idle = on_idle
        self._stream = stream
        self._routes = routes
        self._codec = codec
        self._net = net
        self.peer = peer
        self._clock_given = clock
        self._clock = clock if clock is not None else anyio.current_time
        #: The backend's clock, waiters and cancel scopes (see _io._native), from run().
        self._native: Native = ANYIO
        self._calls: dict[int, ServerCall] = {}
        if request_bytes is None:
            request_bytes = RequestBytes(net.max_buffered_request_bytes)
        #: Request bytes being assembled here (and, as ``.server``, across the server).
        self.request_bytes = ConnectionRequestBytes(
            request_bytes, net.max_buffered_request_bytes_per_connection
        )
        # The events are made by whoever waits and dropped by whoever sets them: most
        # connections never wait for most of them, and an event costs about half a KiB.
        #: Set when output is queued, while the writer waits for some.
        self._wake_writer: anyio.Event | None = None
        #: Set (and dropped) each time the writer takes the queued output.
        self._taken: anyio.Event | None = None
        self._windows: dict[int, anyio.Event] = {}
        #: Set (and dropped) when something a timer or the shutdown sequence waits for
        #: happens: the handshake, our SETTINGS acknowledged, a PING ACK, a call's start
        #: or end.
        self._wake: anyio.Event | None = None
        self._handshaken = False
        self._keepalive_outstanding = False
        self._shutdown_acked = False
        self._idle_since: float | None = None
        self._last_read = 0.0
        self._tg: anyio.abc.TaskGroup | None = None
        self._runners: Runners[tuple[ServerCall, Route, float]] | None = None
        self._shutting_down = False
        self._shutdown_pending = False
        self._reading_done = False
        self._reader_scope = anyio.CancelScope()
        #: Seconds after which this connection gets its age GOAWAY (``max_connection_age``
        #: with this connection's jitter), or None if ages are not enforced.
        self.max_age = _draw_age(net)
        #: The reason the connection ended early (logged at debug), if it did.
        self.ended_by: str | None = None
        #: Set once :meth:`run` has returned.
        self.done = anyio.Event()
        #: Calls started (for tests and diagnostics).
        self.calls_started = 0
        #: Highest number of calls running at once.
        self.peak_calls = 0

    @property
    def active_calls(self) -> int:
        """Calls whose handler is running (until cancellation has unwound)."""
        return len(self._calls)

    @property
    def handshaken(self) -> bool:
        """The client's preface and first SETTINGS have arrived."""
        return self._handshaken

    @property
    def idle_since(self) -> float | None:
        """When (on the connection's clock) the last call ended, or :meth:`run` began if
        none has run yet; None while calls are in progress."""
        return self._idle_since

    @property
    def native(self) -> Native:
        """The running backend's clock, waiters, cancel scopes and checkpoint (anyio's
        portable ones until :meth:`run` starts)."""
        return self._native

    @property
    def waiting_runners(self) -> int:
        """Call runners waiting for the next call (:mod:`._runners`); 0 when not running."""
        runners = self._runners
        return 0 if runners is None else runners.waiting

    # ------------------------------------------------------------ lifecycle

    async def run(self) -> None:
        """Serve until the client hangs up, the connection fails or is closed.

        Never raises for connection trouble (it is logged at debug level).  Cancellation:
        every call is cancelled and the stream closed (shielded, bounded).
        """
        self._native = backend = native()
        if self._clock_given is None:
            self._clock = backend.now
        now = self._clock()
        self._last_read = now
        self._idle_since = now
        try:
            async with anyio.create_task_group() as tg:
                self._tg = tg
                self._runners = Runners(tg, self._run_call, waiter=backend.waiter)
                tg.start_soon(self._write_loop)
                tg.start_soon(self._watchdog, now)
                if self._shutdown_pending:
                    self.begin_shutdown()
                await self._read_loop()
                await self._linger()
                tg.cancel_scope.cancel()
        finally:
            self._tg = None
            self._runners = None
            self._shutting_down = True
            for call in list(self._calls.values()):
                call.on_gone()
            self.request_bytes.close()
            with (
                anyio.CancelScope(shield=True),
                anyio.move_on_after(self._net.close_linger),
                contextlib.suppress(*_IO_ERRORS),
            ):
                await self._stream.aclose()
            logger.debug("connection from %s closed (%s)", self.peer, self.ended_by or "done")
            self.done.set()

    def close(self, reason: str) -> None:
        """Close at once (calls are cancelled; queued output is flushed if it can be)."""
        if self.ended_by is None:
            self.ended_by = reason
        if not self.h2.closed:
            self.h2.close(ErrorCode.NO_ERROR, reason.encode("ascii", "replace"))
        self._flush()
        self._stop_reading()

    def evict(self) -> None:
        """Make room for a newer connection: GOAWAY(NO_ERROR, ``evicted``), then the close
        that follows any GOAWAY of ours (output flushed, ``close_linger`` for the client to
        hang up).  Calls in progress, if any, are cancelled: the server evicts only idle
        connections.  A no-op once the connection is closing."""
        if self.ended_by is None:
            self.ended_by = "evicted"
        if not self.h2.closed:
            self.h2.send_goaway(ErrorCode.NO_ERROR, debug_data=b"evicted")
        self._flush()
        self._stop_reading()

    def goaway(self) -> None:
        """A graceful GOAWAY(2^31-1): the client should move to a new connection; this one
        keeps serving (calls already sent, and any sent before the client notices)."""
        if not self.h2.closed:
            self.h2.send_goaway(ErrorCode.NO_ERROR, last_stream_id=MAX_STREAM_ID)
            self._flush()

    def begin_shutdown(self) -> None:
        """Start the graceful two-GOAWAY sequence (see the module docstring)."""
        if self._tg is None:
            if not self.done.is_set():
                self._shutdown_pending = True
            return
        if self._shutting_down or self.h2.closed or self._reading_done:
            return
        if self._tg.cancel_scope.cancel_called:
            return
        self._shutting_down = True
        self.h2.send_goaway(ErrorCode.NO_ERROR, last_stream_id=MAX_STREAM_ID)
        self.h2.send_ping(_SHUTDOWN_PING)
        self._flush()
        self._tg.start_soon(self._shutdown_sequence)

    async def _shutdown_sequence(self) -> None:
        with anyio.move_on_after(self._net.goaway_ping_timeout):
            while not self._shutdown_acked:
                await self._next_wake()
        if not self.h2.closed:
            self.h2.send_goaway(ErrorCode.NO_ERROR)
            self._flush()
        while self._calls:
            await self._next_wake()
        self._flush()
        self._stop_reading()

    def _stop_reading(self) -> None:
        """End the read loop (wherever it waits); the connection then lingers and closes."""
        self._reading_done = True
        self._reader_scope.cancel()

    # ------------------------------------------------------------ reading

    async def _read_loop(self) -> None:
        h2 = self.h2
        stream = self._stream
        self._flush()
        with self._reader_scope:
            while not self._reading_done and not h2.closed:
                if h2.should_pause_reading:
                    await self._wait_taken()
                    continue
                try:
                    data = await stream.receive(_READ_SIZE)
                except _IO_ERRORS:
                    self.ended_by = self.ended_by or "the client hung up"
                    break
                now = self._clock()
                self._last_read = now
                self._dispatch(h2.receive_data(data, now))
                self._flush()
                if not self._fair_reads:
                    # One busy connection must not starve the others.
                    await anyio.lowlevel.checkpoint()
        for call in list(self._calls.values()):
            if h2.closed:
                call.on_gone()
            else:
                call.on_end()

    async def _linger(self) -> None:
        """Flush what is queued, then give the client ``close_linger`` to hang up (reading
        and dropping what it sends, so that unread input does not turn the close into a
        TCP reset that would lose our last frames)."""
        self._flush()
        with anyio.move_on_after(self._net.close_linger):
            while self.h2.pending_output_bytes:
                await self._wait_taken()
            while True:
                try:
                    await self._stream.receive(_READ_SIZE)
                except _IO_ERRORS:
                    return

    def _dispatch(self, events: Sequence[object]) -> None:
        for event in events:
            kind = type(event)
            if kind is DataReceived:
                assert isinstance(event, DataReceived)
                call = self._calls.get(event.stream_id)
                if call is not None:
                    call.on_data(event.data, event.flow_controlled_length, event.end_stream)
                else:
                    self.h2.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
            elif kind is RequestReceived:
                assert isinstance(event, RequestReceived)
                self._on_request(event)
            elif kind is WindowUpdated:
                assert isinstance(event, WindowUpdated)
                self._wake_windows(None if event.stream_id == 0 else event.stream_id)
            elif kind is StreamReset:
                assert isinstance(event, StreamReset)
                call = self._calls.get(event.stream_id)
                if call is not None:
                    if event.remote and call.started:
                        # An ordinary cancellation: the handler ran (and counted against
                        # MAX_CONCURRENT_STREAMS).  Rapid reset resets requests before
                        # any handler starts; only those stay charged to the budget.
                        self.h2.credit_reset_budget()
                    call.on_gone()
                self._wake_windows(event.stream_id)
            elif kind is TrailersReceived:
                assert isinstance(event, TrailersReceived)
                call = self._calls.get(event.stream_id)
                if call is not None:
                    call.on_end()
            elif kind is RequestHeadersTooLarge:
                assert isinstance(event, RequestHeadersTooLarge)
                self._answer_now(
                    event.stream_id,
                    event.end_stream,
                    StatusCode.RESOURCE_EXHAUSTED,
                    f"header list size {event.size} exceeds the limit of {event.limit} bytes",
                )
            elif kind is PingAcknowledged:
                assert isinstance(event, PingAcknowledged)
                if event.data == _SHUTDOWN_PING:
                    self._shutdown_acked = True
                else:
                    self._keepalive_outstanding = False
                self._notify()
            elif kind is RemoteSettingsChanged:
                self._handshake_done()
                self._wake_windows(None)
            elif kind is SettingsAcknowledged:
                self._notify()
            elif kind is ConnectionTerminated:
                assert isinstance(event, ConnectionTerminated)
                self.ended_by = f"{ErrorCode(event.error_code).name}: {event.reason}"
                logger.debug("connection from %s ended: %s", self.peer, self.ended_by)
                for call in list(self._calls.values()):
                    call.on_gone()
        if self.h2.handshake_complete:
            self._handshake_done()

    def _handshake_done(self) -> None:
        if not self._handshaken:
            self._handshaken = True
            self._notify()

    # ------------------------------------------------------------ calls

    def _on_request(self, event: RequestReceived) -> None:
        stream_id = event.stream_id
        if self.request_bytes.server.over:
            # Not processed: the client may retry it (elsewhere, or once we have room).
            h2 = self.h2
            h2.reset_stream(stream_id, ErrorCode.REFUSED_STREAM)
            h2.release_stream(stream_id)
            return
        path = b""
        timeout: bytes | None = None
        metadata: dict[str, str] = {}
        for name, value in event.headers:
            if name[:1] == b":":
                if name == b":path":
                    path = value
                continue
            if name == b"grpc-timeout":
                timeout = value
        problem = metadata_problem(event.headers)
        if problem is not None:
            self._answer_now(stream_id, event.end_stream, StatusCode.INTERNAL, problem)
            return
        for name, value in event.headers:
            if name[:1] != b":" and not name.endswith(b"-bin"):
                metadata[name.decode("ascii")] = value.decode("ascii")
        route = self._routes.get(path.decode("ascii", "replace"))
        if route is None:
            self._answer_now(
                stream_id, event.end_stream, StatusCode.UNIMPLEMENTED, "Method not found"
            )
            return
        seconds = self._net.max_call_seconds
        if timeout is not None:
            try:
                seconds = decode_timeout(timeout, seconds)
            except ValueError as exc:
                self._answer_now(stream_id, event.end_stream, StatusCode.INTERNAL, str(exc))
                return
        call = ServerCall(
            self, stream_id, metadata, self._codec, route.reply_type, ended=event.end_stream
        )
        self._calls[stream_id] = call
        self.calls_started += 1
        if len(self._calls) > self.peak_calls:
            self.peak_calls = len(self._calls)
        # Nobody is woken: the watchdog sees that the connection is busy when its idle
        # deadline comes; only the last call's end matters (below).
        self._idle_since = None
        assert self._runners is not None
        self._runners.submit((call, route, seconds))

    def _answer_now(
        self, stream_id: int, end_stream: bool, status: StatusCode, message: str
    ) -> None:
        """Answer a request handed over by the core without running a handler."""
        h2 = self.h2
        try:
            h2.send_headers(stream_id, trailers_only(status.value, message), end_stream=True)
            if not end_stream:
                # Tell the client to stop sending its body; what arrives is refunded.
                h2.reset_stream(stream_id, ErrorCode.NO_ERROR)
        except _STREAM_GONE:
            pass
        finally:
            h2.release_stream(stream_id)

    async def _run_call(self, work: tuple[ServerCall, Route, float]) -> None:
        call, route, seconds = work
        call.started = True
        try:
            if seconds < _MIN_CALL_TIMEOUT:
                with anyio.CancelScope() as scope:
                    call.scope = scope
                    if call.gone:
                        scope.cancel()
                    # Never before the deadline: the client must see its own deadline pass.
                    await anyio.sleep(seconds)
                    self._end_call(call, StatusCode.DEADLINE_EXCEEDED, "Deadline exceeded")
                return
            deadline = self._clock() + seconds
            deadlines = self._deadlines
            if deadlines is None or deadline == math.inf:
                scope, timer = self._native.cancel_scope(deadline), None
            else:
                # The server's deadline task cancels the scope if the deadline comes: on
                # asyncio a scope's own deadline is a timer handle made and cancelled per
                # call, a twentieth of a durable job's CPU (see _io._deadlines).
                scope = self._native.cancel_scope()
                timer = deadlines.cancel_at(scope, deadline)
            try:
                with scope:
                    call.scope = scope
                    if call.gone:
                        # Reset before its task ran (on_gone had no scope to cancel): a
                        # long poll must not park, and lease jobs, for a reply nobody reads.
                        scope.cancel()
                    await route.handler(call)
            finally:
                if timer is not None:
                    timer.ended = True
            if scope.cancelled_caught and not call.gone and not call.finished:
                self._end_call(call, StatusCode.DEADLINE_EXCEEDED, "Deadline exceeded")
        except CallGone:
            pass
        except Exception:
            logger.exception("a call on %s failed unexpectedly", self.peer)
            self._end_call(call, StatusCode.INTERNAL, "internal error")
        finally:
            self._finish_call(call)

    def _end_call(self, call: ServerCall, status: StatusCode, message: str) -> None:
        if call.finished or call.gone:
            return
        with contextlib.suppress(CallGone):
            self.send_trailers(call, status.value, message)

    def _finish_call(self, call: ServerCall) -> None:
        stream_id = call.stream_id
        h2 = self.h2
        del self._calls[stream_id]
        unacked = call.release()
        self.request_bytes.forget(call)
        if not h2.closed:
            if unacked:
                h2.acknowledge_received_data(unacked, stream_id)
            if not call.gone and not (call.finished and call.ended):
                # Our reply is complete but the client is still sending (or the handler
                # ended without a reply): stop the stream.
                h2.reset_stream(
                    stream_id, ErrorCode.NO_ERROR if call.finished else ErrorCode.CANCEL
                )
        h2.release_stream(stream_id)
        self._wake_windows(stream_id)
        self._flush()
        if not self._calls:
            self._idle_since = self._clock()
            self._notify()
            if self._on_idle is not None:
                self._on_idle()

    def _notify(self) -> None:
        wake = self._wake
        if wake is not None:
            self._wake = None
            wake.set()

    async def _next_wake(self) -> None:
        """Wait for the next :meth:`_notify` (any number of tasks may wait at once)."""
        if self._wake is None:
            self._wake = anyio.Event()
        await self._wake.wait()

    # The CallLink interface ----------------------------------------------------

    async def send_message(self, call: ServerCall, payload: bytes) -> None:
        h2 = self.h2
        stream_id = call.stream_id
        view = memoryview(payload)
        offset = 0
        try:
            if not call.headers_sent:
                h2.send_headers(stream_id, RESPONSE_HEADERS, cache_key=RESPONSE_HEADERS)
                call.headers_sent = True
            while True:
                while h2.should_pause_reading:
                    self._flush()
                    await self._wait_taken()
                if call.gone:
                    raise CallGone
                sent = h2.send_data(stream_id, view[offset:] if offset else view)
                offset += sent
                self._flush()
                if offset >= len(view):
                    return
                await self._wait_window(stream_id)
                if call.gone:
                    raise CallGone
        except _STREAM_GONE:
            raise CallGone from None

    def send_trailers(self, call: ServerCall, status: int, message: str | None) -> None:
        if call.gone:
            raise CallGone
        h2 = self.h2
        try:
            if call.headers_sent:
                if status == 0 and not message:
                    # The usual ending: constant, so its encoding is kept (one byte on the
                    # wire once the table has it, and no HPACK work per call).
                    h2.send_headers(
                        call.stream_id, OK_TRAILERS, end_stream=True, cache_key=OK_TRAILERS
                    )
                else:
                    h2.send_headers(call.stream_id, trailers(status, message), end_stream=True)
            else:
                h2.send_headers(call.stream_id, trailers_only(status, message), end_stream=True)
                call.headers_sent = True
        except _STREAM_GONE:
            raise CallGone from None
        call.finished = True
        self._flush()

    def acknowledge(self, call: ServerCall, length: int) -> None:
        if not self.h2.closed:
            self.h2.acknowledge_received_data(length, call.stream_id)
            self._flush()

    def buffered(self, call: ServerCall, delta: int) -> None:
        if delta > 0:
            self.request_bytes.add(delta)
        else:
            self.request_bytes.remove(-delta)

    def may_refund(self, call: ServerCall) -> bool:
        return self.request_bytes.may_refund(call)

    async def _wait_window(self, stream_id: int) -> None:
        event = self._windows.get(stream_id)
        if event is None:
            event = self._windows[stream_id] = anyio.Event()
        await event.wait()

    def _wake_windows(self, stream_id: int | None) -> None:
        if stream_id is None:
            windows = list(self._windows.values())
            self._windows.clear()
            for event in windows:
                event.set()
        else:
            waiting = self._windows.pop(stream_id, None)
            if waiting is not None:
                waiting.set()

    # ------------------------------------------------------------ writing

    def _flush(self) -> None:
        if self._wake_writer is not None and self.h2.pending_output_bytes:
            self._wake_writer.set()

    async def _wait_taken(self) -> None:
        if self._taken is None:
            self._taken = anyio.Event()
        await self._taken.wait()

    async def _write_loop(self) -> None:
        h2 = self.h2
        stream = self._stream
        eager = self._eager
        timeout = self._net.write_timeout or math.inf
        while True:
            data = h2.data_to_send()
            taken = self._taken
            if taken is not None:
                self._taken = None
                taken.set()
            if not data:
                wake = self._wake_writer = anyio.Event()
                if h2.pending_output_bytes:
                    continue
                await wake.wait()
                continue
            # Written in pieces, each with its own timeout: the timeout is about progress
            # (a slow reader keeps its connection), not about how long all of the queued
            # output (up to the pause bound, 1 MiB, and a reply) takes to go out.
            size = len(data)
            for start in range(0, size, _WRITE_PIECE):
                piece = data if size <= _WRITE_PIECE else data[start : start + _WRITE_PIECE]
                if eager is not None:
                    # The usual case: the kernel takes the piece at once, with no await
                    # and so no timeout scope to set up.
                    try:
                        if eager.write_now(piece):
                            continue
                    except _IO_ERRORS:
                        self.ended_by = self.ended_by or "the client is gone"
                        self._abandon()
                        return
                with anyio.move_on_after(timeout) as scope:
                    try:
                        if eager is not None:
                            await eager.drained()
                        else:
                            await stream.send(piece)
                    except _IO_ERRORS:
                        self.ended_by = self.ended_by or "the client is gone"
                        self._abandon()
                        return
                if scope.cancelled_caught:
                    self.ended_by = f"no write progress for {timeout:g} s"
                    logger.debug("connection from %s: %s", self.peer, self.ended_by)
                    self._abandon()
                    return

    def _abandon(self) -> None:
        """The transport is unusable: stop everything now."""
        for call in list(self._calls.values()):
            call.on_gone()
        if not self.h2.closed:
            self.h2.close()
        if self._tg is not None:
            self._tg.cancel_scope.cancel()

    # ------------------------------------------------------------ timers

    async def _watchdog(self, start: float) -> None:
        """Every timer of the connection (see the module docstring), as one loop that
        sleeps until the nearest deadline or the next :meth:`_notify`, then looks at what
        is due.  Returns once one of them has ended the connection (or cancelled)."""
        net = self._net
        handshake_by = start + net.handshake_timeout
        settings_by = start + net.settings_ack_timeout
        age_at = math.inf if self.max_age is None else start + self.max_age
        grace_at = math.inf  # when calls still running after the age GOAWAY are cancelled
        ping_due = math.inf  # when the keepalive PING in flight must have been answered
        while True:
            now = self._clock()
            if now >= age_at:
                age_at = math.inf
                if not (self._shutting_down or self.h2.closed or self._reading_done):
                    self._age_reached()
                    if net.max_connection_age_grace:
                        grace_at = now + net.max_connection_age_grace
            if now >= grace_at:
                grace_at = math.inf
                if self._calls:
                    logger.debug(
                        "connection from %s: %d call(s) still running %g s after its age "
                        "GOAWAY; cancelling them",
                        self.peer,
                        len(self._calls),
                        net.max_connection_age_grace,
                    )
                    self.ended_by = "max connection age grace over"
                    self.close(self.ended_by)
                    return
            deadlines = [age_at, grace_at]
            if not self._handshaken:
                if now >= handshake_by:
                    self.close("no HTTP/2 preface and SETTINGS in time")
                    return
                deadlines.append(handshake_by)
            elif not self.h2.settings_acknowledged:
                if now >= settings_by:
                    if not self.h2.closed:
                        self.h2.close(ErrorCode.SETTINGS_TIMEOUT, b"SETTINGS not acknowledged")
                    self.close("SETTINGS not acknowledged in time")
                    return
                deadlines.append(settings_by)
            else:
                since = self._idle_since
                runners = self._runners
                if since is not None and runners is not None and runners.surplus:
                    # A burst's runners wait for the next one a while, not for ever.
                    if now >= since + _TRIM_RUNNERS_AFTER:
                        runners.trim()
                    else:
                        deadlines.append(since + _TRIM_RUNNERS_AFTER)
                if net.idle_timeout and since is not None and not self._shutting_down:
                    if now >= since + net.idle_timeout:
                        self._idle_reached()
                        return
                    deadlines.append(since + net.idle_timeout)
                if net.ping_after and not self.h2.closed:
                    if self._keepalive_outstanding:
                        if now >= ping_due:
                            self.close("keepalive PING not answered")
                            return
                        deadlines.append(ping_due)
                    elif now >= self._last_read + net.ping_after:
                        self._keepalive_outstanding = True
                        self.h2.send_ping(_KEEPALIVE_PING)
                        self._flush()
                        ping_due = now + net.ping_timeout
                        deadlines.append(ping_due)
                    else:
                        deadlines.append(self._last_read + net.ping_after)
            with anyio.CancelScope(deadline=min(deadlines)):
                await self._next_wake()

    def _age_reached(self) -> None:
        """The graceful two-GOAWAY sequence (as on shutdown): calls in progress go on, the
        client takes new ones to a new connection."""
        self.ended_by = "max connection age"
        logger.debug("connection from %s: max age reached, sending GOAWAY", self.peer)
        self.begin_shutdown()

    def _idle_reached(self) -> None:
        self.ended_by = "idle"
        if not self.h2.closed:
            self.h2.send_goaway(ErrorCode.NO_ERROR, debug_data=b"idle")
        self._flush()
        self._stop_reading()


def _draw_age(net: NetworkLimits) -> float | None:
    """This connection's age limit: ``max_connection_age`` times a factor drawn uniformly
    from ``1 +- max_connection_age_jitter`` (None when ages are not enforced)."""
    if not net.max_connection_age:
        return None
    jitter = net.max_connection_age_jitter
    # Not a secret: the spread only keeps a fleet from reconnecting at the same moment.
    return net.max_connection_age * random.uniform(1.0 - jitter, 1.0 + jitter)
