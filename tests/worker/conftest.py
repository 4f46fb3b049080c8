from __future__ import annotations

from typing import Any

import pytest
import trio.testing

from ._vtime import VirtualTimeLoop


@pytest.fixture(
    params=[
        pytest.param(("asyncio", {"loop_factory": VirtualTimeLoop}), id="asyncio-vtime"),
        pytest.param(
            ("trio", {"clock": trio.testing.MockClock(autojump_threshold=0)}),
            id="trio-mockclock",
        ),
    ]
)
def anyio_backend(request: pytest.FixtureRequest) -> tuple[str, dict[str, Any]]:
    """Worker tests run on both backends on virtual time.

    trio: ``MockClock(autojump_threshold=0)``; asyncio: :class:`VirtualTimeLoop`, its
    equivalent. With the in-process server, lease expiry, retry delays and the worker's own
    timers take no real time, and every run sees the same order of events. (The network
    tests override this with real clocks.)
    """
    backend, options = request.param
    if backend == "trio":
        # A fresh clock per test: a MockClock keeps its time across runs.
        options = {"clock": trio.testing.MockClock(autojump_threshold=0)}
    return backend, options
