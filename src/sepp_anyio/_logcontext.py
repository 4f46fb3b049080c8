"""Job details on every log record emitted while a handler runs.

While a job is being handled, every ``logging.LogRecord`` created in its task
(by this library or by your own code, on any logger) carries four extra
attributes: ``sepp_job_id``, ``sepp_job_type``, ``sepp_attempt`` and
``sepp_worker_id`` (and ``sepp_queue``). Outside a job they are ``None``, so
a format string like ``"%(sepp_job_id)s %(message)s"`` works everywhere.

How: a context variable set in each job's task, read by a LogRecord factory
that wraps whatever factory was installed before (installed once, the first
time a worker runs). No handler, filter, formatter or level is touched, so
the application's logging configuration stays its own.
"""

from __future__ import annotations

import contextvars
import logging
import threading
from collections.abc import MutableMapping
from typing import Any

from ._model._job import JobCtx

__all__ = ["JobLog", "current_job", "enter_job", "install_record_factory", "leave_job"]

_current: contextvars.ContextVar[tuple[JobCtx, str] | None] = contextvars.ContextVar(
    "sepp_anyio_current_job", default=None
)
_install_lock = threading.Lock()
_installed = False


def current_job() -> JobCtx | None:
    """The context of the job being handled in this task, or None."""
    value = _current.get()
    return None if value is None else value[0]


def enter_job(ctx: JobCtx, worker_id: str) -> contextvars.Token[tuple[JobCtx, str] | None]:
    """Mark the current task as handling ``ctx`` (for logs and :func:`current_job`) until
    :func:`leave_job` is given the token returned.

    Two functions rather than a context manager: this runs once per job, and a ``with``
    keeps a bound ``__exit__`` (and the manager) alive for as long as the handler runs.
    """
    return _current.set((ctx, worker_id))


def leave_job(token: contextvars.Token[tuple[JobCtx, str] | None]) -> None:
    """Undo the :func:`enter_job` that returned ``token`` (in the same task)."""
    _current.reset(token)


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
            value = _current.get()
            if value is None:
                record.sepp_job_id = record.sepp_job_type = record.sepp_attempt = None
                record.sepp_worker_id = record.sepp_queue = None
            else:
                ctx, worker_id = value
                record.sepp_job_id = ctx.id
                record.sepp_job_type = ctx.job_type
                record.sepp_attempt = ctx.attempt
                record.sepp_worker_id = worker_id
                record.sepp_queue = ctx.queue
            return record

        logging.setLogRecordFactory(factory)
        _installed = True
