"""The accounting itself: each kind of loss or duplication it exists to catch is caught."""

from __future__ import annotations

from collections.abc import Iterable

import pytest

from sepp_anyio.server import DeadLetterCause

from ._ledger import Ledger, Run, ServerJob, Settle

Q = "q"


def _ledger(*tags: str) -> Ledger:
    ledger = Ledger(Q)
    for index, tag in enumerate(tags):
        job_id = f"id-{index}"
        ledger.tags[tag] = job_id
        ledger.by_id[job_id] = tag
    return ledger


def _run(job_id: str, attempt: int, started: float, last_expiry: float, outcome: str) -> Run:
    tag = f"t{job_id[-1]}"
    return Run(job_id, tag, attempt, started, last_expiry, last_expiry, outcome, started + 0.1)


def _judge(ledger: Ledger, server: Iterable[ServerJob] = (), **options: object) -> list[str]:
    report = ledger._judge(
        {job.job_id: job for job in server},
        "test",
        options.get("dead_causes", {}),  # type: ignore[arg-type]
        options.get("default_dead", ()),  # type: ignore[arg-type]
        bool(options.get("allow_live", False)),
    )
    return report.violations


def test_a_clean_history_passes() -> None:
    ledger = _ledger("t0", "t1")
    ledger.runs = [_run("id-0", 1, 10.0, 40.0, "returned"), _run("id-1", 1, 10.0, 40.0, "raised")]
    ledger.settles = [
        Settle("id-0", 1, "ack", True),
        Settle("id-1", 1, "nack", True, dead_lettered=True),
    ]
    dead = ServerJob("id-1", "t1", False, "dead", 1, DeadLetterCause.REJECTED, "no")
    assert _judge(ledger, [dead], default_dead=(DeadLetterCause.REJECTED,)) == []


def test_a_job_gone_without_an_ack_disappeared() -> None:
    ledger = _ledger("t0")
    ledger.runs = [_run("id-0", 1, 10.0, 40.0, "returned")]
    assert any("disappeared" in v for v in _judge(ledger))


def test_a_successful_ack_that_did_not_stick() -> None:
    ledger = _ledger("t0")
    ledger.settles = [Settle("id-0", 1, "ack", True)]
    live = ServerJob("id-0", "t0", True, "ready", 2)
    assert any("did not stick" in v for v in _judge(ledger, [live], allow_live=True))


def test_two_successful_acks_and_a_redelivery_after_an_ack() -> None:
    ledger = _ledger("t0")
    ledger.runs = [_run("id-0", 1, 10.0, 40.0, "returned"), _run("id-0", 2, 50.0, 80.0, "returned")]
    ledger.settles = [Settle("id-0", 1, "ack", True), Settle("id-0", 2, "ack", True)]
    violations = _judge(ledger)
    assert any("acked successfully 2 times" in v for v in violations)
    assert any("after a successful ack" in v for v in violations)


def test_a_redelivery_before_the_lease_expired() -> None:
    ledger = _ledger("t0")
    # Attempt 1 held its lease until 40.0; attempt 2 started at 20.0 without a nack.
    ledger.runs = [
        _run("id-0", 1, 10.0, 40.0, "cancelled"),
        _run("id-0", 2, 20.0, 60.0, "returned"),
    ]
    ledger.settles = [Settle("id-0", 2, "ack", True)]
    assert any("before attempt 1's lease expired" in v for v in _judge(ledger))
    # After a nack for retry (even one whose reply was lost), an early redelivery is fine.
    ledger.settles.insert(0, Settle("id-0", 1, "nack", False, retry=True))
    assert _judge(ledger) == []


def test_an_attempt_run_twice_and_an_unexpected_dead_letter_cause() -> None:
    ledger = _ledger("t0")
    ledger.runs = [_run("id-0", 1, 10.0, 40.0, "returned"), _run("id-0", 1, 11.0, 40.0, "returned")]
    dead = ServerJob("id-0", "t0", False, "dead", 1, DeadLetterCause.LEASE_EXPIRED)
    violations = _judge(ledger, [dead], default_dead=(DeadLetterCause.REJECTED,))
    assert any("attempt 1 ran 2 times" in v for v in violations)
    assert any("dead-lettered as LEASE_EXPIRED" in v for v in violations)


def test_a_job_the_producer_never_enqueued_or_a_live_job() -> None:
    ledger = _ledger("t0")
    ledger.settles = [Settle("id-0", 1, "ack", True)]
    stray = ServerJob("id-9", "t0", True, "ready", 1)
    violations = _judge(ledger, [stray])
    assert any("unknown job id-9" in v for v in violations)
    assert any(
        "still live" in v for v in _judge(ledger, [ServerJob("id-0", "t0", True, "ready", 1)])
    )


@pytest.mark.parametrize("allow_live", [True, False])
def test_live_jobs_only_where_allowed(allow_live: bool) -> None:
    ledger = _ledger("t0")
    live = ServerJob("id-0", "t0", True, "scheduled", 1)
    assert (_judge(ledger, [live], allow_live=allow_live) == []) is allow_live
