"""Type adapters for typed tasks: check a value against its annotation and turn it into
JSON bytes, and turn received bytes back into a checked value.

Which library checks a type (decided once, when the :class:`~sepp_anyio.Task` is made):

==========================================  ===============================================
the annotation                               checked by
==========================================  ===============================================
mentions a pydantic model (``BaseModel``,    pydantic v2 (a ``TypeAdapter``): the
a pydantic dataclass) anywhere               ``sepp-anyio[pydantic]`` extra
mentions a ``msgspec.Struct`` (or            msgspec: the ``sepp-anyio[msgspec]`` extra
``msgspec.Meta``) anywhere
only plain JSON types: ``int``, ``float``,   the small validator in this module, so that
``str``, ``bool``, ``None``, ``Any``,        plain tasks need neither library
``list[X]``, ``dict[str, X]`` and unions
anything else (a stdlib dataclass, a         pydantic if it is installed, else msgspec;
``TypedDict``, ``datetime``, ``Literal``,    neither: :class:`ImportError` naming both
``Annotated``, ...)                          extras
==========================================  ===============================================

Pydantic is preferred for the last row because it is the more widely installed of the two
and covers more annotations; installing msgspec next to it changes nothing. A type that
mixes pydantic and msgspec types is refused (neither library can check the other's).

Validation is **strict** on both sides, whichever library does it: ``"42"`` is not an
``int``, ``true`` is not an ``int``, an ``int`` is accepted for a ``float``. That is
msgspec's default; for pydantic it means ``strict=True`` on every call (which overrides a
model's own ``strict=False``, and per-field ``Field(strict=False)`` too). The payload is a
contract between producers in any language, and coercion would hide their bugs.

On the producer side :meth:`TypeCodec.dump` checks the Python value itself (instances are
re-validated: a dataclass or ``Struct`` built with a wrong field type is refused, which
neither library does on its own), serialises it, then runs the worker's own check on the
bytes, so that whatever is sent is something the worker will accept.

Payload bytes must be UTF-8 (RFC 8259); the Task checks that before any library parses
them. One difference between the parsers stays: pydantic's reads the non-JSON tokens
``NaN`` and ``Infinity`` into a ``float`` field (unless the model sets
``allow_inf_nan=False``), where msgspec and the built-in validator refuse the payload.

pydantic and msgspec are imported only when a codec that needs them is built, so these
modules import neither before. (``import sepp_anyio`` does import pydantic when it is
installed, but through betterproto2, which probes for it at import time.)
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import re
import sys
import types
import typing
from collections.abc import Sequence
from typing import Any, ClassVar, Generic, NamedTuple, TypeVar

from .._model._error_root import InvalidArgumentTypeError
from .._model._payload import Payload

__all__ = ["Invalid", "Problem", "TypeCodec", "codec_for"]

T = TypeVar("T")

_PYDANTIC_EXTRA = "sepp-anyio[pydantic]"
_MSGSPEC_EXTRA = "sepp-anyio[msgspec]"
# What one failure may add to a message (a hostile payload can have huge keys).
_MAX_PROBLEMS = 5
_MAX_TEXT = 200
# A value nested deeper than the interpreter's recursion limit lets the checking library (or
# the built-in validator) walk: refused as a problem of the value, like any other, so that a
# hostile payload is dead-lettered rather than retried on a RecursionError, and a producer
# gets an InvalidArgumentError rather than a RecursionError.
_TOO_DEEP = "nested too deeply to be checked (deeper than the recursion limit allows)"


class Problem(NamedTuple):
    """One reason a value or payload does not validate."""

    #: Where: ``"user"``, ``"items[0].name"``; ``""`` for the value as a whole.
    field: str
    #: What is wrong, in the checking library's words.
    message: str


class Invalid(Exception):
    """A value or payload does not validate (internal; the Task turns it into its own
    error with the task's name).

    Args:
        problems: at least one.
        not_json: the bytes are not JSON at all (rather than JSON of the wrong shape).
    """

    def __init__(self, problems: Sequence[Problem], *, not_json: bool = False) -> None:
        self.problems = tuple(
            Problem(_clip(p.field), _clip(p.message)) for p in problems[:_MAX_PROBLEMS]
        )
        self.more = max(0, len(problems) - _MAX_PROBLEMS)
        self.not_json = not_json
        super().__init__(self.problems)


def _clip(text: str) -> str:
    return text if len(text) <= _MAX_TEXT else text[: _MAX_TEXT - 3] + "..."


def _join_path(parts: Sequence[object]) -> str:
    """``("items", 0, "name")`` -> ``"items[0].name"``."""
    out = ""
    for part in parts:
        if isinstance(part, int) and not isinstance(part, bool):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out


class TypeCodec(Generic[T]):
    """Checks values of one annotation and converts them to and from JSON bytes."""

    #: ``"pydantic"``, ``"msgspec"`` or ``"json"`` (the built-in validator).
    library: ClassVar[str]

    def dump(self, value: T) -> bytes:
        """Validate ``value`` and serialise it as compact UTF-8 JSON.

        Raises:
            Invalid: the value does not match the annotation (or cannot be serialised).
        """
        raise NotImplementedError

    def load(self, data: bytes) -> T:
        """Parse ``data`` as JSON and validate it against the annotation.

        Raises:
            Invalid: the bytes are not JSON (``not_json``) or do not validate.
        """
        raise NotImplementedError


# ---------------------------------------------------------------------------- choosing


def codec_for(annotation: object) -> TypeCodec[Any]:
    """The codec for ``annotation``, chosen by the rules in the module docstring.

    Raises:
        TypeError: the annotation mixes pydantic and msgspec types, or the chosen library
            cannot handle it (its message is included).
        ImportError: the annotation needs pydantic or msgspec and neither is installed.
    """
    libraries = _libraries_in(annotation, set())
    if len(libraries) > 1:
        raise InvalidArgumentTypeError(
            f"{_name(annotation)} mixes pydantic and msgspec types; neither library can "
            "validate the other's, so use one of them per task"
        )
    if libraries == {"pydantic"}:
        return _PydanticCodec(annotation)
    if libraries == {"msgspec"}:
        return _MsgspecCodec(annotation)
    node = _plain_node(annotation)
    if node is not None:
        return _JsonCodec(node)
    try:
        import pydantic  # noqa: F401
    except ImportError:
        pass
    else:
        return _PydanticCodec(annotation)
    try:
        import msgspec  # noqa: F401
    except ImportError:
        pass
    else:
        return _MsgspecCodec(annotation)
    raise ImportError(
        f"validating {_name(annotation)} needs pydantic or msgspec, and neither is "
        f"installed: pip install '{_PYDANTIC_EXTRA}' (or '{_MSGSPEC_EXTRA}')",
        name="pydantic",
    )


def _name(annotation: object) -> str:
    if isinstance(annotation, type):
        return annotation.__qualname__
    return repr(annotation)


def _libraries_in(annotation: object, seen: set[int]) -> set[str]:
    """Which of pydantic and msgspec the annotation's types belong to, looking through
    generic arguments, ``Annotated`` metadata and the fields of dataclasses and TypedDicts.

    Only libraries already imported are looked for: a class cannot be a pydantic model
    unless pydantic was imported to define it, so this never imports either.
    """
    if id(annotation) in seen:
        return set()
    seen.add(id(annotation))
    pydantic = sys.modules.get("pydantic")
    msgspec = sys.modules.get("msgspec")
    found: set[str] = set()
    if isinstance(annotation, type):
        if pydantic is not None and _is_pydantic_class(annotation, pydantic):
            return {"pydantic"}
        if msgspec is not None and _subclass(annotation, msgspec.Struct):
            return {"msgspec"}
        if dataclasses.is_dataclass(annotation) or typing.is_typeddict(annotation):
            try:
                hints = typing.get_type_hints(annotation, include_extras=True)
            except Exception:  # an unresolvable forward reference: the library will say
                hints = {}
            for hint in hints.values():
                found |= _libraries_in(hint, seen)
        return found
    if typing.get_origin(annotation) is typing.Annotated:
        for meta in getattr(annotation, "__metadata__", ()):
            root = type(meta).__module__.partition(".")[0]
            if root == "msgspec":
                found.add("msgspec")
            elif root in ("pydantic", "pydantic_core", "annotated_types"):
                found.add("pydantic")
    for arg in typing.get_args(annotation):
        found |= _libraries_in(arg, seen)
    return found


def _subclass(cls: type, base: type) -> bool:
    try:
        return issubclass(cls, base)
    except TypeError:  # TypedDicts and some special forms refuse issubclass
        return False


def _is_pydantic_class(cls: type, pydantic: types.ModuleType) -> bool:
    if _subclass(cls, pydantic.BaseModel):
        return True
    import pydantic.dataclasses

    # Public since pydantic 2.4; before that a pydantic dataclass goes undetected here, which
    # only matters for spotting a mix with msgspec (as a dataclass, pydantic checks it).
    is_pydantic_dataclass = getattr(pydantic.dataclasses, "is_pydantic_dataclass", None)
    return is_pydantic_dataclass is not None and bool(is_pydantic_dataclass(cls))


# ---------------------------------------------------------------------------- pydantic


class _PydanticCodec(TypeCodec[Any]):
    library = "pydantic"

    def __init__(self, annotation: Any) -> None:
        import pydantic

        self._error = pydantic.ValidationError
        try:
            self._adapter: Any = pydantic.TypeAdapter(annotation)
            # Newer pydantic defers an annotation it cannot resolve yet (a forward
            # reference) until first use; use it now, so that the Task fails where it is
            # declared rather than at its first enqueue.
            with contextlib.suppress(pydantic.ValidationError):
                self._adapter.validate_python(None, strict=True)
            # pydantic passes instances of dataclasses (and of models) through without a
            # look at their fields, even in strict mode. A stdlib dataclass, unlike a model,
            # is never validated at construction, so the producer's check runs through a
            # one-element list whose config re-validates every instance inside it.
            self._revalidating: Any = pydantic.TypeAdapter(
                list[annotation],
                config=pydantic.ConfigDict(revalidate_instances="always"),
            )
        except (
            pydantic.PydanticUserError,
            pydantic.PydanticSchemaGenerationError,
            pydantic.PydanticUndefinedAnnotation,
            NameError,
        ) as exc:
            raise InvalidArgumentTypeError(
                f"pydantic cannot validate {_name(annotation)}: {exc}"
            ) from None

    def _invalid(self, exc: Any, *, drop: int = 0) -> Invalid:
        errors = exc.errors(include_url=False)
        not_json = any(str(e.get("type", "")).startswith("json_") for e in errors)
        return Invalid(
            [Problem(_join_path(tuple(e["loc"])[drop:]), str(e["msg"])) for e in errors],
            not_json=not_json,
        )

    def dump(self, value: Any) -> bytes:
        try:
            (checked,) = self._revalidating.validate_python([value], strict=True)
        except self._error as exc:
            raise self._invalid(exc, drop=1) from None
        try:
            # Aliases are the names on the wire, as validation expects them; round_trip
            # writes what validation reads back (a Json[...] field as its JSON text).
            # Warnings off: a model built with model_construct() or changed by assignment
            # can hold a wrong type; the check of the bytes below names the field instead.
            data: bytes = self._adapter.dump_json(
                checked, by_alias=True, round_trip=True, warnings=False
            )
        except Exception as exc:  # PydanticSerializationError, for example a lone surrogate
            raise Invalid([Problem("", f"cannot be serialised as JSON: {exc}")]) from None
        _check_serialised(self, data)
        return data

    def load(self, data: bytes) -> Any:
        try:
            return self._adapter.validate_json(data, strict=True)
        except self._error as exc:
            raise self._invalid(exc) from None
        except RecursionError:  # pydantic-core bounds its own depth; this is a safety net
            raise Invalid([Problem("", _TOO_DEEP)]) from None


def _check_serialised(codec: TypeCodec[Any], data: bytes) -> None:
    """Run the worker's check on the bytes the producer is about to send."""
    try:
        codec.load(data)
    except Invalid as exc:
        raise Invalid(
            [
                Problem(p.field, f"{p.message} (in the JSON the value serialises to)")
                for p in exc.problems
            ]
        ) from None


# ---------------------------------------------------------------------------- msgspec


class _MsgspecCodec(TypeCodec[Any]):
    library = "msgspec"

    def __init__(self, annotation: object) -> None:
        import datetime
        import decimal
        import uuid

        import msgspec

        self._msgspec = msgspec
        self._annotation = annotation
        # Passed through to_builtins and convert as themselves, so that a str standing where
        # a datetime belongs is refused instead of parsed (JSON carries these as strings).
        self._native = (
            bytes,
            bytearray,
            memoryview,
            datetime.datetime,
            datetime.date,
            datetime.time,
            datetime.timedelta,
            uuid.UUID,
            decimal.Decimal,
        )
        try:
            self._decoder: Any = msgspec.json.Decoder(annotation)
            custom = _msgspec_custom_type(msgspec, annotation)
        except (TypeError, NameError) as exc:  # NameError: an unresolvable forward reference
            raise InvalidArgumentTypeError(
                f"msgspec cannot validate {_name(annotation)}: {exc}"
            ) from None
        if custom is not None:
            # msgspec accepts any class as a "custom type" that needs encode/decode hooks;
            # without them, no value of it could ever be sent, so say so now.
            raise InvalidArgumentTypeError(
                f"msgspec cannot validate {_name(annotation)}: {_name(custom)} has no JSON "
                "form (it is neither a msgspec Struct, a dataclass, a TypedDict nor a "
                "type msgspec supports)"
            )
        self._encoder = msgspec.json.Encoder()

    def _invalid(self, exc: Exception, *, not_json: bool = False) -> Invalid:
        return Invalid([_msgspec_problem(str(exc))], not_json=not_json)

    def dump(self, value: Any) -> bytes:
        msgspec = self._msgspec
        try:
            # msgspec never checks a Struct's (or dataclass's) fields after construction;
            # taking the value apart and converting it back does.
            plain = msgspec.to_builtins(value, builtin_types=self._native)
            checked = msgspec.convert(
                plain, self._annotation, strict=True, builtin_types=self._native
            )
        except msgspec.ValidationError as exc:
            raise self._invalid(exc) from None
        except (TypeError, ValueError) as exc:  # a value msgspec cannot represent at all
            raise Invalid([Problem("", f"cannot be serialised as JSON: {exc}")]) from None
        except RecursionError:
            raise Invalid([Problem("", _TOO_DEEP)]) from None
        try:
            data: bytes = self._encoder.encode(checked)
        except (TypeError, ValueError) as exc:  # for example a lone surrogate in a str
            raise Invalid([Problem("", f"cannot be serialised as JSON: {exc}")]) from None
        except RecursionError:
            raise Invalid([Problem("", _TOO_DEEP)]) from None
        _check_serialised(self, data)
        return data

    def load(self, data: bytes) -> Any:
        msgspec = self._msgspec
        try:
            return self._decoder.decode(data)
        except msgspec.ValidationError as exc:
            raise self._invalid(exc) from None
        except msgspec.DecodeError as exc:
            raise self._invalid(exc, not_json=True) from None
        except RecursionError:
            raise Invalid([Problem("", _TOO_DEEP)]) from None


def _msgspec_custom_type(msgspec: Any, annotation: object) -> object | None:
    """The first class in ``annotation`` that msgspec sees as a custom type, or None."""
    import msgspec.inspect

    pending: list[object] = [msgspec.inspect.type_info(annotation)]
    seen: set[int] = set()
    while pending:
        node = pending.pop()
        if id(node) in seen:
            continue  # recursive types refer back to themselves
        seen.add(id(node))
        if isinstance(node, msgspec.inspect.CustomType):
            cls: object = node.cls
            return cls
        if isinstance(node, list | tuple):
            pending.extend(node)
        elif isinstance(node, msgspec.inspect.Type | msgspec.inspect.Field):
            pending.extend(getattr(node, name) for name in node.__struct_fields__)
    return None


_MSGSPEC_AT = re.compile(r"^(?P<message>.*?)(?: - at `\$(?P<path>[^`]*)`)?$", re.DOTALL)
_MSGSPEC_MISSING = re.compile(r"^Object missing required field `(?P<name>[^`]*)`$")


def _msgspec_problem(text: str) -> Problem:
    """``"Expected `int`, got `str` - at `$.items[0].n`"`` -> ``("items[0].n", ...)``."""
    match = _MSGSPEC_AT.match(text)
    assert match is not None  # the pattern matches any string
    message, path = match["message"], (match["path"] or "").removeprefix(".")
    missing = _MSGSPEC_MISSING.match(message)
    if missing is not None:
        name = missing["name"]
        path = f"{path}.{name}" if path else name
        message = "missing required field"
    return Problem(path, message)


# ---------------------------------------------------------------------------- plain JSON


class _Fail(Exception):
    def __init__(self, path: tuple[str | int, ...], message: str) -> None:
        self.path = path
        self.message = message


def _kind(value: object) -> str:
    if value is None:
        return "null"
    return type(value).__name__


class _Node:
    """A compiled check of one plain JSON annotation; ``check`` returns the value, with
    ints where a float is expected made floats (as pydantic and msgspec do)."""

    #: How the annotation reads in messages.
    label: str = ""

    def exact(self, value: object) -> bool:
        """Whether ``value`` is of this node's own JSON kind (used to order unions)."""
        raise NotImplementedError

    def check(self, value: object, path: tuple[str | int, ...]) -> object:
        raise NotImplementedError


class _Scalar(_Node):
    def __init__(self, cls: type) -> None:
        self.cls = cls
        self.label = "null" if cls is type(None) else cls.__name__

    def exact(self, value: object) -> bool:
        if isinstance(value, bool):
            return self.cls is bool
        return isinstance(value, self.cls)

    def check(self, value: object, path: tuple[str | int, ...]) -> object:
        cls = self.cls
        # bool is an int subclass, but true is not a number in JSON (nor to either library).
        if isinstance(value, bool) and cls is not bool:
            raise _Fail(path, f"expected {self.label}, got bool")
        if cls is float and isinstance(value, int):
            value = float(value)
        if cls is type(None):
            if value is not None:
                raise _Fail(path, f"expected null, got {_kind(value)}")
            return None
        if not isinstance(value, cls):
            raise _Fail(path, f"expected {self.label}, got {_kind(value)}")
        if isinstance(value, float) and not math.isfinite(value):
            raise _Fail(path, f"{value} is not JSON (NaN and infinities have no JSON form)")
        if isinstance(value, str):
            _check_utf8(value, path)
        return value


def _check_utf8(text: str, path: tuple[str | int, ...]) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise _Fail(path, f"not encodable as UTF-8: {exc.reason}") from None


class _AnyJson(_Node):
    label = "any JSON value"

    def exact(self, value: object) -> bool:
        return True

    def check(self, value: object, path: tuple[str | int, ...]) -> object:
        if value is None or isinstance(value, bool | int | str):
            if isinstance(value, str):
                _check_utf8(value, path)
            return value
        if isinstance(value, float):
            return _Scalar(float).check(value, path)
        if isinstance(value, list | tuple):
            return [self.check(item, (*path, i)) for i, item in enumerate(value)]
        if isinstance(value, dict):
            return _check_dict(value, self, path)
        raise _Fail(path, f"{type(value).__name__} is not a JSON type")


class _List(_Node):
    def __init__(self, item: _Node) -> None:
        self.item = item
        self.label = f"list[{item.label}]"

    def exact(self, value: object) -> bool:
        return isinstance(value, list)

    def check(self, value: object, path: tuple[str | int, ...]) -> object:
        # A tuple would arrive as a list: refused for the same reason as "42" for an int.
        if not isinstance(value, list):
            raise _Fail(path, f"expected a list, got {_kind(value)}")
        return [self.item.check(item, (*path, i)) for i, item in enumerate(value)]


class _Dict(_Node):
    def __init__(self, value: _Node) -> None:
        self.value = value
        self.label = f"dict[str, {value.label}]"

    def exact(self, value: object) -> bool:
        return isinstance(value, dict)

    def check(self, value: object, path: tuple[str | int, ...]) -> object:
        if not isinstance(value, dict):
            raise _Fail(path, f"expected an object (dict), got {_kind(value)}")
        return _check_dict(value, self.value, path)


def _check_dict(value: dict[Any, Any], item: _Node, path: tuple[str | int, ...]) -> object:
    out: dict[str, object] = {}
    for key, member in value.items():
        if not isinstance(key, str):
            raise _Fail(path, f"JSON object keys are strings, got key {key!r}")
        _check_utf8(key, path)
        out[key] = item.check(member, (*path, key))
    return out


class _Union(_Node):
    def __init__(self, members: list[_Node]) -> None:
        self.members = members
        self.label = " | ".join(m.label for m in members)

    def exact(self, value: object) -> bool:
        return any(m.exact(value) for m in self.members)

    def check(self, value: object, path: tuple[str | int, ...]) -> object:
        # Members of the value's own kind first, so that 1 stays an int in int | float.
        exact = [m for m in self.members if m.exact(value)]
        failures: list[_Fail] = []
        for member in exact + [m for m in self.members if m not in exact]:
            try:
                return member.check(value, path)
            except _Fail as exc:
                failures.append(exc)
        if len(exact) == 1:
            # Only one member could have fitted: its own complaint says more (a bad item
            # inside the list rather than "expected list[int] | null").
            raise failures[0]
        raise _Fail(path, f"expected {self.label}, got {_kind(value)}")


_SCALARS: dict[object, type] = {
    int: int,
    float: float,
    str: str,
    bool: bool,
    None: type(None),
    type(None): type(None),
}


def _plain_node(annotation: object) -> _Node | None:
    """Compile a plain JSON annotation, or return None if it is not one."""
    if annotation is Any:
        return _AnyJson()
    cls = _SCALARS.get(annotation) if _hashable(annotation) else None
    if cls is not None:
        return _Scalar(cls)
    if annotation is list:
        return _List(_AnyJson())
    if annotation is dict:
        return _Dict(_AnyJson())
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is list and len(args) == 1:
        item = _plain_node(args[0])
        return None if item is None else _List(item)
    if origin is dict and len(args) == 2 and args[0] is str:
        value = _plain_node(args[1])
        return None if value is None else _Dict(value)
    if origin is typing.Union or origin is types.UnionType:
        members = [_plain_node(arg) for arg in args]
        if any(m is None for m in members):
            return None
        return _Union([m for m in members if m is not None])
    return None


def _hashable(value: object) -> bool:
    try:
        hash(value)
    except TypeError:
        return False
    return True


class _JsonCodec(TypeCodec[Any]):
    library = "json"

    def __init__(self, node: _Node) -> None:
        self._node = node

    def _check(self, value: object) -> object:
        try:
            return self._node.check(value, ())
        except _Fail as exc:
            raise Invalid([Problem(_join_path(exc.path), exc.message)]) from None
        except RecursionError:
            raise Invalid([Problem("", _TOO_DEEP)]) from None

    def dump(self, value: Any) -> bytes:
        # The same serialiser as Payload.from_json, so a typed task's bytes are exactly
        # what an untyped producer would have sent for the same value.
        return Payload.from_json(self._check(value)).data

    def load(self, data: bytes) -> Any:
        try:
            parsed = json.loads(data.decode("utf-8"), parse_constant=_refuse_constant)
        except ValueError as exc:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
            raise Invalid([Problem("", str(exc))], not_json=True) from None
        except RecursionError:
            raise Invalid([Problem("", _TOO_DEEP)]) from None
        return self._check(parsed)


class _NotJsonError(ValueError):
    """A constant json.loads reads but JSON does not have (a ValueError, which json
    itself raises for what it cannot read)."""


def _refuse_constant(name: str) -> object:
    # json.loads reads NaN, Infinity and -Infinity, which are not JSON.
    raise _NotJsonError(f"{name} is not JSON")
