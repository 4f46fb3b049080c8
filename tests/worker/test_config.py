"""Worker construction and handler registration (no event loop needed)."""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Callable
from typing import Any, cast

import pytest

import sepp_anyio as sepp
from sepp_anyio import (
    Client,
    DuplicateHandlerError,
    InvalidArgumentTypeError,
    JobCtx,
    Payload,
    Worker,
)

CLIENT = cast("Client", object())  # the constructor only stores it


async def noop(payload: Payload | None, ctx: JobCtx) -> None:
    return None


async def other(payload: Payload | None, ctx: JobCtx) -> None:
    return None


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"lease": 0}, "lease"),
        ({"lease": -1.0}, "lease"),
        ({"lease": float("nan")}, "lease"),
        ({"lease": float("inf")}, "lease"),
        ({"wait": 0}, "wait"),
        ({"max_in_flight": 0}, "max_in_flight"),
        ({"max_jobs": 0}, "max_jobs"),
        ({"auto_extend": 0.0}, "auto_extend"),
        ({"auto_extend": -2}, "auto_extend"),
        ({"reserve_error_backoff": -0.5}, "reserve_error_backoff"),
        ({"unready_after": -1}, "unready_after"),
        ({"unready_after": float("inf")}, "unready_after"),
        ({"worker_id": ""}, "worker_id"),
        ({"job_timeout": 0}, "job_timeout"),
        ({"max_lease_time": -1}, "max_lease_time"),
        ({"drain_timeout": -1}, "drain_timeout"),
        ({"drain_timeout": float("nan")}, "drain_timeout"),
        ({"sync_threads": 0}, "sync_threads"),
    ],
)
def test_invalid_values_raise_value_error_naming_the_argument(
    kwargs: dict[str, Any], name: str
) -> None:
    with pytest.raises(ValueError, match=rf"\b{name}\b"):
        Worker(CLIENT, ["q"], **kwargs)


@pytest.mark.parametrize(
    ("queues", "pattern"), [([], "queues"), ([""], r"queues\[0\]"), (["a", ""], r"queues\[1\]")]
)
def test_bad_queues_raise_value_error_naming_them(queues: list[str], pattern: str) -> None:
    with pytest.raises(ValueError, match=pattern):
        Worker(CLIENT, queues)


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"lease": "30"}, "lease"),
        ({"max_in_flight": 2.0}, "max_in_flight"),
        ({"max_jobs": True}, "max_jobs"),
        ({"sync_threads": 1.5}, "sync_threads"),
        ({"unready_after": "5"}, "unready_after"),
        ({"unready_after": None}, "unready_after"),
    ],
)
def test_wrong_types_raise_type_error_naming_the_argument(
    kwargs: dict[str, Any], name: str
) -> None:
    with pytest.raises(TypeError, match=name):
        Worker(CLIENT, ["q"], **kwargs)


def test_a_single_string_is_not_a_list_of_queues() -> None:
    with pytest.raises(TypeError, match="queues"):
        Worker(CLIENT, "emails")


def test_zero_is_allowed_where_it_means_no_wait() -> None:
    Worker(CLIENT, ["q"], reserve_error_backoff=0, drain_timeout=0, unready_after=0)


