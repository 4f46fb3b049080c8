"""One gRPC call, shaped like ``grpclib.client.Stream``.

The betterproto2 stubs only ever do::

    async with channel.request(route, cardinality, req_type, reply_type, ...) as stream:
        await stream.send_message(request, end=True)
        reply = await stream.recv_message()

so :class:`Stream` implements exactly grpclib's stream protocol (send_request,
send_message, end, recv_initial_metadata, recv_message, recv_trailing_metadata,
cancel, async iteration) on top of :class:`~._connection.Connection`.

Errors are :class:`~sepp_anyio._grpc.GrpcError` (the client layer translates them into
the public ``SeppError`` tree); misuse of the stream protocol (a second request, a message
after the end) is a ``RuntimeError``. In particular:

* the server's status, from trailers or a trailers-only response;
* ``UNAVAILABLE`` when the connection fails, the server refuses the stream or
  it sends GOAWAY before processing it;
* ``DEADLINE_EXCEEDED`` when the call's own timeout expires locally. An
  ambient deadline of the caller (``anyio.fail_after`` / ``move_on_after``
  around the call) is *not* converted: it is sent to the server as
  ``grpc-timeout`` and then cancels the call the usual anyio way.

Cancellation at any await resets the HTTP/2 stream (RST_STREAM CANCEL) in a
shielded cleanup, so the server stops working on it and the shared connection
stays usable.
"""

from __future__ import annotations

import logging
from types import TracebackType
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import anyio
import anyio.lowlevel

from .._grpc import (
    GrpcError,
    encode_message,
    read_status,
    status_from_http,
)
from .._http2 import LocalProtocolError
from .._io._native import Native
from .._model._error_root import InvalidArgumentTypeError, StatusCode
from .._wire._codec import decode, encode
from ._connection import CallState, Connection, deadline_exceeded, status_for_reset

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Hashable, Sequence

    from .._io._deadlines import Deadlines


__all__ = ["CallOwner", "CallShape", "Stream"]

_OPEN_ATTEMPTS = 3
_T = TypeVar("_T")
# Transparent resends of a call the server did not process (see _wait). A
# server can refuse streams below its advertised limit while it still holds
# finished calls (grpc's C core does under load), so a few quick resends are
# normal; after that they back off, and a server that keeps refusing fails
# the call as UNAVAILABLE.
_MAX_RESENDS = 20
_RESEND_BACKOFF = 0.01
_RESEND_BACKOFF_MAX = 0.5
# Statuses a server may answer with once the deadline it was sent has passed.
_DEADLINE_VERDICTS = frozenset(
    {StatusCode.DEADLINE_EXCEEDED, StatusCode.UNKNOWN, StatusCode.CANCELLED}
)
# Bound on the checkpoints _deliver_expired_deadline takes; the backend cancels an expired
# scope within an event-loop iteration or two.
_DEADLINE_SPINS = 100
# What Stream._whole_reply returns for a response it leaves to the general path.
_UNUSUAL: Any = object()

logger = logging.getLogger("sepp_anyio.transport")


async def _deliver_expired_deadline() -> None:
    """If the caller's deadline has passed, yield until the backend delivers its cancellation.

    A deadline that has passed is not cancelled at once: the backend notices it at its next
    turn, and a task that has not blocked since does not see it. A call must neither go out
    with a deadline that is already over (``grpc-timeout: 1n``), nor turn the server's
    DEADLINE_EXCEEDED answer to *that* deadline into an error where the caller's own
    ``fail_after`` / ``move_on_after`` should end the call.
    """
    for _ in range(_DEADLINE_SPINS):
        if anyio.current_effective_deadline() > anyio.current_time():
            return
        await anyio.lowlevel.checkpoint()


