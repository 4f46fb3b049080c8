"""Replay dead letters: jobs worth another try go back to their queue; jobs that were
refused for good (``HandlerError.permanent``) are parked on ``<queue>.parked`` for a human.

::

    python examples/dead_letter_replay.py --queue shop [--max 100]

Draining removes the records from the server, so every drained record is printed and put
somewhere: nothing is dropped. (The server keeps dead letters only when
``[storage] dead_letter_retention_ms`` is above 0; the reference server:
``SEPP_STORAGE__DEAD_LETTER_RETENTION_MS=86400000 sepp-anyio server``.)
"""

from __future__ import annotations

import argparse
import dataclasses
import os

import anyio

import sepp_anyio as sepp


async def main(queue: str | None, max_records: int) -> None:
    address = os.environ.get("SEPP_ADDR", "127.0.0.1:50051")
    async with sepp.connect(address, retry=sepp.RetryPolicy(max_attempts=5)) as client:
        if not (await client.server_info()).dead_letter_retention_enabled:
            print("this server keeps no dead letters (dead_letter_retention_ms = 0)")
            return
        records = await client.drain_dead_letters(queue=queue, max=max_records)
        replays: list[sepp.EnqueueRequest] = []
        for record in records:
            replay = record.to_enqueue_request()  # a fresh job: new id, attempts from 1
            if record.cause is sepp.DeadLetterCause.REJECTED:
                replay = dataclasses.replace(replay, queue=f"{record.queue}.parked")
            # A key naming the dead job makes a retried enqueue safe.
            replays.append(dataclasses.replace(replay, idempotency_key=f"replay-{record.job_id}"))
            print(
                f"{record.job_id} {record.job_type} on {record.queue}: {record.cause.value} "
                f"after {record.final_attempt} attempt(s) ({record.last_reason or 'no reason'})"
                f" -> {replay.queue}"
            )
        if replays:
            acks = await client.enqueue_atomic(replays)  # all of them, or none
            print(f"replayed {len(acks)} dead letter(s)")
        else:
            print("no dead letters")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queue", help="only this queue (default: every queue)")
    parser.add_argument("--max", type=int, default=100, help="at most this many (default: 100)")
    args = parser.parse_args()
    anyio.run(main, args.queue, args.max)
