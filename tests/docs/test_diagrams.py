"""The checked-in SVG diagrams are exactly what their generator writes."""

from __future__ import annotations

import importlib.util
import sys
import xml.etree.ElementTree as ET
from typing import Any

from tests.docs._blocks import DOCS

DIAGRAMS = DOCS / "diagrams"


def _generator() -> Any:
    spec = importlib.util.spec_from_file_location("diagrams", DIAGRAMS / "diagrams.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["diagrams"] = module  # dataclasses look their module up there
    try:
        spec.loader.exec_module(module)
    finally:
        del sys.modules["diagrams"]
    return module


def test_the_svg_files_are_regenerated_identically() -> None:
    generator = _generator()
    assert set(generator.DIAGRAMS) == {p.name for p in DIAGRAMS.glob("*.svg")}
    for name, make in generator.DIAGRAMS.items():
        assert (DIAGRAMS / name).read_text(encoding="utf-8") == make(), (
            f"{name} is stale: run python docs/diagrams/diagrams.py"
        )


def test_the_diagrams_are_well_formed_svg_used_by_the_pages() -> None:
    pages = "\n".join(p.read_text() for p in DOCS.rglob("*.rst"))
    for svg in DIAGRAMS.glob("*.svg"):
        root = ET.fromstring(svg.read_text(encoding="utf-8"))
        assert root.tag == "{http://www.w3.org/2000/svg}svg", svg
        assert root.find("{http://www.w3.org/2000/svg}title") is not None, svg
        assert f"/diagrams/{svg.name}" in pages, f"{svg.name} is not on any page"
