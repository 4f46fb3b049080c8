"""``grpc-timeout``: ``TimeoutValue TimeoutUnit``, at most 8 ASCII digits and one unit out
of ``HMSmun`` (hours, minutes, seconds, milli-, micro-, nanoseconds).

One grammar for both roles (grpc-go's): the client writes it, the server reads it.
"""

from __future__ import annotations

import math
from typing import Final

__all__ = [
    "STABLE_TIMEOUT_FROM",
    "STABLE_TIMEOUT_UP_TO",
    "TimeoutSyntaxError",
    "decode_timeout",
    "encode_stable_timeout",
    "encode_timeout",
]

# Finest first: the encoder picks the finest unit whose value fits in 8 digits.
_UNITS: Final = (
    ("n", 1e-9),
    ("u", 1e-6),
    ("m", 1e-3),
    ("S", 1.0),
    ("M", 60.0),
    ("H", 3600.0),
)
_SECONDS_BY_UNIT_BYTE: Final = {ord(unit): scale for unit, scale in _UNITS}
_MAX_VALUE: Final = 99_999_999


class TimeoutSyntaxError(ValueError):
    """A received ``grpc-timeout`` that is not 1 to 8 digits and a unit."""


def encode_timeout(seconds: float) -> bytes:
    """A timeout as a ``grpc-timeout`` value.

    Picks the finest unit whose value fits the protocol's 8 digits and rounds **up**, so
    the server never sees a deadline earlier than the client's. A non-positive timeout
    (or NaN) is sent as ``1n``, already due; anything beyond the largest encodable value
    is capped at 99999999 hours.
    """
    if not seconds > 0:  # also catches NaN
        return b"1n"
    for unit, scale in _UNITS:
        value = math.ceil(seconds / scale)
        if value <= _MAX_VALUE:
            return b"%d%s" % (value, unit.encode("ascii"))
    return b"%dH" % _MAX_VALUE


#: From this many seconds up, :func:`encode_stable_timeout` sends whole seconds.
STABLE_TIMEOUT_FROM: Final = 10.0
#: ... and up to this many (the protocol's 8 digits); beyond, None.
STABLE_TIMEOUT_UP_TO: Final = _MAX_VALUE


def encode_stable_timeout(seconds: float) -> bytes | None:
    """A ``grpc-timeout`` value that is the same on every call made with the same timeout:
    whole seconds, rounded up, for timeouts of at least :data:`STABLE_TIMEOUT_FROM`
    seconds; None below that (use :func:`encode_timeout`).

    The finest unit changes with every call (the microseconds between computing the
    deadline and sending the header), so that value can only be sent as a literal, which
    every server decodes afresh. A whole-second value repeats, so it is indexed once in
    the HPACK table and then sent (and decoded) as a one-byte reference. The server gets
    at most one second (a tenth, at worst) more than the client, which enforces its own
    deadline.
    """
    if not seconds >= STABLE_TIMEOUT_FROM or seconds > STABLE_TIMEOUT_UP_TO:
        return None
    return b"%dS" % math.ceil(seconds)


def decode_timeout(value: bytes, ceiling: float = math.inf) -> float:
    """Seconds of a ``grpc-timeout`` value, at most ``ceiling``.

    ``0S`` is a valid (already due) timeout; an overflowing number of hours is clamped to
    ``ceiling`` like any other.

    Raises:
        TimeoutSyntaxError: not 1 to 8 ASCII digits followed by one of ``HMSmun``.
    """
    if not 2 <= len(value) <= 9:
        raise TimeoutSyntaxError("grpc-timeout must be 1 to 8 digits and a unit")
    scale = _SECONDS_BY_UNIT_BYTE.get(value[-1])
    digits = value[:-1]
    # bytes.isdigit() is ASCII-only: no "1.5", no "-1", no other script's digits.
    if scale is None or not digits.isdigit():
        raise TimeoutSyntaxError("grpc-timeout must be 1 to 8 digits and a unit out of HMSmun")
    seconds = int(digits) * scale
    return seconds if seconds < ceiling else ceiling