async def _verdict_delivered(exc: GrpcError) -> None:
    """Before the server's status ``exc`` is raised: if it is the server's verdict on a
    deadline of the caller's that has passed, deliver that cancellation first.

    DEADLINE_EXCEEDED from the server is usually its verdict on the deadline we sent it:
    when that was the caller's and it has passed, the caller's cancellation wins (an
    ambient deadline is never converted into an error). So for UNKNOWN and CANCELLED,
    what grpclib's server answers when the deadline it was sent had passed before the
    handler started (a deadline of a millisecond, under load).
    """
    if exc.code in _DEADLINE_VERDICTS:
        await _deliver_expired_deadline()


def _read_response_headers(
    headers: Sequence[tuple[bytes, bytes]],
) -> tuple[bytes | None, bytes | None, bytes | None]:
    """``:status``, ``content-type`` and ``grpc-status`` of response headers, in one pass
    (the first of each counts; None where one is missing)."""
    http_status = content_type = grpc_status = None
    for key, value in headers:
        if key == b":status":
            if http_status is None:
                http_status = value
        elif key == b"content-type":
            if content_type is None:
                content_type = value
        elif key == b"grpc-status" and grpc_status is None:
            grpc_status = value
    return http_status, content_type, grpc_status


class CallShape(Protocol):
    """Whether a call streams its requests and its replies: the members of grpclib's
    ``Cardinality`` that the generated stubs pass have these two attributes (the channel,
    ``_channel``, is the one module that knows that type)."""

    @property
    def client_streaming(self) -> bool: ...

    @property
    def server_streaming(self) -> bool: ...


class CallOwner(Protocol):
    """What a :class:`Stream` needs from the channel that made it (``_channel.Channel``).

    A protocol, so that the stream does not import the channel that imports it.
    """

    def request_headers(
        self, path: str, remaining: float, metadata: Sequence[tuple[bytes, bytes]]
    ) -> tuple[list[tuple[bytes, bytes]], Sequence[tuple[bytes, bytes]], Hashable]:
        """The call's headers given the seconds ``remaining`` until its deadline (inf:
        none): those the same on every call of ``path`` with this timeout (through the
        HPACK table), the per-call ones (sent never indexed), and the key that names the
        first for the encoder's cache."""
        ...

    async def get_connection(self) -> Connection:
        """A usable connection, made now if needed (raises ``GrpcError`` UNAVAILABLE)."""
        ...

    def ready_connection(self) -> Connection | None:
        """The current connection if it takes new calls, without I/O; else None."""
        ...

    @property
    def deadlines(self) -> Deadlines:
        """The task that keeps the calls' own timeouts: a call it watches (``watch``) is
        failed with DEADLINE_EXCEEDED, and woken, once its deadline passes
        (``CallState.expire``)."""
        ...

    @property
    def native(self) -> Native:
        """The running backend's clock and waiters."""
        ...


