"""Sphinx extension of the sepp-anyio docs: reference pages generated from the code.

* ``.. sepp-cli::`` renders every ``sepp-anyio`` command from its real ``argparse`` parser
  (usage, description, each option with its help and default), so the command-line
  reference cannot drift from the parsers.
* ``.. sepp-server-config::`` renders every key of the server's configuration from the
  dataclass declarations of ``sepp_anyio.server``'s configuration (default, allowed values, the
  ``SEPP_<SECTION>__<FIELD>`` variable, the ``#:`` comment of the field).
* ``.. sepp-worker-metrics::`` renders the worker's Prometheus metric families from the
  registry ``WorkerMetrics`` fills.
* A ``missing-reference`` handler resolves a private path that annotations carry
  (``sepp_anyio._model._job.Job``) to the public name it is re-exported as
  (``sepp_anyio.Job``), so signatures link to the documented object. Only a name exported
  under the same object from a public package is accepted; anything else stays a
  (nitpicky) warning.

Every directive fails the build when the code has something it does not cover (a command
without a parser, a configuration key without a description), so a new one cannot go
undocumented.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import importlib
import re
import sys
from collections.abc import Iterator
from typing import Any

from docutils import nodes  # type: ignore[import-untyped,unused-ignore]
from sphinx.application import Sphinx
from sphinx.environment import BuildEnvironment
from sphinx.errors import ExtensionError, PycodeError
from sphinx.pycode import ModuleAnalyzer
from sphinx.util.docutils import SphinxDirective

PUBLIC_PACKAGES = ("sepp_anyio", "sepp_anyio.server", "sepp_anyio.testing")


# --------------------------------------------------------------------------- the CLI

#: Each command's parser builder, as (module, function, prog). ``sepp-anyio`` itself first.
CLI_PARSERS: dict[str, tuple[str, str]] = {
    "sepp-anyio": ("sepp_anyio._cli", "build_parser"),
    "demo": ("sepp_anyio._cli._demo", "build_parser"),
    "worker": ("sepp_anyio._cli._worker", "build_parser"),
    "cron": ("sepp_anyio._cli._cron", "build_parser"),
    "enqueue": ("sepp_anyio._cli._producer", "enqueue_parser"),
    "info": ("sepp_anyio._cli._producer", "info_parser"),
    "dlq": ("sepp_anyio._cli._producer", "dlq_parser"),
    "server": ("sepp_anyio._cli._server", "build_parser"),
}


def cli_parsers() -> Iterator[tuple[str, argparse.ArgumentParser]]:
    """(prog, parser) for every command, in the order of ``sepp-anyio --help``."""
    from sepp_anyio._cli import _COMMANDS, PROG

    missing = set(_COMMANDS) - set(CLI_PARSERS)
    if missing:
        raise ExtensionError(f"sepp-cli: no parser known for commands {sorted(missing)}")
    module, function = CLI_PARSERS[PROG]
    yield PROG, getattr(importlib.import_module(module), function)()
    for name in _COMMANDS:
        module, function = CLI_PARSERS[name]
        prog = f"{PROG} {name}"
        yield prog, getattr(importlib.import_module(module), function)(prog)


def _help(action: argparse.Action, prog: str) -> str:
    text = action.help or ""
    if "%(" in text:
        params = {**vars(action), "prog": prog}
        if action.choices is not None:
            params["choices"] = ", ".join(map(str, action.choices))
        text = text % params
    return text


def _option_names(action: argparse.Action) -> str:
    if not action.option_strings:
        return action.metavar or action.dest  # type: ignore[return-value]
    if action.nargs == 0:
        return ", ".join(action.option_strings)
    metavar = action.metavar or action.dest.upper()
    if isinstance(metavar, tuple):
        metavar = " ".join(metavar)
    if action.nargs == "?":
        metavar = f"[{metavar}]"
    return ", ".join(f"{option} {metavar}" for option in action.option_strings)


def _indent(text: str, by: str = "   ") -> str:
    return "\n".join(by + line if line else line for line in text.splitlines())


def render_parser(prog: str, parser: argparse.ArgumentParser, level: str) -> list[str]:
    """reStructuredText for one parser and, recursively, its subcommands."""
    lines = [prog, level * len(prog), ""]
    lines += [".. code-block:: text", "", _indent(parser.format_usage().strip()), ""]
    if parser.description:
        formatter: Any = parser.formatter_class
        if isinstance(formatter, type) and issubclass(
            formatter, argparse.RawDescriptionHelpFormatter
        ):
            lines += [".. code-block:: text", "", _indent(parser.description), ""]
        else:
            lines += [_rst_escape(parser.description), ""]
    lines += [f".. program:: {prog}", ""]
    subparsers: list[tuple[str, argparse.ArgumentParser]] = []
    for group in parser._action_groups:
        actions = [a for a in group._group_actions if a.help != argparse.SUPPRESS]
        rows: list[str] = []
        for action in actions:
            if isinstance(action.choices, dict) and all(
                isinstance(p, argparse.ArgumentParser) for p in action.choices.values()
            ):
                if prog == "sepp-anyio":
                    continue  # the commands have their own sections below
                subparsers += [(f"{prog} {n}", p) for n, p in action.choices.items()]
                continue
            rows += [f".. option:: {_option_names(action)}", ""]
            help_text = _help(action, prog)
            if action.choices is not None and "%(choices)" not in (action.help or ""):
                help_text += f" (one of: {', '.join(f'``{c}``' for c in action.choices)})"
            if action.required and action.option_strings:
                help_text += " (required)"
            rows += [_indent(_rst_escape(help_text) or "(no description)"), ""]
        if rows:
            lines += [f"**{group.title}**", "", *rows]
    if parser.epilog:
        lines += [".. code-block:: text", "", _indent(parser.epilog), ""]
    for sub_prog, sub in subparsers:
        lines += render_parser(sub_prog, sub, "^")
    return lines


def _rst_escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace("*", "\\*").replace("`", "\\`").replace("|", "\\|")


class CliDirective(SphinxDirective):
    """``.. sepp-cli::``: every command's options, from its parser."""

    def run(self) -> list[nodes.Node]:
        lines: list[str] = []
        for prog, parser in cli_parsers():
            lines += render_parser(prog, parser, "-")
        return self.parse_text_to_nodes("\n".join(lines), allow_section_headings=True)


