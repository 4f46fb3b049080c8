"""A job retry policy: how long a failed job waits before its next attempt, and which
exceptions are not worth another attempt.

Part of the public data model (conventions in ``_model/__init__.py``). Not to be confused
with :class:`~sepp_anyio.RetryPolicy` (``_retries``), which retries the *client's RPCs*
that failed transiently; :class:`Retry` is what a worker does with a *job* whose handler
failed.
"""

from __future__ import annotations

import math
import random as _random
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Literal, TypeAlias

from ._checks import check_int, check_seconds
from ._error_root import InvalidArgumentError, InvalidArgumentTypeError
from ._errors import HandlerError

__all__ = ["DEFAULT_RETRY", "Jitter", "Retry"]

#: ``"full"``: uniform in [0, delay]; ``"equal"``: delay/2 plus uniform in [0, delay/2];
#: ``None``: the delay itself.
Jitter: TypeAlias = Literal["full", "equal"] | None

_JITTERS = ("full", "equal", None)


def _exception_types(value: object, name: str) -> tuple[type[Exception], ...]:
    """``value`` (an exception class, or an iterable of them) as a tuple of classes.

    Raises:
        InvalidArgumentTypeError: an item is not a subclass of ``Exception`` (a
            ``BaseException`` that is not an ``Exception``, such as a cancellation, never
            reaches a retry policy), or is a :class:`HandlerError` (which always settles
            its job as it asks, whatever a policy says).
    """
    items: Iterable[object]
    if isinstance(value, type):
        items = (value,)
    elif isinstance(value, str) or not isinstance(value, Iterable):
        raise InvalidArgumentTypeError(
            f"Retry {name} must be a tuple of exception classes, got {type(value).__name__}"
        )
    else:
        items = value
    classes: list[type[Exception]] = []
    for index, item in enumerate(items):
        if not isinstance(item, type) or not issubclass(item, Exception):
            shown = item.__name__ if isinstance(item, type) else type(item).__name__
            raise InvalidArgumentTypeError(
                f"Retry {name}[{index}] must be a subclass of Exception, got {shown}"
            )
        if issubclass(item, HandlerError):
            raise InvalidArgumentTypeError(
                f"Retry {name}[{index}] is {item.__name__}, a HandlerError: a HandlerError "
                "settles its job as it asks (retry, retry_after, permanent), whatever the "
                "policy says; list other exception types"
            )
        classes.append(item)
    return tuple(classes)


