"""Which library checks which annotation, the errors when none can, and what importing a
Task module does (and does not) import."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
import textwrap
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any, Literal

import annotated_types
import msgspec
import pydantic
import pydantic.dataclasses
import pytest

import sepp_anyio
from sepp_anyio import InvalidArgumentError, InvalidArgumentTypeError
from sepp_anyio._tasks._task import Task

from ._kinds import DWelcome, PAddress, SAddress, hidden

SRC = Path(sepp_anyio.__file__).resolve().parent


def _library(annotation: Any) -> str:
    task: Task[Any] = Task("q", "t", annotation)
    return task.library


@pydantic.dataclasses.dataclass
class PydanticDataclass:
    n: int


@dataclasses.dataclass
class HoldsStruct:
    inner: SAddress


@dataclasses.dataclass
class HoldsModel:
    inner: list[PAddress]


@dataclasses.dataclass
class HoldsBoth:
    a: SAddress
    b: PAddress


class NotATypeForJson:
    pass


@dataclasses.dataclass
class Unresolvable:
    x: NoSuchName  # type: ignore[name-defined]  # noqa: F821


@pytest.mark.parametrize(
    ("annotation", "library"),
    [
        (PAddress, "pydantic"),
        (list[PAddress], "pydantic"),
        (PAddress | None, "pydantic"),
        (PydanticDataclass, "pydantic"),
        (HoldsModel, "pydantic"),
        (Annotated[int, pydantic.Field(gt=0)], "pydantic"),
        (Annotated[int, annotated_types.Gt(0)], "pydantic"),
        (SAddress, "msgspec"),
        (dict[str, SAddress], "msgspec"),
        (HoldsStruct, "msgspec"),  # a dataclass with a Struct inside: pydantic cannot
        (Annotated[int, msgspec.Meta(gt=0)], "msgspec"),
        # Neither library's own type: pydantic, being installed, is preferred.
        (DWelcome, "pydantic"),
        (datetime, "pydantic"),
        (Literal["a", "b"], "pydantic"),
        (tuple[int, int], "pydantic"),
        (dict[int, str], "pydantic"),
        # Plain JSON: the built-in validator.
        (dict[str, Any], "json"),
        (int | None, "json"),
    ],
)
def test_the_library_is_chosen_by_the_annotation(annotation: Any, library: str) -> None:
    assert _library(annotation) == library


def test_without_pydantic_msgspec_checks_dataclasses_and_other_types() -> None:
    with hidden("pydantic"):
        assert _library(DWelcome) == "msgspec"
        assert _library(Literal["a", "b"]) == "msgspec"
        assert _library(dict[str, int]) == "json"


def test_library_constraints_are_enforced() -> None:
    positive_ms: Task[Any] = Task("q", "t", Annotated[int, msgspec.Meta(gt=0)])
    positive_pd: Task[Any] = Task("q", "t", Annotated[int, pydantic.Field(gt=0)])
    for task in (positive_ms, positive_pd):
        assert task.decode(task.encode(3)) == 3
        with pytest.raises(InvalidArgumentError, match=r"^Task 'q/t': .*(greater|>)"):
            task.encode(0)


def test_an_annotation_mixing_both_libraries_is_refused() -> None:
    with pytest.raises(
        InvalidArgumentTypeError, match=r"^Task 'q/t': HoldsBoth mixes pydantic and msgspec"
    ):
        Task("q", "t", HoldsBoth)
    with pytest.raises(TypeError, match="mixes pydantic and msgspec"):
        Task("q", "t", PAddress | SAddress)


def test_an_annotation_the_library_cannot_handle_is_a_type_error() -> None:
    with pytest.raises(
        InvalidArgumentTypeError, match=r"^Task 'q/t': pydantic cannot validate NotATypeForJson"
    ):
        Task("q", "t", NotATypeForJson)
    with (
        hidden("pydantic"),
        pytest.raises(
            InvalidArgumentTypeError, match=r"^Task 'q/t': msgspec cannot validate NotATypeForJson"
        ),
    ):
        Task("q", "t", NotATypeForJson)


@pytest.mark.parametrize("library", ["pydantic", "msgspec"])
def test_an_unresolvable_annotation_fails_where_the_task_is_made(library: str) -> None:
    hide = ("pydantic",) if library == "msgspec" else ()
    with hidden(*hide), pytest.raises(TypeError) as info:
        Task("q", "t", Unresolvable)
    assert str(info.value).startswith(f"Task 'q/t': {library} cannot validate Unresolvable: ")
    assert "NoSuchName" in str(info.value) or "not fully defined" in str(info.value)


def _run(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_without_either_library_the_error_names_both_extras() -> None:
    result = _run(
        """
        import dataclasses, sys
        sys.modules["pydantic"] = None
        sys.modules["msgspec"] = None
        from sepp_anyio._tasks._task import Task

        @dataclasses.dataclass
        class Welcome:
            user: int

        assert Task("q", "plain", dict[str, int]).library == "json"
        try:
            Task("emails", "send_welcome", Welcome)
        except ImportError as exc:
            print(exc)
            print(exc.name)
        """
    )
    assert result.returncode == 0, result.stderr
    message, name = result.stdout.splitlines()
    assert message == (
        "Task 'emails/send_welcome': validating Welcome needs pydantic or msgspec, and "
        "neither is installed: pip install 'sepp-anyio[pydantic]' (or 'sepp-anyio[msgspec]')"
    )
    assert name == "pydantic"


def test_the_task_modules_import_no_worker_code_nor_a_library_until_needed() -> None:
    # sepp_anyio/__init__ imports the whole library, the worker included (and betterproto2,
    # under it, imports pydantic whenever pydantic is installed); load the package without
    # running it to see what the task modules themselves import.
    result = _run(
        f"""
        import dataclasses, sys, types
        package = types.ModuleType("sepp_anyio")
        package.__path__ = [{str(SRC)!r}]
        sys.modules["sepp_anyio"] = package

        def loaded(*names):
            return sorted(set(names) & set(sys.modules))

        from sepp_anyio._tasks._task import Task
        plain = Task("q", "t", dict[str, list[int]])
        plain.decode(plain.encode({{"a": [1]}}))
        print(loaded("pydantic", "msgspec"))
        print(loaded("sepp_anyio._worker", "sepp_anyio._client", "grpclib", "h2", "anyio"))

        @dataclasses.dataclass
        class Welcome:
            user: int

        Task("q", "t", Welcome)
        print(loaded("pydantic", "msgspec"))
        """
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["[]", "[]", "['pydantic']"]


def test_importing_sepp_anyio_does_not_import_msgspec() -> None:
    result = _run(
        """
        import sys
        import sepp_anyio._tasks._task
        print("msgspec" in sys.modules)
        """
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["False"]
