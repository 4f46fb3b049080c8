"""The Task itself: its arguments, the requests it builds, its handler check and its
worker-side error."""

from __future__ import annotations

import dataclasses
import math
from datetime import UTC, datetime
from typing import Any

import pytest

from sepp_anyio import (
    HandlerError,
    InvalidArgumentTypeError,
    JobCtx,
    Payload,
    RetryDirective,
    TraceContext,
)
from sepp_anyio._tasks._task import Task, TaskPayloadError

from ._kinds import WHEN, DAddress, DWelcome, TWelcome


@dataclasses.dataclass
class Special(DWelcome):
    pass


@dataclasses.dataclass
class Other:
    order: int


welcome = Task("emails", "send_welcome", DWelcome, priority=5, max_attempts=5, timeout=30.0)
VALUE = DWelcome(user=1, when=WHEN, tags=[], address=DAddress(city="Bern"))


def test_attributes_and_repr() -> None:
    assert (welcome.queue, welcome.job_type, welcome.type) == ("emails", "send_welcome", DWelcome)
    assert (welcome.priority, welcome.max_attempts, welcome.timeout) == (5, 5, 30.0)
    assert repr(welcome) == "Task('emails', 'send_welcome', DWelcome)"
    bare: Task[Any] = Task("q", "t", int | None)
    assert (bare.priority, bare.max_attempts, bare.timeout) == (None, None, None)
    assert repr(bare) == "Task('q', 't', int | None)"


def test_request_takes_the_task_defaults() -> None:
    request = welcome.request(VALUE)
    assert (request.priority, request.max_attempts) == (5, 5)
    assert request.idempotency_key is None and request.trace_context is None
    assert (request.delay, request.scheduled_at, dict(request.custom)) == (None, None, {})
    bare = Task("q", "t", int).request(1)
    assert (bare.priority, bare.max_attempts) == (None, None)


