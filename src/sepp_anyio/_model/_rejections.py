"""Why the server refused one job: the :class:`JobRejection` family.

A rejection is a *value*, not an exception. :meth:`Client.enqueue_batch` returns one in
place of an :class:`EnqueueAck` for each refused job; :meth:`Client.enqueue` wraps it in
:class:`JobRejectedError`, and :meth:`Client.enqueue_atomic` collects them, with the job's
position, in :class:`BatchValidationError`.

There is one frozen dataclass per reason the protocol defines (14 of them), plus
:class:`UnknownRejection` for a reason this version of the library does not know: the
protocol tells clients to treat an unrecognised reason as a rejection of unknown kind, never
as a malformed response, so a newer server cannot break an older client.

Match on the concrete class::

    match result:
        case sepp.EnqueueAck(job_id=job_id): ...
        case sepp.QueueFull(queue=queue, limit=limit): ...   # transient: try again later
        case sepp.JobRejection(): log.error("rejected: %s", result)

Every rejection except :class:`QueueFull` and :class:`QueueClosing` is deterministic:
sending the same job to the same server configuration gets the same answer. The
:attr:`JobRejection.transient` class attribute says which is which.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import ClassVar

__all__ = [
    "CustomEntriesTooMany",
    "CustomKeyTooLong",
    "CustomMapTooLarge",
    "EncodingNotAllowed",
    "IdempotencyKeyTooLong",
    "InvalidRequest",
    "JobRejection",
    "JobTypeNameTooLong",
    "JobTypeNotAllowed",
    "JobValidationError",
    "PayloadTooLarge",
    "QueueClosing",
    "QueueFull",
    "QueueNameTooLong",
    "ScheduledTooFar",
    "UnknownQueue",
    "UnknownRejection",
]


class JobRejection:
    """Base class of every per-job refusal; ``str(rejection)`` is a human sentence.

    Never instantiated directly: the server's answer is always one of the subclasses.
    """

    __slots__ = ()

    #: ``True`` when the same job may be accepted later without any change (the queue
    #: drained, or a pending delete finished). ``False`` for deterministic refusals.
    transient: ClassVar[bool] = False

    def __str__(self) -> str:  # pragma: no cover - every subclass overrides it
        return "the server rejected the job"


def _quoted_list(items: tuple[str, ...]) -> str:
    return ", ".join(repr(item) for item in items)


@dataclass(frozen=True, slots=True)
class UnknownQueue(JobRejection):
    """The server runs in strict mode and the target queue is not declared."""

    #: The queue the job was sent to.
    queue: str

    def __str__(self) -> str:
        return f"queue {self.queue!r} is not declared on the server (strict mode)"


@dataclass(frozen=True, slots=True)
class PayloadTooLarge(JobRejection):
    """``payload.data`` is longer than the queue's ``max_payload_bytes``."""

    #: The queue's limit, in bytes.
    limit: int
    #: The payload's size, in bytes.
    actual: int

    def __str__(self) -> str:
        return f"payload is {self.actual} bytes, over the queue's limit of {self.limit} bytes"


@dataclass(frozen=True, slots=True)
class EncodingNotAllowed(JobRejection):
    """The queue has an encoding allow-list and ``payload.encoding`` is not on it.

    The match is exact and case-sensitive on the server.
    """

    #: The payload's encoding.
    encoding: str
    #: The encodings the queue accepts (may be empty: then every payload is refused).
    allowed: tuple[str, ...]

    def __str__(self) -> str:
        if not self.allowed:
            return f"payload encoding {self.encoding!r} is not allowed (the queue accepts none)"
        return (
            f"payload encoding {self.encoding!r} is not allowed "
            f"(allowed: {_quoted_list(self.allowed)})"
        )


@dataclass(frozen=True, slots=True)
class JobTypeNotAllowed(JobRejection):
    """The queue has a job-type allow-list and the job's type is not on it."""

    #: The job's type.
    job_type: str
    #: The job types the queue accepts.
    allowed: tuple[str, ...]

    def __str__(self) -> str:
        return (
            f"job type {self.job_type!r} is not accepted by the queue "
            f"(allowed: {_quoted_list(self.allowed) or 'none'})"
        )


@dataclass(frozen=True, slots=True)
class CustomEntriesTooMany(JobRejection):
    """The ``custom`` map has more entries than the queue's ``max_custom_entries``."""

    #: The maximum number of entries.
    limit: int
    #: The number of entries sent.
    actual: int

    def __str__(self) -> str:
        return f"custom map has {self.actual} entries, over the limit of {self.limit}"