# --------------------------------------------------------------------------- server config

#: Descriptions of the keys whose declaration carries no ``#:`` comment (protocol §3.12).
CONFIG_DESCRIPTIONS: dict[str, str] = {
    "auth.api_keys": "Accepted API keys: strings, or tables ``{name = ..., key = ...}``. "
    "Absent: no authentication; an empty list refuses every call.",
    "limits.max_lease_duration_ms": "Longest lease; longer requests (reserve, extend) are "
    "clamped to it.",
    "limits.default_max_attempts": "Deliveries before a job is dead-lettered, for jobs that "
    "give none.",
    "limits.max_attempts_ceiling": "Largest ``max_attempts`` a job may ask for (clamped).",
    "limits.default_priority": "Priority of jobs that give none (0-9, higher first).",
    "limits.max_reserve_batch": "Most jobs per reserve (and records per dead-letter drain); "
    "larger requests are clamped.",
    "limits.max_reserve_queues": "Most queues one reserve may name (INVALID_ARGUMENT above).",
    "limits.max_wait_timeout_ms": "Longest long-poll wait of a reserve (clamped).",
    "limits.max_enqueue_batch": "Most jobs per enqueue batch (INVALID_ARGUMENT above).",
    "limits.max_payload_bytes": "Largest payload (``PayloadTooLarge``).",
    "limits.max_custom_entries": "Most entries of a job's custom map (``CustomEntriesTooMany``).",
    "limits.max_custom_total_bytes": "Largest custom map in all (``CustomMapTooLarge``).",
    "limits.max_custom_key_bytes": "Longest custom key (``CustomKeyTooLong``).",
    "limits.max_queue_name_bytes": "Longest queue name (``QueueNameTooLong``).",
    "limits.max_job_type_bytes": "Longest job type (``JobTypeNameTooLong``).",
    "limits.max_idempotency_key_bytes": "Longest idempotency key (``IdempotencyKeyTooLong``).",
    "limits.max_schedule_horizon_ms": "Furthest a job may be scheduled ahead "
    "(``ScheduledTooFar``); also caps nack delays.",
    "limits.retry_delay_ms": "Base delay of the queue's retry policy "
    "(``RetryDirective.default()``).",
    "limits.retry_backoff": "``none`` (the same delay each time) or ``exponential`` "
    "(doubling per attempt).",
    "limits.retry_delay_max_ms": "Cap of the retry policy's delay.",
    "storage.dedup_window_ms": "How long an idempotency key is remembered.",
    "storage.command_queue_capacity": "Accepted for compatibility with the Rust server's "
    "``sepp.toml``; no effect here.",
    "storage.cache_size_bytes": "Accepted for compatibility; no effect here.",
    "storage.max_journaling_size_bytes": "Accepted for compatibility; no effect here.",
    "storage.max_cached_files": "Accepted for compatibility; no effect here.",
    "storage.worker_threads": "Accepted for compatibility; no effect here.",
    "queues.name": "The queue's name (required).",
    "queues.*": "Overrides ``limits.{field}`` (or ``storage.{field}``) for this queue; "
    "unset: the global value.",
}


