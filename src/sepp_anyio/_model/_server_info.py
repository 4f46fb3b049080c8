"""What a server says about itself: its version and its global limits.

Part of the public data model (conventions in ``_model/__init__.py``).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from ._enqueue import EnqueueRequest
from ._limits import check_request

if TYPE_CHECKING:
    from ._rejections import JobRejection

__all__ = ["ServerInfo"]


@dataclass(frozen=True, slots=True, kw_only=True)
class ServerInfo:
    """What the server reports about itself and its global limits.

    Limits are the global defaults; individual queues may be configured differently, and
    the server does not advertise per-queue values. Durations are float seconds.
    Built by the client from the server's answer; a reply with an empty version or no
    server time raises :class:`MalformedServerInfoError` instead.
    """

    #: The server's version string, never empty.
    version: str
    #: Protocol versions the server speaks, for example ``("v1",)``.
    supported_protocol_versions: tuple[str, ...]
    #: The server's clock when it answered.
    server_time: datetime
    #: Whether a global encoding allow-list is configured (an empty one refuses all).
    restricts_encodings: bool
    #: The global encoding allow-list.
    allowed_encodings: tuple[str, ...]
    max_payload_bytes: int
    max_custom_entries: int
    max_custom_total_bytes: int
    max_custom_key_bytes: int
    max_queue_name_bytes: int
    max_job_type_bytes: int
    max_idempotency_key_bytes: int
    #: How far ahead ``scheduled_at`` may be, in seconds.
    max_schedule_horizon: float
    max_enqueue_batch: int
    max_reserve_batch: int
    max_reserve_queues: int
    #: The longest reserve long-poll, in seconds.
    max_wait_timeout: float
    #: The longest lease, in seconds (per-queue values may differ).
    max_lease_duration: float
    #: Whether enqueueing to an undeclared queue is refused.
    strict_queues: bool
    #: Whether dead letters are kept (otherwise :meth:`Client.drain_dead_letters` is empty).
    dead_letter_retention_enabled: bool

    def check(self, request: EnqueueRequest, *, now: datetime | None = None) -> JobRejection | None:
        """The rejection these (global) limits predict for ``request``, or None.

        A local convenience for failing fast; it never replaces the server's
        verdict (queues may have their own limits, and strict mode or a full
        queue are only known to the server).
        """
        return check_request(self, request, now=now)
