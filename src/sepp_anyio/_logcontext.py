"""Job details on every log record emitted while a handler runs.

While a job is being handled, every ``logging.LogRecord`` created in its task
(by this library or by your own code, on any logger) carries four extra
attributes: ``sepp_job_id``, ``sepp_job_type``, ``sepp_attempt`` and
``sepp_worker_id`` (and ``sepp_queue``). Outside a job, while a worker runs, they are
``None``, so a format string like ``"%(sepp_job_id)s %(message)s"`` works on every record
of a worker's process while it runs.

While no worker runs, the process's logging is as it was: the attributes are added by
a LogRecord factory that is installed when the first worker of the process starts
running and put back when the last one stops (:func:`job_log_records`, counted under a
lock, so workers in several threads or nested in one another share one). Ours calls
whatever factory was installed before it. If another factory was installed on top of ours
meanwhile (and so calls ours), it is left alone when the last worker stops: ours stays in
its chain, inert (it adds nothing and hands the record through), instead of dropping the
newer one. No handler, filter, formatter or level is touched, so the application's
logging configuration stays its own. A format string naming these attributes used
outside a worker's run needs a default (``logging.Formatter(fmt, defaults={...})``).

The context variable is never reset: every task starts in a copy of its parent's context
(on asyncio and on trio), so the value set in a job's task goes when the task does.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import threading
from collections.abc import Callable, Iterator, MutableMapping
from typing import Any

from ._model._job import JobCtx

__all__ = ["JobLog", "current_job", "enter_job", "job_log_records"]

_current: contextvars.ContextVar[JobCtx | None] = contextvars.ContextVar(
    "sepp_anyio_current_job", default=None
)
# The running workers of the process (job_log_records' users), and the factory the first
# of them installed; both guarded by _lock (workers may run in several threads).
_lock = threading.Lock()
_users = 0
_ours: _JobRecordFactory | None = None


def current_job() -> JobCtx | None:
    """The context of the job being handled in this task, or None."""
    return _current.get()


def enter_job(ctx: JobCtx) -> None:
    """Mark the current task as handling ``ctx`` (for logs and :func:`current_job`) for
    the rest of its life: call it only in a task of the job's own.

    Not a context manager, and no token kept: this runs once per job, and whatever is
    kept stays alive, per job in flight, for as long as the handler runs.
    """
    _current.set(ctx)


class JobLog(logging.LoggerAdapter[logging.Logger]):
    """Prefixes every line with the job's id, type and attempt."""

    def __init__(self, logger: logging.Logger, ctx: JobCtx) -> None:
        super().__init__(logger)
        self._ctx = ctx

    def process(
        self, msg: Any, kwargs: MutableMapping[str, Any]
    ) -> tuple[Any, MutableMapping[str, Any]]:
        ctx = self._ctx
        return (
            f"job {ctx.id} ({ctx.job_type}, attempt {ctx.attempt}/{ctx.max_attempts}): {msg}",
            kwargs,
        )


class _JobRecordFactory:
    """Calls the factory it was installed over, then adds the job's attributes (while
    :attr:`active`; an inert one, left in another factory's chain, adds nothing)."""

    __slots__ = ("active", "previous")

    def __init__(self, previous: Callable[..., logging.LogRecord]) -> None:
        self.previous = previous
        self.active = True

    def __call__(self, *args: Any, **kwargs: Any) -> logging.LogRecord:
        record = self.previous(*args, **kwargs)
        if not self.active:
            return record
        ctx = _current.get()
        if ctx is None:
            record.sepp_job_id = record.sepp_job_type = record.sepp_attempt = None
            record.sepp_worker_id = record.sepp_queue = None
        else:
            record.sepp_job_id = ctx.id
            record.sepp_job_type = ctx.job_type
            record.sepp_attempt = ctx.attempt
            # The id the job was reserved under: the worker's.
            record.sepp_worker_id = ctx.worker_id
            record.sepp_queue = ctx.queue
        return record


def _acquire() -> None:
    global _users, _ours
    with _lock:
        _users += 1
        if _users == 1:
            _ours = _JobRecordFactory(logging.getLogRecordFactory())
            logging.setLogRecordFactory(_ours)


def _release() -> None:
    global _users, _ours
    with _lock:
        _users -= 1
        if _users or _ours is None:
            return
        ours, _ours = _ours, None
        if logging.getLogRecordFactory() is ours:
            logging.setLogRecordFactory(ours.previous)
        else:
            # Someone installed a factory over ours (which it may call): keep theirs.
            ours.active = False


@contextlib.contextmanager
def job_log_records() -> Iterator[None]:
    """Add the job attributes to every LogRecord of the process while inside.

    Entered by each running worker: the first to enter installs the factory over the
    current one, the last to leave restores that one (or, if another factory was
    installed over ours meanwhile, leaves it in place and ours in its chain, inert).
    Thread-safe; never blocks but on a lock held for a few assignments. Leaving on a
    cancellation or an error is the same as leaving normally.
    """
    _acquire()
    try:
        yield
    finally:
        _release()
