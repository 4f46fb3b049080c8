"""The kinds of type a Task supports, each with a good value, the JSON it travels as, and
mistakes on both sides with the field each mistake must be reported at.

The structured kinds share one shape (``user``, ``when``, ``tags``, a nested ``address``),
so that every library is held to the same field paths. A kind whose ``hide`` names
pydantic is built while pydantic cannot be imported, so that msgspec checks the
dataclass or TypedDict (with both installed, pydantic would).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import msgspec
import pydantic
import typing_extensions

from sepp_anyio._tasks._task import Task

__all__ = ["KINDS", "WHEN", "WIRE", "Kind", "by_id", "hidden"]

WHEN = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)
WIRE: dict[str, Any] = {
    "user": 42,
    "when": "2024-05-01T12:00:00Z",
    "tags": ["a", "é"],
    "address": {"city": "Zürich"},
}


# ---------------------------------------------------------------------------- the types


class PAddress(pydantic.BaseModel):
    city: str


class PWelcome(pydantic.BaseModel):
    user: int
    when: datetime
    tags: list[str]
    address: PAddress


@dataclass
class DAddress:
    city: str


@dataclass
class DWelcome:
    user: int
    when: datetime
    tags: list[str]
    address: DAddress


# pydantic needs typing_extensions' TypedDict before Python 3.12; msgspec takes either.
class TAddress(typing_extensions.TypedDict):
    city: str


class TWelcome(typing_extensions.TypedDict):
    user: int
    when: datetime
    tags: list[str]
    address: TAddress


class SAddress(msgspec.Struct):
    city: str


class SWelcome(msgspec.Struct):
    user: int
    when: datetime
    tags: list[str]
    address: SAddress


# ---------------------------------------------------------------------------- kinds


@dataclass(frozen=True)
class Kind:
    id: str
    type: Any
    #: The library expected to check it.
    library: str
    value: Any
    #: The value as JSON (what a producer in another language would send).
    wire: Any
    #: Producer-side mistakes: (value, the field named; "" for the value as a whole).
    bad_values: list[tuple[Any, str]]
    #: Worker-side mistakes: (JSON text, the field named; "" for the payload as a whole).
    bad_payloads: list[tuple[str, str]]
    #: Module names made unimportable while the Task is built.
    hide: tuple[str, ...] = ()
    #: Whether a job without a payload (read as null) validates.
    accepts_null: bool = False

    def task(self) -> Task[Any]:
        with hidden(*self.hide):
            return Task("q", self.id, self.type)


@contextmanager
def hidden(*names: str) -> Iterator[None]:
    """Make ``names`` unimportable (``import`` raises ImportError) inside the block."""
    saved = {name: sys.modules.get(name) for name in names}
    for name in names:
        sys.modules[name] = None  # type: ignore[assignment]
    try:
        yield
    finally:
        for name, module in saved.items():
            if module is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = module


def _with(wire: dict[str, Any], **changes: Any) -> str:
    return json.dumps({**wire, **changes})


def _without(wire: dict[str, Any], key: str) -> str:
    return json.dumps({k: v for k, v in wire.items() if k != key})


# Shared by the structured kinds: every library must name these fields.
STRUCTURED_BAD_PAYLOADS: list[tuple[str, str]] = [
    (_without(WIRE, "user"), "user"),
    (_with(WIRE, user="42"), "user"),  # strict: a string is not an int
    (_with(WIRE, user=True), "user"),  # strict: true is not an int
    (_with(WIRE, when="not a date"), "when"),
    (_with(WIRE, tags=["a", 1]), "tags[1]"),
    (_with(WIRE, address={"city": 1}), "address.city"),
    (_with(WIRE, address={}), "address.city"),
    ("[]", ""),
    ('"hello"', ""),
]


def _structured(
    id: str,
    cls: Any,
    make: Callable[..., Any],
    address: Callable[..., Any],
    library: str,
    *,
    hide: tuple[str, ...] = (),
    instance_checks: bool = True,
) -> Kind:
    good = make(user=42, when=WHEN, tags=["a", "é"], address=address(city="Zürich"))
    bad: list[tuple[Any, str]] = [
        (make(user="42", when=WHEN, tags=[], address=address(city="x")), "user"),
        (make(user=1, when=WHEN, tags=["a", 2], address=address(city="x")), "tags[1]"),
        (make(user=1, when=WHEN, tags=[], address=address(city=3)), "address.city"),
        (42, ""),
    ]
    if instance_checks:
        # These two serialise to valid JSON ("2024-...", and pydantic writes True in an
        # int field as 1), so only a check of the instance itself can refuse them.
        bad.append(
            (make(user=1, when="2024-05-01T12:00:00Z", tags=[], address=address(city="x")), "when")
        )
        bad.append((make(user=True, when=WHEN, tags=[], address=address(city="x")), "user"))
    return Kind(
        id=id,
        type=cls,
        library=library,
        value=good,
        wire=WIRE,
        bad_values=bad,
        bad_payloads=STRUCTURED_BAD_PAYLOADS,
        hide=hide,
    )


def _model(**fields: Any) -> PWelcome:
    # model_construct skips validation: the only way to get a wrongly typed model (the
    # other is assignment without validate_assignment), which the producer must refuse.
    address = fields.pop("address")
    return PWelcome.model_construct(address=address, **fields)


def _model_address(city: Any) -> PAddress:
    return PAddress.model_construct(city=city)


def _typed_dict(**fields: Any) -> Any:
    return dict(fields)


KINDS: list[Kind] = [
    _structured(
        "pydantic-model",
        PWelcome,
        _model,
        _model_address,
        "pydantic",
        # A model's instance is trusted as pydantic trusts it (it validated at
        # construction); what it serialises to is still checked, which catches a model
        # built with model_construct() or changed by assignment unless its JSON is valid.
        instance_checks=False,
    ),
    _structured("dataclass-pydantic", DWelcome, DWelcome, DAddress, "pydantic"),
    _structured("dataclass-msgspec", DWelcome, DWelcome, DAddress, "msgspec", hide=("pydantic",)),
    _structured("typeddict-pydantic", TWelcome, _typed_dict, _typed_dict, "pydantic"),
    _structured(
        "typeddict-msgspec", TWelcome, _typed_dict, _typed_dict, "msgspec", hide=("pydantic",)
    ),
    _structured("msgspec-struct", SWelcome, SWelcome, SAddress, "msgspec"),
    Kind(
        id="json-dict",
        type=dict[str, list[int] | None],
        library="json",
        value={"a": [1, 2], "b": None, "é": []},
        wire={"a": [1, 2], "b": None, "é": []},
        bad_values=[
            ({"a": [1, "2"]}, "a[1]"),
            ({"a": [True]}, "a[0]"),
            ({"a": (1, 2)}, "a"),
            ({"a": 1.5}, "a"),
            ({1: [1]}, ""),
            ([1], ""),
        ],
        bad_payloads=[
            ('{"a": [1, "2"]}', "a[1]"),
            ('{"a": {"b": 1}}', "a"),
            ('{"a": [1.5]}', "a[0]"),
            ("[]", ""),
        ],
    ),
    Kind(
        id="json-scalar",
        type=int | None,
        library="json",
        value=7,
        wire=7,
        bad_values=[("7", ""), (True, ""), (7.0, "")],
        bad_payloads=[('"7"', ""), ("true", ""), ("7.5", ""), ("{}", "")],
        accepts_null=True,
    ),
]


def by_id(id: str) -> Kind:
    return next(kind for kind in KINDS if kind.id == id)
