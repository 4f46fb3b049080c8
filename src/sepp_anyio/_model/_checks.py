"""The validation rules of arguments, each in one place.

Every public constructor and method that takes a queue name, a number of seconds, a count,
a datetime or a ``custom`` map checks it with the rule here, so that the same value is
accepted or refused alike everywhere (the client, the types, the worker, tasks, the CLI,
and for queue names the reference server too). A refusal is an
:class:`~sepp_anyio.InvalidArgumentError` (a ``ValueError``) or an
:class:`~sepp_anyio.InvalidArgumentTypeError` (a ``TypeError``) whose message starts with
the argument's name.

The ``*_problem`` functions are the rules themselves, as a phrase (``"must not contain
'/'"``) or None; the ``check_*`` functions raise with the argument's name in front. A
caller that reports differently (argparse, the server's status details) uses the phrase.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Literal

from ._error_root import InvalidArgumentError, InvalidArgumentTypeError

__all__ = [
    "INT64_MAX",
    "INT64_MIN",
    "MAX_PRIORITY",
    "UINT32_MAX",
    "check_aware",
    "check_count",
    "check_custom",
    "check_int",
    "check_queue_name",
    "check_queue_names",
    "check_seconds",
    "check_str",
    "queue_name_problem",
    "seconds_problem",
]

INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1
UINT32_MAX = 2**32 - 1
#: Priorities run from 0 to this (the protocol's range).
MAX_PRIORITY = 9

#: The least a duration may be: ``"zero"`` (>= 0), ``"positive"`` (> 0; durations used
#: only here, such as timeouts) or ``"millisecond"`` (>= 0.001: durations sent to the
#: server, which counts whole milliseconds, so anything shorter would arrive as zero).
Minimum = Literal["zero", "positive", "millisecond"]


def check_str(value: object, name: str, *, allow_empty: bool = False) -> str:
    """``value`` if it is a str encodable as UTF-8 (and not empty unless allowed)."""
    if not isinstance(value, str):
        raise InvalidArgumentTypeError(f"{name} must be a str, got {type(value).__name__}")
    if not value and not allow_empty:
        raise InvalidArgumentError(f"{name} must not be empty")
    try:
        # Protobuf strings are UTF-8 on the wire; a lone surrogate would only fail later,
        # deep inside serialisation, with no hint of which field it came from.
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidArgumentError(f"{name} is not encodable as UTF-8: {exc.reason}") from None
    return value


def check_int(value: object, name: str, lo: int, hi: int) -> int:
    """``value`` if it is an int (not a bool) from ``lo`` to ``hi``, both included."""
    # bool is an int subclass; True as a priority is almost certainly a bug.
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidArgumentTypeError(f"{name} must be an int, got {type(value).__name__}")
    if not lo <= value <= hi:
        raise InvalidArgumentError(f"{name} must be between {lo} and {hi}, got {value}")
    return value


def check_count(value: object, name: str, *, minimum: int = 1) -> int:
    """``value`` if it is an int (not a bool) of at least ``minimum`` (a number of jobs...)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidArgumentTypeError(f"{name} must be an int, got {type(value).__name__}")
    if value < minimum:
        raise InvalidArgumentError(f"{name} must be >= {minimum}, got {value}")
    return value


def seconds_problem(seconds: float, minimum: Minimum = "zero") -> str | None:
    """Why ``seconds`` is not an acceptable duration, or None (see :data:`Minimum`)."""
    if not math.isfinite(seconds):
        return "must be a finite number of seconds"
    if minimum == "millisecond":
        if seconds < 0.001:
            return "must be at least 0.001 seconds (1 ms)"
    elif minimum == "positive":
        if seconds <= 0:
            return "must be > 0 seconds"
    elif seconds < 0:
        return "must be >= 0 seconds"
    return None


def check_seconds(value: object, name: str, *, minimum: Minimum = "zero") -> float:
    """``value`` as a float if it is a finite number of seconds of at least ``minimum``."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidArgumentTypeError(
            f"{name} must be a number of seconds, got {type(value).__name__}"
        )
    seconds = float(value)
    problem = seconds_problem(seconds, minimum)
    if problem is not None:
        raise InvalidArgumentError(f"{name} {problem}, got {value}")
    return seconds


def check_aware(value: object, name: str) -> datetime:
    """``value`` in UTC if it is a timezone-aware datetime."""
    if not isinstance(value, datetime):
        raise InvalidArgumentTypeError(f"{name} must be a datetime, got {type(value).__name__}")
    if value.tzinfo is None or value.utcoffset() is None:
        raise InvalidArgumentError(
            f"{name} must be timezone-aware (for example datetime.now(timezone.utc)); "
            "a naive datetime is ambiguous"
        )
    return value.astimezone(UTC)


def queue_name_problem(name: str) -> str | None:
    """Why ``name`` is not a valid queue name (``"must not be empty"``...), or None.

    The server's structural rule. The length limit is not checked here: it is the
    server's (``QueueNameTooLong`` on enqueue, a message of its own on reserve).
    """
    if not name:
        return "must not be empty"
    if name in (".", ".."):
        return "must not be '.' or '..'"
    if "/" in name:
        return "must not contain '/'"
    # Rust's char::is_control, i.e. the Unicode Cc category: C0, DEL and C1.
    if any(c < " " or "\x7f" <= c <= "\x9f" for c in name):
        return "must not contain control characters"
    return None


def check_queue_name(value: object, name: str) -> str:
    """``value`` if it is a valid queue name.

    The server refuses the others with a generic ``InvalidRequest``; catching them here
    gives an error that points at the argument.
    """
    queue = check_str(value, name, allow_empty=True)
    problem = queue_name_problem(queue)
    if problem is not None:
        if queue in (".", ".."):
            # The rule's phrase names both; the argument's error names the one given.
            problem = f"must not be {queue!r}"
        raise InvalidArgumentError(
            f"{name} {problem}" if not queue else f"{name} {problem}, got {queue!r}"
        )
    return queue


def check_queue_names(value: Iterable[str], name: str = "queues") -> list[str]:
    """``value`` as a list if it is a non-empty sequence of valid queue names (not a str)."""
    if isinstance(value, str):
        raise InvalidArgumentTypeError(
            f"{name} must be a sequence of queue names, not a single str"
        )
    queues = list(value)
    if not queues:
        raise InvalidArgumentError(f"{name} must name at least one queue")
    for index, queue in enumerate(queues):
        check_queue_name(queue, f"{name}[{index}]")
    return queues


def check_custom(custom: object, name: str = "custom") -> dict[str, str | int | float | bool]:
    """``custom`` as a dict if it maps str keys to the four scalar types the protocol carries."""
    if not isinstance(custom, Mapping):
        raise InvalidArgumentTypeError(f"{name} must be a mapping of str to str/int/float/bool")
    checked: dict[str, str | int | float | bool] = {}
    for key, value in custom.items():
        check_str(key, f"{name} key")
        label = f"{name}[{key!r}]"
        # Order matters: bool is a subclass of int and must keep its own wire branch.
        if isinstance(value, bool):
            checked[key] = value
        elif isinstance(value, int):
            checked[key] = check_int(value, label, INT64_MIN, INT64_MAX)
        elif isinstance(value, float):
            checked[key] = value
        elif isinstance(value, str):
            checked[key] = check_str(value, label, allow_empty=True)
        else:
            raise InvalidArgumentTypeError(
                f"{label} must be str, int, float or bool, got {type(value).__name__}"
            )
    return checked
