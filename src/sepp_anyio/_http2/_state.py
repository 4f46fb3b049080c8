"""The state of the connection itself, as an explicit table (beside :mod:`._stream`).

Everything that decides how the connection as a whole moves lives here, in the way of
h11's ``_state``: the phase and its transitions, the GOAWAY last-stream-ids that go
with them, and the SETTINGS handshake. The rest of the connection only reads these
facts; a test checks that no other module assigns them::

      GOAWAY sent / received        GOAWAY sent / received
        +--------+  ------------------>  +----------+  ---.
        |  open  |                       | draining |     | (again: the last id
        +--------+                       +----------+  <--'  may only go down)
             \\                                /
              \\  CLOSE                 CLOSE /
               v                            v
                      +--------+
                      | closed |  <-- CLOSE (again: nothing changes)
                      +--------+

    CLOSE: a GOAWAY with an error code (either way), a connection error, or
    :meth:`~._connection.Connection.close`.

*Open*: streams may be opened. *Draining*: a graceful GOAWAY went one way or the other:
no new streams, those at or below its last-stream-id go on. *Closed*: input is
ignored and nothing more is sent but what is already queued. Independently of the
phase, the handshake is done once the peer's first SETTINGS has arrived (frames before
it are a connection error), and our SETTINGS count as acknowledged when the peer's ACK
has come.

:class:`ConnectionState` is the first base of :class:`~._connection.Connection`, so
its facts are slots of the connection: the reader's per-frame ``_closed`` test stays
one attribute load. ``_closed`` mirrors ``_phase is CLOSED`` and is written with it.
"""

from __future__ import annotations

from enum import IntEnum

from ._errors import ConnectionClosedError, ErrorCode, LocalProtocolError, ProtocolViolation

__all__ = ["TRANSITIONS", "ConnectionState", "Input", "Phase"]


class Phase(IntEnum):
    """The connection's phase."""

    OPEN = 0
    DRAINING = 1
    CLOSED = 2


class Input(IntEnum):
    """What moves the connection's phase."""

    GOAWAY_SENT = 0
    GOAWAY_RECEIVED = 1
    CLOSE = 2


_O, _D, _C = Phase.OPEN, Phase.DRAINING, Phase.CLOSED

#: (phase, input) -> new phase, for every allowed pair.
TRANSITIONS: dict[tuple[Phase, Input], Phase] = {
    (_O, Input.GOAWAY_SENT): _D,
    (_O, Input.GOAWAY_RECEIVED): _D,
    (_O, Input.CLOSE): _C,
    (_D, Input.GOAWAY_SENT): _D,
    (_D, Input.GOAWAY_RECEIVED): _D,
    (_D, Input.CLOSE): _C,
    (_C, Input.CLOSE): _C,
}


class ConnectionState:
    """The connection's phase, its GOAWAYs and its SETTINGS handshake.

    The methods are the connection's inputs; each checks what it must, applies the
    table and raises where the input is not allowed:
    :class:`~._errors.LocalProtocolError` (and its subclasses) for the caller's misuse,
    :class:`~._errors.ProtocolViolation` for the peer's.
    """

    __slots__ = (
        "_closed",
        "_goaway_received",
        "_goaway_sent",
        "_phase",
        "_settings_received",
        "_settings_unacked",
    )

    def __init__(self) -> None:
        self._phase = Phase.OPEN
        self._closed = False
        self._goaway_sent: int | None = None
        self._goaway_received: int | None = None
        self._settings_received = False
        # Our SETTINGS (queued at construction) await the peer's ACK.
        self._settings_unacked = 1

    # ------------------------------------------------------------ the facts

    @property
    def phase(self) -> Phase:
        """Where the connection is (see the module's diagram)."""
        return self._phase

    @property
    def closed(self) -> bool:
        """Whether the connection is closed: after a connection error, an error GOAWAY
        sent or received, or :meth:`close`. Queued output may still be sent."""
        return self._closed

    @property
    def handshake_complete(self) -> bool:
        """Whether the peer's preface (for a server, the client's magic string) and
        first SETTINGS have arrived."""
        return self._settings_received

    @property
    def settings_acknowledged(self) -> bool:
        """Whether the peer has acknowledged our SETTINGS (time this out yourself)."""
        return self._settings_unacked == 0

    @property
    def goaway_received(self) -> int | None:
        """The last-stream-id of the peer's most recent GOAWAY, or None."""
        return self._goaway_received

    @property
    def goaway_sent(self) -> int | None:
        """The last-stream-id of our most recent GOAWAY, or None."""
        return self._goaway_sent

    # ------------------------------------------------------------ transitions

    def _move(self, what: Input) -> None:
        new = TRANSITIONS.get((self._phase, what))
        if new is None:
            raise LocalProtocolError(f"{what.name} not allowed when {self._phase.name}")
        self._phase = new
        self._closed = new is Phase.CLOSED

    def _check_new_stream(self) -> None:
        """Refuse to open a stream unless the phase is open.

        Raises:
            ConnectionClosedError: closed, or a GOAWAY was exchanged.
        """
        if self._phase is not Phase.OPEN:
            raise ConnectionClosedError("the connection takes no new streams")

    def _check_open(self) -> None:
        """Raises ConnectionClosedError: the connection is closed."""
        if self._closed:
            raise ConnectionClosedError("the connection is closed")

    def _send_goaway(self, last_stream_id: int, error_code: int) -> None:
        """We send a GOAWAY (the caller queues it after this returns).

        Raises:
            ConnectionClosedError: the connection is closed.
            LocalProtocolError: ``last_stream_id`` above that of an earlier GOAWAY.
        """
        self._check_open()
        if self._goaway_sent is not None and last_stream_id > self._goaway_sent:
            raise LocalProtocolError("a GOAWAY cannot raise the last stream id of an earlier one")
        self._goaway_sent = last_stream_id
        self._move(Input.GOAWAY_SENT if error_code == ErrorCode.NO_ERROR else Input.CLOSE)

    def _receive_goaway(self, last_stream_id: int, error_code: int) -> None:
        """The peer's GOAWAY.

        Raises:
            ProtocolViolation: it raises the last-stream-id of an earlier one.
        """
        previous = self._goaway_received
        if previous is not None and last_stream_id > previous:
            raise ProtocolViolation(
                ErrorCode.PROTOCOL_ERROR, "GOAWAY raised the last stream id of an earlier one"
            )
        self._goaway_received = last_stream_id
        self._move(Input.GOAWAY_RECEIVED if error_code == ErrorCode.NO_ERROR else Input.CLOSE)

    def _close(self, last_stream_id: int) -> int | None:
        """:meth:`close`: return the last-stream-id for the final GOAWAY (never above an
        earlier one), or None if closed already (no GOAWAY then)."""
        if self._closed:
            return None
        if self._goaway_sent is not None and last_stream_id > self._goaway_sent:
            last_stream_id = self._goaway_sent
        self._goaway_sent = last_stream_id
        self._move(Input.CLOSE)
        return last_stream_id

    def _fail(self, last_stream_id: int) -> None:
        """A connection error: the GOAWAY queued for it says ``last_stream_id``."""
        self._goaway_sent = last_stream_id
        self._move(Input.CLOSE)

    def _receive_settings(self) -> bool:
        """The peer's SETTINGS (not an ACK); return whether it is the first (the
        handshake is then complete)."""
        if self._settings_received:
            return False
        self._settings_received = True
        return True

    def _receive_settings_ack(self) -> bool:
        """The peer's SETTINGS ACK; False if none of ours was waiting for one."""
        if self._settings_unacked == 0:
            return False
        self._settings_unacked -= 1
        return True
