"""Dead letters: why a job died, and the record drained from the server.

Part of the public data model (conventions in ``_model/__init__.py``).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime

from ._enqueue import CustomValue, EnqueueRequest
from ._expiry import EXPIRES_AT_KEY
from ._payload import Payload
from ._trace import TraceContext

__all__ = ["DeadLetterCause", "DeadLetterRecord"]


class DeadLetterCause(enum.StrEnum):
    """Why a job was dead-lettered. A value this library does not know maps to
    :attr:`UNSPECIFIED`, so a newer server cannot break decoding."""

    #: The server did not say, or said something this library does not know.
    UNSPECIFIED = "unspecified"
    #: Nacked on its final attempt.
    ATTEMPTS_EXHAUSTED = "attempts_exhausted"
    #: Nacked with :meth:`RetryDirective.dead_letter`.
    REJECTED = "rejected"
    #: Its lease expired on the final attempt.
    LEASE_EXPIRED = "lease_expired"
    #: Dead-lettered by an operator through the admin API.
    ADMIN = "admin"


@dataclass(frozen=True, slots=True, kw_only=True)
class DeadLetterRecord:
    """A job that failed for good, as returned (and removed) by
    :meth:`Client.drain_dead_letters`.

    Built by the client; a malformed record from the server is skipped and logged, never
    raised. Use :meth:`to_enqueue_request` to run the job again.
    """

    queue: str
    job_id: str
    job_type: str
    payload: Payload | None
    priority: int
    #: The job's resolved max_attempts; 0 if the server did not record it.
    max_attempts: int
    custom: Mapping[str, CustomValue]
    trace_context: TraceContext | None
    enqueued_at: datetime
    scheduled_at: datetime | None
    cause: DeadLetterCause
    failed_at: datetime
    #: The attempt that failed last (1-based).
    final_attempt: int
    #: The last nack reason; ``None`` when the job died by lease expiry or without one.
    last_reason: str | None

    def to_enqueue_request(self) -> EnqueueRequest:
        """A request that replays this job as a *fresh* job.

        Kept: queue, job type, payload, priority, max_attempts, custom and trace context.
        Dropped, on purpose: the id and attempt count (the server assigns new ones),
        ``scheduled_at`` (a replay should run now, not at a time long past or still far
        off) and the idempotency key (it would dedup against the original job within the
        server's window, so nothing would be enqueued). A ``max_attempts`` of 0 becomes
        ``None``, i.e. the queue's default. The deadline in ``custom["sepp.expires_at"]`` is
        dropped too, for the same reason as ``scheduled_at``: it has passed, or would pass,
        for a job that ran out of time. Use :func:`dataclasses.replace` on the result
        to change anything, such as the queue.
        """
        return EnqueueRequest(
            self.queue,
            self.job_type,
            payload=self.payload,
            priority=self.priority,
            max_attempts=self.max_attempts or None,
            custom={key: value for key, value in self.custom.items() if key != EXPIRES_AT_KEY},
            trace_context=self.trace_context,
        )
