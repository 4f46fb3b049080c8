"""Validation of received header lists (RFC 9113 section 8.2 and 8.3).

A list that breaks these rules makes the request or response *malformed*, which is a
stream error (PROTOCOL_ERROR) and never a crash or a connection error: the one stream
is reset and the reason names the field (never its value, which may be a secret).

Field names: not empty, no bytes 0x00-0x20, no uppercase ASCII, no bytes 0x7F-0xFF,
and no colon except the leading one of a pseudo-header (section 8.2.1).

Field values: RFC 9113 requires rejecting NUL, CR and LF anywhere and SP or HTAB at
either end. RFC 9110 section 5.5 defines a field value as visible ASCII, SP and HTAB
inside, and ``obs-text`` (0x80-0xFF): the other control characters (0x01-0x08,
0x0B, 0x0C, 0x0E-0x1F, 0x7F) are never valid, so those are rejected too (as Go does),
while bytes 0x80-0xFF are valid HTTP and pass through as they are. Whether a gRPC
metadata value may hold them is the gRPC layer's call (it allows only 0x20-0x7E outside
``-bin`` keys).

Pseudo-headers come first and only the role's own (section 8.3): a request has exactly
one ``:method`` and, except for CONNECT, one non-empty ``:path`` and one ``:scheme``
(``:authority`` is optional; ``:protocol`` needs an extended CONNECT we do not offer);
a response has exactly one ``:status`` of three digits; trailers have none.
Connection-specific fields (``connection``, ``keep-alive``, ``proxy-connection``,
``transfer-encoding``, ``upgrade``) are malformed anywhere, and ``te`` may only be
``trailers`` (section 8.2.2). A ``content-length`` must be digits; the connection checks
it against the DATA that follows (section 8.1.1).
"""

from __future__ import annotations

import re

from ._events import Headers

__all__ = ["REQUEST", "RESPONSE", "TRAILERS", "check"]

REQUEST, RESPONSE, TRAILERS = 0, 1, 2

_BAD_NAME = re.compile(rb"[\x00-\x20A-Z\x7f-\xff:]").search
_BAD_VALUE = re.compile(rb"[\x00-\x08\x0a-\x1f\x7f]").search
_CONNECTION_SPECIFIC = frozenset(
    {b"connection", b"keep-alive", b"proxy-connection", b"transfer-encoding", b"upgrade"}
)
_REQUEST_PSEUDO = frozenset({b":method", b":scheme", b":path", b":authority"})
_RESPONSE_PSEUDO = frozenset({b":status"})
_WHITESPACE = (0x20, 0x09)

# Regular field names known to be valid (names repeat: a handful per peer). Bounded:
# emptied when full.
_GOOD_NAMES: set[bytes] = set()
_MAX_GOOD_NAMES = 1024


def _show(name: bytes) -> str:
    return repr(name.decode("ascii", "backslashreplace"))


def _check_value(name: bytes, value: bytes) -> str | None:
    if _BAD_VALUE(value) is not None:
        if b"\0" in value or b"\r" in value or b"\n" in value:
            return f"field {_show(name)} has NUL, CR or LF in its value"
        return f"field {_show(name)} has a control character in its value"
    if value and (value[0] in _WHITESPACE or value[-1] in _WHITESPACE):
        return f"field {_show(name)} has leading or trailing whitespace in its value"
    return None


def check(headers: Headers, kind: int) -> tuple[str | None, int]:
    """Validate a decoded header list of ``kind`` (REQUEST, RESPONSE or TRAILERS).

    Returns:
        ``(reason, content_length)``: the reason it is malformed (None if it is not),
        and the value of its content-length field (-1 without one).
    """
    allowed = _REQUEST_PSEUDO if kind == REQUEST else _RESPONSE_PSEUDO
    pseudo: set[bytes] | None = None
    regular = False
    content_length = -1
    for name, value in headers:
        if name[:1] == b":":
            if regular:
                return f"pseudo-header {_show(name)} after a regular field", -1
            if kind == TRAILERS:
                return f"pseudo-header {_show(name)} in trailers", -1
            if name not in allowed:
                return f"pseudo-header {_show(name)} is not allowed here", -1
            if pseudo is None:
                pseudo = {name}
            elif name in pseudo:
                return f"pseudo-header {_show(name)} appears twice", -1
            else:
                pseudo.add(name)
            reason = _check_value(name, value)
            if reason is not None:
                return reason, -1
            continue
        regular = True
        if name not in _GOOD_NAMES:
            if not name:
                return "empty field name", -1
            if _BAD_NAME(name) is not None:
                return f"field name {_show(name)} is not lowercase visible ASCII", -1
            if name in _CONNECTION_SPECIFIC:
                return f"connection-specific field {_show(name)}", -1
            if name == b"te" or name == b"content-length":
                # Checked with their value below, every time.
                pass
            else:
                if len(_GOOD_NAMES) >= _MAX_GOOD_NAMES:
                    _GOOD_NAMES.clear()
                _GOOD_NAMES.add(name)
        if name == b"te":
            if value != b"trailers":
                return "field 'te' with a value other than 'trailers'", -1
        elif name == b"content-length":
            if not value.isdigit() or (content_length >= 0 and int(value) != content_length):
                return "invalid content-length", -1
            content_length = int(value)
        reason = _check_value(name, value)
        if reason is not None:
            return reason, -1
    if kind == REQUEST:
        if pseudo is None or b":method" not in pseudo:
            return "request without :method", -1
        method = next(value for name, value in headers if name == b":method")
        if method == b"CONNECT":
            if b":scheme" in pseudo or b":path" in pseudo:
                return "CONNECT request with :scheme or :path", -1
            if b":authority" not in pseudo:
                return "CONNECT request without :authority", -1
        else:
            if b":scheme" not in pseudo:
                return "request without :scheme", -1
            if b":path" not in pseudo:
                return "request without :path", -1
            if not next(value for name, value in headers if name == b":path"):
                return "request with an empty :path", -1
    elif kind == RESPONSE:
        if pseudo is None:
            return "response without :status", -1
        status = headers[0][1]
        if len(status) != 3 or not status.isdigit():
            return "response with a :status that is not three digits", -1
    return None, content_length
