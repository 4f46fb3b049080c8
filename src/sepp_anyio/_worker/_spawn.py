"""Where a worker's job tasks start: in its task group, or on trio in a nursery of trio's own.

anyio's ``TaskGroup.start_soon`` returns a ``TaskHandle`` for every task: a cancel scope of
anyio's (on trio a wrapper around trio's, set up twice), an event and a coroutine around
the task's own, then a trio nursery's ``start_soon`` underneath: on trio about 14 us a
task, an eighth of a no-op job's CPU in the worker. What the worker needs of the handle is
a way to stop one job's task at shutdown (``JobRun.stop``); a cancel scope of trio's own
around the handler gives that too: a nursery's ``start_soon`` and such a scope cost about
8 us (measured side by side; ``benchmarks/worker.py`` has what it does to a job).

So on trio the job tasks start in a trio nursery (``trio.open_nursery``, trio's public
API) opened inside the worker's task group, and every job has a handler scope of trio's
(``JobRun.handler_scope``; the heartbeat and the timeout use the same one when there is
one). Nothing changes in the structure: the nursery lives inside the task group, so
cancelling the run cancels the jobs as before, and the run leaves the nursery only once
every job task has ended; an error escaping a job task ends the run the same way (its
exception group, inside the task group's, is unwrapped by ``Worker.run``). On asyncio (and
any other backend) the job tasks start in the task group itself, with the handle.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import TYPE_CHECKING, Any, Protocol

import anyio
import anyio.abc
import anyio.lowlevel

from .._model._groups import unwrap

if TYPE_CHECKING:
    from .._model._job import Job
    from ._lease import JobRun

__all__ = ["JobStarter", "job_starter", "lone_error"]

JobTask = Callable[["Job", "JobRun"], Coroutine[Any, Any, None]]


class JobStarter(Protocol):
    """Starts one job's task (see the module docs)."""

    @property
    def scoped(self) -> bool:
        """Whether every job needs a handler scope of its own: its task has no handle to
        be cancelled through at shutdown."""
        ...

    def start(
        self, task: JobTask, job: Job, run: JobRun, name: str
    ) -> anyio.TaskHandle[None] | None:
        """Start ``task(job, run)``; its handle where there is one."""
        ...


class _GroupStarter:
    __slots__ = ("_tg",)

    def __init__(self, tg: anyio.abc.TaskGroup) -> None:
        self._tg = tg

    @property
    def scoped(self) -> bool:
        return False

    def start(
        self, task: JobTask, job: Job, run: JobRun, name: str
    ) -> anyio.TaskHandle[None] | None:
        return self._tg.start_soon(task, job, run, name=name)


class _NurseryStarter:
    __slots__ = ("_nursery",)

    def __init__(self, nursery: Any) -> None:
        self._nursery = nursery

    @property
    def scoped(self) -> bool:
        return True

    def start(
        self, task: JobTask, job: Job, run: JobRun, name: str
    ) -> anyio.TaskHandle[None] | None:
        self._nursery.start_soon(task, job, run, name=name)
        return None


def _on_trio() -> bool:
    token = anyio.lowlevel.current_token().native_token
    return type(token).__module__.partition(".")[0] == "trio"  # a trio.lowlevel.TrioToken


@contextlib.asynccontextmanager
async def job_starter(tg: anyio.abc.TaskGroup) -> AsyncIterator[JobStarter]:
    """The starter of a run's job tasks, for the ``async with`` block that reserves them.

    On trio, leaving the block waits until every job task started in it has ended (the
    worker's drain has waited for them already); cancelling ``tg`` cancels them.
    """
    if _on_trio():
        import trio

        async with trio.open_nursery() as nursery:
            yield _NurseryStarter(nursery)
    else:
        yield _GroupStarter(tg)


def lone_error(group: BaseExceptionGroup[BaseException]) -> BaseException | None:
    """The single leaf of ``group`` (through nested single-member groups: the worker's task
    group, the job nursery, a handler's own), if it is one exception that is not a
    cancellation; else None."""
    error = unwrap(group)
    if isinstance(error, BaseExceptionGroup | anyio.get_cancelled_exc_class()):
        return None
    return error
