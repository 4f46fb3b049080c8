"""What a job of a typed task calls: decode and validate its payload, then the function.

A payload that fails :meth:`Task.decode` raises :class:`~sepp_anyio.TaskPayloadError`, a
dead-lettering :class:`~sepp_anyio.HandlerError`, so the worker's ordinary handling of
handler errors dead-letters the job on that attempt with the error's reason.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from .._model._job import JobCtx
from .._model._payload import Payload
from ._task import Task

__all__ = ["typed_call"]

T = TypeVar("T")

#: ``run_in_thread(fn, payload, ctx)``: the worker's way of running a sync handler.
RunInThread = Callable[[Callable[[Any, JobCtx[Any]], object], Any, JobCtx[Any]], Awaitable[None]]


def _decoded(
    task: Task[T], fn: Callable[[T, JobCtx[Any]], object], payload: Payload | None, ctx: JobCtx[Any]
) -> object:
    """Decode in the calling thread, then call ``fn`` (validation of a large payload is
    work too, so a sync task does it in its worker thread, off the event loop)."""
    return fn(task.decode(payload), ctx)


def typed_call(
    task: Task[T],
    fn: Callable[[T, JobCtx[Any]], Awaitable[None] | None],
    is_async: bool,
    run_in_thread: RunInThread,
) -> Callable[[Payload | None, JobCtx[Any]], Awaitable[None]]:
    """An async ``call(payload, ctx)`` that runs ``fn(task.decode(payload), ctx)``.

    Args:
        is_async: ``fn`` is awaited on the event loop; else it (and the decoding) runs
            through ``run_in_thread``.
    """
    decode = task.decode
    if is_async:
        run: Callable[[T, JobCtx[Any]], Awaitable[None]] = fn  # type: ignore[assignment]

        async def call(payload: Payload | None, ctx: JobCtx[Any]) -> None:
            await run(decode(payload), ctx)

        return call

    in_thread = functools.partial(_decoded, task, fn)

    async def call_sync(payload: Payload | None, ctx: JobCtx[Any]) -> None:
        await run_in_thread(in_thread, payload, ctx)

    return call_sync
