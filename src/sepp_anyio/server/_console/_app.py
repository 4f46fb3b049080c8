"""The console's routes: sessions and CSRF first, then one handler per page or action.

::

    GET  /                       -> /queues
    GET  /queues                 every queue (live: console.js polls /api/queues each second)
    GET  /api/queues             the same as JSON
    GET  /queues/NAME            a queue's jobs: ?state=ready|scheduled|leased &type= &cursor=
    GET  /jobs/ID                a job (live or dead letter), with its lease countdown
    GET  /dead-letters           ?queue= &cursor=
    GET  /dead-letters/confirm   ?action=requeue|purge and job_id= or queue= (or neither: all)
    POST /dead-letters/requeue   form: csrf, job_id | queue
    POST /dead-letters/purge     form: csrf, job_id | queue
    GET  /server                 version, configuration, limits, store, uptime
    GET  /login, POST /login     only when the server has API keys; POST /logout
    GET  /static/NAME            the styles and the script

Every answer to a bad input is an error page (or JSON for ``/api/``) with a status and a
one-line reason, never a traceback; an unexpected error is logged and answered 500.
"""

from __future__ import annotations

import hmac
import json
import logging
import urllib.parse
from typing import Any

import anyio

from .._engine._engine import Engine
from .._errors import EngineError
from ._http import Reply, Request
from ._render import STATIC, Templates
from ._sessions import COOKIE, Session, Sessions
from ._views import (
    STATES,
    dead_letters_view,
    is_job_id,
    job_view,
    queue_view,
    queues_view,
    server_view,
)

__all__ = ["ConsoleApp"]

logger = logging.getLogger("sepp_anyio.server.console")

_HTML = "text/html; charset=utf-8"
_JSON = "application/json"
#: The largest cursor a URL may carry (a cursor is a position in a queue).
_MAX_CURSOR = 10**12


