"""The interface between the engine and its durable storage.

The engine keeps every working index in memory and is the only reader; a store only has to
(1) hand back everything it holds when the engine starts and (2) apply a sequence of row-level
writes atomically and durably.  Group commit is the engine's business (``_committer.py``): it
calls :meth:`Store.commit` once per group, never concurrently.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from ._records import StoreContents, Write


class Store(Protocol):
    """What :class:`~sepp_anyio.server.Engine` needs from a store.

    Lifecycle: ``open()`` once, then any number of ``commit()`` calls, then ``aclose()``.
    """

    @property
    def transactions(self) -> int:
        """Number of transactions committed so far (for group-commit tests and metrics)."""
        ...

    async def open(self) -> StoreContents:
        """Open the store and return everything in it.

        Cancellation: must leave the store closed, or finish opening first (the engine
        calls ``aclose()`` only once ``open()`` has returned).

        Raises:
            RuntimeError: if the store is already open.
            Exception: whatever the storage layer raises (corrupt or foreign database).
        """
        ...

    async def commit(self, writes: Sequence[Write]) -> None:
        """Apply *writes* in order, in one transaction; durable when this returns.

        Cancellation: the transaction either completes or is rolled back; the caller cannot
        tell which, so the engine never cancels a commit outside of teardown.

        After a failure the store must stay usable: the engine calls ``commit`` again with the
        same writes until it succeeds (``_committer.py``), which is correct even if the failed
        call did reach the disk, because every write sets or deletes a whole row's values.

        Raises:
            Exception: on a storage failure (the transaction is rolled back).
        """
        ...

    async def aclose(self) -> None:
        """Release the store's resources.  Idempotent.

        Cancellation: the engine calls it shielded from cancellation, so it must finish on
        its own, promptly.
        """
        ...
