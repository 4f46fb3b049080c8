"""Received HTTP/2 frames with a cheap ``repr``, for any h2 connection.

h2 logs every received frame at its "trace" level and formats ``repr(frame)``
for that line even though its default logger discards it. hyperframe's repr
renders the flags and a hex dump of the payload: about 9 microseconds a frame,
two or three frames per unary call on each side. :func:`install_quiet_frames`
makes a connection's frame buffer hand out the frames as subclasses with the
same layout (only ``__class__`` changes) and a cheap repr, and teaches the
connection's dispatch table to route them to the same handlers.

Used by the client transport and by the reference server's grpclib connections.
"""

from __future__ import annotations

import h2.connection
import h2.frame_buffer
from hyperframe.frame import (
    DataFrame,
    Frame,
    HeadersFrame,
    PingFrame,
    RstStreamFrame,
    SettingsFrame,
    WindowUpdateFrame,
)

__all__ = ["QUIET_FRAMES", "install_quiet_frames"]


def _quiet_repr(frame: Frame) -> str:
    return f"{type(frame).__mro__[1].__name__}(stream_id={frame.stream_id})"


QUIET_FRAMES: dict[type[Frame], type[Frame]] = {
    cls: type(f"Quiet{cls.__name__}", (cls,), {"__slots__": (), "__repr__": _quiet_repr})
    for cls in (
        DataFrame,
        HeadersFrame,
        WindowUpdateFrame,
        PingFrame,
        SettingsFrame,
        RstStreamFrame,
    )
}


class _QuietFrameBuffer(h2.frame_buffer.FrameBuffer):
    """h2's frame buffer, yielding the frames of :data:`QUIET_FRAMES` as their quiet
    subclass."""

    def __next__(self) -> Frame:
        frame = super().__next__()
        quiet = QUIET_FRAMES.get(type(frame))
        if quiet is not None:
            frame.__class__ = quiet
        return frame


def install_quiet_frames(conn: h2.connection.H2Connection) -> None:
    """Give ``conn`` the quiet frame buffer. Call it before ``conn`` receives any data
    (the buffer is replaced, not wrapped)."""
    conn.incoming_buffer = _QuietFrameBuffer(server=not conn.config.client_side)
    table = conn._frame_dispatch_table
    for frame_type, quiet_type in QUIET_FRAMES.items():
        if frame_type in table:
            table[quiet_type] = table[frame_type]
