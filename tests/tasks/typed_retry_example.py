"""A typed example of retry policies and expiry that ``test_typing_retry.py`` checks with
``mypy --strict`` (as ``typed_example.py`` is checked): every line with a
``# type: ignore[code]`` is a mistake mypy must catch with that code; the others must pass.
"""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

from sepp_anyio import Client, EnqueueRequest, JobCtx, Outcome, Retry, Task, Worker

policy = Retry(
    backoff=1.0,
    factor=2.0,
    max_delay=300.0,
    jitter="full",
    retry_on=(TimeoutError, ConnectionError),
    dead_letter_on=(ValueError,),
    random=random.Random(7),
)
equal = Retry(jitter="equal")
fixed = Retry(jitter=None)
send = Task("emails", "send", int, max_attempts=8, retry=policy, expires=600.0)
soon = datetime.now(UTC) + timedelta(minutes=5)


async def produce(client: Client) -> None:
    await send.enqueue(client, 1, expires_at=soon)
    await client.enqueue(EnqueueRequest("emails", "send", expires_at=soon))
    request: EnqueueRequest = send.request(2, expires_at=soon)
    await client.enqueue(request)

    await send.enqueue(client, 1, expires_at=600.0)  # type: ignore[call-overload]
    EnqueueRequest("emails", "send", expires_at="soon")  # type: ignore[arg-type]


def policies(client: Client) -> Worker:
    delay: float = policy.delay(3)
    dead: bool = policy.dead_letters(ValueError("x"))
    own: Retry | None = send.retry
    print(delay, dead, own, equal, fixed, send.expires)

    Retry(jitter="half")  # type: ignore[arg-type]
    Retry(retry_on=(1,))  # type: ignore[arg-type]
    Retry(1.0)  # type: ignore[call-arg]
    Task("emails", "send", int, retry=3)  # type: ignore[call-overload]

    def on_outcome(ctx: JobCtx, outcome: Outcome, error: BaseException | None) -> None:
        if outcome is Outcome.EXPIRED:
            print(ctx.id, "expired")

    return Worker(client, ["emails"], retry=policy, on_outcome=on_outcome)


def bad_worker(client: Client) -> Worker:
    return Worker(client, ["emails"], retry=policy.delay)  # type: ignore[arg-type]
