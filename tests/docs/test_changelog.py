"""CHANGELOG.rst keeps its shape: an Unreleased section first, then releases newest first,
the newest being the package's version."""

from __future__ import annotations

import re

from packaging.version import Version

import sepp_anyio
from tests.docs._blocks import DOCS, ROOT

HEADING = re.compile(r"^(?P<title>[^\n]+)\n-+\n", re.MULTILINE)


def _sections() -> list[str]:
    return [m["title"] for m in HEADING.finditer((ROOT / "CHANGELOG.rst").read_text())]


def test_unreleased_comes_first_then_the_releases_newest_first() -> None:
    sections = _sections()
    assert sections[0] == "Unreleased"
    versions = [Version(title.split()[0]) for title in sections[1:]]
    assert versions, sections
    assert versions == sorted(versions, reverse=True)
    assert versions[0] == Version(sepp_anyio.__version__)


def test_every_section_has_entries() -> None:
    text = (ROOT / "CHANGELOG.rst").read_text()
    bodies = HEADING.split(text)[2::2]
    assert bodies and all(re.search(r"^- \S", body, re.MULTILINE) for body in bodies)


def test_the_docs_include_it() -> None:
    assert ".. include:: ../CHANGELOG.rst" in (DOCS / "changelog.rst").read_text()
