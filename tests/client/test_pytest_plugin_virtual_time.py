"""The pytest plugin's network fixtures on trio's MockClock, in a pytest run of their own.

``sepp_client`` talks to a server in another process in real time; on a virtual clock its
deadlines expired at once (DEADLINE_EXCEEDED, or a connect "timed out" in no time).  It
now fails the test at once with one message pointing to ``sepp_in_memory``, which does
work on MockClock; on asyncio and on trio's real clock ``sepp_client`` works as before.
The inner run is in-process (pytester), against a reference server in a thread.
"""

from __future__ import annotations

import textwrap
from collections.abc import Iterator

import pytest

from sepp_anyio.server import ServerThread
from sepp_anyio.testing.pytest_plugin import VIRTUAL_TIME_MESSAGE

pytest_plugins = ["pytester"]

INNER = """
import anyio
import pytest
import trio.testing

import sepp_anyio as sepp

pytestmark = pytest.mark.anyio

MOCK = pytest.param(("trio", {"clock": trio.testing.MockClock(autojump_threshold=0)}), id="mock")
BACKENDS = [
    pytest.param("asyncio", id="asyncio"),
    pytest.param("trio", id="trio"),
    MOCK,
    # A MockClock at rate 1 without autojump is real time: allowed.
    pytest.param(("trio", {"clock": trio.testing.MockClock(rate=1.0)}), id="mock-realtime"),
]


@pytest.fixture(params=BACKENDS)
def anyio_backend(request):
    return request.param


async def test_client(sepp_client):
    queue = "plugin-vt-" + str(id(sepp_client))
    ack = await sepp_client.enqueue(sepp.EnqueueRequest(queue, "t"))
    [job] = await sepp_client.reserve([queue], lease=5.0, wait=5.0)
    assert job.ctx.id == ack.job_id
    await sepp_client.ack(job.ctx)


@pytest.mark.parametrize("anyio_backend", [MOCK])
async def test_in_memory(sepp_in_memory):
    client, _ = sepp_in_memory
    await client.enqueue(sepp.EnqueueRequest("q", "t", delay=120.0))
    assert await client.reserve(["q"], lease=30.0, wait=0) == []
    await anyio.sleep(121)  # two minutes of virtual time, in no time
    [job] = await client.reserve(["q"], lease=30.0, wait=0)
    await client.ack(job.ctx)
"""


@pytest.fixture(scope="module")
def server() -> Iterator[ServerThread]:
    with ServerThread() as running:
        yield running


def test_sepp_client_on_mockclock_fails_at_once_pointing_to_sepp_in_memory(
    pytester: pytest.Pytester, server: ServerThread, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SEPP_TEST_ADDR", server.address)
    pytester.makepyfile(test_virtual_time=textwrap.dedent(INNER))
    result = pytester.runpytest_inprocess("-q", "-rA", "-p", "no:cacheprovider")
    out = "\n".join(result.outlines)
    result.assert_outcomes(passed=4, errors=1)
    assert "ERROR test_virtual_time.py::test_client[mock]" in out
    for passing in ("asyncio", "trio", "mock-realtime"):
        assert f"PASSED test_virtual_time.py::test_client[{passing}]" in out
    assert "PASSED test_virtual_time.py::test_in_memory[mock]" in out
    # One clear message, not a traceback ending in DEADLINE_EXCEEDED or "timed out".
    assert VIRTUAL_TIME_MESSAGE in out
    assert "DEADLINE_EXCEEDED" not in out and "timed out" not in out
    assert "sepp_in_memory" in VIRTUAL_TIME_MESSAGE