class Stream:
    """A single RPC on a channel (a :class:`CallOwner`); use with ``async with``."""

    __slots__ = (
        "_ambient",
        "_body",
        "_call",
        "_cardinality",
        "_channel",
        "_conn",
        "_deadline",
        "_deadline_covered",
        "_end_sent",
        "_initial_done",
        "_message_sent",
        "_metadata",
        "_name",
        "_recv_type",
        "_resends",
        "_send_type",
        "_trailers_done",
        "_trailers_only",
        "_watched",
    )

    def __init__(
        self,
        channel: CallOwner,
        name: str,
        cardinality: CallShape,
        send_type: type[Any],
        recv_type: type[Any],
        *,
        deadline: float | None,
        metadata: list[tuple[bytes, bytes]],
    ) -> None:
        self._channel = channel
        self._name = name
        self._cardinality = cardinality
        self._send_type = send_type
        self._recv_type = recv_type
        # Absolute anyio time at which *this call's own* timeout expires.
        self._deadline = deadline
        self._metadata = metadata
        self._conn: Connection | None = None
        self._call: CallState | None = None
        self._message_sent = False
        self._end_sent = False
        self._initial_done = False
        self._trailers_only = False
        self._trailers_done = False
        # The encoded unary request, kept for a transparent resend.
        self._body: bytes | None = None
        self._resends = 0
        # The stream state whose deadline the channel watches (a resend makes a new one).
        self._watched: CallState | None = None
        # True inside `async with` when the caller's deadline is at or before ours.
        self._deadline_covered = False
        # The caller's effective deadline, read on entering `async with` (the caller's
        # scopes do not change while the call runs; None outside the block).
        self._ambient: float | None = None

    # ------------------------------------------------------------ deadline

    async def _bounded(self, step: Awaitable[_T]) -> _T:
        """Await ``step`` (one that may block: connecting, a stream slot, send window, a
        resend's pause) under this call's own deadline.

        The wait for the response needs no scope: the channel's deadline task wakes it
        (see ``_io._deadlines``). When the deadline passes here, a stream already open is
        reset (shielded) and DEADLINE_EXCEEDED raised.
        """
        deadline = self._deadline
        if deadline is None or self._deadline_covered:
            return await step
        with self._channel.native.cancel_scope(deadline):
            return await step
        if self._call is not None:
            with anyio.CancelScope(shield=True):
                await self._abort()
        raise deadline_exceeded()

    def _check_call(self, call: CallState, conn: Connection) -> None:
        if call.failure is not None:
            raise call.failure
        # A reset after the whole response has arrived only stops the request side (a
        # server may answer before reading all of the request, then reset the stream).
        if call.reset_code is not None and not call.ended:
            raise GrpcError(
                status_for_reset(call.reset_code),
                f"the server reset the stream (HTTP/2 error code {call.reset_code})",
            )
        if conn.failure is not None:
            raise conn.failure

    async def _wait(self, ready: Callable[[CallState], bool] | None) -> None:
        """Wait until ``ready(call)`` holds (``ready`` None: until the response has
        ended), the call fails, or the deadline passes.

        A unary request the server provably did not process (refused stream,
        or above the last stream id of a GOAWAY) is sent again on a fresh
        stream, transparently, like gRPC's own clients do: nothing can have
        happened twice.
        """
        while True:
            call, conn = self._call, self._conn
            assert call is not None and conn is not None
            deadline = self._deadline
            if deadline is not None and self._watched is not call and not self._deadline_covered:
                self._watched = call
                self._channel.deadlines.watch(call, deadline)
            while not (call.ended if ready is None else ready(call)):
                if call.unprocessed and self._can_resend():
                    break
                self._check_call(call, conn)
                waiter = call.waiter = conn.native.waiter()
                if ready is None:
                    call.until_end = True
                else:
                    call.wanted = ready
                try:
                    await waiter.wait()
                finally:
                    call.waiter = None
                    call.wanted = None
                    call.until_end = False
            else:
                return
            await self._resend()

    def _can_resend(self) -> bool:
        return self._body is not None and self._resends < _MAX_RESENDS

    async def _resend(self) -> None:
        conn, call = self._conn, self._call
        assert conn is not None and call is not None
        logger.debug("resending unprocessed call %s (stream %d)", self._name, call.stream_id)
        conn.release_call(call)
        self._conn = self._call = None
        self._end_sent = False
        self._resends += 1
        if self._resends > 3:
            pause = min(_RESEND_BACKOFF * 2 ** (self._resends - 4), _RESEND_BACKOFF_MAX)
            await self._bounded(anyio.sleep(pause))
        await self._open(end=True, body=self._body)

    # ------------------------------------------------------------ sending

    async def _open(self, *, end: bool, body: bytes | None) -> None:
        """Open the HTTP/2 stream: headers, then the body if there is one."""
        if self._call is not None:
            raise RuntimeError("Request is already sent")
        deadline = self._deadline
        clock = self._channel.native.now
        now = clock()
        if deadline is not None and deadline <= now:
            raise deadline_exceeded()
        # Read once: the caller's scopes do not change while the call runs. A call
        # started inside an already-cancelled scope (effective deadline -inf) or past the
        # caller's deadline must not reach the wire (it would go out with an expired
        # grpc-timeout): the wait below delivers that cancellation first.
        ambient = self._ambient
        if ambient is None:
            ambient = self._channel.native.effective_deadline()
        if ambient <= now:
            await _deliver_expired_deadline()
        # The usual case needs no await: the channel's connection is up and has a free
        # stream slot.
        conn = self._channel.ready_connection()
        if conn is None or not conn.try_acquire_slot():
            conn = await self._bounded(self._acquire())
            now = clock()
        # grpc-timeout: the nearer of our own deadline and the caller's.
        if deadline is not None and deadline < ambient:
            ambient = deadline
        headers, extra, key = self._channel.request_headers(
            self._name, ambient - now, self._metadata
        )
        call = conn.open_call(
            headers,
            extra,
            key,
            end_stream=end and body is None,
            max_messages=None if self._cardinality.server_streaming else 1,
        )
        self._conn = conn
        self._call = call
        if body is not None:
            # The usual unary request: headers and body leave in one write. What the
            # windows do not take now waits for window updates.
            sent = conn.h2.send_data(call.stream_id, body, end_stream=end)
            if sent < len(body):
                await self._send_body(call, conn, memoryview(body)[sent:], end=end)
                return
        self._end_sent = end
        # Shielded (a frame is never cut), so the deadline need not bound it.
        if not conn.flush_soon():
            await conn.flush()

    async def _acquire(self) -> Connection:
        """A connection with a free stream slot, retrying if one goes away.

        Retrying is safe here: nothing of this call has been sent yet.
        """
        for attempt in range(_OPEN_ATTEMPTS):
            conn = await self._channel.get_connection()
            try:
                await conn.acquire_slot()
            except GrpcError:
                if attempt + 1 < _OPEN_ATTEMPTS and not conn.usable:
                    continue
                raise
            return conn
        raise AssertionError("unreachable")  # pragma: no cover

    async def _send_data(self, data: bytes, *, end: bool) -> None:
        """Send ``data`` on the open stream, bounded by the call's deadline."""
        conn, call = self._conn, self._call
        assert conn is not None and call is not None
        await self._send_body(call, conn, data, end=end)

    async def _send_body(
        self, call: CallState, conn: Connection, data: bytes | memoryview, *, end: bool
    ) -> None:
        """Send ``data`` in DATA frames as the windows allow, waiting for window updates."""
        h2conn = conn.h2
        stream_id = call.stream_id
        view = memoryview(data)
        while True:
            self._check_call(call, conn)
            if call.ended:
                # The server answered in full without reading the rest of the request
                # (it refused it, say): the rest is not sent, the answer is read as usual.
                return
            if h2conn.send_window(stream_id) <= 0:
                await conn.flush()
                # Re-check after the flush: the window may have opened, or the stream
                # ended or was reset meanwhile (then no window update will come for it).
                if (
                    h2conn.send_window(stream_id) <= 0
                    and conn.failure is None
                    and call.failure is None
                    and call.reset_code is None
                    and not call.ended
                ):
                    await self._bounded(conn.wait_for_window())
                continue
            # (The HTTP/2 connection keeps a reference to the bytes until the flush;
            # ``data`` is immutable.)
            sent = h2conn.send_data(stream_id, view, end_stream=end)
            view = view[sent:]
            if not view:
                break
        if end:
            self._end_sent = True
        await conn.flush()

    async def send_request(self, *, end: bool = False) -> None:
        """Send the request headers (``end=True``: with no body at all)."""
        await self._open(end=end, body=None)

    async def send_message(self, message: Any, *, end: bool = False) -> None:
        """Send one request message; forced to end the stream for unary requests."""
        if not self._cardinality.client_streaming:
            if self._message_sent:
                raise RuntimeError("Message was already sent")
            end = True
        if self._end_sent:
            raise RuntimeError("Stream is ended")
        if not isinstance(message, self._send_type):
            raise InvalidArgumentTypeError(
                f"message must be {self._send_type.__name__}, not {type(message)!r}"
            )
        body = encode_message(encode(message))
        self._message_sent = True
        if not self._cardinality.client_streaming:
            self._body = body
        if self._call is None:
            # Headers and the first message leave in a single write.
            await self._open(end=end, body=body)
        else:
            await self._send_data(body, end=end)

    async def end(self) -> None:
        """Half-close the request side."""
        if self._end_sent:
            if self._cardinality.client_streaming:
                raise RuntimeError("Stream was already ended")
            return
        conn, call = self._conn, self._call
        if conn is None or call is None:
            raise RuntimeError("Request was not sent yet")
        try:
            conn.h2.end_stream(call.stream_id)
        except LocalProtocolError:
            # The stream is over already (reset, or the connection is gone): say why.
            self._check_call(call, conn)
            raise RuntimeError("the stream is closed") from None
        self._end_sent = True
        await conn.flush()

    # ------------------------------------------------------------ receiving

    async def recv_initial_metadata(self) -> None:
        """Wait for the response headers and validate them.

        A trailers-only response (an error before any message) raises its
        status here.
        """
        if self._initial_done:
            raise RuntimeError("Initial metadata was already received")
        call = self._call
        if call is None:
            raise RuntimeError("Request was not sent yet")
        if self._cardinality.server_streaming:
            if call.headers is None:
                await self._wait(lambda c: c.headers is not None or c.ended)
        elif not call.ended:
            # A unary response is only complete with its trailers, so wait for
            # the end of the stream once instead of three times (headers,
            # message, trailers): one wake-up per call. The reader keeps
            # acknowledging DATA meanwhile, so this cannot stall flow control.
            await self._wait(None)
        self._initial_done = True
        call = self._call  # a transparent resend may have replaced it
        assert call is not None
        if call.failure is not None:
            # A local verdict (an oversized message, say) wins even when the
            # rest of the response had already arrived.
            raise call.failure
        headers = call.headers
        if headers is None:
            raise GrpcError(
                StatusCode.UNKNOWN, "the server ended the stream without response headers"
            )
        http_status, content_type, grpc_status = _read_response_headers(headers)
        if http_status != b"200":
            code = int(http_status) if http_status and http_status.isdigit() else 0
            raise GrpcError(
                status_from_http(code),
                f"received HTTP status {code} instead of a gRPC response",
            )
        if grpc_status is not None:
            # Trailers-only: the headers are the trailers.
            self._trailers_only = True
            self._trailers_done = True
            try:
                read_status(headers)
            except GrpcError as exc:
                await _verdict_delivered(exc)
                raise
            return
        if content_type is None or not content_type.startswith(b"application/grpc"):
            raise GrpcError(
                StatusCode.UNKNOWN,
                f"server replied with content-type {content_type!r}, not application/grpc",
            )

    async def recv_message(self) -> Any:
        """The next response message, or None at the end of the stream.

        For a unary response, the end of the stream without a message raises
        the trailers' status, or INTERNAL if that status is OK.
        """
        if not self._initial_done:
            call = self._call
            if call is not None and not self._cardinality.server_streaming:
                # A unary response: once it has ended, the usual one (a message and an
                # OK status) is read in one pass; anything else takes the path below,
                # which says what is wrong.
                if not call.ended:
                    await self._wait(None)
                    call = self._call
                    assert call is not None
                reply = self._whole_reply(call)
                if reply is not _UNUSUAL:
                    return reply
            await self.recv_initial_metadata()
        if self._trailers_only:
            return None
        call = self._call
        assert call is not None
        if (
            self._cardinality.server_streaming
            and self._deadline is not None
            and not self._deadline_covered
            and self._channel.native.now() >= self._deadline
        ):
            # Messages may still be buffered, but the call's time is over (a unary call
            # has read its one message by the time it gets here).
            raise deadline_exceeded()
        data = call.decoder.pop()
        if data is None:
            await self._wait(lambda c: bool(c.decoder.messages) or c.ended)
            data = call.decoder.pop()
            if data is None:
                if call.decoder.buffered:
                    raise GrpcError(
                        StatusCode.INTERNAL, "the stream ended in the middle of a message"
                    )
                if not self._cardinality.server_streaming:
                    await self.recv_trailing_metadata()
                    raise GrpcError(StatusCode.INTERNAL, "the server sent no response message")
                return None
        return self._decode(data)

    def _decode(self, data: bytes) -> Any:
        try:
            # Strict: a field of the wrong wire type fails the reply (betterproto2's own
            # decoder would let it through as a value of the wrong type).
            return decode(self._recv_type, data)
        except Exception as exc:
            raise GrpcError(
                StatusCode.INTERNAL, f"could not decode {self._recv_type.__name__}: {exc}"
            ) from exc

    def _whole_reply(self, call: CallState) -> Any:
        """The message of a unary response that has ended, if it is the usual one: HTTP
        200, a gRPC content-type, one message, trailers with an OK status and no local
        verdict. Else :data:`_UNUSUAL`, and nothing is consumed (the general path reads
        it and raises what is wrong).

        Raises:
            GrpcError: INTERNAL when the message does not decode.
        """
        headers, trailers = call.headers, call.trailers
        if call.failure is not None or headers is None or trailers is None:
            return _UNUSUAL
        http_status, content_type, grpc_status = _read_response_headers(headers)
        if (
            grpc_status is not None  # (trailers-only)
            or http_status != b"200"
            or content_type is None
            or not content_type.startswith(b"application/grpc")
        ):
            return _UNUSUAL
        for key, value in trailers:
            if key == b"grpc-status":
                if value != b"0":
                    return _UNUSUAL
                break
        else:
            return _UNUSUAL
        data = call.decoder.pop()
        if data is None:
            return _UNUSUAL
        self._initial_done = self._trailers_done = True
        return self._decode(data)

    async def recv_trailing_metadata(self) -> None:
        """Wait for the trailers and raise a non-OK status."""
        if self._trailers_done:
            return
        if not self._initial_done:
            await self.recv_initial_metadata()
            if self._trailers_only:
                return
        call = self._call
        assert call is not None
        if call.trailers is None:
            await self._wait(lambda c: c.trailers is not None or c.ended)
        self._trailers_done = True
        if call.trailers is None:
            raise GrpcError(StatusCode.INTERNAL, "the server ended the stream without trailers")
        try:
            read_status(call.trailers)
        except GrpcError as exc:
            await _verdict_delivered(exc)
            raise

    def __aiter__(self) -> Stream:
        return self

    async def __anext__(self) -> Any:
        message = await self.recv_message()
        if message is None:
            raise StopAsyncIteration
        return message

    # ------------------------------------------------------------ ending

    async def cancel(self) -> None:
        """Reset the stream (RST_STREAM CANCEL) if it is still open."""
        await self._abort()

    async def _abort(self) -> None:
        conn, call = self._conn, self._call
        if conn is None or call is None:
            return
        if not (call.ended and self._end_sent) and conn.reset_call(call):
            # flush() shields its own writes; nothing here can be cut short.
            await conn.flush()

    async def __aenter__(self) -> Stream:
        ambient = self._ambient = self._channel.native.effective_deadline()
        if self._deadline is not None and ambient <= self._deadline:
            # The caller's deadline comes first: it ends the call (as a cancellation,
            # which is what the caller asked for) before ours could, so watching ours
            # would only cost time.
            self._deadline_covered = True
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        call, conn = self._call, self._conn
        if (
            exc_type is None
            and self._trailers_done
            and self._end_sent
            and call is not None
            and call.ended
            and conn is not None
        ):
            # The usual end: the whole response was read and checked.
            conn.release_call(call)
            return
        await self._finish(exc_type)

    async def _finish(self, exc_type: type[BaseException] | None) -> None:
        conn, call = self._conn, self._call
        if conn is None or call is None:
            return
        try:
            if exc_type is None and not self._trailers_done:
                await self.recv_trailing_metadata()
        finally:
            # Runs on success, error and cancellation alike: a stream the
            # server hasn't finished is reset so it stops working on it.
            if not (call.ended and self._end_sent):
                with anyio.CancelScope(shield=True):
                    await self._abort()
            conn.release_call(call)
