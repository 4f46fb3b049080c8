"""Middleware: async context managers the worker enters around every handler call.

``Worker(middleware=[m1, m2])`` calls ``m1(ctx)`` and ``m2(ctx)`` for each job and enters
what they return in that order (so ``m1`` is the outermost), inside the job's cancel scope
and inside its timeout, with the handler innermost. An exception raised while entering or
leaving one counts as the handler's (it is nacked as a handler exception would be; a
:class:`~sepp_anyio.HandlerError` keeps its directive). A middleware that swallows the
handler's exception (its ``__aexit__`` returns true) turns the job into an ack: that is the
middleware's decision. A cancellation (lease lost, timeout, shutdown) reaches the
middleware as it reaches the handler, and its outcome is decided by the worker's flags,
whatever the middleware does with it.

Typical uses: an error reporter (look at the exception in ``__aexit__`` and let it
propagate), a database transaction per job (commit on a clean exit, roll back otherwise),
a timing log.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any, TypeAlias

from .._model._error_root import InvalidArgumentTypeError
from .._model._job import JobCtx

__all__ = ["Middleware", "call_through", "check_middleware"]

#: One middleware: called with the job's context, returns an async context manager.
Middleware: TypeAlias = Callable[[JobCtx[Any]], AbstractAsyncContextManager[object]]


def check_middleware(middleware: object) -> tuple[Middleware, ...]:
    """The ``middleware`` argument, checked: a sequence of callables.

    Raises:
        InvalidArgumentTypeError: it is a single callable or a str rather than a sequence,
            or an item is not callable (the message names its index).
    """
    if middleware is None:
        return ()
    if (
        callable(middleware)
        or isinstance(middleware, str | bytes)
        or not isinstance(middleware, Sequence)
    ):
        raise InvalidArgumentTypeError(
            "middleware must be a sequence of callables (each called with the job's ctx, "
            f"returning an async context manager), got a {type(middleware).__name__}"
        )
    for index, item in enumerate(middleware):
        if not callable(item):
            raise InvalidArgumentTypeError(
                f"middleware[{index}] must be callable as middleware(ctx) -> async context "
                f"manager, got a {type(item).__name__}"
            )
    return tuple(middleware)


async def call_through(
    middleware: tuple[Middleware, ...],
    call: Callable[[Any, JobCtx[Any]], Awaitable[None]],
    payload: Any,
    ctx: JobCtx[Any],
) -> None:
    """Enter every middleware in order, then ``await call(payload, ctx)`` inside them.

    Raises:
        TypeError: a middleware did not return an async context manager.
        Exception: whatever the handler or a middleware raised and no middleware swallowed.
    """
    async with contextlib.AsyncExitStack() as stack:
        for item in middleware:
            # Checked at run time too: an untyped middleware may return anything (its
            # subclass hook accepts any object with __aenter__ and __aexit__).
            manager: object = item(ctx)
            if not isinstance(manager, AbstractAsyncContextManager):
                raise InvalidArgumentTypeError(
                    f"middleware {getattr(item, '__qualname__', item)!r} returned a "
                    f"{type(manager).__name__}, not an async context manager"
                )
            await stack.enter_async_context(manager)
        await call(payload, ctx)