@dataclass(frozen=True, slots=True)
class CustomMapTooLarge(JobRejection):
    """The ``custom`` map's total size exceeds the queue's ``max_custom_total_bytes``."""

    #: The limit, in bytes (as the server accounts them).
    limit: int
    #: The map's size, in bytes.
    actual: int

    def __str__(self) -> str:
        return f"custom map is {self.actual} bytes in total, over the limit of {self.limit} bytes"


@dataclass(frozen=True, slots=True)
class CustomKeyTooLong(JobRejection):
    """A ``custom`` key is longer than the queue's ``max_custom_key_bytes``."""

    #: The offending key.
    key: str
    #: The limit, in UTF-8 bytes.
    limit: int
    #: The key's length, in UTF-8 bytes.
    actual: int

    def __str__(self) -> str:
        return (
            f"custom key {self.key!r} is {self.actual} bytes, over the limit of {self.limit} bytes"
        )


@dataclass(frozen=True, slots=True)
class QueueNameTooLong(JobRejection):
    """The queue name is longer than the server's ``max_queue_name_bytes``."""

    #: The limit, in UTF-8 bytes.
    limit: int
    #: The name's length, in UTF-8 bytes.
    actual: int

    def __str__(self) -> str:
        return f"queue name is {self.actual} bytes, over the limit of {self.limit} bytes"


@dataclass(frozen=True, slots=True)
class JobTypeNameTooLong(JobRejection):
    """The job type is longer than the server's ``max_job_type_bytes``."""

    #: The limit, in UTF-8 bytes.
    limit: int
    #: The job type's length, in UTF-8 bytes.
    actual: int

    def __str__(self) -> str:
        return f"job type is {self.actual} bytes, over the limit of {self.limit} bytes"


@dataclass(frozen=True, slots=True)
class IdempotencyKeyTooLong(JobRejection):
    """The idempotency key is longer than the server's ``max_idempotency_key_bytes``."""

    #: The limit, in UTF-8 bytes.
    limit: int
    #: The key's length, in UTF-8 bytes.
    actual: int

    def __str__(self) -> str:
        return f"idempotency key is {self.actual} bytes, over the limit of {self.limit} bytes"


@dataclass(frozen=True, slots=True)
class ScheduledTooFar(JobRejection):
    """``scheduled_at`` lies further ahead than the queue's schedule horizon allows."""

    #: The queue's ``max_schedule_horizon``, in seconds.
    horizon: float
    #: The requested run time. If the server left it out (it never does) this is the epoch.
    actual: datetime

    def __str__(self) -> str:
        return (
            f"scheduled_at {self.actual.isoformat()} is beyond the queue's schedule horizon "
            f"of {self.horizon:g} seconds"
        )


@dataclass(frozen=True, slots=True)
class InvalidRequest(JobRejection):
    """The job failed the server's structural validation (the message says which rule)."""

    #: The server's explanation, for example ``"payload.data must not be empty"``.
    message: str

    def __str__(self) -> str:
        return f"invalid request: {self.message or 'no details given'}"


@dataclass(frozen=True, slots=True)
class QueueFull(JobRejection):
    """The queue is at its ``max_queue_depth``. Transient: it clears as the queue drains."""

    transient: ClassVar[bool] = True

    #: The queue the job was sent to.
    queue: str
    #: The queue's maximum depth.
    limit: int

    def __str__(self) -> str:
        return f"queue {self.queue!r} is full (max depth {self.limit})"


@dataclass(frozen=True, slots=True)
class QueueClosing(JobRejection):
    """An operator is deleting the queue. Transient: it clears when the delete ends."""

    transient: ClassVar[bool] = True

    #: The queue the job was sent to.
    queue: str

    def __str__(self) -> str:
        return f"queue {self.queue!r} is being deleted and accepts no new jobs"


@dataclass(frozen=True, slots=True)
class UnknownRejection(JobRejection):
    """A rejection whose reason this version of the library does not recognise.

    Also used when the server sent a rejection with no reason at all. A newer server may
    have added a reason; upgrading sepp-anyio gives it a proper class.
    """

    #: The protobuf field number of the unrecognised reason, when one was sent.
    field_number: int | None = None

    def __str__(self) -> str:
        if self.field_number is None:
            return "the server rejected the job without giving a reason"
        return (
            "the server rejected the job for a reason this client does not recognise "
            f"(reason field {self.field_number}); a newer sepp-anyio may know it"
        )


@dataclass(frozen=True, slots=True)
class JobValidationError:
    """One refused job of an atomic batch: its position in the request and the reason.

    A value carried by :class:`BatchValidationError`, not an exception itself (the name
    matches the protocol message and the other sepp clients).
    """

    #: Zero-based position of the job in the request.
    index: int
    #: Why the job was refused.
    rejection: JobRejection

    def __str__(self) -> str:
        return f"job {self.index}: {self.rejection}"
