"""The pages' templates (Jinja2, the optional extra ``sepp-anyio[ui]``) and static files,
both files of this package, so the console works offline.

Jinja2 is imported only when a console is built: the server runs without it, and asking for
a console without it is a :class:`~sepp_anyio.server.ConfigError` naming the extra.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from types import ModuleType
from typing import Any

from .._errors import ConfigError

__all__ = ["STATIC", "Templates", "require_jinja2"]

_HERE = Path(__file__).parent
_TEMPLATES = _HERE / "templates"

#: The static files, by the name the pages use, with their content types.
STATIC: dict[str, str] = {
    "console.css": "text/css; charset=utf-8",
    "console.js": "text/javascript; charset=utf-8",
}


def require_jinja2() -> ModuleType:
    """Jinja2, or a ConfigError naming the extra that installs it."""
    try:
        return importlib.import_module("jinja2")
    except ImportError as exc:
        raise ConfigError(
            "ui.port",
            "needs Jinja2 for the web console, which is not installed: pip install "
            f"'sepp-anyio[ui]' (or leave --ui-port and [ui] port unset); {exc}",
        ) from None


class Templates:
    """The console's templates, autoescaped (every value a page shows is escaped)."""

    def __init__(self) -> None:
        jinja2 = require_jinja2()
        self._env = jinja2.Environment(
            loader=jinja2.FileSystemLoader(str(_TEMPLATES)),
            autoescape=True,
            undefined=jinja2.StrictUndefined,
            trim_blocks=True,
            lstrip_blocks=True,
        )
        # Read once: a few kilobytes, served from memory.
        self.static = {name: (_HERE / "static" / name).read_bytes() for name in STATIC}

    def render(self, name: str, **context: Any) -> bytes:
        text: str = self._env.get_template(name).render(**context)
        return text.encode("utf-8")
