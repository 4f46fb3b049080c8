"""The errors a typed task raises are the library's own (issue #29): a value that does not
validate is an :class:`InvalidArgumentError` (still a ``ValueError``) with the message it
always had, a bad declaration an :class:`InvalidArgumentTypeError` (still a ``TypeError``),
and a payload too deeply nested to check is a dead-lettering :class:`TaskPayloadError` in
the worker (it used to escape as a ``RecursionError``, which the worker retried) and an
:class:`InvalidArgumentError` on the producer. Worker tests on both backends, virtual time.
"""

from __future__ import annotations

from typing import Any

import msgspec
import pydantic
import pytest
import trio.testing

import sepp_anyio as sepp
from sepp_anyio import (
    EnqueueRequest,
    InvalidArgumentError,
    InvalidArgumentTypeError,
    JobCtx,
    Payload,
    SeppError,
    Task,
    TaskPayloadError,
    Worker,
)
from sepp_anyio.testing import open_in_memory_client
from tests.worker._helpers import EngineSpy, nack_kind, running
from tests.worker._vtime import VirtualTimeLoop

from ._kinds import PAddress, SAddress

pytestmark = pytest.mark.anyio

#: Far deeper than any recursion limit: every codec's parser or checker gives up on it.
DEPTH = 100_000
TOO_DEEP = "nested too deeply to be checked (deeper than the recursion limit allows)"


@pytest.fixture(
    params=[
        pytest.param(("asyncio", {"loop_factory": VirtualTimeLoop}), id="asyncio-vtime"),
        pytest.param(("trio", {}), id="trio-mockclock"),
    ]
)
def anyio_backend(request: pytest.FixtureRequest) -> tuple[str, dict[str, Any]]:
    backend, options = request.param
    if backend == "trio":
        options = {"clock": trio.testing.MockClock(autojump_threshold=0)}
    return backend, options


class Order(pydantic.BaseModel):
    order_id: int


class MOrder(msgspec.Struct):
    items: Any


class POrder(pydantic.BaseModel):
    items: Any


process_order = Task("orders", "process_order", Order)


def _nested(depth: int) -> list[Any]:
    root: list[Any] = []
    node = root
    for _ in range(depth):
        child: list[Any] = []
        node.append(child)
        node = child
    return root


def _assert_argument_error(error: BaseException, message: str) -> None:
    assert isinstance(error, InvalidArgumentError)
    assert isinstance(error, SeppError) and isinstance(error, ValueError)
    assert str(error) == message


# ---------------------------------------------------------------------------- producer side


def test_a_value_that_does_not_validate_is_an_invalid_argument_error() -> None:
    # The user's case from the issue: the message is kept word for word.
    bad: Any = {"order_id": "x"}
    message = "Task 'orders/process_order': field 'order_id': Input should be a valid integer"
    for call in (process_order.encode, process_order.request):
        with pytest.raises(InvalidArgumentError) as info:
            call(bad)
        _assert_argument_error(info.value, message)


@pytest.mark.parametrize(
    ("annotation", "value", "message"),
    [
        (int, "1", "Task 'q/t': expected int, got str"),
        (dict[str, int], {"a": True}, "Task 'q/t': field 'a': expected int, got bool"),
        (
            SAddress,
            SAddress(city=5),  # type: ignore[arg-type]
            "Task 'q/t': field 'city': Expected `str`, got `int`",
        ),
    ],
    ids=["json", "json-nested", "msgspec"],
)
def test_every_library_raises_invalid_argument_errors(
    annotation: Any, value: Any, message: str
) -> None:
    task: Task[Any] = Task("q", "t", annotation)
    with pytest.raises(InvalidArgumentError) as info:
        task.encode(value)
    _assert_argument_error(info.value, message)


async def test_enqueue_of_an_invalid_value_raises_it_and_sends_nothing() -> None:
    async with open_in_memory_client() as (client, engine):
        with pytest.raises(InvalidArgumentError) as info:
            await process_order.enqueue(client, {"order_id": "x"})  # type: ignore[call-overload]
        _assert_argument_error(
            info.value,
            "Task 'orders/process_order': field 'order_id': Input should be a valid integer",
        )
        assert "orders" not in engine.stats() or engine.stats()["orders"].live_depth == 0


