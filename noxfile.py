"""Developer sessions: ``nox -s tests lint typecheck proto bench minimum_versions docs``."""

from __future__ import annotations

import sys
from pathlib import Path

import nox

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT / "tools"))
import min_versions  # noqa: E402  (tools/ is not a package; it needs the path above)

nox.options.default_venv_backend = "venv"
nox.options.sessions = ["lint", "typecheck", "tests"]

PYTHONS = ["3.11", "3.12", "3.13"]


@nox.session(python=PYTHONS)
def tests(session: nox.Session) -> None:
    """The whole suite on both anyio backends (asyncio and trio)."""
    session.install("-e", ".[test,otel]")
    session.run("python", "-m", "pytest", *session.posargs)


@nox.session
def lint(session: nox.Session) -> None:
    """ruff check (ASYNC rules on) and ruff format --check."""
    session.install("ruff==0.17.6")
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")


@nox.session
def typecheck(session: nox.Session) -> None:
    """mypy --strict over src, tests, examples and benchmarks (generated _proto excluded)."""
    session.install("-e", ".[dev]")
    session.run("mypy")


@nox.session
def proto(session: nox.Session) -> None:
    """Regenerate src/sepp_anyio/_proto with the pinned generator and ruff."""
    session.install("-e", ".[codegen]")
    session.run("python", "proto/generate.py")


@nox.session
def bench(session: nox.Session) -> None:
    """Transport and server benchmarks, printed as tables of ratios."""
    session.install("-e", ".[test]")
    session.run("python", "benchmarks/transport.py", *session.posargs)


@nox.session(python=min_versions.python_floor(min_versions.load()))
def minimum_versions(session: nox.Session) -> None:
    """The suite with every runtime requirement at its declared floor.

    That is, at the lowest version pyproject.toml allows, on the lowest Python it allows.

    The floors of ``[project] dependencies`` and of the runtime extras are read from
    pyproject.toml (tools/min_versions.py) and become pip constraints; the test tools
    and transitive dependencies take whatever those floors let pip choose.
    """
    pins = Path(session.create_tmp()) / "minimum-versions.txt"
    pins.write_text("\n".join(min_versions.constraints(min_versions.load())) + "\n")
    extras = ",".join(("test", *min_versions.RUNTIME_EXTRAS))
    session.install("-c", str(pins), "-e", f".[{extras}]")
    # Fails unless pip really installed every floor (a constraint it could not meet
    # together with the test tools would already have failed the install).
    session.run("python", str(ROOT / "tools" / "min_versions.py"), "--verify", str(pins))
    session.run("python", "-m", "pytest", *session.posargs)


@nox.session
def docs(session: nox.Session) -> None:
    """The documentation as HTML in docs/_build/html, warnings as errors, nitpicky."""
    session.install("-e", ".[docs]")
    session.run(
        "python", "-m", "sphinx", "-b", "html", "-W", "--keep-going", "-n",
        "docs", "docs/_build/html", *session.posargs,
    )  # fmt: skip
