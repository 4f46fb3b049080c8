"""Exception groups, seen through: the one exception a task group's failure carries.

A task group wraps whatever its body or a child raised in an ``ExceptionGroup``, nested
once per task group it crossed. Where exactly one exception was raised, callers want that
exception (to map it to an exit status, to re-raise it as if there were no task group, to
name a connect failure's cause); where several were, the group itself is the answer.
"""

from __future__ import annotations

__all__ = ["unwrap"]


def unwrap(error: BaseException) -> BaseException:
    """The lone exception inside ``error``'s nested single-member groups; else ``error``.

    Unwrapping stops at the first group with more than one member, which is returned as it
    is; an exception that is not a group is returned unchanged.
    """
    while isinstance(error, BaseExceptionGroup) and len(error.exceptions) == 1:
        error = error.exceptions[0]
    return error
