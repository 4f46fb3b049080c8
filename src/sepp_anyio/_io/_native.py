"""The running backend's own clock, single-waiter wake-up and cancel scope, for a call's
hot path in either role.

Every ``anyio.current_time()`` and ``anyio.Event()`` first looks up the running backend
(a context variable, then the library's name, then a dictionary); a unary call made a
dozen such lookups, a tenth of its Python function calls, and the reference server about
eight per job. A connection (client or server) looks the backend up once, when it starts,
and its calls then use what this module returns: the event
loop's own clock, a :class:`Waiter` on the backend's own primitives (an
``asyncio.Future``; trio's ``wait_task_rescheduled`` / ``reschedule``) and, on trio,
``trio.CancelScope`` itself (anyio's is a wrapper around it), all public API of asyncio
and trio. anyio's cancel scopes work on both unchanged: a cancelled wait raises the
backend's cancellation, as ``anyio.Event.wait`` does.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable
from typing import Any, Final, Protocol

import anyio
import anyio.lowlevel

__all__ = ["ANYIO", "Native", "Waiter", "native"]


class Waiter(Protocol):
    """One task waits (:meth:`wait`) until another wakes it (:meth:`set`), once."""

    def set(self) -> None:
        """Wake the waiting task (if it still waits); later calls do nothing."""
        ...

    def is_set(self) -> bool:
        """Whether :meth:`set` was called."""
        ...

    async def wait(self) -> None:
        """Wait until :meth:`set` (at once if it was set already); cancellable."""
        ...


class Native(Protocol):
    """The running backend's clock, waiter factory, cancel scope and checkpoint."""

    @property
    def now(self) -> Callable[[], float]:
        """The backend's clock (the same value as ``anyio.current_time()``)."""
        ...

    @property
    def effective_deadline(self) -> Callable[[], float]:
        """The running task's effective deadline (``anyio.current_effective_deadline``; on
        trio, trio's own, which anyio's calls)."""
        ...

    def waiter(self) -> Waiter:
        """A fresh :class:`Waiter`."""
        ...

    def cancel_scope(
        self, deadline: float = math.inf, *, shield: bool = False
    ) -> anyio.CancelScope:
        """A cancel scope with ``deadline`` and ``shield`` (on trio, trio's own: anyio's is a
        wrapper around it; typed as anyio's, whose interface it has)."""
        ...

    async def checkpoint(self) -> None:
        """Yield to the scheduler, and raise if the task's scope is cancelled (what
        ``anyio.lowlevel.checkpoint`` does)."""
        ...

    @property
    def call_soon(self) -> Callable[[Callable[[], object]], object] | None:
        """Run a plain function once the tasks ready now have run their steps, outside any
        task (asyncio's ``loop.call_soon``); None where the backend has no such cheap
        callback (trio: its ``run_sync_soon`` wakes the loop through a socket)."""
        ...


class _AsyncioWaiter:
    __slots__ = ("_future", "_loop", "_set")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._future: asyncio.Future[None] | None = None
        # Its own flag: a cancelled wait leaves the future done but the waiter unset.
        self._set = False

    def is_set(self) -> bool:
        return self._set

    def set(self) -> None:
        self._set = True
        future = self._future
        if future is None:
            self._future = future = self._loop.create_future()
        if not future.done():
            future.set_result(None)

    async def wait(self) -> None:
        future = self._future
        if future is None:
            self._future = future = self._loop.create_future()
        await future


class _Asyncio:
    __slots__ = ("_loop", "call_soon", "now")

    # (anyio's cancel scopes are anyio's own on asyncio: only anyio knows their deadlines.)
    effective_deadline = staticmethod(anyio.current_effective_deadline)

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self.now = loop.time
        self.call_soon: Callable[[Callable[[], object]], object] | None = loop.call_soon

    def waiter(self) -> Waiter:
        return _AsyncioWaiter(self._loop)

    def cancel_scope(
        self, deadline: float = math.inf, *, shield: bool = False
    ) -> anyio.CancelScope:
        return anyio.CancelScope(deadline=deadline, shield=shield)

    async def checkpoint(self) -> None:
        # What anyio's own checkpoint is on asyncio; a cancelled anyio scope has already
        # asked the task to cancel, and this await delivers it.
        await asyncio.sleep(0)


# trio.lowlevel and trio.CancelScope, once a trio loop asked for them (trio is an
# optional dependency).
_trio_lowlevel: Any = None
_trio_cancel_scope: Any = None


class _TrioWaiter:
    __slots__ = ("_set", "_task")

    def __init__(self) -> None:
        self._set = False
        self._task: Any = None

    def is_set(self) -> bool:
        return self._set

    def set(self) -> None:
        if not self._set:
            self._set = True
            task, self._task = self._task, None
            if task is not None:
                _trio_lowlevel.reschedule(task)

    def _abort(self, _: object) -> Any:
        self._task = None
        return _trio_lowlevel.Abort.SUCCEEDED

    async def wait(self) -> None:
        lowlevel = _trio_lowlevel
        if self._set:
            await lowlevel.checkpoint()
            return
        self._task = lowlevel.current_task()
        await lowlevel.wait_task_rescheduled(self._abort)


class _Trio:
    __slots__ = ("effective_deadline", "now")

    call_soon = None

    def __init__(self) -> None:
        global _trio_lowlevel, _trio_cancel_scope
        import trio
        import trio.lowlevel

        _trio_lowlevel = trio.lowlevel
        _trio_cancel_scope = trio.CancelScope
        self.now = trio.current_time
        self.effective_deadline = trio.current_effective_deadline

    def waiter(self) -> Waiter:
        return _TrioWaiter()

    def cancel_scope(
        self, deadline: float = math.inf, *, shield: bool = False
    ) -> anyio.CancelScope:
        scope: anyio.CancelScope = _trio_cancel_scope(deadline=deadline, shield=shield)
        return scope

    async def checkpoint(self) -> None:
        await _trio_lowlevel.checkpoint()


class _Anyio:
    """Any other backend: anyio's own (portable, slower) primitives."""

    __slots__ = ()

    now = staticmethod(anyio.current_time)
    effective_deadline = staticmethod(anyio.current_effective_deadline)
    call_soon = None

    def waiter(self) -> Waiter:
        return anyio.Event()

    def cancel_scope(
        self, deadline: float = math.inf, *, shield: bool = False
    ) -> anyio.CancelScope:
        return anyio.CancelScope(deadline=deadline, shield=shield)

    async def checkpoint(self) -> None:
        await anyio.lowlevel.checkpoint()


#: anyio's portable primitives (what a channel uses before it knows its backend).
ANYIO: Final[Native] = _Anyio()


def native() -> Native:
    """The running backend's clock and waiter factory (call inside the event loop)."""
    loop = anyio.lowlevel.current_token().native_token
    if isinstance(loop, asyncio.AbstractEventLoop):
        return _Asyncio(loop)
    if type(loop).__module__.partition(".")[0] == "trio":  # a trio.lowlevel.TrioToken
        return _Trio()
    return ANYIO
