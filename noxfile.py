"""Developer sessions: ``nox -s tests lint typecheck proto bench``."""

from __future__ import annotations

import nox

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
    """mypy --strict over src and tests (generated _proto excluded)."""
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
