"""What the connection remembers about closed streams: those it reset, and how the
others ended.

After we send RST_STREAM, the peer may already have sent frames on the stream that it
cannot take back; RFC 9113 section 5.1 says to ignore them (decoding HEADERS so the
HPACK state stays in sync, and counting DATA against the connection window). To tell
such late frames from a peer that keeps talking on a finished stream, the ids of the
streams we reset are remembered (:class:`ResetStreams`), for ``ttl`` seconds of the
caller's clock and at most ``limit`` of them (the oldest are forgotten first), so the
memory for closed streams is bounded on a connection that lives for days.

For each one we also keep what the peer could still legitimately have in flight: the
rest of the stream's receive window, and two header blocks (response headers and
trailers). Late frames within that are normal after a cancellation and cost nothing;
beyond it they are the peer's abuse (the connection counts them as glitches), so a
storm of cancelled calls with large responses in flight never trips our own budget.

The connection has no clock: a reset is stamped with the ``now`` of the next
:meth:`ResetStreams.stamp` (the connection calls it at the start of each
``receive_data``), which is when late frames can first arrive.

Streams that closed otherwise, by both sides' END_STREAM or by the peer's RST_STREAM,
are remembered by number only (:class:`EndedStreams`: the most recent ``limit``), for
two things section 5.1 tells apart: how the stream ended (HEADERS or DATA after the
peer's END_STREAM is a connection error of type STREAM_CLOSED, after its RST_STREAM a
stream error), and the few RST_STREAM/WINDOW_UPDATE frames the peer may still send "for
a short period" after our END_STREAM or answering frames of ours still in flight. A
stream forgotten by both is judged by the highest stream id alone (see the connection).
"""

from __future__ import annotations

__all__ = ["EndedStreams", "ResetStreams"]

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


class EndedStreams:
    """Streams that closed without a reset of ours, oldest first: whether each ended
    normally (both END_STREAMs) or by the peer's RST_STREAM, and how many more
    RST_STREAM/WINDOW_UPDATE frames the peer may still send on it."""

    __slots__ = ("ids", "limit")

    def __init__(self, *, limit: int) -> None:
        self.limit = limit
        #: Stream id -> late frames still allowed * 2, + 1 if the peer reset the stream
        #: (one int per stream: this is on the path of every completed call).
        self.ids: dict[int, int] = {}

    def __len__(self) -> int:
        return len(self.ids)

    def add(self, stream_id: int, late_frames: int, *, peer_reset: bool) -> None:
        """Remember ``stream_id``; forget the oldest one if over the limit."""
        ids = self.ids
        ids[stream_id] = late_frames << 1 | peer_reset
        if len(ids) > self.limit:
            del ids[next(iter(ids))]

    def ended_normally(self, stream_id: int) -> bool | None:
        """True if both sides ended ``stream_id`` with END_STREAM, False if the peer
        reset it, None if it is not remembered."""
        entry = self.ids.get(stream_id)
        if entry is None:
            return None
        return not entry & 1

    def late_frame(self, stream_id: int) -> bool:
        """A RST_STREAM or WINDOW_UPDATE arrived on ``stream_id``: whether the peer may
        still send it (each one uses up one of those allowed)."""
        ids = self.ids
        entry = ids.get(stream_id)
        if entry is None or entry < 2:
            return False
        ids[stream_id] = entry - 2
        return True
