"""Byte streams on each backend's own primitives, for both roles' HTTP/2 connections.

Private. :mod:`._asyncio_stream` (asyncio's transports and protocols) and
:mod:`._trio_stream` (trio's low-level socket waits) offer the :class:`anyio.abc.ByteStream`
contract at a fraction of the cost per read and per write of anyio's own streams;
:mod:`._kinds` names what the connections use beyond that contract, :mod:`._native`
gives both roles the running backend's own clock, wake-ups, cancel scopes and checkpoint,
and :mod:`._deadlines` keeps many deadlines with one task (a client's calls, a worker's
settles).
Neither stream module is imported here: trio is an optional dependency, and each is only
needed on its backend.
"""

from __future__ import annotations

from ._kinds import EagerStream as EagerStream
from ._kinds import PumpStream as PumpStream

__all__ = ["EagerStream", "PumpStream"]
