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
from typing import Any

from ._model._job import JobCtx

__all__ = ["current_job", "install_record_factory", "job_context"]

_current: contextvars.ContextVar[tuple[JobCtx, str] | None] = contextvars.ContextVar(
    "sepp_anyio_current_job", default=None
)
_install_lock = threading.Lock()
_installed = False


def current_job() -> JobCtx | None:
    """The context of the job being handled in this task, or None."""
    value = _current.get()
    return None if value is None else value[0]


class job_context:
    """Mark the current task as handling ``ctx`` (for logs and :func:`current_job`).

    A small class rather than a generator-based context manager: it is
    entered once per job.
    """

    __slots__ = ("_token", "_value")

    def __init__(self, ctx: JobCtx, worker_id: str) -> None:
        self._value = (ctx, worker_id)

    def __enter__(self) -> None:
        self._token = _current.set(self._value)

    def __exit__(self, *exc_info: object) -> None:
        _current.reset(self._token)


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
