"""The public surface never exposes generated, betterproto2 or grpclib types.

Checked for ``sepp_anyio``, ``sepp_anyio.server`` and ``sepp_anyio.testing``: every name of
their ``__all__``, and of each public class every public method, property, class-level
annotation (a dataclass's fields) and base class.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import inspect
import sys
import types
import typing
from collections.abc import Iterator
from typing import Any

import pytest

import sepp_anyio
import sepp_anyio.server
import sepp_anyio.testing
from sepp_anyio._proto.sepp import v1 as pb

FORBIDDEN = ("sepp_anyio._proto", "betterproto2", "grpclib", "google.protobuf", "multidict")

PUBLIC_PACKAGES = (sepp_anyio, sepp_anyio.server, sepp_anyio.testing)


def _namespaces(obj: object) -> list[dict[str, Any]]:
    """The globals an annotation of ``obj`` may be written against.

    A public name's ``__module__`` is rewritten to its package's (see the packages'
    ``__init__``), so ``sys.modules[obj.__module__]`` is not where its annotations were
    written: the functions defined in it carry the real globals, and every loaded module
    that holds the object is tried after them.
    """
    found: list[dict[str, Any]] = []
    functions: list[object] = [obj]
    if inspect.isclass(obj):
        functions = [_unwrap(member) for member in vars(obj).values()]
    for function in functions:
        namespace = getattr(function, "__globals__", None)
        if isinstance(namespace, dict) and namespace not in found:
            found.append(namespace)
    name = getattr(obj, "__name__", None)
    for module in list(sys.modules.values()):
        namespace = getattr(module, "__dict__", None)
        if (
            isinstance(namespace, dict)
            and name is not None
            and namespace.get(name) is obj
            and namespace not in found
        ):
            found.append(namespace)
    return found


def _unwrap(member: object) -> object:
    if isinstance(member, (staticmethod, classmethod)):
        return member.__func__
    if isinstance(member, property):
        return member.fget
    if isinstance(member, functools.cached_property):
        return member.func
    return member


def _names_in(source: str, namespace: dict[str, Any]) -> set[str]:
    """Modules of the names an annotation string uses, looked up one by one (for a string
    that does not evaluate whole: a name imported only for type checking, say)."""
    found: set[str] = set()
    try:
        tree = ast.parse(source, mode="eval")
    except SyntaxError:
        return {source}
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id in namespace:
            value = namespace[node.id]
            if isinstance(value, types.ModuleType):
                found.add(value.__name__)
            else:
                module = getattr(value, "__module__", None)
                if isinstance(module, str):
                    found.add(module)
    return found


def _modules_of(hint: object, found: set[str]) -> None:
    """Add the module of every type ``hint`` mentions (its arguments too) to ``found``."""
    stack = [hint]
    while stack:
        item = stack.pop()
        if isinstance(item, (list, tuple)):
            stack.extend(item)
            continue
        module = getattr(item, "__module__", None)
        if isinstance(module, str):
            found.add(module)
        stack.extend(typing.get_args(item))


def _annotation_modules(target: object, namespaces: list[dict[str, Any]]) -> set[str]:
    """Modules of every type mentioned in ``target``'s annotations, each resolved on its
    own (one unresolvable annotation does not hide the others)."""
    found: set[str] = set()
    try:
        annotations = inspect.get_annotations(target)  # type: ignore[arg-type]
    except TypeError:
        return found
    for hint in annotations.values():
        if not isinstance(hint, str):
            _modules_of(hint, found)
            continue
        for namespace in namespaces:
            try:
                value = eval(hint, namespace)
            except Exception:
                continue
            _modules_of(value, found)
            break
        else:
            for namespace in namespaces:
                found |= _names_in(hint, namespace)
            found.add(hint)  # the text itself too ("grpclib.const.Status")
    return found


def _members(cls: type) -> Iterator[tuple[str, object]]:
    """The public methods and properties of ``cls``, and its ``__init__``, including those
    inherited from this library's own classes."""
    seen: set[str] = set()
    for base in cls.__mro__:
        if not base.__module__.startswith("sepp_anyio"):
            continue
        for name, member in vars(base).items():
            if name in seen or (name.startswith("_") and name != "__init__"):
                continue
            seen.add(name)
            member = _unwrap(member)
            if callable(member):
                yield name, member
            if isinstance(vars(base)[name], property) and vars(base)[name].fset is not None:
                yield f"{name}.setter", vars(base)[name].fset


