"""Storage failure seen from the network: health NOT_SERVING while the store fails, SERVING
once it has recovered by itself; refused calls UNAVAILABLE; nothing acknowledged lost.

Two servers on loopback (``ServerThread``), asked with grpcio's health client and our client:

* a memory store behind a switch (deterministic, runs everywhere);
* a SqliteStore on a real, small file system that really fills up (a tmpfs mount, which
  needs root and permission to mount; skipped with the reason otherwise).
"""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path

import anyio
import anyio.to_thread
import pytest

import sepp_anyio as sepp
from sepp_anyio.server import MemoryStore, ServerConfig, ServerThread, SqliteStore
from sepp_anyio.server._store._records import StoreContents, Write
from tests.server_net._util import NOT_SERVING, SERVING, health_check, poll

pytestmark = pytest.mark.anyio

QUEUE_SERVICE = "sepp.v1.QueueService"


class SwitchedStore:
    """A MemoryStore whose commits fail with ENOSPC while ``full`` is set (from any thread);
    ``failed`` is set by the first failure."""

    def __init__(self) -> None:
        self.inner = MemoryStore()
        self.full = False
        self.failed = threading.Event()

    @property
    def transactions(self) -> int:
        return self.inner.transactions

    async def open(self) -> StoreContents:
        return await self.inner.open()

    async def commit(self, writes: Sequence[Write]) -> None:
        if self.full:
            self.failed.set()
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        await self.inner.commit(writes)

    async def aclose(self) -> None:
        await self.inner.aclose()


def _request(data: bytes = b"x") -> sepp.EnqueueRequest:
    return sepp.EnqueueRequest("q", "t", payload=sepp.Payload(data, "text/plain"))


async def _health(address: str) -> tuple[int, int]:
    """The status of ``""`` and of the queue service."""

    def both() -> tuple[int, int]:
        return health_check(address, ""), health_check(address, QUEUE_SERVICE)

    return await anyio.to_thread.run_sync(both)


async def _expect_refused(client: sepp.Client, text: str) -> None:
    with pytest.raises(sepp.TransportError) as caught:
        await client.enqueue(_request())
    assert caught.value.code is sepp.StatusCode.UNAVAILABLE
    message = caught.value.status_message or ""
    assert message.startswith("storage unavailable: writes are failing"), message
    assert text in message


async def _ledger(client: sepp.Client) -> set[str]:
    """Every job of queue q, leased for the test's remainder."""
    jobs = await client.reserve(["q"], lease=300.0, wait=0.0, max_jobs=100)
    ids = [job.ctx.id for job in jobs]
    assert len(ids) == len(set(ids))
    return set(ids)


async def test_health_follows_a_failing_store_and_its_recovery() -> None:
    store = SwitchedStore()
    with ServerThread(ServerConfig(), store=store) as server:
        assert await _health(server.address) == (SERVING, SERVING)
        async with sepp.connect(server.address) as client:
            acknowledged = {(await client.enqueue(_request())).job_id}
            store.full = True
            held: list[str] = []

            async def enqueue_held() -> None:
                held.append((await client.enqueue(_request())).job_id)

            async with anyio.create_task_group() as tg:
                tg.start_soon(enqueue_held)
                assert await anyio.to_thread.run_sync(store.failed.wait, 10.0)
                assert await _health(server.address) == (NOT_SERVING, NOT_SERVING)
                await _expect_refused(client, os.strerror(errno.ENOSPC))
                assert held == []
                store.full = False
            # The held call was answered OK once its retried commit succeeded.
            assert await _health(server.address) == (SERVING, SERVING)
            assert len(held) == 1
            acknowledged.update(held)
            assert await _ledger(client) == acknowledged


# ------------------------------------------------------------------ a real full file system


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 4 MiB tmpfs, mounted for this test only."""
    if os.name != "posix" or os.geteuid() != 0:
        pytest.skip("mounting a tmpfs (a file system that really fills up) needs root")
    mount = shutil.which("mount")
    if mount is None:
        pytest.skip("no mount command to mount a tmpfs")
    mountpoint = tmp_path / "disk"
    mountpoint.mkdir()
    done = subprocess.run(
        [mount, "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mountpoint)],
        capture_output=True,
        text=True,
        check=False,
        timeout=10,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip() or done.returncode}")
    try:
        yield mountpoint
    finally:
        # Lazy: detaches at once even if something still holds a file open.
        subprocess.run(["umount", "-l", str(mountpoint)], check=False, timeout=10)


def _fill(path: Path) -> None:
    """Write zeros to *path* until the file system is full."""
    chunk = bytes(64 * 1024)
    with path.open("wb", buffering=0) as file:
        for _ in range(4 * 1024 * 1024 // len(chunk) + 2):  # more than the disk holds
            try:
                file.write(chunk)
            except OSError as exc:
                if exc.errno != errno.ENOSPC:
                    raise
                return
    raise AssertionError("the small disk never filled up")


async def test_a_really_full_disk_is_not_serving_then_recovers(small_disk: Path) -> None:
    database = small_disk / "db.sqlite3"
    filler = small_disk / "filler"
    with ServerThread(ServerConfig(), store=SqliteStore(database)) as server:
        async with sepp.connect(server.address) as client:
            acknowledged = {(await client.enqueue(_request())).job_id}
            _fill(filler)
            held: list[str] = []

            async def enqueue_held() -> None:
                # Far more than the WAL has room for: the commit must grow the file.
                held.append((await client.enqueue(_request(b"y" * 256 * 1024))).job_id)

            async with anyio.create_task_group() as tg:
                tg.start_soon(enqueue_held)
                # No event reports the failure from the server's thread: poll health.
                await anyio.to_thread.run_sync(
                    lambda: poll(
                        lambda: health_check(server.address, QUEUE_SERVICE) == NOT_SERVING,
                        what="health NOT_SERVING",
                    )
                )
                assert await _health(server.address) == (NOT_SERVING, NOT_SERVING)
                await _expect_refused(client, "database or disk is full")
                assert held == []
                filler.unlink()  # room again: the next retry succeeds
            assert await _health(server.address) == (SERVING, SERVING)
            acknowledged.update(held)
            assert len(acknowledged) == 2
    # After a restart on the same file: exactly what was acknowledged.
    with ServerThread(ServerConfig(), store=SqliteStore(database)) as server:
        async with sepp.connect(server.address) as client:
            assert await _ledger(client) == acknowledged
