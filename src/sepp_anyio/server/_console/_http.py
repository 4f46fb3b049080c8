"""One HTTP/1.1 connection of the console, on h11 (which parses; this module moves bytes,
enforces the limits and turns each request into a :class:`Request` for the handler).

Per connection, in order:

* every exchange (reading one request and writing its response) must finish within
  ``timeout`` seconds, counted from the end of the previous one: a client that trickles its
  request (slowloris) or idles on a kept-alive connection is disconnected;
* request line plus headers larger than ``max_header_bytes``: 431, then close;
* a method other than GET, HEAD or POST: 405; a body larger than ``max_body_bytes`` (by its
  ``Content-Length``, or as it arrives when chunked): 413, then close; so a request costs at
  most about ``max_header_bytes + max_body_bytes`` of memory;
* at most ``max_requests`` exchanges, then the connection closes.

The handler never sees a malformed request; whatever it raises is its own business (the
application turns it into an error page before it gets here).
"""

from __future__ import annotations

import http
import logging
import urllib.parse
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field

import anyio
import anyio.abc
import h11

__all__ = ["Reply", "Request", "serve_connection"]

logger = logging.getLogger("sepp_anyio.server.console")

_RECEIVE = 16384
#: Bound on closing a connection (shielded, so it is the only bound).
_CLOSE_SECONDS = 1.0
_ALLOWED = (b"GET", b"HEAD", b"POST")
_PLAIN = "text/plain; charset=utf-8"


@dataclass(frozen=True, slots=True)
class Request:
    """A parsed request: path decoded, query and (urlencoded) form as single values."""

    method: str
    path: str
    query: Mapping[str, str]
    headers: Mapping[str, str]
    cookies: Mapping[str, str]
    form: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Reply:
    """A response: status, body, content type and extra headers."""

    status: int
    body: bytes
    content_type: str = _PLAIN
    headers: tuple[tuple[str, str], ...] = ()


#: The application: answers one request.
Handler = Callable[[Request], Awaitable[Reply]]


class _Closed(Exception):
    """The client went away (end of stream, reset)."""


class _BadRequest(Exception):
    def __init__(self, status: int, text: str) -> None:
        super().__init__(text)
        self.status = status
        self.text = text


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


def _reason(status: int) -> bytes:
    try:
        return http.HTTPStatus(status).phrase.encode("ascii")
    except ValueError:
        return b""


async def _respond(
    conn: h11.Connection,
    stream: anyio.abc.ByteStream,
    reply: Reply,
    *,
    head: bool = False,
    close: bool = False,
) -> None:
    headers = [
        ("content-type", reply.content_type),
        ("content-length", str(len(reply.body))),
        ("cache-control", "no-store"),
        # Everything the pages use is served from here: no inline script, no other origin,
        # and no framing (clickjacking of the action buttons).
        ("content-security-policy", "default-src 'self'; frame-ancestors 'none'"),
        ("x-content-type-options", "nosniff"),
        ("referrer-policy", "same-origin"),
        *reply.headers,
    ]
    if close:
        headers.append(("connection", "close"))
    response = h11.Response(status_code=reply.status, headers=headers, reason=_reason(reply.status))
    await _send(conn, stream, response)
    if reply.body and not head:
        await _send(conn, stream, h11.Data(data=reply.body))
    await _send(conn, stream, h11.EndOfMessage())


def _head_size(request: h11.Request) -> int:
    size = len(request.method) + len(request.target) + len(b" HTTP/1.1\r\n") + 3
    for name, value in request.headers:
        size += len(name) + len(value) + 4
    return size


def _single(pairs: list[tuple[str, str]]) -> dict[str, str]:
    # The first value of a repeated key wins (no page takes lists).
    out: dict[str, str] = {}
    for key, value in pairs:
        out.setdefault(key, value)
    return out