def _offenders(package: types.ModuleType) -> list[str]:
    offenders: list[str] = []

    def check(label: str, target: object, namespaces: list[dict[str, Any]]) -> None:
        for module in _annotation_modules(target, namespaces):
            if module.startswith(FORBIDDEN) or any(f in module for f in FORBIDDEN):
                offenders.append(f"{label} -> {module}")

    for name in package.__all__:
        obj = getattr(package, name)
        label = f"{package.__name__}.{name}"
        namespaces = _namespaces(obj)
        if inspect.isclass(obj):
            for base in obj.__mro__:
                if base.__module__.startswith(FORBIDDEN):
                    offenders.append(f"{label} subclasses {base.__module__}.{base.__name__}")
            for member_name, member in _members(obj):
                check(f"{label}.{member_name}", member, namespaces)
            for base in obj.__mro__:
                if base.__module__.startswith("sepp_anyio"):
                    # Class-level annotations: a dataclass's fields, declared attributes.
                    public = {
                        k: v
                        for k, v in inspect.get_annotations(base).items()
                        if not k.startswith("_")
                    }
                    holder = types.SimpleNamespace(__annotations__=public)
                    check(f"{label} (fields of {base.__qualname__})", holder, namespaces)
            if dataclasses.is_dataclass(obj):
                for field in dataclasses.fields(obj):
                    if not isinstance(field.type, str):
                        found: set[str] = set()
                        _modules_of(field.type, found)
                        offenders += [
                            f"{label}.{field.name} -> {m}" for m in found if m.startswith(FORBIDDEN)
                        ]
        elif callable(obj):
            check(label, obj, namespaces)
    return offenders


def test_every_public_name_exists_and_is_listed() -> None:
    for name in sepp_anyio.__all__:
        assert hasattr(sepp_anyio, name), name
    # Subpackages show up as attributes once imported; they are namespaces,
    # not re-exported names.
    subpackages = {"server", "testing"}
    # ("@py_builtins" and friends: pytest's assertion rewriting, when the
    # package is loaded as a pytest plugin.)
    exported = {n for n in dir(sepp_anyio) if not n.startswith(("_", "@"))} - subpackages
    assert exported <= set(sepp_anyio.__all__) | {"annotations"}


@pytest.mark.parametrize("package", PUBLIC_PACKAGES, ids=lambda p: p.__name__)
def test_public_signatures_mention_no_private_wire_types(package: types.ModuleType) -> None:
    assert _offenders(package) == []


@pytest.mark.parametrize("package", PUBLIC_PACKAGES, ids=lambda p: p.__name__)
def test_public_objects_do_not_come_from_private_wire_modules(package: types.ModuleType) -> None:
    for name in package.__all__:
        module = getattr(getattr(package, name), "__module__", "") or ""
        assert not module.startswith(FORBIDDEN), (package.__name__, name, module)


def test_the_check_sees_a_wire_type_in_a_signature() -> None:
    """The checker itself: a method taking a generated message, a property returning one,
    a dataclass field holding one and a type-checking-only import are all reported."""
    from dataclasses import dataclass

    namespace: dict[str, Any] = {"pb": pb, "__name__": "sepp_anyio.fake"}
    source = (
        "from __future__ import annotations\n"
        "class Leaky:\n"
        "    async def ack(self, request: pb.AckRequest) -> None: ...\n"
        "    @property\n"
        "    def last(self) -> pb.AckResponse | None: ...\n"
        "    def later(self) -> Unknown[pb.NackRequest]: ...\n"
    )
    exec(compile(source, "<leaky>", "exec"), namespace)
    leaky = namespace["Leaky"]

    @dataclass
    class Holder:
        reply: pb.ReserveResponse

    Holder.__module__ = "sepp_anyio.fake"
    fake = types.ModuleType("sepp_anyio.fake")
    fake.__all__ = ["Leaky", "Holder"]  # type: ignore[attr-defined]
    fake.Leaky = leaky  # type: ignore[attr-defined]
    fake.Holder = Holder  # type: ignore[attr-defined]
    found = _offenders(fake)
    assert any(f.startswith("sepp_anyio.fake.Leaky.ack ->") for f in found), found
    assert any(f.startswith("sepp_anyio.fake.Leaky.last ->") for f in found), found
    assert any(f.startswith("sepp_anyio.fake.Leaky.later ->") for f in found), found
    assert any(f.startswith("sepp_anyio.fake.Holder") for f in found), found


def test_argument_errors_are_exported_in_the_tree() -> None:
    """Bad arguments raise errors of the one tree, which are also ValueError/TypeError."""
    for name, builtin in (
        ("InvalidArgumentError", ValueError),
        ("InvalidArgumentTypeError", TypeError),
    ):
        assert name in sepp_anyio.__all__
        cls = getattr(sepp_anyio, name)
        assert issubclass(cls, sepp_anyio.SeppError) and issubclass(cls, builtin)


def test_the_server_and_testing_namespaces_export_what_they_list() -> None:
    """Every name the docs document under ``sepp_anyio.server``/``sepp_anyio.testing`` is
    importable from there (the docs build refuses references to private modules)."""
    for package in (sepp_anyio.server, sepp_anyio.testing):
        for name in package.__all__:
            assert hasattr(package, name), (package.__name__, name)
        exported = {
            n
            for n, obj in vars(package).items()
            if not n.startswith(("_", "@")) and not inspect.ismodule(obj)
        }
        assert exported <= set(package.__all__) | {"annotations"}, package.__name__
    # Named by NetworkServer's and serve()'s docstrings.
    assert sepp_anyio.server.LISTENING_LOGGER == "sepp_anyio.server.listening"
    assert callable(sepp_anyio.server.server_ssl_context)
