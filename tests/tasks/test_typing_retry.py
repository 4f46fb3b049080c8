"""``mypy --strict`` checks the retry-policy and expiry API (``typed_retry_example.py``):
the file passes as it is, and a copy without its ``# type: ignore[code]`` comments fails on
exactly those lines with those codes (the method of ``test_typing.py``)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).with_name("typed_retry_example.py")
ROOT = Path(__file__).resolve().parents[2]
IGNORE = re.compile(r"  # type: ignore\[(?P<code>[a-z-]+)\]")
ERROR = re.compile(r"^(?P<file>[^:]+):(?P<line>\d+): error: .*\[(?P<code>[a-z-]+)\]$")


@pytest.mark.slow
def test_mypy_checks_retry_policies_and_expiry(tmp_path: Path) -> None:
    expected: set[tuple[int, str]] = set()
    lines: list[str] = []
    for number, line in enumerate(EXAMPLE.read_text().splitlines(), start=1):
        match = IGNORE.search(line)
        if match is not None:
            expected.add((number, match["code"]))
            line = line[: match.start()] + line[match.end() :]
        lines.append(line)
    assert len(expected) >= 6
    stripped = tmp_path / "stripped_retry_example.py"
    stripped.write_text("\n".join(lines) + "\n")
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--config-file",
            str(ROOT / "pyproject.toml"),
            "--cache-dir",
            str(tmp_path / "mypy-cache"),
            "--no-error-summary",
            str(EXAMPLE),
            str(stripped),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.stderr == ""
    errors: dict[str, set[tuple[int, str]]] = {}
    for line in result.stdout.splitlines():
        match = ERROR.match(line)
        if match is not None:
            errors.setdefault(Path(match["file"]).name, set()).add(
                (int(match["line"]), match["code"])
            )
    assert EXAMPLE.name not in errors, result.stdout
    assert errors.get(stripped.name) == expected, result.stdout
