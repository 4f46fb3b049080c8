"""Importing the module a TARGET names (``sepp-anyio worker`` and ``cron``), and what its
failures mean.

The commands import the target from inside their own event loop, before connecting. That
is what lets them tell a module that starts an event loop of its own when imported (a
``worker.py`` ending in ``anyio.run(main)`` without an ``if __name__ == "__main__":``
guard): outside a loop, that call would run the module's own program, its worker with
its own settings, for as long as it lasts, and the command's worker would start only
after it, if ever. Inside the command's loop the call fails at once (anyio refuses to run
a loop in a thread that runs one; so do asyncio and trio for a loop of their own kind),
and the error's traceback shows which run function failed: the command reports that, with
the fix, as a usage error (status 2). What it cannot see: ``trio.run`` under ``--backend
asyncio`` and ``asyncio.run`` under ``--backend trio``, which nest without complaint.

A refusal by the library of something the module gave it at import time (a ``Cron`` with
a bad expression, a handler of the wrong shape) is reported as one line with the place in
the module, status 2: it is the module that is wrong, and running it again (a supervisor's
restart) cannot help. Any other exception of the module's own code is shown with its
traceback (status 1).
"""

from __future__ import annotations

import asyncio
import importlib
import inspect
import sys
import traceback
from collections.abc import Iterator
from types import CodeType, ModuleType, TracebackType

import anyio

from .._model._error_root import InvalidArgumentError, InvalidArgumentTypeError
from ._common import EXIT_FAILURE, EXIT_USAGE, CliError

__all__ = ["import_target_module", "library_refusal"]

#: The guard that keeps a module's own program from running when it is imported.
_GUARD = "if __name__ == '__main__':"


def _frames(tb: TracebackType | None) -> Iterator[TracebackType]:
    while tb is not None:
        yield tb
        tb = tb.tb_next


def _chain(exc: BaseException) -> Iterator[BaseException]:
    """``exc`` and the exceptions it was raised from or while handling (at most 10)."""
    seen = 0
    current: BaseException | None = exc
    while current is not None and seen < 10:
        yield current
        seen += 1
        current = current.__cause__ or current.__context__


def _run_functions() -> set[CodeType]:
    """The code of the functions that run an event loop to completion."""
    runs: list[object] = [
        anyio.run,
        asyncio.run,
        asyncio.Runner.run,
        asyncio.BaseEventLoop.run_until_complete,
        asyncio.BaseEventLoop.run_forever,
    ]
    trio = sys.modules.get("trio")  # a module that called trio.run has imported trio
    if trio is not None:
        runs.append(trio.run)
    return {code for fn in runs if isinstance(code := getattr(fn, "__code__", None), CodeType)}


def _where(tb: TracebackType) -> str:
    return f"{tb.tb_frame.f_code.co_filename}, line {tb.tb_lineno}"


def _event_loop_call(exc: BaseException) -> str | None:
    """Where the module called a run function (``file, line N``), if ``exc`` passed
    through one; else None."""
    runs = _run_functions()
    for error in _chain(exc):
        caller: TracebackType | None = None
        for tb in _frames(error.__traceback__):
            if tb.tb_frame.f_code in runs:
                _close_unstarted(tb)
                return _where(caller) if caller is not None else "at import"
            caller = tb
    return None


def _close_unstarted(tb: TracebackType) -> None:
    """Close the coroutine a refused ``asyncio.run(main())`` was given: it never started,
    and would print "coroutine 'main' was never awaited" at exit, after the error line."""
    for value in tb.tb_frame.f_locals.values():
        if inspect.iscoroutine(value) and inspect.getcoroutinestate(value) == "CORO_CREATED":
            value.close()


def _in_library(tb: TracebackType) -> bool:
    name = tb.tb_frame.f_globals.get("__name__")
    return isinstance(name, str) and (name == "sepp_anyio" or name.startswith("sepp_anyio."))


def library_refusal(exc: BaseException) -> str | None:
    """One line for an argument sepp-anyio refused (raised inside the library: an
    ``InvalidArgumentError``, ``InvalidArgumentTypeError`` or another ``ValueError`` or
    ``TypeError``), naming the place in the user's code that passed it; None for any
    other exception (the user's own code failing)."""
    if not isinstance(exc, ValueError | TypeError):
        return None
    frames = list(_frames(exc.__traceback__))
    ours = isinstance(exc, InvalidArgumentError | InvalidArgumentTypeError)
    if not frames or not (ours or _in_library(frames[-1])):
        return None
    callers = [tb for tb in frames if not _in_library(tb)]
    # The innermost frame outside the library is the call that passed the argument.
    where = f" ({_where(callers[-1])})" if callers else ""
    return f"{type(exc).__name__}: {exc}{where}"


def import_target_module(spec: str, module_name: str, directory: str) -> ModuleType:
    """Import ``module_name`` for TARGET ``spec`` (``directory`` is first on sys.path).

    Call it inside the command's event loop (see the module docs).

    Raises:
        CliError: status 2 when the module does not exist, starts an event loop when
            imported, or passes the library an argument it refuses at import time; status
            1 when the module's code raised anything else (its traceback is printed
            first).
    """
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        missing = exc.name or ""
        if missing and (module_name == missing or module_name.startswith(missing + ".")):
            raise CliError(
                f"TARGET {spec!r}: no module named {missing!r} (searched {directory} and sys.path)",
                EXIT_USAGE,
            ) from None
        raise _imported_code_failed(spec, module_name, exc) from None
    except Exception as exc:  # the user's module itself raised
        call = _event_loop_call(exc)
        if call is not None:
            raise CliError(
                f"TARGET {spec!r}: importing {module_name!r} starts an event loop ({call}: "
                "anyio.run(), asyncio.run() or trio.run() at import time), which would run that "
                "module's own program, not this command's worker: put the call under "
                f'"{_GUARD}" so that importing the module only defines things',
                EXIT_USAGE,
            ) from None
        refusal = library_refusal(exc)
        if refusal is not None:
            raise CliError(
                f"TARGET {spec!r}: importing {module_name!r} failed: {refusal}", EXIT_USAGE
            ) from None
        raise _imported_code_failed(spec, module_name, exc) from None


def _imported_code_failed(spec: str, module_name: str, exc: BaseException) -> CliError:
    traceback.print_exception(exc, file=sys.stderr)
    return CliError(
        f"TARGET {spec!r}: importing {module_name!r} raised {type(exc).__name__}: {exc}",
        EXIT_FAILURE,
    )