def test_per_call_options_override_the_task() -> None:
    trace = TraceContext("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
    at = datetime(2030, 1, 1, tzinfo=UTC)
    request = welcome.request(
        VALUE,
        scheduled_at=at,
        idempotency_key="k-1",
        priority=0,
        max_attempts=1,
        custom={"a": 1, "b": "x"},
        trace_context=trace,
    )
    assert (request.priority, request.max_attempts, request.idempotency_key) == (0, 1, "k-1")
    assert (request.scheduled_at, request.trace_context) == (at, trace)
    assert dict(request.custom) == {"a": 1, "b": "x"}
    assert welcome.request(VALUE, delay=2.5).delay == 2.5


@pytest.mark.parametrize(
    ("options", "error", "message"),
    [
        ({"delay": 1.0, "scheduled_at": WHEN}, ValueError, "either scheduled_at or delay"),
        ({"priority": 10}, ValueError, "priority must be between 0 and 9"),
        ({"max_attempts": 0}, ValueError, "max_attempts must be between 1"),
        ({"idempotency_key": ""}, ValueError, "idempotency_key must not be empty"),
        ({"delay": -1.0}, ValueError, "delay must be >= 0"),
        ({"custom": {"a": [1]}}, TypeError, r"custom\['a'\]"),
    ],
)
def test_bad_per_call_options_are_refused(
    options: dict[str, Any], error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        welcome.request(VALUE, **options)


@pytest.mark.parametrize(
    ("args", "kwargs", "error", "message"),
    [
        (("", "t"), {}, ValueError, "Task queue must not be empty"),
        (("a/b", "t"), {}, ValueError, "Task queue must not contain '/'"),
        ((1, "t"), {}, TypeError, "Task queue must be a str"),
        (("q", ""), {}, ValueError, "Task job_type must not be empty"),
        (("q", "t"), {"priority": 10}, ValueError, "Task priority must be between 0 and 9"),
        (("q", "t"), {"priority": True}, TypeError, "Task priority must be an int"),
        (("q", "t"), {"max_attempts": 0}, ValueError, "Task max_attempts must be between 1"),
        (("q", "t"), {"timeout": 0}, ValueError, "Task timeout must be at least 0.001"),
        (("q", "t"), {"timeout": math.inf}, ValueError, "Task timeout must be a finite"),
        (("q", "t"), {"timeout": "30"}, TypeError, "Task timeout must be a number"),
    ],
)
def test_bad_task_arguments_are_refused(
    args: tuple[Any, ...], kwargs: dict[str, Any], error: type[Exception], message: str
) -> None:
    make: Any = Task  # the arguments are wrong on purpose
    with pytest.raises(error, match=message):
        make(*args, int, **kwargs)


# ---------------------------------------------------------------------------- handler check


async def typed(job: DWelcome, ctx: JobCtx) -> None:
    pass


def typed_sync(job: DWelcome, ctx: JobCtx) -> None:
    pass


async def loose(job, ctx):  # type: ignore[no-untyped-def]
    pass


async def for_a_base(job: object, ctx: JobCtx) -> None:
    pass


async def with_extras(job: DWelcome, ctx: JobCtx, extra: int = 0, *, flag: bool = False) -> None:
    pass


async def star(*args: Any) -> None:
    pass


async def unresolvable(job: NoSuchType, ctx: JobCtx) -> None:  # type: ignore[name-defined]  # noqa: F821
    pass


class Handler:
    async def __call__(self, job: DWelcome, ctx: JobCtx) -> None:
        pass

    async def method(self, job: DWelcome, ctx: JobCtx) -> None:
        pass


@pytest.mark.parametrize(
    "fn",
    [
        typed,
        typed_sync,
        loose,
        for_a_base,
        with_extras,
        star,
        unresolvable,
        Handler(),
        Handler().method,
        print,
    ],
)
def test_handlers_that_fit_pass_the_check(fn: Any) -> None:
    welcome.check_handler(fn)


def test_a_subclass_task_fits_a_handler_for_its_base() -> None:
    Task("q", "t", Special).check_handler(typed)


async def one_parameter(job: DWelcome) -> None:
    pass


async def no_parameters() -> None:
    pass


async def three_parameters(job: DWelcome, ctx: JobCtx, extra: int) -> None:
    pass


async def four_parameters(job: DWelcome, ctx: JobCtx, extra: int, more: int, x: int = 0) -> None:
    pass


async def keyword_only(*, job: DWelcome, ctx: JobCtx) -> None:
    pass


async def keyword_only_ctx(job: DWelcome, *, ctx: JobCtx) -> None:
    pass


async def required_keyword(job: DWelcome, ctx: JobCtx, *, flag: bool) -> None:
    pass


async def for_another_type(job: Other, ctx: JobCtx) -> None:
    pass


@pytest.mark.parametrize(
    ("fn", "message"),
    [
        # Python's own words for these ("too many positional arguments" for a function that
        # takes too few) point the wrong way: the message counts the parameters instead.
        (
            one_parameter,
            "the handler one_parameter takes 1 positional parameter (job); "
            "it must accept (value, ctx)",
        ),
        (
            no_parameters,
            "the handler no_parameters takes no positional parameters; it must accept (value, ctx)",
        ),
        (
            lambda job: None,
            "the handler <lambda> takes 1 positional parameter (job); it must accept (value, ctx)",
        ),
        (
            three_parameters,
            "the handler three_parameters requires 3 positional parameters (job, ctx, extra); "
            "it must accept (value, ctx) (give extra a default)",
        ),
        (
            four_parameters,
            "the handler four_parameters requires 4 positional parameters (job, ctx, extra, "
            "more); it must accept (value, ctx) (give extra and more a default)",
        ),
        (
            keyword_only,
            "the handler keyword_only takes no positional parameters; it must accept "
            "(value, ctx) (job and ctx are keyword-only: remove the '*' before them)",
        ),
        (
            keyword_only_ctx,
            "the handler keyword_only_ctx takes 1 positional parameter (job); it must accept "
            "(value, ctx) (ctx is keyword-only: remove the '*' before it)",
        ),
        (
            required_keyword,
            "the handler required_keyword requires the keyword-only parameter flag; it must "
            "accept (value, ctx) and nothing else (give flag a default)",
        ),
        (
            for_another_type,
            "the handler for_another_type takes job: Other, but the task's values are DWelcome",
        ),
        (
            "not callable",
            "the handler must be callable as fn(value, ctx) (an async def or a def), "
            "got 'not callable' (str)",
        ),
        (
            5,
            "the handler must be callable as fn(value, ctx) (an async def or a def), got 5 (int)",
        ),
    ],
)
def test_handlers_that_do_not_fit_are_refused(fn: Any, message: str) -> None:
    with pytest.raises(InvalidArgumentTypeError) as info:
        welcome.check_handler(fn)
    assert isinstance(info.value, TypeError)  # what it was before, still
    assert str(info.value) == f"Task 'emails/send_welcome': {message}"


async def for_a_typeddict(job: TWelcome, ctx: JobCtx) -> None:
    pass


def test_typeddict_handlers_pass_and_other_classes_are_refused() -> None:
    task = Task("q", "t", TWelcome)
    task.check_handler(for_a_typeddict)  # TypedDicts refuse issubclass: left to mypy
    with pytest.raises(TypeError, match="takes job: Other, but the task's values are TWelcome"):
        task.check_handler(for_another_type)


# ---------------------------------------------------------------------------- the error


def test_task_payload_error_dead_letters_as_a_handler_error() -> None:
    with pytest.raises(TaskPayloadError) as info:
        welcome.decode(Payload(b'{"user": "x"}', "application/json"))
    error = info.value
    assert isinstance(error, HandlerError)
    assert error.directive == RetryDirective.dead_letter()
    assert str(error) == error.reason
    assert [p.field for p in error.problems] == ["user", "when", "tags", "address"]
    assert error.field == "user"
    # HandlerError's constructors still work on the subclass.
    retry = TaskPayloadError.retry("later")
    assert isinstance(retry, TaskPayloadError) and retry.directive.kind == "default"
    assert retry.field is None


def test_many_problems_are_summarised() -> None:
    wide = Task("q", "t", dict[str, Any])
    assert wide.library == "json"
    task = Task("q", "t", list[DWelcome])
    with pytest.raises(TaskPayloadError) as info:
        task.decode(Payload(b"[" + b",".join([b"{}"] * 20) + b"]", "application/json"))
    message = str(info.value)
    assert len(info.value.problems) == 5
    assert "field '[0].user': Field required; field '[0].when': Field required" in message
    assert "(and 75 more)" in message
    assert len(message) < 1000
