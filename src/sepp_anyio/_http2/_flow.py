"""Flow control (RFC 9113 section 5.2 and 6.9): receive windows and when to refund them.

Each direction of each stream, and the connection as a whole, has a window. On the
*send* side it is a plain integer (the connection keeps one per stream and one for the
connection): DATA may carry at most the smaller of the two, WINDOW_UPDATE and a change
of SETTINGS_INITIAL_WINDOW_SIZE move it, and no window may exceed 2**31 - 1
(:func:`grow`).

On the *receive* side the peer may send up to ``available`` bytes; each DATA frame
(padding included) uses some up, and the caller hands bytes back once it has consumed
them (``Connection.acknowledge_received_data``). The window-update policy is here in
:class:`InboundWindow`: credit is returned to the peer once half of the window has been
consumed, in one WINDOW_UPDATE, so a steady stream of small messages costs one update
per half window rather than one per frame, and a sender is never stalled for long
(half a window is always still open to it when the update leaves).
"""

from __future__ import annotations

__all__ = ["DEFAULT_WINDOW", "MAX_WINDOW", "InboundWindow", "grow"]

#: The largest window RFC 9113 allows.
MAX_WINDOW = (1 << 31) - 1
#: The initial window of every stream and of the connection (section 6.9.2).
DEFAULT_WINDOW = 65535


def grow(window: int, delta: int) -> int | None:
    """``window + delta``, or None if that exceeds 2**31 - 1 (a FLOW_CONTROL_ERROR)."""
    window += delta
    return None if window > MAX_WINDOW else window


class InboundWindow:
    """What the peer may still send us, and what we owe it back.

    Invariant: ``available + unacked + in_use == size``, where ``in_use`` is what was
    received and not yet acknowledged by the caller; the peer can never be granted more
    than ``size`` in total.
    """

    __slots__ = ("available", "size", "threshold", "unacked")

    def __init__(self, size: int) -> None:
        self.size = size
        self.available = size
        self.unacked = 0
        self.threshold = max(1, size >> 1)

    def receive(self, length: int) -> bool:
        """Take ``length`` flow-controlled bytes; False if the peer overran the window."""
        if length > self.available:
            return False
        self.available -= length
        return True

    def consume(self, length: int) -> int:
        """The caller consumed ``length`` bytes: the increment to send now, or 0.

        More than was received is clamped, so a caller that acknowledges twice cannot
        grant the peer more than the window.
        """
        room = self.size - self.available - self.unacked
        if length > room:
            length = room
        unacked = self.unacked + length
        if unacked < self.threshold:
            self.unacked = unacked
            return 0
        self.unacked = 0
        self.available += unacked
        return unacked
