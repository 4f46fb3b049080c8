"""Bounded waits for conditions that no event reports."""

from __future__ import annotations

from collections.abc import Callable

import anyio
import anyio.to_thread

__all__ = ["eventually"]

_INTERVAL = 0.01


async def eventually(
    condition: Callable[[], bool], *, within: float, what: str, blocking: bool = False
) -> None:
    """Return once ``condition()`` holds; fail with TimeoutError after ``within`` seconds.

    For state that nothing signals: a worker's counters, a lease expiry updated by the
    heartbeat, the server's database (``blocking=True`` runs the check in a thread), the
    transport's connection table.  The check runs every 10 ms; the bound, not the interval,
    is what the test relies on.
    """
    try:
        with anyio.fail_after(within):
            # Polled on purpose: no event reports these conditions.
            while not (  # noqa: ASYNC110
                await anyio.to_thread.run_sync(condition) if blocking else condition()
            ):
                await anyio.sleep(_INTERVAL)
    except TimeoutError:
        raise TimeoutError(f"timed out after {within}s waiting for {what}") from None
