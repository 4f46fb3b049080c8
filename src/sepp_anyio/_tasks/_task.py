"""Typed tasks: one declaration that producers enqueue with and workers handle.

::

    class Welcome(pydantic.BaseModel):
        user: int

    send_welcome = sepp.Task("emails", "send_welcome", Welcome, priority=5, timeout=30.0)
    await send_welcome.enqueue(client, Welcome(user=42), idempotency_key="welcome-42")

A :class:`Task` names a queue and a job type and carries the type of its value. The value
travels as compact UTF-8 JSON labelled ``application/json``, the same bytes
:meth:`Payload.from_json` writes, so producers and workers in other languages interoperate
(no pickle). Which library checks the value, and how strictly, is described in ``_typed``.

This module imports neither the worker nor the client (``Client`` is only named in
annotations; :meth:`Task.enqueue` reads the given client's clock), nor anyio (``Results``
is imported where a result is asked for), so a module of task declarations can be shared
by producers and workers.
"""

from __future__ import annotations

import builtins
import inspect
import json
import typing
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Generic, final, overload

from .._model._checks import (
    MAX_PRIORITY,
    UINT32_MAX,
    check_int,
    check_queue_name,
    check_seconds,
    check_str,
)
from .._model._enqueue import CustomValue, EnqueueAck, EnqueueRequest
from .._model._error_root import InvalidArgumentError, InvalidArgumentTypeError
from .._model._errors import HandlerError
from .._model._payload import JSON_ENCODING, Payload, _charset, _is_json_encoding
from .._model._results import REPLY_TO, InvalidResultError
from .._model._retries import RetryDirective
from .._model._retry_policy import Retry
from .._model._trace import TraceContext
from ._typed import Invalid, Problem, TypeCodec, codec_for

if TYPE_CHECKING:
    # PEP 696 defaults (typing has them from 3.13 only): ``Task[X]`` means
    # ``Task[X, None]`` to a type checker; at run time ``Task.__class_getitem__`` pads it.
    from typing_extensions import TypeVar

    from .._client import Client
    from ._results import ResultHandle, Results

    #: The type of a task's result (``result=``); None when it declares none.
    R = TypeVar("R", default=None)
else:
    from typing import TypeVar

    R = TypeVar("R")

__all__ = ["Task", "TaskPayloadError"]

T = TypeVar("T")

_NEVER = "it will never validate, so the job is dead-lettered without a retry"
# A job without a payload is read as JSON null: a type that accepts None takes it.
_NULL = b"null"


class TaskPayloadError(HandlerError):
    """A received payload is not JSON, or does not validate against its task's type.

    It never will, however often the job is retried, so this is a :class:`HandlerError`
    whose directive is :meth:`RetryDirective.dead_letter`: raised from a handler (or by the
    worker while decoding the payload for one), the job is dead-lettered on that attempt
    with this error's message as the nack reason.

    Args:
        reason: the message, naming the task and the field(s).
        directive: always dead-letter unless given (kept for HandlerError's constructors).
        problems: ``(field, message)`` pairs; ``field`` is ``""`` for the payload as a whole.
    """

    def __init__(
        self,
        reason: str,
        directive: RetryDirective | None = None,
        *,
        problems: Sequence[Problem] = (),
    ) -> None:
        super().__init__(reason, directive or RetryDirective.dead_letter())
        #: What is wrong, field by field (at most the first five).
        self.problems = tuple(problems)

    def __str__(self) -> str:
        # The reason already says what happens to the job.
        return self.reason

    @property
    def field(self) -> str | None:
        """The first field named, or None if the payload as a whole is wrong."""
        for problem in self.problems:
            if problem.field:
                return problem.field
        return None


def _parameters(names: Sequence[str]) -> str:
    """``"1 positional parameter (job)"``, ``"no positional parameters"``..."""
    if not names:
        return "no positional parameters"
    noun = "parameter" if len(names) == 1 else "parameters"
    return f"{len(names)} positional {noun} ({', '.join(names)})"


def _and(names: Sequence[str]) -> str:
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"