@dataclasses.dataclass(frozen=True)
class ConfigKey:
    section: str
    name: str
    default: str
    allowed: str
    env: str
    description: str


def _describe_value(f: dataclasses.Field[Any]) -> tuple[str, str]:
    default: Any = f.default
    if default is dataclasses.MISSING:
        shown = "(required)"
    elif default is None:
        shown = "unset"
    elif isinstance(default, bool):
        shown = f"``{str(default).lower()}``"  # as TOML writes it
    elif isinstance(default, str):
        shown = f'``"{default}"``'
    else:
        shown = f"``{default}``"
    kind = f.metadata.get("kind", "")
    if kind == "int":
        lo, hi = f.metadata["lo"], f.metadata["hi"]
        allowed = f"integer >= {lo}" if hi >= 2**62 else f"integer {lo}-{hi}"
    elif kind == "choice":
        allowed = " / ".join(f"``{c}``" for c in f.metadata["choices"])
    elif kind == "str_list":
        allowed = "list of strings"
    else:
        allowed = {"bool": "boolean", "str": "string"}.get(kind, kind)
    return shown, allowed


#: The modules that declare the configuration's dataclasses.
CONFIG_MODULES = ("sepp_anyio.server._config._sections", "sepp_anyio.server._config._config")


def config_keys() -> list[ConfigKey]:
    """Every configuration key, in file order, with its documentation."""
    from sepp_anyio import server as _config

    # The section classes are declared in ``_sections`` (their ``__module__`` says
    # ``sepp_anyio.server``, where they are exported): read the ``#:`` comments of both.
    docs: dict[tuple[str, str], list[str]] = {}
    for module in CONFIG_MODULES:
        docs.update(ModuleAnalyzer.for_module(module).find_attr_docs())
    sections: list[tuple[str, type[Any]]] = [
        (f.name, f.default_factory)  # type: ignore[misc]
        for f in dataclasses.fields(_config.ServerConfig)
        if f.init and f.default_factory is not dataclasses.MISSING
    ]
    sections.append(("queues", _config.QueueConfig))
    keys: list[ConfigKey] = []
    used: set[str] = set()
    for section, cls in sections:
        for f in dataclasses.fields(cls):
            if not f.init:
                continue
            dotted = f"{section}.{f.name}"
            comment = " ".join(docs.get((cls.__name__, f.name), [])).strip()
            if dotted in CONFIG_DESCRIPTIONS:
                used.add(dotted)
                description = CONFIG_DESCRIPTIONS[dotted]
            elif section == "queues":
                used.add("queues.*")
                target = "storage" if f.name == "dedup_window_ms" else "limits"
                description = CONFIG_DESCRIPTIONS["queues.*"].replace(
                    "``limits.{field}`` (or ``storage.{field}``)", f"``{target}.{f.name}``"
                )
            else:
                description = ""
            if comment:
                description = f"{comment} {description}".strip() if section == "queues" else comment
            if not description:
                raise ExtensionError(
                    f"sepp-server-config: {dotted} has no '#:' comment in its dataclass and no "
                    "entry in CONFIG_DESCRIPTIONS"
                )
            default, allowed = _describe_value(f)
            if section == "auth":
                default, allowed = "unset (no authentication)", "list of keys"
            env = (
                "``SEPP_QUEUES`` (the whole array, as TOML)"
                if section == "queues"
                else f"``SEPP_{section.upper()}__{f.name.upper()}``"
            )
            keys.append(ConfigKey(section, f.name, default, allowed, env, description))
    stale = set(CONFIG_DESCRIPTIONS) - used
    if stale:
        raise ExtensionError(f"sepp-server-config: descriptions of unknown keys {sorted(stale)}")
    return keys


