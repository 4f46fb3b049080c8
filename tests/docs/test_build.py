"""The documentation builds with warnings as errors and nitpicky references (as
``nox -s docs`` builds it), and its reference names every public name."""

from __future__ import annotations

import io
import sys
import warnings
from pathlib import Path
from typing import Any

import pytest
from sphinx.application import Sphinx
from sphinx.deprecation import RemovedInSphinx11Warning

import sepp_anyio
import sepp_anyio.server
import sepp_anyio.testing
from tests.docs._blocks import DOCS, ROOT

PUBLIC = {
    "sepp_anyio": sepp_anyio,
    "sepp_anyio.server": sepp_anyio.server,
    "sepp_anyio.testing": sepp_anyio.testing,
}


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, str]:
    """(the py domain's objects, the warnings) of one build with the dummy builder (it
    reads and resolves everything as the html builder does, and writes nothing)."""
    out = tmp_path_factory.mktemp("docs")
    log = io.StringIO()
    app = Sphinx(
        srcdir=DOCS,
        confdir=DOCS,
        outdir=out / "dummy",
        doctreedir=out / "doctrees",
        buildername="dummy",
        status=None,
        warning=log,
        freshenv=True,
    )
    with warnings.catch_warnings():
        # Sphinx's own napoleon still uses an interface Sphinx deprecates (not ours to fix).
        warnings.filterwarnings("ignore", category=RemovedInSphinx11Warning)
        app.build()
    domain: Any = app.env.get_domain("py")
    return domain.objects, log.getvalue()


@pytest.mark.slow
@pytest.mark.timeout(300)  # about 20 s alone; much longer on a loaded machine
def test_the_docs_build_without_warnings(built: tuple[Any, str]) -> None:
    _, warnings = built
    assert warnings == "", warnings


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("package", sorted(PUBLIC))
def test_the_reference_documents_every_public_name(built: tuple[Any, str], package: str) -> None:
    objects, _ = built
    missing = [
        name
        for name in PUBLIC[package].__all__
        if f"{package}.{name}" not in objects and name != "__version__"
    ]
    assert missing == [], f"{package}: not in the reference: {missing}"
    if package == "sepp_anyio":
        assert "sepp_anyio.__version__" in objects


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_the_fields_of_public_dataclasses_are_documented(built: tuple[Any, str]) -> None:
    """Their ``#:`` comments are read from the defining modules, although the objects'
    ``__module__`` names the public package."""
    objects, _ = built
    assert sepp_anyio.Payload.__module__ == "sepp_anyio"
    for name in [
        "sepp_anyio.Payload.data",
        "sepp_anyio.Payload.encoding",
        "sepp_anyio.JobCtx.lease_expires_at",
        "sepp_anyio.Outcome.TIMED_OUT",
        "sepp_anyio.server.StoredJob.due_ms",
    ]:
        assert name in objects, name


def test_nox_builds_the_docs_strictly() -> None:
    noxfile = (ROOT / "noxfile.py").read_text()
    session = noxfile.split("def docs(", 1)[1].split("\n@nox.session", 1)[0]
    for flag in ('"-W"', '"--keep-going"', '"-n"'):
        assert flag in session, flag


def test_the_inventories_are_offline_files() -> None:
    sys.path.insert(0, str(DOCS))
    try:
        import conf  # type: ignore[import-not-found,unused-ignore]
    finally:
        sys.path.remove(str(DOCS))
        sys.modules.pop("conf", None)
    for name, (_url, inventory) in conf.intersphinx_mapping.items():
        path = Path(inventory)
        assert path.is_file() and path.parent == DOCS / "_inventories", name
        assert path.read_bytes().startswith(b"# Sphinx inventory version 2"), name
    assert set(conf.intersphinx_mapping) == {"python", "trio", "anyio"}


def test_the_project_urls_are_the_docs_and_the_repository() -> None:
    sys.path.insert(0, str(DOCS))
    try:
        import conf  # type: ignore[import-not-found,unused-ignore]
    finally:
        sys.path.remove(str(DOCS))
        sys.modules.pop("conf", None)
    assert {"Documentation", "Repository", "Changelog", "Homepage"} <= set(conf.URLS)
    assert conf.html_baseurl == conf.URLS["Documentation"]
    assert all("example.invalid" not in url for url in conf.URLS.values())
