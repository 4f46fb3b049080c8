"""A batch handler: thumbnails rendered many at a time, each job settled on its own.

::

    python examples/batch_handler.py    # the server: $SEPP_ADDR, default 127.0.0.1:50051

It enqueues twelve typed ``make_thumbnail`` jobs to the queue ``shop``, then runs a worker
whose batch handler gets up to five of them per call (waiting at most 50 ms for a batch to
fill). Each item is decided on its own: a photo too large is dead-lettered, the others are
acked when the handler returns. ``run(until_idle=True)`` stops once every ready job is done.
"""

from __future__ import annotations

import os

import anyio
import pydantic

import sepp_anyio as sepp


class Thumbnail(pydantic.BaseModel):
    photo: int
    width: int


make_thumbnail = sepp.Task("shop", "make_thumbnail", Thumbnail)


def render_all(thumbnails: list[Thumbnail]) -> None:
    """Stands in for one call that does many at once (one GPU call, one bulk insert)."""


async def main() -> None:
    address = os.environ.get("SEPP_ADDR", "127.0.0.1:50051")
    async with sepp.connect(address) as client:
        for photo in range(1, 13):
            width = 99_999 if photo == 7 else 128
            await make_thumbnail.enqueue(client, Thumbnail(photo=photo, width=width))

        worker = sepp.Worker(client, ["shop"])

        @worker.batch(make_thumbnail, max_size=5, max_wait=0.05)
        async def thumbnails(jobs: list[sepp.BatchItem[Thumbnail]], ctx: sepp.BatchCtx) -> None:
            good = []
            for item in jobs:
                if item.value.width > 4096:
                    item.dead_letter(f"photo {item.value.photo}: width {item.value.width} > 4096")
                else:
                    good.append(item.value)  # acked when the handler returns
            render_all(good)
            print(f"batch of {ctx.size}: rendered {len(good)}")

        await worker.run(until_idle=True)
        stats = worker.statistics()
        print(f"acked={stats.processed}, dead-lettered={stats.nacked_dead_letter}")


if __name__ == "__main__":
    anyio.run(main)