def _parse(event: h11.Request, body: bytes) -> Request:
    try:
        target = event.target.decode("ascii")
        headers = {
            name.decode("ascii").lower(): value.decode("latin-1") for name, value in event.headers
        }
    except UnicodeDecodeError:
        raise _BadRequest(400, "the request line or a header is not ASCII") from None
    raw_path, _, raw_query = target.partition("?")
    try:
        path = urllib.parse.unquote(raw_path, errors="strict")
        query = _single(urllib.parse.parse_qsl(raw_query, errors="strict", max_num_fields=32))
        form: dict[str, str] = {}
        if body:
            form = _single(
                urllib.parse.parse_qsl(body.decode("ascii"), errors="strict", max_num_fields=32)
            )
    except (UnicodeDecodeError, ValueError):
        raise _BadRequest(400, "the path, query or form is not valid UTF-8 URL encoding") from None
    cookies: dict[str, str] = {}
    for part in headers.get("cookie", "").split(";"):
        name, sep, value = part.strip().partition("=")
        if sep:
            cookies.setdefault(name, value)
    return Request(event.method.decode("ascii"), path, query, headers, cookies, form)


async def _read_body(
    conn: h11.Connection, stream: anyio.abc.ByteStream, event: h11.Request, max_body: int
) -> bytes:
    for name, value in event.headers:
        if name == b"content-length" and int(value) > max_body:
            raise _BadRequest(413, f"request body over {max_body} bytes")
    chunks: list[bytes] = []
    size = 0
    while True:
        part = await _next_event(conn, stream)
        if isinstance(part, h11.EndOfMessage):
            return b"".join(chunks)
        if not isinstance(part, h11.Data):
            raise _BadRequest(400, "malformed request")
        size += len(part.data)
        if size > max_body:
            raise _BadRequest(413, f"request body over {max_body} bytes")
        chunks.append(bytes(part.data))


async def _exchange(
    conn: h11.Connection,
    stream: anyio.abc.ByteStream,
    handler: Handler,
    max_header_bytes: int,
    max_body: int,
) -> str:
    """Serve one request; ``"again"`` if the connection can be reused, else ``"close"``."""
    try:
        event = await _next_event(conn, stream)
        if isinstance(event, h11.ConnectionClosed):
            return "close"
        assert isinstance(event, h11.Request), event
        if _head_size(event) > max_header_bytes:
            raise _BadRequest(431, "request headers too large")
        if event.method not in _ALLOWED:
            raise _BadRequest(405, "method not allowed (GET, HEAD or POST)")
        body = await _read_body(conn, stream, event, max_body)
        request = _parse(event, body)
    except _BadRequest as bad:
        if conn.our_state in (h11.IDLE, h11.SEND_RESPONSE):
            await _respond(conn, stream, Reply(bad.status, f"{bad.text}\n".encode()), close=True)
        return "close"
    except h11.RemoteProtocolError as exc:
        if conn.our_state not in (h11.IDLE, h11.SEND_RESPONSE):
            return "close"
        status = exc.error_status_hint
        text = "request headers too large" if status == 431 else "malformed request"
        await _respond(conn, stream, Reply(status, f"{text}\n".encode()), close=True)
        return "close"
    reply = await handler(request)
    await _respond(conn, stream, reply, head=request.method == "HEAD")
    if conn.our_state is h11.DONE and conn.their_state is h11.DONE:
        return "again"
    return "close"


async def serve_connection(
    stream: anyio.abc.ByteStream,
    handler: Handler,
    *,
    timeout: float,  # noqa: ASYNC109 (a per-exchange bound enforced here, documented above)
    max_header_bytes: int,
    max_body_bytes: int,
    max_requests: int,
) -> None:
    """Serve requests on ``stream`` until the client closes, a limit is hit or an error
    occurs; always closes ``stream``.  Never raises for anything the client does.

    Cancellation: propagates; the stream is still closed (shielded, bounded).
    """
    conn = h11.Connection(h11.SERVER, max_incomplete_event_size=max_header_bytes)
    try:
        for _ in range(max_requests):
            with anyio.move_on_after(timeout) as scope:
                outcome = await _exchange(conn, stream, handler, max_header_bytes, max_body_bytes)
            if scope.cancelled_caught:
                logger.debug("console connection timed out after %gs", timeout)
                return
            if outcome != "again":
                return
            conn.start_next_cycle()
    except _Closed:
        return
    finally:
        with anyio.CancelScope(shield=True), anyio.move_on_after(_CLOSE_SECONDS):
            await stream.aclose()
