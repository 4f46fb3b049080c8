"""examples/otel_console.py runs on both backends and prints spans and metrics."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "otel_console.py"


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_console_example(backend: str) -> None:
    result = subprocess.run(
        [sys.executable, str(EXAMPLE), backend], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert '"name": "sepp.process"' in out
    assert '"name": "sepp.enqueue"' in out
    assert '"kind": "SpanKind.CONSUMER"' in out
    assert "sepp.jobs.processed" in out
    assert "[job=" in result.stderr
    assert "attempt=1] welcoming user" in result.stderr
