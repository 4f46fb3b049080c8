"""Crons run inside a worker (``Worker.cron``): registered before ``run()``, scheduled in
the worker's own task group, through its client, from the start of ``run()`` until its
shutdown signal."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import anyio
import anyio.abc

from .._cron import Cron, run_cron
from .._model._error_root import InvalidArgumentError, InvalidArgumentTypeError

if TYPE_CHECKING:
    from .._client import Client

__all__ = ["checked_cron", "start_crons"]


def checked_cron(cron: object, known: Sequence[Cron[Any]], running: bool) -> Cron[Any]:
    """``cron``, checked to join ``known`` (``Worker.cron``'s rules).

    Raises:
        InvalidArgumentTypeError: ``cron`` is not a :class:`~sepp_anyio.Cron`.
        InvalidArgumentError: a cron of the same name is already registered.
        RuntimeError: the worker is running.
    """
    if not isinstance(cron, Cron):
        raise InvalidArgumentTypeError(f"cron must be a sepp_anyio.Cron, got {type(cron).__name__}")
    if running:
        raise RuntimeError("register crons before run(): this worker is running")
    if any(other.name == cron.name for other in known):
        raise InvalidArgumentError(
            f"a cron named {cron.name!r} is already registered: their idempotency keys"
            " would collide (give one of them another name=)"
        )
    return cron


async def start_crons(
    tg: anyio.abc.TaskGroup, client: Client, crons: Sequence[Cron[Any]], worker_id: str
) -> anyio.CancelScope:
    """Start the scheduler of ``crons`` (if any) in ``tg``; cancelling the returned scope
    stops it."""
    scope = anyio.CancelScope()
    if crons:
        chosen = list(crons)

        async def schedule(*, task_status: anyio.abc.TaskStatus[None]) -> None:
            with scope:
                await run_cron(client, chosen, task_status=task_status)

        await tg.start(schedule, name=f"sepp cron scheduler of {worker_id}")
    return scope
