"""Fixtures of the command-line tests."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from sepp_anyio.server import ServerProcess

from ._util import retention_server


@pytest.fixture(scope="package")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """One reference server (memory, dead letters kept) for the command-line tests; each
    test uses queues of its own."""
    process = retention_server(tmp_path_factory.mktemp("cli-server"))
    process.start()
    try:
        yield process
    finally:
        process.stop()


@pytest.fixture
def queue() -> str:
    """A queue name unique to the test."""
    return f"cli-{uuid.uuid4().hex[:10]}"
