from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sepp_anyio._transport._target import Target, parse_target


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("127.0.0.1:50051", Target("127.0.0.1", 50051, tls=False)),
        ("localhost", Target("localhost", 50051, tls=False)),
        ("http://localhost:7000", Target("localhost", 7000, tls=False)),
        ("https://sepp.example:443/", Target("sepp.example", 443, tls=True)),
        ("HTTPS://h:1", Target("h", 1, tls=True)),
        ("[::1]:8080", Target("::1", 8080, tls=False)),
        ("https://[::1]", Target("::1", 50051, tls=True)),
        ("::1", Target("::1", 50051, tls=False)),
    ],
)
def test_parse_target_forms(text: str, expected: Target) -> None:
    assert parse_target(text) == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("ftp://h:1", "unsupported scheme"),
        ("h:1/path", "a path is not allowed"),
        (":50051", "the host is empty"),
        ("h:http", "is not a number"),
        ("h:0", "outside 1-65535"),
        ("h:70000", "outside 1-65535"),
        ("[::1:5", "unterminated"),
    ],
)
def test_parse_target_rejects(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_target(text)


@given(
    st.from_regex(r"[a-z][a-z0-9.\-]{0,30}", fullmatch=True),
    st.integers(1, 65535),
    st.booleans(),
)
def test_parse_target_round_trips(host: str, port: int, tls: bool) -> None:
    scheme = "https://" if tls else "http://"
    assert parse_target(f"{scheme}{host}:{port}") == Target(host, port, tls)
    assert parse_target(f"{host}:{port}").address == f"{host}:{port}"
