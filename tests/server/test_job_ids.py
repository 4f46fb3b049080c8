"""New job ids: canonical random (version 4) UUIDs, never repeated, in and across reads
of the kernel's randomness (256 ids each)."""

from __future__ import annotations

import uuid

from sepp_anyio.server._engine._ids import JobIds
from sepp_anyio.server._engine._validate import is_uuid


def test_ids_are_canonical_version_4_uuids() -> None:
    new = JobIds()
    for _ in range(600):  # more than two reads of randomness
        text = new()
        parsed = uuid.UUID(text)
        assert str(parsed) == text  # canonical: lower-case, hyphenated
        assert parsed.version == 4
        assert parsed.variant == uuid.RFC_4122
        assert is_uuid(text)  # what Ack, Nack and Extend accept


def test_ids_do_not_repeat_within_or_across_sources() -> None:
    first, second = JobIds(), JobIds()
    ids = [first() for _ in range(1000)] + [second() for _ in range(1000)]
    assert len(set(ids)) == len(ids)


def test_every_random_bit_varies() -> None:
    """The 122 bits that are not the version and the variant all take both values: no
    slice of the randomness is skipped or repeated in the formatting."""
    new = JobIds()
    values = [uuid.UUID(new()).int for _ in range(512)]
    fixed = (0xF << 76) | (0x3 << 62)  # the version nibble and the variant's two bits
    ones = zeros = 0
    for value in values:
        ones |= value
        zeros |= ~value
    assert ones & ~fixed == ((1 << 128) - 1) & ~fixed
    assert zeros & ~fixed & ((1 << 128) - 1) == ((1 << 128) - 1) & ~fixed
