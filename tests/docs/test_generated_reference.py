"""The generated reference pages cover everything their sources declare, and refuse what
they do not know (so that a new command or configuration key cannot go undocumented)."""

from __future__ import annotations

import dataclasses
import re
import sys
from collections.abc import Iterator
from types import ModuleType

import pytest
from sphinx.errors import ExtensionError

from sepp_anyio._cli import _COMMANDS
from sepp_anyio.server import LimitsConfig, ServerConfig
from tests.docs._blocks import DOCS


@pytest.fixture(scope="module")
def ext() -> Iterator[ModuleType]:
    sys.path.insert(0, str(DOCS / "_ext"))
    try:
        import sepp_docs  # type: ignore[import-not-found,unused-ignore]

        yield sepp_docs
    finally:
        sys.path.remove(str(DOCS / "_ext"))


def test_every_command_is_rendered_with_its_options(ext: ModuleType) -> None:
    progs = [prog for prog, _ in ext.cli_parsers()]
    assert progs == ["sepp-anyio", *(f"sepp-anyio {name}" for name in _COMMANDS)]
    text = "\n".join(
        line for prog, parser in ext.cli_parsers() for line in ext.render_parser(prog, parser, "-")
    )
    for option in ("--concurrency", "--drain-timeout", "--dead-letter-retention", "--requeue"):
        assert f".. option:: {option}" in text or f", {option}" in text, option


def test_a_command_without_a_parser_fails_the_build(
    ext: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(_COMMANDS, "nightly", (lambda argv: 0, "a new command"))
    with pytest.raises(ExtensionError, match="nightly"):
        list(ext.cli_parsers())


def test_every_config_key_has_default_env_and_meaning(ext: ModuleType) -> None:
    keys = ext.config_keys()
    dotted = {f"{k.section}.{k.name}" for k in keys}
    for section in ("server", "limits", "storage"):
        cls = type(getattr(ServerConfig(), section))
        for f in dataclasses.fields(cls):
            assert f"{section}.{f.name}" in dotted
    assert "auth.api_keys" in dotted and "queues.name" in dotted
    for key in keys:
        assert key.description and key.default and key.env, key
    limits = {k.name: k for k in keys if k.section == "limits"}
    assert limits["max_payload_bytes"].default == "``1048576``"
    assert limits["max_payload_bytes"].env == "``SEPP_LIMITS__MAX_PAYLOAD_BYTES``"


def test_a_config_key_without_a_description_fails_the_build(
    ext: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delitem(ext.CONFIG_DESCRIPTIONS, "limits.max_reserve_batch")
    with pytest.raises(ExtensionError, match=re.escape("limits.max_reserve_batch")):
        ext.config_keys()
    assert LimitsConfig().max_reserve_batch == 256


def test_the_metric_families_are_the_contracts(ext: ModuleType) -> None:
    names = {name for name, *_ in ext.worker_metric_families()}
    assert names == {
        "sepp_jobs_total",
        "sepp_jobs_in_flight",
        "sepp_job_duration_seconds",
        "sepp_reserve_errors_total",
        "sepp_lease_extensions_total",
        "sepp_settle_failures_total",
        "sepp_job_queue_wait_seconds",
        "sepp_worker_saturation",
        "sepp_worker_idle_reserves_total",
    }


def test_the_telemetry_page_names_every_outcome_label() -> None:
    from sepp_anyio._health._worker_metrics import OUTCOMES

    text = (DOCS / "reference" / "telemetry.rst").read_text()
    prometheus = text[text.index("Prometheus (``/metrics``)") :]
    for label in OUTCOMES.values():
        assert f"``{label}``" in prometheus, label


def test_private_paths_resolve_to_public_names(ext: ModuleType) -> None:
    assert ext.public_name("sepp_anyio._model._job.Job") == "sepp_anyio.Job"
    assert ext.public_name("sepp_anyio._worker.Worker.run") == "sepp_anyio.Worker.run"
    assert ext.public_name("sepp_anyio._worker._facade.Worker.run") == "sepp_anyio.Worker.run"
    # The worker's private bases, which the docs leave out of "Bases:".
    assert ext.public_name("sepp_anyio._worker._reserving.ReserveLoops") is None
    assert ext.public_name("sepp_anyio.server._engine._engine.Engine") == "sepp_anyio.server.Engine"
    assert ext.public_name("sepp_anyio._client._connect._Connector") is None  # not exported
    assert ext.public_name("sepp_anyio.Job") is None  # already public
