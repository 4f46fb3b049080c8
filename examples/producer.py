"""Enqueue the shop's jobs in batches, each with an idempotency key.

::

    python examples/producer.py --orders 20            # orders 1..20
    python examples/producer.py --orders 20            # again: every job is deduplicated
    python examples/producer.py --orders 5 --first 21  # orders 21..25

Each order gets a ``charge_card`` and a ``send_confirmation`` job (every third one also a
``resize_photo``); order numbers ending in 7 pay with a card that is declined. The keys
(``order-<n>-<job type>``) make a rerun, or a retried call after a lost reply, enqueue
nothing twice. The batches are best effort (one result per job); the last part shows
``enqueue_atomic``, all or nothing.
"""

from __future__ import annotations

import argparse
import os

import anyio

import sepp_anyio as sepp
from shop_jobs import QUEUE


def order_jobs(order: int) -> list[sepp.EnqueueRequest]:
    """The jobs of one order."""
    card = "tok_declined" if order % 10 == 7 else "tok_visa"
    jobs = [
        sepp.EnqueueRequest(
            QUEUE,
            "charge_card",
            payload=sepp.Payload.from_json({"order": order, "card": card, "amount_cents": 1999}),
            idempotency_key=f"order-{order}-charge_card",
            priority=5,  # money first
        ),
        sepp.EnqueueRequest(
            QUEUE,
            "send_confirmation",
            payload=sepp.Payload.from_json({"order": order, "email": f"buyer{order}@example.com"}),
            idempotency_key=f"order-{order}-send_confirmation",
        ),
    ]
    if order % 3 == 0:
        jobs.append(
            sepp.EnqueueRequest(
                QUEUE,
                "resize_photo",
                payload=sepp.Payload.from_json({"order": order, "megapixels": 12}),
                idempotency_key=f"order-{order}-resize_photo",
                custom={"source": "upload"},
            )
        )
    return jobs


async def main(first: int, orders: int) -> None:
    address = os.environ.get("SEPP_ADDR", "127.0.0.1:50051")
    # Transient failures are retried; with keys on every job, even an ambiguous one is safe.
    retry = sepp.RetryPolicy(max_attempts=5)
    async with sepp.connect(address, retry=retry) as client:
        batch_size = (await client.server_info()).max_enqueue_batch
        requests = [job for order in range(first, first + orders) for job in order_jobs(order)]
        enqueued = deduplicated = rejected = 0
        for start in range(0, len(requests), batch_size):
            batch = requests[start : start + batch_size]
            for request, result in zip(batch, await client.enqueue_batch(batch), strict=True):
                match result:
                    case sepp.EnqueueAck(deduplicated=True):
                        deduplicated += 1
                    case sepp.EnqueueAck():
                        enqueued += 1
                    case sepp.JobRejection():
                        rejected += 1
                        print(f"rejected {request.idempotency_key}: {result}")
        print(f"enqueued {enqueued}, deduplicated {deduplicated}, rejected {rejected}")

        # All or nothing: a gift order's charge and confirmation go in together or not at all.
        gift = first + orders + 1000
        try:
            acks = await client.enqueue_atomic(order_jobs(gift)[:2])
        except sepp.BatchValidationError as exc:
            print(f"gift order {gift} refused, nothing enqueued: {exc}")
        else:
            fresh = sum(not ack.deduplicated for ack in acks)
            print(f"gift order {gift}: {fresh} enqueued atomically")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--orders", type=int, default=20, help="how many orders (default: 20)")
    parser.add_argument("--first", type=int, default=1, help="first order number (default: 1)")
    args = parser.parse_args()
    anyio.run(main, args.first, args.orders)
