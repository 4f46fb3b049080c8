"""README.md stays true: CI runs its test command, its Python blocks compile, and its
command-line reference names every subcommand."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from sepp_anyio._cli import _COMMANDS

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()


def _blocks(language: str) -> list[str]:
    return re.findall(rf"^```{language}\n(.*?)^```", README, flags=re.DOTALL | re.MULTILINE)


def test_ci_runs_exactly_the_readme_test_command() -> None:
    ci = (ROOT / ".ci" / "run").read_text().strip().splitlines()[-1]
    assert ci in _blocks("sh")[1]
    assert ci == (
        'python3 -m venv .venv && .venv/bin/pip install -q -e ".[test]" '
        "&& .venv/bin/python -m pytest"
    )


def test_the_first_command_runs_the_demo() -> None:
    first = _blocks("sh")[0].strip()
    assert first.startswith("python3 -m venv .venv && .venv/bin/pip install")
    assert first.endswith(".venv/bin/sepp-anyio demo --backend trio")


@pytest.mark.parametrize("index", range(len(_blocks("python"))))
def test_python_blocks_compile(index: int) -> None:
    source = _blocks("python")[index]
    compile(source, f"README.md python block {index}", "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)


def test_the_command_line_reference_names_every_subcommand() -> None:
    section = README.split("## The command line", 1)[1].split("\n## ", 1)[0]
    for name in _COMMANDS:
        assert f"| `{name}" in section, name
