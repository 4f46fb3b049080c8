"""The console's settings: ``--ui-port`` and ``[ui]`` in the TOML, the error naming the extra
when Jinja2 is missing, the warning when it is reachable from other hosts without keys, and
the command line's server serving it (in a subprocess)."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import urllib.request

import pytest

from sepp_anyio._cli._server import _resolve, build_parser
from sepp_anyio.server import ConfigError, ServerConfig, ServerProcess
from sepp_anyio.server._console import open_console
from sepp_anyio.testing import open_in_memory_client


def test_ui_port_flag_and_toml() -> None:
    settings = _resolve(build_parser().parse_args(["--memory", "--ui-port", "8233"]), {})
    assert settings.config.ui.port == 8233
    assert ServerConfig().ui.port is None
    config = ServerConfig.from_toml("[ui]\nport = 0\npage_size = 10\n")
    assert (config.ui.port, config.ui.page_size) == (0, 10)


@pytest.mark.parametrize(
    ("toml", "key"),
    [
        ("[ui]\nport = 70000\n", "ui.port"),
        ("[ui]\npage_size = 0\n", "ui.page_size"),
        ("[ui]\npayload_preview_bytes = 1\n", "ui.payload_preview_bytes"),
        ("[ui]\nhost = '0.0.0.0'\n", "ui.host"),
    ],
)
def test_bad_ui_settings_name_the_key(toml: str, key: str) -> None:
    with pytest.raises(ConfigError) as caught:
        ServerConfig.from_toml(toml)
    assert caught.value.key == key


def test_a_missing_jinja2_is_a_usage_error_naming_the_extra() -> None:
    # A child process where importing jinja2 fails (a None entry in sys.modules makes the
    # import raise ImportError, as if the distribution were not installed).
    code = (
        "import sys; sys.modules['jinja2'] = None\n"
        "from sepp_anyio._cli._server import main\n"
        "raise SystemExit(main(['--memory', '--port', '0', '--ui-port', '0']))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 2, result.stderr
    assert "ui.port needs Jinja2" in result.stderr
    assert "pip install 'sepp-anyio[ui]'" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.anyio
@pytest.mark.parametrize(("keys", "warned"), [(None, True), (["k"], False)])
async def test_a_console_reachable_from_other_hosts_without_keys_warns(
    keys: list[str] | None, warned: bool, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, "sepp_anyio.server.console")
    auth = {} if keys is None else {"api_keys": keys}
    async with open_in_memory_client(auth=auth) as (_client, engine):
        async with open_console(engine, "0.0.0.0", 0) as server:
            assert server.port > 0
        async with open_console(engine, "127.0.0.1", 0):
            pass
    warnings = [r.message for r in caplog.records if "reachable from other hosts" in r.message]
    assert len(warnings) == (1 if warned else 0)


def test_the_command_line_server_serves_the_console() -> None:
    with ServerProcess("--memory", "--port", "0", "--ui-port", "0") as server:
        line = server.wait_for_line(r"console listening on http://127\.0\.0\.1:\d+/")
        url = line.split("console listening on ", 1)[1].strip()
        with urllib.request.urlopen(url + "api/queues", timeout=30) as response:
            assert response.status == 200
            assert json.load(response)["queues"] == []
