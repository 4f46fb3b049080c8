"""Network tests on virtual time: the backends, and a raw peer that notes when frames arrive.

The server, the raw peers and our client all run in the test's own event loop, on loopback
sockets.  On trio the clock is ``MockClock(autojump_threshold=0)``; on asyncio it is
:class:`tests.worker._vtime.VirtualTimeLoop`, its twin.  Either jumps straight to the next
timer once every task waits, so the server's timeouts (minutes, an hour) pass at once and
in the same order on every run.  Loopback delivers a sent segment to the other socket
within the sending system call, so "every task waits" means nothing is in flight: a jump
never overtakes bytes on their way.
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest
import trio.testing
from hyperframe.frame import Frame, GoAwayFrame, PingFrame

from tests.http2._support import Peer
from tests.worker._vtime import VirtualTimeLoop

from ._harness import Attacker

__all__ = ["VIRTUAL_BACKENDS", "Timeline", "virtual_backend"]

VIRTUAL_BACKENDS = [
    pytest.param(("asyncio", {"loop_factory": VirtualTimeLoop}), id="asyncio-vtime"),
    pytest.param(("trio", {}), id="trio-mockclock"),
]


def virtual_backend(request: pytest.FixtureRequest) -> tuple[str, dict[str, Any]]:
    """The body of a module's ``anyio_backend`` fixture over :data:`VIRTUAL_BACKENDS`."""
    backend, options = request.param
    if backend == "trio":
        # A fresh clock per test: a MockClock keeps its time across runs.
        options = {"clock": trio.testing.MockClock(autojump_threshold=0)}
    return backend, options


class Timeline:
    """Reads an :class:`Attacker`'s connection on virtual time, noting each frame's arrival.

    Args:
        attacker: the raw peer.
        ack_pings: answer the server's PINGs (a live peer) or not (a dead one).
    """

    def __init__(self, attacker: Attacker, *, ack_pings: bool) -> None:
        self.attacker = attacker
        self.ack_pings = ack_pings
        #: ``(virtual time, frame)`` for every frame read, in order.
        self.arrivals: list[tuple[float, Frame]] = []
        #: When the server closed the connection (virtual time), or None.
        self.eof_at: float | None = None

    async def run_until(self, deadline: float, *, stop_at_goaway: bool = False) -> None:
        """Read until EOF, ``deadline`` (virtual time), or (if asked) the first GOAWAY.

        Every read is bounded by the deadline; the loop by the deadline and EOF.
        """
        attacker = self.attacker
        while self.eof_at is None:
            now = anyio.current_time()
            if now >= deadline or (stop_at_goaway and self.goaways()):
                return
            seen = len(attacker.frames)
            if not await attacker.read(deadline - now):
                self.eof_at = anyio.current_time()
            at = anyio.current_time()
            for frame in attacker.frames[seen:]:
                self.arrivals.append((at, frame))
                if (
                    self.ack_pings
                    and isinstance(frame, PingFrame)
                    and "ACK" not in frame.flags
                    and not await attacker.send(Peer.ping(bytes(frame.opaque_data), ack=True))
                ):
                    self.eof_at = anyio.current_time()

    def goaways(self) -> list[tuple[float, GoAwayFrame]]:
        return [(at, f) for at, f in self.arrivals if isinstance(f, GoAwayFrame)]

    def pings(self) -> list[tuple[float, PingFrame]]:
        return [
            (at, f) for at, f in self.arrivals if isinstance(f, PingFrame) and "ACK" not in f.flags
        ]
