"""serve_health on real loopback sockets, both backends (real clocks: the server's timeouts
are real time): every endpoint, probes flipping, loop lag, limits and hostile clients."""

from __future__ import annotations

import contextlib
import socket
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import pytest
from prometheus_client.parser import text_string_to_metric_families

from sepp_anyio._health import HealthServer, WorkerHealth, serve_health

from ._client import HOST, LIMIT, connect, get, raw, read_to_end, status_of

pytestmark = pytest.mark.anyio


@asynccontextmanager
async def serving(
    health: WorkerHealth | None = None, **options: Any
) -> AsyncIterator[tuple[HealthServer, int, WorkerHealth]]:
    health = health if health is not None else WorkerHealth(wait=30.0)
    server = HealthServer(health, **options)
    async with anyio.create_task_group() as tg:
        port = await tg.start(server.serve, HOST, 0)
        yield server, port, health
        tg.cancel_scope.cancel()


# ---------------------------------------------------------------- endpoints and probes


async def test_serve_health_reports_its_port_and_answers_every_endpoint() -> None:
    health = WorkerHealth(wait=30.0)
    health.lane("main")
    async with anyio.create_task_group() as tg:
        port = await tg.start(serve_health, health)
        assert isinstance(port, int) and port > 0
        live, ready, metrics = [await get(port, p) for p in ("/livez", "/readyz", "/metrics")]
        tg.cancel_scope.cancel()
    assert (live.status, live.text) == (200, "ok\n")
    assert (ready.status, ready.text) == (503, "not ready\n")
    assert metrics.status == 200
    assert metrics.headers["content-type"] == "text/plain; version=0.0.4; charset=utf-8"
    assert live.headers["content-type"] == "text/plain; charset=utf-8"
    assert live.headers["cache-control"] == "no-store"
    names = {f.name for f in text_string_to_metric_families(metrics.text)}
    assert "sepp_jobs_in_flight" in names


async def test_probes_flip_at_start_shutdown_and_stop() -> None:
    async with serving() as (_server, port, health):
        lane = health.lane("main")
        # Before run(): live, not ready.
        assert [(await get(port, p)).status for p in ("/livez", "/readyz")] == [200, 503]
        health.mark_started()
        lane.reserving(anyio.current_time())
        assert [(await get(port, p)).status for p in ("/livez", "/readyz")] == [200, 200]
        # First shutdown signal: not ready, still live through the drain.
        health.mark_shutting_down()
        assert [(await get(port, p)).status for p in ("/livez", "/readyz")] == [200, 503]
        # Drain over, run() returned.
        health.mark_stopped()
        live = await get(port, "/livez")
        assert [live.status, (await get(port, "/readyz")).status] == [503, 503]
        assert live.text == "the worker has stopped\n"


async def test_a_stuck_reserve_loop_fails_livez_with_the_reason() -> None:
    async with serving(WorkerHealth(wait=1.0, margin=1.0)) as (_server, port, health):
        lane = health.lane("main")
        health.mark_started()
        lane.between(anyio.current_time() - 10.0)  # its last reserve ended 10 s ago
        live = await get(port, "/livez")
        assert live.status == 503
        assert live.text.startswith("lane main: no reserve for 1")
        assert "more than wait + margin = 2s" in live.text
        lane.waiting_for_capacity(anyio.current_time())  # all slots busy: live
        assert (await get(port, "/livez")).status == 200


async def test_metrics_follow_the_worker_and_parse() -> None:
    health = WorkerHealth(wait=30.0)
    health.lane("main")
    metrics = health.worker_metrics
    async with serving(health) as (_server, port, _health):
        metrics.jobs.labels('odd "type"\n\\', "acked", "main").inc()
        metrics.in_flight.labels("main").inc(2)
        metrics.duration.labels("send", "main").observe(0.3)
        response = await get(port, "/metrics")
        samples = {
            (s.name, tuple(sorted(s.labels.items()))): s.value
            for f in text_string_to_metric_families(response.text)
            for s in f.samples
        }
    key = (("job_type", 'odd "type"\n\\'), ("lane", "main"), ("outcome", "acked"))
    assert samples[("sepp_jobs_total", key)] == 1
    assert samples[("sepp_jobs_in_flight", (("lane", "main"),))] == 2
    assert (
        samples[("sepp_job_duration_seconds_count", (("job_type", "send"), ("lane", "main")))] == 1
    )
    assert (
        samples[("sepp_job_duration_seconds_sum", (("job_type", "send"), ("lane", "main")))] == 0.3
    )


