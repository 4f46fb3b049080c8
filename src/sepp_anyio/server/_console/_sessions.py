"""Console sessions: a random cookie naming a session, which holds the CSRF token every
action must carry and, when the server has API keys, whether it has logged in.

The cookie is ``HttpOnly`` (no script reads it) and ``SameSite=Strict`` (no other site's
page sends it); the CSRF token is a second secret, put in each form, that another origin
cannot read.  Sessions live in memory only (a restart logs everybody out), expire after
:data:`SESSION_TTL_S` of disuse, and at most :data:`MAX_SESSIONS` exist: the least recently
used is forgotten first, so a client minting cookies costs bounded memory.
"""

from __future__ import annotations

import hmac
import secrets
from collections import OrderedDict
from dataclasses import dataclass

__all__ = ["COOKIE", "MAX_SESSIONS", "SESSION_TTL_S", "Session", "Sessions"]

COOKIE = "sepp_console"
MAX_SESSIONS = 1024
SESSION_TTL_S = 12 * 3600.0


@dataclass(slots=True)
class Session:
    token: str
    csrf: str
    logged_in: bool
    last_used: float

    def csrf_matches(self, given: str | None) -> bool:
        return given is not None and hmac.compare_digest(given.encode(), self.csrf.encode())


class Sessions:
    """The sessions of one console; *now* is any monotonic clock in seconds."""

    def __init__(self, *, max_sessions: int = MAX_SESSIONS, ttl: float = SESSION_TTL_S) -> None:
        self._max = max_sessions
        self._ttl = ttl
        self._by_token: OrderedDict[str, Session] = OrderedDict()

    def __len__(self) -> int:
        return len(self._by_token)

    def get(self, token: str | None, now: float) -> Session | None:
        """The live session of this cookie value, touched; None if unknown or expired."""
        if not token:
            return None
        session = self._by_token.get(token)
        if session is None:
            return None
        if now - session.last_used > self._ttl:
            del self._by_token[token]
            return None
        session.last_used = now
        self._by_token.move_to_end(token)
        return session

    def create(self, now: float, *, logged_in: bool) -> Session:
        while len(self._by_token) >= self._max:
            self._by_token.popitem(last=False)
        session = Session(secrets.token_urlsafe(32), secrets.token_urlsafe(32), logged_in, now)
        self._by_token[session.token] = session
        return session

    def drop(self, token: str) -> None:
        self._by_token.pop(token, None)

    @staticmethod
    def cookie(session: Session | None) -> tuple[str, str]:
        """The ``Set-Cookie`` header setting (or, for None, clearing) the session cookie."""
        if session is None:
            return ("set-cookie", f"{COOKIE}=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0")
        return ("set-cookie", f"{COOKIE}={session.token}; Path=/; HttpOnly; SameSite=Strict")