class _Problem(Exception):
    """A request the console refuses: answered with this status and reason."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


def _redirect(location: str, *headers: tuple[str, str]) -> Reply:
    return Reply(303, b"", headers=(("location", location), *headers))


def _cursor(text: str | None) -> int:
    if text is None or text == "":
        return 0
    if not text.isdigit() or int(text) > _MAX_CURSOR:
        raise _Problem(400, f"cursor must be a whole number from 0 to {_MAX_CURSOR}, not {text!r}")
    return int(text)


def _loopback_host(host: str) -> bool:
    name = host.rsplit(":", 1)[0] if not host.endswith("]") else host
    if name.startswith("[") and "]" in name:
        name = name[1 : name.index("]")]
    return name in ("localhost", "::1") or name.startswith("127.")


class ConsoleApp:
    """The console of one engine (see the module docstring for the routes)."""

    def __init__(
        self,
        engine: Engine,
        templates: Templates,
        *,
        sessions: Sessions | None = None,
        loopback: bool = True,
    ) -> None:
        self.engine = engine
        self.templates = templates
        self.sessions = sessions if sessions is not None else Sessions()
        #: Bound to loopback only: then only loopback host names are answered (see _route).
        self.loopback = loopback

    @property
    def _auth_required(self) -> bool:
        return self.engine.config.auth.accepted_keys is not None

    # ------------------------------------------------------------------ entry

    async def handle(self, request: Request) -> Reply:
        """Answer one request; never raises (but for cancellation)."""
        try:
            return await self._route(request)
        except _Problem as problem:
            return self._error(request, problem.status, problem.reason)
        except EngineError as exc:
            return self._error(request, 503, f"the server cannot do that now: {exc.message}")
        except Exception:
            logger.exception("console: %s %s failed", request.method, request.path)
            return self._error(request, 500, "internal error (the server's log has the details)")

    def _error(self, request: Request, status: int, reason: str) -> Reply:
        if request.path.startswith("/api/"):
            return Reply(status, json.dumps({"error": reason}).encode(), _JSON)
        try:
            body = self.templates.render(
                "error.html", status=status, reason=reason, session=None, nav=""
            )
        except Exception:  # a broken template must not hide the original error
            logger.exception("console: the error page failed")
            return Reply(status, f"{status}: {reason}\n".encode())
        return Reply(status, body, _HTML)

    async def _route(self, request: Request) -> Reply:
        path = request.path
        method = request.method
        if self.loopback and not _loopback_host(request.headers.get("host", "")):
            # DNS rebinding: another site's name pointed at 127.0.0.1 would make its pages
            # same-origin with the console; a loopback console answers loopback names only.
            raise _Problem(421, "this console answers only to localhost and loopback addresses")
        if path.startswith("/static/"):
            return self._static(path.removeprefix("/static/"))
        now = anyio.current_time()
        session = self.sessions.get(request.cookies.get(COOKIE), now)
        if path == "/login":
            return self._login(request, session, now)
        cookie: tuple[tuple[str, str], ...] = ()
        if session is None or (self._auth_required and not session.logged_in):
            if self._auth_required:
                if path.startswith("/api/"):
                    raise _Problem(401, "log in first (the server has API keys)")
                if method == "POST":
                    raise _Problem(403, "log in first (the server has API keys)")
                return _redirect("/login?" + urllib.parse.urlencode({"next": path}))
            # No keys: an anonymous session, only to carry the CSRF token of the actions.
            session = self.sessions.create(now, logged_in=False)
            cookie = (Sessions.cookie(session),)
        if method == "POST":
            if not session.csrf_matches(request.form.get("csrf")):
                raise _Problem(403, "missing or wrong CSRF token: reload the page and try again")
            reply = await self._action(request, session)
        else:
            reply = self._page(request, session)
        return Reply(reply.status, reply.body, reply.content_type, (*reply.headers, *cookie))

    # ------------------------------------------------------------------ pages

    def _render(self, name: str, session: Session, nav: str, **context: Any) -> Reply:
        body = self.templates.render(
            name, session=session, auth_required=self._auth_required, nav=nav, **context
        )
        return Reply(200, body, _HTML)

    def _page(self, request: Request, session: Session) -> Reply:
        path = request.path
        query = request.query
        engine = self.engine
        ui = engine.config.ui
        if path == "/":
            return _redirect("/queues")
        if path == "/queues":
            return self._render("queues.html", session, "queues", queues=queues_view(engine))
        if path == "/api/queues":
            body = json.dumps({"now_ms": engine.clock.now_ms(), "queues": queues_view(engine)})
            return Reply(200, body.encode(), _JSON)
        if path.startswith("/queues/"):
            return self._queue(session, path.removeprefix("/queues/"), query)
        if path.startswith("/jobs/"):
            job_id = path.removeprefix("/jobs/")
            if not is_job_id(job_id):
                raise _Problem(400, f"not a job id (a UUID): {job_id[:80]!r}")
            job = job_view(engine, job_id, ui.payload_preview_bytes)
            if job is None:
                raise _Problem(404, f"no job {job_id} (acked, or its dead letter is gone)")
            return self._render("job.html", session, "queues", job=job)
        if path == "/dead-letters":
            queue = query.get("queue") or None
            view = dead_letters_view(
                engine, queue, cursor=_cursor(query.get("cursor")), page_size=ui.page_size
            )
            return self._render(
                "dead_letters.html",
                session,
                "dead-letters",
                queue=queue,
                notice=query.get("notice", "")[:200],
                **view,
            )
        if path == "/dead-letters/confirm":
            action, target_id, target_queue = self._target(query)
            return self._render(
                "confirm.html",
                session,
                "dead-letters",
                action=action,
                job_id=target_id,
                queue=target_queue,
            )
        if path == "/server":
            return self._render("server.html", session, "server", server=server_view(engine))
        raise _Problem(404, f"no page {path[:80]!r}")

    def _queue(self, session: Session, name: str, query: Any) -> Reply:
        engine = self.engine
        limit = engine.config.limits.max_queue_name_bytes
        if not name or len(name.encode()) > limit:
            raise _Problem(400, f"a queue name is 1 to {limit} bytes")
        state = query.get("state") or ""
        if state and state not in STATES:
            raise _Problem(400, f"state must be one of {', '.join(STATES)}, not {state[:40]!r}")
        job_type = query.get("type") or None
        cursor = _cursor(query.get("cursor"))
        ui = engine.config.ui
        view = queue_view(
            engine,
            name,
            states=frozenset({STATES[state]}) if state else None,
            job_type=job_type,
            cursor=cursor,
            page_size=ui.page_size,
            preview_bytes=ui.payload_preview_bytes,
        )
        stats = engine.stats().get(name)
        return self._render(
            "queue.html",
            session,
            "queues",
            queue=name,
            state=state,
            states=list(STATES),
            job_type=job_type or "",
            stats=stats,
            **view,
        )

    def _target(self, form: Any) -> tuple[str, str | None, str | None]:
        action = form.get("action", "")
        if action not in ("requeue", "purge"):
            raise _Problem(400, "action must be requeue or purge")
        job_id = form.get("job_id") or None
        if job_id is not None and not is_job_id(job_id):
            raise _Problem(400, f"not a job id (a UUID): {job_id[:80]!r}")
        queue = form.get("queue") or None
        return action, job_id, queue

    def _static(self, name: str) -> Reply:
        content_type = STATIC.get(name)
        if content_type is None:
            raise _Problem(404, f"no static file {name[:80]!r}")
        return Reply(200, self.templates.static[name], content_type)

    # ------------------------------------------------------------------ login

    def _login(self, request: Request, session: Session | None, now: float) -> Reply:
        keys = self.engine.config.auth.accepted_keys
        target = request.query.get("next") or request.form.get("next") or "/queues"
        # Only a path of this console: never an open redirect to another site.
        if not target.startswith("/") or target.startswith("//"):
            target = "/queues"
        if keys is None:
            return _redirect(target)
        if request.method == "POST":
            given = request.form.get("key", "")
            if given and any(hmac.compare_digest(given.encode(), k.encode()) for k in keys):
                if session is not None:
                    self.sessions.drop(session.token)
                fresh = self.sessions.create(now, logged_in=True)
                logger.info("console: logged in")
                return _redirect(target, Sessions.cookie(fresh))
            logger.warning("console: a login with a wrong API key")
            body = self.templates.render(
                "login.html", session=None, nav="", next=target, failed=True
            )
            return Reply(403, body, _HTML)
        body = self.templates.render("login.html", session=None, nav="", next=target, failed=False)
        return Reply(200, body, _HTML)

    # ------------------------------------------------------------------ actions

    async def _action(self, request: Request, session: Session) -> Reply:
        path = request.path
        form = request.form
        if path == "/logout":
            self.sessions.drop(session.token)
            return _redirect("/login" if self._auth_required else "/queues", Sessions.cookie(None))
        if path in ("/dead-letters/requeue", "/dead-letters/purge"):
            action = path.removeprefix("/dead-letters/")
            _, job_id, queue = self._target({**form, "action": action})
            if action == "requeue":
                jobs = await self.engine.requeue_dead_letters(queue, job_id)
                if job_id is not None:
                    if not jobs:
                        raise _Problem(404, f"no dead letter {job_id} (requeued or purged?)")
                    return _redirect(f"/jobs/{job_id}")
                notice = f"requeued {len(jobs)} dead letter(s)"
            else:
                records = await self.engine.purge_dead_letters(queue, job_id)
                if job_id is not None and not records:
                    raise _Problem(404, f"no dead letter {job_id} (requeued or purged?)")
                notice = f"purged {len(records)} dead letter(s)"
            query = {"notice": notice, **({"queue": queue} if queue else {})}
            return _redirect("/dead-letters?" + urllib.parse.urlencode(query))
        raise _Problem(404, f"no action {path[:80]!r}")
