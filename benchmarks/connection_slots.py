"""A fresh client's latency while idle and slow sockets hold the server's connection slots.

Usage: ``python benchmarks/connection_slots.py [--idle N] [--slow N] [--clients K]
[--calls C] [--backend asyncio|trio ...] [--churn]``

For each server backend: one reference server subprocess (``--memory``, default caps: 1024
connections, 128 per address, so every socket from this machine's loopback shares the
128).  This process then holds ``--idle`` TCP connections that never send a byte (2,000)
and ``--slow`` that send the HTTP/2 client preface one byte a second (300, slowloris),
from a thread of their own; with ``--churn`` the attacker also reconnects every socket the
server has closed (evicted, or timed out) once a second, so the slots are under constant
pressure rather than merely held.  While they are held, ``--clients`` fresh clients (our
client, on asyncio) one after another each connect and make ``--calls`` GetServerInfo
calls; reported per client: connect + first call, and the p50 and max of all its calls.
Also the server's open sockets and RSS, idle and while the attack held.

Prints a markdown table.  A run takes about half a minute per backend.  Linux (``/proc``).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import socket
import statistics
import threading
import time

import anyio

import sepp_anyio as sepp
from sepp_anyio.server import ServerProcess

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"


def _rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


def _sockets(pid: int) -> int:
    count = 0
    for name in os.listdir(f"/proc/{pid}/fd"):
        with contextlib.suppress(OSError):
            if os.readlink(f"/proc/{pid}/fd/{name}").startswith("socket:"):
                count += 1
    return count


def _connect(port: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=10.0)
    sock.setblocking(False)
    return sock


def _closed_by_server(sock: socket.socket) -> bool:
    """Whether the server has closed ``sock`` (what it sent before is read and dropped)."""
    try:
        while True:
            if not sock.recv(65536):
                return True
    except BlockingIOError:
        return False
    except OSError:
        return True


class Attack:
    """Idle and slowloris sockets held (and, with ``churn``, re-opened) from a thread."""

    def __init__(self, port: int, idle: int, slow: int, *, churn: bool) -> None:
        self.port = port
        self.churn = churn
        self.idle = [_connect(port) for _ in range(idle)]
        self.slow: list[tuple[socket.socket, int]] = []
        for _ in range(slow):
            sock = _connect(port)
            sock.send(PREFACE[:1])
            self.slow.append((sock, 1))
        self.reconnects = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="attack", daemon=True)

    def __enter__(self) -> Attack:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(30)
        for sock in self.idle:
            sock.close()
        for sock, _ in self.slow:
            sock.close()

    def _run(self) -> None:
        while not self._stop.wait(1.0):  # a byte a second
            slow = []
            for sock, sent in self.slow:
                if sent < len(PREFACE):
                    try:
                        sock.send(PREFACE[sent : sent + 1])
                        sent += 1
                    except OSError:
                        sent = len(PREFACE) + 1  # the server closed it
                if self.churn and (sent > len(PREFACE) or _closed_by_server(sock)):
                    sock.close()
                    sock, sent = _connect(self.port), 0
                    self.reconnects += 1
                slow.append((sock, sent))
            self.slow = slow
            if self.churn:
                for i, sock in enumerate(self.idle):
                    if _closed_by_server(sock):
                        sock.close()
                        self.idle[i] = _connect(self.port)
                        self.reconnects += 1


async def _client(address: str, calls: int) -> tuple[float, list[float]]:
    started = time.perf_counter()
    latencies = []
    async with sepp.connect(address, connect_timeout=10.0) as client:
        with anyio.fail_after(10):
            await client.server_info()
        first = time.perf_counter() - started
        latencies.append(first)
        for _ in range(calls - 1):
            began = time.perf_counter()
            with anyio.fail_after(10):
                await client.server_info()
            latencies.append(time.perf_counter() - began)
    return first, latencies


def _measure(address: str, clients: int, calls: int) -> list[str]:
    rows = []
    for n in range(clients):
        try:
            first, latencies = anyio.run(_client, address, calls)
        except Exception as exc:  # the old behaviour: refused
            rows.append(f"| client {n + 1} | failed: {type(exc).__name__} | | |")
            continue
        p50 = statistics.median(latencies)
        rows.append(
            f"| client {n + 1} | {first * 1000:.1f} ms | {p50 * 1000:.2f} ms "
            f"| {max(latencies) * 1000:.1f} ms |"
        )
        time.sleep(0.5)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--idle", type=int, default=2000, help="sockets that never speak (2000)")
    parser.add_argument("--slow", type=int, default=300, help="slowloris sockets (300)")
    parser.add_argument("--clients", type=int, default=5, help="fresh clients, in turn (5)")
    parser.add_argument("--calls", type=int, default=20, help="calls per client (20)")
    parser.add_argument(
        "--backend", nargs="+", default=["asyncio", "trio"], help="server backends (both)"
    )
    parser.add_argument("--churn", action="store_true", help="reconnect closed sockets")
    args = parser.parse_args()
    print(
        f"{args.idle} idle + {args.slow} slowloris sockets"
        f"{' (re-opened when closed)' if args.churn else ''}; load average "
        f"{os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs at the start\n"
    )
    for backend in args.backend:
        with ServerProcess(
            "--memory", "--port", "0", "--log-level", "ERROR", "--backend", backend
        ) as server:
            time.sleep(0.5)
            rss_idle, sockets_idle = _rss_mib(server.pid), _sockets(server.pid)
            began = time.perf_counter()
            with Attack(server.port, args.idle, args.slow, churn=args.churn) as attack:
                opened = time.perf_counter() - began
                time.sleep(1.0)  # let the server take in the last of them
                rss_held, sockets_held = _rss_mib(server.pid), _sockets(server.pid)
                rows = _measure(server.address, args.clients, args.calls)
                reconnects = attack.reconnects
            print(
                f"server on {backend}: the attack's sockets opened in {opened:.1f} s; server "
                f"sockets {sockets_idle} idle, {sockets_held} while held; RSS "
                f"{rss_idle:.1f} MiB idle, {rss_held:.1f} MiB while held"
                f"{f'; {reconnects} reconnects' if args.churn else ''}\n"
            )
            print("| fresh client | connect + first call | p50 of its calls | max |")
            print("|---|---:|---:|---:|")
            print("\n".join(rows), end="\n\n")


if __name__ == "__main__":
    main()
