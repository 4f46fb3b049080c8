"""A failing store (a full disk): held, retried with backoff, recovered, nothing lost or doubled.

The rule under test is the one in ``server/_engine/_committer.py``: a failed commit is not answered
but retried, the same writes in the same order, until it succeeds; new RPCs are refused with
UNAVAILABLE naming storage (and change nothing) while it fails; GetServerInfo still answers;
an engine stopped while the store still fails answers the held RPCs INTERNAL and leaves
nothing of them behind.

Two stores, one switch (:class:`Disk`):

* memory: the MemoryStore's commit is refused with ``ENOSPC`` before it applies anything;
* sqlite: a real database file, whose commits SQLite itself refuses with SQLITE_FULL
  ("database or disk is full"): through the store's test seam, each transaction caps the
  file at its current size (``PRAGMA max_page_count``) and then needs more room than is
  free inside it, exactly the state of a database on a full disk.

Every test runs on virtual time (trio's autojumping MockClock, the asyncio twin from
``tests/worker/_vtime.py``), so the backoff of up to 5 s costs no real time; the engine's
own clock is a ManualClock.
"""

from __future__ import annotations

import errno
import os
import sqlite3
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import pytest
import trio.testing

from sepp_anyio import StatusCode
from sepp_anyio._proto.sepp import v1 as pb
from sepp_anyio.server import Engine, EngineError, ManualClock, MemoryStore, SqliteStore, Store
from sepp_anyio.server._engine._committer import (
    STORAGE_RETRY_INITIAL_DELAY,
    STORAGE_RETRY_MAX_DELAY,
)
from sepp_anyio.server._engine._engine import rpc_of
from sepp_anyio.server._store._records import PutJob, StoreContents, Write
from tests.worker._vtime import VirtualTimeLoop

from ._helpers import T0, ack, drain, enqueue, job, reserve, running

pytestmark = pytest.mark.anyio

PAYLOAD = b'"' + b"x" * 6000 + b'"'


@pytest.fixture(
    params=[
        pytest.param("asyncio", id="asyncio-vtime"),
        pytest.param("trio", id="trio-mockclock"),
    ]
)
def anyio_backend(request: pytest.FixtureRequest) -> tuple[str, dict[str, Any]]:
    if request.param == "trio":
        return "trio", {"clock": trio.testing.MockClock(autojump_threshold=0)}
    return "asyncio", {"loop_factory": VirtualTimeLoop}


def big(queue: str = "q") -> Any:
    return job(queue, payload=PAYLOAD)


@dataclass
class Disk:
    """Whether the disk has room.  Shared by a store and the stores that reopen its data."""

    full: bool = False


class FailingStore:
    """A real store behind a :class:`Disk`, reporting every commit attempt.

    ``hold`` parks commits at ``gate`` (``entered`` is set when one arrives), to line up
    RPCs behind a commit that is about to fail.
    """

    def __init__(self, inner: Store, disk: Disk, *, inject: bool) -> None:
        self.inner = inner
        self.disk = disk
        # For the memory store the failure is raised here; SQLite raises its own.
        self.inject = inject
        self.hold = False
        self.gate = anyio.Event()
        self.entered = anyio.Event()
        self.failures = 0
        #: Loop time of every failed attempt.
        self.failed_at: list[float] = []
        #: The writes of every successful commit, in order.
        self.committed: list[list[Write]] = []
        self._changed = anyio.Event()

    @property
    def transactions(self) -> int:
        return self.inner.transactions

    async def open(self) -> StoreContents:
        return await self.inner.open()

    async def commit(self, writes: Sequence[Write]) -> None:
        if self.hold:
            self.entered.set()
            await self.gate.wait()
        try:
            if self.inject and self.disk.full:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            await self.inner.commit(writes)
        except Exception:
            self.failures += 1
            self.failed_at.append(anyio.current_time())
            self._changed.set()
            self._changed = anyio.Event()
            raise
        self.committed.append(list(writes))

    async def aclose(self) -> None:
        await self.inner.aclose()

    async def wait_failures(self, count: int) -> None:
        """Wait until *count* commits have failed.

        No timeout of its own: on virtual time it would fire while SQLite works in its
        thread (the clock jumps to the next timer).  Each turn of the loop is one failure,
        and pytest's timeout bounds the wait.
        """
        while self.failures < count:
            await self._changed.wait()


