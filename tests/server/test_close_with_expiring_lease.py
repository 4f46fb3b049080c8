"""Closing the engine while a lease expires never fails the close.

Regression: the timer could be woken (a lease of 1 ms expiring) just as the engine closed;
the wake-up's own scope swallowed the delivery of the shutdown's cancellation, so the timer
swept once more and submitted the expiry to a committer that no longer took writes, and
leaving the engine raised ``UNAVAILABLE: server is shut down`` (about one close in 300).
"""

from __future__ import annotations

import pytest

from sepp_anyio import EnqueueRequest
from sepp_anyio.testing import open_in_memory_client

pytestmark = pytest.mark.anyio

CLOSES = 600


async def test_closing_as_a_lease_expires_never_raises() -> None:
    for _ in range(CLOSES):
        async with open_in_memory_client() as (client, _):
            await client.enqueue(EnqueueRequest("q", "t"))
            [_job] = await client.reserve(["q"], lease=0.001, wait=0)