async def test_head_query_strings_keep_alive_404_and_405() -> None:
    async with serving() as (_server, port, _health), connect(port) as client:
        head = await client.request("/livez", "HEAD")
        assert (head.status, head.body, head.headers["content-length"]) == (200, b"", "3")
        assert (await client.request("/livez?verbose=1")).status == 200
        missing = await client.request("/nope")
        assert missing.status == 404 and "/livez" in missing.text
        # Still the same connection: three exchanges so far.
        assert (await client.request("/readyz")).status == 503
        post = await client.request("/livez", "POST")
        assert (post.status, post.headers["allow"]) == (405, "GET, HEAD")
        assert post.headers["connection"] == "close"
        assert await read_to_end(client.stream) == b""


async def test_a_failing_source_is_a_500_and_the_server_goes_on() -> None:
    class Broken(WorkerHealth):
        def readiness(self) -> bool:
            raise RuntimeError("boom")

    async with serving(Broken(wait=1.0)) as (_server, port, _health):
        assert (await get(port, "/readyz")).status == 500
        assert (await get(port, "/livez")).status == 200


# ---------------------------------------------------------------- loop lag


async def test_a_blocked_event_loop_fails_livez_then_recovers() -> None:
    options = {"max_loop_lag": 0.2, "lag_interval": 0.05, "lag_window": 0.5}
    async with serving(None, **options) as (server, port, _health):
        assert (await get(port, "/livez")).status == 200
        # Block the whole event loop, as a sync call in a handler would.
        time.sleep(0.4)  # noqa: ASYNC251 (the point of the test)
        # Nothing else has run yet: the sampler's sleep is overdue.
        live, reason = server.liveness()
        assert not live and reason.startswith("event loop lag 0.")
        blocked = await get(port, "/livez")
        assert blocked.status == 503 and "event loop lag" in blocked.text
        # Once the window has passed without a lag, live again (bounded wait on samples).
        for _ in range(200):
            await server.lag.wait_sample()
            if server.liveness()[0]:
                break
        assert (await get(port, "/livez")).status == 200


async def test_status_lines_carry_their_reason_phrase() -> None:
    """``HTTP/1.1 200 OK``, not ``HTTP/1.1 200 `` (h11 sends no phrase unless told)."""
    async with serving() as (_server, port, health):
        health.lane("main")

        async def status_line(request: bytes) -> bytes:
            return (await raw(port, request)).split(b"\r\n", 1)[0]

        def get_(path: str) -> bytes:
            return f"GET {path} HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n".encode()

        assert await status_line(get_("/livez")) == b"HTTP/1.1 200 OK"
        assert await status_line(get_("/readyz")) == b"HTTP/1.1 503 Service Unavailable"
        assert await status_line(get_("/nowhere")) == b"HTTP/1.1 404 Not Found"
        assert await status_line(b"POST /livez HTTP/1.1\r\nHost: a\r\n\r\n") == (
            b"HTTP/1.1 405 Method Not Allowed"
        )
        assert await status_line(b"NOT HTTP AT ALL\r\n\r\n") == b"HTTP/1.1 400 Bad Request"


# ---------------------------------------------------------------- limits and hostile input


@pytest.mark.parametrize("whole", [True, False], ids=["arrived-whole", "incomplete"])
async def test_headers_too_large_get_431(whole: bool) -> None:
    async with serving(max_header_bytes=1024) as (_server, port, _health):
        head = b"GET /livez HTTP/1.1\r\nHost: a\r\nX-Big: " + b"x" * 2000
        # Either the whole head at once, or one that is still incomplete past the limit.
        response = await raw(port, head + b"\r\n\r\n" if whole else head)
        assert status_of(response) == 431
        assert b"connection: close" in response.lower()
        # A request just under the limit is fine.
        small = await raw(port, b"GET /livez HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")
        assert status_of(small) == 200