def _signature_problem(signature: inspect.Signature) -> tuple[str, str] | None:
    """Why a handler with ``signature`` cannot be called as ``fn(value, ctx)``: what it
    takes (``"takes 1 positional parameter (job)"``) and a hint on the fix (``""`` or a
    parenthesis), or None when the reason is none of these (the caller then quotes
    :meth:`inspect.Signature.bind`'s).

    Python's own message for a one-parameter function says "too many positional
    arguments", which reads as if the function took too many: the fix is the opposite.
    """
    params = list(signature.parameters.values())
    positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    takes = [p.name for p in params if p.kind in positional]
    keyword_only = [p for p in params if p.kind is inspect.Parameter.KEYWORD_ONLY]
    if len(takes) < 2 and not any(p.kind is inspect.Parameter.VAR_POSITIONAL for p in params):
        names = [p.name for p in keyword_only]
        hint = ""
        if names:
            verb, them = ("is", "it") if len(names) == 1 else ("are", "them")
            hint = f" ({_and(names)} {verb} keyword-only: remove the '*' before {them})"
        return f"takes {_parameters(takes)}", hint
    required = [p.name for p in params if p.kind in positional and p.default is p.empty]
    if len(required) > 2:
        return f"requires {_parameters(required)}", f" (give {_and(required[2:])} a default)"
    missing = [p.name for p in keyword_only if p.default is p.empty]
    if missing:
        noun = "parameter" if len(missing) == 1 else "parameters"
        return (
            f"requires the keyword-only {noun} {_and(missing)}",
            f" and nothing else (give {_and(missing)} a default)",
        )
    return None


def _reply_queue(reply_to: object) -> str:
    """The queue a ``reply_to`` option names (checked as a queue name)."""
    from ._results import Results  # loads anyio: only when results are asked for

    if isinstance(reply_to, Results):
        return reply_to.queue
    if isinstance(reply_to, str):
        return check_queue_name(reply_to, "reply_to")
    raise InvalidArgumentTypeError(
        f"reply_to must be a sepp.Results or a queue name, got {type(reply_to).__name__}"
    )


def _describe(exc: Invalid) -> str:
    parts = [f"field {p.field!r}: {p.message}" if p.field else p.message for p in exc.problems]
    text = "; ".join(parts)
    if exc.more:
        text += f" (and {exc.more} more)"
    return text


