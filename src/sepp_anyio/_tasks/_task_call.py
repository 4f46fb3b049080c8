"""What a job of a typed task calls: decode and validate its payload, then the function.

A payload that fails :meth:`Task.decode` raises :class:`~sepp_anyio.TaskPayloadError`, a
dead-lettering :class:`~sepp_anyio.HandlerError`, so the worker's ordinary handling of
handler errors dead-letters the job on that attempt with the error's reason.

For a job that asks for its result (``sepp.reply_to``), the value the function returns is
validated and encoded by :meth:`Task.encode_result` and recorded in the job's context
(``set_result``): the worker sends it before it acks. One that does not validate raises
:class:`~sepp_anyio.InvalidResultError`, a handler failure.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from .._model._job import JobCtx, set_result
from .._model._payload import Payload
from .._model._results import REPLY_TO
from ._task import Task

__all__ = ["typed_call"]

T = TypeVar("T")

#: ``run_in_thread(fn, payload, ctx)``: the worker's way of running a sync handler.
RunInThread = Callable[[Callable[[Any, JobCtx[Any]], object], Any, JobCtx[Any]], Awaitable[None]]


def _keep(task: Task[Any, Any], ctx: JobCtx[Any], value: object) -> None:
    """Record ``value`` as the job's result if it asks for one (validated and encoded)."""
    if REPLY_TO in ctx.custom:
        set_result(ctx, task.encode_result(value))


async def _kept_later(task: Task[Any, Any], ctx: JobCtx[Any], pending: Awaitable[object]) -> None:
    _keep(task, ctx, await pending)


def _decoded(
    task: Task[T, Any],
    fn: Callable[[T, JobCtx[Any]], object],
    payload: Payload | None,
    ctx: JobCtx[Any],
) -> object:
    """Decode in the calling thread, then call ``fn`` (validation of a large payload is
    work too, so a sync task does it in its worker thread, off the event loop), and keep
    what it returns (an awaitable it returns is awaited on the event loop first)."""
    out = fn(task.decode(payload), ctx)
    if inspect.isawaitable(out):
        return _kept_later(task, ctx, out)
    _keep(task, ctx, out)
    return None


def typed_call(
    task: Task[T, Any],
    fn: Callable[[T, JobCtx[Any]], object],
    is_async: bool,
    run_in_thread: RunInThread,
) -> Callable[[Payload | None, JobCtx[Any]], Awaitable[None]]:
    """An async ``call(payload, ctx)`` that runs ``fn(task.decode(payload), ctx)`` and
    keeps its return value as the job's result when the job asks for one.

    Args:
        is_async: ``fn`` is awaited on the event loop; else it (and the decoding) runs
            through ``run_in_thread``.
    """
    decode = task.decode
    if is_async:
        run: Callable[[T, JobCtx[Any]], Awaitable[object]] = fn  # type: ignore[assignment]

        async def call(payload: Payload | None, ctx: JobCtx[Any]) -> None:
            _keep(task, ctx, await run(decode(payload), ctx))

        return call

    in_thread = functools.partial(_decoded, task, fn)

    async def call_sync(payload: Payload | None, ctx: JobCtx[Any]) -> None:
        await run_in_thread(in_thread, payload, ctx)

    return call_sync
