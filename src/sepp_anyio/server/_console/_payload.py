"""A payload's preview: JSON pretty-printed, text, or a hex dump, as its encoding says, never
more than a set number of bytes, and never an error for bytes that are not what their
encoding claims (they are shown as hex with a note)."""

from __future__ import annotations

import json
from dataclasses import dataclass

__all__ = ["Preview", "preview"]


@dataclass(frozen=True, slots=True)
class Preview:
    #: "json", "text", "hex" or "none".
    kind: str
    text: str
    size: int
    truncated: bool
    #: Why the preview is not what the encoding asked for, if it is not.
    note: str | None = None


def _media_type(encoding: str) -> str:
    return encoding.split(";", 1)[0].strip().lower()


def _charset(encoding: str) -> str:
    for param in encoding.split(";")[1:]:
        key, _, value = param.partition("=")
        if key.strip().lower() == "charset" and value.strip():
            return value.strip().strip('"')
    return "utf-8"


def _is_json(media: str) -> bool:
    return media in ("application/json", "text/json", "json") or media.endswith("+json")


def _hex(data: bytes) -> str:
    lines = []
    for offset in range(0, len(data), 16):
        row = data[offset : offset + 16]
        text = "".join(chr(b) if 32 <= b < 127 else "." for b in row)
        lines.append(f"{offset:08x}  {row.hex(' '):<47}  {text}")
    return "\n".join(lines)


def preview(
    data: bytes | None, encoding: str | None, limit: int, *, indent: int | None = 2
) -> Preview:
    """The preview of a payload, at most *limit* bytes of it (JSON indented by *indent*,
    None: on one line)."""
    if data is None:
        return Preview("none", "", 0, False)
    size = len(data)
    head = data[:limit]
    truncated = size > limit
    media = _media_type(encoding or "")
    if _is_json(media) or media.startswith("text/"):
        charset = _charset(encoding or "") if media.startswith("text/") else "utf-8"
        try:
            # A cut may split a character: only a whole payload's decode error is the data's.
            text = head.decode(charset, "ignore" if truncated else "strict")
        except LookupError:
            return Preview("hex", _hex(head), size, truncated, f"unknown charset {charset!r}")
        except UnicodeDecodeError:
            return Preview("hex", _hex(head), size, truncated, f"not valid {charset}; as hex")
        if _is_json(media) and not truncated:
            try:
                return Preview("json", json.dumps(json.loads(text), indent=indent), size, False)
            except (ValueError, RecursionError):
                return Preview("text", text, size, False, "not valid JSON; shown as text")
        return Preview("text", text, size, truncated)
    return Preview("hex", _hex(head), size, truncated)
