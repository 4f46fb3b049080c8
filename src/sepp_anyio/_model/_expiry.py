"""A job's expiry: the deadline after which a worker no longer starts it.

Part of the public data model (conventions in ``_model/__init__.py``). The deadline travels
in the job's ``custom`` map under :data:`EXPIRES_AT_KEY` as an int of milliseconds since
the Unix epoch (UTC), so a producer in any language can set it and no server change is
needed: a worker that reserves the job at or after that instant does not run it, and
dead-letters it with the reason ``"expired"``.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime, timedelta

from ._checks import check_aware

__all__ = ["EXPIRES_AT_KEY", "NOT_AN_EXPIRY", "expires_at_ms", "expiry_of"]

#: The ``custom`` key of a job's deadline: an int, milliseconds since the Unix epoch.
EXPIRES_AT_KEY = "sepp.expires_at"

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MS = timedelta(milliseconds=1)


class _NotAnExpiry:
    """The type of :data:`NOT_AN_EXPIRY`."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "NOT_AN_EXPIRY"


#: What :func:`expiry_of` returns for a value under the key that is not an int.
NOT_AN_EXPIRY = _NotAnExpiry()


def expires_at_ms(value: object, name: str) -> int:
    """``value`` (a datetime; naive is read as UTC, as ``scheduled_at`` is) in whole
    milliseconds since the epoch, rounded down.

    Raises:
        InvalidArgumentTypeError: ``value`` is not a datetime (the message names ``name``).
    """
    if isinstance(value, datetime) and value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    instant = check_aware(value, name)
    return (instant - _EPOCH) // _MS


def expiry_of(custom: Mapping[str, object]) -> int | _NotAnExpiry | None:
    """The deadline in ``custom`` in milliseconds since the epoch; None when there is none;
    :data:`NOT_AN_EXPIRY` when the key holds something other than an int (a bool is not
    one)."""
    value = custom.get(EXPIRES_AT_KEY)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        return NOT_AN_EXPIRY
    return value
