"""A TCP forwarding proxy on loopback that delays each direction by a fixed time.

Usage: ``python benchmarks/_latency_proxy.py HOST:PORT DELAY_MS`` prints ``PORT`` (the
port it listens on, on 127.0.0.1) on one line, then forwards every connection to
``HOST:PORT`` until its stdin closes.

Each chunk read from one side is written to the other ``DELAY_MS`` after it arrived, in
order: a propagation delay (what a network between two machines adds to every round trip,
twice), with no bandwidth limit and no reordering. Delivery times are kept per direction,
so a chunk never waits for the one before it longer than that one's own delay.
"""

from __future__ import annotations

import math
import sys

import anyio
import anyio.abc
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

_CHUNK = 65536


async def _read(
    source: anyio.abc.SocketStream, chunks: MemoryObjectSendStream[tuple[float, bytes]]
) -> None:
    async with chunks:
        try:
            while True:
                data = await source.receive(_CHUNK)
                await chunks.send((anyio.current_time(), data))
        except (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError):
            return


async def _write(
    sink: anyio.abc.SocketStream,
    chunks: MemoryObjectReceiveStream[tuple[float, bytes]],
    delay: float,
) -> None:
    async with chunks:
        try:
            async for arrived, data in chunks:
                wait = arrived + delay - anyio.current_time()
                if wait > 0:
                    await anyio.sleep(wait)
                await sink.send(data)
            await sink.send_eof()
        except (anyio.BrokenResourceError, anyio.ClosedResourceError):
            return


async def _pipe(client: anyio.abc.SocketStream, host: str, port: int, delay: float) -> None:
    async with (
        client,
        await anyio.connect_tcp(host, port) as upstream,
        anyio.create_task_group() as tg,
    ):
        for source, sink in ((client, upstream), (upstream, client)):
            send, receive = anyio.create_memory_object_stream[tuple[float, bytes]](math.inf)
            tg.start_soon(_read, source, send)
            tg.start_soon(_write, sink, receive, delay)


async def main(target: str, delay_ms: float) -> None:
    host, _, port = target.rpartition(":")
    delay = delay_ms / 1000.0
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
    print(listener.extra(anyio.abc.SocketAttribute.local_port), flush=True)

    async def stdin_closed() -> None:
        await anyio.to_thread.run_sync(sys.stdin.read, abandon_on_cancel=True)
        tg.cancel_scope.cancel()

    async with listener, anyio.create_task_group() as tg:
        tg.start_soon(stdin_closed)
        await listener.serve(lambda stream: _pipe(stream, host, int(port), delay))


if __name__ == "__main__":
    anyio.run(main, sys.argv[1], float(sys.argv[2]))
