"""The same worker under plain asyncio: runs until Ctrl-C or SIGTERM, then drains, exits 0.

::

    python examples/asyncio_worker.py    # the server: $SEPP_ADDR, default 127.0.0.1:50051

Nothing here is anyio-specific: ``asyncio.run``, the loop's own signal handlers, and
``await worker.run()``, which returns once a shutdown has drained the jobs in flight.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal

import sepp_anyio as sepp
from shop_jobs import make_worker

logger = logging.getLogger("shop.worker")


async def main() -> None:
    address = os.environ.get("SEPP_ADDR", "127.0.0.1:50051")
    async with sepp.connect(address) as client:
        worker = make_worker(client)
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, worker.shutdown)  # stop reserving, then drain
        logger.info("ready: reserving from %s on asyncio", address)
        await worker.run()
    logger.info("stopped: %s", worker.statistics())


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    asyncio.run(main())
