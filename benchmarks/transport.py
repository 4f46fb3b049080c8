"""Transport benchmark: unary calls/s and client CPU against one grpclib server.

Usage: ``python benchmarks/transport.py [--calls N] [--rounds R]``

Compares, in one run and against the same grpclib server (its own process):

* ``sepp-anyio/asyncio`` and ``sepp-anyio/trio``: our anyio + h2 channel with
  the unchanged betterproto2 stub;
* ``grpclib``: grpclib's own asyncio Channel with the same stub;
* ``grpcio-aio``: grpcio's C-core asyncio channel with protobuf messages;
* ``floor/asyncio`` and ``floor/trio``: the floor, not a client: the same request and
  response bytes as one of our steady-state calls (HTTP/2 frames made by our own core),
  exchanged over a plain anyio socket stream with a scripted peer (its own process,
  writing the response in the two writes a grpclib server makes: headers and message,
  then trailers), with no HTTP/2 or gRPC logic at all. How far above it each client
  is, is what the HTTP/2 and gRPC layers cost.
* ``connection/asyncio`` and ``connection/trio``: our channel's connection and HTTP/2 core
  alone, not a client: each call opens a stream on the channel's connection with the
  stub's headers, sends the same request, waits for the end of the response, checks its
  status and decodes the reply, with no generated stub, no ``Stream``, no deadline and no
  resend. The distance from ``sepp-anyio/<backend>`` is what the stub and the ``Stream``
  cost; from ``floor/<backend>``, what the connection and the HTTP/2 core cost.
* ``ceiling/blocking``: the ceiling of the sequential column, not a client: against the
  same grpclib server, after a handshake and two calls through our own core, each call
  sends the steady-state request bytes of that core (only the stream id changes) on a
  blocking socket, with no event loop, and reads until the response's trailers; nothing
  is decoded. No client can make sequential calls to that server faster on the same
  machine, so its ratio to grpclib is the most any client's sequential ratio can be.

Each client runs in a fresh subprocess per round (so CPU time is its own);
rounds interleave the clients so that machine noise hits all of them alike,
and the best round of each client is reported. Columns: sequential calls/s,
calls/s with 32 and with 256 concurrent callers, and client CPU seconds per
10,000 sequential calls; ratios are against grpclib.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import socket
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Coroutine
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
CLIENTS = ["grpclib", "sepp-anyio/asyncio", "sepp-anyio/trio", "grpcio-aio"]
FLOORS = ["floor/asyncio", "floor/trio"]
# Our connection and HTTP/2 core without the stub and the Stream (see the module docs).
LAYERS = ["connection/asyncio", "connection/trio"]
# Sequential calls only (no event loop to run concurrent callers on).
CEILINGS = ["ceiling/blocking"]
CONCURRENCY = (32, 256)


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def _measure(call: Callable[[], Awaitable[Any]], calls: int, spawn: Any) -> dict[str, float]:
    for _ in range(200):  # warm up: connection, caches
        await call()
    started, cpu = time.perf_counter(), _cpu()
    for _ in range(calls):
        await call()
    elapsed, cpu_used = time.perf_counter() - started, _cpu() - cpu
    result = {"seq": calls / elapsed, "cpu_per_10k": cpu_used / calls * 10_000}
    for concurrency in CONCURRENCY:
        per_task = max(1, calls // concurrency)

        async def worker(per_task: int = per_task) -> None:
            for _ in range(per_task):
                await call()

        started = time.perf_counter()
        await spawn(worker, concurrency)
        result[f"c{concurrency}"] = per_task * concurrency / (time.perf_counter() - started)
    return result


async def _spawn_anyio(worker: Callable[[], Coroutine[Any, Any, None]], n: int) -> None:
    import anyio

    async with anyio.create_task_group() as tg:
        for _ in range(n):
            tg.start_soon(worker)


async def _spawn_asyncio(worker: Callable[[], Coroutine[Any, Any, None]], n: int) -> None:
    await asyncio.gather(*(worker() for _ in range(n)))


def exchange_bytes() -> tuple[bytes, bytes, bytes]:
    """One steady-state unary Ack call's bytes, made by our own HTTP/2 core: the request
    (HEADERS + DATA), the response's headers and message, and its trailers.

    The second call on a connection is taken: by then the HPACK tables hold the
    constant headers, as they do for every later call.
    """
    from sepp_anyio import _http2
    from sepp_anyio._grpc import encode_message
    from sepp_anyio._proto.sepp import v1 as pb
    from sepp_anyio._wire._codec import encode

    client = _http2.Connection(client_side=True)
    server = _http2.Connection(client_side=False)
    server.receive_data(client.data_to_send(), 0.0)
    client.receive_data(server.data_to_send(), 0.0)
    server.receive_data(client.data_to_send(), 0.0)
    headers = [
        (b":method", b"POST"),
        (b":scheme", b"http"),
        (b":path", b"/sepp.v1.QueueService/Ack"),
        (b":authority", b"127.0.0.1:50051"),
        (b"te", b"trailers"),
        (b"content-type", b"application/grpc+proto"),
        (b"user-agent", b"sepp-anyio"),
        (b"grpc-timeout", b"30S"),
    ]
    request_body = encode_message(encode(pb.AckRequest(job_id="bench", attempt=1)))
    reply_body = encode_message(encode(pb.AckResponse(job_id="bench")))
    exchange = (b"", b"", b"")
    for _ in range(2):
        stream_id = client.open_stream(headers, cache_key="ack")
        client.send_data(stream_id, request_body, end_stream=True)
        request = client.data_to_send()
        server.receive_data(request, 0.0)
        server.send_headers(
            stream_id, [(b":status", b"200"), (b"content-type", b"application/grpc")]
        )
        server.send_data(stream_id, reply_body)
        first = server.data_to_send()
        server.send_headers(stream_id, [(b"grpc-status", b"0")], end_stream=True)
        trailers = server.data_to_send()
        client.receive_data(first + trailers, 0.0)
        server.release_stream(stream_id)
        exchange = (request, first, trailers)
    return exchange


def _blocking_ceiling(port: int, calls: int) -> dict[str, float]:
    """``ceiling/blocking`` (see the module docs): sequential calls/s and CPU per call."""
    from sepp_anyio import _http2
    from sepp_anyio._grpc import encode_message
    from sepp_anyio._proto.sepp import v1 as pb
    from sepp_anyio._wire._codec import encode

    headers = [
        (b":method", b"POST"),
        (b":scheme", b"http"),
        (b":path", b"/sepp.v1.QueueService/Ack"),
        (b":authority", f"127.0.0.1:{port}".encode()),
        (b"te", b"trailers"),
        (b"content-type", b"application/grpc+proto"),
        (b"user-agent", b"sepp-anyio"),
        (b"grpc-timeout", b"30S"),
    ]
    body = encode_message(encode(pb.AckRequest(job_id="bench", attempt=1)))
    # A connection window no run of this script uses up: no WINDOW_UPDATE is ever due.
    conn = _http2.Connection(client_side=True, connection_window=1 << 30)
    sock = socket.create_connection(("127.0.0.1", port))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.sendall(conn.data_to_send())
    request, stream_id = b"", 0
    for _ in range(2):  # the second call's bytes are those of every later one
        stream_id = conn.open_stream(headers, cache_key="ack")
        conn.send_data(stream_id, body, end_stream=True)
        request = conn.data_to_send()
        sock.sendall(request)
        ended = False
        while not ended:
            for event in conn.receive_data(sock.recv(65536), 0.0):
                ended = ended or (
                    isinstance(event, _http2.TrailersReceived) and event.stream_id == stream_id
                )
            sock.sendall(conn.data_to_send())
    template = bytearray(request)
    id_offsets = []  # where the stream id of each frame of the request is
    at = 0
    while at < len(template):
        if int.from_bytes(template[at + 5 : at + 9], "big") == stream_id:
            id_offsets.append(at + 5)
        at += 9 + int.from_bytes(template[at : at + 3], "big")
    pending = bytearray()

    def call() -> None:
        nonlocal stream_id
        stream_id += 2
        for offset in id_offsets:
            template[offset : offset + 4] = stream_id.to_bytes(4, "big")
        sock.sendall(template)
        while True:
            pending.extend(sock.recv(65536))
            while len(pending) >= 9:  # whole frames: the trailers are HEADERS + END_STREAM
                size = 9 + int.from_bytes(pending[:3], "big")
                if len(pending) < size:
                    break
                kind, flags = pending[3], pending[4]
                stream = int.from_bytes(pending[5:9], "big") & 0x7FFFFFFF
                del pending[:size]
                if kind == 0x1 and flags & 0x1 and stream == stream_id:
                    return

    for _ in range(200):
        call()
    started, cpu = time.perf_counter(), _cpu()
    for _ in range(calls):
        call()
    elapsed, cpu_used = time.perf_counter() - started, _cpu() - cpu
    sock.close()
    return {"seq": calls / elapsed, "cpu_per_10k": cpu_used / calls * 10_000}


def _connection_only(backend: str, port: int, calls: int) -> dict[str, float]:
    """``connection/<backend>`` (see the module docs): unary Acks made on the channel's
    connection directly, as ``Stream`` makes them when nothing goes wrong."""
    import anyio

    from sepp_anyio._grpc import encode_message, read_status
    from sepp_anyio._proto.sepp import v1 as pb
    from sepp_anyio._transport import Channel
    from sepp_anyio._wire._codec import decode, encode

    path = "/sepp.v1.QueueService/Ack"

    async def run() -> dict[str, float]:
        async with Channel("127.0.0.1", port) as channel:
            # The stub's, with timeout=30.0 (grpc-timeout 30S, through the HPACK table).
            headers, extra, key = channel.request_headers(path, 30.0, [])
            request = pb.AckRequest(job_id="bench", attempt=1)

            async def call() -> pb.AckResponse:
                conn = channel.ready_connection() or await channel.get_connection()
                if not conn.try_acquire_slot():
                    await conn.acquire_slot()
                state = conn.open_call(headers, extra, key, end_stream=False)
                body = encode_message(encode(request))
                conn.h2.send_data(state.stream_id, body, end_stream=True)
                if not conn.flush_now():
                    await conn.flush()
                while not state.ended:
                    if state.failure is not None:
                        raise state.failure
                    waiter = state.waiter = conn.native.waiter()
                    state.until_end = True
                    await waiter.wait()
                conn.release_call(state)
                assert state.trailers is not None
                read_status(state.trailers)
                reply: pb.AckResponse = decode(pb.AckResponse, state.decoder.pop() or b"")
                return reply

            return await _measure(call, calls, _spawn_anyio)

    return anyio.run(run, backend=backend)


async def _floor_server(port: int) -> None:
    """The floor's scripted peer: for every request's worth of bytes read, the response."""
    request, first, trailers = exchange_bytes()

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                await reader.readexactly(len(request))
                writer.write(first)
                writer.write(trailers)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", port)
    print("ready", flush=True)
    async with server:
        await server.serve_forever()


def run_client(kind: str, port: int, calls: int) -> dict[str, float]:
    if kind == "ceiling/blocking":
        return _blocking_ceiling(port, calls)
    if kind.startswith("floor"):
        import anyio

        request, first, trailers = exchange_bytes()
        size = len(first) + len(trailers)

        async def floor() -> dict[str, float]:
            async with await anyio.connect_tcp("127.0.0.1", port) as stream:
                lock = anyio.Lock()

                async def call() -> None:
                    # One exchange at a time on the one stream (the concurrent columns
                    # then measure the same thing: there is no multiplexing here).
                    async with lock:
                        await stream.send(request)
                        got = 0
                        while got < size:
                            got += len(await stream.receive())

                return await _measure(call, calls, _spawn_anyio)

        return anyio.run(floor, backend=kind.split("/")[1])
    if kind.startswith("connection/"):
        return _connection_only(kind.split("/")[1], port, calls)
    if kind.startswith("sepp-anyio"):
        import anyio

        from sepp_anyio._proto.sepp import v1 as pb
        from sepp_anyio._transport import Channel

        async def ours() -> dict[str, float]:
            async with Channel("127.0.0.1", port) as channel:
                stub = pb.QueueServiceStub(channel)
                request = pb.AckRequest(job_id="bench", attempt=1)
                return await _measure(lambda: stub.ack(request, timeout=30.0), calls, _spawn_anyio)

        return anyio.run(ours, backend=kind.split("/")[1])
    if kind == "grpclib":
        from grpclib.client import Channel as GrpclibChannel

        from sepp_anyio._proto.sepp import v1 as pb

        async def theirs() -> dict[str, float]:
            channel = GrpclibChannel("127.0.0.1", port)
            try:
                stub = pb.QueueServiceStub(channel)
                request = pb.AckRequest(job_id="bench", attempt=1)
                return await _measure(
                    lambda: stub.ack(request, timeout=30.0), calls, _spawn_asyncio
                )
            finally:
                channel.close()

        return asyncio.run(theirs())
    if kind == "grpcio-aio":
        import grpc
        from sepp.v1 import queue_pb2, queue_pb2_grpc

        async def grpcio() -> dict[str, float]:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
                stub = queue_pb2_grpc.QueueServiceStub(channel)  # type: ignore[no-untyped-call]
                request = queue_pb2.AckRequest(job_id="bench", attempt=1)  # type: ignore[attr-defined]
                return await _measure(
                    lambda: stub.Ack(request, timeout=30.0), calls, _spawn_asyncio
                )

        return asyncio.run(grpcio())
    raise ValueError(kind)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--client", help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--floor-server", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.client:
        print(json.dumps(run_client(args.client, args.port, args.calls)))
        return
    if args.floor_server is not None:
        asyncio.run(_floor_server(args.floor_server))
        return

    port, floor_port = _free_port(), _free_port()
    server = subprocess.Popen(
        [sys.executable, str(HERE / "_grpclib_server.py"), str(port)],
        stdout=subprocess.PIPE,
        text=True,
    )
    floor_server = subprocess.Popen(
        [sys.executable, __file__, "--floor-server", str(floor_port)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        for started in (server, floor_server):
            assert started.stdout is not None
            assert started.stdout.readline().strip() == "ready"
        best: dict[str, dict[str, float]] = {}
        for round_no in range(args.rounds):
            for kind in CLIENTS + FLOORS + LAYERS + CEILINGS:
                out = subprocess.run(
                    [
                        sys.executable,
                        __file__,
                        "--client",
                        kind,
                        "--port",
                        str(floor_port if kind in FLOORS else port),
                        "--calls",
                        str(args.calls),
                    ],
                    check=True,
                    capture_output=True,
                    text=True,
                    env=dict(os.environ),
                )
                result = json.loads(out.stdout)
                print(
                    f"round {round_no + 1} {kind:20s} "
                    + " ".join(f"{k}={v:.2f}" for k, v in result.items()),
                    file=sys.stderr,
                )
                prev = best.get(kind)
                if prev is None:
                    best[kind] = result
                else:
                    best[kind] = {
                        k: (min(prev[k], v) if k == "cpu_per_10k" else max(prev[k], v))
                        for k, v in result.items()
                    }
    finally:
        for started in (server, floor_server):
            started.kill()
            started.wait()

    base = best["grpclib"]
    columns = ["seq", "c32", "c256", "cpu_per_10k"]
    titles = ["seq calls/s", "32 conc calls/s", "256 conc calls/s", "CPU s / 10k calls"]
    print(
        f"\nunary Ack against a grpclib server, best of {args.rounds} rounds of "
        f"{args.calls} calls (ratio vs grpclib; CPU ratio < 1 is better)\n"
    )
    print("| client | " + " | ".join(titles) + " |")
    print("|---|" + "---|" * len(columns))
    for kind in CLIENTS + FLOORS + LAYERS + CEILINGS:
        cells = []
        for column in columns:
            if column not in best[kind]:
                cells.append("-")
                continue
            value, ratio = best[kind][column], best[kind][column] / base[column]
            fmt = f"{value:.2f}" if column == "cpu_per_10k" else f"{value:.0f}"
            cells.append(f"{fmt} ({ratio:.2f}x)")
        print(f"| {kind} | " + " | ".join(cells) + " |")
    ceiling = best["ceiling/blocking"]["seq"]
    print(
        f"\nSequential calls/s as a share of the ceiling ({ceiling:.0f}/s, "
        f"{ceiling / base['seq']:.2f}x grpclib's): "
        + ", ".join(f"{kind} {best[kind]['seq'] / ceiling:.0%}" for kind in CLIENTS)
    )
    print("\nCPU per call above the floor (client minus the floor, same backend), us:\n")
    for kind in CLIENTS:
        floor = best["floor/trio" if kind.endswith("trio") else "floor/asyncio"]
        ours, theirs = best[kind]["cpu_per_10k"], floor["cpu_per_10k"]
        print(f"- {kind}: {(ours - theirs) * 100:.0f} us ({ours / theirs:.2f}x the floor)")
    print("\nOur CPU per call by layer, us (best rounds):\n")
    for backend in ("asyncio", "trio"):
        floor_us = best[f"floor/{backend}"]["cpu_per_10k"] * 100
        layer_us = best[f"connection/{backend}"]["cpu_per_10k"] * 100
        whole_us = best[f"sepp-anyio/{backend}"]["cpu_per_10k"] * 100
        print(
            f"- {backend}: {whole_us:.0f} = the floor {floor_us:.0f} + connection and HTTP/2 "
            f"core {layer_us - floor_us:.0f} + stub and Stream {whole_us - layer_us:.0f}"
        )


if __name__ == "__main__":
    main()
