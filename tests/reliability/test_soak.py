"""The soak of ``benchmarks/soak.py``, short: the same script, with fewer jobs.

Two worker processes (asyncio and trio) against one network server, 20 % of handlers
failing with random ``HandlerError`` kinds, 2 % hanging past ``job_timeout``, some losing
their lease, and one worker stopped with SIGSTOP for longer than a lease mid-run.  The
script's own accounting decides (exit status 0).  The memory check needs a long run, so it
is the long soak's job (``python benchmarks/soak.py``).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(os.name != "posix", reason="SIGSTOP, /proc")


def test_short_soak(tmp_path: Path) -> None:
    command = [
        sys.executable,
        str(ROOT / "benchmarks" / "soak.py"),
        "--jobs", "1500",
        "--workers", "2",
        "--lease", "1.5",
        "--job-timeout", "0.5",
        "--pause-every", "2",
        "--report-every", "1",
        "--no-check-rss",
        "--timeout", "50",
        "--workdir", str(tmp_path),
    ]  # fmt: skip
    result = subprocess.run(command, capture_output=True, text=True, timeout=55, check=False)
    print(result.stdout)
    assert result.returncode == 0, result.stdout + result.stderr[-5000:]
    assert "soak: OK" in result.stdout
    assert "violations 0" in result.stdout
