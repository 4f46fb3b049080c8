"""Payload codecs: turn Python objects into :class:`Payload` bytes and back, by encoding.

The protocol treats the payload as opaque bytes with a free-form ``encoding`` label and has
no registry of its own, so producers and workers must agree. This module is that agreement
for Python code: :func:`encode_payload` picks a codec by encoding, :func:`decode_payload`
picks one by the payload's label. Three are built in:

========================================  =================================================
``application/json`` (also ``json``,       :func:`json.dumps` (compact, UTF-8) / ``loads``
``text/json`` and any ``*+json``)
``text/plain`` (charset from the label)    ``str`` <-> bytes
``application/octet-stream``               ``bytes`` unchanged
========================================  =================================================

Register more (msgpack, protobuf, ...) with :func:`register_codec`. Lookup ignores case
and parameters: ``"Application/JSON; charset=utf-8"`` finds the JSON codec.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ._error_root import InvalidArgumentError, InvalidArgumentTypeError
from ._payload import JSON_ENCODING, Payload, _charset, _is_json_encoding, _media_type

__all__ = ["PayloadCodec", "decode_payload", "encode_payload", "register_codec"]


@dataclass(frozen=True, slots=True)
class PayloadCodec:
    """How to turn objects into bytes and back for one media type.

    ``encode(obj, encoding)`` returns the bytes; ``decode(data, encoding)`` the object.
    Both receive the full encoding label, parameters included, so a codec can honour a
    ``charset=`` or a schema parameter.
    """

    #: The media type this codec serves, such as ``"application/msgpack"`` (no parameters).
    media_type: str
    encode: Callable[[Any, str], bytes]
    decode: Callable[[bytes, str], Any]


def _json_encode(obj: Any, encoding: str) -> bytes:
    return Payload.from_json(obj, encoding=encoding).data


def _json_decode(data: bytes, encoding: str) -> Any:
    return Payload(data, encoding).json()


def _text_encode(obj: Any, encoding: str) -> bytes:
    if not isinstance(obj, str):
        raise InvalidArgumentTypeError(f"the text codec encodes str, got {type(obj).__name__}")
    return obj.encode(_charset(encoding))


def _text_decode(data: bytes, encoding: str) -> Any:
    return data.decode(_charset(encoding))


def _bytes_encode(obj: Any, encoding: str) -> bytes:
    if not isinstance(obj, bytes | bytearray | memoryview):
        raise InvalidArgumentTypeError(
            f"the octet-stream codec encodes bytes, got {type(obj).__name__}"
        )
    return bytes(obj)


def _bytes_decode(data: bytes, encoding: str) -> Any:
    return data


_REGISTRY: dict[str, PayloadCodec] = {}


def register_codec(codec: PayloadCodec, *, replace: bool = False) -> None:
    """Make ``codec`` available to :func:`encode_payload` and :func:`decode_payload`.

    The registry is process-wide; register at import time, not per request.

    Raises:
        InvalidArgumentError: if a codec for that media type exists and ``replace`` is
            false, or the media type is empty.
    """
    key = _media_type(codec.media_type)
    if not key:
        raise InvalidArgumentError("PayloadCodec.media_type must not be empty")
    if key in _REGISTRY and not replace:
        raise InvalidArgumentError(
            f"a codec for {key!r} is already registered; pass replace=True to override it"
        )
    _REGISTRY[key] = codec


def _lookup(encoding: str) -> PayloadCodec:
    key = _media_type(encoding)
    codec = _REGISTRY.get(key)
    if codec is None and _is_json_encoding(encoding):
        codec = _REGISTRY.get(JSON_ENCODING)
    if codec is None:
        known = ", ".join(sorted(_REGISTRY)) or "none"
        raise InvalidArgumentError(
            f"no payload codec for encoding {encoding!r} (registered: {known}); "
            "use register_codec() or build the Payload yourself"
        )
    return codec


def encode_payload(obj: Any, encoding: str = JSON_ENCODING) -> Payload:
    """Encode ``obj`` with the codec for ``encoding`` and label the payload with it.

    Raises:
        InvalidArgumentError: if no codec serves ``encoding``, or the result is empty
            (a payload may not be empty: send ``payload=None`` instead).
        InvalidArgumentTypeError: if a built-in codec cannot encode ``obj`` (the text
            codec takes ``str``, the octet-stream codec bytes); a registered codec's own
            errors, and :func:`json.dumps`'s ``TypeError``/``ValueError``, pass through.
    """
    return Payload(_lookup(encoding).encode(obj, encoding), encoding)


def decode_payload(payload: Payload) -> Any:
    """Decode ``payload`` with the codec for its encoding.

    Raises:
        InvalidArgumentError: if no codec serves the encoding.
        ValueError: if the bytes are invalid for it (``json.JSONDecodeError`` and
            ``UnicodeDecodeError`` pass through; both are ``ValueError``\\ s).
    """
    return _lookup(payload.encoding).decode(payload.data, payload.encoding)


register_codec(PayloadCodec(JSON_ENCODING, _json_encode, _json_decode))
register_codec(PayloadCodec("text/plain", _text_encode, _text_decode))
register_codec(PayloadCodec("application/octet-stream", _bytes_encode, _bytes_decode))
