"""Every code block of the documentation runs (or, for configuration, is read by what reads
it), so the pages cannot rot.

* ``python``: each page's blocks run in order in one fresh interpreter, in a scratch
  directory holding the page's captioned files (``tasks.py`` ...); a ``text`` block after one
  is its exact standard output; a captioned ``test_*.py`` runs under pytest.
* ``console``: every ``$`` command is one this project has: ``sepp-anyio`` command lines
  are parsed by the command's own parser, ``pip install`` extras must exist, and a file
  run or tested must be a block of the page.
* ``toml``: read by :meth:`ServerConfig.from_toml`; ``ini`` (systemd units) and ``yaml``
  (Kubernetes) are parsed, and the ``sepp-anyio`` command lines inside them parsed too.
"""

from __future__ import annotations

import argparse
import configparser
import re
import shlex
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from sepp_anyio.server import ServerConfig
from tests.docs._blocks import DOCS, ROOT, Block, blocks, literal_blocks, pages

MARK = "\x1e-- sepp docs: end of block --"
RUNNER = f"""
import runpy, sys
sys.path.insert(0, ".")
for path in sys.argv[1:]:
    runpy.run_path(path, run_name="__main__")
    print({MARK!r}, flush=True)
"""
KNOWN_LANGUAGES = {"python", "console", "toml", "ini", "yaml"}
#: Programs of other projects a console block may show (not run: they need a system).
OTHER_PROGRAMS = {"systemctl", "kubectl", "curl", "journalctl"}
PAGES = pages()
PYTHON_PAGES = [p for p in PAGES if any(b.language == "python" for b in blocks(p))]


def _id(page: Path) -> str:
    return str(page.relative_to(DOCS))


def test_the_pages_have_blocks_of_every_kind() -> None:
    languages = {b.language for page in PAGES for b in blocks(page)}
    assert languages == KNOWN_LANGUAGES, languages
    assert len(PYTHON_PAGES) >= 6, PYTHON_PAGES


@pytest.mark.parametrize("page", PAGES, ids=_id)
def test_every_block_says_its_language(page: Path) -> None:
    assert literal_blocks(page) == [], f"{page}: use '.. code-block:: LANGUAGE'"
    for block in blocks(page):
        assert block.language in KNOWN_LANGUAGES, f"{block.where}: {block.language}"


# --------------------------------------------------------------------------- python


@pytest.mark.slow
@pytest.mark.parametrize("page", PYTHON_PAGES, ids=_id)
def test_python_blocks_run(page: Path, tmp_path: Path) -> None:
    run = [b for b in blocks(page) if b.language == "python"]
    scripts: list[Path] = []
    tests: list[Path] = []
    for n, block in enumerate(run):
        name = block.caption or f"_block_{n}.py"
        assert name.endswith(".py"), f"{block.where}: a Python block's caption is its file name"
        path = tmp_path / name
        assert not path.exists(), f"{block.where}: {name} twice on one page"
        path.write_text(block.text)
        (tests if name.startswith("test_") else scripts).append(path)
    if scripts:
        result = subprocess.run(
            [sys.executable, "-c", RUNNER, *map(str, scripts)],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=50,
        )
        assert result.returncode == 0, f"{page}:\n{result.stdout}\n{result.stderr}"
        outputs = result.stdout.split(MARK + "\n")
        for block, output in zip([b for b in run if not _is_test(b)], outputs, strict=False):
            if block.output is not None:
                assert output == block.output.text, f"{block.where}: its output differs"
    for test in tests:
        result = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", test.name],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=50,
        )
        assert result.returncode == 0, f"{test.name}:\n{result.stdout}\n{result.stderr}"


def _is_test(block: Block) -> bool:
    return (block.caption or "").startswith("test_")


# --------------------------------------------------------------------------- command lines


def _parser(command: str) -> argparse.ArgumentParser:
    sys.path.insert(0, str(DOCS / "_ext"))
    try:
        import sepp_docs  # type: ignore[import-not-found,unused-ignore]
    finally:
        sys.path.remove(str(DOCS / "_ext"))
    for prog, parser in sepp_docs.cli_parsers():
        if prog == f"sepp-anyio {command}":
            found: argparse.ArgumentParser = parser
            return found
    raise AssertionError(f"no sepp-anyio command {command!r}")


def check_sepp_anyio(argv: list[str], where: str) -> None:
    """Parse a ``sepp-anyio ...`` command line with the command's own parser."""
    assert len(argv) >= 2, f"{where}: {argv}"
    try:
        _parser(argv[1]).parse_args(argv[2:])
    except SystemExit as exit:  # pragma: no cover - the failure message is the point
        raise AssertionError(f"{where}: {shlex.join(argv)} exits {exit.code}") from None
    except Exception as error:  # the CLI's own usage error
        raise AssertionError(f"{where}: {shlex.join(argv)}: {error}") from None


def _commands(block: Block) -> Iterator[list[str]]:
    for line in block.text.splitlines():
        if line.startswith("$ "):
            argv = shlex.split(line[2:], comments=True)
            # The command itself, without what the shell does with its output.
            ends = [i for i, word in enumerate(argv) if word in {">", ">>", "|", "2>", "&&"}]
            yield argv[: ends[0]] if ends else argv


def _program(word: str) -> str:
    return word.rsplit("/", 1)[-1]


EXTRAS = set(
    tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
)


