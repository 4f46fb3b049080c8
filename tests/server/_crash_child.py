"""Child process of the SIGKILL test: enqueue and reserve forever, printing what was acked.

Usage: python _crash_child.py DB_PATH BACKEND

Lines: ``E <job_id>`` once an enqueue reply has been received, ``R <job_id> <attempt>``
once a reserve reply has been received.  The parent kills the process at an arbitrary point.
"""

from __future__ import annotations

import datetime
import sys

import anyio

from sepp_anyio._proto.sepp import v1 as pb
from sepp_anyio.server import Engine, SqliteStore
from sepp_anyio.server._engine._engine import rpc_of


async def main(path: str) -> None:
    async with Engine(store=SqliteStore(path, synchronous="FULL")) as engine:
        for i in range(1_000_000):
            jobs = [
                pb.EnqueueRequest(
                    queue="crash",
                    job_type="t",
                    payload=pb.Payload(data=f"{i}/{n}".encode(), encoding="text/plain"),
                )
                for n in range(3)
            ]
            response = await rpc_of(engine).enqueue_batch(pb.EnqueueBatchRequest(jobs=jobs))
            for result in response.results:
                print("E", result.success.job_id, flush=True)
            if i % 2 == 0:
                reserved = await rpc_of(engine).reserve(
                    pb.ReserveRequest(
                        queues=["crash"], lease_duration=datetime.timedelta(seconds=600)
                    )
                )
                for job in reserved.jobs:
                    print("R", job.id, job.attempt, flush=True)


if __name__ == "__main__":
    anyio.run(main, sys.argv[1], backend=sys.argv[2])
