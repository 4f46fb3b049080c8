"""Steady calls cost no HPACK encoding, on either side.

Once a connection's tables hold a method's headers, the client reuses the encoding of its
request headers and the server that of its response headers and of the trailers of a call
that succeeded: ``hpack.Encoder.encode`` (what a header list costs when it is not reused)
is not called again, however many calls follow. Counted in the process that runs both the
in-process network server and the client, on both backends.
"""

from __future__ import annotations

import sys
from types import FrameType
from typing import Any

import hpack
import pytest

import sepp_anyio as sepp
from sepp_anyio._grpc import GrpcError
from sepp_anyio._model._error_root import StatusCode
from sepp_anyio._proto.sepp import v1 as pb
from sepp_anyio._transport import Channel
from tests.server_hostile._harness import hostile_server

pytestmark = pytest.mark.anyio

_ENCODE = hpack.Encoder.encode.__code__


async def test_calls_after_the_first_encode_no_header_list() -> None:
    async with hostile_server() as server, sepp.connect(f"127.0.0.1:{server.port}") as client:
        for _ in range(3):  # the tables and the caches fill
            await client.server_info()
        encodes = 0

        def count(frame: FrameType, event: str, arg: Any) -> None:
            nonlocal encodes
            if event == "call" and frame.f_code is _ENCODE:
                encodes += 1

        sys.setprofile(count)
        try:
            for _ in range(20):
                await client.server_info()
        finally:
            sys.setprofile(None)
        assert encodes == 0


async def test_the_trailers_of_a_failed_call_still_carry_its_status() -> None:
    """Only the OK trailers are kept: a failure's status and message go out as before."""
    async with hostile_server() as server, Channel("127.0.0.1", server.port) as channel:
        stub = pb.QueueServiceStub(channel)
        unknown = pb.AckRequest(job_id="00000000-0000-4000-8000-000000000000", attempt=1)
        for _ in range(2):  # an OK call, then a failure, on the same connection
            await stub.get_server_info(pb.GetServerInfoRequest(), timeout=5.0)
            with pytest.raises(GrpcError) as failed:
                await stub.ack(unknown, timeout=5.0)
            assert failed.value.code == StatusCode.NOT_FOUND
            assert failed.value.message
