"""A :class:`~sepp_anyio.server.Store` that remembers which jobs exist, for the harness.

The engine has no public listing of a queue's jobs (only counts, one job by id, and dead
letters), but every change it makes goes through its store: :class:`RecordingStore` wraps
the real one (a :class:`~sepp_anyio.server.MemoryStore` by default), passes every call
through, and keeps, once each commit has succeeded,

* the ids of the live jobs per queue (the harness then reads each one's current state with
  ``Engine.snapshot_job``, so a scheduled job that came due reads as ready), and
* the queue and job type of every job it ever saw (a result names its job only by id), and
* an event that is set at every commit, so the harness waits for the next change instead
  of polling.
"""

from __future__ import annotations

from collections.abc import Sequence

import anyio

from ..server import Store
from ..server._store._records import DeleteJob, PutJob, StoreContents, Write

__all__ = ["RecordingStore"]


class RecordingStore:
    """Passes everything to ``inner`` and records the live job ids (see the module docs)."""

    def __init__(self, inner: Store) -> None:
        self._inner = inner
        #: Live job ids per queue, in the order they were first written.
        self.live: dict[str, dict[str, None]] = {}
        #: Every job id seen, to its (queue, job type).
        self.seen: dict[str, tuple[str, str]] = {}
        # Made on first use: an anyio.Event belongs to the running event loop.
        self._changed: anyio.Event | None = None

    @property
    def transactions(self) -> int:
        return self._inner.transactions

    def changed(self) -> anyio.Event:
        """An event set at the next successful commit (a new one after each)."""
        if self._changed is None:
            self._changed = anyio.Event()
        return self._changed

    async def open(self) -> StoreContents:
        """Open the inner store and record what it holds (raises what it raises)."""
        contents = await self._inner.open()
        for job in contents.jobs:
            self._put(job.id, job.queue, job.job_type)
        return contents

    async def commit(self, writes: Sequence[Write]) -> None:
        """Commit through the inner store; only a commit that succeeded is recorded.

        Cancellation and errors: as the inner store's (nothing is recorded then).
        """
        await self._inner.commit(writes)
        for write in writes:
            if isinstance(write, PutJob):
                job = write.job
                self._put(job.id, job.queue, job.job_type)
            elif isinstance(write, DeleteJob):
                known = self.seen.get(write.job_id)
                if known is not None:
                    self.live.get(known[0], {}).pop(write.job_id, None)
        changed, self._changed = self._changed, None
        if changed is not None:
            changed.set()

    def _put(self, job_id: str, queue: str, job_type: str) -> None:
        self.seen[job_id] = (queue, job_type)
        self.live.setdefault(queue, {})[job_id] = None

    async def aclose(self) -> None:
        await self._inner.aclose()
