"""Retry policies and expiry: a flaky payment provider retried with backoff and jitter, a
malformed order dead-lettered at once, and a reminder that went stale before a worker
got to it.

::

    python examples/retry_and_expiry.py    # the server: $SEPP_ADDR, default 127.0.0.1:50051

``sepp.Retry`` decides, per task or per worker, how long a failed job waits before its next
attempt (``min(max_delay, backoff * factor ** (attempt - 1))``, jittered) and which
exception types are not worth another attempt. ``Task(expires=)`` (or
``EnqueueRequest(expires_at=)``, or a producer in any language setting the custom field
``sepp.expires_at``) puts a deadline on a job: a worker that reserves it later does not run
it, and dead-letters it with the reason ``expired``.
"""

from __future__ import annotations

import os
import random

import anyio

import sepp_anyio as sepp


class ProviderDown(ConnectionError):
    """The payment provider did not answer: worth another try."""


class MalformedOrder(ValueError):
    """The order can never be charged: retrying will not help."""


#: Short delays so that the demo ends in a second: 0.2 s, then 0.4 s, at most 1 s, each
#: between half and all of that ("equal" jitter). Seeded, so every run waits alike.
PAYMENTS = sepp.Retry(
    backoff=0.2,
    factor=2.0,
    max_delay=1.0,
    jitter="equal",
    retry_on=(ProviderDown,),
    dead_letter_on=(ValueError,),
    random=random.Random(7),
)

charge = sepp.Task("shop", "charge", int, max_attempts=5, retry=PAYMENTS)
#: A reminder sent later than 0.5 s after it is due is pointless.
remind = sepp.Task("shop", "remind", str, expires=0.5)


async def main() -> None:
    address = os.environ.get("SEPP_ADDR", "127.0.0.1:50051")
    async with sepp.connect(address) as client:
        # The reminder is enqueued first and goes stale while no worker runs.
        await remind.enqueue(client, "your cart misses you")
        await anyio.sleep(0.6)
        await charge.enqueue(client, 1)  # the provider fails twice, then answers
        await charge.enqueue(client, -1)  # malformed: dead-lettered on its first attempt

        settled = 0
        done = anyio.Event()

        def report(ctx: sepp.JobCtx, outcome: sepp.Outcome, error: BaseException | None) -> None:
            nonlocal settled
            why = f" ({type(error).__name__})" if error is not None else ""
            print(f"{ctx.job_type} attempt {ctx.attempt}: {outcome.value}{why}")
            if outcome is not sepp.Outcome.RETRIED:
                settled += 1
                if settled == 3:
                    done.set()

        # The worker's policy is the default of every handler; a task's own wins.
        worker = sepp.Worker(
            client, ["shop"], wait=1.0, on_outcome=report, retry=sepp.Retry(backoff=1.0)
        )

        @worker.task(charge)
        async def charge_card(order: int, ctx: sepp.JobCtx) -> None:
            if order < 0:
                raise MalformedOrder(f"order {order} has no amount")
            if ctx.attempt < 3:
                raise ProviderDown("the provider timed out")

        @worker.task(remind)
        async def send_reminder(text: str, ctx: sepp.JobCtx) -> None:
            raise AssertionError("an expired reminder is never sent")

        async with anyio.create_task_group() as tg:
            await tg.start(worker.run)
            with anyio.fail_after(30):
                await done.wait()
            worker.shutdown()
        stats = worker.statistics()
        print(
            f"processed={stats.processed} nacked_retry={stats.nacked_retry} "
            f"nacked_dead_letter={stats.nacked_dead_letter} expired={stats.expired}"
        )


if __name__ == "__main__":
    anyio.run(main)
