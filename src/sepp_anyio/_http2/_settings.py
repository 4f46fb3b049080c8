"""SETTINGS (RFC 9113 section 6.5): identifiers, defaults, and the peer's values.

The peer's settings take effect as its SETTINGS frame is processed (we acknowledge it
at once). Ours take effect in two steps: what *loosens* a limit on the peer (a larger
receive window, a larger frame size) applies at once, since a peer that has not seen it
yet only sends less; what would tighten one we do not change after the start, so there
is no window in which the peer may overshoot a value it has not acknowledged.

:class:`PeerSettings` validates each value as section 6.5.2 says, plus one rule of our
own (``http2-hardening.md`` section 3): at most ``max_entries`` entries per frame. An
identifier may appear more than once in a frame: section 6.5.3 has the values processed in
the order they appear, so the last one wins (h2spec http2/6.5.3/1 sends
SETTINGS_INITIAL_WINDOW_SIZE twice; refusing that breaks real peers).
"""

from __future__ import annotations

from enum import IntEnum

from ._errors import ErrorCode, ProtocolViolation
from ._flow import MAX_WINDOW

__all__ = [
    "DEFAULT_HEADER_TABLE_SIZE",
    "DEFAULT_INITIAL_WINDOW_SIZE",
    "DEFAULT_MAX_FRAME_SIZE",
    "MAX_MAX_FRAME_SIZE",
    "PeerSettings",
    "SettingCode",
]


class SettingCode(IntEnum):
    """The SETTINGS identifiers of RFC 9113 section 6.5.2 (and RFC 8441's)."""

    HEADER_TABLE_SIZE = 0x1
    ENABLE_PUSH = 0x2
    MAX_CONCURRENT_STREAMS = 0x3
    INITIAL_WINDOW_SIZE = 0x4
    MAX_FRAME_SIZE = 0x5
    MAX_HEADER_LIST_SIZE = 0x6
    ENABLE_CONNECT_PROTOCOL = 0x8


DEFAULT_HEADER_TABLE_SIZE = 4096
DEFAULT_INITIAL_WINDOW_SIZE = 65535
DEFAULT_MAX_FRAME_SIZE = 16384
MAX_MAX_FRAME_SIZE = (1 << 24) - 1
#: "Unlimited" for MAX_CONCURRENT_STREAMS and MAX_HEADER_LIST_SIZE, the RFC's initial value.
UNLIMITED = 1 << 32

_HEADER_TABLE_SIZE = SettingCode.HEADER_TABLE_SIZE
_ENABLE_PUSH = SettingCode.ENABLE_PUSH
_MAX_CONCURRENT_STREAMS = SettingCode.MAX_CONCURRENT_STREAMS
_INITIAL_WINDOW_SIZE = SettingCode.INITIAL_WINDOW_SIZE
_MAX_FRAME_SIZE = SettingCode.MAX_FRAME_SIZE
_MAX_HEADER_LIST_SIZE = SettingCode.MAX_HEADER_LIST_SIZE
_ENABLE_CONNECT_PROTOCOL = SettingCode.ENABLE_CONNECT_PROTOCOL


class PeerSettings:
    """The settings the peer announced, starting from the RFC's initial values."""

    __slots__ = (
        "client_side",
        "enable_push",
        "header_table_size",
        "initial_window_peak",
        "initial_window_size",
        "max_concurrent_streams",
        "max_entries",
        "max_frame_size",
        "max_header_list_size",
    )

    def __init__(self, *, client_side: bool, max_entries: int, max_concurrent_streams: int) -> None:
        # Whether *we* are the client (the peer is a server).
        self.client_side = client_side
        self.max_entries = max_entries
        self.header_table_size = DEFAULT_HEADER_TABLE_SIZE
        self.enable_push = 1
        # The RFC's initial value is unlimited; a client assumes a finite number until
        # the server's SETTINGS arrive (http2-hardening.md section 6: 100).
        self.max_concurrent_streams = max_concurrent_streams
        self.initial_window_size = DEFAULT_INITIAL_WINDOW_SIZE
        # The largest SETTINGS_INITIAL_WINDOW_SIZE the last frame passed through on its
        # way to its final value (see apply()).
        self.initial_window_peak = DEFAULT_INITIAL_WINDOW_SIZE
        self.max_frame_size = DEFAULT_MAX_FRAME_SIZE
        self.max_header_list_size = UNLIMITED

    def apply(self, entries: list[tuple[int, int]]) -> dict[int, int]:
        """Take the entries of one SETTINGS frame, in order; return the values that
        changed (for an identifier given more than once, its last value).

        :attr:`initial_window_peak` is set to the largest SETTINGS_INITIAL_WINDOW_SIZE
        the frame went through (its current value if the frame has none): processed in
        order, each value moves every stream's send window by its difference from the
        one before, so a window overflows at that peak if anywhere, while the frame as a
        whole moves it by ``initial_window_size`` minus its value before.

        Raises:
            ProtocolViolation: an invalid value (PROTOCOL_ERROR, or FLOW_CONTROL_ERROR
                for an INITIAL_WINDOW_SIZE above 2**31 - 1) or too many entries
                (ENHANCE_YOUR_CALM). Nothing is applied then.
        """
        if len(entries) > self.max_entries:
            raise ProtocolViolation(
                ErrorCode.ENHANCE_YOUR_CALM,
                f"SETTINGS frame with {len(entries)} entries (limit {self.max_entries})",
            )
        peak = self.initial_window_size
        for key, value in entries:
            if key == _ENABLE_PUSH:
                if value > 1:
                    raise ProtocolViolation(
                        ErrorCode.PROTOCOL_ERROR, f"SETTINGS_ENABLE_PUSH of {value}"
                    )
                if value == 1 and self.client_side:
                    raise ProtocolViolation(
                        ErrorCode.PROTOCOL_ERROR, "a server sent SETTINGS_ENABLE_PUSH 1"
                    )
            elif key == _INITIAL_WINDOW_SIZE:
                if value > MAX_WINDOW:
                    raise ProtocolViolation(
                        ErrorCode.FLOW_CONTROL_ERROR,
                        f"SETTINGS_INITIAL_WINDOW_SIZE of {value} exceeds 2**31 - 1",
                    )
                if value > peak:
                    peak = value
            elif key == _MAX_FRAME_SIZE:
                if not DEFAULT_MAX_FRAME_SIZE <= value <= MAX_MAX_FRAME_SIZE:
                    raise ProtocolViolation(
                        ErrorCode.PROTOCOL_ERROR,
                        f"SETTINGS_MAX_FRAME_SIZE of {value} is outside 2**14 .. 2**24 - 1",
                    )
            elif key == _ENABLE_CONNECT_PROTOCOL and value > 1:
                raise ProtocolViolation(
                    ErrorCode.PROTOCOL_ERROR, f"SETTINGS_ENABLE_CONNECT_PROTOCOL of {value}"
                )
        self.initial_window_peak = peak
        changes: dict[int, int] = {}
        for key, value in entries:
            if key == _HEADER_TABLE_SIZE:
                self.header_table_size = value
            elif key == _ENABLE_PUSH:
                self.enable_push = value
            elif key == _MAX_CONCURRENT_STREAMS:
                self.max_concurrent_streams = value
            elif key == _INITIAL_WINDOW_SIZE:
                self.initial_window_size = value
            elif key == _MAX_FRAME_SIZE:
                self.max_frame_size = value
            elif key == _MAX_HEADER_LIST_SIZE:
                self.max_header_list_size = value
            else:
                # Unknown identifiers are ignored (section 6.5.2).
                continue
            changes[key] = value
        return changes
