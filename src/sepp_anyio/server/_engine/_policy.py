"""Server-side retry delay for default nacks (protocol §3.7)."""

from __future__ import annotations

import hashlib

from .._config._sections import QueueLimits

U64_MAX = 2**64 - 1


def retry_jitter(job_id: str, attempt: int, capped_ms: int) -> int:
    """A deterministic amount in ``[0, capped_ms // 4]`` derived from (job_id, attempt).

    The real server hashes the same pair with Rust's DefaultHasher; any uniform value in that
    range is allowed, and being deterministic keeps redeliveries reproducible in tests.
    """
    digest = hashlib.blake2b(f"{job_id}/{attempt}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") % (capped_ms // 4 + 1)


def retry_delay_ms(limits: QueueLimits, job_id: str, attempt: int) -> int:
    """The delay before a default-nacked job is ready again; *attempt* is the nacked one.

    ``base`` (``retry_delay_ms``) 0 means no delay.  Otherwise ``base`` or, with exponential
    backoff, ``base * 2**(attempt-1)`` saturating at u64, capped by the smaller of
    ``retry_delay_max_ms`` and ``max_schedule_horizon_ms``, minus up to a quarter of jitter.
    """
    base = limits.retry_delay_ms
    if base == 0:
        return 0
    if limits.retry_backoff == "exponential":
        shift = max(attempt - 1, 0)
        # Guard the shift: attempt may be up to 2**32 - 1 and a huge shift would be slow.
        grown = U64_MAX if shift >= 64 else min(base << shift, U64_MAX)
    else:
        grown = base
    capped = min(grown, limits.retry_delay_max_ms, limits.max_schedule_horizon_ms)
    return capped - retry_jitter(job_id, attempt, capped)
