from __future__ import annotations

import pytest


@pytest.fixture(
    params=[
        pytest.param("asyncio", id="asyncio"),
        pytest.param("trio", id="trio"),
    ]
)
def anyio_backend(request: pytest.FixtureRequest) -> str:
    """Every async test runs once on asyncio and once on trio."""
    return str(request.param)