@dataclass(frozen=True, slots=True, kw_only=True)
class Retry:
    """How a worker retries a job whose handler raised: the delay before each next attempt,
    and the exception types that dead-letter the job at once.

    Given to a :class:`~sepp_anyio.Task` (``Task(..., retry=Retry(...))``, for that task's
    jobs) or to a :class:`~sepp_anyio.Worker` (``Worker(..., retry=Retry(...))``, the default
    of every handler; a task's own policy wins). The worker's default, when it is given
    none, is ``Retry(backoff=2.0, factor=2.0, max_delay=60.0, jitter="full")``: 2, 4, 8,
    ... up to 60 seconds, each drawn at random below that.

    What it governs: an exception (other than a :class:`~sepp_anyio.HandlerError`) raised by
    a handler or a middleware, and a job type with no handler (which is retried after the
    policy's delay). What it does not: a ``HandlerError`` settles its job as it asks
    (``retry_after``, ``permanent``, ``retry``); a job timeout is nacked under the queue's
    retry policy; a job a shutdown released is nacked for an immediate retry; a lost lease
    settles nothing. On the job's last attempt the server dead-letters it whatever the
    nack asks.

    The delay after attempt ``n`` (1 for the first delivery) is
    ``min(max_delay, backoff * factor ** (n - 1))``, then jittered: ``"full"`` (uniform in
    [0, delay], the default), ``"equal"`` (delay/2 plus uniform in [0, delay/2]) or
    ``None`` (the delay itself). Jitter spreads jobs that failed together (an outage) so
    that they do not all come back at once. The nack carries the delay, in whole
    milliseconds.

    Which exceptions: one that is an instance of a class in ``dead_letter_on`` (subclasses
    count) is dead-lettered at once; ``dead_letter_on`` wins over ``retry_on``. Any other
    is retried, whether ``retry_on`` names it or not: ``retry_on`` says so explicitly,
    and it cannot take back what ``dead_letter_on`` names.

    Not :class:`~sepp_anyio.RetryPolicy`: that one retries the client's RPCs that failed
    transiently (UNAVAILABLE, ...); this one retries jobs whose handler failed.

    Args:
        backoff: the delay after the first attempt, in seconds (finite, >= 0).
        factor: the growth of the delay per attempt (finite, >= 1).
        max_delay: the cap of any delay, in seconds (finite, >= 0).
        jitter: ``"full"``, ``"equal"`` or ``None``.
        retry_on: exception classes that are retried (documentation: anything not in
            ``dead_letter_on`` is).
        dead_letter_on: exception classes that dead-letter the job at once.
        random: the random source of the jitter (a ``random.Random``; seed one for
            reproducible delays in tests); None: the ``random`` module's.

    Raises:
        InvalidArgumentTypeError: (a ``TypeError``) a field of the wrong type: a number that
            is not one, an exception class that is not an ``Exception`` subclass or is a
            ``HandlerError``; the message names the field.
        InvalidArgumentError: (a ``ValueError``) a number out of range or an unknown
            jitter; the message names the field and the limit.
    """

    #: The delay after the first attempt, in seconds.
    backoff: float = 1.0
    #: The growth of the delay per attempt.
    factor: float = 2.0
    #: The cap of any delay, in seconds.
    max_delay: float = 300.0
    #: ``"full"``, ``"equal"`` or ``None``.
    jitter: Jitter = "full"
    #: Retried (as is anything not in :attr:`dead_letter_on`).
    retry_on: tuple[type[Exception], ...] = ()
    #: Dead-lettered at once (subclasses count); wins over :attr:`retry_on`.
    dead_letter_on: tuple[type[Exception], ...] = ()
    #: The jitter's random source; None: the ``random`` module's.
    random: _random.Random | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "backoff", check_seconds(self.backoff, "Retry backoff"))
        factor = self.factor
        if isinstance(factor, bool) or not isinstance(factor, int | float):
            raise InvalidArgumentTypeError(
                f"Retry factor must be a number, got {type(factor).__name__}"
            )
        if not math.isfinite(factor) or factor < 1.0:
            raise InvalidArgumentError(f"Retry factor must be a finite number >= 1, got {factor}")
        object.__setattr__(self, "factor", float(factor))
        object.__setattr__(self, "max_delay", check_seconds(self.max_delay, "Retry max_delay"))
        if self.jitter not in _JITTERS:
            raise InvalidArgumentError(
                f"Retry jitter must be 'full', 'equal' or None, got {self.jitter!r}"
            )
        object.__setattr__(self, "retry_on", _exception_types(self.retry_on, "retry_on"))
        object.__setattr__(
            self, "dead_letter_on", _exception_types(self.dead_letter_on, "dead_letter_on")
        )
        if self.random is not None and not isinstance(self.random, _random.Random):
            raise InvalidArgumentTypeError(
                f"Retry random must be a random.Random or None, got {type(self.random).__name__}"
            )

    def nominal_delay(self, attempt: int) -> float:
        """The delay after attempt ``attempt`` before jitter:
        ``min(max_delay, backoff * factor ** (attempt - 1))``.

        Raises:
            InvalidArgumentError: ``attempt`` is not an int >= 1.
        """
        attempt = check_int(attempt, "attempt", 1, 2**63 - 1)
        if self.backoff == 0.0 or self.max_delay == 0.0:
            # First, so that an overflowing power cannot turn "no delay" into the cap.
            return 0.0
        try:
            delay = self.backoff * self.factor ** (attempt - 1)
        except OverflowError:
            delay = math.inf
        return min(delay, self.max_delay)

    def delay(self, attempt: int) -> float:
        """The delay after attempt ``attempt`` (1 for the first delivery), jittered:
        what the worker's nack asks for.

        Raises:
            InvalidArgumentError: ``attempt`` is not an int >= 1.
        """
        delay = self.nominal_delay(attempt)
        if self.jitter is None or delay == 0.0:
            return delay
        draw = (self.random or _random).random()  # in [0, 1)
        if self.jitter == "full":
            return delay * draw
        half = delay / 2
        return half + half * draw

    def dead_letters(self, error: BaseException) -> bool:
        """Whether ``error`` dead-letters its job at once (an instance of a class in
        :attr:`dead_letter_on`); False: it is retried after :meth:`delay`."""
        return isinstance(error, self.dead_letter_on)


#: The worker's policy when it is given none: today's ``min(2 ** attempt, 60)`` seconds,
#: with full jitter.
DEFAULT_RETRY = Retry(backoff=2.0, factor=2.0, max_delay=60.0, jitter="full")
