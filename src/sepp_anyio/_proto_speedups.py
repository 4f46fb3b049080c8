"""A faster default lookup for the generated message classes (encode path).

betterproto2 compares every field with its default when encoding, and it
builds that default each time inside ``warnings.catch_warnings()`` (to hide
deprecation warnings of deprecated fields), which costs more than the rest of
the field's encoding: about 40% of encoding an ``AckRequest``. Defaults of
immutable types (numbers, strings, bytes, enums, None) are the same every
time, so they are built once per class and field and reused; mutable ones
(lists, maps, messages) are still built fresh.

Only the classes generated for this package (``sepp_anyio._proto``) are
changed, by setting a class attribute: betterproto2 itself and any other
generated code in the process are left alone. The generated files are not
edited. tests/test_proto_speedups.py checks that the output is byte for byte
what betterproto2 produces on its own.
"""

from __future__ import annotations

import enum
import warnings
from types import ModuleType
from typing import Any

import betterproto2

from ._proto.google import protobuf as _google_protobuf
from ._proto.sepp import v1 as _sepp_v1
from ._wire import _codec as _proto_codec

__all__ = ["install"]

_IMMUTABLE = (int, float, str, bytes, bool, type(None), enum.Enum)
_CACHE: dict[tuple[type[Any], str], Any] = {}
_MISSING = object()


def _get_field_default(self: betterproto2.Message, field_name: str) -> Any:
    key = (type(self), field_name)
    value = _CACHE.get(key, _MISSING)
    if value is not _MISSING:
        return value
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=DeprecationWarning)
        value = self._betterproto.default_gen[field_name]()  # type: ignore[arg-type]
    if isinstance(value, _IMMUTABLE):
        _CACHE[key] = value
    return value


def _message_classes(module: ModuleType) -> list[type[betterproto2.Message]]:
    return [
        value
        for value in vars(module).values()
        if isinstance(value, type)
        and issubclass(value, betterproto2.Message)
        and value.__module__ == module.__name__
    ]


def install() -> None:
    """Give this package's generated message classes the cached lookup and compiled
    encoders/decoders (idempotent)."""
    classes = [cls for module in (_sepp_v1, _google_protobuf) for cls in _message_classes(module)]
    for cls in classes:
        cls._get_field_default = _get_field_default  # type: ignore[method-assign]
    _proto_codec.install(classes)


install()
