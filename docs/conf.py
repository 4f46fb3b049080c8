"""Sphinx configuration of the sepp-anyio documentation (``nox -s docs``).

Offline by design: the intersphinx inventories of Python, trio and anyio are files in
``_inventories/`` (see ``_inventories/refresh.py``), so the build needs no network and gives
the same result everywhere. The project's URLs come from ``pyproject.toml``, their one
place.
"""

from __future__ import annotations

import sys
import tomllib
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE / "_ext"))

import sepp_anyio  # noqa: E402  (after the path above, for the extension's imports)

_pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
URLS: dict[str, str] = _pyproject["urls"]

project = "sepp-anyio"
author = "sepp-anyio developers"
copyright = "the sepp-anyio developers (MIT licence)"
release = sepp_anyio.__version__
version = ".".join(release.split(".")[:2])

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "sphinx.ext.intersphinx",
    "sepp_docs",
]

exclude_patterns = ["_build", "_inventories", "diagrams/*.py", "Thumbs.db", ".DS_Store"]
nitpicky = True
# Private types that public signatures name; each is documented in words where it matters.
nitpick_ignore_regex = [
    # A Store's write operations (Store.commit's argument), private records of the server.
    (
        "py:class",
        r"sepp_anyio\.server\._store\._records\.(Put|Delete)\w+"
        r"|sepp_anyio\.server\._store\._records\.DedupEntry",
    ),
    # Structural types and type variables of signatures (underscored: not public).
    ("py:class", r"(sepp_anyio\.(\w+\.)*)?_[A-Za-z]\w*"),
    ("py:class", r"sepp_anyio\._worker\.(\w+\.)*H"),
    # Type variables of the generic public classes and methods (Task[T, R], Worker[StateT],
    # Cron[T], ResultHandle[R], JobCtx.enqueue's ValueT).
    ("py:(class|obj)", r"(sepp_anyio\.(\w+\.)*)?(T|R|ValueT|StateT|StateT_co)"),
    # Protocols, records and registries that public signatures name; their docstrings say
    # in words what is expected or returned (a worker-like source of health, a task-like
    # object, (field, message) pairs, the Prometheus families).
    (
        "py:class",
        r"sepp_anyio\._health\._source\.HealthSource|sepp_anyio\._health\._metrics\.MetricsRegistry"
        r"|sepp_anyio\._cron\._cron\.CronTask|sepp_anyio\._tasks\._typed\.Problem",
    ),
    # Projects without an inventory here: grpclib (in one private annotation) and pytest.
    ("py:class", r"grpclib\..*"),
    ("py:class", r"_pytest\..*"),
    # A helper that ServerThread's docstring names but no public package exports.
    ("py:func", r"default_backend"),
    # The network server's internals named in its public signatures (the HTTP/2 core's
    # limits, the server's derived limits, one served connection, its connection caps).
    (
        "py:class",
        r"sepp_anyio\._http2\._limits\.Limits|sepp_anyio\.server\._network\._netlimits\.NetworkLimits"
        r"|sepp_anyio\.server\._network\._served\.ServedConnection"
        r"|sepp_anyio\.server\._network\._admission\.Admission",
    ),
]
primary_domain = "py"
highlight_language = "python3"
# Quotes and ellipses only: "--" stays two hyphens (command-line options in prose).
smartquotes_action = "qe"

# autodoc: signatures keep their annotations; Google-style docstrings (napoleon).
autodoc_member_order = "bysource"
autodoc_typehints = "signature"
autodoc_typehints_format = "short"
autodoc_preserve_defaults = False
autodoc_inherit_docstrings = False
autodoc_default_options = {"members": True, "show-inheritance": True}
napoleon_google_docstring = True
napoleon_numpy_docstring = False
napoleon_use_rtype = False

# Offline inventories: (published site the links point at, local file it is read from).
intersphinx_mapping = {
    "python": ("https://docs.python.org/3/", str(HERE / "_inventories" / "python.inv")),
    "trio": ("https://trio.readthedocs.io/en/stable/", str(HERE / "_inventories" / "trio.inv")),
    "anyio": ("https://anyio.readthedocs.io/en/stable/", str(HERE / "_inventories" / "anyio.inv")),
}
intersphinx_timeout = 1

# The project's links, for pages that name them (|docs_url|, |repo_url|).
rst_epilog = f"""
.. |docs_url| replace:: {URLS["Documentation"]}
.. |repo_url| replace:: {URLS["Repository"]}
"""

html_theme = "furo"
html_title = f"sepp-anyio {release}"
html_baseurl = URLS["Documentation"]
html_static_path: list[str] = []
html_show_sourcelink = False
