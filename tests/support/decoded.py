"""A type walk of decoded messages: what betterproto2's own decoder does not enforce.

Test support: the oracle of tests/test_proto_codec.py (whatever the compiled decoders
accept must pass it). The library needs no such walk: it decodes through the compiled
codecs (``sepp_anyio._wire._codec``), which refuse a wrong wire type themselves.


betterproto2 0.10 does not check a field's wire type against the field's declared type. A
varint where a string is declared decodes to an ``int``, a length-delimited value where a
number is declared to a ``list`` (read as a packed array), a group to ``None``. protobuf and
prost refuse such a message as undecodable; betterproto2 hands it on, and code reading it
then meets fields of the wrong type (an ``int`` job id, ``[None]`` as the list of jobs).

:func:`check_decoded` walks a decoded message and raises ``ValueError`` naming the first
field whose value does not have its declared type.
"""

from __future__ import annotations

from typing import Any

import betterproto2

__all__ = ["check_decoded"]

_SCALAR_TYPES: dict[str, type | tuple[type, ...]] = {
    betterproto2.TYPE_STRING: str,
    betterproto2.TYPE_BYTES: bytes,
    betterproto2.TYPE_BOOL: bool,
    betterproto2.TYPE_DOUBLE: float,
    betterproto2.TYPE_FLOAT: float,
    betterproto2.TYPE_ENUM: int,
    **{
        name: int
        for name in (
            betterproto2.TYPE_INT32,
            betterproto2.TYPE_INT64,
            betterproto2.TYPE_UINT32,
            betterproto2.TYPE_UINT64,
            betterproto2.TYPE_SINT32,
            betterproto2.TYPE_SINT64,
            betterproto2.TYPE_FIXED32,
            betterproto2.TYPE_FIXED64,
            betterproto2.TYPE_SFIXED32,
            betterproto2.TYPE_SFIXED64,
        )
    },
}
# The Python type a well-known wrapper message (Timestamp, Duration, ...) unwraps to.
_UNWRAPPED: dict[type[Any], type[Any]] = {}


def _unwrapped_type(wrapper: type[Any]) -> type[Any]:
    known = _UNWRAPPED.get(wrapper)
    if known is None:
        known = _UNWRAPPED[wrapper] = type(wrapper().to_wrapped())
    return known


def _check_value(
    value: Any, proto_type: str, message_type: type[Any] | None, unwrap: Any, path: str
) -> None:
    if proto_type == betterproto2.TYPE_MESSAGE:
        if unwrap is not None:
            expected: type[Any] | tuple[type, ...] = _unwrapped_type(unwrap())
        else:
            assert message_type is not None
            expected = message_type
        if not isinstance(value, expected):
            raise ValueError(f"{path} has the wrong wire type (got {type(value).__name__})")
        if unwrap is None:
            _check_message(value, path)
        return
    expected = _SCALAR_TYPES.get(proto_type, object)
    if not isinstance(value, expected):
        raise ValueError(f"{path} has the wrong wire type (got {type(value).__name__})")


def _check_message(message: Any, path: str) -> None:
    # The metadata is typed loosely on purpose: betterproto2's own annotations of it are
    # for its generated code, not for introspection.
    meta: Any = message._betterproto
    for name, field in meta.meta_by_field_name.items():
        value = getattr(message, name)
        where = f"{path}.{name}" if path else name
        if field.proto_type == betterproto2.TYPE_MAP:
            if not isinstance(value, dict):
                raise ValueError(f"{where} has the wrong wire type (got {type(value).__name__})")
            if not value:
                continue
            key_meta, value_meta = field.map_meta
            entry: Any = meta.cls_by_field[name]
            value_type = (
                entry._betterproto.cls_by_field["value"]
                if value_meta.proto_type == betterproto2.TYPE_MESSAGE
                else None
            )
            for key, item in value.items():
                _check_value(key, key_meta.proto_type, None, None, f"{where} key")
                _check_value(item, value_meta.proto_type, value_type, None, f"{where}[{key!r}]")
            continue
        if value is None:
            if field.optional or field.group is not None:
                continue
            raise ValueError(f"{where} has the wrong wire type (no value)")
        message_type = (
            meta.cls_by_field[name]
            if field.proto_type == betterproto2.TYPE_MESSAGE and field.unwrap is None
            else None
        )
        if field.repeated:
            if not isinstance(value, list):
                raise ValueError(f"{where} has the wrong wire type (got {type(value).__name__})")
            for index, item in enumerate(value):
                _check_value(
                    item, field.proto_type, message_type, field.unwrap, f"{where}[{index}]"
                )
            continue
        _check_value(value, field.proto_type, message_type, field.unwrap, where)


def check_decoded(message: betterproto2.Message) -> None:
    """Raise ``ValueError`` if a field of ``message`` (or of a message in it) holds a value
    of another type than its declared one, which is what a wrong wire type decodes to."""
    _check_message(message, "")
