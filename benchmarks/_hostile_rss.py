"""The reference server's RSS before and after hostile HTTP/2 clients (``server.py``).

One server subprocess (``--memory``); each scenario runs on fresh raw TCP connections
(frames built by hand, HPACK by the ``hpack`` package), which are then closed; the RSS
(``VmRSS`` of ``/proc/PID/status``) is read after a short settle and compared with the
idle value.  Target: back within 10% of idle.  Linux only.
"""

from __future__ import annotations

import socket
import struct
import time
from collections.abc import Callable

import hpack

from sepp_anyio.server import ServerProcess

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"


def _frame(kind: int, flags: int, stream_id: int, payload: bytes = b"", length: int = -1) -> bytes:
    size = len(payload) if length < 0 else length
    return (
        struct.pack(">I", size)[1:] + bytes((kind, flags)) + struct.pack(">I", stream_id) + payload
    )


def _request(path: str) -> list[tuple[bytes, bytes]]:
    return [
        (b":method", b"POST"),
        (b":scheme", b"http"),
        (b":path", path.encode()),
        (b":authority", b"localhost"),
        (b"content-type", b"application/grpc"),
        (b"te", b"trailers"),
    ]


INFO = "/sepp.v1.QueueService/GetServerInfo"
HEALTH = "/grpc.health.v1.Health/Check"


def _rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError("no VmRSS")


def _connect(port: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=5.0)
    sock.sendall(PREFACE + _frame(4, 0, 0) + _frame(4, 1, 0))
    return sock


def _send_and_drain(port: int, data: bytes, seconds: float = 2.0) -> None:
    with _connect(port) as sock:
        try:
            sock.sendall(data)
        except OSError:
            return
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            sock.settimeout(max(0.01, deadline - time.monotonic()))
            try:
                if not sock.recv(1 << 16):
                    return
            except (TimeoutError, OSError):
                return


def rapid_reset(port: int) -> None:
    encoder = hpack.Encoder()
    pairs = b"".join(
        _frame(1, 4, sid, encoder.encode(_request(INFO))) + _frame(3, 0, sid, struct.pack(">I", 8))
        for sid in range(1, 20_001, 2)
    )
    _send_and_drain(port, pairs)


def continuation_flood(port: int) -> None:
    block = hpack.Encoder().encode(_request(INFO))
    frames = _frame(1, 0, 1, block) + _frame(9, 0, 1, b"\x00" * 10) * 1000
    _send_and_drain(port, frames)


def hpack_bomb(port: int) -> None:
    encoder = hpack.Encoder()
    first = _frame(1, 5, 1, encoder.encode([*_request(INFO), (b"cookie", b"c" * 4096)]))
    bomb = _frame(1, 5, 3, encoder.encode(_request(INFO)) + b"\xbe" * 16000)
    _send_and_drain(port, first + bomb)


def ping_flood(port: int) -> None:
    _send_and_drain(port, _frame(6, 0, 0, b"12345678") * 5000)


def settings_flood(port: int) -> None:
    _send_and_drain(port, _frame(4, 0, 0, struct.pack(">HI", 4, 65535)) * 2000)


def oversized_frame(port: int) -> None:
    _send_and_drain(port, _frame(0, 0, 1, b"", length=(1 << 24) - 1) + b"\x00" * (1 << 20))


def health_bomb(port: int) -> None:
    encoder = hpack.Encoder()
    body = b"\x00" + (256 << 20).to_bytes(4, "big") + b"z" * 16000
    data = _frame(1, 4, 1, encoder.encode(_request(HEALTH))) + _frame(0, 0, 1, body)
    data += _frame(0, 0, 1, b"z" * 16000) * 64
    _send_and_drain(port, data)


def idle_connections(port: int) -> None:
    socks = [_connect(port) for _ in range(300)]
    time.sleep(0.5)
    for sock in socks:
        sock.close()


SCENARIOS: list[tuple[str, Callable[[int], None]]] = [
    ("rapid reset, 10,000 HEADERS+RST pairs", rapid_reset),
    ("CONTINUATION flood, 1000 frames", continuation_flood),
    ("HPACK bomb, 16,000 references to 4 KiB", hpack_bomb),
    ("PING flood, 5000", ping_flood),
    ("SETTINGS flood, 2000", settings_flood),
    ("16 MiB frame claim + 1 MiB", oversized_frame),
    ("Health/Check announcing 256 MiB + 1 MiB", health_bomb),
    ("300 idle connections", idle_connections),
    # The allocator keeps what the first 300 took (the peak); a second 300 shows whether
    # anything accumulates on top of it.
    ("300 idle connections, again", idle_connections),
]


def report() -> None:
    """Run every scenario against a fresh server; print a markdown table."""
    with ServerProcess("--memory", "--port", "0", "--log-level", "ERROR") as server:
        time.sleep(1.0)
        idle = _rss_kib(server.pid)
        print(f"\nserver RSS idle: {idle / 1024:.1f} MiB\n")
        print("| hostile scenario | RSS after, connection closed | vs idle |")
        print("|---|---:|---:|")
        for label, scenario in SCENARIOS:
            scenario(server.port)
            time.sleep(0.5)
            after = _rss_kib(server.pid)
            print(f"| {label} | {after / 1024:.1f} MiB | {100 * (after - idle) / idle:+.1f}% |")


if __name__ == "__main__":
    report()
