"""One HTTP/1.1 connection of the health server, on h11 (which parses; this module only
moves bytes and enforces the limits).

Per connection, in order:

* every exchange (reading one request and writing its response) must finish within
  ``timeout`` seconds, counted from the end of the previous one: a client that trickles its
  headers (slowloris) or idles on a kept-alive connection is disconnected;
* request line plus headers larger than ``max_header_bytes``: 431, then close (h11 refuses
  an incomplete head past that size; a head that arrived whole is measured after parsing);
* a method other than GET or HEAD: 405 (with ``Allow``); a request with a body (the
  endpoints take none): 413; both close the connection, since the body is not read;
* at most ``max_requests`` exchanges, then the connection closes.

An error response says ``Connection: close`` and the connection is closed right after it,
unread input and all: a client still sending a large body may see a reset rather than the
413 (no lingering close; probes and scrapers send no body).
"""

from __future__ import annotations

import http
import logging
from collections.abc import Callable
from dataclasses import dataclass

import anyio
import anyio.abc
import h11

__all__ = ["Reply", "serve_connection"]

logger = logging.getLogger("sepp_anyio.health")

_RECEIVE = 16384
#: Bound on closing a connection (shielded, so it is the only bound).
_CLOSE_SECONDS = 1.0
_ALLOWED = (b"GET", b"HEAD")
_PLAIN = "text/plain; charset=utf-8"


@dataclass(frozen=True, slots=True)
class Reply:
    """A response: status, body and content type."""

    status: int
    body: bytes
    content_type: str = _PLAIN


#: Answers a request's path (without the query) for GET or HEAD.
Route = Callable[[bytes], Reply]


class _Closed(Exception):
    """The client went away (end of stream, reset)."""


async def _next_event(conn: h11.Connection, stream: anyio.abc.ByteStream) -> object:
    while True:
        event = conn.next_event()
        if event is not h11.NEED_DATA:
            return event
        try:
            data = await stream.receive(_RECEIVE)
        except anyio.EndOfStream:
            data = b""
        except (anyio.BrokenResourceError, anyio.ClosedResourceError) as exc:
            raise _Closed from exc
        conn.receive_data(data)


async def _send(conn: h11.Connection, stream: anyio.abc.ByteStream, event: h11.Event) -> None:
    data = conn.send(event)
    if data:
        try:
            await stream.send(data)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError) as exc:
            raise _Closed from exc


async def _respond(
    conn: h11.Connection,
    stream: anyio.abc.ByteStream,
    reply: Reply,
    *,
    head: bool = False,
    close: bool = False,
    extra: tuple[tuple[str, str], ...] = (),
) -> None:
    headers = [
        ("content-type", reply.content_type),
        ("content-length", str(len(reply.body))),
        ("cache-control", "no-store"),
        *extra,
    ]
    if close:
        headers.append(("connection", "close"))
    # The status line's reason phrase ("200 OK"): optional in HTTP/1.1, but a status line
    # without one ("HTTP/1.1 200 ") trips some probes and reads as broken in a capture.
    response = h11.Response(status_code=reply.status, headers=headers, reason=_reason(reply.status))
    await _send(conn, stream, response)
    if reply.body and not head:
        await _send(conn, stream, h11.Data(data=reply.body))
    await _send(conn, stream, h11.EndOfMessage())


def _reason(status: int) -> bytes:
    """The standard reason phrase of ``status`` (``b"OK"`` for 200), empty if it has none."""
    try:
        return http.HTTPStatus(status).phrase.encode("ascii")
    except ValueError:
        return b""


def _head_size(request: h11.Request) -> int:
    """The size of the request line and headers as sent (give or take whitespace)."""
    size = len(request.method) + len(request.target) + len(b" HTTP/1.1\r\n") + 3
    for name, value in request.headers:
        size += len(name) + len(value) + 4
    return size


def _has_body(request: h11.Request) -> bool:
    for name, value in request.headers:
        if name == b"transfer-encoding":
            return True
        if name == b"content-length" and value.strip() != b"0":
            return True
    return False


async def _exchange(
    conn: h11.Connection, stream: anyio.abc.ByteStream, route: Route, max_header_bytes: int
) -> str:
    """Serve one request. Returns ``"again"`` (the connection can be reused) or
    ``"close"``."""
    try:
        event = await _next_event(conn, stream)
        if isinstance(event, h11.ConnectionClosed):
            return "close"
        assert isinstance(event, h11.Request), event
        # h11 bounds only an *incomplete* head; one that arrived whole is measured here.
        if _head_size(event) > max_header_bytes:
            await _respond(conn, stream, Reply(431, b"request headers too large\n"), close=True)
            return "close"
        if event.method not in _ALLOWED:
            reply = Reply(405, b"method not allowed (GET or HEAD)\n")
            await _respond(conn, stream, reply, close=True, extra=(("allow", "GET, HEAD"),))
            return "close"
        if _has_body(event):
            reply = Reply(413, b"request bodies are not accepted\n")
            await _respond(conn, stream, reply, close=True)
            return "close"
        end = await _next_event(conn, stream)
        assert isinstance(end, h11.EndOfMessage), end
    except h11.RemoteProtocolError as exc:
        # A malformed or oversized request: answer if the state allows it, then close.
        if conn.our_state not in (h11.IDLE, h11.SEND_RESPONSE):
            return "close"
        status = exc.error_status_hint
        text = "request headers too large" if status == 431 else "malformed request"
        await _respond(conn, stream, Reply(status, f"{text}\n".encode()), close=True)
        return "close"
    path = event.target.split(b"?", 1)[0]
    await _respond(conn, stream, route(path), head=event.method == b"HEAD")
    if conn.our_state is h11.DONE and conn.their_state is h11.DONE:
        return "again"
    return "close"


async def serve_connection(
    stream: anyio.abc.ByteStream,
    route: Route,
    *,
    timeout: float,  # noqa: ASYNC109 (a per-exchange bound enforced here, documented above)
    max_header_bytes: int,
    max_requests: int,
) -> None:
    """Serve requests on ``stream`` until the client closes, a limit is hit or an error
    occurs; always closes ``stream``. Never raises for anything the client does.

    Cancellation: propagates; the stream is still closed (shielded, bounded).
    """
    conn = h11.Connection(h11.SERVER, max_incomplete_event_size=max_header_bytes)
    try:
        for _ in range(max_requests):
            with anyio.move_on_after(timeout) as scope:
                outcome = await _exchange(conn, stream, route, max_header_bytes)
            if scope.cancelled_caught:
                logger.debug("health connection timed out after %gs", timeout)
                return
            if outcome != "again":
                return
            conn.start_next_cycle()
    except _Closed:
        return
    finally:
        with anyio.CancelScope(shield=True), anyio.move_on_after(_CLOSE_SECONDS):
            await stream.aclose()
