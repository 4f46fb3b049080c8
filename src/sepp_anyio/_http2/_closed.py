"""What the connection remembers about streams it has closed by a reset.

After we send RST_STREAM, the peer may already have sent frames on the stream that it
cannot take back; RFC 9113 section 5.1 says to ignore them (decoding HEADERS so the
HPACK state stays in sync, and counting DATA against the connection window). To tell
such late frames from a peer that keeps talking on a finished stream, the ids of the
streams we reset are remembered, for ``ttl`` seconds of the caller's clock and at most
``limit`` of them (the oldest are forgotten first), so the memory for closed streams
is bounded on a connection that lives for days. Streams that closed normally are not
remembered at all: a frame on one of those is the peer's fault either way.

For each one we also keep what the peer could still legitimately have in flight: the
rest of the stream's receive window, and two header blocks (response headers and
trailers). Late frames within that are normal after a cancellation and cost nothing;
beyond it they are the peer's abuse (the connection counts them as glitches), so a
storm of cancelled calls with large responses in flight never trips our own budget.

The connection has no clock: a reset is stamped with the ``now`` of the next
:meth:`ResetStreams.stamp` (the connection calls it at the start of each
``receive_data``), which is when late frames can first arrive.
"""

from __future__ import annotations

__all__ = ["ResetStreams"]

_UNSTAMPED = -1.0
# Header blocks a peer may still have in flight on a stream we reset.
_LATE_HEADER_BLOCKS = 2


class ResetStreams:
    """Stream ids we reset recently, oldest first."""

    __slots__ = ("_unstamped", "ids", "limit", "ttl")

    def __init__(self, *, ttl: float, limit: int) -> None:
        self.ttl = ttl
        self.limit = limit
        #: Stream id -> [stamp, DATA bytes still allowed, header blocks still allowed]
        #: (insertion order: oldest first).
        self.ids: dict[int, list[float]] = {}
        self._unstamped = False

    def __len__(self) -> int:
        return len(self.ids)

    def __contains__(self, stream_id: int) -> bool:
        return stream_id in self.ids

    def add(self, stream_id: int, window: int) -> None:
        """Remember ``stream_id``, on which the peer may still send ``window`` DATA
        bytes; forget the oldest one if over the limit."""
        ids = self.ids
        ids[stream_id] = [_UNSTAMPED, window, _LATE_HEADER_BLOCKS]
        self._unstamped = True
        while len(ids) > self.limit:
            del ids[next(iter(ids))]

    def late_data(self, stream_id: int, length: int) -> bool | None:
        """DATA of ``length`` flow-controlled bytes arrived on ``stream_id``: None if the
        stream is not remembered, else whether it was within what the peer could still
        send."""
        entry = self.ids.get(stream_id)
        if entry is None:
            return None
        entry[1] -= length
        return entry[1] >= 0

    def late_headers(self, stream_id: int) -> bool | None:
        """A header block arrived on ``stream_id``: as :meth:`late_data`."""
        entry = self.ids.get(stream_id)
        if entry is None:
            return None
        entry[2] -= 1
        return entry[2] >= 0

    def stamp(self, now: float) -> None:
        """Stamp the resets since the last call with ``now``; forget the expired ones."""
        ids = self.ids
        if self._unstamped:
            self._unstamped = False
            for stream_id in reversed(ids):
                entry = ids[stream_id]
                if entry[0] != _UNSTAMPED:
                    break
                entry[0] = now
        if ids:
            horizon = now - self.ttl
            while ids:
                oldest = next(iter(ids))
                if ids[oldest][0] >= horizon:
                    break
                del ids[oldest]
