"""Job results on the wire: the fields, the envelope, and the errors a producer sees.

A producer that wants a job's result names a reply queue in the job (custom field
:data:`REPLY_TO`). When the handler returns, or on the job's final failure, the worker
enqueues one job of type :data:`RESULT_JOB_TYPE` to that queue, *before* it settles the
original, with the original's id as its idempotency key and in its custom field
:data:`CORRELATION_ID`, and a JSON payload (the envelope)::

    {"ok": true, "value": <the result, encoded by the task's type adapter>}
    {"ok": false, "error": {"type": "<exception class name>", "message": "..."}}

The format is fixed (producers and workers in other languages, and the test harness,
rely on it). Part of the public data model (conventions in ``_model/__init__.py``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from ._error_root import SeppError
from ._payload import JSON_ENCODING, Payload

__all__ = [
    "CORRELATION_ID",
    "REPLY_TO",
    "RESULT_JOB_TYPE",
    "InvalidResultError",
    "JobFailedError",
    "Result",
    "ResultTimeoutError",
    "failure_payload",
    "read_result",
    "success_payload",
]

#: The custom field naming the queue a job's result is sent to.
REPLY_TO = "sepp.reply_to"
#: The custom field of a result job: the id of the job it is the result of.
CORRELATION_ID = "sepp.correlation_id"
#: The job type of a result job.
RESULT_JOB_TYPE = "sepp.result"


class JobFailedError(SeppError):
    """The job whose result was awaited failed for good (its last attempt failed, or it
    was dead-lettered); the worker sent the failure instead of a value.

    Attributes:
        job_id: the failed job's id.
        error_type: the class name of the exception that failed it, as the worker saw it
            (``"TimeoutError"`` for a handler timeout, ``"WorkerShutdown"`` for a last
            attempt stopped by a shutdown, ``"NoHandler"`` for a job type without one).
        error_message: that exception's message.
    """

    def __init__(self, job_id: str, error_type: str, error_message: str) -> None:
        super().__init__(f"job {job_id!r} failed: {error_type}: {error_message}")
        self.job_id = job_id
        self.error_type = error_type
        self.error_message = error_message


class InvalidResultError(SeppError):
    """A result that does not validate: a handler returned a value that is not of its
    task's result type (a handler failure: the job is retried, and its last attempt
    reports this error), or a result arrived that is not a readable envelope or whose
    value does not validate against the awaiting task's result type."""


class ResultTimeoutError(SeppError, TimeoutError):
    """No result arrived within the timeout of :meth:`ResultHandle.result`. Also a
    :class:`TimeoutError`; the job may still finish, and its result is then kept by the
    :class:`Results` until ``get`` asks for it."""


@dataclass(frozen=True, slots=True)
class Result:
    """A job's result as it arrived, before it is checked against a task's type.

    Attributes:
        job_id: the id of the job it is the result of.
        ok: True for a value, False for a failure.
        value: the value as plain JSON (dicts, lists, str, numbers, bool, None); None for
            a failure.
        error_type: the exception's class name for a failure, else None.
        error_message: the exception's message for a failure, else None.
    """

    job_id: str
    ok: bool
    value: Any = None
    error_type: str | None = None
    error_message: str | None = None

    def raise_for_failure(self) -> None:
        """Raise :class:`JobFailedError` if this result is a failure; else nothing."""
        if not self.ok:
            raise JobFailedError(self.job_id, self.error_type or "", self.error_message or "")


def success_payload(value: bytes) -> Payload:
    """The envelope of a value already encoded as compact JSON (no re-parsing)."""
    return Payload(b'{"ok":true,"value":' + value + b"}", JSON_ENCODING)


def failure_payload(error_type: str, message: str) -> Payload:
    """The envelope of a failure."""
    return Payload.from_json({"ok": False, "error": {"type": error_type, "message": message}})


def read_result(job_id: str, payload: Payload | None) -> Result:
    """The :class:`Result` a result job's payload carries.

    Raises:
        InvalidResultError: the payload is missing, not JSON, or not an envelope (the
            message names what is wrong).
    """
    if payload is None:
        raise InvalidResultError(f"the result of job {job_id!r} has no payload")
    try:
        envelope = json.loads(payload.data)
    except (UnicodeDecodeError, ValueError) as exc:
        raise InvalidResultError(f"the result of job {job_id!r} is not JSON: {exc}") from None
    ok = envelope.get("ok") if isinstance(envelope, dict) else None
    if ok is True and "value" in envelope:
        return Result(job_id, True, envelope["value"])
    error = envelope.get("error") if ok is False else None
    if isinstance(error, dict):
        kind, message = error.get("type"), error.get("message")
        if isinstance(kind, str) and isinstance(message, str):
            return Result(job_id, False, error_type=kind, error_message=message)
    raise InvalidResultError(
        f"the result of job {job_id!r} is not a result envelope "
        '({"ok": true, "value": ...} or {"ok": false, "error": {"type": ..., "message": ...}})'
    )
