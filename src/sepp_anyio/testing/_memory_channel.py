"""A channel that serves an :class:`~sepp_anyio.server.Engine` in the caller's event loop.

It has the same duck type as the HTTP/2 channel (``request()`` returning a
stream the stubs use), so the real :class:`~sepp_anyio.Client` runs on it
unchanged. Messages still cross as bytes (serialised and parsed again), as on
the wire; what is skipped is the socket, HTTP/2 and another process. Because
the engine runs in the same event loop, trio's ``MockClock`` drives its
timers too: a 30 s lease expiry takes no real time.

Authentication is applied as the network server applies it, from the call's
``authorization`` metadata. A call's ``timeout`` bounds it locally and ends in
DEADLINE_EXCEEDED, like the real transport.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping
from types import TracebackType
from typing import Any

import anyio

from .._grpc import GrpcError
from .._model._error_root import InvalidArgumentTypeError, StatusCode
from .._transport._stream import CallShape
from .._wire._codec import decode, encode
from ..server import Engine, EngineError
from ..server._engine._engine import rpc_of
from ..server._network._auth import authenticate

__all__ = ["MemoryChannel"]

_SERVICE = "/sepp.v1.QueueService/"
#: Method name -> the field of the engine's ``EngineRpc`` that serves it.
_METHODS = {
    "EnqueueBatch": "enqueue_batch",
    "EnqueueAtomic": "enqueue_atomic",
    "Reserve": "reserve",
    "Ack": "ack",
    "Nack": "nack",
    "Extend": "extend",
    "DrainDeadLetters": "drain_dead_letters",
    "GetServerInfo": "get_server_info",
}

Metadata = Mapping[str, str | bytes] | Collection[tuple[str, str | bytes]]


def _pairs(metadata: Metadata | None) -> list[tuple[str, str | bytes]]:
    if not metadata:
        return []
    if isinstance(metadata, Mapping):
        return list(metadata.items())
    return list(metadata)


class MemoryChannel:
    """Routes ``sepp.v1.QueueService`` calls straight to an engine.

    Args:
        engine: the running engine to serve.
        metadata: sent with every call, like the real channel's (for example
            the ``authorization`` header built by the client).
    """

    def __init__(self, engine: Engine, *, metadata: Metadata | None = None) -> None:
        self._engine = engine
        self._rpc = rpc_of(engine)
        self._metadata = _pairs(metadata)
        self.calls = 0

    def request(
        self,
        name: str,
        cardinality: CallShape,
        request_type: type[Any],
        reply_type: type[Any],
        *,
        timeout: float | None = None,
        deadline: Any = None,
        metadata: Metadata | None = None,
    ) -> _MemoryStream:
        if cardinality.client_streaming or cardinality.server_streaming:
            raise NotImplementedError("sepp.v1 has only unary RPCs")
        absolute = math.inf
        if timeout is not None:
            absolute = anyio.current_time() + timeout
        if deadline is not None:
            absolute = min(absolute, anyio.current_time() + deadline.time_remaining())
        return _MemoryStream(
            self,
            name,
            request_type,
            reply_type,
            deadline=absolute,
            metadata=self._metadata + _pairs(metadata),
        )

    async def connect(self) -> None:
        """Nothing to connect; present for the client's channel protocol.

        Cancellation: returns without suspending, so there is nothing to cancel.
        """

    async def _serve(self, name: str, request: Any, metadata: list[tuple[str, str | bytes]]) -> Any:
        self.calls += 1
        if not name.startswith(_SERVICE) or name[len(_SERVICE) :] not in _METHODS:
            raise GrpcError(StatusCode.UNIMPLEMENTED, f"unknown method {name}")
        header = next((v for k, v in metadata if k == "authorization"), None)
        try:
            authenticate(
                header if isinstance(header, str) else None,
                self._engine.config.auth.api_keys,
            )
            # Read on every call: a test that replaces a handler changes what is served.
            handler = getattr(self._rpc, _METHODS[name[len(_SERVICE) :]])
            return await handler(request)
        except EngineError as exc:
            raise GrpcError(exc.status, exc.message) from None


class _MemoryStream:
    """One call; the stream protocol the generated stubs use."""

    def __init__(
        self,
        channel: MemoryChannel,
        name: str,
        request_type: type[Any],
        reply_type: type[Any],
        *,
        deadline: float,
        metadata: list[tuple[str, str | bytes]],
    ) -> None:
        self._channel = channel
        self._name = name
        self._request_type = request_type
        self._reply_type = reply_type
        self._deadline = deadline
        self._metadata = metadata
        self._request: bytes | None = None
        self._done = False

    async def __aenter__(self) -> _MemoryStream:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        return None

    async def send_message(self, message: Any, *, end: bool = False) -> None:
        if self._request is not None:
            raise RuntimeError("Message was already sent")
        if not isinstance(message, self._request_type):
            raise InvalidArgumentTypeError(f"message must be {self._request_type.__name__}")
        await anyio.lowlevel.checkpoint()
        self._request = encode(message)

    async def recv_message(self) -> Any:
        if self._request is None:
            raise RuntimeError("Request was not sent yet")
        if self._done:
            return None
        self._done = True
        request = decode(self._request_type, self._request)
        with anyio.CancelScope(deadline=self._deadline) as scope:
            reply = await self._channel._serve(self._name, request, self._metadata)
        if scope.cancelled_caught:
            raise GrpcError(StatusCode.DEADLINE_EXCEEDED, "deadline exceeded (client-side timeout)")
        return decode(self._reply_type, encode(reply))
