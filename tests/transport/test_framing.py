"""The sans-IO framing layer, fed arbitrary chunk splits (hypothesis)."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sepp_anyio._transport._framing import (
    PREFIX_SIZE,
    STABLE_TIMEOUT_FROM,
    CompressedMessageError,
    ExtraMessageError,
    MessageDecoder,
    MessageTooLargeError,
    decode_grpc_message,
    decode_timeout,
    encode_grpc_message,
    encode_message,
    encode_stable_timeout,
    encode_timeout,
    status_from_http,
)
from sepp_anyio._transport._metadata import decode_metadata, encode_metadata

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


def test_decoder_refuses_announced_length_over_limit_before_buffering_body() -> None:
    decoder = MessageDecoder(max_message_size=10)
    with pytest.raises(MessageTooLargeError, match="11 bytes exceeds max_receive_message_bytes=10"):
        decoder.feed(struct.pack(">BI", 0, 11))


def test_decoder_accepts_message_exactly_at_limit() -> None:
    decoder = MessageDecoder(max_message_size=10)
    decoder.feed(encode_message(b"0123456789"))
    assert decoder.pop() == b"0123456789"


def test_decoder_refuses_compressed_flag() -> None:
    decoder = MessageDecoder(max_message_size=10)
    with pytest.raises(CompressedMessageError):
        decoder.feed(struct.pack(">BI", 1, 1) + b"x")


def test_empty_message_is_a_message() -> None:
    decoder = MessageDecoder(max_message_size=10)
    decoder.feed(encode_message(b""))
    assert decoder.pop() == b""


@given(
    st.binary(max_size=100),
    st.binary(min_size=1, max_size=300),
    st.lists(st.integers(min_value=0), max_size=10),
)
def test_decoder_with_one_message_refuses_the_first_byte_after_it(
    body: bytes, extra: bytes, cuts: list[int]
) -> None:
    """A unary response has one message: any byte after it fails at once, and what is
    held never exceeds that message plus its prefix."""
    decoder = MessageDecoder(max_message_size=100, max_messages=1)
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
def test_decoder_with_one_message_accepts_exactly_one(bodies: list[bytes]) -> None:
    decoder = MessageDecoder(max_message_size=100, max_messages=1)
    decoder.feed(encode_message(bodies[0]))
    decoder.feed(b"")
    assert decoder.pop() == bodies[0]
    if len(bodies) > 1:
        # Popping does not make room: the limit is on the call, not on the queue.
        with pytest.raises(ExtraMessageError):
            decoder.feed(encode_message(bodies[1]))


@given(st.floats(min_value=1e-9, max_value=1e12, allow_nan=False))
def test_timeout_encoding_round_trips_never_earlier_and_within_precision(seconds: float) -> None:
    encoded = encode_timeout(seconds)
    digits = encoded[:-1]
    assert 1 <= len(digits) <= 8 and digits.isdigit()
    decoded = decode_timeout(encoded)
    if seconds <= 99_999_999 * 3600:
        # Rounded up: the server never gets less time than the client has...
        assert decoded >= seconds * (1 - 1e-12)
        # ...and at most one unit step more: the finest unit that fits 8
        # digits is chosen, so a step is below 1e-5 of the value.
        assert decoded <= seconds * (1 + 1e-5) + 1e-9


@given(st.floats(min_value=0, max_value=1e9, allow_nan=False))
def test_stable_timeout_is_whole_seconds_rounded_up_from_ten_seconds(seconds: float) -> None:
    encoded = encode_stable_timeout(seconds)
    if seconds < STABLE_TIMEOUT_FROM or seconds > 99_999_999:
        assert encoded is None
        return
    assert encoded is not None and encoded.endswith("S")
    decoded = decode_timeout(encoded)
    assert seconds <= decoded < seconds + 1
    # The same value for any timeout up to the next whole second: it repeats.
    assert encode_stable_timeout(decoded) == encoded


def test_stable_timeout_of_nan_is_none() -> None:
    assert encode_stable_timeout(float("nan")) is None


@pytest.mark.parametrize("seconds", [0.0, -1.0, float("nan")])
def test_non_positive_timeout_is_already_due(seconds: float) -> None:
    assert encode_timeout(seconds) == "1n"


def test_huge_timeout_is_capped() -> None:
    assert encode_timeout(1e30) == "99999999H"


@pytest.mark.parametrize("bad", ["", "S", "1", "123456789S", "12x", "-1S", "1.5S", "\uff11S"])
def test_decode_timeout_rejects_malformed(bad: str) -> None:
    with pytest.raises(ValueError, match="invalid grpc-timeout"):
        decode_timeout(bad)


@given(st.text())
def test_grpc_message_round_trips(text: str) -> None:
    encoded = encode_grpc_message(text)
    assert encoded.isascii()
    assert all(0x20 <= ord(c) < 0x7F for c in encoded)
    assert decode_grpc_message(encoded) == text.encode("utf-8", "surrogatepass").decode(
        "utf-8", "replace"
    )


def test_http_status_mapping() -> None:
    assert status_from_http(503).name == "UNAVAILABLE"
    assert status_from_http(401).name == "UNAUTHENTICATED"
    assert status_from_http(404).name == "UNIMPLEMENTED"
    assert status_from_http(418).name == "UNKNOWN"


keys = st.from_regex(r"[a-z0-9_.][a-z0-9_.\-]{0,20}", fullmatch=True).filter(
    lambda k: (
        not k.startswith("grpc-")
        and not k.endswith("-bin")
        and k not in {"te", "content-type", "user-agent", "host", "connection"}
    )
)
text_values = st.from_regex(r"[ -~]{0,40}", fullmatch=True)


@given(st.lists(st.tuples(keys, text_values), max_size=6), st.lists(st.binary(max_size=40)))
def test_metadata_round_trips_text_and_binary(
    text_items: list[tuple[str, str]], binary_values: list[bytes]
) -> None:
    items: list[tuple[str, str | bytes]] = list(text_items)
    items += [(f"x{i}-bin", value) for i, value in enumerate(binary_values)]
    headers = encode_metadata(items)
    assert all(b"=" not in value for key, value in headers if key.endswith(b"-bin"))
    decoded = decode_metadata(headers)
    assert list(decoded.items()) == items


@pytest.mark.parametrize(
    ("key", "value", "error"),
    [
        ("Upper", "v", ValueError),
        ("grpc-timeout", "1S", ValueError),
        ("te", "trailers", ValueError),
        ("", "v", ValueError),
        ("sp ace", "v", ValueError),
        ("k", "line\r\nbreak", ValueError),
        ("k", "caf\u00e9", ValueError),
        ("k", b"bytes", TypeError),
        ("k-bin", "text", TypeError),
    ],
)
def test_metadata_rejects_bad_keys_and_values(
    key: str, value: str | bytes, error: type[Exception]
) -> None:
    with pytest.raises(error):
        encode_metadata([(key, value)])
