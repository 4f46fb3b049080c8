"""The objects a call and a job leave for the garbage collector, bounded.

CPython runs a young-generation collection each time the count of container objects
allocated minus those freed passes a threshold (700 by default): what a call or a job
allocates and frees again (its frames, its messages, its events) costs only the allocation,
while what outlives it, or is freed only by a collection (a reference cycle: an exception
kept with its traceback, a closure that refers to itself, a task that holds its own
future), is what makes collections run. That net count, read from ``gc.get_count()`` with
the collector off, is the figure these tests bound, on both backends, against the reference
server in its own process, counted in a child process of their own
(``_alloc_child``): the count is the whole interpreter's, and in the test process other
tests' server threads, loggers and tracer providers allocate too.

Measured when the bounds were set (2026-12-03): an ``enqueue`` call leaves 0.28 objects on
asyncio and 0.97 on trio; a job through the worker (its share of a reserve, the handler,
the ack) 0.20 and 0.44. Before that day a job left 3.2 and 3.4: its ``JobCtx`` and the
client's lease behind it referred to each other, a cycle per job that only a collection
could free. A reference cycle made per call or per job adds two objects or more to each,
and fails these tests.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from sepp_anyio.testing import ServerProcess

#: Objects a unary call may leave behind for the collector, on average.
MAX_OBJECTS_PER_CALL = 2.0
#: Objects a job (its share of a reserve, the handler, the ack) may leave behind, on
#: average.
MAX_OBJECTS_PER_JOB = 1.0
_ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def server() -> Iterator[ServerProcess]:
    with ServerProcess("--memory", "--port", "0", "--log-level", "WARNING") as running:
        yield running


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_calls_and_jobs_leave_few_objects(server: ServerProcess, backend: str) -> None:
    child = subprocess.run(
        [sys.executable, "-m", "tests.reliability._alloc_child", server.address, backend],
        cwd=_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert child.returncode == 0, child.stderr
    counts = json.loads(child.stdout)
    assert counts["per_call"] <= MAX_OBJECTS_PER_CALL, counts
    assert counts["per_job"] <= MAX_OBJECTS_PER_JOB, counts
