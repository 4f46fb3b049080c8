"""Max connection age (``http2-hardening.md`` §6): a connection older than its jittered
``max_connection_age`` gets the graceful two-GOAWAY sequence; its calls may finish; new
calls go to a new connection; calls still running ``max_connection_age_grace`` later are
cancelled.  On virtual time (the server, raw peers and our client share the test's loop)."""

from __future__ import annotations

from typing import Any

import anyio
import pytest
from hyperframe.frame import GoAwayFrame, PingFrame

import sepp_anyio as sepp
from sepp_anyio.server import ServerConfig
from sepp_anyio.server._config._sections import ServerSection
from sepp_anyio.server._network._netlimits import NetworkLimits, network_limits
from tests.server_hostile._harness import GRPC_REQUEST, Attacker, hostile_server
from tests.server_hostile._vclock import VIRTUAL_BACKENDS, Timeline, virtual_backend

pytestmark = pytest.mark.anyio

HOUR = 3600.0
MAX_STREAM_ID = (1 << 31) - 1
#: The server's own timers that would end a quiet raw connection first.
QUIET = {"idle_timeout_ms": 0, "keepalive_time_ms": 0}


@pytest.fixture(params=VIRTUAL_BACKENDS)
def anyio_backend(request: pytest.FixtureRequest) -> tuple[str, dict[str, Any]]:
    return virtual_backend(request)


def test_defaults_and_keys() -> None:
    """1 h +- 10 %, grace 6 min; the ``[server]`` keys map onto them, 0 turning them off."""
    assert (ServerSection().max_connection_age_ms, ServerSection().max_connection_age_grace_ms) == (
        3_600_000,
        360_000,
    )
    net = network_limits(ServerSection())
    assert (net.max_connection_age, net.max_connection_age_grace) == (HOUR, 360.0)
    assert net.max_connection_age_jitter == NetworkLimits().max_connection_age_jitter == 0.1
    off = network_limits(ServerSection(max_connection_age_ms=0, max_connection_age_grace_ms=0))
    assert (off.max_connection_age, off.max_connection_age_grace) == (0.0, 0.0)
    toml = ServerConfig.from_toml("[server]\nmax_connection_age_ms = 5000\n")
    assert toml.server.max_connection_age_ms == 5000


@pytest.mark.parametrize("age_on", [True, False])
async def test_goaway_arrives_within_the_jittered_window(age_on: bool) -> None:
    """Default age: GOAWAY(2^31-1) and a PING between 54 and 66 minutes, at this
    connection's own drawn age; on the PING's ACK the final GOAWAY, then the close.  Each
    connection draws its own age.  With the key 0 the connection stays open past 1.1 h."""
    settings: dict[str, object] = dict(QUIET)
    if not age_on:
        settings["max_connection_age_ms"] = 0
    async with hostile_server(**settings) as server, Attacker.connect(server.port) as attacker:
        opened = anyio.current_time()
        timeline = Timeline(attacker, ack_pings=True)
        await timeline.run_until(opened + 1.0)  # the server's SETTINGS: the connection is up
        [connection] = server.connections
        if not age_on:
            assert connection.max_age is None
            await timeline.run_until(opened + 1.2 * HOUR)
            assert timeline.eof_at is None and not timeline.goaways()
            return
        assert connection.max_age is not None
        assert 0.9 * HOUR <= connection.max_age <= 1.1 * HOUR
        await timeline.run_until(opened + 1.2 * HOUR)
        [(first_at, first), (_, second)] = timeline.goaways()
        assert first_at - opened == pytest.approx(connection.max_age, abs=1.0)
        assert (first.last_stream_id, first.error_code) == (MAX_STREAM_ID, 0)
        assert (second.last_stream_id, second.error_code) == (0, 0)
        [(ping_at, _)] = timeline.pings()
        assert ping_at == first_at
        assert timeline.eof_at is not None and timeline.eof_at - first_at < 5.0
        assert connection.ended_by == "max connection age"
        # Every connection draws its own age.
        ages: set[float | None] = set()
        for _ in range(5):
            async with Attacker.connect(server.port) as other:
                await Timeline(other, ack_pings=True).run_until(anyio.current_time() + 1.0)
                ages.update(c.max_age for c in server.connections)
        assert len(ages) == 5 and all(
            age is not None and 0.9 * HOUR <= age <= 1.1 * HOUR for age in ages
        )


