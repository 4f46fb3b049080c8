"""New job ids: random (version 4) UUIDs in their canonical text form.

``str(uuid.uuid4())`` asks the kernel for 16 random bytes on every call (a system call per
enqueued job) and builds a ``UUID`` object only to format it. :class:`JobIds` takes the
randomness from the same source (``os.urandom``) for 256 ids at once and formats each id
from its bytes directly: the same distribution of ids, about a third of the cost.
"""

from __future__ import annotations

import os

__all__ = ["JobIds"]

# Ids drawn from one read of the kernel's randomness.
_BATCH = 256
# The variant nibble (RFC 9562 section 4.1: 10xx) for each value of the random nibble's
# low two bits.
_VARIANT = "89ab"


class JobIds:
    """A source of new job ids: call it for the next one."""

    __slots__ = ("_random", "_used")

    def __init__(self) -> None:
        self._random = b""
        self._used = 0

    def __call__(self) -> str:
        used = self._used
        if used >= len(self._random):
            self._random, used = os.urandom(16 * _BATCH), 0
        self._used = used + 16
        digits = self._random[used : used + 16].hex()
        # The version nibble is 4; the variant's two high bits are 10 (what uuid.uuid4()
        # sets, leaving the same 122 random bits).
        return (
            f"{digits[:8]}-{digits[8:12]}-4{digits[13:16]}-"
            f"{_VARIANT[int(digits[16], 16) & 3]}{digits[17:20]}-{digits[20:]}"
        )
