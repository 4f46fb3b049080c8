"""Payload previews: JSON pretty-printed, text, hex, as the encoding says; capped; never an
error for bytes that are not what their encoding claims."""

from __future__ import annotations

import pytest

from sepp_anyio.server._console._payload import preview


def test_json_is_pretty_printed() -> None:
    shown = preview(b'{"a":[1,2]}', "application/json", 100)
    assert (shown.kind, shown.text, shown.size, shown.truncated) == (
        "json",
        '{\n  "a": [\n    1,\n    2\n  ]\n}',
        11,
        False,
    )
    assert preview(b'{"a":1}', "application/vnd.x+json", 100, indent=None).text == '{"a": 1}'


@pytest.mark.parametrize(
    ("data", "encoding", "kind", "note"),
    [
        (b"{not json", "application/json", "text", "not valid JSON; shown as text"),
        (b"\xff\xfe\x00", "application/json", "hex", "not valid utf-8; as hex"),
        (b"caf\xe9", "text/plain; charset=latin-1", "text", None),
        (b"\xff", "text/plain", "hex", "not valid utf-8; as hex"),
        (b"x", "text/plain; charset=nope", "hex", "unknown charset 'nope'"),
        (b"\x00\x01binary", "application/octet-stream", "hex", None),
        (b"[" * 5000 + b"]" * 5000, "application/json", "text", "not valid JSON; shown as text"),
    ],
)
def test_what_cannot_be_shown_as_asked_is_shown_otherwise(
    data: bytes, encoding: str, kind: str, note: str | None
) -> None:
    shown = preview(data, encoding, 1_000_000)
    assert (shown.kind, shown.note) == (kind, note)


def test_a_preview_is_capped() -> None:
    big = b'{"k": "' + b"v" * 10_000 + b'"}'
    shown = preview(big, "application/json", 64)
    assert shown.truncated and shown.size == len(big) and len(shown.text) == 64
    # A cut through a multi-byte character is not the data's fault.
    text = preview("é".encode() * 100, "text/plain", 7)
    assert (text.kind, text.text) == ("text", "ééé")
    hexed = preview(bytes(range(256)) * 100, None, 32)
    assert hexed.kind == "hex" and hexed.truncated and hexed.text.count("\n") == 1
    assert preview(None, None, 10).kind == "none"
