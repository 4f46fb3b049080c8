"""The reference server's web console: queues, jobs, leases and dead letters in a browser.

``_http`` serves HTTP/1.1 with h11 on anyio, ``_app`` routes (sessions and CSRF in
``_sessions``), ``_views`` reads the engine, ``_payload`` previews payloads, ``_render`` holds
the Jinja2 templates (the extra ``sepp-anyio[ui]``) and the static files, ``_server`` listens.
Started by :func:`open_console` (``sepp-anyio server --ui-port``, ``[ui] port``).
"""

from __future__ import annotations

from ._render import require_jinja2
from ._server import ConsoleServer, open_configured_console, open_console

__all__ = ["ConsoleServer", "open_configured_console", "open_console", "require_jinja2"]
