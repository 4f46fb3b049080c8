"""Our network server answering every QueueService call with no work: the network side
alone (HTTP/2 core, anyio I/O, service layer, codecs), for comparison with the bare
grpclib server of ``_grpclib_server.py``.

Run as ``python benchmarks/_noop_server.py PORT [asyncio|trio]``; prints ``ready`` once
listening and serves until killed.
"""

from __future__ import annotations

import sys
from typing import Any, cast

import anyio

from sepp_anyio._proto.sepp import v1 as pb
from sepp_anyio.server import Engine, NetworkServer, ServerConfig


class _NoopEngine:
    """What the service layer reads of an engine; every RPC answers at once."""

    config = ServerConfig()
    shutting_down = False
    storage_failed = False

    def shutdown(self) -> None:
        pass

    async def ack(self, message: pb.AckRequest) -> pb.AckResponse:
        return pb.AckResponse(job_id=message.job_id)

    def __getattr__(self, name: str) -> Any:
        async def nothing(message: Any) -> Any:
            raise NotImplementedError(name)

        return nothing


async def main(port: int) -> None:
    async with NetworkServer(cast("Engine", _NoopEngine()), port=port):
        print("ready", flush=True)
        await anyio.sleep_forever()


if __name__ == "__main__":
    anyio.run(main, int(sys.argv[1]), backend=sys.argv[2] if len(sys.argv) > 2 else "asyncio")
