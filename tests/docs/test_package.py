"""The package: ``python -m build`` makes an sdist and a wheel that ``twine check`` accepts;
the wheel holds ``py.typed`` and the licence, and no tests; installed into a fresh virtual
environment, its ``sepp-anyio demo`` runs.

Offline and under a minute: the build runs without isolation (hatchling comes with the
``release`` extra), and the new environment gets only the wheel (``pip install --no-deps
--no-index``), its dependencies being read from this environment's site-packages through a
``.pth`` file. A ``.pth`` line only adds a directory to ``sys.path`` (after the new
environment's own site-packages, and without running that directory's ``.pth`` files), so
the editable install of this checkout is not visible there: the test checks that
``sepp_anyio`` is imported from the wheel.
"""

from __future__ import annotations

import subprocess
import sys
import sysconfig
import venv
import zipfile
from pathlib import Path

import pytest

import sepp_anyio
from tests.docs._blocks import ROOT

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]


def _run(*argv: str | Path, cwd: Path | None = None, timeout: float = 120) -> str:
    result = subprocess.run(
        [str(a) for a in argv], cwd=cwd, capture_output=True, text=True, timeout=timeout
    )
    assert result.returncode == 0, f"{argv}:\n{result.stdout}\n{result.stderr}"
    return result.stdout


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    _run(sys.executable, "-m", "build", "--no-isolation", "--sdist", "--wheel",
         "--outdir", out, ROOT)  # fmt: skip
    return out


def _wheel(dist: Path) -> Path:
    (wheel,) = dist.glob("sepp_anyio-*.whl")
    return wheel


def test_build_makes_an_sdist_and_a_wheel_twine_accepts(dist: Path) -> None:
    version = sepp_anyio.__version__
    assert (dist / f"sepp_anyio-{version}.tar.gz").is_file()
    assert _wheel(dist).name == f"sepp_anyio-{version}-py3-none-any.whl"
    output = _run(sys.executable, "-m", "twine", "check", "--strict", *dist.iterdir())
    assert output.count("PASSED") == 2, output


def test_the_wheel_holds_the_package_the_licence_and_no_tests(dist: Path) -> None:
    with zipfile.ZipFile(_wheel(dist)) as wheel:
        names = wheel.namelist()
        metadata = wheel.read(f"sepp_anyio-{sepp_anyio.__version__}.dist-info/METADATA")
    assert "sepp_anyio/py.typed" in names
    # The web console's templates and static files are package data.
    console = "sepp_anyio/server/_console"
    assert f"{console}/templates/queues.html" in names
    assert f"{console}/static/console.css" in names and f"{console}/static/console.js" in names
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names), names
    assert not [n for n in names if n.startswith("tests/") or "/tests/" in n]
    assert not [n for n in names if n.startswith(("docs/", "benchmarks/", "examples/"))]
    text = metadata.decode()
    assert "License-Expression: MIT" in text
    assert "Project-URL: Documentation, " in text and "Project-URL: Repository, " in text


def test_the_installed_wheel_runs_the_demo(dist: Path, tmp_path: Path) -> None:
    env = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True).create(env)
    python = env / "bin" / "python"
    site = Path(
        _run(python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))").strip()
    )
    (site / "_sepp_test_deps.pth").write_text(sysconfig.get_path("purelib") + "\n")
    _run(python, "-m", "pip", "install", "-q", "--no-deps", "--no-index", _wheel(dist))
    where = _run(python, "-c", "import sepp_anyio; print(sepp_anyio.__file__)").strip()
    assert Path(where).is_relative_to(site), where
    output = _run(env / "bin" / "sepp-anyio", "demo", "--jobs", "20", cwd=tmp_path, timeout=90)
    assert "20 jobs settled" in output, output
