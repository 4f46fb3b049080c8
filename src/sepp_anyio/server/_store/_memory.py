"""MemoryStore: a store that keeps its rows in dictionaries.

Nothing survives the process, but the rows survive the *engine*: a new Engine opened on the
same MemoryStore recovers them, exactly as with SQLite, which lets recovery be tested on any
backend without touching the disk.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import final

import anyio.lowlevel

from ._records import (
    DeadLetter,
    DedupEntry,
    DeleteDeadLetter,
    DeleteDedup,
    DeleteJob,
    PutDeadLetter,
    PutDedup,
    PutJob,
    StoreContents,
    StoredJob,
    Write,
)


@final
class MemoryStore:
    """An in-memory :class:`~sepp_anyio.server.Store`; the default store of an Engine."""

    def __init__(self) -> None:
        self._jobs: dict[str, StoredJob] = {}
        self._dead_letters: dict[str, DeadLetter] = {}
        self._dedup: dict[tuple[str, str], DedupEntry] = {}
        self._transactions = 0
        self._open = False

    @property
    def transactions(self) -> int:
        return self._transactions

    async def open(self) -> StoreContents:
        """Mark the store in use and return its contents (see :meth:`Store.open`).

        Cancellation: at its one checkpoint, before anything else: the store is left unused
        (so a later engine can still open it).

        Raises:
            RuntimeError: the store is already used by a running engine.
        """
        # The checkpoint comes first: an engine cancelled here never gets to aclose(), and a
        # store marked open would refuse every later engine.
        await anyio.lowlevel.checkpoint()
        if self._open:
            raise RuntimeError("this MemoryStore is already used by a running engine")
        self._open = True
        return StoreContents(
            jobs=list(self._jobs.values()),
            dead_letters=list(self._dead_letters.values()),
            dedup=list(self._dedup.values()),
        )

    async def commit(self, writes: Sequence[Write]) -> None:
        """Apply *writes* in order, all at once (see :meth:`Store.commit`).

        Cancellation: at its one checkpoint, before any write is applied: nothing is.
        """
        # Yield first, as a real store would: RPCs arriving meanwhile join the next group.
        await anyio.lowlevel.checkpoint()
        for write in writes:
            match write:
                case PutJob(job=job):
                    self._jobs[job.id] = job
                case DeleteJob(job_id=job_id):
                    self._jobs.pop(job_id, None)
                case PutDeadLetter(record=record):
                    self._dead_letters[record.job.id] = record
                case DeleteDeadLetter(job_id=job_id):
                    self._dead_letters.pop(job_id, None)
                case PutDedup(entry=entry):
                    self._dedup[entry.queue, entry.key] = entry
                case DeleteDedup(queue=queue, key=key):
                    self._dedup.pop((queue, key), None)
        self._transactions += 1

    async def aclose(self) -> None:
        """Mark the store unused; its contents stay, for a later engine.  Never suspends,
        so cancellation does not affect it."""
        self._open = False
