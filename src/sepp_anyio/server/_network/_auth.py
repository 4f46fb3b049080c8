"""API-key authentication, exactly as the sepp server does it.

* no ``[auth] api_keys`` at all: every caller is allowed, the header ignored;
* an empty list: every call is refused;
* otherwise ``authorization: Bearer <key>`` must carry one of the keys. The
  ``Bearer`` prefix (plus one space) is matched exactly and case-sensitively.

Used by the network service and the in-memory channel alike, so both answer
with the same UNAUTHENTICATED messages.
"""

from __future__ import annotations

import hmac
from collections.abc import Iterable

from sepp_anyio._model._error_root import StatusCode

from .._config._sections import ApiKey
from .._errors import EngineError

__all__ = ["MISSING_KEY", "WRONG_KEY", "authenticate"]

MISSING_KEY = "missing API key; expected an `authorization: Bearer <key>` header"
WRONG_KEY = "invalid API key"
_PREFIX = "Bearer "


def authenticate(header: str | None, api_keys: Iterable[ApiKey] | None) -> None:
    """Check one call's ``authorization`` header value against the keys.

    Raises:
        EngineError: UNAUTHENTICATED with the server's message.
    """
    if api_keys is None:
        return
    if header is None or not header.startswith(_PREFIX):
        raise EngineError(StatusCode.UNAUTHENTICATED, MISSING_KEY)
    offered = header[len(_PREFIX) :].encode("utf-8", "surrogateescape")
    # Compare against every key in constant time, so the reply's timing
    # doesn't leak how much of a key was right.
    matched = False
    for entry in api_keys:
        matched |= hmac.compare_digest(offered, entry.key.encode("ascii"))
    if not matched:
        raise EngineError(StatusCode.UNAUTHENTICATED, WRONG_KEY)
