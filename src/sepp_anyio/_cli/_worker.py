"""``sepp-anyio worker TARGET``: run a :class:`~sepp_anyio.Worker` as a process.

The TARGET contract (also in ``--help`` and the README): ``module:attribute``, imported with
the current directory (or ``--path``) first on ``sys.path``, naming either (a file path
such as ``jobs.py:handlers`` is refused with the module name to use instead)

* a **handler registry**: a mapping ``{job_type: handler}`` (``async def`` handlers, or
  plain ``def`` ones, which run in worker threads), or any object whose ``handlers``
  attribute is such a mapping. Every handler is checked at startup (it must take
  ``(payload, ctx)``). The command builds the ``Worker`` from its options (``--queue`` is
  then required); or
* a **factory** that receives the connected :class:`~sepp_anyio.Client` and returns the
  ``Worker``: a function, an ``async`` function, or an async generator function that
  yields the worker once (the code after ``yield`` runs once the worker has drained, for
  cleaning up what the handlers used). A factory decides its own queues and settings, so
  the worker options are refused with it rather than silently ignored.

Lifecycle: connect, build the worker, start it and log ``ready`` once it reserves. The
first SIGINT or SIGTERM stops reserving and drains the jobs in flight (their leases are
still extended); the process then exits 0. A second signal cancels the handlers still
running (their jobs are nacked for an immediate retry, as when ``--drain-timeout``
passes, with the signal as the reason) and the process exits 128 + the signal number.

``--health-port`` serves the worker's probes and metrics (``serve_health``); ``--workers``,
``--max-jobs-per-child`` and ``--reload`` hand the process to the supervisor of
``_supervisor``, which runs this same command line in child processes.

A worker the server refuses before its first reserve has succeeded (a missing or wrong API
key, a queue a strict server does not declare) exits 1 with one error line naming the fix,
instead of retrying forever while looking healthy.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import inspect
import logging
import os
import signal
import sys
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, asynccontextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import anyio.abc

from .._client import Client
from .._health import serve_health
from .._health._source import DEFAULT_UNREADY_AFTER
from .._model._errors import UnauthenticatedError, UnknownQueuesError
from .._model._retries import RetryPolicy
from .._worker import (
    Handler,
    HandlerSignatureError,
    Worker,
    _lifespan,
    check_handler,
    enclose_lifespan,
)
from ._common import (
    EXIT_FAILURE,
    EXIT_USAGE,
    CliError,
    Parser,
    add_backend_option,
    add_connection_options,
    add_log_level_option,
    check_connection_options,
    configure_logging,
    error_line,
    lease_seconds,
    nonempty_text,
    nonnegative_seconds,
    open_client,
    parse,
    positive_int,
    positive_seconds,
    queue_names,
    run_async,
)
from ._gc import tuned_collector
from ._import import import_target_module, library_refusal
from ._supervisor import (
    add_process_options,
    check_health_host,
    child_number,
    supervise,
    supervisor_gone,
    wants_supervisor,
)

__all__ = ["Target", "build_parser", "load_target", "main"]

logger = logging.getLogger("sepp_anyio.cli")

#: A transient failure of an ack, nack or extend (a server restarting, say) is retried
#: rather than left to lease expiry; retries never duplicate anything.
_RETRY = RetryPolicy(max_attempts=3)

#: Options that shape the Worker the command builds for a handler registry: (dest, flag).
_WORKER_OPTIONS = (
    ("queues", "--queue"),
    ("lease", "--lease"),
    ("concurrency", "--concurrency"),
    ("max_jobs", "--max-jobs"),
    ("wait", "--wait"),
    ("auto_extend", "--auto-extend"),
    ("job_timeout", "--job-timeout"),
    ("max_lease_time", "--max-lease-time"),
    ("drain_timeout", "--drain-timeout"),
    ("unready_after", "--unready-after"),
    ("worker_id", "--worker-id"),
)

_DESCRIPTION = """\
Run a sepp Worker until SIGINT or SIGTERM, then drain it gracefully.

