"""pytest fixtures for code that talks to sepp (registered as ``sepp_anyio`` under ``pytest11``).

Installing sepp-anyio makes these fixtures available to every pytest run; the plugin adds
fixtures only (no hooks, no options, no change to how tests are collected or run).

``sepp_server`` (session scope)
    A reference server in a subprocess, ``python -m sepp_anyio.server --port 0 --memory``,
    started on first use and stopped (SIGTERM) at the end of the session.  The fixture value
    has ``.address`` (``host:port``, for :func:`sepp_anyio.connect`), ``.host``, ``.port``
    and ``.process`` (the :class:`subprocess.Popen`, or None for an external server).  The
    server is shared by the whole session: give each test its own queue names.  It reads
    ``SEPP_<SECTION>__<FIELD>`` variables (and ``SEPP_CONFIG``) like the command line, but
    runs in a temporary directory, so a project's own ``./sepp.toml`` is not picked up.
    ``SEPP_SERVER_BACKEND=trio`` runs it on trio (default: asyncio).

    With the environment variable ``SEPP_TEST_ADDR`` (``host:port`` or
    ``http(s)://host:port``), no process is started and that server is used instead, as the
    official clients' test suites do.  A server that does not start fails the test (it never
    skips).

``sepp_client`` (function scope, async)
    A :class:`sepp_anyio.Client` connected to ``sepp_server``, closed after the test.  The
    API key comes from ``SEPP_TEST_API_KEY`` if set.

    It needs real time: on trio's ``MockClock`` (unless it runs at ``rate=1`` without
    autojump, which is real time) the test fails at once, saying to use
    ``sepp_in_memory``.  A server in another process runs on the wall clock, so the
    client's deadlines and keepalive, counted on a virtual clock, would expire at once
    (or never), and lease expiry on the server could never agree with the test's
    clock; no deadline rewriting can make both hold.

``sepp_in_memory`` (function scope, async)
    ``(client, engine)`` from :func:`sepp_anyio.testing.open_in_memory_client`: a fresh
    in-process server with default config, in the test's own event loop (so trio's
    ``MockClock`` drives its leases and schedules): the fixture for tests on virtual time.

``sepp_harness`` (function scope, async)
    A :class:`sepp_anyio.testing.Harness` (entered): the in-process server of
    ``sepp_in_memory`` with ``harness.client``, ``harness.run_until_settled(worker)``,
    ``harness.jobs(queue)``, ``harness.dead_letters(queue)`` and ``harness.results(queue)``.
    On virtual time (trio's ``MockClock(autojump_threshold=0)``) scheduled jobs and
    retries come due at once.

The async fixtures run on the test's anyio backend, asyncio or trio: use them from tests
marked ``@pytest.mark.anyio`` (anyio's pytest plugin runs them).
"""

from __future__ import annotations

import dataclasses
import math
import os
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator

import pytest

from .._client import Client, connect
from .._transport._target import parse_target
from ..server import Engine, ServerProcess
from ._harness import Harness
from ._in_memory import open_in_memory_client

__all__ = ["SeppTestServer", "sepp_client", "sepp_harness", "sepp_in_memory", "sepp_server"]


@dataclasses.dataclass(frozen=True)
class SeppTestServer:
    """The value of the ``sepp_server`` fixture."""

    #: ``host:port`` (or the ``SEPP_TEST_ADDR`` value as given), for ``connect()``.
    address: str
    host: str
    port: int
    #: The server's process, or None when ``SEPP_TEST_ADDR`` names an external server.
    process: subprocess.Popen[bytes] | None


@pytest.fixture(scope="session")
def sepp_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SeppTestServer]:
    """A reference server for the session (or the one ``SEPP_TEST_ADDR`` names)."""
    external = os.environ.get("SEPP_TEST_ADDR")
    if external:
        target = parse_target(external)
        yield SeppTestServer(address=external, host=target.host, port=target.port, process=None)
        return
    env = dict(os.environ)
    if env.get("SEPP_CONFIG"):
        # The child runs elsewhere: keep a relative config path pointing at the same file.
        env["SEPP_CONFIG"] = os.path.abspath(env["SEPP_CONFIG"])
    server = ServerProcess(
        "--memory",
        "--port",
        "0",
        "--log-level",
        "WARNING",
        env=env,
        cwd=tmp_path_factory.mktemp("sepp-server"),
    )
    try:
        server.start()
    except RuntimeError as exc:
        pytest.fail(f"the sepp reference server did not start: {exc}", pytrace=False)
    try:
        assert server.process is not None
        yield SeppTestServer(
            address=server.address, host=server.host, port=server.port, process=server.process
        )
    finally:
        server.stop()


VIRTUAL_TIME_MESSAGE = (
    "sepp_client talks to a sepp server in another process, in real time, but this test "
    "runs on trio's MockClock (virtual time): the client's deadlines would expire at once "
    "and the server's leases cannot follow the test's clock. Use the sepp_in_memory "
    "fixture instead: an in-process server on the test's own clock, so MockClock drives "
    "its leases and schedules too."
)


def _on_virtual_time() -> bool:
    """Whether the running event loop's clock is not the real one (trio's MockClock,
    unless at rate 1 without autojump)."""
    if "trio" not in sys.modules:
        return False  # a trio run would have imported it; trio need not be installed
    import trio
    import trio.testing

    try:
        clock = trio.lowlevel.current_clock()
    except RuntimeError:
        return False  # not in a trio run (asyncio)
    if not isinstance(clock, trio.testing.MockClock):
        return False
    return bool(clock.rate != 1.0 or clock.autojump_threshold != math.inf)


@pytest.fixture
async def sepp_client(sepp_server: SeppTestServer, anyio_backend: object) -> AsyncIterator[Client]:
    """A client connected to ``sepp_server`` (API key from ``SEPP_TEST_API_KEY``).

    Fails the test at once (pointing to ``sepp_in_memory``) on a virtual clock."""
    if _on_virtual_time():
        pytest.fail(VIRTUAL_TIME_MESSAGE, pytrace=False)
    api_key = os.environ.get("SEPP_TEST_API_KEY") or None
    async with connect(sepp_server.address, api_key=api_key) as client:
        yield client


@pytest.fixture
async def sepp_in_memory(anyio_backend: object) -> AsyncIterator[tuple[Client, Engine]]:
    """``(client, engine)``: a fresh in-process server in the test's event loop."""
    async with open_in_memory_client() as pair:
        yield pair


@pytest.fixture
async def sepp_harness(anyio_backend: object) -> AsyncIterator[Harness]:
    """A :class:`~sepp_anyio.testing.Harness`, entered, in the test's event loop."""
    async with Harness() as harness:
        yield harness
