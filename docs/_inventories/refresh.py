"""Refresh the intersphinx inventories checked in beside this file.

The documentation build reads ``python.inv``, ``trio.inv`` and ``anyio.inv`` from this
folder (``docs/conf.py``), so it needs no network. This script replaces them::

    python docs/_inventories/refresh.py                # download each site's objects.inv
    python docs/_inventories/refresh.py --from-source  # no access to the docs sites

``--from-source`` makes the same files without the docs sites: Python's from a local copy of
its HTML documentation (Debian's ``python3.X-doc`` package installs one; ``--python-docs``
names another), trio's and anyio's by building their documentation with Sphinx from the
source distribution (from PyPI) of the version installed here, each in a scratch virtual
environment with that project's own documentation requirements. Their pages keep the names
of the published site, so the links point at the same places.

Every inventory is read back before it replaces the old one; ``SOURCES.txt`` records where
each came from.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import subprocess
import sys
import tarfile
import tempfile
import tomllib
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent

#: name -> (the published documentation it links to, its distribution on PyPI)
SITES = {
    "python": ("https://docs.python.org/3/", None),
    "trio": ("https://trio.readthedocs.io/en/stable/", "trio"),
    "anyio": ("https://anyio.readthedocs.io/en/stable/", "anyio"),
}


def _check(data: bytes, name: str) -> int:
    """The number of objects in the inventory ``data`` (fails if it cannot be read)."""
    from sphinx.util.inventory import InventoryFile

    inventory = InventoryFile.loads(data, uri=SITES[name][0])
    count = sum(len(objects) for objects in inventory.data.values())
    if count < 100:
        raise SystemExit(f"{name}: only {count} objects in the inventory; refusing it")
    return count


def _download(name: str) -> bytes:
    url = SITES[name][0] + "objects.inv"
    with urllib.request.urlopen(url, timeout=30) as response:
        data: bytes = response.read()
    return data


def _python_from_local(docs: Path) -> bytes:
    return (docs / "objects.inv").read_bytes()


def _run(*argv: str | Path, cwd: Path | None = None) -> None:
    subprocess.run([str(a) for a in argv], check=True, cwd=cwd)


def _offline_intersphinx(conf: Path) -> None:
    """Point the scratch copy's intersphinx at the inventories here, and drop the others.

    Offline, a fetch fails, and trio's ``conf.py`` reads Python's inventory at build time
    (it fails without one).
    """
    local = {name: str(HERE / f"{name}.inv") for name in SITES if (HERE / f"{name}.inv").exists()}
    conf.write_text(
        conf.read_text()
        + "\n\n# Added by sepp-anyio's docs/_inventories/refresh.py (offline build).\n"
        + f"_LOCAL = {local!r}\n"
        + "intersphinx_mapping = {k: (v[0], _LOCAL[k]) for k, v in intersphinx_mapping.items()"
        + " if k in _LOCAL}\n"
    )


def _build_from_sdist(name: str, scratch: Path) -> bytes:
    """Build ``name``'s documentation from its sdist (the installed version) with Sphinx."""
    distribution = SITES[name][1]
    assert distribution is not None
    version = importlib.metadata.version(distribution)
    where = scratch / name
    where.mkdir()
    _run(sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--no-binary", ":all:",
         "-d", where, f"{distribution}=={version}")  # fmt: skip
    (archive,) = where.glob("*.tar.gz")
    with tarfile.open(archive) as tar:
        tar.extractall(where, filter="data")
    source = where / f"{distribution}-{version}"
    venv = where / "venv"
    _run(sys.executable, "-m", "venv", venv)
    pip = [venv / "bin" / "python", "-m", "pip", "install", "-q"]
    if (source / "docs-requirements.txt").exists():  # trio: a locked requirements file
        locked = source / "docs-requirements.txt"
        try:
            _run(*pip, "-r", locked, source)
        except subprocess.CalledProcessError:
            # A pin the index no longer (or not yet) has: the same names, unpinned.
            loose = where / "docs-requirements-unpinned.txt"
            names = [line.split("==")[0].split(";")[0].strip() for line in
                     locked.read_text().splitlines() if line and line[0].isalpha()]  # fmt: skip
            loose.write_text("\n".join(names) + "\n")
            _run(*pip, "-r", loose, source)
        docs = source / "docs" / "source"
    else:  # anyio: a "doc" dependency group in pyproject.toml
        groups = tomllib.loads((source / "pyproject.toml").read_text())["dependency-groups"]
        _run(*pip, *groups["doc"], f"{source}[trio]")
        docs = source / "docs"
    out = where / "html"
    _offline_intersphinx(docs / "conf.py")
    # Not -W: links to projects we have no inventory of stay unresolved, which costs only
    # links we do not use.
    _run(venv / "bin" / "python", "-m", "sphinx", "-b", "html", "-q", docs, out, cwd=docs)
    return (out / "objects.inv").read_bytes()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--from-source", action="store_true", help="build without the sites")
    parser.add_argument(
        "--python-docs",
        type=Path,
        default=Path(f"/usr/share/doc/python{sys.version_info[0]}.{sys.version_info[1]}/html"),
        help="Python's HTML documentation (with --from-source; default: %(default)s)",
    )
    parser.add_argument("names", nargs="*", help=f"some of {', '.join(SITES)} (default: all)")
    args = parser.parse_args()
    names = args.names or list(SITES)
    if unknown := set(names) - set(SITES):
        parser.error(f"unknown inventories: {', '.join(sorted(unknown))}")
    record = HERE / "SOURCES.txt"
    old = record.read_text().splitlines() if record.exists() else []
    sources = dict(line.split(": ", 1) for line in old if ": " in line)
    with tempfile.TemporaryDirectory() as scratch:
        for name in names:
            if not args.from_source:
                data, origin = _download(name), SITES[name][0] + "objects.inv"
            elif name == "python":
                data, origin = (
                    _python_from_local(args.python_docs),
                    f"{args.python_docs}/objects.inv",
                )
            else:
                distribution = SITES[name][1]
                assert distribution is not None
                version = importlib.metadata.version(distribution)
                data = _build_from_sdist(name, Path(scratch))
                origin = f"built with Sphinx from the {distribution} {version} sdist"
            count = _check(data, name)
            (HERE / f"{name}.inv").write_bytes(data)
            sources[name] = f"{origin} ({count} objects)"
            print(f"{name}.inv: {sources[name]}")
    lines = [f"{key}: {sources[key]}" for key in SITES if key in sources]
    record.write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
