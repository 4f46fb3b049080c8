"""The package's import graph: no cycles, and every import follows the layering rule.

The rule is the one stated at the top of ``sepp_anyio/__init__.py``; :data:`TIERS` is its
machine-readable form. Every module under ``src/sepp_anyio`` (``_proto/`` excepted: it is
generated and imports nothing of ours) is parsed with :mod:`ast`, and each ``import`` of a
``sepp_anyio`` module becomes an edge, wherever it is written:

* imports under ``if TYPE_CHECKING:`` count for the layering (a type a lower tier names is
  still knowledge of a higher one) but not for cycles (they never run);
* imports inside functions count for both: a lazy import is how a cycle hides, and it is
  still a cycle in the design.
"""

from __future__ import annotations

import ast
import dataclasses
from collections import defaultdict
from collections.abc import Iterable, Mapping
from pathlib import Path

import pytest

import sepp_anyio

SRC = Path(sepp_anyio.__file__).parent
PACKAGE = "sepp_anyio"

#: The tiers, lowest first, by top-level name under ``sepp_anyio`` (``__init__`` is the
#: package itself). A module may import its own tier and lower ones only.
TIERS: list[frozenset[str]] = [
    # Leaves: import nothing of the package (``_otel`` only the version string).
    frozenset({"_version", "_proto", "_bucket", "_http2", "_otel", "_io"}),
    # The public data model: types, errors, rejections, limits, codecs, checks.
    frozenset({"_model"}),
    # Plain helpers on the model: the logging context, the public <-> protobuf mapping,
    # and gRPC's wire rules (sans-IO, both roles).
    frozenset({"_logcontext", "_wire", "_grpc"}),
    # gRPC over HTTP/2 under the client; the reference server.
    frozenset({"_transport", "server"}),
    # The client package: its calls, the connection helper, the retry rule.
    frozenset({"_client"}),
    # What is built on the client alone: typed tasks, crons, health probes and metrics.
    frozenset({"_tasks", "_cron", "_health"}),
    # The worker package: the facade, lanes, leases, lifespan, middleware, outcomes.
    frozenset({"_worker"}),
    # The command line (``sepp-anyio worker|cron|...``), on top of the worker.
    frozenset({"_cli"}),
    # The public faces: the package itself, ``python -m sepp_anyio``, test support.
    frozenset({"__init__", "__main__", "testing"}),
]

#: Parts with a narrower rule than their tier's: the only targets (top-level names, or
#: exact module names) they may import besides themselves.
ONLY: Mapping[str, frozenset[str]] = {
    "_http2": frozenset({"_bucket"}),
    "_bucket": frozenset(),
    "_io": frozenset(),
    "_proto": frozenset(),
    "_otel": frozenset({"_version"}),
    "_logcontext": frozenset({"_model"}),
    "_grpc": frozenset({"_model"}),
    "server": frozenset(
        {
            "_model",
            "_grpc",
            "_wire",
            "_proto",
            "_http2",
            "_io",
            "_version",
        }
    ),
}


#: Entry points: modules run as programs (``python -m ...``) and imported by nothing in the
#: package, so an import from them cannot invert the layering of what imports it. The
#: server's command line lives in ``_cli._server`` to share ``_cli._common``'s helpers,
#: while ``python -m sepp_anyio.server`` must keep running it from ``server/``.
ENTRY_POINTS: frozenset[str] = frozenset({f"{PACKAGE}.server.__main__"})


@dataclasses.dataclass(frozen=True)
class Edge:
    source: str
    target: str
    line: int
    type_only: bool


