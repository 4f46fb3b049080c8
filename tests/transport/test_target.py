from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sepp_anyio import InvalidArgumentError
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
        ("2001:db8::1", Target("2001:db8::1", 50051, tls=False)),
        ("[2001:db8::1:80]", Target("2001:db8::1:80", 50051, tls=False)),
        ("fe80::1%eth0", Target("fe80::1%eth0", 50051, tls=False)),
        ("[fe80::1%eth0]:9", Target("fe80::1%eth0", 9, tls=False)),
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


@pytest.mark.parametrize(
    ("text", "message"),
    [
        # It used to be taken for an IPv6 host: "cannot connect to [127.0.0.1:50051:9]:50051".
        ("127.0.0.1:50051:9", "'127.0.0.1:50051:9' is malformed: expected host, host:port"),
        ("localhost:50051:", "is malformed"),
        ("http://h:1:2", "is malformed"),
        ("1:2:3", "is malformed"),
        # A valid address, and also ::1 with a port: which one was meant is not known.
        ("::1:8080", r"is ambiguous: write \[::1\]:8080 .* or \[::1:8080\]"),
        ("[sepp.example]:80", "'sepp.example' in brackets is not an IPv6 address"),
        ("[127.0.0.1]:80", "in brackets is not an IPv6 address"),
        ("h:", "the port after ':' is empty"),
        ("[::1]:", "the port after ':' is empty"),
        ("a host:1", "contains spaces or control characters"),
    ],
)
def test_malformed_addresses_are_refused_naming_the_forms(text: str, message: str) -> None:
    with pytest.raises(InvalidArgumentError, match=message) as caught:
        parse_target(text, name="--address")
    assert str(caught.value).startswith(f"--address {text!r}")


def test_the_errors_name_the_target_by_default() -> None:
    with pytest.raises(InvalidArgumentError, match=r"^target '127.0.0.1:1:2' is malformed"):
        parse_target("127.0.0.1:1:2")


@given(
    st.from_regex(r"[a-z][a-z0-9.\-]{0,30}", fullmatch=True),
    st.integers(1, 65535),
    st.booleans(),
)
def test_parse_target_round_trips(host: str, port: int, tls: bool) -> None:
    scheme = "https://" if tls else "http://"
    assert parse_target(f"{scheme}{host}:{port}") == Target(host, port, tls)
    assert parse_target(f"{host}:{port}").address == f"{host}:{port}"
