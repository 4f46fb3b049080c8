"""What the pump tests of both streams share (test_asyncio_stream.py, test_trio_stream.py)."""

from __future__ import annotations

from collections.abc import Callable, Sized

import anyio
import anyio.abc

from sepp_anyio._io import PumpStream
from tests.reliability._wait import eventually


async def pump_one_then_stop(
    ours: PumpStream,
    peer: anyio.abc.ByteStream,
    handler: Callable[[bytes], bool],
    seen: Sized,
) -> None:
    """Pump ``ours`` into ``handler`` while ``peer`` sends ``b"one"`` and then, once
    ``seen`` (what the handler records) has one entry, ``b"stop"``, for which the handler
    must return False; returns when the pump has."""
    async with anyio.create_task_group() as tg:

        async def pump() -> None:
            with anyio.fail_after(10):
                await ours.pump(handler)

        tg.start_soon(pump)
        await peer.send(b"one")
        await eventually(lambda: len(seen) == 1, within=10, what="the first read")
        await peer.send(b"stop")
