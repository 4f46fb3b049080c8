"""gRPC status -> error, for every status and every client call (peer-clients §2.1, §2.2).

The expected table is written out here independently of ``_errors``. The statuses are
injected server-side: in-process (``FaultyEngine``, every call) and over the real HTTP/2
transport (``ScriptedGrpclibServer``, a call of each error table), on both backends.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime

import pytest

import sepp_anyio
from sepp_anyio import (
    AttemptMismatchError,
    ClientError,
    EnqueueRequest,
    InvalidRequestError,
    JobCtx,
    JobNotFoundError,
    LeaseError,
    OverloadedError,
    ServerInternalError,
    StatusCode,
    TransportError,
    UnauthenticatedError,
    UnexpectedStatusError,
    UnknownQueuesError,
)
from tests.support.servers import RawH2Server, ScriptedGrpclibServer, grpc_status

from . import ALL_OPS, Op, prepared

pytestmark = pytest.mark.anyio

GENERAL: dict[str, type[ClientError]] = {
    "CANCELLED": TransportError,
    "UNKNOWN": ServerInternalError,
    "INVALID_ARGUMENT": InvalidRequestError,
    "DEADLINE_EXCEEDED": TransportError,
    "NOT_FOUND": UnexpectedStatusError,
    "ALREADY_EXISTS": UnexpectedStatusError,
    "PERMISSION_DENIED": UnauthenticatedError,
    "RESOURCE_EXHAUSTED": OverloadedError,
    "FAILED_PRECONDITION": UnexpectedStatusError,
    "ABORTED": TransportError,
    "OUT_OF_RANGE": UnexpectedStatusError,
    "UNIMPLEMENTED": UnexpectedStatusError,
    "INTERNAL": ServerInternalError,
    "UNAVAILABLE": TransportError,
    "DATA_LOSS": ServerInternalError,
    "UNAUTHENTICATED": UnauthenticatedError,
}
SPECIFIC: dict[str, dict[str, type[sepp_anyio.SeppError]]] = {
    "general": {},
    "lease": {"NOT_FOUND": JobNotFoundError, "FAILED_PRECONDITION": AttemptMismatchError},
    "reserve": {"FAILED_PRECONDITION": UnknownQueuesError},
}


def expected(kind: str, code: str) -> type[sepp_anyio.SeppError]:
    return SPECIFIC[kind].get(code, GENERAL[code])


def test_the_table_covers_every_status() -> None:
    assert set(GENERAL) == {code.name for code in StatusCode} - {"OK"}


def check(error: BaseException, kind: str, code: str, message: str) -> None:
    assert type(error) is expected(kind, code)
    assert isinstance(error, sepp_anyio.SeppError)
    assert error.code is StatusCode[code]
    assert error.status_message == message
    assert message in str(error)
    # Lease-specific errors are LeaseErrors; everything else stays a plain ClientError,
    # even from a lease call.
    assert isinstance(error, LeaseError) == (type(error) in SPECIFIC["lease"].values())
    assert isinstance(error, ClientError) == (type(error) in GENERAL.values())
    # Nothing of the transport leaks: no grpclib exception is chained as the cause.
    assert error.__cause__ is None


@pytest.mark.parametrize("code", list(GENERAL))
@pytest.mark.parametrize("op", ALL_OPS, ids=str)
async def test_each_status_maps_to_its_error_in_process(op: Op, code: str) -> None:
    async with prepared(op, None, fail_first={op.rpc: (1, code)}) as (mem, ctx):
        with pytest.raises(sepp_anyio.SeppError) as caught:
            await op.call(mem, ctx)
    check(caught.value, op.kind, code, f"injected {code} #1")


# ------------------------------------------------------------------------------ real transport

CTX = JobCtx(
    id="0b1c4a8e-7d2c-4f3e-9a61-3c5b2d1e0f9a",
    queue="q",
    job_type="t",
    priority=0,
    attempt=1,
    max_attempts=3,
    enqueued_at=datetime(2026, 1, 1, tzinfo=UTC),
    scheduled_at=None,
    lease_expires_at=datetime(2026, 1, 1, tzinfo=UTC),
)

NETWORK_CALLS = {
    "enqueue": ("EnqueueBatch", "general"),
    "reserve": ("Reserve", "reserve"),
    "ack": ("Ack", "lease"),
    "nack": ("Nack", "lease"),
    "extend": ("Extend", "lease"),
    "drain_dead_letters": ("DrainDeadLetters", "general"),
}


@pytest.fixture(scope="module")
def scripted() -> Iterator[ScriptedGrpclibServer]:
    with ScriptedGrpclibServer() as server:
        yield server


async def network_call(client: sepp_anyio.Client, name: str) -> None:
    if name == "enqueue":
        await client.enqueue(EnqueueRequest("q", "t"))
    elif name == "reserve":
        await client.reserve(["q"], lease=30, wait=0)
    elif name == "ack":
        await client.ack(CTX)
    elif name == "nack":
        await client.nack(CTX)
    elif name == "extend":
        await client.extend(CTX, 30)
    else:
        await client.drain_dead_letters()


@pytest.mark.parametrize("code", list(GENERAL))
@pytest.mark.parametrize("name", list(NETWORK_CALLS))
async def test_each_status_maps_to_its_error_over_http2(
    scripted: ScriptedGrpclibServer, name: str, code: str
) -> None:
    rpc, kind = NETWORK_CALLS[name]
    scripted.script(fail_first={rpc: (1, code)})
    async with sepp_anyio.connect(scripted.address) as client:
        with pytest.raises(sepp_anyio.SeppError) as caught:
            await network_call(client, name)
    check(caught.value, kind, code, f"injected {code} #1")
    assert [event.status for event in scripted.events] == [code]


async def test_a_status_number_outside_the_known_ones_is_a_server_internal_error() -> None:
    with RawH2Server(grpc_status(99, "from the future")) as raw:
        async with sepp_anyio.connect(raw.address) as client:
            with pytest.raises(ServerInternalError) as caught:
                await client.server_info()
    assert caught.value.code is StatusCode.UNKNOWN
    assert "99" in str(caught.value)
    assert "from the future" in str(caught.value)
