"""The token bucket: ``burst`` whole tokens, refilled one at a time at ``rate`` per second.

Sans-IO: every method takes the caller's ``now``, so the same arithmetic serves the
HTTP/2 core's budgets (on the ``now`` a connection is fed) and the worker's rate-limited
lanes (on anyio's clock, virtual or not). It imports nothing.

Tokens are whole: the bucket counts the refills due since its ``stamp`` (the ``k``-th at
``stamp + k / rate``) rather than adding elapsed time as a float. Adding floats can leave a
bucket at 0.9999999 tokens, so that a caller waits ``(1 - tokens) / rate``, a time so short
that the clock does not move when it is added: a virtual clock then never reaches the
token and the caller spins. Counting refills, a caller waits until the next refill's own
time (:meth:`TokenBucket.next_refill`), and waking at it earns that refill whatever the
clock's rounding reads. A full bucket earns nothing: its count restarts at ``now`` (the
time it spends full is lost, as in any token bucket).
"""

from __future__ import annotations

from typing import NamedTuple

__all__ = ["Refill", "TokenBucket"]


class Refill(NamedTuple):
    """The next refill of a bucket that ran dry: when it is due, and which one it is."""

    #: When it is due, on the caller's clock.
    at: float
    #: The count of refills it belongs to (its ``stamp``) and its number in that count.
    stamp: float
    number: int


class TokenBucket:
    """``burst`` whole tokens, starting full, refilled at ``rate`` tokens per second."""

    __slots__ = ("_burst", "_rate", "_refills", "_stamp", "_tokens")

    def __init__(self, burst: int, rate: float) -> None:
        self._burst = burst
        self._rate = rate
        self._tokens = burst
        # When the count of refills started (the bucket was last full), and how many of
        # them are in ``_tokens`` already.
        self._stamp: float | None = None
        self._refills = 0

    def tokens(self, now: float) -> int:
        """The whole tokens there at ``now`` (below 0 after :meth:`spend` overdrew it)."""
        self._refill(now)
        return self._tokens

    def take(self, now: float, wanted: int, due: Refill | None = None) -> int:
        """Take ``min(wanted, tokens)`` tokens at ``now``; return how many (0 if none).

        ``due``, the :meth:`next_refill` the caller waited for, is earned even if ``now``,
        rounded, reads a hair before it (unless the bucket filled up meanwhile).
        """
        earned = 0
        if due is not None and due.stamp == self._stamp:
            earned = due.number
        self._refill(now, earned)
        granted = min(wanted, self._tokens) if self._tokens > 0 else 0
        self._tokens -= granted
        return granted

    def spend(self, now: float) -> bool:
        """Spend one token at ``now``, going below zero if need be; False once none is left
        (the budget is used up)."""
        self._refill(now)
        self._tokens -= 1
        return self._tokens > 0

    def give(self, now: float, count: int = 1) -> None:
        """Return ``count`` tokens at ``now`` (up to ``burst``)."""
        if count > 0:
            self._refill(now)
            self._tokens = min(self._burst, self._tokens + count)
            self._refill(now)  # full again: the count of refills restarts now

    def next_refill(self) -> Refill:
        """When the next token is due (after a :meth:`take` or :meth:`tokens` call)."""
        stamp = self._stamp
        assert stamp is not None  # set by the first _refill
        index = self._refills + 1
        return Refill(stamp + index / self._rate, stamp, index)

    def _refill(self, now: float, earned: int = 0) -> None:
        """Add the refills due by ``now`` (at least ``earned`` of them) to the tokens."""
        if self._stamp is not None and self._tokens < self._burst:
            earned = max(earned, int((now - self._stamp) * self._rate))
            if earned > self._refills:
                self._tokens = min(self._burst, self._tokens + earned - self._refills)
                self._refills = earned
        if self._stamp is None or self._tokens >= self._burst:
            self._stamp, self._refills = now, 0
