"""Recognising a server's refusal of a request that is larger than one message may be.

gRPC servers bound the size of a request message, and none advertises the bound: the sepp
protocol's ``GetServerInfo`` has the payload limit (per job, and only the global default)
but not the message limit. A server that gets a larger message refuses the call before
reading it, with a status whose text is the only place the limit is stated:

==============================  ==================  ===================================
server                          status              text
==============================  ==================  ===================================
tonic (the sepp server), and    OUT_OF_RANGE        ``Error, decoded message length too
the reference server                                large: found N bytes, the limit is:
                                                    M bytes``
grpc-go                         RESOURCE_EXHAUSTED  ``grpc: received message larger than
                                                    max (N vs. M)``
grpcio, C++ (C-core)            RESOURCE_EXHAUSTED  ``Received message larger than max
                                                    (N vs. M)``
grpc-java                       RESOURCE_EXHAUSTED  ``gRPC message exceeds maximum size
                                                    M: N``
grpc-dotnet                     RESOURCE_EXHAUSTED  ``Received message exceeds the maximum
                                                    configured message size.``
==============================  ==================  ===================================

Without this, the first reads as an unexpected status and the others as an overloaded
server, which the retry policy would retry, sending the same oversized request again.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

from ._error_root import StatusCode

__all__ = ["SizeRefusal", "size_refusal"]

# At most 19 digits: a bigger number is no byte count, and int() of thousands of digits
# from a hostile server's text would raise.
_N = r"(?P<{}>\d{{1,19}})"
_PATTERNS: Final = (
    re.compile(
        r"message length too large: found "
        + _N.format("size")
        + r" bytes, the limit is: "
        + _N.format("limit")
        + " bytes",
        re.IGNORECASE,
    ),
    re.compile(
        r"received message (?:after decompression )?larger than max \("
        + _N.format("size")
        + r" vs\. "
        + _N.format("limit")
        + r"\)",
        re.IGNORECASE,
    ),
    re.compile(
        r"message exceeds maximum size " + _N.format("limit") + ": " + _N.format("size"),
        re.IGNORECASE,
    ),
    re.compile(r"received message exceeds the maximum configured message size", re.IGNORECASE),
)
_CODES: Final = frozenset({StatusCode.OUT_OF_RANGE, StatusCode.RESOURCE_EXHAUSTED})


@dataclass(frozen=True, slots=True)
class SizeRefusal:
    """What a size refusal says: the request's size and the limit, in bytes (None when
    the text does not say)."""

    size: int | None
    limit: int | None


def size_refusal(code: int, message: str) -> SizeRefusal | None:
    """The refusal a status ``(code, message)`` is, or None if it is no size refusal."""
    if code not in _CODES or not message:
        return None
    for pattern in _PATTERNS:
        found = pattern.search(message)
        if found is not None:
            groups = found.groupdict()
            size, limit = groups.get("size"), groups.get("limit")
            return SizeRefusal(
                None if size is None else int(size), None if limit is None else int(limit)
            )
    return None