TARGET is module:attribute (the current directory, or --path, is searched first; a module
name such as myapp.jobs, not a file path) naming either
  a handler registry: a dict {job_type: handler}, or an object with such a .handlers
    dict; a handler is "async def f(payload, ctx)" or a plain "def f(payload, ctx)" (run
    in a worker thread); the Worker is built from the options below (--queue required):
        handlers = {"send_welcome": send_welcome, "resize": resize}
  or a factory taking the connected client and returning the Worker, as a function,
    an async function, or an async generator function that yields it once (code after
    the yield runs after the drain):
        def make_worker(client): return sepp_anyio.Worker(client, ["emails"], ...)
    The factory chooses queues and settings: the worker options are refused with it.

The first signal stops reserving and drains the jobs in flight (exit status 0); a second
one cancels the handlers still running (their jobs are nacked for an immediate retry;
exit status 128 + signal number). "ready" is logged once the worker reserves. Calls that
fail transiently are retried up to 3 times (never in a way that duplicates a job). A worker
the server refuses before any reserve succeeded (a missing or wrong API key, an undeclared
queue on a strict server) exits with status 1.

--health-port serves /livez, /readyz and /metrics. --workers N (1 too), --max-jobs-per-child
K and --reload run a supervisor of worker processes: it forwards both signals to every child,
restarts a crashed child with a backoff, replaces a child that took its K jobs (drained),
drains and replaces the child when a Python file under --path changes (--reload), and
exits 0 when every child drained cleanly after the signal, else with the first non-zero
status of a child.
"""


def build_parser(prog: str) -> Parser:
    """The ``worker`` subcommand's argument parser."""
    parser = Parser(
        prog=prog,
        description=_DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("target", metavar="TARGET", help="module:attribute (see above)")
    parser.add_argument(
        "--path",
        default=".",
        metavar="DIR",
        help="directory put first on sys.path to import TARGET from (default: .)",
    )
    parser.add_argument(
        "--burst",
        action="store_true",
        help="exit 0 once every queue is empty and nothing is in flight (jobs retried "
        "with a backoff or scheduled for later are not waited for)",
    )
    add_connection_options(parser)
    worker = parser.add_argument_group("worker (handler registry only)")
    worker.add_argument(
        "--queue",
        "-q",
        action="append",
        type=queue_names,
        dest="queues",
        metavar="QUEUE",
        help="queue to reserve from; repeat or separate with commas, in priority order",
    )
    worker.add_argument(
        "--lease",
        type=lease_seconds,
        metavar="SECONDS",
        help="lease asked for at reserve and at each extension (default: 30)",
    )
    worker.add_argument(
        "--concurrency",
        "-c",
        "--max-in-flight",
        type=positive_int,
        dest="concurrency",
        metavar="N",
        help="jobs handled at once (default: 16)",
    )
    worker.add_argument(
        "--max-jobs",
        type=positive_int,
        metavar="N",
        help="most jobs per reserve (default: all free capacity)",
    )
    worker.add_argument(
        "--wait",
        type=positive_seconds,
        metavar="SECONDS",
        help="long-poll window of each reserve (default: 30)",
    )
    worker.add_argument(
        "--auto-extend",
        nargs="?",
        const=True,
        type=positive_seconds,
        metavar="SECONDS",
        help="keep extending leases while handlers run: every third of the granted lease, "
        "or every SECONDS if given (default: off)",
    )
    worker.add_argument(
        "--job-timeout",
        type=positive_seconds,
        metavar="SECONDS",
        help="cancel a handler after this long and retry its job (default: none)",
    )
    worker.add_argument(
        "--max-lease-time",
        type=positive_seconds,
        metavar="SECONDS",
        help="stop extending one job's lease after this long (default: none)",
    )
    worker.add_argument(
        "--drain-timeout",
        type=nonnegative_seconds,
        metavar="SECONDS",
        help="at shutdown, cancel handlers still running after this long and retry their "
        "jobs at once (default: wait for all)",
    )
    worker.add_argument(
        "--unready-after",
        type=nonnegative_seconds,
        metavar="SECONDS",
        help="/readyz turns 503 once the reserves have kept failing this long (the server "
        "gone or refusing), until one succeeds again (default: 5)",
    )
    worker.add_argument(
        "--no-gc-tuning",
        dest="gc_tuning",
        action="store_false",
        help="keep the interpreter's garbage-collector settings (by default the command "
        "freezes what startup allocated and collects young objects every 10,000 instead of "
        "700: less of a busy worker's CPU goes to the collector)",
    )
    worker.add_argument(
        "--worker-id",
        type=nonempty_text,
        metavar="ID",
        help="id sent with every call (default: <host>-<pid>-<random>)",
    )
    add_process_options(parser)
    add_backend_option(parser)
    add_log_level_option(parser, default="INFO")
    return parser


# --------------------------------------------------------------------------- the target


@dataclass(frozen=True)
class Target:
    """What TARGET named: a handler registry, or a factory of workers."""

    spec: str
    handlers: Mapping[str, Handler] | None = None
    factory: Callable[[Client], Any] | None = None


def _bad(spec: str, message: str) -> CliError:
    return CliError(f"TARGET {spec!r}: {message}", EXIT_USAGE)


def load_target(spec: str, path: str = ".") -> Target:
    """Import ``module:attribute`` and classify it (see the module docstring).

    Call it inside the command's event loop, which lets the import tell a module that
    runs an event loop of its own at import time (see ``_import``).

    Raises:
        CliError: status 2 for a malformed, missing or unusable target (a module that
            starts an event loop when imported, or whose import the library refuses an
            argument of); status 1 when importing the module raised otherwise (its
            traceback is printed first).
    """
    module_name, colon, attribute = spec.partition(":")
    if not colon or not module_name.strip() or not attribute.strip():
        raise _bad(spec, "must be module:attribute, for example myapp.jobs:handlers")
    hint = _module_for_path(module_name.strip(), attribute.strip())
    if hint is not None:
        raise _bad(spec, f"names a file, not a module: use {hint}")
    directory = os.path.abspath(path)
    if directory not in sys.path:
        sys.path.insert(0, directory)
    obj: Any = import_target_module(spec, module_name.strip(), directory)
    for part in attribute.strip().split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise _bad(spec, f"{module_name!r} has no attribute {attribute!r}") from None
    if isinstance(obj, Worker):
        raise _bad(
            spec,
            "is a Worker, which needs a connected client the command has not made yet: "
            "name a factory instead (def make_worker(client) -> Worker)",
        )
    handlers: object = obj if isinstance(obj, Mapping) else getattr(obj, "handlers", None)
    if isinstance(handlers, Mapping):
        return Target(spec, handlers=_check_registry(spec, handlers))
    if callable(obj):
        _check_factory(spec, obj)
        return Target(spec, factory=obj)
    raise _bad(
        spec,
        f"is a {type(obj).__name__}, not a handler registry (a dict of job type to "
        "handler, or an object with one as .handlers) or a factory of Workers",
    )


def _module_for_path(module: str, attribute: str) -> str | None:
    """The TARGET to use when ``module`` is a file path (``jobs.py``, ``pkg/jobs.py``), as
    ``pkg.jobs:attr`` (with ``--path DIR`` for a path outside the current directory);
    None when it is a module name."""
    if not (module.endswith(".py") or "/" in module or os.sep in module):
        return None
    path = Path(module.removesuffix(".py"))
    if path.is_absolute() or ".." in path.parts:
        return f"{path.name}:{attribute} --path {path.parent}"
    parts = [part for part in path.parts if part not in ("", ".")]
    return f"{'.'.join(parts)}:{attribute}"


def _check_registry(spec: str, handlers: Mapping[Any, Any]) -> dict[str, Handler]:
    if not handlers:
        raise _bad(spec, "the handler registry is empty")
    checked: dict[str, Handler] = {}
    for job_type, handler in handlers.items():
        if not isinstance(job_type, str) or not job_type:
            raise _bad(spec, f"registry key {job_type!r} is not a job type (a non-empty str)")
        try:
            check_handler(f"job type {job_type!r}", handler)
        except (TypeError, ValueError) as exc:  # HandlerSignatureError, or the like
            raise _bad(spec, str(exc)) from None
        checked[job_type] = handler
    return checked


def _check_factory(spec: str, factory: Callable[..., Any]) -> None:
    try:
        signature = inspect.signature(factory)
    except (TypeError, ValueError):  # no signature to inspect (a builtin): trust it
        return
    try:
        signature.bind(object())
    except TypeError:
        raise _bad(
            spec,
            f"a factory must take one argument (the connected client); its "
            f"signature is {signature}",
        ) from None


@asynccontextmanager
async def _built_worker(
    target: Target, client: Client, args: argparse.Namespace
) -> AsyncIterator[Worker]:
    if target.handlers is not None:
        worker = Worker(
            client,
            args.queues,
            lease=30.0 if args.lease is None else args.lease,
            max_in_flight=16 if args.concurrency is None else args.concurrency,
            max_jobs=args.max_jobs,
            wait=30.0 if args.wait is None else args.wait,
            auto_extend=False if args.auto_extend is None else args.auto_extend,
            worker_id=args.worker_id,
            job_timeout=args.job_timeout,
            max_lease_time=args.max_lease_time,
            drain_timeout=args.drain_timeout,
            unready_after=(
                DEFAULT_UNREADY_AFTER if args.unready_after is None else args.unready_after
            ),
        )
        for job_type, handler in target.handlers.items():
            worker.handle(job_type, handler)
        yield worker
        return
    factory = target.factory
    assert factory is not None
    if inspect.isasyncgenfunction(factory):
        # The code before the yield builds the worker; the code after it becomes the
        # outermost part of the worker's lifespan, so it runs inside run(), after the
        # drain. Leaving the remainder here covers a worker that never ran.
        manager = asynccontextmanager(factory)(client)
        with _registration_errors(target):
            made = await manager.__aenter__()
        remainder = _lifespan.Remainder(manager)
        async with remainder:
            worker = _check_made(target, made)
            enclose_lifespan(worker, remainder)
            yield worker
        return
    with _registration_errors(target):
        made = factory(client)
        if inspect.isawaitable(made):
            made = await made
    yield _check_made(target, made)


@contextlib.contextmanager
def _registration_errors(target: Target) -> Iterator[None]:
    """A handler the factory registered that cannot work, or any argument of the factory's
    that the library refuses (a bad queue name, a Cron expression, a typed task's handler
    of the wrong shape), is a usage error: one line, with the place in the factory."""
    try:
        yield
    except HandlerSignatureError as exc:
        raise _bad(
            target.spec, f"the factory registered a handler that cannot work: {exc}"
        ) from None
    except (ValueError, TypeError) as exc:
        refusal = library_refusal(exc)
        if refusal is None:
            raise  # the factory's own code failed: its traceback helps
        raise _bad(target.spec, f"the factory failed: {refusal}") from None


def _check_made(target: Target, made: object) -> Worker:
    if not isinstance(made, Worker):
        raise _bad(target.spec, f"the factory returned a {type(made).__name__}, not a Worker")
    return made


# --------------------------------------------------------------------------- running


def _signal_receiver() -> AbstractContextManager[Any]:
    try:
        return anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM)
    except NotImplementedError:  # Windows: Ctrl-C arrives as KeyboardInterrupt instead
        return nullcontext(None)


