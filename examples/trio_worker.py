"""The shop's worker under trio: runs until Ctrl-C or SIGTERM, then drains and exits 0.

::

    python examples/trio_worker.py       # the server: $SEPP_ADDR, default 127.0.0.1:50051

The first signal stops reserving and lets the jobs in flight finish (their leases are still
extended); a second one cancels them. The Worker is an ordinary trio citizen here: it runs
in a nursery, ``nursery.start`` returns once it is reserving, and nothing outlives the
``async with``.
"""

from __future__ import annotations

import logging
import os
import signal

import trio

import sepp_anyio as sepp
from shop_jobs import make_worker

logger = logging.getLogger("shop.worker")


async def main() -> None:
    address = os.environ.get("SEPP_ADDR", "127.0.0.1:50051")
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with sepp.connect(address) as client, trio.open_nursery() as nursery:
            worker = make_worker(client)

            async def run_worker(*, task_status: trio.TaskStatus[None]) -> None:
                await worker.run(task_status=task_status)
                nursery.cancel_scope.cancel()  # drained: stop listening for signals

            await nursery.start(run_worker)
            logger.info("ready: reserving from %s on trio", address)
            async for signum in signals:
                if worker.shutdown_handle().is_shutdown:
                    logger.warning("second signal: cancelling the jobs still running")
                    nursery.cancel_scope.cancel()
                    break
                logger.info("%s: draining (send it again to cancel)", signal.Signals(signum).name)
                worker.shutdown()
    logger.info("stopped: %s", worker.statistics())


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    trio.run(main)
