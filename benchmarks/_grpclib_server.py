"""A grpclib server answering Ack with no work: the benchmarks' peer.

Run as ``python benchmarks/_grpclib_server.py PORT``; prints ``ready`` once
listening and serves until killed.
"""

from __future__ import annotations

import asyncio
import sys

from grpclib.server import Server

from sepp_anyio._proto.sepp import v1 as pb


class NoopService(pb.QueueServiceBase):  # type: ignore[misc]
    async def ack(self, message: pb.AckRequest) -> pb.AckResponse:
        return pb.AckResponse(job_id=message.job_id)


async def main(port: int) -> None:
    server = Server([NoopService()])
    await server.start("127.0.0.1", port)
    print("ready", flush=True)
    await server.wait_closed()


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1])))
