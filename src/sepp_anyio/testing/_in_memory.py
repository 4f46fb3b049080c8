"""``open_in_memory_client``: a client and a reference server in one event loop."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import AsyncExitStack, asynccontextmanager
from datetime import UTC, datetime
from typing import Any

from .._client import Client, check_api_key
from .._model._error_root import InvalidArgumentTypeError
from .._model._retries import RetryPolicy
from ..server import Clock, Engine, ServerConfig, Store
from ._memory_channel import MemoryChannel

__all__ = ["open_in_memory_client"]


@asynccontextmanager
async def open_in_memory_client(
    config: ServerConfig | Mapping[str, Any] | str | None = None,
    *,
    store: Store | None = None,
    clock: Clock | None = None,
    api_key: str | None = None,
    retry: RetryPolicy | None = None,
    rpc_timeout: float = 30.0,
    **sections: Any,
) -> AsyncIterator[tuple[Client, Engine]]:
    """Run a reference server in-process and yield ``(client, engine)``.

    ``config`` is a :class:`~sepp_anyio.server.ServerConfig`, TOML text, or a
    mapping with the TOML's sections; keyword arguments name sections too, so
    ``open_in_memory_client(limits={"max_payload_bytes": 1024},
    server={"strict_queues": True}, queues=[{"name": "emails"}])`` works.
    The store defaults to memory, the clock to the event loop's (so trio's
    ``MockClock`` drives leases and schedules).

    Both backends are supported. Leaving the block shuts the engine down
    (parked reserves return empty) and closes the client.

    Cancellation: leaving the block because of a cancellation still closes the
    client and, shielded, the engine's store, but writes the engine had not yet
    committed may be lost (see :class:`~sepp_anyio.server.Engine`); that matters
    only for a ``store`` that outlives the block.

    Raises:
        ConfigError: a bad config; the message names the key.
        InvalidApiKeyError: an unusable ``api_key``.
    """
    if isinstance(config, ServerConfig):
        if sections:
            raise InvalidArgumentTypeError(
                "pass either a ServerConfig or config sections, not both"
            )
        server_config = config
    else:
        if isinstance(config, str):
            if sections:
                raise InvalidArgumentTypeError("pass either TOML text or config sections, not both")
            server_config = ServerConfig.from_toml(config)
        else:
            server_config = ServerConfig.from_toml({**(config or {}), **sections})
    metadata: list[tuple[str, str | bytes]] = []
    if api_key is not None:
        metadata.append(("authorization", f"Bearer {check_api_key(api_key)}"))
    async with AsyncExitStack() as stack:
        engine = await stack.enter_async_context(Engine(server_config, store, clock))
        channel = MemoryChannel(engine, metadata=metadata)
        clock = engine.clock

        def server_now() -> datetime:
            return datetime.fromtimestamp(clock.now_ms() / 1000, UTC)

        client = Client(
            channel,
            label="in-memory",
            rpc_timeout=rpc_timeout,
            retry=retry,
            wall_clock=server_now,
        )
        async with client:
            yield client, engine
