"""The job payload: bytes and their encoding label, and the encoding helpers.

Part of the public data model (conventions in ``_model/__init__.py``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from ._checks import (
    check_str,
)
from ._error_root import InvalidArgumentError, InvalidArgumentTypeError

__all__ = ["JSON_ENCODING", "TEXT_ENCODING", "Payload"]


#: The encoding :meth:`Payload.from_json` writes.
JSON_ENCODING = "application/json"
#: The encoding :meth:`Payload.from_text` writes by default.
TEXT_ENCODING = "text/plain; charset=utf-8"


def _media_type(encoding: str) -> str:
    return encoding.split(";", 1)[0].strip().lower()


def _charset(encoding: str, default: str = "utf-8") -> str:
    for param in encoding.split(";")[1:]:
        key, _, value = param.partition("=")
        if key.strip().lower() == "charset" and value.strip():
            return value.strip().strip('"')
    return default


def _is_json_encoding(encoding: str) -> bool:
    media = _media_type(encoding)
    # "json" is the short label seen in server allow-lists (and the first sepp-rs codec).
    return media in ("application/json", "text/json", "json") or media.endswith("+json")


_REPR_BYTES = 64


@dataclass(frozen=True, slots=True, repr=False)
class Payload:
    """The body of a job: opaque bytes plus a label saying how to read them.

    The queue never looks inside ``data``. ``encoding`` (for example ``"application/json"``)
    tells the worker how to decode it; a queue may restrict which encodings it accepts.

    Validation: ``data`` must be non-empty bytes (``bytearray``/``memoryview`` are copied to
    ``bytes``) and ``encoding`` a non-empty string. The protocol refuses an empty payload:
    for a job without data, leave :attr:`EnqueueRequest.payload` as ``None``.

    Raises:
        InvalidArgumentTypeError: if ``data`` is not bytes-like or ``encoding`` is not a string.
        InvalidArgumentError: if either is empty.
    """

    #: The raw bytes, never empty.
    data: bytes
    #: How to interpret :attr:`data`, for example ``"application/json"``; never empty.
    encoding: str

    def __post_init__(self) -> None:
        # Typed as object: callers may hand in any bytes-like (or a wrong type entirely).
        data: object = self.data
        if isinstance(data, bytearray | memoryview):
            object.__setattr__(self, "data", bytes(data))
        elif not isinstance(data, bytes):
            raise InvalidArgumentTypeError(f"Payload.data must be bytes, got {type(data).__name__}")
        if not self.data:
            raise InvalidArgumentError(
                "Payload.data must not be empty; for a job without data pass payload=None"
            )
        check_str(self.encoding, "Payload.encoding")

    def __repr__(self) -> str:
        # Payloads can be megabytes; a Job in a log line or traceback must stay readable.
        if len(self.data) <= _REPR_BYTES:
            data = repr(self.data)
        else:
            data = f"{self.data[:_REPR_BYTES]!r}... ({len(self.data)} bytes)"
        return f"Payload(data={data}, encoding={self.encoding!r})"

    @classmethod
    def from_json(cls, obj: Any, *, encoding: str = JSON_ENCODING) -> Payload:
        """Serialise ``obj`` as compact UTF-8 JSON.

        NaN and infinities are refused because they are not JSON and most other languages'
        parsers reject them.

        Args:
            obj: anything :func:`json.dumps` accepts.
            encoding: the label to attach; override it when a queue's allow-list uses a
                different spelling (for example ``"json"``).

        Raises:
            TypeError: if ``obj`` is not JSON-serialisable.
            ValueError: for NaN/infinite floats or circular references.
        """
        text = json.dumps(obj, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
        return cls(text.encode("utf-8"), encoding)

    def json(self) -> Any:
        """Parse :attr:`data` as JSON.

        Raises:
            InvalidArgumentError: if :attr:`encoding` is not a JSON media type
                (``application/json``, ``*+json``, ``text/json`` or ``json``).
            json.JSONDecodeError: (a ``ValueError``) if the bytes are not valid JSON.
        """
        if not _is_json_encoding(self.encoding):
            raise InvalidArgumentError(
                f"payload encoding is {self.encoding!r}, not JSON; "
                "read payload.data (or payload.text()) instead"
            )
        return json.loads(self.data)

    @classmethod
    def from_text(cls, text: str, encoding: str = TEXT_ENCODING) -> Payload:
        """Encode ``text`` with the charset named in ``encoding`` (UTF-8 if none).

        Raises:
            ValueError: if ``text`` is empty or cannot be encoded in that charset.
            LookupError: if the charset is unknown to Python.
        """
        check_str(text, "text", allow_empty=True)
        return cls(text.encode(_charset(encoding)), encoding)

    def text(self) -> str:
        """Decode :attr:`data` with the charset named in :attr:`encoding` (UTF-8 if none).

        Raises:
            UnicodeDecodeError: if the bytes are not valid in that charset.
            LookupError: if the charset is unknown to Python.
        """
        return self.data.decode(_charset(self.encoding))
