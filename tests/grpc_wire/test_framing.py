"""Message framing (both roles), fed arbitrary chunk splits (hypothesis)."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sepp_anyio._grpc import (
    PREFIX_SIZE,
    CompressedMessageError,
    ExtraMessageError,
    MessageDecoder,
    MessageTooLargeError,
    encode_message,
    read_prefix,
)
from sepp_anyio._grpc._framing import UNARY

messages = st.lists(st.binary(max_size=300), max_size=8)


def _split(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts})
    chunks, start = [], 0
    for point in [*points, len(data)]:
        chunks.append(data[start:point])
        start = point
    return chunks


@given(messages, st.lists(st.integers(min_value=0), max_size=20))
def test_decoder_reassembles_messages_under_any_chunk_split(
    bodies: list[bytes], cuts: list[int]
) -> None:
    wire = b"".join(encode_message(body) for body in bodies)
    decoder = MessageDecoder(max_message_size=1000)
    for chunk in _split(wire, cuts):
        decoder.feed(chunk)
    assert list(decoder.messages) == bodies
    assert decoder.buffered == 0


@given(st.binary(min_size=1, max_size=200), st.lists(st.integers(min_value=0), max_size=10))
def test_decoder_keeps_partial_message_buffered(body: bytes, cuts: list[int]) -> None:
    wire = encode_message(body)[:-1]
    decoder = MessageDecoder(max_message_size=1000)
    for chunk in _split(wire, cuts):
        decoder.feed(chunk)
    assert decoder.pop() is None
    assert decoder.buffered > 0


@pytest.mark.parametrize("split", [False, True])
def test_an_announced_length_over_the_limit_is_refused_on_the_prefix(split: bool) -> None:
    decoder = MessageDecoder(max_message_size=10)
    prefix = struct.pack(">BI", 0, 11)
    if split:
        decoder.feed(prefix[:2])
    with pytest.raises(MessageTooLargeError) as caught:
        decoder.feed(prefix[2:] if split else prefix + b"x")
    assert (caught.value.length, caught.value.limit) == (11, 10)
    assert decoder.held <= PREFIX_SIZE + 1


def test_a_message_exactly_at_the_limit_is_accepted() -> None:
    decoder = MessageDecoder(max_message_size=10)
    decoder.feed(encode_message(b"0123456789"))
    assert decoder.pop() == b"0123456789"


@pytest.mark.parametrize("flag", [1, 2, 0xFF])
def test_the_compressed_flag_is_refused(flag: int) -> None:
    with pytest.raises(CompressedMessageError):
        MessageDecoder(max_message_size=10).feed(struct.pack(">BI", flag, 1) + b"x")
    with pytest.raises(CompressedMessageError):
        read_prefix(struct.pack(">BI", flag, 1), 10)


def test_an_empty_message_is_a_message() -> None:
    decoder = MessageDecoder(max_message_size=10)
    decoder.feed(encode_message(b""))
    assert decoder.pop() == b""


@pytest.mark.parametrize(("length", "limit"), [(0, 0), (9, 10), (10, 10), (2**32 - 1, 2**32 - 1)])
def test_read_prefix_gives_the_announced_length(length: int, limit: int) -> None:
    assert read_prefix(struct.pack(">BI", 0, length), limit) == length


@pytest.mark.parametrize(("length", "limit"), [(11, 10), (2**32 - 1, 16 << 20), (1, 0)])
def test_read_prefix_refuses_over_the_limit(length: int, limit: int) -> None:
    with pytest.raises(MessageTooLargeError) as caught:
        read_prefix(struct.pack(">BI", 0, length), limit)
    assert (caught.value.length, caught.value.limit) == (length, limit)


@given(
    st.binary(max_size=100),
    st.binary(min_size=1, max_size=300),
    st.lists(st.integers(min_value=0), max_size=10),
)
def test_a_unary_decoder_refuses_the_first_byte_after_its_message(
    body: bytes, extra: bytes, cuts: list[int]
) -> None:
    """A unary call has one message each way: any byte after it fails at once, and what
    is held never exceeds that message plus its prefix."""
    decoder = MessageDecoder(max_message_size=100, max_messages=UNARY)
    wire = encode_message(body) + extra
    refused: ExtraMessageError | None = None
    for chunk in _split(wire, cuts):
        try:
            decoder.feed(chunk)
        except ExtraMessageError as exc:
            refused = exc
            break
        assert decoder.held <= len(body) + PREFIX_SIZE
    assert refused is not None and "more than 1 message" in str(refused)
    assert list(decoder.messages) == [body]
    assert decoder.held == len(body)
    with pytest.raises(ExtraMessageError):
        decoder.feed(b"x")


@given(st.lists(st.binary(max_size=50), min_size=1, max_size=5))
def test_a_unary_decoder_accepts_exactly_one(bodies: list[bytes]) -> None:
    decoder = MessageDecoder(max_message_size=100, max_messages=UNARY)
    decoder.feed(encode_message(bodies[0]))
    decoder.feed(b"")
    assert decoder.pop() == bodies[0]
    if len(bodies) > 1:
        # Popping does not make room: the limit is on the call, not on the queue.
        with pytest.raises(ExtraMessageError):
            decoder.feed(encode_message(bodies[1]))
