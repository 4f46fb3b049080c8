"""The jobs of a small web shop: the handlers a worker runs (your application's code).

Three job types, on the queue ``shop``:

* ``charge_card``: asks the payment gateway to charge an order. A gateway timeout is
  retried 30 s later; a declined card is refused for good (dead-lettered at once).
* ``send_confirmation``: e-mails the order confirmation. An order without an address can
  never succeed.
* ``resize_photo``: slow, CPU-ish work; the worker keeps extending its lease
  (``auto_extend``) for as long as it runs.

Run them with the command line (from this directory)::

    sepp-anyio worker shop_jobs:handlers --queue shop --auto-extend   # a handler registry
    sepp-anyio worker shop_jobs:make_worker                          # a factory

or from Python: ``trio_worker.py`` and ``asyncio_worker.py`` run the very same worker, and
``test_shop_jobs.py`` tests these handlers with the pytest plugin and trio's MockClock.
"""

from __future__ import annotations

import logging

import anyio

import sepp_anyio as sepp

__all__ = ["QUEUE", "GatewayTimeout", "handlers", "make_worker", "payments"]

QUEUE = "shop"
logger = logging.getLogger("shop")


class GatewayTimeout(Exception):
    """The payment gateway did not answer in time (worth retrying)."""


class CardDeclined(Exception):
    """The bank refused the card (retrying will not help)."""


class Payments:
    """A stand-in for a payment gateway's client (tests replace ``charge``)."""

    async def charge(self, card: str, amount_cents: int) -> str:
        await anyio.sleep(0.005)  # the network round trip
        if card == "tok_declined":
            raise CardDeclined("insufficient funds")
        return f"ch_{card}_{amount_cents}"


payments = Payments()


async def charge_card(payload: sepp.Payload | None, ctx: sepp.JobCtx) -> None:
    """Charge an order: ``{"order": 7, "card": "tok_visa", "amount_cents": 1999}``."""
    assert payload is not None
    order = payload.json()
    try:
        charge_id = await payments.charge(order["card"], order["amount_cents"])
    except GatewayTimeout:
        # Another attempt later (the queue's max_attempts still applies).
        raise sepp.HandlerError.retry_after("payment gateway timed out", 30.0) from None
    except CardDeclined as exc:
        logger.info("order %s: card declined (%s)", order["order"], exc)
        raise sepp.HandlerError.permanent(f"card declined: {exc}") from None
    logger.info("order %s: charged (%s, attempt %d)", order["order"], charge_id, ctx.attempt)


async def send_confirmation(payload: sepp.Payload | None, ctx: sepp.JobCtx) -> None:
    """E-mail the order confirmation: ``{"order": 7, "email": "ada@example.com"}``."""
    assert payload is not None
    order = payload.json()
    if not order.get("email"):
        logger.info("order %s: no e-mail address", order["order"])
        raise sepp.HandlerError.permanent("the order has no e-mail address")
    await anyio.sleep(0.01)  # talk to the mail server
    logger.info("order %s: confirmation sent to %s", order["order"], order["email"])


async def resize_photo(payload: sepp.Payload | None, ctx: sepp.JobCtx) -> None:
    """Resize a product photo: ``{"order": 7, "megapixels": 12}`` (0.01 s per megapixel)."""
    assert payload is not None
    photo = payload.json()
    for _ in range(photo["megapixels"]):
        await anyio.sleep(0.01)  # one slice of the work; a checkpoint for cancellation
    logger.info("order %s: photo resized", photo["order"])


#: The handler registry: ``sepp-anyio worker shop_jobs:handlers --queue shop``.
handlers: dict[str, sepp.Handler] = {
    "charge_card": charge_card,
    "send_confirmation": send_confirmation,
    "resize_photo": resize_photo,
}


def make_worker(client: sepp.Client) -> sepp.Worker:
    """The worker factory: ``sepp-anyio worker shop_jobs:make_worker``, and the examples."""
    worker = sepp.Worker(
        client,
        [QUEUE],
        lease=10.0,
        max_in_flight=32,
        auto_extend=True,  # slow photos keep their lease while they are resized
        drain_timeout=30.0,  # at shutdown, give running jobs 30 s, then retry them elsewhere
    )
    for job_type, handler in handlers.items():
        worker.handle(job_type, handler)
    return worker