def test_default_worker_id_is_host_pid_random(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOSTNAME", "box-7")
    first, second = Worker(CLIENT, ["q"]).worker_id, Worker(CLIENT, ["q"]).worker_id
    assert re.fullmatch(rf"box-7-{os.getpid()}-[0-9a-f]{{8}}", first)
    assert first != second
    assert Worker(CLIENT, ["q"], worker_id="mine").worker_id == "mine"


def test_handler_registration() -> None:
    worker = Worker(CLIENT, ["q"])

    @worker.handler("a")
    async def a(payload: Payload | None, ctx: JobCtx) -> None:
        return None

    assert worker.handlers == {"a": a}
    with pytest.raises(DuplicateHandlerError) as duplicate:
        worker.handle("a", noop)
    # The error is built from the job type, not from a sentence that it then nests.
    assert duplicate.value.job_type == "a"
    assert str(duplicate.value).count("already registered") == 1
    with pytest.raises(DuplicateHandlerError):
        worker.handler("a")(noop)
    assert worker.handlers["a"] is a  # the failed registrations changed nothing

    assert worker.handle("b", noop) is worker  # calls chain
    assert worker.replace_handler("a", other).replace_handler("c", noop) is worker
    assert worker.handlers == {"a": other, "b": noop, "c": noop}
    assert worker.remove_handler("b").remove_handler("missing") is worker
    assert worker.handlers == {"a": other, "c": noop}
    worker.handle("b", other)  # free again after removal

    view = worker.handlers
    cast("dict[str, Any]", view).clear()  # a copy: the worker's table is untouched
    assert set(worker.handlers) == {"a", "b", "c"}


def test_catch_all_works_as_a_decorator_and_replaces_the_previous_one() -> None:
    worker = Worker(CLIENT, ["q"])

    @worker.catch_all
    async def fallback(payload: Payload | None, ctx: JobCtx) -> None:
        return None

    assert worker._catch_all is fallback
    assert worker.catch_all(noop) is noop
    assert worker._catch_all is noop


@pytest.mark.parametrize(
    ("job_type", "error"),
    [("", sepp.InvalidArgumentError), (None, sepp.InvalidArgumentTypeError)],
)
def test_bad_job_type_is_refused(job_type: Any, error: type[Exception]) -> None:
    """Through the one rule of ``_checks``: an empty name is a bad value, a name that is
    not a str a bad type."""
    worker = Worker(CLIENT, ["q"])
    with pytest.raises(error, match="job_type"):
        worker.handle(job_type, noop)


def test_non_callable_handler_is_refused() -> None:
    worker = Worker(CLIENT, ["q"])
    with pytest.raises(TypeError, match="'a'"):
        worker.handle("a", cast("Any", "not a function"))
    with pytest.raises(TypeError, match="catch-all"):
        worker.catch_all(cast("Any", 42))


def test_shutdown_handle_before_run() -> None:
    worker = Worker(CLIENT, ["q"])
    handle = worker.shutdown_handle()
    before = handle.is_shutdown
    assert not before
    handle.shutdown()
    handle.shutdown()  # idempotent
    worker.shutdown()
    assert handle.is_shutdown
    assert worker.shutdown_handle().is_shutdown


def sync_noop(payload: Payload | None, ctx: JobCtx) -> None:
    return None


def test_sync_and_async_handlers_both_register_and_type_check() -> None:
    """Both kinds are a ``Handler`` for mypy --strict (this file is type-checked)."""
    worker = Worker(CLIENT, ["q"], sync_threads=3)

    @worker.handler("decorated-sync")
    def plain(payload: Payload | None, ctx: JobCtx) -> None:
        return None

    @worker.handler("decorated-async")
    async def coroutine(payload: Payload | None, ctx: JobCtx) -> None:
        return None

    worker.handle("sync", sync_noop).handle("async", noop)
    worker.replace_handler("sync", noop).replace_handler("async", sync_noop)
    assert worker.catch_all(sync_noop) is sync_noop
    assert worker.handlers == {
        "decorated-sync": plain,
        "decorated-async": coroutine,
        "sync": noop,
        "async": sync_noop,
    }


async def _three(payload: Payload | None, ctx: JobCtx, extra: int) -> None:
    return None


class _NoArgs:
    def __call__(self) -> None:
        return None


async def _agen(payload: Payload | None, ctx: JobCtx) -> Any:
    yield None


def _gen(payload: Payload | None, ctx: JobCtx) -> Any:
    yield None


def _one(payload: Payload | None) -> None:
    return None


def _keywords_only(*, payload: Payload | None, ctx: JobCtx) -> None:
    return None


BAD_HANDLERS: list[Any] = [
    pytest.param(_one, "signature is _one(payload: 'Payload | None')", id="one-argument"),
    pytest.param(_three, "signature is _three(", id="three-arguments"),
    pytest.param(lambda: None, "signature is <lambda>()", id="lambda-no-arguments"),
    pytest.param(_keywords_only, "signature is _keywords_only(*,", id="keyword-only"),
    pytest.param(_NoArgs(), "signature is _NoArgs()", id="callable-object"),
    pytest.param(
        functools.partial(cast("Any", _three), None, None, 1), "cannot be called", id="partial"
    ),
    pytest.param(_agen, "is an async generator function", id="async-generator"),
    pytest.param(_gen, "is a generator function", id="generator"),
    pytest.param(
        "not a function",
        "must be an async or sync function taking (payload, ctx); got 'not a function' (a str)",
        id="not-callable",
    ),
]


@pytest.mark.parametrize(
    ("entry", "given"), [(3, "3 (an int)"), (None, "None"), ({"a": 1}, "{'a': 1} (a dict)")]
)
def test_a_registry_entry_that_is_not_a_function_says_what_is_expected_and_given(
    entry: Any, given: str
) -> None:
    """It said "must be callable as ... got a int"."""
    worker = Worker(CLIENT, ["emails"])
    with pytest.raises(InvalidArgumentTypeError) as info:
        worker.handle("emails/send", entry)
    assert isinstance(info.value, TypeError)
    assert str(info.value) == (
        "the handler for job type 'emails/send' must be an async or sync function taking "
        f"(payload, ctx); got {given}"
    )


@pytest.mark.parametrize("how", ["handle", "handler", "replace_handler", "catch_all"])
@pytest.mark.parametrize(("fn", "needle"), BAD_HANDLERS)
def test_a_handler_that_cannot_take_payload_and_ctx_is_refused_at_registration(
    how: str, fn: Any, needle: str
) -> None:
    worker = Worker(CLIENT, ["q"])
    register: dict[str, Callable[[], object]] = {
        "handle": lambda: worker.handle("resize", fn),
        "handler": lambda: worker.handler("resize")(fn),
        "replace_handler": lambda: worker.replace_handler("resize", fn),
        "catch_all": lambda: worker.catch_all(fn),
    }
    with pytest.raises(TypeError) as info:
        register[how]()
    message = str(info.value)
    assert needle in message, message
    assert ("the catch-all" if how == "catch_all" else "job type 'resize'") in message
    # What is expected: the full signature, or for something that is no function at all,
    # a function taking (payload, ctx) (the needle).
    if callable(fn):
        assert "handler(payload: Payload | None, ctx: JobCtx) -> None" in message
    assert isinstance(info.value, InvalidArgumentTypeError)
    assert worker.handlers == {}
    assert worker._catch_all is None


@pytest.mark.parametrize(
    "fn",
    [
        pytest.param(lambda payload, ctx, extra=1: None, id="extra-default"),
        pytest.param(lambda *args: None, id="varargs"),
        pytest.param(lambda payload, *rest, **options: None, id="varargs-and-keywords"),
        pytest.param(functools.partial(_three, extra=2), id="partial-filling-the-third"),
        pytest.param(print, id="builtin"),
    ],
)
def test_signatures_that_can_take_payload_and_ctx_are_accepted(fn: Any) -> None:
    Worker(CLIENT, ["q"]).handle("t", fn)
