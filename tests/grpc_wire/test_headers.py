"""grpc-timeout, grpc-message, grpc-status and metadata: one rule each, both directions."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sepp_anyio._grpc import (
    STABLE_TIMEOUT_FROM,
    GrpcError,
    MalformedReplyError,
    decode_grpc_message,
    decode_timeout,
    encode_grpc_message,
    encode_metadata,
    encode_stable_timeout,
    encode_timeout,
    metadata_problem,
    read_status,
    status_from_http,
    trailers,
    trailers_only,
)
from sepp_anyio._model._error_root import (
    InvalidArgumentError,
    InvalidArgumentTypeError,
    StatusCode,
)

# ------------------------------------------------------------------------- grpc-timeout


@given(st.floats(min_value=1e-9, max_value=1e12, allow_nan=False))
def test_a_timeout_round_trips_never_earlier_and_within_precision(seconds: float) -> None:
    encoded = encode_timeout(seconds)
    digits = encoded[:-1]
    assert 1 <= len(digits) <= 8 and digits.isdigit()
    decoded = decode_timeout(encoded)
    if seconds <= 99_999_999 * 3600:
        # Rounded up: the server never gets less time than the client has...
        assert decoded >= seconds * (1 - 1e-12)
        # ...and at most one unit step more: the finest unit that fits 8 digits is
        # chosen, so a step is below 1e-5 of the value.
        assert decoded <= seconds * (1 + 1e-5) + 1e-9


@given(st.floats(min_value=0, max_value=1e9, allow_nan=False))
def test_a_stable_timeout_is_whole_seconds_rounded_up_from_ten_seconds(seconds: float) -> None:
    encoded = encode_stable_timeout(seconds)
    if seconds < STABLE_TIMEOUT_FROM or seconds > 99_999_999:
        assert encoded is None
        return
    assert encoded is not None and encoded.endswith(b"S")
    decoded = decode_timeout(encoded)
    assert seconds <= decoded < seconds + 1
    # The same value for any timeout up to the next whole second: it repeats.
    assert encode_stable_timeout(decoded) == encoded


def test_a_stable_timeout_of_nan_is_none() -> None:
    assert encode_stable_timeout(float("nan")) is None


@pytest.mark.parametrize("seconds", [0.0, -1.0, float("nan")])
def test_a_non_positive_timeout_is_already_due(seconds: float) -> None:
    assert encode_timeout(seconds) == b"1n"


def test_a_huge_timeout_is_capped() -> None:
    assert encode_timeout(1e30) == b"99999999H"


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        (b"1n", 1e-9),
        (b"0S", 0.0),
        (b"999u", 999e-6),
        (b"5m", 0.005),
        (b"3S", 3.0),
        (b"2M", 120.0),
        (b"1H", 600.0),  # clamped to the ceiling
        (b"99999999H", 600.0),
        (b"12345678n", 0.012345678),
    ],
)
def test_a_received_timeout_is_clamped_to_the_ceiling(value: bytes, seconds: float) -> None:
    assert decode_timeout(value, 600.0) == pytest.approx(seconds)


def test_without_a_ceiling_nothing_is_clamped() -> None:
    assert decode_timeout(b"99999999H") == 99_999_999 * 3600.0
    assert decode_timeout(b"1S", math.inf) == 1.0


@pytest.mark.parametrize(
    "value",
    [b"", b"S", b"1", b"123456789S", b"12x", b"1x", b"-1S", b"1.5S", b" 1S", "\u0661S".encode()],
)
def test_a_malformed_timeout_is_refused(value: bytes) -> None:
    with pytest.raises(ValueError, match="grpc-timeout"):
        decode_timeout(value, 600.0)


# ------------------------------------------------------------------------- grpc-message


@given(st.text())
def test_a_status_message_round_trips(text: str) -> None:
    encoded = encode_grpc_message(text)
    assert encoded.isascii()
    assert all(0x20 <= byte < 0x7F for byte in encoded)
    assert decode_grpc_message(encoded) == text.encode("utf-8", "surrogatepass").decode(
        "utf-8", "replace"
    )


def test_a_status_message_is_percent_encoded() -> None:
    assert encode_grpc_message("plain text") == b"plain text"
    assert encode_grpc_message("100% é\n") == b"100%25 %C3%A9%0A"


def test_a_received_message_keeps_what_does_not_decode() -> None:
    assert decode_grpc_message(b"50%") == "50%"
    assert decode_grpc_message(b"%zz ok") == "%zz ok"
    assert decode_grpc_message(b"%FF") == "\ufffd"


# ------------------------------------------------------------------------- status


def test_response_headers() -> None:
    assert trailers(0, None) == [(b"grpc-status", b"0")]
    assert trailers(5, "no such job") == [
        (b"grpc-status", b"5"),
        (b"grpc-message", b"no such job"),
    ]
    assert trailers_only(13, "x") == [
        (b":status", b"200"),
        (b"content-type", b"application/grpc"),
        (b"grpc-status", b"13"),
        (b"grpc-message", b"x"),
    ]


@pytest.mark.parametrize("code", list(StatusCode))
def test_a_status_round_trips(code: StatusCode) -> None:
    headers = trailers(code.value, "why: 100%")
    if code is StatusCode.OK:
        read_status(headers)  # returns: OK
        return
    with pytest.raises(GrpcError) as caught:
        read_status(headers)
    assert (caught.value.code, caught.value.message) == (code, "why: 100%")


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (None, "server response carries no grpc-status"),
        (b"99", "unknown grpc-status '99'"),
    ],
)
def test_a_missing_or_unknown_status_is_unknown(raw: bytes | None, message: str) -> None:
    headers = [] if raw is None else [(b"grpc-status", raw)]
    with pytest.raises(GrpcError) as caught:
        read_status(headers)
    assert (caught.value.code, caught.value.message) == (StatusCode.UNKNOWN, message)
    assert type(caught.value) is GrpcError


@pytest.mark.parametrize("raw", [b"abc", b" 14", b"+0", b"1" * 11, b"-1", "\u0661".encode()])
def test_a_status_that_is_not_a_number_is_malformed(raw: bytes) -> None:
    with pytest.raises(MalformedReplyError, match="malformed grpc-status") as caught:
        read_status([(b"grpc-status", raw)])
    assert caught.value.code is StatusCode.INTERNAL


def test_the_http_status_table() -> None:
    assert status_from_http(503) is StatusCode.UNAVAILABLE
    assert status_from_http(401) is StatusCode.UNAUTHENTICATED
    assert status_from_http(404) is StatusCode.UNIMPLEMENTED
    assert status_from_http(418) is StatusCode.UNKNOWN


def test_an_error_says_its_status() -> None:
    assert str(GrpcError(StatusCode.NOT_FOUND, "no such job")) == "NOT_FOUND: no such job"
    assert str(GrpcError(StatusCode.CANCELLED)) == "CANCELLED"


# ------------------------------------------------------------------------- metadata

keys = st.from_regex(r"[a-z0-9_.][a-z0-9_.\-]{0,20}", fullmatch=True).filter(
    lambda k: (
        not k.startswith("grpc-")
        and not k.endswith("-bin")
        and k not in {"te", "content-type", "user-agent", "host", "connection"}
    )
)
text_values = st.from_regex(r"[ -~]{0,40}", fullmatch=True)


@given(st.lists(st.tuples(keys, text_values), max_size=6), st.lists(st.binary(max_size=40)))
def test_what_we_send_is_what_a_receiver_accepts(
    text_items: list[tuple[str, str]], binary_values: list[bytes]
) -> None:
    """One rule for both directions: every metadata pair we encode passes the receiving
    side's check."""
    items: list[tuple[str, str | bytes]] = list(text_items)
    items += [(f"x{i}-bin", value) for i, value in enumerate(binary_values)]
    headers = encode_metadata(items)
    assert all(b"=" not in value for key, value in headers if key.endswith(b"-bin"))
    assert metadata_problem(headers) is None