@pytest.mark.parametrize(
    ("annotation", "value"),
    [(Any, None), (list[Any], None), (POrder, "pydantic"), (MOrder, "msgspec")],
    ids=["json-any", "json-list", "pydantic", "msgspec"],
)
def test_a_value_nested_too_deeply_is_an_invalid_argument_error(
    annotation: Any, value: str | None
) -> None:
    task: Task[Any] = Task("q", "t", annotation)
    deep = _nested(DEPTH)
    wrapped: Any = {"pydantic": POrder, "msgspec": MOrder}.get(value or "")
    with pytest.raises(InvalidArgumentError) as info:
        task.encode(wrapped(items=deep) if wrapped else deep)
    # pydantic reports its own depth limit, the others the recursion limit.
    assert str(info.value).startswith("Task 'q/t': ")
    if value != "pydantic":
        assert str(info.value) == f"Task 'q/t': {TOO_DEEP}"


def test_a_declaration_error_is_an_invalid_argument_type_error() -> None:
    with pytest.raises(InvalidArgumentTypeError) as info:
        Task("q", "t", PAddress | SAddress)
    assert isinstance(info.value, TypeError)
    assert str(info.value).startswith("Task 'q/t': ")
    assert "PAddress | tests.tasks._kinds.SAddress mixes pydantic and msgspec" in str(info.value)


# ---------------------------------------------------------------------------- worker side


@pytest.mark.parametrize(
    ("annotation", "wrap"),
    [(Any, False), (list[Any], False), (MOrder, True), (POrder, True)],
    ids=["json-any", "json-list", "msgspec", "pydantic"],
)
def test_a_payload_nested_too_deeply_is_a_task_payload_error(annotation: Any, wrap: bool) -> None:
    task: Task[Any] = Task("q", "t", annotation)
    nested = b"[" * DEPTH + b"]" * DEPTH
    data = b'{"items":' + nested + b"}" if wrap else nested
    with pytest.raises(TaskPayloadError) as info:
        task.decode(Payload(data, "application/json"))
    assert info.value.directive.kind == "dead_letter"
    assert str(info.value).startswith("Task 'q/t': payload ")
    assert str(info.value).endswith(
        "(it will never validate, so the job is dead-lettered without a retry)"
    )


def test_a_payload_the_parser_reads_but_the_checker_cannot_walk_is_a_task_payload_error() -> None:
    # json.loads reads 900 levels; the built-in validator walks a few frames per level.
    task: Task[Any] = Task("q", "t", Any)
    with pytest.raises(TaskPayloadError) as info:
        task.decode(Payload(b"[" * 900 + b"]" * 900, "application/json"))
    assert f"payload does not validate: {TOO_DEEP}" in str(info.value)


async def test_the_worker_dead_letters_a_too_deep_payload_on_its_first_attempt() -> None:
    task = Task("q", "deep", list[Any], max_attempts=5)
    seen: list[Any] = []
    async with open_in_memory_client() as (client, engine):
        spy = EngineSpy(engine)
        worker = Worker(client, ["q"])

        @worker.task(task)
        async def handle(value: list[Any], ctx: JobCtx) -> None:
            seen.append(value)

        good = await task.enqueue(client, [[1]])
        nested = b"[" * DEPTH + b"]" * DEPTH
        bad = await client.enqueue(
            EnqueueRequest("q", "deep", payload=Payload(nested, "application/json"))
        )
        async with running(worker):
            await spy.wait_for("ack")
            [nack] = await spy.wait_for("nack")
        assert nack.request.job_id == bad.job_id
        assert nack_kind(nack) == ("dead_letter", None)
        assert nack.reply.dead_lettered
        assert nack.request.reason == (
            f"Task 'q/deep': payload does not validate: {TOO_DEEP} "
            "(it will never validate, so the job is dead-lettered without a retry)"
        )
        stats = worker.statistics()
        assert (stats.processed, stats.nacked_dead_letter, stats.nacked_retry) == (1, 1, 0)
    assert seen == [[[1]]]
    assert good.job_id != bad.job_id


def test_the_names_are_exported() -> None:
    assert sepp.InvalidArgumentError is InvalidArgumentError
    assert issubclass(InvalidArgumentError, ValueError)


async def test_worker_task_refuses_a_one_parameter_function_saying_it_takes_too_few() -> None:
    task = Task("emails", "welcome", int)
    async with open_in_memory_client() as (client, _engine):
        worker = Worker(client, ["emails"])

        async def welcome(job: int) -> None:
            pass

        with pytest.raises(InvalidArgumentTypeError) as info:
            worker.task(task)(welcome)  # type: ignore[arg-type]
        assert str(info.value) == (
            "Task 'emails/welcome': the handler test_worker_task_refuses_a_one_parameter_"
            "function_saying_it_takes_too_few.<locals>.welcome takes 1 positional parameter "
            "(job); it must accept (value, ctx)"
        )
        assert worker.handlers == {}
