"""Every supported kind of type: round trips, the bytes on the wire, and validation
failures on the producer and the worker side, each naming its field."""

from __future__ import annotations

import re
from typing import Any

import pydantic
import pytest

from sepp_anyio import EnqueueRequest, InvalidArgumentError, Payload, RetryDirective
from sepp_anyio._tasks._task import Task, TaskPayloadError

from ._kinds import KINDS, Kind

KIND_IDS = [kind.id for kind in KINDS]


@pytest.fixture(params=KINDS, ids=KIND_IDS)
def kind(request: pytest.FixtureRequest) -> Kind:
    return request.param  # type: ignore[no-any-return]


@pytest.fixture
def task(kind: Kind) -> Task[Any]:
    return kind.task()


def _cases(attr: str) -> list[Any]:
    return [
        pytest.param(kind, index, id=f"{kind.id}-{index}")
        for kind in KINDS
        for index in range(len(getattr(kind, attr)))
    ]


def test_the_expected_library_checks_it(kind: Kind, task: Task[Any]) -> None:
    assert task.library == kind.library


def test_round_trip(kind: Kind, task: Task[Any]) -> None:
    payload = task.encode(kind.value)
    assert payload.encoding == "application/json"
    assert task.decode(payload) == kind.value


def test_bytes_are_those_of_payload_from_json(kind: Kind, task: Task[Any]) -> None:
    # Compact, UTF-8, no ASCII escapes: byte for byte what an untyped producer sends.
    assert task.encode(kind.value) == Payload.from_json(kind.wire)


def test_json_from_another_producer_decodes(kind: Kind, task: Task[Any]) -> None:
    spaced = Payload(
        b" " + Payload.from_json(kind.wire).data.replace(b",", b" , ") + b"\n",
        "application/json; charset=utf-8",
    )
    assert task.decode(spaced) == kind.value
    assert task.decode(Payload.from_json(kind.wire, encoding="application/vnd.x+json")) == (
        kind.value
    )


def test_request_carries_the_encoded_value(kind: Kind, task: Task[Any]) -> None:
    request = task.request(kind.value)
    assert isinstance(request, EnqueueRequest)
    assert (request.queue, request.job_type) == ("q", kind.id)
    assert request.payload == task.encode(kind.value)
    assert request.payload is not None and task.decode(request.payload) == kind.value


@pytest.mark.parametrize(("kind", "index"), _cases("bad_values"))
def test_producer_refuses_an_invalid_value(kind: Kind, index: int) -> None:
    task = kind.task()
    value, field = kind.bad_values[index]
    prefix = f"Task 'q/{kind.id}': " + (f"field '{field}': " if field else "")
    with pytest.raises(InvalidArgumentError, match="^" + re.escape(prefix)) as info:
        task.request(value)
    assert isinstance(info.value, ValueError)  # as it was before it was a SeppError
    if not field:
        assert "field '" not in str(info.value)


@pytest.mark.parametrize(("kind", "index"), _cases("bad_payloads"))
def test_worker_refuses_an_invalid_payload(kind: Kind, index: int) -> None:
    task = kind.task()
    text, field = kind.bad_payloads[index]
    with pytest.raises(TaskPayloadError) as info:
        task.decode(Payload(text.encode(), "application/json"))
    error = info.value
    message = str(error)
    assert message.startswith(f"Task 'q/{kind.id}': payload does not validate: ")
    assert message.endswith("(it will never validate, so the job is dead-lettered without a retry)")
    assert error.directive == RetryDirective.dead_letter()
    assert error.reason == message
    if field:
        assert f"field '{field}': " in message
        assert error.field == field
    else:
        assert "field '" not in message
        assert error.field is None


@pytest.mark.parametrize(
    ("data", "encoding", "says"),
    [
        pytest.param(b'{"user": ', "application/json", "payload is not JSON: ", id="truncated"),
        pytest.param(b"{user: 1}", "application/json", "payload is not JSON: ", id="not-json"),
        pytest.param(b"\xff\xfe{}", "application/json", "payload is not UTF-8 JSON", id="bytes"),
        pytest.param(b'"caf\xe9"', "application/json", "payload is not UTF-8 JSON", id="latin-1"),
        pytest.param(
            b'{"user":1}', "text/plain", "payload encoding is 'text/plain', not JSON", id="text"
        ),
        pytest.param(
            b"\x81\xa4user\x01",
            "application/msgpack",
            "payload encoding is 'application/msgpack', not JSON",
            id="msgpack",
        ),
        pytest.param(
            '{"user":1}'.encode("utf-16"),
            "application/json; charset=utf-16",
            "names a charset other than UTF-8",
            id="utf-16",
        ),
    ],
)
def test_worker_refuses_what_is_not_json(
    kind: Kind, task: Task[Any], data: bytes, encoding: str, says: str
) -> None:
    with pytest.raises(TaskPayloadError) as info:
        task.decode(Payload(data, encoding))
    message = str(info.value)
    assert message.startswith(f"Task 'q/{kind.id}': ")
    assert says in message
    assert message.endswith("dead-lettered without a retry)")
    assert info.value.directive.kind == "dead_letter"


def test_a_job_without_payload_is_read_as_null(kind: Kind, task: Task[Any]) -> None:
    if kind.accepts_null:
        assert task.decode(None) is None
        return
    with pytest.raises(TaskPayloadError, match="the job has no payload, and null does not"):
        task.decode(None)


class Aliased(pydantic.BaseModel):
    user_id: int = pydantic.Field(alias="userId")
    blob: pydantic.Json[list[int]]


def test_pydantic_aliases_are_the_names_on_the_wire() -> None:
    task = Task("q", "t", Aliased)
    value = Aliased(userId=1, blob="[1,2]")  # type: ignore[arg-type]
    payload = task.encode(value)
    assert payload.json() == {"userId": 1, "blob": "[1,2]"}
    assert task.decode(payload) == value
    with pytest.raises(TaskPayloadError, match="field 'userId': Field required"):
        task.decode(Payload.from_json({"user_id": 1, "blob": "[]"}))
