"""The job-id check of Ack, Nack and Extend: the canonical hyphenated UUID form only."""

from __future__ import annotations

import uuid

import pytest

from sepp_anyio.server._engine._validate import is_uuid


@pytest.mark.parametrize(
    "text",
    [
        str(uuid.UUID(int=0)),
        "0123abcd-4567-89ef-ABCD-0123456789Ef",  # either case
        str(uuid.UUID("9f1c2e4a-7b3d-4c5e-8f6a-1b2c3d4e5f60")),
    ],
)
def test_accepted(text: str) -> None:
    assert is_uuid(text)


@pytest.mark.parametrize(
    "text",
    [
        "",
        "00000000000040008000000000000000",  # no hyphens
        "0000000-00000-4000-8000-000000000000",  # a hyphen one place early
        "00000000-0000-4000-8000-00000000000g",  # not hex
        "00000000-0000-4000-8000-00000000000\u0663",  # a non-ASCII digit
        "00000000-0000-4000-8000-000000000000\n",  # a trailing newline
        "{00000000-0000-4000-8000-000000000000}",
        "00000000-0000-4000-8000-0000000000000",  # 37 characters
    ],
)
def test_refused(text: str) -> None:
    assert not is_uuid(text)
