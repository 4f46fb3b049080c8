"""HTTP/2 codec micro-benchmark: our ``sepp_anyio._http2`` against h2, on unary calls.

Usage: ``python benchmarks/http2_codec.py [--calls N] [--rounds R] [--batch B]``

No sockets, no event loop: two sans-IO connections hand each other bytes in memory, and
only the role being measured is timed (``time.process_time`` around its own calls). The
exchange is a gRPC unary call as the transport makes it: request headers (the constant
part cached by the encoder, a per-call ``grpc-timeout`` never indexed), one DATA frame
with END_STREAM; the answer is response headers, one DATA frame and trailers, and the
received DATA is acknowledged.

* client role: our client, and h2 configured as the transport configured it before it ran
  on our core (header validation and normalisation off, raw bytes), each against an h2
  server;
* server role: our server, and h2 with its default (validating) configuration as
  grpclib's server uses it, each against an h2 client.

``--batch`` calls are opened before their bytes are handed over (a worker with many calls
in flight: one read carries many frames). Each round measures every configuration; the
best round is reported, as microseconds per call and our cost as a fraction of h2's.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import h2.config
import h2.connection
import h2.events
import hpack

from sepp_anyio._http2 import Connection, DataReceived, RequestReceived

REQUEST = [
    (b":method", b"POST"),
    (b":scheme", b"http"),
    (b":path", b"/sepp.v1.QueueService/Ack"),
    (b":authority", b"127.0.0.1:50051"),
    (b"te", b"trailers"),
    (b"content-type", b"application/grpc"),
    (b"user-agent", b"sepp-anyio/0.1 grpc-python-anyio"),
]
TIMEOUT = (b"grpc-timeout", b"29999m")
BODY = b"\x00\x00\x00\x00\x0b\n\x05bench\x10\x01"
RESPONSE = [(b":status", b"200"), (b"content-type", b"application/grpc")]
REPLY = b"\x00\x00\x00\x00\x00"
TRAILERS = [(b"grpc-status", b"0")]


def _h2_client() -> h2.connection.H2Connection:
    conn = h2.connection.H2Connection(
        h2.config.H2Configuration(
            client_side=True,
            header_encoding=None,
            validate_outbound_headers=False,
            normalize_outbound_headers=False,
            validate_inbound_headers=False,
            normalize_inbound_headers=False,
        )
    )
    conn.initiate_connection()
    return conn


def _h2_server() -> h2.connection.H2Connection:
    conn = h2.connection.H2Connection(
        h2.config.H2Configuration(client_side=False, header_encoding=None)
    )
    conn.initiate_connection()
    return conn


def _h2_serve(server: h2.connection.H2Connection, data: bytes) -> bytes:
    """An h2 server answering every request in ``data`` (untimed peer)."""
    for event in server.receive_data(data):
        if isinstance(event, h2.events.RequestReceived):
            stream_id = event.stream_id
            server.send_headers(stream_id, RESPONSE)
            server.send_data(stream_id, REPLY)
            server.send_headers(stream_id, TRAILERS, end_stream=True)
        elif isinstance(event, h2.events.DataReceived) and event.flow_controlled_length:
            server.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
    return server.data_to_send()


def client_ours(calls: int, batch: int) -> float:
    server = _h2_server()
    client = Connection(client_side=True)
    server.receive_data(client.data_to_send())
    client.receive_data(server.data_to_send(), 0.0)
    server.receive_data(client.data_to_send())
    spent = 0.0
    clock = time.process_time
    for _ in range(calls // batch):
        started = clock()
        for _ in range(batch):
            stream_id = client.open_stream(REQUEST, extra=(TIMEOUT,), cache_key=b"ack")
            client.send_data(stream_id, BODY, end_stream=True)
        request = client.data_to_send()
        spent += clock() - started
        reply = _h2_serve(server, request)
        started = clock()
        for event in client.receive_data(reply, 0.0):
            if type(event) is DataReceived:
                client.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
        updates = client.data_to_send()
        spent += clock() - started
        server.receive_data(updates)
    return spent


def client_h2(calls: int, batch: int) -> float:
    server = _h2_server()
    client = _h2_client()
    server.receive_data(client.data_to_send())
    client.receive_data(server.data_to_send())
    server.receive_data(client.data_to_send())
    spent = 0.0
    clock = time.process_time
    timeout = hpack.NeverIndexedHeaderTuple(*TIMEOUT)
    for _ in range(calls // batch):
        started = clock()
        for _ in range(batch):
            stream_id = client.get_next_available_stream_id()
            client.send_headers(stream_id, [*REQUEST, timeout])
            client.send_data(stream_id, BODY, end_stream=True)
        request = client.data_to_send()
        spent += clock() - started
        reply = _h2_serve(server, request)
        started = clock()
        for event in client.receive_data(reply):
            if type(event) is h2.events.DataReceived and event.flow_controlled_length:
                client.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
        updates = client.data_to_send()
        spent += clock() - started
        server.receive_data(updates)
    return spent


def _h2_request(client: h2.connection.H2Connection, batch: int) -> bytes:
    timeout = hpack.NeverIndexedHeaderTuple(*TIMEOUT)
    for _ in range(batch):
        stream_id = client.get_next_available_stream_id()
        client.send_headers(stream_id, [*REQUEST, timeout])
        client.send_data(stream_id, BODY, end_stream=True)
    return client.data_to_send()


def _h2_take_reply(client: h2.connection.H2Connection, data: bytes) -> bytes:
    """The h2 client reading a reply (untimed peer); returns its WINDOW_UPDATEs."""
    for event in client.receive_data(data):
        if isinstance(event, h2.events.DataReceived) and event.flow_controlled_length:
            client.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
    return client.data_to_send()


def server_ours(calls: int, batch: int) -> float:
    client = _h2_client()
    server = Connection(client_side=False)
    server.receive_data(client.data_to_send(), 0.0)
    client.receive_data(server.data_to_send())
    server.receive_data(client.data_to_send(), 0.0)
    client.receive_data(server.data_to_send())
    spent = 0.0
    clock = time.process_time
    for _ in range(calls // batch):
        request = _h2_request(client, batch)
        started = clock()
        for event in server.receive_data(request, 0.0):
            kind = type(event)
            if kind is RequestReceived:
                stream_id = event.stream_id  # type: ignore[attr-defined]
            elif kind is DataReceived:
                assert isinstance(event, DataReceived)
                stream_id = event.stream_id
                server.acknowledge_received_data(event.flow_controlled_length, stream_id)
                if event.end_stream:
                    server.send_headers(stream_id, RESPONSE, cache_key=b"ok")
                    server.send_data(stream_id, REPLY)
                    server.send_headers(stream_id, TRAILERS, end_stream=True, cache_key=b"0")
                    server.release_stream(stream_id)
        reply = server.data_to_send()
        spent += clock() - started
        updates = _h2_take_reply(client, reply)
        if updates:
            started = clock()
            server.receive_data(updates, 0.0)
            spent += clock() - started
    return spent


def server_h2(calls: int, batch: int) -> float:
    client = _h2_client()
    server = _h2_server()
    server.receive_data(client.data_to_send())
    client.receive_data(server.data_to_send())
    server.receive_data(client.data_to_send())
    client.receive_data(server.data_to_send())
    spent = 0.0
    clock = time.process_time
    for _ in range(calls // batch):
        request = _h2_request(client, batch)
        started = clock()
        for event in server.receive_data(request):
            kind = type(event)
            if kind is h2.events.DataReceived:
                assert isinstance(event, h2.events.DataReceived)
                if event.flow_controlled_length:
                    server.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
            elif kind is h2.events.StreamEnded:
                stream_id = event.stream_id  # type: ignore[attr-defined]
                server.send_headers(stream_id, RESPONSE)
                server.send_data(stream_id, REPLY)
                server.send_headers(stream_id, TRAILERS, end_stream=True)
        reply = server.data_to_send()
        spent += clock() - started
        updates = _h2_take_reply(client, reply)
        if updates:
            started = clock()
            server.receive_data(updates)
            spent += clock() - started
    return spent


CASES: dict[str, tuple[Callable[[int, int], float], ...]] = {
    "client": (client_ours, client_h2),
    "server": (server_ours, server_h2),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--batch", type=int, nargs="*", default=[1, 32])
    args = parser.parse_args()
    print("| role | calls per read | ours (us/call) | h2 (us/call) | ours / h2 |")
    print("| --- | --- | --- | --- | --- |")
    for role, runners in CASES.items():
        for batch in args.batch:
            best = [float("inf")] * len(runners)
            for _ in range(args.rounds):
                for index, runner in enumerate(runners):
                    cost = runner(args.calls, batch) / args.calls * 1e6
                    best[index] = min(best[index], cost)
            print(f"| {role} | {batch} | {best[0]:.1f} | {best[1]:.1f} | {best[0] / best[1]:.2f} |")


if __name__ == "__main__":
    main()
