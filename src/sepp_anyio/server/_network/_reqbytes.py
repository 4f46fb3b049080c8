"""Bytes of request messages being assembled: one budget per connection, one for the server.

A unary request is buffered until it is whole.  The message-size limit bounds one message,
not how many are being assembled at once, so the bytes calls hold (received, not yet handed
to their handler) are counted on each connection (:class:`ConnectionRequestBytes`) and
across the server (:class:`RequestBytes`), with these consequences
(``http2-hardening.md`` section 5):

* over either cap, a connection stops refunding flow-control credit for bytes that stay
  buffered, so the client stalls on its windows.  Bytes leaving the buffer (handed to a
  handler, or dropped when a call ends) are still refunded: that gives back only credit
  spent on bytes no longer held, so while refunds are held back, a connection's buffered
  bytes grow by at most the credit its client still had (at most the connection's receive
  window; a stream's window with one call);
* once a connection is back under both caps, the calls it held back are resumed
  (:meth:`~sepp_anyio.server._network._call.ServerCall.resume_refunds`); when the server comes back
  under its cap, every connection holding calls back is;
* over the server's cap, new streams are also refused (RST_STREAM REFUSED_STREAM, by the
  connection); the calls already running go on.

No I/O and no awaits: everything here runs synchronously on the server's event loop.
"""

from __future__ import annotations

from typing import Protocol

__all__ = ["ConnectionRequestBytes", "RequestBytes", "Resumable"]


class Resumable(Protocol):
    """A call whose refunds were held back."""

    def resume_refunds(self) -> None:
        """Refund what the call held back, if it is still assembling a message."""


class RequestBytes:
    """Request bytes being assembled across the server.

    Args:
        limit: the server-wide cap (``[server] max_buffered_request_bytes``).
    """

    __slots__ = ("_waiting", "buffered", "limit")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        #: Bytes held by all connections' calls.
        self.buffered = 0
        self._waiting: set[ConnectionRequestBytes] = set()

    @property
    def over(self) -> bool:
        """Over the cap: refunds are held back everywhere and new streams refused."""
        return self.buffered > self.limit

    def _resume_all(self) -> None:
        for connection in list(self._waiting):
            connection.resume()


class ConnectionRequestBytes:
    """Request bytes being assembled on one connection.

    Args:
        server: the server's count, which this one adds to.
        limit: the per-connection cap
            (``[server] max_buffered_request_bytes_per_connection``).
    """

    __slots__ = ("_held", "buffered", "limit", "server")

    def __init__(self, server: RequestBytes, limit: int) -> None:
        self.server = server
        self.limit = limit
        #: Bytes held by this connection's calls.
        self.buffered = 0
        self._held: set[Resumable] = set()

    @property
    def paused(self) -> bool:
        """Refunds for bytes that stay buffered are held back (this connection or the
        server is over its cap)."""
        server = self.server
        return self.buffered > self.limit or server.buffered > server.limit

    def add(self, length: int) -> None:
        """A call buffered ``length`` more bytes."""
        self.buffered += length
        self.server.buffered += length

    def remove(self, length: int) -> None:
        """A call handed ``length`` bytes to its handler, or dropped them; resumes held-back
        calls (here, or everywhere if the server's count went back under its cap)."""
        self.buffered -= length
        server = self.server
        was_over = server.buffered > server.limit
        server.buffered -= length
        if was_over and server.buffered <= server.limit:
            server._resume_all()
        elif self._held and self.buffered <= self.limit:
            self.resume()

    def may_refund(self, call: Resumable) -> bool:
        """Whether ``call`` may refund bytes that stay buffered now; if not, it is resumed
        once it may."""
        if not self.paused:
            return True
        self._held.add(call)
        self.server._waiting.add(self)
        return False

    def forget(self, call: Resumable) -> None:
        """``call`` has ended: it needs no resuming."""
        self._held.discard(call)
        if not self._held:
            self.server._waiting.discard(self)

    def resume(self) -> None:
        """Resume the held-back calls, unless still paused."""
        if self.paused:
            return
        held, self._held = self._held, set()
        self.server._waiting.discard(self)
        for call in held:
            call.resume_refunds()

    def close(self) -> None:
        """The connection is gone: whatever it still counts leaves the server's count."""
        self._held.clear()
        self.server._waiting.discard(self)
        if self.buffered:
            self.remove(self.buffered)
