"""A server on SQLite killed with SIGKILL keeps every acknowledged write.

The server runs as ``python -m sepp_anyio.server --db FILE`` (``synchronous=FULL``: fsync
before every reply).  Jobs are enqueued and some reserved with a short lease; the process is
killed with no chance to clean up and restarted on the same database and port.  Every
acknowledged enqueue must come back, and the leased jobs must be redelivered once their
leases expire (not earlier), with attempt 2.
"""

from __future__ import annotations

import os
import signal
from datetime import UTC, datetime, timedelta
from pathlib import Path

import anyio
import anyio.to_thread
import pytest

import sepp_anyio as sepp
from sepp_anyio.server import ServerProcess

pytestmark = [pytest.mark.anyio, pytest.mark.skipif(os.name != "posix", reason="SIGKILL")]

QUEUE = "durable"
LEASE = 2.0


async def _start(*args: str) -> ServerProcess:
    server = ServerProcess(*args, "--log-level", "WARNING")
    await anyio.to_thread.run_sync(server.start)
    return server


async def test_sigkill_loses_no_acknowledged_write(tmp_path: Path) -> None:
    db = str(tmp_path / "sepp.sqlite3")
    server = await _start("--db", db, "--port", "0")
    try:
        async with sepp.connect(server.address) as client:
            enqueued: set[str] = set()
            for batch in range(5):
                results = await client.enqueue_batch(
                    [
                        sepp.EnqueueRequest(
                            QUEUE, "t", payload=sepp.Payload.from_text(f"{batch}/{i}")
                        )
                        for i in range(40)
                    ]
                )
                enqueued.update(r.job_id for r in results if isinstance(r, sepp.EnqueueAck))
            assert len(enqueued) == 200
            leased = await client.reserve([QUEUE], lease=LEASE, wait=0.0, max_jobs=30)
            assert len(leased) == 30
            done = await client.reserve([QUEUE], lease=LEASE, wait=0.0, max_jobs=5)
            for job in done:
                await client.ack(job.ctx)
            acked = {job.ctx.id for job in done}
            expiry = {job.ctx.id: job.ctx.lease_expires_at for job in leased}

            os.kill(server.pid, signal.SIGKILL)
            status = await anyio.to_thread.run_sync(lambda: server.wait(10))
            assert status == -signal.SIGKILL
    finally:
        await anyio.to_thread.run_sync(server.kill)

    # Same database, same port (the address the clients know).
    server = await _start("--db", db, "--port", str(server.port))
    try:
        async with sepp.connect(server.address) as client:
            waiting = enqueued - acked - expiry.keys()
            first = await client.reserve([QUEUE], lease=60.0, wait=0.0, max_jobs=256)
            firsts = {job.ctx.id for job in first}
            # Everything not leased is there at once, on its first attempt.  Leases that
            # already ran out while the server was down may come back too (attempt 2).
            assert waiting <= firsts
            assert {job.ctx.attempt for job in first if job.ctx.id in waiting} == {1}

            redelivered: dict[str, sepp.Job] = {
                job.ctx.id: job for job in first if job.ctx.id in expiry
            }
            with anyio.fail_after(LEASE + 10):
                while redelivered.keys() != expiry.keys():
                    for job in await client.reserve([QUEUE], lease=60.0, wait=5.0, max_jobs=256):
                        assert job.ctx.id in expiry, "only the leased jobs may come back"
                        redelivered[job.ctx.id] = job
                        assert datetime.now(UTC) >= expiry[job.ctx.id] - timedelta(
                            milliseconds=50
                        ), "redelivered before its lease expired"
            assert {job.ctx.attempt for job in redelivered.values()} == {2}
            assert {job.payload.text() for job in redelivered.values() if job.payload} <= {
                f"{b}/{i}" for b in range(5) for i in range(40)
            }
            # Nothing else: acked jobs stay gone.
            assert await client.reserve([QUEUE], lease=60.0, wait=0.0, max_jobs=256) == []
    finally:
        await anyio.to_thread.run_sync(server.stop)