@final
class Task(Generic[T, R]):
    """A job type whose payload is a value of type ``T``, checked on both sides; with
    ``result=``, also the type ``R`` of the value its handler returns.

    ``Task(queue, job_type, Spec, result=Report)`` is a ``Task[Spec, Report]``; without
    ``result`` it is a ``Task[Spec]`` (``Task[Spec, None]``), whose handlers return
    nothing that is kept. The result is validated against ``R`` as the handler returns it
    (a value that does not validate fails the attempt) and as it arrives at the producer
    (see :class:`Results`).

    Args:
        queue: the queue it is enqueued to (the server's queue-name rules apply).
        job_type: the job type the worker dispatches on.
        type: the value's annotation: a pydantic model, a dataclass, a ``TypedDict``, a
            ``msgspec.Struct``, or plain JSON types (``int``, ``str``, ``list[int]``,
            ``dict[str, Any]``, ``int | None``, ...). For a union or another special form
            mypy cannot infer ``T``: annotate the variable, ``Task[int | None]``.
        priority: 0 to 9, the default of every enqueue; None: the queue's default.
        max_attempts: at least 1, the default of every enqueue; None: the queue's default.
        timeout: this task's handler timeout in seconds (it wins over the worker's
            ``job_timeout``); None: the worker's.
        result: the annotation of the handler's return value (the same kinds as
            ``type``); None: the task has no result type (a producer awaiting one gets
            None).
        retry: this task's :class:`~sepp_anyio.Retry` policy (it wins over the worker's
            ``retry``); None: the worker's.
        expires: seconds after which a job of this task, once due, is no longer started
            (the default ``expires_at`` of every enqueue: the later of now and the
            job's ``scheduled_at`` or ``delay``, plus this); None: no expiry.

    Raises:
        InvalidArgumentTypeError: (a ``TypeError``) an argument of the wrong type; an
            annotation the checking library cannot handle, or one that mixes pydantic and
            msgspec types.
        InvalidArgumentError: (a ``ValueError``) an argument out of range (the message
            names it).
        ImportError: the annotation needs pydantic or msgspec and neither is installed
            (the message names the ``sepp-anyio[pydantic]`` and ``[msgspec]`` extras).
    """

    __slots__ = (
        "_codec",
        "_expires",
        "_job_type",
        "_max_attempts",
        "_priority",
        "_queue",
        "_result_codec",
        "_result_type",
        "_retry",
        "_timeout",
        "_type",
    )

    if not TYPE_CHECKING:
        # ``Task[X]`` stays valid at run time, as the type checker reads it (the PEP 696
        # default of R): typing's Generic on Python < 3.13 wants both parameters.
        def __class_getitem__(cls, params):
            if not isinstance(params, tuple):
                params = (params, None)
            return super().__class_getitem__(params)

    @overload
    def __init__(
        self: Task[T, None],
        queue: str,
        job_type: str,
        type: builtins.type[T],
        *,
        priority: int | None = None,
        max_attempts: int | None = None,
        timeout: float | None = None,
        retry: Retry | None = None,
        expires: float | None = None,
        result: None = None,
    ) -> None: ...

    @overload
    def __init__(
        self: Task[T, R],
        queue: str,
        job_type: str,
        type: builtins.type[T],
        *,
        priority: int | None = None,
        max_attempts: int | None = None,
        timeout: float | None = None,
        retry: Retry | None = None,
        expires: float | None = None,
        result: builtins.type[R],
    ) -> None: ...

    @overload
    def __init__(
        # Unions, None, Literal and other special forms are not type[T]: mypy cannot infer
        # T from them (PEP 747's TypeForm will), so the variable's annotation supplies it.
        self: Task[Any, Any],
        queue: str,
        job_type: str,
        type: Any,
        *,
        priority: int | None = None,
        max_attempts: int | None = None,
        timeout: float | None = None,
        retry: Retry | None = None,
        expires: float | None = None,
        result: Any = None,
    ) -> None: ...

    def __init__(
        self,
        queue: str,
        job_type: str,
        type: Any,
        *,
        priority: int | None = None,
        max_attempts: int | None = None,
        timeout: float | None = None,
        retry: Retry | None = None,
        expires: float | None = None,
        result: Any = None,
    ) -> None:
        self._queue = check_queue_name(queue, "Task queue")
        self._job_type = check_str(job_type, "Task job_type")
        self._priority = (
            None if priority is None else check_int(priority, "Task priority", 0, MAX_PRIORITY)
        )
        self._max_attempts = (
            None
            if max_attempts is None
            else check_int(max_attempts, "Task max_attempts", 1, UINT32_MAX)
        )
        self._timeout = (
            None
            if timeout is None
            else check_seconds(timeout, "Task timeout", minimum="millisecond")
        )
        if retry is not None and not isinstance(retry, Retry):
            raise InvalidArgumentTypeError(
                f"Task retry must be a sepp.Retry or None, got {builtins.type(retry).__name__}"
            )
        self._retry = retry
        self._expires = (
            None
            if expires is None
            else check_seconds(expires, "Task expires", minimum="millisecond")
        )
        self._type: Any = type
        self._result_type: Any = result
        try:
            self._codec: TypeCodec[T] = codec_for(type)
            self._result_codec: TypeCodec[R] | None = None if result is None else codec_for(result)
        except TypeError as exc:
            raise InvalidArgumentTypeError(f"Task {self._label}: {exc}") from None
        except ImportError as exc:
            raise ImportError(f"Task {self._label}: {exc}", name=exc.name) from None

    def __repr__(self) -> str:
        name = (
            self._type.__qualname__ if isinstance(self._type, builtins.type) else repr(self._type)
        )
        return f"Task({self._queue!r}, {self._job_type!r}, {name})"

    @property
    def _label(self) -> str:
        return f"'{self._queue}/{self._job_type}'"

    # ------------------------------------------------------------ attributes

    @property
    def queue(self) -> str:
        """The queue it is enqueued to."""
        return self._queue

    @property
    def job_type(self) -> str:
        """The job type the worker dispatches on."""
        return self._job_type

    @property
    def type(self) -> Any:
        """The value's annotation, as given."""
        return self._type

    @property
    def priority(self) -> int | None:
        """The default priority of its enqueues (None: the queue's)."""
        return self._priority

    @property
    def max_attempts(self) -> int | None:
        """The default max_attempts of its enqueues (None: the queue's)."""
        return self._max_attempts

    @property
    def timeout(self) -> float | None:
        """Its handler timeout in seconds; it wins over the worker's ``job_timeout``."""
        return self._timeout

    @property
    def result_type(self) -> Any:
        """The result's annotation, as given (None: the task declares no result)."""
        return self._result_type

    @property
    def retry(self) -> Retry | None:
        """Its retry policy; it wins over the worker's (None: the worker's)."""
        return self._retry

    @property
    def expires(self) -> float | None:
        """Seconds after which a due job of this task is no longer started (None: never)."""
        return self._expires

    @property
    def library(self) -> str:
        """What checks its values: ``"pydantic"``, ``"msgspec"`` or ``"json"`` (the
        built-in validator of plain JSON types)."""
        return self._codec.library

    # ------------------------------------------------------------ producer side

    def encode(self, value: T) -> Payload:
        """Validate ``value`` and serialise it as an ``application/json`` payload.

        Instances are re-validated (a dataclass or ``Struct`` built with a wrong field
        type is refused), and the bytes are checked as the worker will check them.

        Raises:
            InvalidArgumentError: (a ``ValueError``) the value does not validate; the
                message names the task and the field, for example
                ``Task 'emails/send_welcome': field 'user': ...``.
        """
        try:
            data = self._codec.dump(value)
        except Invalid as exc:
            raise InvalidArgumentError(f"Task {self._label}: {_describe(exc)}") from None
        return Payload(data, JSON_ENCODING)

    def request(
        self,
        value: T,
        *,
        delay: float | None = None,
        scheduled_at: datetime | None = None,
        idempotency_key: str | None = None,
        priority: int | None = None,
        max_attempts: int | None = None,
        custom: Mapping[str, CustomValue] | None = None,
        trace_context: TraceContext | None = None,
        reply_to: Results | str | None = None,
        expires_at: datetime | None = None,
    ) -> EnqueueRequest:
        """An :class:`EnqueueRequest` for ``value``, for ``enqueue_batch`` or
        ``enqueue_atomic``.

        The options are :class:`EnqueueRequest`'s; ``priority`` and ``max_attempts``
        default to the task's. ``trace_context`` None lets the client stamp the current
        span's, as for any request. ``reply_to`` (a :class:`Results` or its queue's name)
        asks the worker to send the job's result there: it is stored in the custom field
        ``sepp.reply_to``; wait for it with :meth:`Results.handle`.
        ``expires_at`` None, for a task with ``expires``, is
        that many seconds after the job is due (``scheduled_at``, or now plus ``delay``,
        or now), now read from the system clock here (:meth:`enqueue` reads the
        client's).

        Raises:
            InvalidArgumentError: (a ``ValueError``) the value does not validate (see
                :meth:`encode`), or an option is out of range (as :class:`EnqueueRequest`
                raises it).
            InvalidArgumentTypeError: (a ``TypeError``) an option of the wrong type.
        """
        return self._request(
            value,
            delay=delay,
            scheduled_at=scheduled_at,
            idempotency_key=idempotency_key,
            priority=priority,
            max_attempts=max_attempts,
            custom=custom,
            trace_context=trace_context,
            reply_to=reply_to,
            expires_at=expires_at,
            now=None,
        )

    def _request(
        self,
        value: T,
        *,
        delay: float | None,
        scheduled_at: datetime | None,
        idempotency_key: str | None,
        priority: int | None,
        max_attempts: int | None,
        custom: Mapping[str, CustomValue] | None,
        trace_context: TraceContext | None,
        reply_to: Results | str | None,
        expires_at: datetime | None,
        now: datetime | None,
    ) -> EnqueueRequest:
        """:meth:`request`, with the clock ``expires`` counts from (None: the system's)."""
        if reply_to is not None:
            custom = {**({} if custom is None else custom), REPLY_TO: _reply_queue(reply_to)}
        if expires_at is None and self._expires is not None:
            expires_at = self._deadline(scheduled_at, delay, now)
        return EnqueueRequest(
            self._queue,
            self._job_type,
            payload=self.encode(value),
            idempotency_key=idempotency_key,
            priority=self._priority if priority is None else priority,
            max_attempts=self._max_attempts if max_attempts is None else max_attempts,
            trace_context=trace_context,
            custom={} if custom is None else custom,
            scheduled_at=scheduled_at,
            delay=delay,
            expires_at=expires_at,
        )

    def _deadline(
        self, scheduled_at: datetime | None, delay: float | None, now: datetime | None
    ) -> datetime | None:
        """The default ``expires_at``: ``expires`` after the job is due. None when the
        options are malformed: :class:`EnqueueRequest` then names what is wrong."""
        assert self._expires is not None
        current = now if now is not None else datetime.now(UTC)
        due = current
        if isinstance(scheduled_at, datetime):
            if scheduled_at.tzinfo is None:
                scheduled_at = scheduled_at.replace(tzinfo=UTC)
            if scheduled_at.utcoffset() is None:
                return None
            due = max(current, scheduled_at)
        elif isinstance(delay, int | float) and not isinstance(delay, bool):
            try:
                due = current + timedelta(seconds=max(0.0, delay))
            except (OverflowError, ValueError):
                return None
        try:
            return due + timedelta(seconds=self._expires)
        except OverflowError:
            return None

    @overload
    async def enqueue(
        self,
        client: Client,
        value: T,
        *,
        delay: float | None = None,
        scheduled_at: datetime | None = None,
        idempotency_key: str | None = None,
        priority: int | None = None,
        max_attempts: int | None = None,
        custom: Mapping[str, CustomValue] | None = None,
        trace_context: TraceContext | None = None,
        expires_at: datetime | None = None,
        reply_to: None = None,
    ) -> EnqueueAck: ...

    @overload
    async def enqueue(
        self,
        client: Client,
        value: T,
        *,
        delay: float | None = None,
        scheduled_at: datetime | None = None,
        idempotency_key: str | None = None,
        priority: int | None = None,
        max_attempts: int | None = None,
        custom: Mapping[str, CustomValue] | None = None,
        trace_context: TraceContext | None = None,
        expires_at: datetime | None = None,
        reply_to: Results,
    ) -> ResultHandle[R]: ...

    async def enqueue(
        self,
        client: Client,
        value: T,
        *,
        delay: float | None = None,
        scheduled_at: datetime | None = None,
        idempotency_key: str | None = None,
        priority: int | None = None,
        max_attempts: int | None = None,
        custom: Mapping[str, CustomValue] | None = None,
        trace_context: TraceContext | None = None,
        expires_at: datetime | None = None,
        reply_to: Results | None = None,
    ) -> EnqueueAck | ResultHandle[R]:
        """Validate ``value`` and enqueue it with ``client``; options as for :meth:`request`.

        With ``reply_to`` (a running :class:`Results`), the worker sends the job's result
        to that queue, and this returns a :class:`ResultHandle` to await it with
        (``await handle.result(timeout=60)``); without, the server's :class:`EnqueueAck`.

        Nothing is sent when the value does not validate. Cancellation and retries behave
        as for :meth:`Client.enqueue`: a cancelled call may or may not have enqueued the
        job (an ``idempotency_key`` makes a repeat safe).

        Raises:
            InvalidArgumentError: (a ``ValueError``) the value does not validate (nothing
                was sent), or a bad option.
            InvalidArgumentTypeError: (a ``TypeError``) ``reply_to`` is not a
                :class:`Results`.
            JobRejectedError: the server refused the job; ``.rejection`` says why.
            ClientError: the call failed.
        """
        if reply_to is not None:
            from ._results import Results  # loads anyio: only when results are asked for

            if not isinstance(reply_to, Results):
                raise InvalidArgumentTypeError(
                    f"Task {self._label}: reply_to must be a sepp.Results, got "
                    f"{builtins.type(reply_to).__name__} (Task.request takes a queue name)"
                )
        # The client's clock, which its delay counts from too (the in-process server's
        # virtual time in tests). Imported here: declaring tasks needs no client.
        from .._client import wall_clock_of

        request = self._request(
            value,
            delay=delay,
            scheduled_at=scheduled_at,
            idempotency_key=idempotency_key,
            priority=priority,
            max_attempts=max_attempts,
            custom=custom,
            trace_context=trace_context,
            reply_to=reply_to,
            expires_at=expires_at,
            now=wall_clock_of(client)() if self._expires is not None else None,
        )
        ack = await client.enqueue(request)
        if reply_to is None:
            return ack
        return reply_to.handle(self, ack.job_id, ack=ack)

    # ------------------------------------------------------------ results

    def encode_result(self, value: R) -> bytes:
        """Validate a handler's return value against the result type and encode it as
        compact JSON (``null`` for a task without a result type, whatever the value).

        Raises:
            InvalidResultError: the value does not validate; the message names the task
                and the field.
        """
        codec = self._result_codec
        if codec is None:
            return _NULL
        try:
            return codec.dump(value)
        except Invalid as exc:
            raise InvalidResultError(
                f"Task {self._label}: the handler's result does not validate: {_describe(exc)}"
            ) from None

    def decode_result(self, value: Any) -> R:
        """A received result's value (plain JSON, as :class:`Result` holds it) validated
        against the result type (returned as is for a task without one).

        Raises:
            InvalidResultError: the value does not validate; the message names the task
                and the field.
        """
        codec = self._result_codec
        if codec is None:
            none: R = value
            return none
        try:
            return codec.load(json.dumps(value, separators=(",", ":")).encode())
        except Invalid as exc:
            raise InvalidResultError(
                f"Task {self._label}: the result does not validate: {_describe(exc)}"
            ) from None

    # ------------------------------------------------------------ worker side

    def decode(self, payload: Payload | None) -> T:
        """The typed value of a received payload.

        A job without a payload is read as JSON ``null`` (so a task whose type accepts
        None takes it). Accepted encodings are the JSON media types of
        :meth:`Payload.json` (``application/json``, ``*+json``, ``text/json``, ``json``),
        in UTF-8 only (RFC 8259).

        Raises:
            TaskPayloadError: the encoding is not JSON, the bytes are not UTF-8 JSON, or
                the value does not validate; the message names the task and the field and
                says that no retry can help (it is a dead-lettering ``HandlerError``).
        """
        if payload is None:
            data, what = _NULL, "the job has no payload, and null does not validate"
        else:
            self._check_encoding(payload.encoding)
            data, what = payload.data, "payload does not validate"
            try:
                payload.data.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise self._payload_error(f"payload is not UTF-8 JSON: {exc}", ()) from None
        try:
            return self._codec.load(data)
        except Invalid as exc:
            head = "payload is not JSON" if exc.not_json else what
            raise self._payload_error(f"{head}: {_describe(exc)}", exc.problems) from None

    def _check_encoding(self, encoding: str) -> None:
        if not _is_json_encoding(encoding):
            raise self._payload_error(f"payload encoding is {encoding!r}, not JSON", ())
        charset = _charset(encoding).lower().replace("-", "").replace("_", "")
        if charset != "utf8":
            raise self._payload_error(
                f"payload encoding {encoding!r} names a charset other than UTF-8, "
                "which JSON payloads must use",
                (),
            )

    def _payload_error(self, text: str, problems: Sequence[Problem]) -> TaskPayloadError:
        return TaskPayloadError(f"Task {self._label}: {text} ({_NEVER})", problems=problems)

    def check_handler(self, fn: Callable[..., object]) -> None:
        """Check, at registration, that ``fn`` can be called as ``fn(value, ctx)``.

        Also, when ``fn``'s first parameter is annotated with a class and this task's
        type is a class, that the task's type is that class or a subclass (so a handler
        registered for the wrong task fails at once, even in untyped code). Annotations
        that cannot be resolved, and non-class ones, are left to the type checker.

        Raises:
            InvalidArgumentTypeError: (a ``TypeError``) ``fn`` is not callable, takes too
                few or too many positional parameters, has a required keyword-only one, or
                expects another type; the message names the task and the handler, and
                says how many parameters it takes against the two it must accept.
        """
        name = getattr(fn, "__qualname__", None)
        if not callable(fn):
            raise InvalidArgumentTypeError(
                f"Task {self._label}: the handler must be callable as fn(value, ctx) (an "
                f"async def or a def), got {fn!r} ({type(fn).__name__})"
            )
        name = name or repr(fn)
        try:
            signature = inspect.signature(fn)
        except (TypeError, ValueError):  # some builtins and C callables have none
            return
        try:
            signature.bind(None, None)
        except TypeError as exc:
            problem = _signature_problem(signature)
            what, hint = problem if problem is not None else (f"cannot be called: {exc}", "")
            raise InvalidArgumentTypeError(
                f"Task {self._label}: the handler {name} {what}; it must accept (value, ctx){hint}"
            ) from None
        first = next(iter(signature.parameters.values()))
        expected = self._type
        if first.kind is inspect.Parameter.VAR_POSITIONAL or not isinstance(
            expected, builtins.type
        ):
            return
        try:
            hints = typing.get_type_hints(fn)
        except Exception:  # a forward reference that does not resolve here
            return
        annotated = hints.get(first.name)
        # typing.Any is a class from Python 3.11 on, and takes every value.
        if not isinstance(annotated, builtins.type) or annotated in (object, Any):
            return
        try:
            fits = issubclass(expected, annotated)
        except TypeError:  # TypedDicts and some special forms refuse issubclass
            return
        if not fits:
            raise InvalidArgumentTypeError(
                f"Task {self._label}: the handler {name} takes {first.name}: "
                f"{annotated.__qualname__}, but the task's values are "
                f"{expected.__qualname__}"
            )
