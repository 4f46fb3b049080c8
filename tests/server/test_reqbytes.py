"""The request-byte budgets on their own (no I/O): when refunds are held back, and who is
resumed when bytes leave."""

from __future__ import annotations

from sepp_anyio.server._network._reqbytes import ConnectionRequestBytes, RequestBytes


def paused(connection: ConnectionRequestBytes) -> bool:
    # (A function, not the property: mypy would keep an earlier assert's narrowing.)
    return connection.paused


def over(server: RequestBytes) -> bool:
    return server.over


class Call:
    def __init__(self) -> None:
        self.resumed = 0

    def resume_refunds(self) -> None:
        self.resumed += 1


def test_over_the_connection_cap_holds_back_until_bytes_leave() -> None:
    server = RequestBytes(limit=1000)
    connection = ConnectionRequestBytes(server, limit=100)
    call = Call()
    connection.add(100)
    assert connection.may_refund(call)  # at the cap is not over it
    connection.add(1)
    assert paused(connection) and not connection.may_refund(call)
    assert server.buffered == 101 and not over(server)
    connection.remove(1)
    assert call.resumed == 1 and not paused(connection)
    connection.remove(50)
    assert call.resumed == 1  # resumed once; nothing was held back since


def test_over_the_server_cap_holds_back_every_connection() -> None:
    server = RequestBytes(limit=100)
    first = ConnectionRequestBytes(server, limit=1000)
    second = ConnectionRequestBytes(server, limit=1000)
    a, b = Call(), Call()
    first.add(80)
    second.add(30)
    assert over(server) and paused(first) and paused(second)
    assert not first.may_refund(a) and not second.may_refund(b)
    # Bytes leaving the first connection bring the server under its cap: both resume.
    first.remove(10)
    assert not over(server) and (a.resumed, b.resumed) == (1, 1)


def test_still_paused_by_the_other_cap_is_not_resumed() -> None:
    server = RequestBytes(limit=100)
    first = ConnectionRequestBytes(server, limit=50)
    second = ConnectionRequestBytes(server, limit=1000)
    a, b = Call(), Call()
    first.add(90)
    second.add(20)
    assert not first.may_refund(a) and not second.may_refund(b)
    second.remove(20)  # the server is under its cap; the first connection is not
    assert (a.resumed, b.resumed) == (0, 1)
    first.remove(40)
    assert a.resumed == 1


def test_a_forgotten_call_is_not_resumed_and_close_returns_the_bytes() -> None:
    server = RequestBytes(limit=10)
    connection = ConnectionRequestBytes(server, limit=10)
    call = Call()
    connection.add(20)
    assert not connection.may_refund(call)
    connection.forget(call)
    connection.remove(15)
    assert call.resumed == 0
    other = ConnectionRequestBytes(server, limit=10)
    other.add(3)
    connection.close()
    assert connection.buffered == 0 and server.buffered == 3
