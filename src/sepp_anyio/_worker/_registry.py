"""Handlers: what may be registered, and whether it runs on the event loop or in a thread.

Which one is decided once, at registration (:func:`check_handler`); a ``functools.partial``
of either, a bound method and an object whose ``__call__`` is ``async def`` count as what
they wrap. A bad registration raises :class:`HandlerSignatureError` (an
:class:`~sepp_anyio.InvalidArgumentTypeError`, so also a :class:`TypeError`).
"""

from __future__ import annotations

import functools
import inspect
import reprlib
from collections.abc import Awaitable, Callable
from typing import Any, TypeAlias, TypeVar

import anyio
import anyio.to_thread

from .._model._error_root import InvalidArgumentTypeError
from .._model._job import JobCtx
from .._model._payload import Payload

AsyncHandler: TypeAlias = Callable[[Payload | None, JobCtx], Awaitable[None]]
SyncHandler: TypeAlias = Callable[[Payload | None, JobCtx], None]
#: A job handler: ``async def handler(payload, ctx) -> None``, or a plain
#: ``def handler(payload, ctx) -> None``, which runs in a worker thread.
Handler: TypeAlias = AsyncHandler | SyncHandler
H = TypeVar("H", bound=Handler)

#: What a handler is called with, for the errors of a registration that cannot work.
_EXPECTED_SIGNATURE = "handler(payload: Payload | None, ctx: JobCtx) -> None"


class HandlerSignatureError(InvalidArgumentTypeError):
    """A handler that cannot be registered (internal: the CLI reports it as a usage error).

    An :class:`~sepp_anyio.InvalidArgumentTypeError`, so also a :class:`TypeError`, as the
    public API promises for a bad registration.
    """


def _given(value: object) -> str:
    """A wrong value and its type for an error message: ``3 (an int)``, ``None``."""
    if value is None:
        return "None"
    name = type(value).__name__
    article = "an" if name[:1].lower() in "aeiou" else "a"
    return f"{reprlib.repr(value)} ({article} {name})"


def _is_async_callable(fn: object) -> bool:
    """Whether calling ``fn`` gives an awaitable by construction: an ``async def``
    function, or a partial, bound method or object whose ``__call__`` is one.

    ``__wrapped__`` is not followed: a plain wrapper may do blocking work before it returns
    the wrapped coroutine, so it runs in a thread (and its awaitable on the event loop).
    """
    while True:
        if isinstance(fn, functools.partial):
            fn = fn.func
        elif inspect.ismethod(fn):
            fn = fn.__func__
        else:
            break
    if inspect.iscoroutinefunction(fn):
        return True
    if inspect.isroutine(fn) or isinstance(fn, type):
        return False
    call = inspect.getattr_static(type(fn), "__call__", None)
    while isinstance(call, functools.partialmethod):
        call = call.func
    return inspect.iscoroutinefunction(call)


def check_handler(what: str, fn: object) -> bool:
    """Check that ``fn`` can be called as ``handler(payload, ctx)``; return whether it is
    async (False: it is run in a worker thread).

    Args:
        what: names the registration in errors, e.g. ``"job type 'resize'"``.

    Raises:
        HandlerSignatureError: (an ``InvalidArgumentTypeError``, a ``TypeError``) ``fn``
            is not callable, is an async generator function, or its signature cannot take
            two positional arguments.
    """
    if not callable(fn):
        raise HandlerSignatureError(
            f"the handler for {what} must be an async or sync function taking (payload, "
            f"ctx); got {_given(fn)}"
        )
    if inspect.isasyncgenfunction(fn) or inspect.isgeneratorfunction(fn):
        kind = "an async generator" if inspect.isasyncgenfunction(fn) else "a generator"
        raise HandlerSignatureError(
            f"the handler for {what} is {kind} function; expected {_EXPECTED_SIGNATURE} "
            "(async def or def)"
        )
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):  # no signature to inspect (some builtins): trust it
        signature = None
    if signature is not None:
        try:
            signature.bind(None, None)
        except TypeError:
            raise HandlerSignatureError(
                f"the handler for {what} cannot be called as {_EXPECTED_SIGNATURE}: its "
                f"signature is {getattr(fn, '__qualname__', type(fn).__name__)}{signature}"
            ) from None
    return _is_async_callable(fn)


def boxed(fn: Callable[[Any, JobCtx], object], payload: Any, ctx: JobCtx) -> tuple[object]:
    """Call a sync handler (in its thread), its result in a tuple: trio refuses to hand a
    coroutine back from a thread, and one returned here is to be awaited on the loop."""
    return (fn(payload, ctx),)


class HandlerAdapters:
    """How a registered handler is called (a base class of the worker, which sets
    ``_sync_limiter`` when it runs): an async one as it is, a plain one in a thread."""

    _sync_limiter: anyio.CapacityLimiter | None

    def _adapted(self, fn: Handler, is_async: bool) -> AsyncHandler:
        """What a job calls: ``fn`` itself if it is async, else ``fn`` in a thread."""
        if is_async:
            return fn  # type: ignore[return-value]
        return functools.partial(self._run_in_thread, fn)

    async def _run_in_thread(
        self, fn: Callable[[Any, JobCtx], object], payload: Any, ctx: JobCtx
    ) -> None:
        """Run a plain handler in a worker thread of the sync limiter.

        The thread is not abandoned on cancellation (Python cannot stop it): the
        cancellation reaches it through ``anyio.from_thread.check_cancelled()``, and this
        returns only once the thread has.
        """
        limiter = self._sync_limiter
        assert limiter is not None, "sync handlers run only inside run()"
        (result,) = await anyio.to_thread.run_sync(boxed, fn, payload, ctx, limiter=limiter)
        if inspect.isawaitable(result):
            # A plain function that returned an awaitable (a lambda around an async
            # function, a plain decorator): that is the handler's work, and its coroutine
            # has not started yet, so it runs here, on the event loop.
            await result