async def _serve(target: Target, args: argparse.Namespace) -> int:
    forced = 0
    # Signals are caught from the start, so an early one is a graceful stop too.
    with _signal_receiver() as signals:
        async with (
            open_client(args, retry=_RETRY) as client,
            _built_worker(target, client, args) as worker,
        ):
            # Startup is over (the application imported, the worker built): see _gc.
            with tuned_collector(args.gc_tuning):
                async with anyio.create_task_group() as tg:

                    async def run_worker(*, task_status: anyio.abc.TaskStatus[None]) -> None:
                        with _refusals_explained(worker):
                            await worker.run(
                                until_idle=args.burst,
                                job_limit=args.max_jobs_per_child,
                                task_status=task_status,
                            )
                        tg.cancel_scope.cancel()  # drained: stop watching for signals

                    if args.health_port is not None:
                        try:
                            port = await tg.start(
                                functools.partial(
                                    serve_health, worker, args.health_host, args.health_port
                                )
                            )
                        except OSError as exc:  # the port is taken, say: one line, status 1
                            raise CliError(
                                f"--health-host/--health-port: cannot listen on "
                                f"{args.health_host}:{args.health_port} "
                                f"({exc.strerror or exc})",
                                EXIT_FAILURE,
                            ) from None
                        logger.info(
                            "health: http://%s:%d/livez, /readyz and /metrics",
                            args.health_host,
                            port,
                        )

                    async def watch_signals() -> None:
                        nonlocal forced
                        if signals is None:
                            return
                        first = True
                        async for signum in signals:
                            name = signal.Signals(signum).name
                            if first:
                                first = False
                                logger.info(
                                    "%s received: no new jobs; draining %d in flight "
                                    "(send it again to cancel them)",
                                    name,
                                    worker.statistics().in_flight,
                                )
                                worker.shutdown()
                            else:
                                logger.warning(
                                    "%s received again: cancelling %d running handler(s); their "
                                    "jobs are nacked for an immediate retry",
                                    name,
                                    worker.statistics().in_flight,
                                )
                                forced = 128 + signum
                                worker.cancel_in_flight(reason=f"{name} received again")
                                return

                    await tg.start(run_worker)
                    logger.info(
                        "ready: worker %s reserving from %s at %s (%s backend)",
                        worker.worker_id,
                        ", ".join(worker.queues),
                        args.address,
                        args.backend,
                    )
                    tg.start_soon(watch_signals)
                    if child_number() is not None:

                        async def watch_supervisor() -> None:
                            await supervisor_gone()
                            logger.warning("the supervisor has gone; draining and stopping")
                            worker.shutdown()

                        tg.start_soon(watch_supervisor)
                stats = worker.statistics()
                logger.info(
                    "worker %s: %d acked, %d nacked for retry, %d dead-lettered, %d lease(s) "
                    "lost, %d settle error(s)%s",
                    "cancelled" if forced else "drained and stopped",
                    stats.processed,
                    stats.nacked_retry,
                    stats.nacked_dead_letter,
                    stats.lease_lost,
                    stats.settle_errors,
                    "" if not forced else "; handlers still running were cancelled and retried",
                )
    return forced


