"""What each page shows, read from the engine: plain dicts and lists, for the templates and
the JSON the live view polls.

Every function is synchronous: it reads the engine's in-memory state in one go, with no await
in between, so a page sees one consistent moment and never makes an RPC wait.  Listings are
the engine's bounded pages.
"""

from __future__ import annotations

import dataclasses
import datetime
import re
from typing import Any

from sepp_anyio._version import __version__

from .._engine._engine import Engine
from .._store._memory import MemoryStore
from .._store._records import DeadLetter, JobState, StoredJob
from .._store._sqlite import SqliteStore
from ._payload import preview

__all__ = [
    "STATES",
    "dead_letters_view",
    "job_view",
    "queue_view",
    "queues_view",
    "server_view",
]

#: The state filter's values, as the URL spells them.
STATES: dict[str, JobState] = {
    "ready": JobState.READY,
    "scheduled": JobState.SCHEDULED,
    "leased": JobState.INFLIGHT,
}
#: Characters of a payload shown in a listing's row (the job's page shows more).
_ROW_PREVIEW_CHARS = 120
_STATE_NAMES = {state: name for name, state in STATES.items()}
_UUID = re.compile(r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$")


def is_job_id(text: str) -> bool:
    return bool(_UUID.match(text))


def when(ms: int | None) -> str:
    """A clock time in ms as ISO 8601 UTC, or an empty string."""
    if not ms:
        return ""
    return datetime.datetime.fromtimestamp(ms / 1000, datetime.UTC).isoformat(
        timespec="milliseconds"
    )


def queues_view(engine: Engine) -> list[dict[str, Any]]:
    """Every queue: counts, the oldest ready job's age (seconds) and the per-minute rates."""
    now = engine.clock.now_ms()
    rows = []
    for name, stats in engine.stats().items():
        oldest = engine.oldest_ready_at_ms(name) if stats.ready else None
        rows.append(
            {
                "name": name,
                "ready": stats.ready,
                "scheduled": stats.scheduled,
                "leased": stats.inflight,
                "dead_letters": stats.dead_letters,
                "oldest_ready_age_s": None if oldest is None else max(0, now - oldest) / 1000,
                "rates": engine.rates(name),
            }
        )
    return rows


def _job_row(engine: Engine, job: StoredJob) -> dict[str, Any]:
    return {
        "id": job.id,
        "queue": job.queue,
        "type": job.job_type,
        "state": _STATE_NAMES[job.state],
        "priority": job.priority,
        "attempt": job.attempt,
        "max_attempts": job.max_attempts,
        "enqueued_at": when(job.enqueued_at_ms),
        "scheduled_at": when(job.scheduled_at_ms),
        "due_at": when(job.due_ms),
        "idempotency_key": None,
    }


def queue_view(
    engine: Engine,
    queue: str,
    *,
    states: frozenset[JobState] | None,
    job_type: str | None,
    cursor: int,
    page_size: int,
    preview_bytes: int,
) -> dict[str, Any]:
    """A page of one queue's jobs, each with a short payload preview."""
    page = engine.list_jobs(
        queue, states=states, job_type=job_type, cursor=cursor, page_size=page_size
    )
    keys = _idempotency_keys(engine, queue, page.jobs)
    jobs = []
    for job in page.jobs:
        row = _job_row(engine, job)
        row["idempotency_key"] = keys.get(job.id)
        shown = preview(job.payload_data, job.payload_encoding, preview_bytes, indent=None)
        row["payload"] = shown.text.replace("\n", " ")[:_ROW_PREVIEW_CHARS]
        jobs.append(row)
    return {"jobs": jobs, "next_cursor": page.next_cursor}


def _idempotency_keys(engine: Engine, queue: str, jobs: tuple[StoredJob, ...]) -> dict[str, str]:
    # The job records do not keep their key; the dedup rows (while their window lasts) do.
    return {job.id: key for job in jobs if (key := engine.idempotency_key(job.id)) is not None}


def job_view(engine: Engine, job_id: str, preview_bytes: int) -> dict[str, Any] | None:
    """Every field of a live job or a dead letter, or None if there is neither."""
    job = engine.snapshot_job(job_id)
    record: DeadLetter | None = None
    if job is None:
        record = engine.dead_letter(job_id)
        if record is None:
            return None
        job = record.job
    row = _job_row(engine, job)
    row["idempotency_key"] = _idempotency_keys(engine, job.queue, (job,)).get(job.id)
    shown = preview(job.payload_data, job.payload_encoding, preview_bytes)
    now = engine.clock.now_ms()
    leased = record is None and job.state is JobState.INFLIGHT
    row.update(
        {
            "dead_letter": None
            if record is None
            else {
                "cause": record.cause.name.lower(),
                "failed_at": when(record.failed_at_ms),
                "final_attempt": record.final_attempt,
                "last_error": record.last_reason,
            },
            "state": "dead letter" if record is not None else row["state"],
            "payload_encoding": job.payload_encoding,
            "payload": {
                "kind": shown.kind,
                "text": shown.text,
                "size": shown.size,
                "truncated": shown.truncated,
                "note": shown.note,
            },
            "custom": list(job.custom),
            "traceparent": job.traceparent,
            "tracestate": job.tracestate,
            "worker_id": engine.lease_holder(job) if leased else None,
            "lease_expires_at": when(job.lease_expires_at_ms) if leased else "",
            "lease_remaining_ms": max(0, job.lease_expires_at_ms - now) if leased else None,
        }
    )
    return row


def dead_letters_view(
    engine: Engine, queue: str | None, *, cursor: int, page_size: int
) -> dict[str, Any]:
    page = engine.list_dead_letters(queue, cursor=cursor, page_size=page_size)
    return {
        "records": [
            {
                "id": record.job.id,
                "queue": record.job.queue,
                "type": record.job.job_type,
                "cause": record.cause.name.lower(),
                "last_error": record.last_reason,
                "attempts": record.final_attempt,
                "max_attempts": record.job.max_attempts,
                "failed_at": when(record.failed_at_ms),
            }
            for record in page.records
        ],
        "next_cursor": page.next_cursor,
        "retention_enabled": engine.config.dead_letter_retention_enabled,
    }


def server_view(engine: Engine) -> dict[str, Any]:
    """Version, configuration and limits, store, uptime."""
    config = engine.config
    store = engine.store
    if isinstance(store, SqliteStore):
        where = f"SQLite {store.path}"
    elif isinstance(store, MemoryStore):
        where = "memory (lost on exit)"
    else:
        where = type(store).__name__
    started = engine.started_at_ms
    now = engine.clock.now_ms()

    def section(obj: Any) -> list[tuple[str, Any]]:
        return [(f.name, getattr(obj, f.name)) for f in dataclasses.fields(obj)]

    keys = config.auth.api_keys
    return {
        "version": __version__,
        "store": where,
        "uptime_s": 0 if started is None else max(0, now - started) // 1000,
        "started_at": when(started),
        "auth": "off" if keys is None else f"{len(keys)} API key(s)",
        "sections": [
            ("server", section(config.server)),
            ("limits", section(config.limits)),
            ("storage", section(config.storage)),
            ("ui", section(config.ui)),
        ],
        "queues": [(q.name, section(q)) for q in config.queues],
    }
