"""A loopback TCP fault proxy for the reliability tests.

::

    with FaultProxy(upstream_port) as proxy:          # its own thread and asyncio loop
        async with sepp_anyio.connect(proxy.address) as client: ...
        proxy.hold("down")                            # park server->client bytes
        await anyio.to_thread.run_sync(proxy.wait_held, "down")
        proxy.reset_all()                             # RST both sides of every connection

The proxy runs an anyio event loop (asyncio backend) in a background thread, so tests on
either backend use it alike.  Every control method is synchronous and thread-safe: it runs
in the proxy's loop through a blocking portal and returns once applied.  The ``wait_*``
methods block the calling thread (call them through ``anyio.to_thread.run_sync`` from an
event loop) until a condition holds, and raise ``TimeoutError`` after a bound.

Faults (each connection is a *link*: client socket <-> upstream socket; ``"up"`` is the
client->server direction, ``"down"`` server->client):

* ``set_latency(seconds)``: every chunk is delivered that much later (both directions).
* ``set_bandwidth(bytes_per_second)``: each direction of each link is capped.
* ``hold(direction)`` / ``release()``: bytes of the links open *now* are read but parked
  (``held`` counts them) instead of forwarded; release forwards them in order.
* ``blackhole()``: the links open now go half-open: both sides stay connected, everything
  is read and dropped, nothing is sent, and an end of stream from either side is not
  passed on (a NAT that lost its mapping).  New links are unaffected.
* ``reset_all()``: every link is closed with RST (``SO_LINGER`` 0) on both sides.

A connection whose upstream refuses (the server is down) is reset at once.

Only 127.0.0.1 is used, for the listener and the upstream.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
import time
from collections import deque
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from types import TracebackType
from typing import Literal, Self, TypeVar

import anyio
import anyio.abc
import anyio.from_thread

__all__ = ["Direction", "FaultProxy"]

Direction = Literal["up", "down"]
LOCALHOST = "127.0.0.1"
_CHUNK = 1 << 16
_LINGER_RST = struct.pack("ii", 1, 0)
T = TypeVar("T")


def _rst(stream: anyio.abc.SocketStream) -> None:
    """Arrange for closing ``stream`` to send RST instead of FIN."""
    with contextlib.suppress(OSError):
        raw = stream.extra(anyio.abc.SocketAttribute.raw_socket)
        raw.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _LINGER_RST)


@dataclass(eq=False)
class _Pipe:
    """One direction of a link: a reader task queues chunks, a writer task delivers them."""

    direction: Direction
    queue: deque[tuple[float, bytes | None]] = field(default_factory=deque)
    readable: anyio.Event = field(default_factory=anyio.Event)
    held: bool = False
    released: anyio.Event = field(default_factory=anyio.Event)
    held_bytes: int = 0
    forwarded: int = 0
    eof_sent: bool = False

    def push(self, at: float, data: bytes | None) -> None:
        self.queue.append((at, data))
        self.readable.set()


@dataclass(eq=False)
class _Link:
    index: int
    client: anyio.abc.SocketStream
    upstream: anyio.abc.SocketStream
    scope: anyio.CancelScope = field(default_factory=anyio.CancelScope)
    up: _Pipe = field(default_factory=lambda: _Pipe("up"))
    down: _Pipe = field(default_factory=lambda: _Pipe("down"))
    blackholed: bool = False
    dropped: int = 0

    def pipe(self, direction: Direction) -> _Pipe:
        return self.up if direction == "up" else self.down

    def silent(self) -> bool:
        """Whether the link has gone half-open (may change across an await)."""
        return self.blackholed


class FaultProxy(AbstractContextManager["FaultProxy"]):
    """A TCP proxy from ``127.0.0.1:<port>`` to ``127.0.0.1:<upstream_port>`` with faults.

    Args:
        upstream_port: where to forward; may be changed later (:attr:`upstream_port`),
            e.g. after the server restarted on another port.
    """

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.port = 0
        self.latency = 0.0
        self.bandwidth: float | None = None
        self._links: dict[int, _Link] = {}
        self._accepted = 0
        self._changed = threading.Condition()
        self._portal_cm: AbstractContextManager[anyio.from_thread.BlockingPortal] | None = None
        self._portal: anyio.from_thread.BlockingPortal | None = None
        self._scope: anyio.CancelScope | None = None
        self._errors: list[BaseException] = []

    # ------------------------------------------------------------------ lifecycle

    @property
    def address(self) -> str:
        return f"{LOCALHOST}:{self.port}"

    def start(self) -> None:
        cm = anyio.from_thread.start_blocking_portal("asyncio")
        portal = cm.__enter__()
        self._portal_cm, self._portal = cm, portal
        listener = portal.call(self._listen)
        self.port = listener.extra(anyio.abc.SocketAttribute.local_port)
        portal.start_task_soon(self._serve, listener)

    def stop(self) -> None:
        portal, cm = self._portal, self._portal_cm
        if portal is None or cm is None:
            return
        portal.call(self._shutdown)
        self._portal = self._portal_cm = None
        cm.__exit__(None, None, None)
        if self._errors:
            raise self._errors[0]

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def _call(self, fn: Callable[[], T]) -> T:
        portal = self._portal
        if portal is None:
            raise RuntimeError("the proxy is not running")

        async def run() -> T:
            return fn()

        return portal.call(run)

    # ------------------------------------------------------------------ controls

    def set_latency(self, seconds: float) -> None:
        """Delay every chunk by ``seconds`` from now on (both directions)."""
        self.latency = seconds

    def set_bandwidth(self, bytes_per_second: float | None) -> None:
        """Cap each direction of each link (None: no cap)."""
        self.bandwidth = bytes_per_second

    def hold(self, direction: Direction) -> None:
        """Park the bytes of every open link going ``direction`` (see the module docs)."""

        def apply() -> None:
            for link in self._links.values():
                pipe = link.pipe(direction)
                if not pipe.held:
                    pipe.held = True
                    pipe.released = anyio.Event()
                    pipe.held_bytes = sum(len(data) for _, data in pipe.queue if data)

        self._call(apply)

    def release(self) -> None:
        """Forward every parked byte, in order."""

        def apply() -> None:
            for link in self._links.values():
                for pipe in (link.up, link.down):
                    pipe.held = False
                    pipe.released.set()

        self._call(apply)

    def blackhole(self) -> int:
        """Make every open link half-open; returns how many there were."""

        def apply() -> int:
            for link in self._links.values():
                link.blackholed = True
                for pipe in (link.up, link.down):
                    pipe.queue.clear()
                    pipe.readable.set()
            self._notify()
            return len(self._links)

        return self._call(apply)

    def reset_all(self) -> int:
        """Close every link with RST on both sides; returns how many there were."""

        def apply() -> int:
            links = list(self._links.values())
            for link in links:
                self._reset(link)
            return len(links)

        return self._call(apply)

    # ------------------------------------------------------------------ observation

    @property
    def accepted(self) -> int:
        """Connections accepted so far."""
        with self._changed:
            return self._accepted

    @property
    def open_links(self) -> int:
        with self._changed:
            return len(self._links)

    def held(self, direction: Direction) -> int:
        """Bytes parked by :meth:`hold` in ``direction``, over the open links."""
        with self._changed:
            return sum(link.pipe(direction).held_bytes for link in self._links.values())

    def dropped(self) -> int:
        """Bytes read and dropped by blackholed links that are still open."""
        with self._changed:
            return sum(link.dropped for link in self._links.values())

    def wait_until(
        self, condition: Callable[[FaultProxy], bool], *, timeout: float = 10.0, what: str = ""
    ) -> None:
        """Block until ``condition(self)`` holds (checked whenever the proxy's state changes)."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while True:
                if self._errors:
                    raise self._errors[0]
                if condition(self):
                    return
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise TimeoutError(f"the proxy did not reach {what or condition} in {timeout}s")
                self._changed.wait(remaining)

    def wait_held(self, direction: Direction, at_least: int = 1, timeout: float = 10.0) -> None:
        """Block until at least ``at_least`` bytes are parked going ``direction``."""
        self.wait_until(
            lambda proxy: proxy.held(direction) >= at_least,
            timeout=timeout,
            what=f"{at_least} held byte(s) going {direction}",
        )

    def wait_accepted(self, count: int, timeout: float = 10.0) -> None:
        """Block until ``count`` connections have been accepted in total."""
        self.wait_until(
            lambda proxy: proxy.accepted >= count,
            timeout=timeout,
            what=f"{count} accepted connection(s)",
        )

    def _notify(self) -> None:
        with self._changed:
            self._changed.notify_all()

    # ------------------------------------------------------------------ the loop

    async def _listen(self) -> anyio.abc.SocketListener:
        listener = await anyio.create_tcp_listener(local_host=LOCALHOST, local_port=0)
        [single] = listener.listeners
        assert isinstance(single, anyio.abc.SocketListener)
        return single

    async def _serve(self, listener: anyio.abc.SocketListener) -> None:
        try:
            with anyio.CancelScope() as self._scope:
                async with listener, anyio.create_task_group() as tg:
                    while True:
                        client = await listener.accept()
                        with self._changed:
                            index = self._accepted
                            self._accepted += 1
                            self._changed.notify_all()
                        tg.start_soon(self._handle, index, client)
        except BaseException as exc:  # surfaced by stop() / wait_until()
            if not isinstance(exc, anyio.get_cancelled_exc_class()):
                self._errors.append(exc)
                self._notify()
            raise

    async def _shutdown(self) -> None:
        for link in list(self._links.values()):
            self._reset(link)
        if self._scope is not None:
            self._scope.cancel()

    async def _handle(self, index: int, client: anyio.abc.SocketStream) -> None:
        try:
            upstream = await anyio.connect_tcp(LOCALHOST, self.upstream_port)
        except OSError:
            # Nothing listens upstream (the server is down): refuse the client the same way.
            _rst(client)
            await client.aclose()
            return
        link = _Link(index, client, upstream)
        with self._changed:
            self._links[index] = link
            self._changed.notify_all()
        try:
            with link.scope:
                async with anyio.create_task_group() as tg:
                    tg.start_soon(self._read, link, client, link.up)
                    tg.start_soon(self._read, link, upstream, link.down)
                    tg.start_soon(self._write, link, upstream, link.up)
                    tg.start_soon(self._write, link, client, link.down)
        finally:
            with self._changed:
                self._links.pop(index, None)
                self._changed.notify_all()
            with anyio.CancelScope(shield=True):
                await client.aclose()
                await upstream.aclose()

    def _reset(self, link: _Link) -> None:
        _rst(link.client)
        _rst(link.upstream)
        link.scope.cancel()

    async def _read(self, link: _Link, source: anyio.abc.SocketStream, pipe: _Pipe) -> None:
        while True:
            try:
                data: bytes | None = await source.receive(_CHUNK)
            except (anyio.EndOfStream, anyio.ClosedResourceError):
                data = None
            except (anyio.BrokenResourceError, OSError):
                # Reset by the peer: pass the reset on (unless the link is half-open).
                if not link.blackholed:
                    self._reset(link)
                return
            if link.blackholed:
                if data is None:
                    # Half-open: the other side is not told. Keep the link until the test
                    # ends or the other side goes away by itself.
                    return
                with self._changed:
                    link.dropped += len(data)
                    self._changed.notify_all()
                continue
            pipe.push(time.monotonic() + self.latency, data)
            if pipe.held and data is not None:
                with self._changed:
                    pipe.held_bytes += len(data)
                    self._changed.notify_all()
            if data is None:
                return

    async def _write(self, link: _Link, sink: anyio.abc.SocketStream, pipe: _Pipe) -> None:
        while True:
            while not pipe.queue:
                pipe.readable = anyio.Event()
                await pipe.readable.wait()
            if link.blackholed:
                pipe.queue.clear()
                continue
            if pipe.held:
                await pipe.released.wait()
                continue
            at, data = pipe.queue.popleft()
            delay = at - time.monotonic()
            if delay > 0:
                await anyio.sleep(delay)
            if link.silent():
                continue
            if data is None:
                # A clean end of stream on one side: pass it on; the link ends once both
                # directions have ended.
                with contextlib.suppress(OSError, anyio.BrokenResourceError):
                    await sink.send_eof()
                pipe.eof_sent = True
                if self._other(link, pipe).eof_sent:
                    link.scope.cancel()
                return
            try:
                await sink.send(data)
            except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
                # The peer is gone: reset the other side too, as a router would.
                self._reset(link)
                return
            with self._changed:
                pipe.forwarded += len(data)
                if pipe.held_bytes:
                    pipe.held_bytes = max(0, pipe.held_bytes - len(data))
                self._changed.notify_all()
            bandwidth = self.bandwidth
            if bandwidth:
                await anyio.sleep(len(data) / bandwidth)

    @staticmethod
    def _other(link: _Link, pipe: _Pipe) -> _Pipe:
        return link.down if pipe is link.up else link.up