@dataclass
class Storage:
    """One kind of store over one set of data: :meth:`open` gives a fresh store on it."""

    kind: str
    path: Path
    disk: Disk = field(default_factory=Disk)
    memory: MemoryStore = field(default_factory=MemoryStore)

    #: What the store's error says, as it reaches the refused RPCs.
    @property
    def error_text(self) -> str:
        return "database or disk is full" if self.kind == "sqlite" else os.strerror(errno.ENOSPC)

    def open(self) -> FailingStore:
        if self.kind == "memory":
            return FailingStore(self.memory, self.disk, inject=True)
        store = SqliteStore(self.path)
        store._in_transaction_hook = _sqlite_disk(self.disk)
        return FailingStore(store, self.disk, inject=False)


def _sqlite_disk(disk: Disk) -> Callable[[sqlite3.Connection], None]:
    """The store's in-transaction hook: while the disk is full, the file may not grow and a
    filler row wants more than its free pages, so SQLite fails the transaction (and rolls it
    back) with SQLITE_FULL; the filler goes with the rollback."""

    def hook(conn: sqlite3.Connection) -> None:
        if disk.full:
            (pages,) = conn.execute("PRAGMA page_count").fetchone()
            (free,) = conn.execute("PRAGMA freelist_count").fetchone()
            (page_size,) = conn.execute("PRAGMA page_size").fetchone()
            conn.execute(f"PRAGMA max_page_count = {pages}")
            conn.execute("CREATE TABLE IF NOT EXISTS disk_filler (b BLOB)")
            conn.execute("INSERT INTO disk_filler VALUES (zeroblob(?))", ((free + 1) * page_size,))
            raise AssertionError("the database grew beyond max_page_count")
        conn.execute("PRAGMA max_page_count = 1073741823")

    return hook


@pytest.fixture(params=["memory", "sqlite"])
def storage(request: pytest.FixtureRequest, tmp_path: Path) -> Storage:
    return Storage(request.param, tmp_path / "db.sqlite3")


def assert_ledger(engine: Any, ledger: set[str]) -> None:
    """Exactly the acknowledged jobs are live: none lost, none extra (no duplicates)."""
    for job_id in ledger:
        assert engine.snapshot_job(job_id) is not None, job_id
    assert sum(s.live_depth for s in engine.stats().values()) == len(ledger)


def failing(engine: Engine) -> bool:
    """``engine.storage_failed``, read afresh (a function, so that mypy does not narrow it)."""
    return engine.storage_failed


async def expect_refused(call: Callable[[], Any], storage: Storage) -> None:
    with pytest.raises(EngineError) as info:
        await call()
    assert info.value.status is StatusCode.UNAVAILABLE
    assert info.value.message.startswith("storage unavailable: writes are failing"), info.value
    assert storage.error_text in info.value.message
    assert info.value.message.endswith("retrying, try again later")


async def test_a_failed_commit_is_held_retried_and_recovers_without_loss(
    storage: Storage,
) -> None:
    clock = ManualClock(T0)
    store = storage.open()
    async with running(store=store, clock=clock) as engine:
        ledger = set(await enqueue(engine, big(), big(), big()))
        [first] = await reserve(engine)
        await ack(engine, first)
        ledger.remove(first.id)
        [second] = await reserve(engine)  # leased before the failure, acked after it
        assert not failing(engine)

        storage.disk.full = True
        held: list[str] = []
        answered = anyio.Event()

        async def held_enqueue() -> None:
            held.extend(await enqueue(engine, big(), big()))
            answered.set()

        async with anyio.create_task_group() as tg:
            tg.start_soon(held_enqueue)
            await store.wait_failures(1)
            assert failing(engine)
            # Refused before touching anything, so each could be retried safely.
            await expect_refused(lambda: enqueue(engine, big()), storage)
            await expect_refused(lambda: reserve(engine), storage)
            await expect_refused(lambda: ack(engine, second), storage)
            await expect_refused(lambda: drain(engine), storage)
            assert (
                await rpc_of(engine).get_server_info(pb.GetServerInfoRequest())
            ).supported_protocol_versions == ["v1"]
            # Retried, and never answered while failing.
            await store.wait_failures(5)
            assert not answered.is_set() and failing(engine)
            storage.disk.full = False
            await answered.wait()
        assert not failing(engine)
        assert len(held) == 2
        ledger.update(held)
        # Working again: the lease taken before the failure is still good.
        await ack(engine, second)
        ledger.remove(second.id)
        ledger.update(await enqueue(engine, big()))
        assert_ledger(engine, ledger)
        # The held group was committed once, after its failed attempts.
        held_commits = [
            writes
            for writes in store.committed
            if any(isinstance(w, PutJob) and w.job.id in held for w in writes)
        ]
        assert len(held_commits) == 1

    async with running(store=storage.open(), clock=clock) as engine:
        assert_ledger(engine, ledger)
    if storage.kind == "sqlite":
        # The failed attempts were rolled back whole (the hook's filler with them).
        with sqlite3.connect(storage.path) as conn:
            tables = {name for (name,) in conn.execute("SELECT name FROM sqlite_master")}
        conn.close()
        assert "disk_filler" not in tables


