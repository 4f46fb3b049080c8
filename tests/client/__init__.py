"""Tests of the client (``sepp_anyio.connect`` / ``Client``), plus their shared helpers.

The helpers run the reference server's engine in-process, behind a proxy that injects
faults *on the server side* and counts every call that reaches it, so retry tests count
real attempts rather than trusting the client's own bookkeeping:

* :class:`FaultyEngine` wraps the RPC handlers of an :class:`~sepp_anyio.server.Engine`
  (the fields of its ``rpc_of``), which :class:`~sepp_anyio.testing.MemoryChannel` calls;
* :func:`open_client` is ``open_in_memory_client`` with that proxy in between.

Network tests use ``tests.support.servers.ScriptedGrpclibServer`` (the same faults over the
real HTTP/2 transport) instead.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import anyio

from sepp_anyio import Client, EnqueueRequest, JobCtx, RetryPolicy, StatusCode
from sepp_anyio.server import Clock, Engine, EngineError, ServerConfig, Store
from sepp_anyio.server._engine._engine import rpc_of
from sepp_anyio.testing import MemoryChannel

__all__ = [
    "ALL_OPS",
    "RPCS",
    "FaultyEngine",
    "InMemory",
    "Op",
    "cancel_once_blocked",
    "keyed",
    "leased_ctx",
    "open_client",
    "prepared",
]

#: Engine handler (the field of its ``EngineRpc``) -> gRPC method name, for the eight RPCs.
RPCS: dict[str, str] = {
    "enqueue_batch": "EnqueueBatch",
    "enqueue_atomic": "EnqueueAtomic",
    "reserve": "Reserve",
    "ack": "Ack",
    "nack": "Nack",
    "extend": "Extend",
    "drain_dead_letters": "DrainDeadLetters",
    "get_server_info": "GetServerInfo",
}


class FaultyEngine:
    """Scripted faults per RPC in front of an engine's handlers (installed in its
    ``rpc_of`` at construction, so whatever serves the engine meets them).

    Keys are gRPC method names (``"Ack"``). Each call is counted (``calls``), its
    ``anyio.current_time()`` and request recorded (``call_times``, ``requests``) before
    anything else happens, then:

    * ``fail_first={"Ack": (n, "UNAVAILABLE")}``: calls 1..n fail with that status, message
      ``"injected <CODE> #<i>"``, without reaching the engine;
    * ``hang_first={"Ack": n}``: calls 1..n never answer (until the caller gives up);
    * ``lose_reply_first={"Ack": (n, "UNAVAILABLE")}``: calls 1..n *do* run on the engine,
      then fail with that status, as if the reply had been lost on the way back.

    Faults can be changed between calls (the attributes are plain dicts).
    """

    def __init__(
        self,
        engine: Engine,
        *,
        fail_first: Mapping[str, tuple[int, str]] | None = None,
        hang_first: Mapping[str, int] | None = None,
        lose_reply_first: Mapping[str, tuple[int, str]] | None = None,
    ) -> None:
        self.engine = engine
        self.fail_first = dict(fail_first or {})
        self.hang_first = dict(hang_first or {})
        self.lose_reply_first = dict(lose_reply_first or {})
        self.calls: dict[str, int] = dict.fromkeys(RPCS.values(), 0)
        self.call_times: dict[str, list[float]] = {name: [] for name in RPCS.values()}
        self.requests: dict[str, list[Any]] = {name: [] for name in RPCS.values()}
        handlers = rpc_of(engine)
        for field, rpc in RPCS.items():
            setattr(handlers, field, self._wrap(rpc, getattr(handlers, field)))

    @property
    def config(self) -> ServerConfig:
        return self.engine.config

    @property
    def total_calls(self) -> int:
        return sum(self.calls.values())

    def _wrap(
        self, rpc: str, target: Callable[[Any], Awaitable[Any]]
    ) -> Callable[[Any], Awaitable[Any]]:
        async def call(request: Any) -> Any:
            index = self.calls[rpc]
            self.calls[rpc] = index + 1
            self.call_times[rpc].append(anyio.current_time())
            self.requests[rpc].append(request)
            fail = self.fail_first.get(rpc)
            if fail is not None and index < fail[0]:
                raise EngineError(StatusCode[fail[1]], f"injected {fail[1]} #{index + 1}")
            if index < self.hang_first.get(rpc, 0):
                await anyio.sleep_forever()
            reply = await target(request)
            lose = self.lose_reply_first.get(rpc)
            if lose is not None and index < lose[0]:
                raise EngineError(StatusCode[lose[1]], f"reply lost ({lose[1]}) #{index + 1}")
            return reply

        return call


@dataclass
class InMemory:
    """What :func:`open_client` yields."""

    client: Client
    faults: FaultyEngine
    engine: Engine
    channel: MemoryChannel


@asynccontextmanager
async def open_client(
    *,
    retry: RetryPolicy | None = None,
    rpc_timeout: float = 30.0,
    api_key: str | None = None,
    clock: Clock | None = None,
    store: Store | None = None,
    fail_first: Mapping[str, tuple[int, str]] | None = None,
    hang_first: Mapping[str, int] | None = None,
    lose_reply_first: Mapping[str, tuple[int, str]] | None = None,
    **sections: Any,
) -> AsyncIterator[InMemory]:
    """A real :class:`Client` on a :class:`MemoryChannel` to a :class:`FaultyEngine`.

    ``sections`` are the server config's TOML sections, as for ``open_in_memory_client``.
    """
    config = ServerConfig.from_toml(sections)
    metadata: list[tuple[str, str | bytes]] = []
    if api_key is not None:
        metadata.append(("authorization", f"Bearer {api_key}"))
    async with Engine(config, store, clock) as engine:
        faults = FaultyEngine(
            engine,
            fail_first=fail_first,
            hang_first=hang_first,
            lose_reply_first=lose_reply_first,
        )
        channel = MemoryChannel(engine, metadata=metadata)
        server_clock = engine.clock

        def server_now() -> datetime:
            # As open_in_memory_client does: the client reads "now" off the server's clock.
            return datetime.fromtimestamp(server_clock.now_ms() / 1000, UTC)

        async with Client(
            channel, label="faulty", rpc_timeout=rpc_timeout, retry=retry, wall_clock=server_now
        ) as client:
            yield InMemory(client, faults, engine, channel)


async def cancel_once_blocked(call: Callable[[], Awaitable[object]]) -> bool:
    """Run ``call()`` and cancel it as soon as every task is blocked (parked in a hung RPC or
    a retry backoff, say). Returns whether it was cancelled rather than finishing."""
    with anyio.CancelScope() as scope:
        async with anyio.create_task_group() as tg:

            async def cancel() -> None:
                await anyio.wait_all_tasks_blocked()
                scope.cancel()

            tg.start_soon(cancel)
            await call()
            tg.cancel_scope.cancel()
    return scope.cancelled_caught


# ------------------------------------------------------------------------------ one op per call


async def leased_ctx(mem: InMemory, lease: float = 30.0) -> JobCtx:
    """Enqueue a job on queue ``q`` and reserve it; its context."""
    await mem.client.enqueue(EnqueueRequest("q", "t", max_attempts=5))
    [job] = await mem.client.reserve(["q"], lease=lease, wait=0)
    return job.ctx


def keyed(job_type: str = "t") -> EnqueueRequest:
    return EnqueueRequest("q", job_type, idempotency_key=f"key-{job_type}")


@dataclass(frozen=True)
class Op:
    """One client call: its name, the RPC it makes, which error table applies to it
    (``"general"``, ``"lease"`` or ``"reserve"``) and whether the policy may retry it."""

    name: str
    rpc: str
    call: Callable[[InMemory, Any], Awaitable[Any]]
    kind: str = "general"
    retried: bool = True

    @property
    def needs_lease(self) -> bool:
        return self.kind == "lease"

    def __str__(self) -> str:
        return self.name


ALL_OPS = [
    Op("enqueue", "EnqueueBatch", lambda m, _: m.client.enqueue(keyed())),
    Op(
        "enqueue_batch",
        "EnqueueBatch",
        lambda m, _: m.client.enqueue_batch([keyed("a"), keyed()]),
    ),
    Op("enqueue_atomic", "EnqueueAtomic", lambda m, _: m.client.enqueue_atomic([keyed()])),
    Op("ack", "Ack", lambda m, ctx: m.client.ack(ctx), kind="lease"),
    Op("nack", "Nack", lambda m, ctx: m.client.nack(ctx, reason="x"), kind="lease"),
    Op("extend", "Extend", lambda m, ctx: m.client.extend(ctx, 60), kind="lease"),
    Op("ctx.extend", "Extend", lambda m, ctx: ctx.extend(60), kind="lease"),
    Op("server_info", "GetServerInfo", lambda m, _: m.client.server_info()),
    Op(
        "reserve",
        "Reserve",
        lambda m, _: m.client.reserve(["q"], lease=30, wait=0),
        kind="reserve",
        retried=False,
    ),
    Op(
        "drain_dead_letters",
        "DrainDeadLetters",
        lambda m, _: m.client.drain_dead_letters(max=5),
        retried=False,
    ),
]


@asynccontextmanager
async def prepared(
    op: Op,
    policy: RetryPolicy | None,
    *,
    fail_first: Mapping[str, tuple[int, str]] | None = None,
    lose_reply_first: Mapping[str, tuple[int, str]] | None = None,
) -> AsyncIterator[tuple[InMemory, JobCtx | None]]:
    """A client with ``policy`` and, for lease ops, a leased job; the faults are switched
    on (and the call counts reset) only once that setup is done."""
    async with open_client(retry=policy, storage={"dead_letter_retention_ms": 60_000}) as mem:
        ctx = await leased_ctx(mem) if op.needs_lease else None
        mem.faults.calls = dict.fromkeys(mem.faults.calls, 0)
        mem.faults.fail_first = dict(fail_first or {})
        mem.faults.lose_reply_first = dict(lose_reply_first or {})
        yield mem, ctx