class ServerConfigDirective(SphinxDirective):
    """``.. sepp-server-config::``: one table per section of ``sepp.toml``."""

    def run(self) -> list[nodes.Node]:
        lines: list[str] = []
        keys = config_keys()
        for section in dict.fromkeys(k.section for k in keys):
            title = "[[queues]]" if section == "queues" else f"[{section}]"
            lines += [f"``{title}``", "~" * (len(title) + 4), ""]
            lines += [".. list-table::", "   :header-rows: 1", "   :widths: 20 12 14 22 32", ""]
            lines += ["   * - key", "     - default", "     - values", "     - environment",
                      "     - meaning"]  # fmt: skip
            for k in keys:
                if k.section != section:
                    continue
                lines += [f"   * - ``{k.name}``", f"     - {k.default}", f"     - {k.allowed}",
                          f"     - {k.env}", f"     - {k.description}"]  # fmt: skip
            lines.append("")
        return self.parse_text_to_nodes("\n".join(lines), allow_section_headings=True)


# --------------------------------------------------------------------------- metrics


def worker_metric_families() -> list[tuple[str, str, tuple[str, ...], str]]:
    """(name, type, label names, help) of every family ``WorkerMetrics`` registers."""
    from sepp_anyio._health import Counter, Gauge, Histogram, WorkerMetrics

    metrics = WorkerMetrics()
    out = []
    for attribute in WorkerMetrics.__slots__:
        family = getattr(metrics, attribute)
        for cls, kind in ((Counter, "counter"), (Gauge, "gauge"), (Histogram, "histogram")):
            if isinstance(family, cls):
                out.append((family.name, kind, family.labelnames, family.help))
    return out


class WorkerMetricsDirective(SphinxDirective):
    """``.. sepp-worker-metrics::``: the ``/metrics`` families."""

    def run(self) -> list[nodes.Node]:
        lines = [".. list-table::", "   :header-rows: 1", "", "   * - name", "     - type",
                 "     - labels", "     - meaning"]  # fmt: skip
        for name, kind, labels, help_text in worker_metric_families():
            shown = ", ".join(f"``{label}``" for label in labels)
            lines += [f"   * - ``{name}``", f"     - {kind}", f"     - {shown}",
                      f"     - {help_text}"]  # fmt: skip
        return self.parse_text_to_nodes("\n".join(lines))


# --------------------------------------------------------------------------- references


def public_name(target: str) -> str | None:
    """The documented public path of the object a private ``target`` path names, if any."""
    parts = target.split(".")
    if parts[0] != "sepp_anyio" or not any(p.startswith("_") for p in parts[1:-1] if p):
        return None
    # The longest importable module prefix, then attributes.
    for cut in range(len(parts) - 1, 0, -1):
        try:
            obj: Any = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        rest = parts[cut:]
        break
    else:
        return None
    try:
        head = getattr(obj, rest[0])
    except AttributeError:
        return None
    for package in PUBLIC_PACKAGES:
        module = importlib.import_module(package)
        if rest[0] in getattr(module, "__all__", ()) and getattr(module, rest[0]) is head:
            return ".".join([package, *rest])
    return None


