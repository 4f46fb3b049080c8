"""The built-in validator of plain JSON types (no pydantic, no msgspec): what it accepts,
what it refuses and where it says the problem is."""

from __future__ import annotations

import typing
from typing import Any

import pytest

from sepp_anyio import Payload
from sepp_anyio._tasks._task import Task, TaskPayloadError


def _task(annotation: Any) -> Task[Any]:
    task: Task[Any] = Task("q", "t", annotation)
    assert task.library == "json"
    return task


def _refused(task: Task[Any], value: Any) -> str:
    with pytest.raises(ValueError, match=r"^Task 'q/t': ") as info:
        task.encode(value)
    return str(info.value).removeprefix("Task 'q/t': ")


@pytest.mark.parametrize(
    "annotation",
    [
        int,
        float,
        str,
        bool,
        None,
        type(None),
        Any,
        list,
        dict,
        list[int],
        dict[str, int],
        typing.List[int],  # noqa: UP006
        typing.Dict[str, float],  # noqa: UP006
        typing.Optional[int],  # noqa: UP045
        typing.Union[int, str],  # noqa: UP007
        int | str | None,
        list[dict[str, list[int | None]]],
    ],
)
def test_plain_annotations_need_no_library(annotation: Any) -> None:
    _task(annotation)


@pytest.mark.parametrize(
    ("annotation", "value", "sent", "received"),
    [
        (int, 5, b"5", 5),
        (int, 2**70, b"1180591620717411303424", 2**70),
        (float, 1.5, b"1.5", 1.5),
        (float, 2, b"2.0", 2.0),  # an int is a float (as for pydantic and msgspec)
        (bool, True, b"true", True),
        (str, "naïve ☃", '"naïve ☃"'.encode(), "naïve ☃"),
        (None, None, b"null", None),
        (int | float, 1, b"1", 1),  # the int stays an int
        (float | int, 1, b"1", 1),  # whatever the order
        (int | float, 1.5, b"1.5", 1.5),
        (list[int] | None, None, b"null", None),
        (
            Any,
            {"a": [1, None, "x", 2.5, True]},
            b'{"a":[1,null,"x",2.5,true]}',
            {"a": [1, None, "x", 2.5, True]},
        ),
        (Any, ("tuple", "ok"), b'["tuple","ok"]', ["tuple", "ok"]),
        (list, [1, "a"], b'[1,"a"]', [1, "a"]),
        (dict, {"k": {"n": [1]}}, b'{"k":{"n":[1]}}', {"k": {"n": [1]}}),
        (dict[str, float], {"a": 1}, b'{"a":1.0}', {"a": 1.0}),
    ],
)
def test_values_travel_as_compact_json(
    annotation: Any, value: Any, sent: bytes, received: Any
) -> None:
    task = _task(annotation)
    payload = task.encode(value)
    assert payload == Payload(sent, "application/json")
    decoded = task.decode(payload)
    assert decoded == received
    assert type(decoded) is type(received)


@pytest.mark.parametrize(
    ("annotation", "value", "message"),
    [
        (int, True, "expected int, got bool"),
        (int, 1.0, "expected int, got float"),
        (int, "1", "expected int, got str"),
        (float, False, "expected float, got bool"),
        (float, float("nan"), "nan is not JSON (NaN and infinities have no JSON form)"),
        (float, float("inf"), "inf is not JSON"),
        (bool, 1, "expected bool, got int"),
        (str, b"x", "expected str, got bytes"),
        (str, "\ud800", "not encodable as UTF-8"),
        (None, 0, "expected null, got int"),
        (list[int], (1, 2), "expected a list, got tuple"),
        (list[int], {1, 2}, "expected a list, got set"),
        (dict[str, int], [], "expected an object (dict), got list"),
        (dict[str, int], {1: 1}, "JSON object keys are strings, got key 1"),
        (int | str, [1], "expected int | str, got list"),
        (int | None, "x", "expected int | null, got str"),
        (Any, {"a": {1, 2}}, "field 'a': set is not a JSON type"),
        (Any, [object()], "field '[0]': object is not a JSON type"),
        (Any, {"a": float("-inf")}, "field 'a': -inf is not JSON"),
        (Any, {2: "x"}, "JSON object keys are strings, got key 2"),
        (list[int] | None, [1, "x"], "field '[1]': expected int, got str"),
        (dict[str, list[int]], {"a": [0, 1, "2"]}, "field 'a[2]': expected int, got str"),
        (
            list[dict[str, list[int | None]]],
            [{"k": [None]}, {"k": [1, 2.5]}],
            "field '[1].k[1]': expected int | null, got float",
        ),
    ],
)
def test_invalid_values_are_refused_naming_the_field(
    annotation: Any, value: Any, message: str
) -> None:
    assert _refused(_task(annotation), value).startswith(message)


@pytest.mark.parametrize(
    ("annotation", "data", "message"),
    [
        (float, b"NaN", "payload is not JSON: NaN is not JSON"),
        (float, b"-Infinity", "payload is not JSON: -Infinity is not JSON"),
        (Any, b"\xef\xbb\xbf{}", "payload is not JSON: "),  # a byte-order mark
        (Any, b"{} {}", "payload is not JSON: Extra data"),
        (int, b"1.0", "payload does not validate: expected int, got float"),
        (dict[str, int], b'{"a":1,"b":"2"}', "payload does not validate: field 'b': expected"),
    ],
)
def test_invalid_payloads_are_refused(annotation: Any, data: bytes, message: str) -> None:
    with pytest.raises(TaskPayloadError) as info:
        _task(annotation).decode(Payload(data, "application/json"))
    assert str(info.value).startswith(f"Task 'q/t': {message}")


def test_none_task_takes_a_job_without_payload() -> None:
    task: Task[None] = Task("q", "t", None)
    assert task.encode(None) == Payload(b"null", "application/json")
    assert task.decode(None) is None


def test_a_long_key_is_clipped_in_the_message() -> None:
    message = _refused(_task(dict[str, int]), {"k" * 10_000: "x"})
    assert len(message) < 500
    assert message.startswith("field 'kkk") and "...': expected int, got str" in message
