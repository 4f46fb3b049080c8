"""A connection whose stream ids are used up hands the next call to a new connection.

Stream ids are 31 bits and never reused (RFC 9113 section 5.1.1): a client that has
opened 2**30 streams on a connection must open a new one. Reaching that for real takes
a billion calls, so the test moves the connection's next id to the last one.
"""

from __future__ import annotations

from collections.abc import Iterator

import anyio
import pytest

from sepp_anyio._http2 import MAX_STREAM_ID
from sepp_anyio._proto.sepp import v1 as pb
from sepp_anyio._transport import Channel
from tests.support.servers import GrpcioTestServer, GrpclibTestServer

pytestmark = pytest.mark.anyio

Server = GrpclibTestServer | GrpcioTestServer


@pytest.fixture(scope="module", params=["grpclib", "grpcio"])
def server(request: pytest.FixtureRequest) -> Iterator[Server]:
    kind = GrpclibTestServer if request.param == "grpclib" else GrpcioTestServer
    with kind() as server:
        yield server


async def test_the_last_stream_id_is_used_then_a_new_connection_is_made(server: Server) -> None:
    async with Channel("127.0.0.1", server.port) as channel:
        stub = pb.QueueServiceStub(channel)
        await stub.get_server_info(pb.GetServerInfoRequest())
        first = channel._conn
        assert first is not None
        # (Our own core's private field: the ids left cannot be changed otherwise.)
        first.h2._next_stream_id = MAX_STREAM_ID
        assert first.h2.stream_ids_left == 1
        # The call on the last id succeeds...
        await stub.get_server_info(pb.GetServerInfoRequest())
        assert first.h2.stream_ids_left == 0
        assert not first.usable
        # ... and the connection closes once its calls are done; the next call
        # connects again.
        with anyio.fail_after(5):
            await first.closed.wait()
        for _ in range(3):
            reply = await stub.get_server_info(pb.GetServerInfoRequest())
            assert reply.server_version == server.version
        second = channel._conn
        assert second is not None and second is not first and second.usable
