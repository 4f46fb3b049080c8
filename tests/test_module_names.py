"""Public names report their public package as ``__module__`` (``sepp_anyio.Client``).

Set in each package's ``__init__`` for what its private modules define; pickles refer to
the public name, so they survive a reshuffle of the private modules.
"""

from __future__ import annotations

import importlib
import inspect
import pickle
from datetime import UTC, datetime

import pytest

import sepp_anyio
import sepp_anyio.testing
from sepp_anyio import (
    DeadLetterCause,
    EnqueueRequest,
    JobNotFoundError,
    Payload,
    RetryDirective,
    StatusCode,
    TraceContext,
    UnknownQueue,
)

PACKAGES = ["sepp_anyio", "sepp_anyio.testing", "sepp_anyio.server"]


def _public(package: str) -> list[tuple[str, object]]:
    module = importlib.import_module(package)
    names = [(name, getattr(module, name)) for name in module.__all__]
    return [
        (name, obj)
        for name, obj in names
        if (inspect.isclass(obj) or inspect.isfunction(obj))
        and obj.__module__.partition(".")[0] == "sepp_anyio"
    ]


@pytest.mark.parametrize("package", PACKAGES)
def test_public_names_report_their_package(package: str) -> None:
    public = _public(package)
    assert len(public) > 3
    for name, obj in public:
        # A name another package defines keeps that package (ServerThread, re-exported
        # by testing, is sepp_anyio.server's).
        expected = package if obj.__module__ == package else obj.__module__
        assert obj.__module__ in PACKAGES, (name, obj.__module__)
        assert obj.__module__ == expected
        owner = importlib.import_module(obj.__module__)
        assert getattr(owner, obj.__qualname__) is obj, name  # type: ignore[attr-defined]


def test_the_main_names() -> None:
    assert sepp_anyio.Client.__module__ == "sepp_anyio"
    assert sepp_anyio.connect.__module__ == "sepp_anyio"
    assert sepp_anyio.Worker.__module__ == "sepp_anyio"
    assert sepp_anyio.testing.MemoryChannel.__module__ == "sepp_anyio.testing"
    assert sepp_anyio.testing.ServerThread.__module__ == "sepp_anyio.server"
    assert repr(StatusCode.NOT_FOUND) == "<StatusCode.NOT_FOUND: 5>"


@pytest.mark.parametrize(
    "value",
    [
        StatusCode.UNAVAILABLE,
        DeadLetterCause.ATTEMPTS_EXHAUSTED,
        EnqueueRequest("q", "t", payload=Payload(b"x", "b"), custom={"k": 1}),
        RetryDirective.after(1.5),
        TraceContext("00-" + "1" * 32 + "-" + "2" * 16 + "-01"),
        UnknownQueue("q"),
        JobNotFoundError("gone"),
        datetime(2026, 1, 1, tzinfo=UTC),
    ],
    ids=repr,
)
def test_public_values_pickle_by_their_public_name(value: object) -> None:
    data = pickle.dumps(value)
    if type(value).__module__ == "sepp_anyio" and not isinstance(value, Exception):
        # (The errors are rebuilt by a private helper, which names its own module.)
        assert b"sepp_anyio._" not in data
    again = pickle.loads(data)
    assert type(again) is type(value)
    if isinstance(value, Exception):
        assert str(again) == str(value)
    else:
        assert again == value
