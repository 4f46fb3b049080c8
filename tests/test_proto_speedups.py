"""The cached default lookup changes speed only, never the bytes."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import betterproto2
from hypothesis import given
from hypothesis import strategies as st

from sepp_anyio import _proto_speedups
from sepp_anyio._proto.sepp import v1 as pb

ORIGINAL = betterproto2.Message._get_field_default


def _reference_bytes(message: Any) -> bytes:
    """Encode with betterproto2's own default lookup, on every nested message."""
    patched = [
        cls
        for cls in vars(pb).values()
        if isinstance(cls, type) and "_get_field_default" in vars(cls)
    ]
    saved = {cls: vars(cls)["_get_field_default"] for cls in patched}
    try:
        for cls in patched:
            delattr(cls, "_get_field_default")
        return bytes(message)
    finally:
        for cls, method in saved.items():
            setattr(cls, "_get_field_default", method)  # noqa: B010


def test_install_touches_only_generated_classes() -> None:
    assert betterproto2.Message._get_field_default is ORIGINAL
    assert "_get_field_default" in vars(pb.Job)
    _proto_speedups.install()  # idempotent
    assert betterproto2.Message._get_field_default is ORIGINAL


texts = st.text(max_size=20)
counts = st.integers(min_value=0, max_value=2**32 - 1)
instants = st.one_of(
    st.none(),
    st.datetimes(
        min_value=datetime(1970, 1, 2), max_value=datetime(2200, 1, 1), timezones=st.just(UTC)
    ),
)


@given(
    texts,
    texts,
    st.binary(max_size=50),
    st.integers(0, 9),
    counts,
    counts,
    instants,
    instants,
    st.dictionaries(
        texts, st.one_of(st.integers(-(2**63), 2**63 - 1), texts, st.booleans()), max_size=3
    ),
)
def test_encoding_is_byte_identical(
    job_id: str,
    job_type: str,
    data: bytes,
    priority: int,
    attempt: int,
    max_attempts: int,
    enqueued_at: datetime | None,
    scheduled_at: datetime | None,
    custom: dict[str, int | str | bool],
) -> None:
    def primitive(value: int | str | bool) -> Any:
        if isinstance(value, bool):
            return pb.PrimitiveValue(bool_value=value)
        if isinstance(value, int):
            return pb.PrimitiveValue(int_value=value)
        return pb.PrimitiveValue(string_value=value)

    job = pb.Job(
        id=job_id,
        job_type=job_type,
        payload=pb.Payload(data=data, encoding="e") if data else None,
        priority=priority,
        enqueued_at=enqueued_at,
        attempt=attempt,
        max_attempts=max_attempts,
        scheduled_at=scheduled_at,
        custom={k: primitive(v) for k, v in custom.items()},
    )
    messages = [
        job,
        pb.ReserveResponse(jobs=[job, job]),
        pb.AckRequest(job_id=job_id, attempt=attempt, worker_id=job_type or None),
        pb.NackRequest(
            job_id=job_id,
            attempt=attempt,
            retry=pb.NackRetry(delay=timedelta(milliseconds=priority)),
        ),
        pb.ReserveRequest(
            queues=[job_type], lease_duration=timedelta(seconds=1), max_jobs=attempt or None
        ),
    ]
    for message in messages:
        assert bytes(message) == _reference_bytes(message)
