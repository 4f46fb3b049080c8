"""The client stands on our own HTTP/2 core: nothing of sepp_anyio imports h2 or hyperframe.

Checked in a fresh interpreter that records, for every import of an ``h2`` or
``hyperframe`` module, which module asked for it. ``import sepp_anyio``, then a client
connected to a reference server (in this process: the server is another program, here
a thread) making calls, on each backend.

What remains is outside the package: the generated stubs import ``betterproto2.grpclib``,
whose ``__init__`` imports its grpclib *server* support and so ``grpclib.server``, which
imports h2. The test asserts that every import of h2/hyperframe comes from grpclib, and
that none comes from sepp_anyio.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from collections.abc import Iterator

import pytest

from sepp_anyio.server import ServerThread

# Runs in the child: a meta-path finder that only watches (it never finds anything) and
# notes the module on whose behalf each h2/hyperframe module is imported.
_CHILD = textwrap.dedent(
    """
    import json, sys

    WATCHED = ("h2", "hyperframe")
    OWN = WATCHED + ("hpack", "importlib")
    importers = {}

    class Watch:
        @staticmethod
        def find_spec(name, path=None, target=None):
            if name.split(".")[0] in WATCHED:
                frame = sys._getframe(1)
                while frame is not None:
                    module = frame.f_globals.get("__name__", "")
                    if not frame.f_code.co_filename.startswith("<frozen") and (
                        module.split(".")[0] not in OWN
                    ):
                        break
                    frame = frame.f_back
                importers.setdefault(name, module if frame is not None else "?")
            return None

    sys.meta_path.insert(0, Watch())

    import sepp_anyio

    on_import = sorted(set(importers.values()))
    loaded_on_import = sorted(m for m in sys.modules if m.split(".")[0] in WATCHED)

    import anyio

    async def main(address):
        async with sepp_anyio.connect(address) as client:
            for _ in range(3):
                await client.server_info()
            queue = "no-h2"
            await client.enqueue(sepp_anyio.EnqueueRequest(queue=queue, job_type="t"))
            (job,) = await client.reserve([queue], lease=5.0, wait=1.0)
            await client.ack(job.ctx)

    anyio.run(main, sys.argv[1], backend=sys.argv[2])
    print(json.dumps({
        "on_import": on_import,
        "importers": sorted(set(importers.values())),
        "loaded_on_import": loaded_on_import,
        "loaded_after_calls": sorted(m for m in sys.modules if m.split(".")[0] in WATCHED),
        "sepp_modules_with_h2": sorted(
            name
            for name, module in list(sys.modules.items())
            if name.startswith("sepp_anyio")
            and any(
                getattr(value, "__name__", "").split(".")[0] in WATCHED
                for value in vars(module).values()
                if isinstance(value, type(sys))
            )
        ),
    }))
    """
)


@pytest.fixture(scope="module")
def server_address() -> Iterator[str]:
    with ServerThread() as server:
        yield server.address


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_the_client_imports_no_h2_or_hyperframe(server_address: str, backend: str) -> None:
    result = subprocess.run(
        [sys.executable, "-c", _CHILD, server_address, backend],
        capture_output=True,
        text=True,
        timeout=50,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    # Only grpclib (through the stubs' betterproto2.grpclib, see the module docstring)
    # asks for h2; nothing of ours does, neither on import nor while making calls.
    assert report["importers"], "the watch saw no import at all: it is not working"
    assert all(name.split(".")[0] == "grpclib" for name in report["importers"]), report
    # Making calls loads no h2/hyperframe module that importing did not.
    assert report["importers"] == report["on_import"]
    assert report["loaded_after_calls"] == report["loaded_on_import"]
    # And no module of ours holds one (an import of a module grpclib loaded first
    # would not reach the watch).
    assert report["sepp_modules_with_h2"] == []