@pytest.mark.parametrize(
    ("key", "value", "error"),
    [
        ("Upper", "v", InvalidArgumentError),
        ("grpc-timeout", "1S", InvalidArgumentError),
        ("te", "trailers", InvalidArgumentError),
        ("", "v", InvalidArgumentError),
        ("sp ace", "v", InvalidArgumentError),
        ("k", "line\r\nbreak", InvalidArgumentError),
        ("k", "caf\u00e9", InvalidArgumentError),
        ("k", "tab\there", InvalidArgumentError),
        ("k", b"bytes", InvalidArgumentTypeError),
        ("k-bin", "text", InvalidArgumentTypeError),
    ],
)
def test_bad_metadata_is_refused_before_sending(
    key: str, value: str | bytes, error: type[Exception]
) -> None:
    with pytest.raises(error):
        encode_metadata([(key, value)])


def test_received_metadata_values() -> None:
    assert metadata_problem([(b":path", b"\xff"), (b"x-a", b"printable ~")]) is None
    assert metadata_problem([(b"x-bin", b"AAEC"), (b"y-bin", b"AAE")]) is None
    problem = metadata_problem([(b"x-note", "é".encode())])
    assert problem == "metadata 'x-note': value is not printable ASCII"
    assert metadata_problem([(b"x-tab", b"a\tb")]) is not None
    assert metadata_problem([(b"x-bin", b"!!")]) == "metadata 'x-bin': value is not base64"
