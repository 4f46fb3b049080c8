"""Every runtime requirement has a floor, and ``nox -s minimum_versions`` tests all of them.

The session takes its pins from tools/min_versions.py, which reads pyproject.toml;
these tests keep the two from drifting apart and make a requirement without a
testable floor (or an import of an undeclared distribution) fail the suite.
"""

from __future__ import annotations

import ast
import importlib.metadata
import importlib.util
import sys
import tomllib
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "src" / "sepp_anyio"


def _load_helper() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "_sepp_min_versions", ROOT / "tools" / "min_versions.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


mv = _load_helper()


def _pyproject() -> dict[str, Any]:
    with (ROOT / "pyproject.toml").open("rb") as file:
        return tomllib.load(file)


def _runtime_lines(pyproject: dict[str, Any]) -> list[str]:
    """Read independently of the helper: dependencies plus the runtime extras."""
    project = pyproject["project"]
    extras = project["optional-dependencies"]
    return [
        *project["dependencies"],
        *extras["trio"],
        *extras["otel"],
        *extras["pydantic"],
        *extras["msgspec"],
        *extras["reload"],
        *extras["ui"],
    ]


def _project(dependencies: list[str], extras: dict[str, list[str]] | None = None) -> dict[str, Any]:
    optional: dict[str, list[str]] = {
        "trio": ["trio>=0.27"],
        "otel": [],
        "pydantic": [],
        "msgspec": [],
        "reload": [],
        "ui": [],
        "codegen": [],
        "test": [],
        "dev": [],
    }
    optional.update(extras or {})
    return {
        "project": {
            "requires-python": ">=3.11",
            "dependencies": dependencies,
            "optional-dependencies": optional,
        }
    }


def test_every_runtime_requirement_is_pinned_at_its_floor() -> None:
    """One pin per runtime requirement of pyproject.toml, at the lowest version it allows."""
    pyproject = _pyproject()
    lines = _runtime_lines(pyproject)
    pins = {
        canonicalize_name(Requirement(line).name): Requirement(line).specifier
        for line in mv.constraints(pyproject)
    }
    assert set(pins) == {canonicalize_name(Requirement(line).name) for line in lines}
    for line in lines:
        requirement = Requirement(line)
        (pin,) = pins[canonicalize_name(requirement.name)]
        assert pin.operator == "=="
        version = Version(pin.version)
        # The pin is allowed, and every lower bound the requirement states is the pin
        # or below it: nothing lower than the pin is allowed.
        assert requirement.specifier.contains(version, prereleases=True), line
        lower = [
            Version(spec.version.removesuffix(".*"))
            for spec in requirement.specifier
            if spec.operator in (">=", "==", "~=", "===")
        ]
        assert lower and max(lower) == version, line


def test_the_session_takes_its_pins_and_python_from_the_helper() -> None:
    """``minimum_versions`` in noxfile.py installs the helper's constraints, not a list of
    its own, on the lowest Python pyproject.toml allows."""
    tree = ast.parse((ROOT / "noxfile.py").read_text())
    (session,) = [
        node
        for node in tree.body
        if isinstance(node, ast.FunctionDef) and node.name == "minimum_versions"
    ]
    calls = {ast.unparse(node.func) for node in ast.walk(session) if isinstance(node, ast.Call)}
    assert "min_versions.constraints" in calls
    assert "session.install" in calls
    (decorator,) = session.decorator_list
    assert "min_versions.python_floor" in ast.unparse(decorator)
    assert mv.python_floor(_pyproject()) == "3.11"


def test_every_extra_is_runtime_or_tooling() -> None:
    """A new extra must be classified, so its floors cannot escape the session unnoticed."""
    extras = set(_pyproject()["project"]["optional-dependencies"])
    assert extras == set(mv.RUNTIME_EXTRAS) | set(mv.TOOL_EXTRAS)
    with pytest.raises(mv.FloorError, match=r"\['uvloop'\] are in neither"):
        mv.runtime_requirements(_project([], {"uvloop": ["uvloop>=0.20"]}))


