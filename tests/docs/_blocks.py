"""The code blocks of the documentation's pages, as the block test runs them.

A page's blocks are ``.. code-block:: LANGUAGE`` directives (a bare ``::`` literal block is
refused, so that every block says what it is and is checked as such). A Python block with
``:caption: NAME.py`` is also a file of that name, which the page's other blocks import; a
``text`` block right after a Python block is that block's expected standard output.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"

_DIRECTIVE = re.compile(r"^(?P<indent> *)\.\. code-block:: *(?P<language>\S+) *$")
_OPTION = re.compile(r"^ *:(?P<name>[\w-]+):(?: +(?P<value>.*))?$")


@dataclass
class Block:
    page: Path
    line: int  # 1-based line of the directive
    language: str
    options: dict[str, str]
    text: str
    output: Block | None = field(default=None, repr=False)

    @property
    def caption(self) -> str | None:
        return self.options.get("caption")

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def pages() -> list[Path]:
    """Every hand-written page of the documentation."""
    return sorted(p for p in DOCS.rglob("*.rst") if "_build" not in p.parts)


def blocks(page: Path) -> list[Block]:
    """The code blocks of ``page``, in order (each ``text`` block as the output of the
    Python block before it)."""
    lines = page.read_text().splitlines()
    found: list[Block] = []
    i = 0
    while i < len(lines):
        match = _DIRECTIVE.match(lines[i])
        if match is None:
            i += 1
            continue
        start, indent = i, len(match["indent"])
        i += 1
        options: dict[str, str] = {}
        while i < len(lines) and (option := _OPTION.match(lines[i])):
            options[option["name"]] = option["value"] or ""
            i += 1
        body: list[str] = []
        while i < len(lines) and (not lines[i].strip() or _indent_of(lines[i]) > indent):
            body.append(lines[i])
            i += 1
        text = _dedent(body)
        found.append(Block(page, start + 1, match["language"], options, text))
    result: list[Block] = []
    for block in found:
        if block.language == "text" and result and result[-1].language == "python":
            result[-1].output = block
            continue
        result.append(block)
    return result


def literal_blocks(page: Path) -> list[int]:
    """Lines of ``::`` literal blocks (refused: a block must name its language)."""
    out = []
    for number, line in enumerate(page.read_text().splitlines(), start=1):
        stripped = line.rstrip()
        if stripped.endswith("::") and not stripped.lstrip().startswith(".."):
            out.append(number)
    return out


def _indent_of(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


def _dedent(body: list[str]) -> str:
    while body and not body[-1].strip():
        body.pop()
    while body and not body[0].strip():
        body.pop(0)
    width = min((_indent_of(line) for line in body if line.strip()), default=0)
    return "\n".join(line[width:] for line in body) + "\n"
