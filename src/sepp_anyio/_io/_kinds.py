"""What an HTTP/2 connection may ask of a byte stream beyond :class:`anyio.abc.ByteStream`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["EagerStream", "PumpStream"]


@runtime_checkable
class EagerStream(Protocol):
    """A byte stream that can write without an await when the kernel takes the bytes at
    once: ours on asyncio and on trio."""

    def write_now(self, data: bytes) -> bool:
        """Write ``data`` (what the kernel does not take now stays queued, in order);
        True when nothing is left to wait for."""
        ...

    async def drained(self) -> None:
        """Wait until what :meth:`write_now` queued is written."""
        ...

    @property
    def writing_paused(self) -> bool:
        """Whether bytes :meth:`write_now` queued wait for room in the kernel."""
        ...


@runtime_checkable
class PumpStream(Protocol):
    """A byte stream that can hand its input to a function as it arrives: ours on
    asyncio, where that function runs in asyncio's read callback, outside any task, and
    ours on trio, where it runs in the reading task's receive loop."""

    async def pump(self, handler: Callable[[bytes], bool]) -> None:
        """Give input to ``handler`` until it returns False."""
        ...
