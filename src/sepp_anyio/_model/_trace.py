"""The W3C trace context a job carries.

Part of the public data model (conventions in ``_model/__init__.py``).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

from .. import _otel
from ._error_root import InvalidArgumentError, InvalidArgumentTypeError

__all__ = ["TraceContext", "TraceContextError"]


class TraceContextError(InvalidArgumentError):
    """A ``traceparent`` string is not in the W3C Trace Context format (an
    :class:`InvalidArgumentError`, so also a ``ValueError``)."""


_HEX = frozenset("0123456789abcdefABCDEF")


def _is_hex(text: str, length: int) -> bool:
    return len(text) == length and all(ch in _HEX for ch in text)


@dataclass(frozen=True, slots=True)
class TraceContext:
    """A W3C trace context carried with a job, linking producer and consumer spans.

    ``traceparent`` is ``<version>-<trace-id>-<span-id>-<flags>``: 2, 32, 16 and 2 hex
    digits. Validation follows the W3C rules (trace and span ids not all zeros, version
    ``ff`` forbidden); upper-case hex is accepted because the other sepp clients accept it.
    ``tracestate`` is passed through untouched.

    Raises:
        TraceContextError: (a ``ValueError``) if ``traceparent`` is malformed.
    """

    #: For example ``"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"``.
    traceparent: str
    #: Vendor-specific trace state, if any.
    tracestate: str | None = None

    def __post_init__(self) -> None:
        tp = self.traceparent
        if not isinstance(tp, str):
            raise InvalidArgumentTypeError(f"traceparent must be a str, got {type(tp).__name__}")
        parts = tp.split("-")
        if len(parts) != 4:
            raise TraceContextError(
                f"traceparent must have 4 '-'-separated fields "
                f"(version-traceid-spanid-flags), got {len(parts)}: {tp!r}"
            )
        version, trace_id, span_id, flags = parts
        if not _is_hex(version, 2):
            raise TraceContextError(f"traceparent version must be 2 hex digits: {tp!r}")
        if version.lower() == "ff":
            raise TraceContextError(f"traceparent version 'ff' is forbidden by W3C: {tp!r}")
        if not _is_hex(trace_id, 32):
            raise TraceContextError(f"traceparent trace-id must be 32 hex digits: {tp!r}")
        if trace_id.strip("0") == "":
            raise TraceContextError(f"traceparent trace-id must not be all zeros: {tp!r}")
        if not _is_hex(span_id, 16):
            raise TraceContextError(f"traceparent span-id must be 16 hex digits: {tp!r}")
        if span_id.strip("0") == "":
            raise TraceContextError(f"traceparent span-id must not be all zeros: {tp!r}")
        if not _is_hex(flags, 2):
            raise TraceContextError(f"traceparent flags must be 2 hex digits: {tp!r}")
        if self.tracestate is not None and not isinstance(self.tracestate, str):
            raise InvalidArgumentTypeError(
                f"tracestate must be a str or None, got {type(self.tracestate).__name__}"
            )

    @property
    def trace_id(self) -> str:
        """The 32-digit trace id, lower case."""
        return self.traceparent.split("-")[1].lower()

    @property
    def span_id(self) -> str:
        """The 16-digit parent span id, lower case."""
        return self.traceparent.split("-")[2].lower()

    @property
    def sampled(self) -> bool:
        """Whether the ``sampled`` flag (bit 0 of the flags) is set."""
        return bool(int(self.traceparent.split("-")[3], 16) & 0x01)

    @classmethod
    def from_current(cls) -> TraceContext | None:
        """The current OpenTelemetry span's context, or None.

        None without the ``otel`` extra, or when no valid span is current.
        """
        current = _otel.current_trace_context()
        if current is None:
            return None
        try:
            return cls(*current)
        except TraceContextError:
            return None

    def attach(self) -> contextlib.AbstractContextManager[None]:
        """A context manager making this context the current (remote) parent.

        Spans started inside the block become children of the span this
        context names, e.g. to continue a job's producer trace inside a
        handler. A no-op without the ``otel`` extra.
        """
        return _otel.attach_trace_context(self)
