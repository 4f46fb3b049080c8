"""What the connection remembers about streams it has closed by a reset.

After we send RST_STREAM, the peer may already have sent frames on the stream that it
cannot take back; RFC 9113 section 5.1 says to ignore them (decoding HEADERS so the
HPACK state stays in sync, and counting DATA against the connection window). To tell
such late frames from a peer that keeps talking on a finished stream, the ids of the
streams we reset are remembered, for ``ttl`` seconds of the caller's clock and at most
``limit`` of them (the oldest are forgotten first), so the memory for closed streams
is bounded on a connection that lives for days. Streams that closed normally are not
remembered at all: a frame on one of those is the peer's fault either way.

The connection has no clock: a reset is stamped with the ``now`` of the next
:meth:`ResetStreams.stamp` (the connection calls it at the start of each
``receive_data``), which is when late frames can first arrive.
"""

from __future__ import annotations

__all__ = ["ResetStreams"]

_UNSTAMPED = -1.0


class ResetStreams:
    """Stream ids we reset recently, oldest first."""

    __slots__ = ("_unstamped", "ids", "limit", "ttl")

    def __init__(self, *, ttl: float, limit: int) -> None:
        self.ttl = ttl
        self.limit = limit
        #: Stream id -> the ``now`` it was stamped with (insertion order: oldest first).
        self.ids: dict[int, float] = {}
        self._unstamped = False

    def __len__(self) -> int:
        return len(self.ids)

    def __contains__(self, stream_id: int) -> bool:
        return stream_id in self.ids

    def add(self, stream_id: int) -> None:
        """Remember ``stream_id``; forget the oldest one if over the limit."""
        ids = self.ids
        ids[stream_id] = _UNSTAMPED
        self._unstamped = True
        while len(ids) > self.limit:
            del ids[next(iter(ids))]

    def stamp(self, now: float) -> None:
        """Stamp the resets since the last call with ``now``; forget the expired ones."""
        ids = self.ids
        if self._unstamped:
            self._unstamped = False
            for stream_id in reversed(ids):
                if ids[stream_id] != _UNSTAMPED:
                    break
                ids[stream_id] = now
        if ids:
            horizon = now - self.ttl
            while ids:
                oldest = next(iter(ids))
                if ids[oldest] >= horizon:
                    break
                del ids[oldest]
