"""The events :meth:`Connection.receive_data` returns.

Small slotted classes (no dataclass machinery on the hot path) with value equality and
a readable ``repr``, so tests can compare them with expected tables. END_STREAM is a
flag on the event that carried it rather than an event of its own: a unary call is three
events (headers, data, trailers), not five.

Headers are tuples of ``(name, value)`` byte pairs, in the order received, and are
shared with the decoder's cache: do not mutate them.
"""

from __future__ import annotations

from typing import Any, ClassVar

from ._errors import ErrorCode

__all__ = [
    "ConnectionTerminated",
    "DataReceived",
    "Event",
    "GoAwayReceived",
    "Headers",
    "PingAcknowledged",
    "PingReceived",
    "RemoteSettingsChanged",
    "RequestHeadersTooLarge",
    "RequestReceived",
    "ResponseReceived",
    "SettingsAcknowledged",
    "StreamReset",
    "TrailersReceived",
    "WindowUpdated",
]

#: A header list: ``(name, value)`` pairs of bytes.
Headers = tuple[tuple[bytes, bytes], ...]


class Event:
    """Base of every event."""

    __slots__ = ()
    _fields: ClassVar[tuple[str, ...]] = ()

    def __init_subclass__(cls) -> None:
        super().__init_subclass__()
        fields: list[str] = []
        for klass in reversed(cls.__mro__):
            fields += getattr(klass, "__slots__", ())
        cls._fields = tuple(fields)

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return all(getattr(self, name) == getattr(other, name) for name in self._fields)

    def __hash__(self) -> int:
        return hash((type(self), *(_hashable(getattr(self, name)) for name in self._fields)))

    def __repr__(self) -> str:
        fields = ", ".join(f"{name}={getattr(self, name)!r}" for name in self._fields)
        return f"{type(self).__name__}({fields})"


def _hashable(value: Any) -> Any:
    return tuple(value.items()) if isinstance(value, dict) else value


class RequestReceived(Event):
    """Server role: a request's headers arrived on a new stream.

    The caller must :meth:`~._connection.Connection.release_stream` it once its handler
    has finished: until then it counts against MAX_CONCURRENT_STREAMS. To refuse the
    request before its body is read, reset the stream (REFUSED_STREAM) or answer it at
    once with ``end_stream=True``.
    """

    __slots__ = ("end_stream", "headers", "stream_id")

    def __init__(self, stream_id: int, headers: Headers, end_stream: bool) -> None:
        self.stream_id = stream_id
        self.headers = headers
        self.end_stream = end_stream


class RequestHeadersTooLarge(Event):
    """Server role: a request's decoded header list exceeded ``max_header_list_size``.

    The stream is open and counts as a request handed over (release it like a
    :class:`RequestReceived`); answer it (a gRPC server sends a trailers-only
    RESOURCE_EXHAUSTED naming the limit) and then reset it. It counted against the
    reset budget already.
    """

    __slots__ = ("end_stream", "limit", "size", "stream_id")

    def __init__(self, stream_id: int, size: int, limit: int, end_stream: bool) -> None:
        self.stream_id = stream_id
        self.size = size
        self.limit = limit
        self.end_stream = end_stream


class ResponseReceived(Event):
    """Client role: the final (non-1xx) response headers arrived; with ``end_stream``,
    a response without body or trailers (gRPC's trailers-only)."""

    __slots__ = ("end_stream", "headers", "stream_id")

    def __init__(self, stream_id: int, headers: Headers, end_stream: bool) -> None:
        self.stream_id = stream_id
        self.headers = headers
        self.end_stream = end_stream


class TrailersReceived(Event):
    """Trailers arrived (both roles); they always end the peer's side of the stream."""

    __slots__ = ("headers", "stream_id")

    def __init__(self, stream_id: int, headers: Headers) -> None:
        self.stream_id = stream_id
        self.headers = headers


class DataReceived(Event):
    """DATA arrived. ``flow_controlled_length`` (the payload with its padding) is what to
    hand back with ``acknowledge_received_data`` once consumed."""

    __slots__ = ("data", "end_stream", "flow_controlled_length", "stream_id")

    def __init__(
        self, stream_id: int, data: bytes, flow_controlled_length: int, end_stream: bool
    ) -> None:
        self.stream_id = stream_id
        self.data = data
        self.flow_controlled_length = flow_controlled_length
        self.end_stream = end_stream


class StreamReset(Event):
    """A stream ended by a reset.

    ``remote``: the peer sent RST_STREAM with ``error_code``. Otherwise the peer broke
    the protocol on this stream (a stream error): we queued RST_STREAM with
    ``error_code`` and ``reason`` says why. Only streams the caller knows of are
    reported (a request refused before it was handed over is not).
    """

    __slots__ = ("error_code", "reason", "remote", "stream_id")

    def __init__(
        self, stream_id: int, error_code: ErrorCode | int, remote: bool, reason: str = ""
    ) -> None:
        self.stream_id = stream_id
        self.error_code = error_code
        self.remote = remote
        self.reason = reason


class WindowUpdated(Event):
    """The peer granted ``delta`` more send window (``stream_id`` 0: the connection's):
    blocked senders may go on. (A change of SETTINGS_INITIAL_WINDOW_SIZE comes as
    :class:`RemoteSettingsChanged` instead; it moves every stream's window.)"""

    __slots__ = ("delta", "stream_id")

    def __init__(self, stream_id: int, delta: int) -> None:
        self.stream_id = stream_id
        self.delta = delta


class RemoteSettingsChanged(Event):
    """The peer's SETTINGS frame (acknowledged already); ``changed`` maps each
    identifier it set to its value (see ``Connection.peer_max_concurrent_streams``)."""

    __slots__ = ("changed",)

    def __init__(self, changed: dict[int, int]) -> None:
        self.changed = changed


class SettingsAcknowledged(Event):
    """The peer acknowledged our SETTINGS."""

    __slots__ = ()


class PingReceived(Event):
    """The peer sent a PING; its ACK is queued already."""

    __slots__ = ("data",)

    def __init__(self, data: bytes) -> None:
        self.data = data


class PingAcknowledged(Event):
    """The ACK of one of our PINGs."""

    __slots__ = ("data",)

    def __init__(self, data: bytes) -> None:
        self.data = data


class GoAwayReceived(Event):
    """The peer sent GOAWAY: no new streams on this connection.

    ``unprocessed`` lists our open streams above ``last_stream_id``: the peer never
    processed them, they are closed now, and their requests may be retried on another
    connection. Streams at or below it go on: with NO_ERROR they may finish normally.
    With another code the connection is closed after this event (the peer is about to
    close it; nothing more is read or sent).
    """

    __slots__ = ("debug_data", "error_code", "last_stream_id", "unprocessed")

    def __init__(
        self,
        error_code: ErrorCode | int,
        last_stream_id: int,
        debug_data: bytes,
        unprocessed: tuple[int, ...],
    ) -> None:
        self.error_code = error_code
        self.last_stream_id = last_stream_id
        self.debug_data = debug_data
        self.unprocessed = unprocessed


class ConnectionTerminated(Event):
    """We ended the connection for the peer's error: GOAWAY with ``error_code`` (and
    ``reason`` as its debug data) is queued and the connection is closed.
    ``last_stream_id`` is the one the GOAWAY carries: a server's highest processed
    request, 0 for a client."""

    __slots__ = ("error_code", "last_stream_id", "reason")

    def __init__(self, error_code: ErrorCode | int, reason: str, last_stream_id: int) -> None:
        self.error_code = error_code
        self.reason = reason
        self.last_stream_id = last_stream_id