async def test_requests_queued_behind_the_failed_commit_follow_it_in_order(
    storage: Storage,
) -> None:
    clock = ManualClock(T0)
    store = storage.open()
    async with running(store=store, clock=clock) as engine:
        storage.disk.full = True
        store.hold = True
        ids: dict[str, list[str]] = {}

        async def one(name: str) -> None:
            ids[name] = await enqueue(engine, big())

        async with anyio.create_task_group() as tg:
            tg.start_soon(one, "a")
            await store.entered.wait()
            # Accepted while the first commit is in flight (it has not failed yet): they
            # changed memory, so they must reach the disk after it.
            tg.start_soon(one, "b")
            tg.start_soon(one, "c")
            await anyio.wait_all_tasks_blocked()
            store.hold = False
            store.gate.set()
            await store.wait_failures(1)
            assert failing(engine)
            await expect_refused(lambda: enqueue(engine, big()), storage)
            await store.wait_failures(3)
            assert ids == {}
            storage.disk.full = False
        assert not failing(engine)
        order = [w.job.id for writes in store.committed for w in writes if isinstance(w, PutJob)]
        # a's group first, then b's and c's together (in the order they were submitted).
        assert len(store.committed) == 2
        assert order[0] == ids["a"][0]
        assert set(order[1:]) == {*ids["b"], *ids["c"]}
        ledger = {i for group in ids.values() for i in group}
        assert_ledger(engine, ledger)
        # FIFO still holds: the queue serves them in the order they were accepted.
        assert [j.id for j in await reserve(engine, max_jobs=3)] == order
    async with running(store=storage.open(), clock=clock) as engine:
        assert_ledger(engine, ledger)


async def test_stopping_while_storage_fails_answers_held_requests_and_keeps_none(
    storage: Storage,
) -> None:
    clock = ManualClock(T0)
    store = storage.open()
    outcome: list[EngineError] = []

    async def held_enqueue(engine: Any) -> None:
        try:
            await enqueue(engine, big())
        except EngineError as exc:
            outcome.append(exc)

    async with anyio.create_task_group() as tg, running(store=store, clock=clock) as engine:
        ledger = set(await enqueue(engine, big(), big()))
        storage.disk.full = True
        tg.start_soon(held_enqueue, engine)
        await store.wait_failures(2)
        # Leaving the engine made one last attempt, which failed too.
    assert store.failures == 3
    assert [(e.status, e.message) for e in outcome] == [
        (StatusCode.INTERNAL, "storage commit failed")
    ]

    storage.disk.full = False
    async with running(store=storage.open(), clock=clock) as engine:
        assert_ledger(engine, ledger)


async def test_retries_back_off_from_50_ms_doubling_to_5_s(tmp_path: Path) -> None:
    storage = Storage("memory", tmp_path / "unused")
    store = storage.open()
    async with running(store=store, clock=ManualClock(T0)) as engine:
        storage.disk.full = True
        async with anyio.create_task_group() as tg:
            tg.start_soon(enqueue, engine, big())
            await store.wait_failures(11)
            storage.disk.full = False
    gaps = [b - a for a, b in zip(store.failed_at, store.failed_at[1:], strict=False)]
    assert (STORAGE_RETRY_INITIAL_DELAY, STORAGE_RETRY_MAX_DELAY) == (0.05, 5.0)
    expected = [0.05, 0.1, 0.2, 0.4, 0.8, 1.6, 3.2, 5.0, 5.0, 5.0]
    assert gaps == pytest.approx(expected, abs=1e-3)


async def test_the_timer_waits_for_the_store_and_catches_up(storage: Storage) -> None:
    clock = ManualClock(T0)
    store = storage.open()
    async with running(store=store, clock=clock) as engine:
        [job_id] = await enqueue(engine, big())
        [leased] = await reserve(engine, lease=1.0)
        storage.disk.full = True
        async with anyio.create_task_group() as tg:
            tg.start_soon(enqueue, engine, big())
            await store.wait_failures(1)
            # The lease runs out while the store fails: nothing is swept meanwhile.
            await clock.advance(2.0)
            assert engine.stats()["q"].inflight == 1
            storage.disk.full = False
        # Recovered: the timer runs at once, and its sweep hands the job back (in memory at
        # once; its writes go to the store behind it).
        await clock.settle()
        assert engine.stats()["q"].inflight == 0
        assert engine.stats()["q"].ready == 2
        [again, _] = await reserve(engine, max_jobs=2)
        assert (again.id, again.attempt) == (job_id, leased.attempt + 1)
