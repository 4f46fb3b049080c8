"""Our network server answering every QueueService call with no work: the network side
alone (HTTP/2 core, anyio I/O, service layer, codecs), for comparison with the bare
grpclib server of ``_grpclib_server.py``.

Run as ``python benchmarks/_noop_server.py PORT [asyncio|trio]``; prints ``ready`` once
listening and serves until killed.
"""

from __future__ import annotations

import dataclasses
import sys
from typing import Any

import anyio

from sepp_anyio import StatusCode
from sepp_anyio._proto.sepp import v1 as pb
from sepp_anyio.server import Engine, EngineError, NetworkServer
from sepp_anyio.server._engine._engine import rpc_of


async def _ack(message: pb.AckRequest) -> pb.AckResponse:
    return pb.AckResponse(job_id=message.job_id)


async def _unimplemented(message: Any) -> Any:
    # As the bare grpclib peer answers a method it does not serve.
    raise EngineError(StatusCode.UNIMPLEMENTED, "Method not found")


async def main(port: int) -> None:
    # A real engine (empty, idle: its timer sleeps, its committer waits) whose handlers are
    # replaced: the service layer and everything under it run as in production.
    async with Engine() as engine:
        rpc = rpc_of(engine)
        for field in dataclasses.fields(rpc):
            setattr(rpc, field.name, _unimplemented)
        rpc.ack = _ack
        async with NetworkServer(engine, port=port):
            print("ready", flush=True)
            await anyio.sleep_forever()


if __name__ == "__main__":
    anyio.run(main, int(sys.argv[1]), backend=sys.argv[2] if len(sys.argv) > 2 else "asyncio")