#: Names that string annotations leave unqualified (``from datetime import datetime``).
EXTERNAL_ALIASES = {"datetime": "datetime.datetime", "timedelta": "datetime.timedelta"}


def _resolve_private(
    app: Sphinx, env: BuildEnvironment, node: Any, contnode: nodes.Element
) -> nodes.Element | None:
    if node.get("refdomain") != "py":
        return None
    if node["reftarget"] in EXTERNAL_ALIASES:
        from sphinx.ext import intersphinx

        node["reftarget"] = EXTERNAL_ALIASES[node["reftarget"]]
        return intersphinx.missing_reference(app, env, node, contnode)
    domain: Any = env.get_domain("py")
    target = public_name(node["reftarget"])
    if target is None and "." not in node["reftarget"] and node.get("py:class"):
        # ``:attr:`code``` in a subclass's docstring: the attribute its public base documents.
        return _resolve_inherited(app, env, domain, node, contnode)
    if target is None:
        return None
    result: nodes.Element | None = domain.resolve_xref(
        env, node["refdoc"], app.builder, node["reftype"], target, node, contnode
    )
    if result is None:  # an attribute documented as data, a method as a function...
        result = domain.resolve_xref(
            env, node["refdoc"], app.builder, "obj", target, node, contnode
        )
    return result


def _resolve_inherited(
    app: Sphinx, env: BuildEnvironment, domain: Any, node: Any, contnode: nodes.Element
) -> nodes.Element | None:
    module = node.get("py:module") or ""
    owner = public_name(f"{module}.{node['py:class']}") or f"{module}.{node['py:class']}"
    package, _, name = owner.rpartition(".")
    try:
        cls = getattr(importlib.import_module(package), name)
    except (ImportError, AttributeError):
        return None
    for base in getattr(cls, "__mro__", ())[1:]:
        where = public_name(f"{base.__module__}.{base.__qualname__}")
        if where is None:
            continue
        result: nodes.Element | None = domain.resolve_xref(
            env, node["refdoc"], app.builder, node["reftype"], f"{where}.{node['reftarget']}",
            node, contnode,
        )  # fmt: skip
        if result is not None:
            return result
    return None


_TYPE_LIKE = re.compile(r"[\w.\[\]|~, ]+")


def _plain_attribute_docstrings(
    app: Sphinx, what: str, name: str, obj: Any, options: Any, lines: list[str]
) -> None:
    """Undo napoleon reading "Order within a queue: ..." as the attribute's type.

    Napoleon takes the text before the first colon of an attribute's or property's
    docstring as its type (Google style allows ``int: The count.``) and moves it to a
    ``:type:`` field. This project's docstrings write a sentence there instead: such a
    "type" that is not one is put back in front of the description.
    """
    if what not in {"attribute", "property", "data"}:
        return
    for i, line in enumerate(lines):
        if not line.startswith(":type: "):
            continue
        text = line[len(":type: ") :]
        if " " in text.replace(" | ", "|").replace(", ", ",") or not _TYPE_LIKE.fullmatch(text):
            del lines[i]
            if i > 0 and not lines[i - 1]:
                del lines[i - 1]
            first = next((j for j, value in enumerate(lines) if value.strip()), None)
            if first is None:
                lines.insert(0, text)
            else:
                stripped = lines[first].lstrip()
                lines[first] = (
                    f"{lines[first][: len(lines[first]) - len(stripped)]}{text}: {stripped}"
                )
        return


