"""Without OpenTelemetry installed nothing breaks and nothing imports it."""

from __future__ import annotations

import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent(
    """
    import importlib.abc, sys

    class HideOpenTelemetry(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name == "opentelemetry" or name.startswith("opentelemetry."):
                raise ModuleNotFoundError(f"No module named {name!r}")
            return None

    sys.meta_path.insert(0, HideOpenTelemetry())

    import anyio
    import sepp_anyio as sepp
    from sepp_anyio.testing import open_in_memory_client

    assert not any(m.startswith("opentelemetry") for m in sys.modules), "imported eagerly"

    async def main():
        async with open_in_memory_client() as (client, _):
            await client.enqueue(sepp.EnqueueRequest("q", "t"))
            worker = sepp.Worker(client, ["q"], wait=0.5)
            done = anyio.Event()

            @worker.handler("t")
            async def t(payload, ctx):
                done.set()

            async with anyio.create_task_group() as tg:
                await tg.start(worker.run)
                await done.wait()
                worker.shutdown()
            assert worker.statistics().processed == 1
            assert sepp.TraceContext.from_current() is None
            with sepp.TraceContext(
                "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
            ).attach():
                pass

    for backend in ("asyncio", "trio"):
        anyio.run(main, backend=backend)
    assert not any(m.startswith("opentelemetry") for m in sys.modules)
    print("ok")
    """
)


def test_everything_works_and_nothing_imports_opentelemetry_when_it_is_absent() -> None:
    result = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"
