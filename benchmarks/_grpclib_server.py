"""A grpclib server answering Ack with no work: the benchmarks' peer.

Run as ``python benchmarks/_grpclib_server.py PORT``; prints ``ready`` once
listening and serves until killed.
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

from grpclib.const import Cardinality, Handler
from grpclib.server import Server, Stream

from sepp_anyio._proto.sepp import v1 as pb


class NoopService:
    """``sepp.v1.QueueService/Ack`` and nothing else (grpclib answers the other methods
    UNIMPLEMENTED): grpclib's ``__mapping__`` protocol, written here because the generated
    code has no server side."""

    async def ack(self, stream: Stream[pb.AckRequest, pb.AckResponse]) -> None:
        message: Any = await stream.recv_message()
        await stream.send_message(pb.AckResponse(job_id=message.job_id))

    def __mapping__(self) -> dict[str, Handler]:
        return {
            "/sepp.v1.QueueService/Ack": Handler(
                self.ack, Cardinality.UNARY_UNARY, pb.AckRequest, pb.AckResponse
            )
        }


async def main(port: int) -> None:
    server = Server([NoopService()])
    await server.start("127.0.0.1", port)
    print("ready", flush=True)
    await server.wait_closed()


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1])))