def _dataclass_factories(
    app: Sphinx, what: str, name: str, obj: Any, options: Any, signature: str | None,
    return_annotation: str | None,
) -> tuple[str | None, str | None] | None:  # fmt: skip
    """Show a dataclass field's ``default_factory`` as ``dict()`` instead of ``<factory>``.

    ``<factory>`` is not Python, and Sphinx then cannot parse the whole signature (it
    falls back to splitting at every comma, generic parameters included).
    """
    if signature is None or "<factory>" not in signature or not dataclasses.is_dataclass(obj):
        return None
    for f in dataclasses.fields(obj):
        factory = f.default_factory
        if f.init and factory is not dataclasses.MISSING:
            shown = f"{getattr(factory, '__qualname__', 'factory')}()"
            signature = signature.replace("<factory>", shown, 1)
    return signature, return_annotation


# --------------------------------------------------------------------------- defining modules


def defining_module(obj: object, package: str) -> str | None:
    """The private module of ``package`` whose source defines ``obj`` (a class or a
    function), whatever its ``__module__`` says; None if none does."""
    qualname = getattr(obj, "__qualname__", None)
    if not isinstance(qualname, str):
        return None
    for modname in sorted(sys.modules):
        parts = modname.split(".")
        if parts[0] != package.split(".")[0] or not any(p.startswith("_") for p in parts[1:]):
            continue
        if getattr(sys.modules[modname], qualname.split(".")[0], None) is not obj:
            continue
        try:
            tags = ModuleAnalyzer.for_module(modname).find_tags()
        except PycodeError:
            continue
        if qualname in tags:
            return modname
    return None


#: The objects whose ``__module__`` a build changed, with the name to give back.
_RENAMED: list[tuple[Any, str]] = []


def restore_defining_modules(app: Sphinx) -> None:
    """Give each public object back the ``__module__`` of the module that defines it, for
    the build (:func:`rename_public_modules` undoes it when the build ends).

    The packages rename their public objects' ``__module__`` to the package itself
    (``sepp_anyio.Payload``, for reprs and pickles), but autodoc reads a class's ``#:``
    attribute comments from the source of its ``__module__``: without this, no field of a
    dataclass would be documented. The signatures then name the private paths, which
    :func:`public_name` resolves to the documented public ones.
    """
    for package in PUBLIC_PACKAGES:
        module = importlib.import_module(package)
        for name in getattr(module, "__all__", ()):
            obj = getattr(module, name)
            if getattr(obj, "__module__", None) != package:
                continue
            real = defining_module(obj, package)
            if real is not None:
                with contextlib.suppress(AttributeError, TypeError):
                    obj.__module__ = real
                    _RENAMED.append((obj, package))


def rename_public_modules(app: Sphinx, exception: BaseException | None) -> None:
    """Put the public ``__module__`` back (a build inside a test process leaves the
    objects as it found them)."""
    while _RENAMED:
        obj, package = _RENAMED.pop()
        obj.__module__ = package


def _public_bases(app: Sphinx, name: str, obj: Any, options: Any, bases: list[Any]) -> None:
    """Leave out the private base classes a public class is assembled from (the worker's
    reserve loops and job runner): they are not documented, and what they give the class
    is not API of its own."""
    bases[:] = [
        base
        for base in bases
        if not (
            getattr(base, "__module__", "").startswith("sepp_anyio.")
            and public_name(f"{base.__module__}.{base.__qualname__}") is None
        )
    ]


def setup(app: Sphinx) -> dict[str, Any]:
    app.connect("autodoc-process-bases", _public_bases)
    app.connect("builder-inited", restore_defining_modules)
    app.connect("build-finished", rename_public_modules)
    app.connect("autodoc-process-signature", _dataclass_factories)
    # After napoleon (priority 500), whose output it corrects.
    app.connect("autodoc-process-docstring", _plain_attribute_docstrings, priority=600)
    app.add_directive("sepp-cli", CliDirective)
    app.add_directive("sepp-server-config", ServerConfigDirective)
    app.add_directive("sepp-worker-metrics", WorkerMetricsDirective)
    app.connect("missing-reference", _resolve_private)
    return {"parallel_read_safe": True, "parallel_write_safe": True, "version": "1"}


__all__ = [
    "cli_parsers",
    "config_keys",
    "defining_module",
    "public_name",
    "rename_public_modules",
    "restore_defining_modules",
    "setup",
    "worker_metric_families",
]
