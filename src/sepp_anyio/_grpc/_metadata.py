"""Custom metadata: the rules of its keys and values, for what we send and what we receive.

Keys are lowercase ASCII (``0-9 a-z _ . -``). Values are printable ASCII (0x20-0x7E),
except under keys ending in ``-bin``, whose values are arbitrary bytes sent as base64
(unpadded when we send; padded or not when we receive). HTTP/2's own and gRPC's reserved
keys (``te``, ``content-type``, ``grpc-*`` ...) are refused when sending, because sending
them would corrupt the call.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Collection, Mapping, Sequence
from typing import Final

from .._model._error_root import InvalidArgumentError, InvalidArgumentTypeError

__all__ = ["MetadataLike", "encode_metadata", "metadata_problem"]

#: Metadata as callers give it: a mapping, or pairs (a key may repeat).
MetadataLike = Mapping[str, str | bytes] | Collection[tuple[str, str | bytes]]

_KEY: Final = re.compile(r"[0-9a-z_.\-]+")
_RESERVED: Final = frozenset({"te", "content-type", "user-agent", "host", "connection"})


#: The bytes a text value may hold (0x20-0x7E).
_PRINTABLE: Final = bytes(range(0x20, 0x7F))


def _printable(value: bytes) -> bool:
    """The value rule of a key that does not end in ``-bin``."""
    # Deleting every allowed byte leaves nothing: one C pass, where a loop over the bytes
    # cost a generator step per character of every header of every call.
    return not value.translate(None, _PRINTABLE)


def _base64(value: bytes) -> bool:
    """The value rule of a ``-bin`` key: base64, padded or not."""
    try:
        binascii.a2b_base64(value + b"=" * (-len(value) % 4), strict_mode=True)
    except binascii.Error:
        return False
    return True


def encode_metadata(metadata: MetadataLike | None) -> list[tuple[bytes, bytes]]:
    """Validate metadata to send and encode it as HTTP/2 header pairs.

    Raises:
        InvalidArgumentError: a key is malformed or reserved, or a text value holds a
            character outside printable ASCII (CR and LF included).
        InvalidArgumentTypeError: a ``-bin`` value is not bytes, or a text value is not a
            str.
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
            encoded = value.encode("utf-8", "surrogatepass")
            if not _printable(encoded):
                raise InvalidArgumentError(
                    f"metadata {key!r} must be printable ASCII (use a -bin key for bytes)"
                )
        out.append((key.encode("ascii"), encoded))
    return out


def metadata_problem(headers: Sequence[tuple[bytes, bytes]]) -> str | None:
    """Why received metadata is unusable, or None (pseudo-headers are not metadata).

    The reason names the key, never the value (it may be a secret).
    """
    for name, value in headers:
        if name[:1] == b":":
            continue
        if name.endswith(b"-bin"):
            if not _base64(value):
                return f"metadata {name.decode('ascii', 'replace')!r}: value is not base64"
        elif not _printable(value):
            return f"metadata {name.decode('ascii', 'replace')!r}: value is not printable ASCII"
    return None
