"""One rule per kind of argument (``sepp_anyio._model._checks``), applied alike everywhere.

A queue name, a duration or a count is accepted or refused the same way by every public
entry point that takes one (and, for queue names, by the reference server's own rule),
with the tree's ``InvalidArgumentError`` / ``InvalidArgumentTypeError``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, cast

import pytest

from sepp_anyio import (
    Client,
    EnqueueRequest,
    InvalidArgumentError,
    InvalidArgumentTypeError,
    Worker,
)
from sepp_anyio._model._checks import queue_name_problem, seconds_problem
from sepp_anyio._tasks._task import Task
from sepp_anyio.server._config._names import queue_name_problem as server_queue_name_problem
from sepp_anyio.testing import open_in_memory_client

CLIENT = cast("Client", object())  # the Worker's constructor only stores it

BAD_QUEUE_NAMES = ["", ".", "..", "a/b", "a\x01", "a\x7f", "a\x85"]
GOOD_QUEUE_NAMES = ["q", "a.b", "...", "emails-2", "é", "a b"]

# Every way to hand the library one queue name, as (label, call).
QUEUE_TAKERS: list[tuple[str, Callable[[str], object]]] = [
    ("EnqueueRequest", lambda name: EnqueueRequest(name, "t")),
    ("Task", lambda name: Task(name, "t", bytes)),
    ("Worker", lambda name: Worker(CLIENT, [name])),
    ("Worker, second queue", lambda name: Worker(CLIENT, ["q", name])),
]
CLIENT_QUEUE_TAKERS: list[tuple[str, Callable[[Client, str], Awaitable[object]]]] = [
    ("reserve", lambda client, name: client.reserve([name], lease=1, wait=0)),
    ("drain_dead_letters", lambda client, name: client.drain_dead_letters(name)),
]


def test_the_server_and_the_client_share_the_queue_name_rule() -> None:
    assert server_queue_name_problem is queue_name_problem
    for name in BAD_QUEUE_NAMES:
        assert queue_name_problem(name) is not None, name
    for name in GOOD_QUEUE_NAMES:
        assert queue_name_problem(name) is None, name


@pytest.mark.parametrize("name", BAD_QUEUE_NAMES)
@pytest.mark.parametrize(("label", "take"), QUEUE_TAKERS, ids=[t[0] for t in QUEUE_TAKERS])
def test_every_constructor_refuses_a_bad_queue_name(
    label: str, take: Callable[[str], object], name: str
) -> None:
    with pytest.raises(InvalidArgumentError, match="queue"):
        take(name)


@pytest.mark.parametrize("name", GOOD_QUEUE_NAMES)
@pytest.mark.parametrize(("label", "take"), QUEUE_TAKERS, ids=[t[0] for t in QUEUE_TAKERS])
def test_every_constructor_accepts_a_good_queue_name(
    label: str, take: Callable[[str], object], name: str
) -> None:
    take(name)


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("label", "take"), CLIENT_QUEUE_TAKERS, ids=[t[0] for t in CLIENT_QUEUE_TAKERS]
)
async def test_every_client_call_refuses_a_bad_queue_name_before_any_io(
    label: str, take: Callable[[Client, str], Awaitable[object]]
) -> None:
    async with open_in_memory_client() as (client, _):
        for name in BAD_QUEUE_NAMES:
            # Refused locally, naming the argument (the server would answer with a generic
            # InvalidRequestError, which is not an InvalidArgumentError).
            with pytest.raises(InvalidArgumentError, match="queue"):
                await take(client, name)
        for name in GOOD_QUEUE_NAMES:
            await take(client, name)


def test_the_worker_raises_the_tree_s_argument_errors() -> None:
    with pytest.raises(InvalidArgumentError, match="lease"):
        Worker(CLIENT, ["q"], lease=0)
    with pytest.raises(InvalidArgumentError, match="max_in_flight"):
        Worker(CLIENT, ["q"], max_in_flight=0)
    with pytest.raises(InvalidArgumentError, match="worker_id"):
        Worker(CLIENT, ["q"], worker_id="")
    with pytest.raises(InvalidArgumentTypeError, match="queues"):
        Worker(CLIENT, "q")
    with pytest.raises(InvalidArgumentTypeError, match=r"queues\[0\]"):
        Worker(CLIENT, [1])  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentTypeError, match="wait"):
        Worker(CLIENT, ["q"], wait="1")  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentTypeError, match="worker_id"):
        Worker(CLIENT, ["q"], worker_id=5)  # type: ignore[arg-type]


@pytest.mark.anyio
async def test_a_lease_is_held_to_one_rule_everywhere() -> None:
    # The server counts whole milliseconds: a shorter lease would arrive as zero.
    too_short = 0.0005
    with pytest.raises(InvalidArgumentError, match=r"lease must be at least 0\.001 seconds"):
        Worker(CLIENT, ["q"], lease=too_short)
    with pytest.raises(InvalidArgumentError, match=r"Task timeout must be at least 0\.001"):
        Task("q", "t", bytes, timeout=too_short)
    async with open_in_memory_client() as (client, _):
        with pytest.raises(InvalidArgumentError, match=r"lease must be at least 0\.001 seconds"):
            await client.reserve(["q"], lease=too_short, wait=0)
        await client.enqueue(EnqueueRequest("q", "t"))
        [job] = await client.reserve(["q"], lease=0.001, wait=0)
        with pytest.raises(InvalidArgumentError, match=r"seconds must be at least 0\.001"):
            await client.extend(job.ctx, too_short)
        with pytest.raises(InvalidArgumentError, match=r"seconds must be at least 0\.001"):
            await job.ctx.extend(too_short)


@pytest.mark.parametrize(
    ("seconds", "minimum", "expected"),
    [
        (0.0, "zero", None),
        (-0.1, "zero", "must be >= 0 seconds"),
        (0.0, "positive", "must be > 0 seconds"),
        (1e-9, "positive", None),
        (0.0009, "millisecond", "must be at least 0.001 seconds (1 ms)"),
        (0.001, "millisecond", None),
        (float("inf"), "zero", "must be a finite number of seconds"),
        (float("nan"), "positive", "must be a finite number of seconds"),
    ],
)
def test_seconds_rule(seconds: float, minimum: Any, expected: str | None) -> None:
    assert seconds_problem(seconds, minimum) == expected


def test_no_bare_value_or_type_error_is_raised_outside_the_checks() -> None:
    """Every bad argument is refused through ``_model/_checks.py`` (or raises an error of
    the tree, ``InvalidArgumentError`` / ``InvalidArgumentTypeError``); a refusal of the
    wire's own is a named ``ValueError`` subclass.  A bare ``raise ValueError(`` or
    ``raise TypeError(`` elsewhere in ``src/`` escapes the tree."""
    import re
    from pathlib import Path

    import sepp_anyio

    src = Path(sepp_anyio.__file__).resolve().parent
    bare = re.compile(r"\braise (ValueError|TypeError)\(")
    found = [
        f"{path.relative_to(src)}:{number}"
        for path in sorted(src.rglob("*.py"))
        if "_proto" not in path.relative_to(src).parts and path.name != "_checks.py"
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if bare.search(line)
    ]
    assert found == []