async def test_a_request_body_gets_413_and_the_response_arrives_whole() -> None:
    async with serving() as (_server, port, _health):
        body = b"y" * 200_000  # more than the server reads before it closes
        head = f"GET /livez HTTP/1.1\r\nHost: a\r\nContent-Length: {len(body)}\r\n\r\n"
        response = await raw(port, head.encode() + body)
        assert status_of(response) == 413
        assert response.endswith(b"request bodies are not accepted\n")
        chunked = (
            b"GET /readyz HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n"
            b"5\r\nhello\r\n0\r\n\r\n"
        )
        assert status_of(await raw(port, chunked)) == 413


async def test_a_malformed_request_gets_400() -> None:
    async with serving() as (_server, port, _health):
        assert status_of(await raw(port, b"NOT HTTP AT ALL\r\n\r\n")) == 400


async def test_slowloris_headers_are_cut_off_by_the_timeout() -> None:
    async with serving(request_timeout=0.3) as (_server, port, _health):
        with anyio.fail_after(LIMIT):
            stream = await anyio.connect_tcp(HOST, port)
        async with stream:
            started = anyio.current_time()
            # One header byte every 50 ms: never a complete request.
            closed = False
            for byte in b"GET /livez HTTP/1.1\r\nHost: a\r\nX-Slow: " + b"z" * 200:
                try:
                    await stream.send(bytes([byte]))
                except (anyio.BrokenResourceError, OSError):
                    closed = True
                    break
                with anyio.move_on_after(0.05):
                    if await read_to_end(stream) == b"":
                        closed = True
                        break
            assert closed
            assert (
                0.2 <= anyio.current_time() - started < 3.0
            )  # the 0.3 s timeout, give or take timer slack


async def test_an_idle_kept_alive_connection_is_closed_by_the_timeout() -> None:
    async with serving(request_timeout=0.3) as (_server, port, _health), connect(port) as client:
        assert (await client.request("/livez")).status == 200
        started = anyio.current_time()
        assert await read_to_end(client.stream) == b""
        assert (
            0.2 <= anyio.current_time() - started < 3.0
        )  # the 0.3 s timeout, give or take timer slack


async def test_connections_over_the_cap_are_closed_and_probes_work_again_after() -> None:
    async with serving(max_connections=4, request_timeout=30.0) as (server, port, _health):
        clients = []
        async with contextlib.AsyncExitStack() as stack:
            for _ in range(4):
                client = await stack.enter_async_context(connect(port))
                assert (await client.request("/livez")).status == 200  # accepted, being served
                clients.append(client)
            assert server.connections == 4
            for _ in range(3):
                refused = await raw(port, b"GET /livez HTTP/1.1\r\nHost: a\r\n\r\n")
                assert refused == b""
            assert server.refused == 3
            # The held connections are still served.
            assert (await clients[0].request("/readyz")).status == 503
        # All four closed by the client: once the server has seen that, a probe is served.
        await anyio.wait_all_tasks_blocked()
        assert server.connections == 0
        assert (await get(port, "/livez")).status == 200


async def test_many_sequential_and_concurrent_probes() -> None:
    async with serving(max_connections=64) as (_server, port, _health):
        statuses: list[int] = []

        async def probe() -> None:
            statuses.append((await get(port, "/livez")).status)

        async with anyio.create_task_group() as tg:
            for _ in range(40):
                tg.start_soon(probe)
        assert statuses == [200] * 40
        async with connect(port) as client:
            for _ in range(100):  # max_requests_per_connection
                assert (await client.request("/livez")).status == 200
            # The 101st exchange is not served: the server closed after 100.
            assert await read_to_end(client.stream) == b""


async def test_binding_a_used_port_fails_before_started() -> None:
    with socket.socket() as taken:
        taken.bind((HOST, 0))
        taken.listen()
        port = taken.getsockname()[1]
        async with anyio.create_task_group() as tg:
            with pytest.raises(OSError, match="in use"):
                await tg.start(serve_health, WorkerHealth(wait=1.0), HOST, port)


async def test_bad_limits_are_refused() -> None:
    health = WorkerHealth(wait=1.0)
    with pytest.raises(ValueError, match="max_loop_lag"):
        HealthServer(health, max_loop_lag=0)
    with pytest.raises(ValueError, match="max_connections"):
        HealthServer(health, max_connections=0)
    with pytest.raises(TypeError, match="request_timeout"):
        HealthServer(health, request_timeout="1")  # type: ignore[arg-type]
