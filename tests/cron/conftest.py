from __future__ import annotations

from typing import Any

import pytest
import trio.testing

from ..worker._vtime import VirtualTimeLoop


@pytest.fixture(
    params=[
        pytest.param("asyncio", id="asyncio-vtime"),
        pytest.param("trio", id="trio-mockclock"),
    ]
)
def anyio_backend(request: pytest.FixtureRequest) -> tuple[str, dict[str, Any]]:
    """Cron tests run on both backends on virtual time (as the worker tests do): hours of
    schedule take microseconds, and every run sees the same order of events."""
    if request.param == "trio":
        return "trio", {"clock": trio.testing.MockClock(autojump_threshold=0)}
    return "asyncio", {"loop_factory": VirtualTimeLoop}