def check_console_command(argv: list[str], block: Block, captions: set[str]) -> None:
    where = block.where
    program = _program(argv[0])
    if program == "sepp-anyio":
        check_sepp_anyio(argv, where)
    elif program in {"python", "python3"} and argv[1:3] == ["-m", "venv"]:
        assert len(argv) == 4, f"{where}: {argv}"
    elif program in {"python", "python3"} and argv[1:3] == ["-m", "pytest"]:
        assert set(argv[3:]) <= captions | {"-q"}, f"{where}: {argv}"
    elif program in {"python", "python3"} and argv[1:3] == ["-m", "sepp_anyio"]:
        check_sepp_anyio(["sepp-anyio", *argv[3:]], where)
    elif program in {"python", "python3"}:
        assert argv[1] in captions, f"{where}: {argv[1]} is not a block of this page"
    elif program == "pip" and argv[1] == "install":
        for requirement in argv[2:]:
            if requirement.startswith("-"):
                continue
            match = re.fullmatch(r"(?:sepp-anyio|.*/sepp-anyio)(?:\[([\w,]+)\])?", requirement)
            assert match, f"{where}: installs {requirement!r}"
            extras = set((match[1] or "").split(",")) - {""}
            assert extras <= EXTRAS, f"{where}: no extras {extras - EXTRAS}"
    elif program == "nox":
        assert argv[1] == "-s", f"{where}: {argv}"
        noxfile = (ROOT / "noxfile.py").read_text()
        for session in argv[2:]:
            assert f"def {session}(" in noxfile, f"{where}: no nox session {session}"
    elif program in OTHER_PROGRAMS:
        pass
    else:
        raise AssertionError(f"{where}: a command this test does not know: {argv}")


def _console_blocks() -> list[Block]:
    return [b for p in PAGES for b in blocks(p) if b.language == "console"]


@pytest.mark.parametrize("block", _console_blocks(), ids=lambda b: b.where)
def test_console_commands_exist(block: Block) -> None:
    captions = {b.caption for b in blocks(block.page) if b.caption}
    commands = list(_commands(block))
    assert commands, f"{block.where}: a console block shows '$ ' commands"
    for argv in commands:
        check_console_command(argv, block, captions)


# --------------------------------------------------------------------------- configuration


def _blocks_of(language: str) -> list[Block]:
    return [b for p in PAGES for b in blocks(p) if b.language == language]


@pytest.mark.parametrize("block", _blocks_of("toml"), ids=lambda b: b.where)
def test_toml_blocks_are_server_configs(block: Block) -> None:
    ServerConfig.from_toml(block.text)


def _check_embedded_command(argv: list[str], block: Block) -> None:
    if _program(argv[0]) == "sepp-anyio":
        check_sepp_anyio(["sepp-anyio", *argv[1:]], block.where)


@pytest.mark.parametrize("block", _blocks_of("ini"), ids=lambda b: b.where)
def test_ini_blocks_are_systemd_units(block: Block) -> None:
    unit = configparser.ConfigParser(strict=False, interpolation=None)
    unit.optionxform = str  # type: ignore[assignment,method-assign]
    unit.read_string(block.text)
    assert {"Unit", "Service"} <= set(unit.sections()), block.where
    _check_embedded_command(shlex.split(unit["Service"]["ExecStart"]), block)


#: Manifests that configure scaling rather than run a worker: they name its metrics.
AUTOSCALING_KINDS = {"ScaledObject", "HorizontalPodAutoscaler", "ConfigMap"}


def _worker_series() -> set[str]:
    """Every series name the worker's /metrics renders (histograms' three each)."""
    from sepp_anyio._health import Histogram, WorkerMetrics

    metrics = WorkerMetrics()
    names: set[str] = set()
    for attribute in WorkerMetrics.__slots__:
        family = getattr(metrics, attribute)
        if isinstance(family, Histogram):
            names |= {f"{family.name}_{suffix}" for suffix in ("bucket", "sum", "count")}
        elif hasattr(family, "name"):
            names.add(family.name)
    return names


def _check_autoscaling(documents: list[dict[str, object]], block: Block) -> None:
    """Scalers target the worker's Deployment, and every ``sepp_*`` metric they query is
    one the worker exports (or one a block of the page defines, a prometheus-adapter rule's
    ``as:``)."""
    for document in documents:
        assert document.get("kind") in AUTOSCALING_KINDS, f"{block.where}: {document}"
        if document["kind"] != "ConfigMap":
            target = document["spec"]["scaleTargetRef"]  # type: ignore[index]
            assert target["name"] == "sepp-worker", f"{block.where}: {target}"
    page = "\n".join(b.text for b in blocks(block.page) if b.language == "yaml")
    defined = set(re.findall(r"\bas: (sepp_\w+)", page))
    named = set(re.findall(r"\bsepp_\w+", block.text)) - defined - {"sepp_worker"}
    assert named, f"{block.where}: names no worker metric"
    assert named <= _worker_series(), f"{block.where}: no such metrics {named - _worker_series()}"


@pytest.mark.parametrize("block", _blocks_of("yaml"), ids=lambda b: b.where)
def test_yaml_blocks_are_kubernetes_manifests(block: Block) -> None:
    documents = [d for d in yaml.safe_load_all(block.text) if d]
    assert documents, block.where
    if not any(d.get("kind") == "Deployment" for d in documents):
        _check_autoscaling(documents, block)
        return
    containers = [
        c
        for d in documents
        if d.get("kind") == "Deployment"
        for c in d["spec"]["template"]["spec"]["containers"]
    ]
    assert containers, f"{block.where}: a Deployment with containers"
    for container in containers:
        _check_embedded_command([*container["command"], *container.get("args", [])], block)
