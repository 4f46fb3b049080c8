"""Request metadata encoding and response metadata decoding.

gRPC metadata keys are lowercase ASCII (``0-9 a-z _ . -``); values are
printable ASCII, except for keys ending in ``-bin``, whose values are
arbitrary bytes sent as unpadded base64. Reserved HTTP/2 and ``grpc-`` keys
are refused, because sending them would corrupt the call.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Collection, Mapping, Sequence

from multidict import MultiDict

from .._model._error_root import InvalidArgumentError, InvalidArgumentTypeError

__all__ = ["MetadataLike", "decode_metadata", "encode_metadata"]

MetadataLike = Mapping[str, str | bytes] | Collection[tuple[str, str | bytes]]

_KEY = re.compile(r"[0-9a-z_.\-]+")
_VALUE = re.compile(rb"[ -~]*")
_RESERVED = frozenset({"te", "content-type", "user-agent", "host", "connection"})


def encode_metadata(metadata: MetadataLike | None) -> list[tuple[bytes, bytes]]:
    """Validate and encode metadata into HTTP/2 header pairs.

    Raises:
        ValueError: a key is malformed or reserved, or a text value holds a
            character outside printable ASCII (CR/LF included).
        TypeError: a ``-bin`` value is not bytes, or a text value is not str.
    """
    if not metadata:
        return []
    items = metadata.items() if isinstance(metadata, Mapping) else metadata
    out: list[tuple[bytes, bytes]] = []
    for key, value in items:
        if (
            not isinstance(key, str)
            or not _KEY.fullmatch(key)
            or key in _RESERVED
            or key.startswith("grpc-")
        ):
            raise InvalidArgumentError(f"invalid metadata key {key!r}")
        if key.endswith("-bin"):
            if not isinstance(value, bytes | bytearray | memoryview):
                raise InvalidArgumentTypeError(
                    f"metadata {key!r} ends in -bin, so its value must be bytes"
                )
            encoded = base64.b64encode(bytes(value)).rstrip(b"=")
        else:
            if not isinstance(value, str):
                raise InvalidArgumentTypeError(
                    f"metadata {key!r} must have a str value (or end in -bin)"
                )
            try:
                encoded = value.encode("ascii")
            except UnicodeEncodeError:
                raise InvalidArgumentError(
                    f"metadata {key!r} must be printable ASCII (use a -bin key for bytes)"
                ) from None
            if not _VALUE.fullmatch(encoded):
                raise InvalidArgumentError(
                    f"metadata {key!r} must be printable ASCII (use a -bin key for bytes)"
                )
        out.append((key.encode("ascii"), encoded))
    return out


def _b64decode_unpadded(value: bytes) -> bytes:
    return base64.b64decode(value + b"=" * (-len(value) % 4))


def decode_metadata(headers: Sequence[tuple[bytes, bytes]]) -> MultiDict[str | bytes]:
    """Response headers or trailers as metadata (pseudo and grpc- keys left out)."""
    result: MultiDict[str | bytes] = MultiDict()
    for raw_key, raw_value in headers:
        key = raw_key.decode("latin-1")
        if key.startswith((":", "grpc-")) or key in _RESERVED:
            continue
        if key.endswith("-bin"):
            try:
                result.add(key, _b64decode_unpadded(raw_value))
            except ValueError:
                continue  # a malformed binary header is not worth failing a call
        else:
            result.add(key, raw_value.decode("latin-1"))
    return result
