"""The worker's lifespan: setup before the first reserve, teardown after the drain.

``Worker(lifespan=fn)``: ``fn(worker)`` returns an async context manager (an
``@asynccontextmanager`` function, or a plain async generator function that yields once,
which is wrapped as one). :meth:`Worker.run` enters it before it reports itself started
and before its first reserve, and leaves it only after the drain and after every task of
the worker has ended, so no handler runs before setup or after teardown. The value it
yields is ``worker.state`` and ``ctx.state`` in every handler.

An exception in setup makes ``run()`` (and ``async with worker``) raise it, unwrapped,
without reserving anything. The teardown sees the exception ``run()`` ends with, if any.
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager
from types import TracebackType
from typing import Any, TypeAlias

from .._model._error_root import InvalidArgumentTypeError

__all__ = ["Lifespan", "Remainder", "chained", "check_lifespan", "enter"]

#: ``lifespan(worker)``: an async context manager (or async generator) yielding the state.
Lifespan: TypeAlias = Callable[[Any], Any]


def check_lifespan(lifespan: object) -> Lifespan | None:
    """The ``lifespan`` argument, checked.

    Raises:
        InvalidArgumentTypeError: it is neither None nor callable.
    """
    if lifespan is not None and not callable(lifespan):
        raise InvalidArgumentTypeError(
            "lifespan must be callable as lifespan(worker) -> async context manager, got a "
            f"{type(lifespan).__name__}"
        )
    return lifespan


def _manager(lifespan: Lifespan, worker: object) -> AbstractAsyncContextManager[Any]:
    made = lifespan(worker)
    if hasattr(made, "__aenter__") and hasattr(made, "__aexit__"):
        return made  # type: ignore[no-any-return]
    if inspect.isasyncgen(made):
        # asynccontextmanager's protocol (one yield, the block's exception thrown in at
        # it), applied to a generator that was not decorated.
        generator = made
        return contextlib.asynccontextmanager(lambda: generator)()
    raise InvalidArgumentTypeError(
        f"lifespan {getattr(lifespan, '__qualname__', lifespan)!r} returned a "
        f"{type(made).__name__}, not an async context manager (decorate an async generator "
        "function with contextlib.asynccontextmanager, or pass it as it is)"
    )


@contextlib.asynccontextmanager
async def enter(
    lifespan: Lifespan | None, worker: object, keep: Callable[[Any], None]
) -> AsyncIterator[None]:
    """Enter ``lifespan(worker)``, hand its value to ``keep``, and leave it on exit.

    Raises:
        TypeError: ``lifespan`` did not return an async context manager.
        Exception: whatever its setup or teardown raised.
    """
    if lifespan is None:
        keep(None)
        yield
        return
    async with _manager(lifespan, worker) as state:
        keep(state)
        yield


class Remainder:
    """The exit of an async context manager that was entered elsewhere, left at most once.

    The CLI enters an async-generator factory up to its ``yield`` (which builds the
    worker) and makes the rest of it the outermost part of the worker's lifespan with
    :func:`chained`, so its teardown runs inside ``run()``, after the drain, like any
    lifespan's. Leaving it again is a no-op, so the CLI can also leave it for a worker
    whose ``run()`` never got that far.
    """

    __slots__ = ("_left", "_manager")

    def __init__(self, manager: AbstractAsyncContextManager[Any]) -> None:
        self._manager = manager
        self._left = False

    async def __aenter__(self) -> None:
        return None

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        if self._left:
            return None
        self._left = True
        return await self._manager.__aexit__(exc_type, exc, tb)


def chained(outer: AbstractAsyncContextManager[Any], inner: Lifespan | None) -> Lifespan:
    """A lifespan that enters ``outer`` and then ``inner`` (if any), yielding ``inner``'s
    value (None without one), and leaves them in reverse order."""

    @contextlib.asynccontextmanager
    async def lifespan(worker: object) -> AsyncIterator[Any]:
        async with outer:
            if inner is None:
                yield None
            else:
                async with _manager(inner, worker) as state:
                    yield state

    return lifespan
