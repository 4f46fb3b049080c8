"""The connection's own state machine (``_state``): every transition, through the
table and through the connection's inputs (frames received, calls made)."""

from __future__ import annotations

import itertools

import pytest

from sepp_anyio._http2 import (
    Connection,
    ConnectionClosedError,
    ConnectionTerminated,
    Event,
    GoAwayReceived,
    LocalProtocolError,
)
from sepp_anyio._http2._state import TRANSITIONS, ConnectionState, Input, Phase

from ._support import PREFACE, REQUEST, Peer, client, server

# A path through the table from open to each phase.
_PATHS = {
    Phase.OPEN: (),
    Phase.DRAINING: (Input.GOAWAY_SENT,),
    Phase.CLOSED: (Input.CLOSE,),
}


def _at(phase: Phase) -> ConnectionState:
    state = ConnectionState()
    for what in _PATHS[phase]:
        state._move(what)
    assert state.phase is phase
    return state


def test_every_pair_follows_the_table() -> None:
    for phase, what in itertools.product(Phase, Input):
        state = _at(phase)
        expected = TRANSITIONS.get((phase, what))
        if expected is None:
            with pytest.raises(LocalProtocolError, match=f"{what.name} not allowed when"):
                state._move(what)
            assert state.phase is phase
        else:
            state._move(what)
            assert state.phase is expected
        # ``closed`` is the phase, never set apart from it.
        assert state.closed is (state.phase is Phase.CLOSED)
    # Only closing leaves draining, and nothing leaves closed.
    assert {new for (old, _), new in TRANSITIONS.items() if old is Phase.CLOSED} == {Phase.CLOSED}


def _phase(conn: Connection) -> str:
    # (By name: mypy would narrow an enum compared with ``is`` from one line to the next.)
    return conn.phase.name


@pytest.mark.parametrize("client_side", [True, False])
def test_graceful_goaway_sent_drains_then_close_closes(client_side: bool) -> None:
    conn = client() if client_side else server()
    assert (_phase(conn), conn.goaway_sent) == ("OPEN", None)
    conn.send_goaway(last_stream_id=7 if not client_side else 0)
    assert (_phase(conn), conn.closed) == ("DRAINING", False)
    # Draining -> draining: the last stream id may go down, never up.
    conn.send_goaway(last_stream_id=0)
    assert _phase(conn) == "DRAINING" and conn.goaway_sent == 0
    with pytest.raises(LocalProtocolError, match="cannot raise the last stream id"):
        conn.send_goaway(last_stream_id=1)
    assert _phase(conn) == "DRAINING" and conn.goaway_sent == 0
    if client_side:
        with pytest.raises(ConnectionClosedError, match="no new streams"):
            conn.open_stream(REQUEST)
    conn.close()
    assert (_phase(conn), conn.closed) == ("CLOSED", True)
    # Closed -> closed: a second close() queues no second GOAWAY.
    conn.data_to_send()
    conn.close()
    assert _phase(conn) == "CLOSED" and conn.data_to_send() == b""
    with pytest.raises(ConnectionClosedError, match="is closed"):
        conn.send_goaway()


def test_graceful_goaway_received_drains() -> None:
    conn = client()
    sid = conn.open_stream(REQUEST)
    events = conn.receive_data(Peer.goaway(sid), 0.0)
    assert isinstance(events[0], GoAwayReceived)
    assert _phase(conn) == "DRAINING" and conn.goaway_received == sid
    with pytest.raises(ConnectionClosedError, match="no new streams"):
        conn.open_stream(REQUEST)
    # A second, lower one: still draining. A higher one is the peer's error: closed.
    conn.receive_data(Peer.goaway(0), 0.0)
    assert _phase(conn) == "DRAINING" and conn.goaway_received == 0
    events = conn.receive_data(Peer.goaway(1), 0.0)
    assert isinstance(events[-1], ConnectionTerminated)
    assert _phase(conn) == "CLOSED"


@pytest.mark.parametrize("draining_first", [False, True])
def test_error_goaway_either_way_closes(draining_first: bool) -> None:
    for sent in (True, False):
        conn = server()
        if draining_first:
            conn.send_goaway()
            assert _phase(conn) == "DRAINING"
        if sent:
            conn.send_goaway(2, last_stream_id=0)
        else:
            conn.receive_data(Peer.goaway(0, 2), 0.0)
        assert _phase(conn) == "CLOSED" and conn.closed
        assert conn.receive_data(Peer.ping(), 0.0) == []


def test_a_connection_error_closes_and_records_its_goaway() -> None:
    conn = server()
    events: list[Event] = conn.receive_data(Peer.window_update(0, 0), 0.0)
    assert isinstance(events[-1], ConnectionTerminated)
    assert _phase(conn) == "CLOSED" and conn.goaway_sent == 0


def test_the_handshake_and_the_settings_ack() -> None:
    conn = Connection(client_side=False)
    assert (conn.handshake_complete, conn.settings_acknowledged) == (False, False)
    conn.receive_data(PREFACE + Peer.settings(), 0.0)
    assert (conn.handshake_complete, conn.settings_acknowledged) == (True, False)
    assert _phase(conn) == "OPEN"
    conn.receive_data(Peer.settings(ack=True), 0.0)
    assert conn.settings_acknowledged
    # A second ACK is unexpected: a glitch, the state does not move.
    budget = conn.glitch_budget
    conn.receive_data(Peer.settings(ack=True), 0.0)
    assert conn.glitch_budget == budget - 1 and conn.settings_acknowledged


def test_a_goaway_before_the_handshake_keeps_it_pending() -> None:
    # The phase and the handshake are independent: draining, the peer's first frame
    # must still be SETTINGS, and once it is the handshake completes.
    conn = Connection(client_side=True)
    conn.send_goaway()
    assert (_phase(conn), conn.handshake_complete) == ("DRAINING", False)
    conn.receive_data(Peer.settings(), 0.0)
    assert (_phase(conn), conn.handshake_complete) == ("DRAINING", True)
    other = Connection(client_side=True)
    other.send_goaway()
    events = other.receive_data(Peer.ping(), 0.0)
    assert isinstance(events[-1], ConnectionTerminated)
    assert "first frame is not SETTINGS" in events[-1].reason
    assert _phase(other) == "CLOSED" and not other.handshake_complete
