"""Every RPC carries the W3C context of its own CLIENT span, over real HTTP/2."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry import trace

import sepp_anyio as sepp
from tests.support.servers import GrpclibTestServer

from .conftest import Telemetry


@pytest.fixture
def anyio_backend(request: pytest.FixtureRequest) -> Any:
    return request.param


@pytest.fixture(scope="module")
def echo_server() -> Iterator[GrpclibTestServer]:
    with GrpclibTestServer() as server:
        yield server


def _sent(server: GrpclibTestServer) -> dict[str, Any]:
    return dict(server.events[-1].metadata)


@pytest.mark.parametrize("anyio_backend", ["asyncio", "trio"], indirect=True)
@pytest.mark.anyio
async def test_rpc_metadata_names_the_client_span_as_parent(
    telemetry: Telemetry, echo_server: GrpclibTestServer
) -> None:
    tracer = trace.get_tracer("test")
    async with sepp.connect(echo_server.address) as client:
        with tracer.start_as_current_span("app") as app:
            await client.enqueue(sepp.EnqueueRequest("q", "t", payload=sepp.Payload(b"x", "b")))
        (span,) = [s for s in telemetry.spans.get_finished_spans() if s.name == "sepp.enqueue"]
        version, trace_id, span_id, _flags = _sent(echo_server)["traceparent"].split("-")
        assert (version, trace_id, span_id) == (
            "00",
            f"{span.context.trace_id:032x}",
            f"{span.context.span_id:016x}",
        )
        assert span.context.trace_id == app.get_span_context().trace_id
        assert span.parent is not None
        assert span.parent.span_id == app.get_span_context().span_id

        # Without an application span the RPC's own span is still sent.
        telemetry.spans.clear()
        await client.enqueue(sepp.EnqueueRequest("q", "t", payload=sepp.Payload(b"y", "b")))
        (own,) = telemetry.spans.get_finished_spans()
        assert _sent(echo_server)["traceparent"].split("-")[2] == f"{own.context.span_id:016x}"
        assert own.parent is None
