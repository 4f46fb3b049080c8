"""The lowest version of every runtime requirement, read from ``pyproject.toml``.

``nox -s minimum_versions`` installs the package with these versions as pip
constraints (the test tools float) and runs the suite, so every declared floor
is one that has been tested. Everything is read from ``pyproject.toml`` on each
run: a requirement added there is tested at its floor without touching this file,
and one without a floor is refused (tests/test_min_versions.py keeps that true).

Runtime requirements are ``[project] dependencies`` plus the extras named in
:data:`RUNTIME_EXTRAS`; every other extra must be named in :data:`TOOL_EXTRAS`,
so that a new extra cannot slip past untested.

Usage (the nox session does both)::

    python tools/min_versions.py                 # print the constraints, one a line
    python tools/min_versions.py --verify FILE   # fail unless the running
                                                 # interpreter has exactly those versions
"""

from __future__ import annotations

import argparse
import importlib.metadata
import sys
import tomllib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import Version

__all__ = [
    "PYPROJECT",
    "RUNTIME_EXTRAS",
    "TOOL_EXTRAS",
    "FloorError",
    "constraints",
    "floor",
    "floors",
    "load",
    "python_floor",
    "runtime_requirements",
    "verify",
]

PYPROJECT = Path(__file__).resolve().parent.parent / "pyproject.toml"

# Extras a user installs to run the library: their floors are promises too.
RUNTIME_EXTRAS = ("trio", "otel", "pydantic", "msgspec", "reload", "ui")
# Extras for developing it (exact pins or "recent enough"): not part of the promise.
TOOL_EXTRAS = ("codegen", "test", "dev", "docs", "release")


class FloorError(ValueError):
    """A runtime requirement whose lowest allowed version cannot be named and tested."""


def load(path: Path = PYPROJECT) -> dict[str, Any]:
    """The parsed ``pyproject.toml`` at ``path``."""
    with path.open("rb") as file:
        return tomllib.load(file)


def runtime_requirements(pyproject: Mapping[str, Any]) -> list[Requirement]:
    """``[project] dependencies`` and the requirements of :data:`RUNTIME_EXTRAS`, in order.

    Raises:
        FloorError: an extra is neither a runtime nor a tool extra, or a runtime
            extra is missing.
    """
    project = pyproject["project"]
    extras: Mapping[str, Sequence[str]] = project.get("optional-dependencies", {})
    unknown = sorted(set(extras) - set(RUNTIME_EXTRAS) - set(TOOL_EXTRAS))
    if unknown:
        raise FloorError(
            f"extras {unknown} are in neither RUNTIME_EXTRAS nor TOOL_EXTRAS of "
            "tools/min_versions.py: say whether their floors are promised to users"
        )
    missing = sorted(set(RUNTIME_EXTRAS) - set(extras))
    if missing:
        raise FloorError(f"runtime extras {missing} are not in pyproject.toml")
    lines = [*project.get("dependencies", [])]
    for extra in RUNTIME_EXTRAS:
        lines += extras[extra]
    return [Requirement(line) for line in lines]


def _lower_bound(specifiers: SpecifierSet, name: str) -> Version:
    bounds: list[Version] = []
    for spec in specifiers:
        if spec.operator in (">=", "~=", "==="):
            bounds.append(Version(spec.version))
        elif spec.operator == "==":
            # ``==1.2.*`` allows 1.2 and up within 1.2.
            bounds.append(Version(spec.version.removesuffix(".*")))
        elif spec.operator == ">":
            raise FloorError(
                f"{name}{specifiers}: '>' names no version to test; write '>=' with the "
                "lowest version that works"
            )
    if not bounds:
        raise FloorError(
            f"{name}{specifiers} has no lower bound: declare the lowest version that "
            "works ('>='), so that it is tested"
        )
    return max(bounds)


def floor(requirement: Requirement) -> Version:
    """The lowest version ``requirement`` allows.

    Raises:
        FloorError: it has no lower bound, only an exclusive one (``>``), or its
            lower bound is itself excluded (``>=2,!=2.0``).
    """
    lowest = _lower_bound(requirement.specifier, requirement.name)
    if not requirement.specifier.contains(lowest, prereleases=True):
        raise FloorError(
            f"{requirement}: its lower bound {lowest} is excluded; declare the lowest "
            "version it allows"
        )
    return lowest


def floors(pyproject: Mapping[str, Any]) -> dict[str, Version]:
    """The floor of every runtime requirement, by canonical distribution name.

    Raises:
        FloorError: as :func:`floor` and :func:`runtime_requirements`, or one
            distribution is required twice with different floors (one of them
            would never be tested).
    """
    found: dict[str, tuple[Version, Requirement]] = {}
    for requirement in runtime_requirements(pyproject):
        name = canonicalize_name(requirement.name)
        lowest = floor(requirement)
        if name in found and found[name][0] != lowest:
            raise FloorError(
                f"{found[name][1]} and {requirement} declare different floors for "
                f"{name}: declare one"
            )
        found[name] = (lowest, requirement)
    return {name: lowest for name, (lowest, _) in found.items()}


def constraints(pyproject: Mapping[str, Any]) -> list[str]:
    """pip constraint lines pinning every runtime requirement to its floor.

    A requirement's environment marker is kept, so a requirement for another
    platform or Python does not become a pin here.
    """
    markers: dict[str, str] = {}
    for requirement in runtime_requirements(pyproject):
        if requirement.marker is not None:
            markers[canonicalize_name(requirement.name)] = f"; {requirement.marker}"
    return [
        f"{name}=={version}{markers.get(name, '')}" for name, version in floors(pyproject).items()
    ]


def python_floor(pyproject: Mapping[str, Any]) -> str:
    """The lowest Python ``requires-python`` allows, as ``"3.11"``.

    Raises:
        FloorError: ``requires-python`` has no lower bound.
    """
    lowest = _lower_bound(SpecifierSet(pyproject["project"]["requires-python"]), "python")
    return f"{lowest.major}.{lowest.minor}"


def verify(lines: Sequence[str]) -> list[str]:
    """The constraint lines the running interpreter's installed versions break.

    Each line is ``name==version`` with an optional marker; a line whose marker
    does not hold here is skipped, as pip skips it.
    """
    wrong = []
    for line in lines:
        if not line.strip():
            continue
        requirement = Requirement(line)
        if requirement.marker is not None and not requirement.marker.evaluate():
            continue
        try:
            installed = importlib.metadata.version(requirement.name)
        except importlib.metadata.PackageNotFoundError:
            wrong.append(f"{requirement.name}: not installed, expected {requirement.specifier}")
            continue
        if Version(installed) not in requirement.specifier:
            wrong.append(
                f"{requirement.name}: {installed} installed, expected {requirement.specifier}"
            )
    return wrong


def main(argv: Sequence[str] | None = None) -> int:
    """Print the constraints of ``pyproject.toml``, or ``--verify`` a constraints file."""
    parser = argparse.ArgumentParser(
        description="The lowest version of every runtime requirement in pyproject.toml."
    )
    parser.add_argument("--pyproject", type=Path, default=PYPROJECT)
    parser.add_argument("--verify", type=Path, metavar="FILE")
    args = parser.parse_args(argv)
    if args.verify is None:
        print("\n".join(constraints(load(args.pyproject))))
        return 0
    lines = args.verify.read_text().splitlines()
    wrong = verify(lines)
    for problem in wrong:
        print(f"minimum versions: {problem}", file=sys.stderr)
    if not wrong:
        print("minimum versions installed: " + ", ".join(line for line in lines if line))
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
