"""Shared fixtures of the reliability tests (every async test runs on asyncio and trio, with
real clocks: ``tests/conftest.py``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from sepp_anyio.server import ServerProcess

from ._servers import start_process


@pytest.fixture(scope="module")
def shared_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("reliability") / "sepp.sqlite3"


@pytest.fixture(scope="module")
def shared_server(shared_db: Path) -> Iterator[ServerProcess]:
    """A durable server (SQLite, dead letters kept) shared by a module; tests use their own
    queues, and the accounting reads only theirs."""
    server = start_process(shared_db)
    try:
        yield server
    finally:
        server.stop()
