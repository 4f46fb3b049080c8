"""The server's gRPC wire helpers: grpc-timeout (grpc-go's grammar), metadata values,
grpc-message encoding."""

from __future__ import annotations

import pytest

from sepp_anyio.server._grpcwire import (
    metadata_problem,
    parse_timeout,
    percent_encode,
    trailers_only,
)


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
def test_timeouts(value: bytes, seconds: float) -> None:
    assert parse_timeout(value, 600.0) == pytest.approx(seconds)


@pytest.mark.parametrize(
    "value", [b"", b"S", b"1", b"123456789S", b"1x", b"-1S", b"1.5S", b" 1S", "\u0661S".encode()]
)
def test_bad_timeouts(value: bytes) -> None:
    with pytest.raises(ValueError, match="grpc-timeout"):
        parse_timeout(value, 600.0)


def test_metadata_values() -> None:
    assert metadata_problem([(b":path", b"\xff"), (b"x-a", b"printable ~")]) is None
    assert metadata_problem([(b"x-bin", b"AAEC"), (b"y-bin", b"AAE")]) is None
    problem = metadata_problem([(b"x-note", "é".encode())])
    assert problem == "metadata 'x-note': value is not printable ASCII"
    assert metadata_problem([(b"x-tab", b"a\tb")]) is not None
    assert metadata_problem([(b"x-bin", b"!!")]) == "metadata 'x-bin': value is not base64"


def test_grpc_message_is_percent_encoded() -> None:
    assert percent_encode("plain text") == b"plain text"
    assert percent_encode("100% é\n") == b"100%25 %C3%A9%0A"
    assert trailers_only(13, "x") == [
        (b":status", b"200"),
        (b"content-type", b"application/grpc"),
        (b"grpc-status", b"13"),
        (b"grpc-message", b"x"),
    ]
