"""Console sessions: bounded in number (least recently used forgotten first), expiring after
disuse, and their CSRF token compared as a secret."""

from __future__ import annotations

from sepp_anyio.server._console._sessions import Sessions


def test_sessions_are_bounded_and_the_least_recently_used_goes_first() -> None:
    sessions = Sessions(max_sessions=3, ttl=100.0)
    first, second, third = (sessions.create(float(n), logged_in=False) for n in range(3))
    assert sessions.get(first.token, 3.0) is first  # touched: now the most recent
    fourth = sessions.create(4.0, logged_in=True)
    assert len(sessions) == 3
    assert sessions.get(second.token, 5.0) is None
    assert all(sessions.get(s.token, 5.0) is s for s in (first, third, fourth))


def test_sessions_expire_after_disuse_and_can_be_dropped() -> None:
    sessions = Sessions(ttl=10.0)
    session = sessions.create(0.0, logged_in=True)
    assert sessions.get(session.token, 9.0) is session
    assert sessions.get(session.token, 18.0) is session  # used at 9: still fresh
    assert sessions.get(session.token, 29.0) is None
    other = sessions.create(30.0, logged_in=False)
    sessions.drop(other.token)
    assert sessions.get(other.token, 30.0) is None
    assert sessions.get(None, 30.0) is None and sessions.get("", 30.0) is None


def test_the_csrf_token_must_match_exactly() -> None:
    session = Sessions().create(0.0, logged_in=False)
    assert session.csrf_matches(session.csrf)
    assert not session.csrf_matches(None)
    assert not session.csrf_matches(session.csrf[:-1])
    assert not session.csrf_matches(session.token)
    cookie = Sessions.cookie(session)[1]
    assert cookie.endswith("; Path=/; HttpOnly; SameSite=Strict")
    assert "Max-Age=0" in Sessions.cookie(None)[1]
