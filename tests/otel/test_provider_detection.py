"""The OpenTelemetry hooks notice an SDK provider however it is installed.

Each case runs in a fresh interpreter: OpenTelemetry allows setting the
global providers once per process.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

_CHECK = """
from sepp_anyio import _otel
api = _otel._api()
before = (_otel._tracing(api), _otel.metrics().enabled)
{install}
print(before, (_otel._tracing(api), _otel.metrics().enabled))
"""

_BY_CODE = """
from opentelemetry import metrics, trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.trace import TracerProvider
trace.set_tracer_provider(TracerProvider())
metrics.set_meter_provider(MeterProvider())
"""


def _run(install: str, **env: str) -> str:
    environment = {key: value for key, value in os.environ.items() if not key.startswith("OTEL_")}
    environment.update(env)
    out = subprocess.run(
        [sys.executable, "-c", _CHECK.format(install=install)],
        capture_output=True,
        text=True,
        env=environment,
        check=True,
        timeout=60,
    )
    return out.stdout.strip()


@pytest.mark.parametrize(
    ("install", "env", "expected"),
    [
        ("", {}, "(False, False) (False, False)"),
        (_BY_CODE, {}, "(False, False) (True, True)"),
        (
            "",
            {
                "OTEL_PYTHON_TRACER_PROVIDER": "sdk_tracer_provider",
                "OTEL_PYTHON_METER_PROVIDER": "sdk_meter_provider",
            },
            "(True, True) (True, True)",
        ),
    ],
    ids=["nothing", "set-in-code-later", "environment"],
)
def test_sdk_providers_are_detected(install: str, env: dict[str, str], expected: str) -> None:
    assert _run(install, **env) == expected