async def test_no_ping_ack_the_final_goaway_comes_after_five_seconds() -> None:
    """A peer that does not answer the age PING still gets its final GOAWAY, after the
    shutdown's 5 s PING wait."""
    async with (
        hostile_server(max_connection_age_ms=60_000, **QUIET) as server,
        Attacker.connect(server.port) as attacker,
    ):
        opened = anyio.current_time()
        timeline = Timeline(attacker, ack_pings=False)
        await timeline.run_until(opened + 200.0)
        [(first_at, first), (second_at, second)] = timeline.goaways()
        assert first.last_stream_id == MAX_STREAM_ID and second.last_stream_id == 0
        assert second_at - first_at == pytest.approx(5.0, abs=0.5)
        assert any(isinstance(f, PingFrame) for _, f in timeline.arrivals)


AGE = 60.0


def _age_server(**settings: Any) -> Any:
    return hostile_server(max_connection_age_ms=int(AGE * 1000), **settings)


async def test_call_in_flight_finishes_and_new_calls_take_a_new_connection() -> None:
    """A Reserve parked across the age GOAWAY (age 60 s here) still gets its job; the
    Enqueue that supplies it, sent after the GOAWAY by the same client, goes over a new
    connection and succeeds; the old one closes once its Reserve is answered."""
    async with _age_server() as server, sepp.connect(server.address) as client:
        queue = "age-in-flight"
        await client.server_info()
        [old] = server.connections
        assert old.max_age is not None
        opened = anyio.current_time()
        jobs: list[sepp.Job] = []
        async with anyio.create_task_group() as tg:

            async def reserve() -> None:
                jobs.extend(await client.reserve([queue], lease=30.0, wait=100.0))

            tg.start_soon(reserve)
            # Past the age (and its jitter); the Reserve is still parked.
            await anyio.sleep_until(opened + 1.1 * AGE + 5.0)
            assert old.ended_by == "max connection age"
            assert old.active_calls == 1 and not jobs
            ack = await client.enqueue(sepp.EnqueueRequest(queue=queue, job_type="t"))
        [job] = jobs
        assert job.ctx.id == ack.job_id
        assert anyio.current_time() < opened + 100.0  # answered by the job, not the wait's end
        with anyio.fail_after(10):
            await old.done.wait()
        [new] = server.connections
        assert new is not old and new.calls_started >= 1
        assert old.calls_started == 2  # GetServerInfo and the Reserve; not the Enqueue


@pytest.mark.parametrize("grace_on", [True, False])
async def test_call_still_running_at_age_plus_grace_is_cancelled(grace_on: bool) -> None:
    """Age 60 s, grace 10 s: a Reserve waiting 300 s is cancelled at its connection's age
    plus 10 s (the client sees the connection end); the server runs no call any more.
    With the grace 0 the Reserve runs to the end of its wait and answers empty."""
    settings = {"max_connection_age_grace_ms": 10_000 if grace_on else 0}
    async with _age_server(**settings) as server, sepp.connect(server.address) as client:
        await client.server_info()
        [connection] = server.connections
        assert connection.max_age is not None
        opened = anyio.current_time()
        if grace_on:
            with pytest.raises(sepp.ClientError):
                await client.reserve(["age-grace"], lease=30.0, wait=300.0)
            ended = anyio.current_time() - opened
            assert ended == pytest.approx(connection.max_age + 10.0, abs=1.5)
            assert connection.ended_by == "max connection age grace over"
        else:
            assert await client.reserve(["age-grace"], lease=30.0, wait=300.0) == []
            assert anyio.current_time() - opened == pytest.approx(300.0, abs=1.0)
            assert connection.ended_by == "max connection age"
        with anyio.fail_after(10):
            await connection.done.wait()
        assert server.active_calls == 0


async def test_age_goaway_then_server_shutdown_does_not_repeat_the_sequence() -> None:
    """A connection draining for its age, then the server stops: no third GOAWAY, and the
    stop finishes (the draining connection is awaited like the others)."""
    async with (
        hostile_server(max_connection_age_ms=60_000, **QUIET) as server,
        Attacker.connect(server.port) as attacker,
    ):
        peer = attacker.peer
        # A call waiting for its body keeps the connection draining after the GOAWAY.
        await attacker.send(peer.headers(1, GRPC_REQUEST()))
        timeline = Timeline(attacker, ack_pings=True)
        await timeline.run_until(anyio.current_time() + 80.0)
        assert [f.last_stream_id for _, f in timeline.goaways()] == [MAX_STREAM_ID, 1]
        [connection] = server.connections
        assert connection.active_calls == 1
    goaways = [f for f in attacker.frames if isinstance(f, GoAwayFrame)]
    assert [f.last_stream_id for f in goaways][:2] == [MAX_STREAM_ID, 1]
    assert all(f.last_stream_id != MAX_STREAM_ID for f in goaways[2:])