@contextlib.contextmanager
def _refusals_explained(worker: Worker) -> Iterator[None]:
    """A reserve refused before any succeeded (``Worker.run`` raises it) becomes one
    error line naming the fix, exit status 1."""
    queues = ", ".join(worker.queues)
    try:
        yield
    except UnauthenticatedError as exc:
        raise CliError(
            f"the server refused the worker ({exc}); pass a valid API key with --api-key KEY "
            "or $SEPP_API_KEY",
            EXIT_FAILURE,
        ) from None
    except UnknownQueuesError as exc:
        detail = exc.status_message or "some queue(s) are not declared"
        raise CliError(
            f"the server (strict mode) refused the worker's queues ({queues}): {detail}; "
            'declare them in the server\'s configuration ([[queues]] name = "...") or '
            "reserve only from declared queues",
            EXIT_FAILURE,
        ) from None


def _check_target_and_options(target: Target, args: argparse.Namespace) -> None:
    """The options that depend on what TARGET is (usage errors, before connecting)."""
    if target.factory is not None:
        given = [flag for dest, flag in _WORKER_OPTIONS if getattr(args, dest) is not None]
        if given:
            raise _bad(
                args.target,
                f"is a factory, which builds its own Worker: leave out {', '.join(given)} "
                "(the worker options are for a handler registry)",
            )
    elif not args.queues:
        raise CliError("--queue is required with a handler registry", EXIT_USAGE)


