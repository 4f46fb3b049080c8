"""Retries: a handler's retry directive and the client's call retry policy.

Part of the public data model (conventions in ``_model/__init__.py``).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Literal, TypeAlias

from ._checks import (
    check_seconds,
)
from ._error_root import InvalidArgumentError, InvalidArgumentTypeError

__all__ = ["RetryDirective", "RetryPolicy"]


_RetryKind: TypeAlias = Literal["default", "after", "dead_letter"]


@dataclass(frozen=True, slots=True)
class RetryDirective:
    """What the server should do with a job that is nacked.

    Build one with :meth:`default`, :meth:`after` or :meth:`dead_letter`.

    ``kind`` is ``"default"`` (the queue's retry policy), ``"after"`` (retry after
    :attr:`delay` seconds) or ``"dead_letter"`` (give up now). On the final attempt every
    kind dead-letters.

    Raises:
        InvalidArgumentError: for an unknown kind, or a delay that is missing, negative or not
            finite for ``"after"`` (or given for another kind).
    """

    #: ``"default"``, ``"after"`` or ``"dead_letter"``.
    kind: _RetryKind
    #: Seconds to wait before the retry; only for ``kind == "after"``.
    delay: float | None = None

    def __post_init__(self) -> None:
        if self.kind not in ("default", "after", "dead_letter"):
            raise InvalidArgumentError(
                f"RetryDirective.kind must be 'default', 'after' or 'dead_letter', "
                f"got {self.kind!r}"
            )
        if self.kind == "after":
            if self.delay is None:
                raise InvalidArgumentError("RetryDirective 'after' needs a delay in seconds")
            object.__setattr__(self, "delay", check_seconds(self.delay, "delay"))
        elif self.delay is not None:
            raise InvalidArgumentError(f"RetryDirective {self.kind!r} takes no delay")

    @classmethod
    def default(cls) -> RetryDirective:
        """Retry under the queue's own policy."""
        return cls("default")

    @classmethod
    def after(cls, seconds: float) -> RetryDirective:
        """Retry no sooner than ``seconds`` from now (finite, >= 0; sent in whole ms)."""
        return cls("after", seconds)

    @classmethod
    def dead_letter(cls) -> RetryDirective:
        """Do not retry: move the job to the dead-letter queue now."""
        return cls("dead_letter")


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How the client retries RPCs that failed transiently (not how jobs are retried).

    The defaults make no retries (``max_attempts=1``). Retried: UNAVAILABLE,
    DEADLINE_EXCEEDED, ABORTED and RESOURCE_EXHAUSTED; an enqueue with any job lacking an
    idempotency key only on UNAVAILABLE and RESOURCE_EXHAUSTED, because the others leave it
    unknown whether the jobs were committed. Reserve and drain are never retried.

    Validation: ``max_attempts`` is raised to at least 1 and ``multiplier`` to at least
    1.0 (matching the other sepp clients); the two backoffs must be finite and >= 0.

    Raises:
        InvalidArgumentTypeError: for a non-numeric field.
        InvalidArgumentError: for a negative or non-finite backoff.
    """

    #: Total tries per call, including the first.
    max_attempts: int = 1
    #: Delay before the first retry, in seconds.
    initial_backoff: float = 0.1
    #: Upper bound of any delay, in seconds.
    max_backoff: float = 10.0
    #: Growth factor of the delay after each retry.
    multiplier: float = 2.0
    #: Scale each delay by a random factor in [0.5, 1.0) ("equal jitter").
    jitter: bool = True

    def __post_init__(self) -> None:
        if isinstance(self.max_attempts, bool) or not isinstance(self.max_attempts, int):
            raise InvalidArgumentTypeError(
                f"max_attempts must be an int, got {type(self.max_attempts).__name__}"
            )
        object.__setattr__(self, "max_attempts", max(1, self.max_attempts))
        object.__setattr__(
            self, "initial_backoff", check_seconds(self.initial_backoff, "initial_backoff")
        )
        object.__setattr__(self, "max_backoff", check_seconds(self.max_backoff, "max_backoff"))
        if isinstance(self.multiplier, bool) or not isinstance(self.multiplier, int | float):
            raise InvalidArgumentTypeError(
                f"multiplier must be a number, got {type(self.multiplier).__name__}"
            )
        if math.isnan(self.multiplier):
            raise InvalidArgumentError("multiplier must be a number >= 1.0, got nan")
        object.__setattr__(self, "multiplier", max(1.0, float(self.multiplier)))

    def backoff(self, retry_index: int) -> float:
        """The delay in seconds before retry number ``retry_index`` (0 for the first retry).

        ``initial_backoff * multiplier ** retry_index``, capped at ``max_backoff``; with
        jitter, scaled by a random factor in [0.5, 1.0) so that clients failing together do
        not retry in lockstep, while the delay never drops below half its nominal value.

        Raises:
            InvalidArgumentError: if ``retry_index`` is negative.
        """
        if retry_index < 0:
            raise InvalidArgumentError(f"retry_index must be >= 0, got {retry_index}")
        if self.initial_backoff == 0.0:
            # Checked first so that an overflowing power cannot turn "no delay" into the cap.
            delay = 0.0
        else:
            try:
                delay = self.initial_backoff * self.multiplier**retry_index
            except OverflowError:
                delay = math.inf
        delay = min(delay, self.max_backoff)
        if self.jitter:
            delay *= 0.5 + random.random() * 0.5
        return delay
