"""A task's result type (``Task(..., result=...)``): ``Task[X]`` stays valid, the result is
validated and encoded on the worker's side and validated on the producer's, ``reply_to``
is stored in the documented custom field, and the result envelope is read strictly."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from sepp_anyio import (
    InvalidArgumentError,
    InvalidArgumentTypeError,
    InvalidResultError,
    JobFailedError,
    Payload,
    Result,
    Task,
)
from sepp_anyio._model._results import failure_payload, read_result, success_payload


@dataclasses.dataclass
class Spec:
    pages: int


@dataclasses.dataclass
class Report:
    pages: int


render = Task("reports", "render", Spec, result=Report)
plain = Task("reports", "plain", Spec)


def test_task_takes_one_or_two_type_arguments_at_run_time() -> None:
    assert Task[Spec].__args__ == (Spec, type(None))  # type: ignore[attr-defined]
    assert Task[Spec, Report].__args__ == (Spec, Report)  # type: ignore[attr-defined]
    assert render.result_type is Report and plain.result_type is None


def test_a_result_type_the_libraries_cannot_check_is_refused() -> None:
    with pytest.raises(InvalidArgumentTypeError, match="Task 'reports/bad'"):
        Task("reports", "bad", Spec, result=object())


def test_the_result_is_validated_and_encoded_as_compact_json() -> None:
    assert render.encode_result(Report(3)) == b'{"pages":3}'
    with pytest.raises(InvalidResultError, match="Task 'reports/render': the handler's result"):
        render.encode_result({"pages": "x"})  # type: ignore[arg-type]
    # No result type: whatever the handler returns is not kept.
    assert plain.encode_result(None) == b"null"


def test_the_result_is_validated_on_the_way_in() -> None:
    assert render.decode_result({"pages": 2}) == Report(2)
    with pytest.raises(InvalidResultError, match="field 'pages'"):
        render.decode_result({"pages": "two"})
    assert plain.decode_result(None) is None


def test_reply_to_is_stored_in_the_documented_custom_field() -> None:
    request = render.request(Spec(1), reply_to="results.web-1", custom={"k": 1})
    assert request.custom == {"k": 1, "sepp.reply_to": "results.web-1"}
    assert "sepp.reply_to" not in render.request(Spec(1)).custom
    with pytest.raises(InvalidArgumentError, match="reply_to"):
        render.request(Spec(1), reply_to="a/b")


@pytest.mark.parametrize(
    ("payload", "expected"),
    [
        (success_payload(b'{"pages":1}'), Result("j", True, {"pages": 1})),
        (success_payload(b"null"), Result("j", True, None)),
        (
            failure_payload("ValueError", "bad"),
            Result("j", False, error_type="ValueError", error_message="bad"),
        ),
    ],
    ids=["value", "null", "failure"],
)
def test_an_envelope_is_read(payload: Payload, expected: Result) -> None:
    assert read_result("j", payload) == expected


def test_a_failure_raises_naming_the_remote_exception() -> None:
    result = read_result("j", failure_payload("KeyError", "'x'"))
    with pytest.raises(JobFailedError, match="job 'j' failed: KeyError: 'x'") as info:
        result.raise_for_failure()
    assert (info.value.error_type, info.value.error_message) == ("KeyError", "'x'")


@pytest.mark.parametrize(
    ("payload", "match"),
    [
        (None, "has no payload"),
        (Payload(b"{nope", "application/json"), "is not JSON"),
        (Payload(b"\xff", "application/json"), "is not JSON"),
        (Payload.from_json([1]), "not a result envelope"),
        (Payload.from_json({"ok": True}), "not a result envelope"),
        (Payload.from_json({"ok": False, "error": {"type": 1, "message": "m"}}), "envelope"),
        (Payload.from_json({"ok": 1, "value": 2}), "not a result envelope"),
    ],
)
def test_a_payload_that_is_no_envelope_is_refused(payload: Any, match: str) -> None:
    with pytest.raises(InvalidResultError, match=match):
        read_result("j", payload)