@pytest.mark.parametrize(
    ("requirement", "message"),
    [
        pytest.param("multidict", "has no lower bound", id="no-specifier"),
        pytest.param("h2<5", "has no lower bound", id="upper-bound-only"),
        pytest.param("h2>4.1", "'>' names no version", id="exclusive"),
        pytest.param("h2>=4.1,!=4.1", "lower bound 4.1 is excluded", id="excluded"),
    ],
)
def test_a_requirement_without_a_testable_floor_is_refused(requirement: str, message: str) -> None:
    """The session refuses to run rather than test something other than the floor."""
    with pytest.raises(mv.FloorError, match=message) as raised:
        mv.constraints(_project(["anyio>=4.10", requirement]))
    assert Requirement(requirement).name in str(raised.value)


def test_floors_of_each_specifier_form() -> None:
    """``>=``, ``~=``, ``==`` and ``==X.*`` each name their lowest version; an upper bound,
    extras and a second lower bound do not confuse it; markers are kept."""
    pyproject = _project(
        [
            "anyio[trio]>=4.10,<5",
            "betterproto2==0.10.0",
            "h2~=4.3",
            "hpack==4.1.*",
            "multidict>=6,>=6.1",
            "tomli>=2; python_version < '3.11'",
        ]
    )
    assert mv.constraints(pyproject) == [
        "anyio==4.10",
        "betterproto2==0.10.0",
        "h2==4.3",
        "hpack==4.1",
        "multidict==6.1",
        'tomli==2; python_version < "3.11"',
        "trio==0.27",
    ]


def test_two_floors_for_one_distribution_are_refused() -> None:
    """Only the higher of two floors could ever be installed: the lower one is untested."""
    pyproject = _project(["trio>=0.26"])
    with pytest.raises(mv.FloorError, match="different floors for trio"):
        mv.floors(pyproject)
    assert mv.floors(_project(["trio>=0.27,<1"])) == {"trio": Version("0.27")}


def test_verify_compares_the_installed_versions() -> None:
    """``--verify`` passes only when every pinned distribution is installed at its pin."""
    pytest_version = importlib.metadata.version("pytest")
    assert (
        mv.verify([f"pytest=={pytest_version}", "", "nope-not-here==1; python_version < '3'"]) == []
    )
    (wrong,) = mv.verify(["pytest==0.0.1"])
    assert wrong == f"pytest: {pytest_version} installed, expected ==0.0.1"
    (missing,) = mv.verify(["no-such-distribution-sepp==1.0"])
    assert "not installed" in missing


# Imported by src/ but not runtime requirements, and why.
_NOT_RUNTIME = {
    # Only sepp_anyio.testing.pytest_plugin imports it, and only pytest loads that.
    "pytest": "loaded only by pytest, through the pytest11 entry point",
    # Imported only under TYPE_CHECKING (PEP 696 TypeVar defaults of JobCtx and Worker);
    # type checkers resolve it from their bundled typeshed stubs, installed or not.
    "typing_extensions": "imported only by type checkers (if TYPE_CHECKING)",
}
# Neither the client nor the server imports h2 or hyperframe any more: both run on our own
# HTTP/2 core (issues 15 and 16). They stay test dependencies (oracle and scripted peers).
_NOT_IMPORTED = ("h2", "hyperframe")
# The generated code imports betterproto2's own runtime requirements.
_GENERATED = SRC / "_proto"


def _third_party_imports() -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for path in SRC.rglob("*.py"):
        if _GENERATED in path.parents:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                top = name.partition(".")[0]
                if top not in sys.stdlib_module_names and top != "sepp_anyio":
                    found.setdefault(top, set()).add(str(path.relative_to(ROOT)))
    return found


def test_every_imported_distribution_is_a_runtime_requirement() -> None:
    """What src/ imports is declared (so its floor is tested), not borrowed from a
    dependency's dependencies."""
    declared = set(mv.floors(_pyproject()))
    providers = importlib.metadata.packages_distributions()
    imports = _third_party_imports()
    assert {"anyio", "grpclib", "hpack"} <= set(imports)
    for module in _NOT_IMPORTED:
        assert module not in imports, f"{module} imported by {sorted(imports[module])}"
    undeclared = {}
    for module, paths in imports.items():
        if module in _NOT_RUNTIME:
            continue
        distributions = {canonicalize_name(name) for name in providers.get(module, [])}
        if not distributions & declared:
            undeclared[module] = sorted(paths)
    assert not undeclared, f"imported but not runtime requirements: {undeclared}"
