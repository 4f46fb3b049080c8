"""The pytest plugin's fixtures (the plugin is installed, so they are available here too)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

import pytest

import sepp_anyio as sepp
from sepp_anyio.server import Engine
from sepp_anyio.testing.pytest_plugin import SeppTestServer

pytestmark = pytest.mark.anyio


def test_sepp_server(sepp_server: SeppTestServer) -> None:
    assert sepp_server.address == f"{sepp_server.host}:{sepp_server.port}"
    if os.environ.get("SEPP_TEST_ADDR"):
        assert sepp_server.process is None
    else:
        assert sepp_server.process is not None and sepp_server.process.poll() is None


async def test_sepp_client(sepp_client: sepp.Client) -> None:
    queue = f"plugin-{uuid.uuid4().hex[:8]}"
    ack = await sepp_client.enqueue(sepp.EnqueueRequest(queue, "t"))
    (job,) = await sepp_client.reserve([queue], lease=5.0, wait=5.0)
    assert job.ctx.id == ack.job_id
    await sepp_client.ack(job.ctx)


async def test_sepp_in_memory(sepp_in_memory: tuple[sepp.Client, Engine]) -> None:
    client, engine = sepp_in_memory
    ack = await client.enqueue(sepp.EnqueueRequest("q", "t"))
    snapshot = engine.snapshot_job(ack.job_id)
    assert snapshot is not None and snapshot.queue == "q"


def test_plugin_is_registered_and_honours_sepp_test_addr(
    sepp_server: SeppTestServer, tmp_path: Path
) -> None:
    # A separate pytest run, pointed at the session's server: no second server starts, and
    # the fixtures come from the installed plugin alone (no conftest).
    (tmp_path / "test_uses_plugin.py").write_text(
        textwrap.dedent(
            """
            import pytest

            pytestmark = pytest.mark.anyio

            @pytest.fixture(params=["asyncio", "trio"])
            def anyio_backend(request):
                return request.param

            def test_external(sepp_server):
                assert sepp_server.process is None

            async def test_client(sepp_client):
                assert (await sepp_client.server_info()).supported_protocol_versions == ("v1",)
            """
        )
    )
    env = {**os.environ, "SEPP_TEST_ADDR": sepp_server.address}
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        cwd=tmp_path,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "3 passed" in result.stdout
