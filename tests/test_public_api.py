"""The public surface never exposes generated, betterproto2 or grpclib types."""

from __future__ import annotations

import dataclasses
import inspect
import typing

import sepp_anyio

FORBIDDEN = ("sepp_anyio._proto", "betterproto2", "grpclib", "google.protobuf", "multidict")


def _annotation_modules(obj: object) -> set[str]:
    """Modules of every type mentioned in obj's (resolved) annotations."""
    found: set[str] = set()
    try:
        hints = typing.get_type_hints(obj)
    except Exception:  # unresolvable forward refs are reported as such
        hints = getattr(obj, "__annotations__", {})
    stack = list(hints.values())
    while stack:
        hint = stack.pop()
        module = getattr(hint, "__module__", None)
        if isinstance(module, str):
            found.add(module)
        if isinstance(hint, str):
            found.add(hint)
        stack.extend(typing.get_args(hint))
    return found


def _public_objects() -> list[tuple[str, object]]:
    names = sepp_anyio.__all__
    return [(name, getattr(sepp_anyio, name)) for name in names]


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


def test_public_signatures_mention_no_private_wire_types() -> None:
    offenders: list[str] = []
    for name, obj in _public_objects():
        targets: list[object] = [obj]
        if inspect.isclass(obj):
            targets += [
                member
                for member_name, member in vars(obj).items()
                if not member_name.startswith("_") and callable(member)
            ]
            targets.append(obj.__init__)
            if dataclasses.is_dataclass(obj):
                targets.append(obj)
            for base in obj.__mro__:
                if base.__module__.startswith(FORBIDDEN):
                    offenders.append(f"{name} subclasses {base.__module__}.{base.__name__}")
        for target in targets:
            for module in _annotation_modules(target):
                if module.startswith(FORBIDDEN) or any(f in module for f in FORBIDDEN):
                    offenders.append(
                        f"{name}: {getattr(target, '__qualname__', target)} -> {module}"
                    )
    assert not offenders, offenders


def test_public_objects_do_not_come_from_private_wire_modules() -> None:
    for name, obj in _public_objects():
        module = getattr(obj, "__module__", "") or ""
        assert not module.startswith(FORBIDDEN), (name, module)


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
    import sepp_anyio.server
    import sepp_anyio.testing

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
