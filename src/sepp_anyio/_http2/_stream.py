"""The state of one HTTP/2 stream (RFC 9113 section 5.1), as an explicit table.

Only the states our roles use exist here: push is refused (we advertise
SETTINGS_ENABLE_PUSH 0), so the two "reserved" states cannot occur::

                         +--------+
                 send H  |        |  recv H
                ,--------|  idle  |--------.
               /         +--------+         \\
              v                              v
       +----------+          +--------+          +----------+
       |   half   |  send ES |        | recv ES  |   half   |
       |  closed  |<---------|  open  |--------->|  closed  |
       | (local)  |          |        |          | (remote) |
       +----------+          +--------+          +----------+
            |                     |                    |
            |  recv ES / R        | send R / recv R    | send ES / R
            `-------------------->v<-------------------'
                              +--------+
                              | closed |
                              +--------+

    H: HEADERS   ES: END_STREAM   R: RST_STREAM

HEADERS (response headers, trailers) and DATA keep a stream in its state while its
side is open. :data:`TRANSITIONS` lists every allowed (state, input) pair; anything
else is not allowed (:meth:`Stream.advance` returns False and changes nothing;
:meth:`Stream.apply`, for inputs the caller has already checked, raises).

This module is the only writer of a stream's state: ``state`` and the two flags
derived from it, ``open_for_sending`` and ``open_for_receiving``, change only through
the table (a test checks that no other module assigns them). The flags are plain
slots rather than properties so that the connection's DATA path reads one attribute
instead of comparing the state twice. A
closed stream is dropped by the connection at once: what it still needs to know about
closed streams (which ones it reset recently, and how the others ended: both
END_STREAMs or the peer's RST_STREAM) lives in :mod:`._closed`.

A stream also carries its two windows (see :mod:`._flow`): the send window as an
integer and the receive window inline (``recv_available``/``recv_unacked``), so that a
stream costs one small object.
"""

from __future__ import annotations

from enum import IntEnum

from ._errors import LocalProtocolError

__all__ = ["TRANSITIONS", "Input", "State", "Stream"]


class State(IntEnum):
    """RFC 9113 section 5.1 stream states (without the reserved ones)."""

    IDLE = 0
    OPEN = 1
    HALF_CLOSED_LOCAL = 2
    HALF_CLOSED_REMOTE = 3
    CLOSED = 4


class Input(IntEnum):
    """What happens to a stream: a frame sent or received."""

    SEND_HEADERS = 0
    SEND_DATA = 1
    SEND_END_STREAM = 2
    SEND_RST = 3
    RECV_HEADERS = 4
    RECV_DATA = 5
    RECV_END_STREAM = 6
    RECV_RST = 7


_I, _O, _HL, _HR, _C = (
    State.IDLE,
    State.OPEN,
    State.HALF_CLOSED_LOCAL,
    State.HALF_CLOSED_REMOTE,
    State.CLOSED,
)

#: (state, input) -> new state, for every allowed pair.
TRANSITIONS: dict[tuple[State, Input], State] = {
    (_I, Input.SEND_HEADERS): _O,
    (_I, Input.RECV_HEADERS): _O,
    (_O, Input.SEND_HEADERS): _O,
    (_O, Input.SEND_DATA): _O,
    (_O, Input.SEND_END_STREAM): _HL,
    (_O, Input.RECV_HEADERS): _O,
    (_O, Input.RECV_DATA): _O,
    (_O, Input.RECV_END_STREAM): _HR,
    (_O, Input.SEND_RST): _C,
    (_O, Input.RECV_RST): _C,
    (_HL, Input.RECV_HEADERS): _HL,
    (_HL, Input.RECV_DATA): _HL,
    (_HL, Input.RECV_END_STREAM): _C,
    (_HL, Input.SEND_RST): _C,
    (_HL, Input.RECV_RST): _C,
    (_HR, Input.SEND_HEADERS): _HR,
    (_HR, Input.SEND_DATA): _HR,
    (_HR, Input.SEND_END_STREAM): _C,
    (_HR, Input.SEND_RST): _C,
    (_HR, Input.RECV_RST): _C,
}

# The same table as a flat list indexed by state * 8 + input (-1: not allowed): one
# list lookup per transition on the hot path instead of hashing a tuple.
_TABLE: list[int] = [-1] * (len(State) * 8)
for (_state, _input), _new in TRANSITIONS.items():
    _TABLE[_state * 8 + _input] = _new
del _state, _input, _new

# Per state: whether our side, and the peer's side, may still send HEADERS or DATA.
_SENDING = (False, True, False, True, False)
_RECEIVING = (False, True, True, False, False)

# Plain ints for the connection's hot path (IntEnum comparisons go through __eq__).
IDLE, OPEN, HALF_CLOSED_LOCAL, HALF_CLOSED_REMOTE, CLOSED = 0, 1, 2, 3, 4
SEND_HEADERS, SEND_DATA, SEND_END_STREAM, SEND_RST = 0, 1, 2, 3
RECV_HEADERS, RECV_DATA, RECV_END_STREAM, RECV_RST = 4, 5, 6, 7


class Stream:
    """One stream: its state, windows and what has been exchanged on it."""

    __slots__ = (
        "content_length",
        "delivered",
        "headers_received",
        "headers_sent",
        "open_for_receiving",
        "open_for_sending",
        "recv_available",
        "recv_unacked",
        "send_window",
        "state",
        "stream_id",
    )

    def __init__(self, stream_id: int, send_window: int, recv_window: int) -> None:
        self.stream_id = stream_id
        self.state = IDLE
        # Whether our side (the peer's side) may still send HEADERS or DATA: derived
        # from ``state``, written only with it.
        self.open_for_sending = False
        self.open_for_receiving = False
        self.send_window = send_window
        self.recv_available = recv_window
        self.recv_unacked = 0
        # Whether the final (non-1xx) response or the request headers have arrived:
        # the next HEADERS are trailers.
        self.headers_received = False
        self.headers_sent = False
        # DATA bytes still expected by a received content-length, or -1 without one.
        self.content_length = -1
        # Server role: whether the request was handed to the caller (RequestReceived).
        self.delivered = False

    def advance(self, what: int) -> bool:
        """Apply ``what`` (an :class:`Input`); False (and no change) if not allowed."""
        new = _TABLE[self.state * 8 + what]
        if new < 0:
            return False
        self.state = new
        self.open_for_sending = _SENDING[new]
        self.open_for_receiving = _RECEIVING[new]
        return True

    def apply(self, what: int) -> int:
        """Apply ``what``, which the caller knows is allowed; return the new state.

        Raises:
            LocalProtocolError: the table does not allow ``what`` here (a bug of the
                caller's, never the peer's doing: the connection checks the peer's
                frames against ``open_for_receiving`` first).
        """
        new = _TABLE[self.state * 8 + what]
        if new < 0:
            raise LocalProtocolError(
                f"stream {self.stream_id}: {Input(what).name} not allowed in"
                f" {State(self.state).name}"
            )
        self.state = new
        self.open_for_sending = _SENDING[new]
        self.open_for_receiving = _RECEIVING[new]
        return new

    def __repr__(self) -> str:
        return f"<Stream {self.stream_id} {State(self.state).name}>"
