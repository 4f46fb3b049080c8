"""``sepp-anyio worker`` tunes the garbage collector of the process it owns.

A busy worker spends a sixth to a fifth of its CPU in the cyclic garbage collector
(measured with py-spy for #31): every 700 new container objects start a young collection,
and every few of those an older one that walks everything the process imported and built
at start (the application, its libraries, the worker). So once startup is over, the
command moves what is alive into the permanent generation (``gc.freeze()``: never scanned
again, never freed) and starts young collections every :data:`GEN0_THRESHOLD` objects
instead of 700. Garbage is collected as before; only less often, and without rescanning
the startup heap.

The library itself changes no process-wide setting: an application that embeds a
:class:`~sepp_anyio.Worker` keeps its own collector settings. ``--no-gc-tuning`` keeps the
interpreter's. On leaving the block the previous settings come back (what was frozen is
unfrozen), so running the command in-process leaves no trace.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator
from typing import Final

__all__ = ["GEN0_THRESHOLD", "tuned_collector"]

#: Young collections start after this many new container objects (CPython's default: 700).
GEN0_THRESHOLD: Final = 10_000


@contextlib.contextmanager
def tuned_collector(enabled: bool) -> Iterator[None]:
    """Freeze the startup heap and raise the young generation's threshold, for the block."""
    if not enabled:
        yield
        return
    thresholds = gc.get_threshold()
    gc.collect()  # what startup left as garbage is freed, not frozen
    gc.freeze()
    gc.set_threshold(max(thresholds[0], GEN0_THRESHOLD), *thresholds[1:])
    try:
        yield
    finally:
        gc.set_threshold(*thresholds)
        gc.unfreeze()