def _modules(root: Path) -> dict[str, Path]:
    modules: dict[str, Path] = {}
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        if "_proto" in parts:
            continue
        if parts[-1] == "__init__":
            parts.pop()
        modules[".".join(parts)] = path
    return modules


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _edges(name: str, path: Path, known: Iterable[str]) -> list[Edge]:
    known = set(known)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: list[Edge] = []

    def add(target: str, node: ast.stmt, type_only: bool) -> None:
        if target == PACKAGE or target.startswith(PACKAGE + "."):
            found.append(Edge(name, target, node.lineno, type_only))

    def walk(nodes: Iterable[ast.AST], type_only: bool) -> None:
        for node in nodes:
            if isinstance(node, ast.If) and _is_type_checking(node.test):
                walk(node.body, True)
                walk(node.orelse, type_only)
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    add(alias.name, node, type_only)
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")[: len(package.split(".")) - node.level + 1]
                    module = ".".join([*base, node.module] if node.module else base)
                else:
                    module = node.module or ""
                for alias in node.names:
                    # ``from . import x`` names a submodule when there is one.
                    sub = f"{module}.{alias.name}"
                    add(sub if sub in known else module, node, type_only)
            else:
                walk(ast.iter_child_nodes(node), type_only)

    walk(ast.parse(path.read_text(encoding="utf-8"), str(path)).body, False)
    return found


def _graph() -> list[Edge]:
    modules = _modules(SRC)
    return [edge for name, path in modules.items() for edge in _edges(name, path, modules)]


def _part(module: str) -> str:
    """The top-level name under the package (``__init__`` for the package itself)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _tier(part: str) -> int:
    for index, tier in enumerate(TIERS):
        if part in tier:
            return index
    raise AssertionError(f"{PACKAGE}.{part} is in no tier: add it to TIERS (and to the rule)")


def layering_violations(edges: Iterable[Edge]) -> list[str]:
    """Every edge against the rule, as ``source:line -> target (why)``."""
    problems: list[str] = []
    for edge in edges:
        source, target = _part(edge.source), _part(edge.target)
        if source == target or edge.source in ENTRY_POINTS:
            continue
        where = f"{edge.source}:{edge.line} -> {edge.target}"
        only = ONLY.get(source)
        if only is not None and target not in only and edge.target not in only:
            problems.append(f"{where} ({source} may import only {sorted(only)})")
        elif _tier(target) > _tier(source):
            problems.append(f"{where} (tier {_tier(source)} imports tier {_tier(target)})")
    return problems


def cycles(edges: Iterable[Edge]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), sorted."""
    graph: dict[str, set[str]] = defaultdict(set)
    for edge in edges:
        if not edge.type_only and edge.source != edge.target:
            graph[edge.source].add(edge.target)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for successor in sorted(graph[node]):
            if successor not in index:
                visit(successor)
                low[node] = min(low[node], low[successor])
            elif successor in on_stack:
                low[node] = min(low[node], index[successor])
        if low[node] == index[node]:
            component: list[str] = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                components.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(components)


def test_the_parser_sees_the_imports() -> None:
    edges = _graph()
    runtime = {(e.source, e.target) for e in edges if not e.type_only}
    # A plain relative import, one from a parent package, and a lazy one in a function.
    assert ("sepp_anyio._transport._channel", "sepp_anyio._transport._stream") in runtime
    assert ("sepp_anyio._client._connect", "sepp_anyio._transport") in runtime
    assert ("sepp_anyio._cli", "sepp_anyio._cli._worker") in runtime
    assert any(e.type_only for e in edges)
    assert len(edges) > 300


def test_no_import_cycles() -> None:
    found = cycles(_graph())
    assert not found, "import cycles:\n" + "\n".join(" <-> ".join(c) for c in found)


def test_every_import_follows_the_layering() -> None:
    problems = layering_violations(_graph())
    assert not problems, "imports against the layering rule:\n" + "\n".join(problems)