def main(argv: Sequence[str], *, prog: str = "sepp-anyio worker") -> int:
    """Run the ``worker`` subcommand; return the exit status.

    Every option is checked before anything else happens (usage errors: one line, status
    2; the supervisor starts no child then). A child, or the command without a
    supervisor, then imports TARGET inside its event loop and only then connects.
    """
    parser = build_parser(prog)
    args = parse(parser, argv)
    if isinstance(args, int):
        return args
    configure_logging(args.log_level)
    if args.queues is not None:  # --queue a,b --queue c: one list, in priority order
        args.queues = [name for names in args.queues for name in names]
    try:
        check_connection_options(args)
        check_health_host(args)
        if wants_supervisor(args):
            # The children load the target; the supervisor never imports user code.
            return supervise(argv, args)
        number = child_number()
        if number is not None:
            if args.worker_id is not None:
                args.worker_id = f"{args.worker_id}-{number}"
            if args.health_port:
                args.health_port += number - 1
    except CliError as exc:
        error_line(prog, exc.message)
        return exc.code
    with contextlib.suppress(AttributeError):  # line-buffer stdout for handlers that print
        sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]

    async def serve() -> int:
        # Imported in the loop, so that a module running a loop of its own at import
        # time fails at once, and is reported as such (see _import).
        target = load_target(args.target, args.path)
        _check_target_and_options(target, args)
        return await _serve(target, args)

    return run_async(prog, serve, backend=args.backend)
