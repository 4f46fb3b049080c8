"""Job details on every log record emitted while a handler runs.

While a job is being handled, every ``logging.LogRecord`` created in its task
(by this library or by your own code, on any logger) carries four extra
attributes: ``sepp_job_id``, ``sepp_job_type``, ``sepp_attempt`` and
``sepp_worker_id`` (and ``sepp_queue``). Outside a job they are ``None``, so
a format string like ``"%(sepp_job_id)s %(message)s"`` works everywhere.

How: a context variable set in each job's task, read by a LogRecord factory
that wraps whatever factory was installed before (installed once, the first
time a worker runs). No handler, filter, formatter or level is touched, so
the application's logging configuration stays its own. It is never reset: every
task starts in a copy of its parent's context (on asyncio and on trio), so the
value set in a job's task goes when the task does.
"""

from __future__ import annotations

import contextvars
import logging
import threading
from collections.abc import MutableMapping
from typing import Any

from ._model._job import JobCtx

__all__ = ["JobLog", "current_job", "enter_job", "install_record_factory"]

_current: contextvars.ContextVar[JobCtx | None] = contextvars.ContextVar(
    "sepp_anyio_current_job", default=None
)
_install_lock = threading.Lock()
_installed = False


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


def install_record_factory() -> None:
    """Wrap the LogRecord factory once per process (idempotent, thread-safe)."""
    global _installed
    with _install_lock:
        if _installed:
            return
        previous = logging.getLogRecordFactory()

        def factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
            record = previous(*args, **kwargs)
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

        logging.setLogRecordFactory(factory)
        _installed = True