@pytest.mark.parametrize(
    ("lower", "higher"),
    [
        ("_client", "_worker"),
        ("_client", "_cron"),
        ("_client", "_cli"),
        ("_tasks", "_worker"),
        ("_worker", "_cli"),
        ("_client", "_tasks"),
    ],
)
def test_the_direction_between_the_packages(lower: str, higher: str) -> None:
    """``_cli`` above ``_worker`` above ``_client``: the lower never imports the higher."""
    assert _tier(lower) < _tier(higher)
    edges = [e for e in _graph() if _part(e.source) == lower and _part(e.target) == higher]
    assert edges == []
    (problem,) = layering_violations([Edge(f"{PACKAGE}.{lower}", f"{PACKAGE}.{higher}", 1, True)])
    assert "imports tier" in problem


def test_every_part_has_a_tier() -> None:
    for name in _modules(SRC):
        _tier(_part(name))
    assert _tier("_proto") == 0


@pytest.mark.parametrize(
    ("source", "target", "type_only", "expected"),
    [
        ("sepp_anyio._model._job", "sepp_anyio._client", False, "tier 1 imports tier 4"),
        ("sepp_anyio._model._job", "sepp_anyio._client", True, "tier 1 imports tier 4"),
        ("sepp_anyio._client", "sepp_anyio._worker._facade", True, "tier 4 imports tier 6"),
        ("sepp_anyio._tasks._task", "sepp_anyio._worker", False, "tier 5 imports tier 6"),
        ("sepp_anyio._worker._lane", "sepp_anyio._cli._worker", False, "tier 6 imports tier 7"),
        ("sepp_anyio._cron._run", "sepp_anyio._worker", False, "tier 5 imports tier 6"),
        ("sepp_anyio._http2._stream", "sepp_anyio._version", False, "may import only ['_bucket']"),
        ("sepp_anyio._otel", "sepp_anyio._model._job", True, "may import only"),
        ("sepp_anyio.server._engine._engine", "sepp_anyio._transport._stream", False, "may import"),
        ("sepp_anyio.server._engine._engine", "sepp_anyio._client", False, "may import only"),
        ("sepp_anyio.server._network._call", "sepp_anyio._transport._framing", False, "may import"),
        ("sepp_anyio.server._process", "sepp_anyio._cli._server", False, "may import only"),
    ],
)
def test_the_rule_catches(source: str, target: str, type_only: bool, expected: str) -> None:
    (problem,) = layering_violations([Edge(source, target, 1, type_only)])
    assert expected in problem


def test_the_rule_allows() -> None:
    allowed = [
        Edge("sepp_anyio._client", "sepp_anyio._model._job", 1, False),
        Edge("sepp_anyio.server._network._call", "sepp_anyio._grpc._framing", 1, False),
        Edge("sepp_anyio.testing._in_memory", "sepp_anyio.server", 1, False),
        Edge("sepp_anyio.server.__main__", "sepp_anyio._cli._server", 1, False),
        Edge("sepp_anyio._model._job", "sepp_anyio._otel", 1, False),
    ]
    assert layering_violations(allowed) == []


def test_cycle_detection() -> None:
    a, b, c = "sepp_anyio.a", "sepp_anyio.b", "sepp_anyio.c"
    ring = [Edge(a, b, 1, False), Edge(b, c, 1, False), Edge(c, a, 1, False)]
    assert cycles(ring) == [[a, b, c]]
    # A type-only edge closes no cycle at run time.
    assert cycles([*ring[:2], Edge(c, a, 1, True)]) == []


#: The hand-written modules that may import grpclib: the adapter that presents our channel
#: to the generated stubs (the stubs themselves, under ``_proto``, are not parsed here).
GRPCLIB_ADAPTERS = frozenset({f"{PACKAGE}._transport._channel"})


def test_grpclib_is_imported_only_by_the_stubs_adapter() -> None:
    """grpclib is the generated stubs' language, not ours: every other module speaks
    ``_grpc`` (``GrpcError``, ``StatusCode``)."""
    importers: set[str] = set()
    for name, path in _modules(SRC).items():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                targets = [node.module]
            else:
                continue
            if any(t == "grpclib" or t.startswith("grpclib.") for t in targets):
                importers.add(name)
    assert importers == GRPCLIB_ADAPTERS
