"""ServerInfo.check predicts the server's verdict from the advertised limits."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

import sepp_anyio as sepp
from sepp_anyio.testing import open_in_memory_client

pytestmark = pytest.mark.anyio

LIMITS = {
    "max_payload_bytes": 16,
    "max_custom_entries": 2,
    "max_custom_total_bytes": 20,
    "max_custom_key_bytes": 8,
    "max_queue_name_bytes": 10,
    "max_job_type_bytes": 6,
    "max_idempotency_key_bytes": 5,
    "max_schedule_horizon_ms": 60_000,
    "allowed_encodings": ["json"],
}


def _requests() -> list[sepp.EnqueueRequest]:
    far = datetime.now(UTC) + timedelta(hours=1)
    json = sepp.Payload(b"{}", "json")
    return [
        sepp.EnqueueRequest("q", "t", payload=json),
        sepp.EnqueueRequest("q" * 11, "t"),
        sepp.EnqueueRequest("q", "t" * 7),
        sepp.EnqueueRequest("q", "t", idempotency_key="k" * 6),
        sepp.EnqueueRequest("q", "t", payload=sepp.Payload(b"x" * 17, "json")),
        sepp.EnqueueRequest("q", "t", payload=sepp.Payload(b"x", "msgpack")),
        sepp.EnqueueRequest("q", "t", custom={"a": 1, "b": 2, "c": 3}),
        sepp.EnqueueRequest("q", "t", custom={"k" * 9: 1}),
        sepp.EnqueueRequest("q", "t", custom={"a": "x" * 12, "b": True}),
        sepp.EnqueueRequest("q", "t", scheduled_at=far),
        sepp.EnqueueRequest("q", "t", delay=3600.0),
        sepp.EnqueueRequest("q", "t", custom={"a": 1.5, "bb": "yes"}, delay=30.0),
    ]


async def test_local_check_agrees_with_the_server_for_every_global_limit() -> None:
    async with open_in_memory_client(limits=LIMITS) as (client, _):
        info = await client.server_info()
        requests = _requests()
        verdicts = await client.enqueue_batch(requests)
        for request, verdict in zip(requests, verdicts, strict=True):
            predicted = info.check(request)
            if isinstance(verdict, sepp.EnqueueAck):
                assert predicted is None, request
            else:
                assert type(predicted) is type(verdict), (request, verdict)
                if not isinstance(verdict, sepp.ScheduledTooFar):
                    assert predicted == verdict


async def test_local_check_never_replaces_the_server_verdict() -> None:
    """Per-queue limits are not advertised: the server can still refuse."""
    async with open_in_memory_client(queues=[{"name": "tiny", "max_payload_bytes": 2}]) as (
        client,
        _,
    ):
        info = await client.server_info()
        request = sepp.EnqueueRequest("tiny", "t", payload=sepp.Payload(b"xyz", "json"))
        assert info.check(request) is None
        with pytest.raises(sepp.JobRejectedError) as caught:
            await client.enqueue(request)
        assert isinstance(caught.value.rejection, sepp.PayloadTooLarge)
