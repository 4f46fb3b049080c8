"""The root of the exception tree and the errors for bad arguments.

Kept apart from :mod:`sepp_anyio._model._errors` (which draws the whole tree and re-exports
these) because the public data types (``_payload``, ``_enqueue``, ...) raise the argument
errors while ``_errors`` itself imports them: this module imports nothing of the
package, so every module can use it.
"""

from __future__ import annotations

import enum
from typing import Any

__all__ = ["InvalidArgumentError", "InvalidArgumentTypeError", "SeppError", "StatusCode"]


class StatusCode(enum.IntEnum):
    """The gRPC status codes (same numbers as every gRPC implementation).

    Ours rather than grpclib's or grpcio's, so the public API depends on neither.
    """

    OK = 0
    CANCELLED = 1
    UNKNOWN = 2
    INVALID_ARGUMENT = 3
    DEADLINE_EXCEEDED = 4
    NOT_FOUND = 5
    ALREADY_EXISTS = 6
    PERMISSION_DENIED = 7
    RESOURCE_EXHAUSTED = 8
    FAILED_PRECONDITION = 9
    ABORTED = 10
    OUT_OF_RANGE = 11
    UNIMPLEMENTED = 12
    INTERNAL = 13
    UNAVAILABLE = 14
    DATA_LOSS = 15
    UNAUTHENTICATED = 16


def _rebuild(cls: type[SeppError], message: str) -> SeppError:
    # Subclasses take different constructor arguments, so unpickling cannot simply call
    # cls(*args); rebuild from the message and let the pickled __dict__ restore the rest.
    err = cls.__new__(cls, message)
    Exception.__init__(err, message)
    return err


class SeppError(Exception):
    """Root of every error sepp-anyio raises (except :class:`HandlerError`, see there).

    Args:
        message: the human explanation, which is also ``str(error)``.
        code: the gRPC status the error was built from, if any.
        status_message: the server's status text, if any.
    """

    #: The gRPC status the error came from; ``None`` if the client raised it itself.
    code: StatusCode | None
    #: The server's status text (possibly empty); ``None`` if there was no status.
    status_message: str | None

    def __init__(
        self,
        message: str,
        *,
        code: StatusCode | None = None,
        status_message: str | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.status_message = status_message

    def __reduce__(self) -> tuple[Any, ...]:
        # Keeps every error picklable and copyable (anyio.to_process, multiprocessing
        # logging, copy.copy) whatever its constructor signature.
        return (_rebuild, (type(self), str(self)), self.__dict__.copy())


class InvalidArgumentError(SeppError, ValueError):
    """An argument has the right type but a value sepp-anyio refuses (an empty queue
    name, a priority of 12, a negative lease, a malformed target, ...).

    Raised where the mistake is made, before any network activity; the message names the
    argument and the limit. Also a :class:`ValueError`, so ``except ValueError`` keeps
    working. Not to be confused with the server's INVALID_ARGUMENT status, which is
    :class:`InvalidRequestError`.
    """


class InvalidArgumentTypeError(SeppError, TypeError):
    """An argument has the wrong type (a ``str`` where a list of queues is expected, a
    ``bool`` where a number of seconds is, ...).

    Raised where the mistake is made, before any network activity. Also a
    :class:`TypeError`, so ``except TypeError`` keeps working.
    """
