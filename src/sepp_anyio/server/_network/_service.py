"""The service layer of the reference server: ``sepp.v1.QueueService`` and ``grpc.health.v1``.

Both classes map their methods' ``:path`` to :class:`Route` values (:meth:`routes`), built
over a running :class:`~sepp_anyio.server.Engine`.  A route's handler gets the call
(:class:`~sepp_anyio.server._network._call.ServerCall`) and uses only its public side: ``metadata``,
``read_request``, ``send_message`` and ``send_trailing_metadata``.

* :class:`QueueService` authenticates every call from its ``authorization`` metadata (protocol
  §2), hands the decoded request to the engine's handler of the same RPC (the field of
  :func:`~sepp_anyio.server._engine._engine.rpc_of`'s object, read on every call) and sends
  the reply.
  An :class:`~sepp_anyio.server.EngineError` becomes a status reply with the engine's status
  and message.  It counts the calls in progress, so the network server can drain them on
  shutdown.
* :class:`HealthService` answers ``grpc.health.v1.Health/Check``: SERVING for ``""`` and
  ``sepp.v1.QueueService``, NOT_SERVING once the engine is shutting down or while its store
  is failing (``Engine.storage_failed``), NOT_FOUND for any other service name.  Health is
  never authenticated (the real server wraps only QueueService in its API-key interceptor).
  ``Watch`` is not offered: clients get UNIMPLEMENTED.

The health messages are encoded by hand (two one-field messages): they are not part of the
generated code, and the ``protobuf`` package is not a dependency of sepp-anyio.

:class:`MessageCodec` encodes and decodes the messages with the compiled codecs, with the
server's request-size limit (``limits.max_message_bytes``).

Everything here runs in the event loop the engine runs in (asyncio or trio).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, final

import anyio

from sepp_anyio._grpc import GrpcError
from sepp_anyio._model._error_root import InvalidArgumentTypeError, StatusCode
from sepp_anyio._proto.sepp import v1 as pb
from sepp_anyio._wire._codec import decode, encode

from .._engine._engine import Engine, EngineRpc, rpc_of
from .._errors import EngineError
from ._auth import authenticate

if TYPE_CHECKING:
    from ._call import ServerCall

__all__ = [
    "HEALTH_SERVICE",
    "QUEUE_SERVICE",
    "HealthCheckRequest",
    "HealthCheckResponse",
    "HealthService",
    "MessageCodec",
    "QueueService",
    "Route",
]

logger = logging.getLogger("sepp_anyio.server")

QUEUE_SERVICE: Final = "sepp.v1.QueueService"
HEALTH_SERVICE: Final = "grpc.health.v1.Health"


@dataclass(frozen=True, slots=True)
class _Rpc:
    name: str
    #: The field of :class:`EngineRpc` that serves it.
    method: str
    request_type: type[Any]
    reply_type: type[Any]


_RPCS: Final = (
    _Rpc("EnqueueBatch", "enqueue_batch", pb.EnqueueBatchRequest, pb.EnqueueBatchResponse),
    _Rpc("EnqueueAtomic", "enqueue_atomic", pb.EnqueueBatchRequest, pb.EnqueueAtomicResponse),
    _Rpc("Reserve", "reserve", pb.ReserveRequest, pb.ReserveResponse),
    _Rpc("Ack", "ack", pb.AckRequest, pb.AckResponse),
    _Rpc("Nack", "nack", pb.NackRequest, pb.NackResponse),
    _Rpc("Extend", "extend", pb.ExtendRequest, pb.ExtendResponse),
    _Rpc(
        "DrainDeadLetters",
        "drain_dead_letters",
        pb.DrainDeadLettersRequest,
        pb.DrainDeadLettersResponse,
    ),
    _Rpc("GetServerInfo", "get_server_info", pb.GetServerInfoRequest, pb.GetServerInfoResponse),
)


@final
class MessageCodec:
    """The messages of the server's calls: encoded and decoded by the compiled codecs
    (``sepp_anyio._wire._codec``), requests larger than ``max_message_bytes`` refused.

    The call checks the limit on a request's announced length, before reading it
    (:func:`sepp_anyio._grpc.read_prefix`, answered with :meth:`too_large`), and
    :meth:`decode` checks it again.  The status and wording follow tonic, which the real
    server uses: OUT_OF_RANGE "decoded message length too large".  A message that does not
    parse gives INTERNAL, as in tonic; so does one with a field of the wrong wire type,
    since the compiled decoders are strict.
    """

    __slots__ = ("max_message_bytes",)

    def __init__(self, max_message_bytes: int) -> None:
        self.max_message_bytes = max_message_bytes

    def too_large(self, size: int) -> GrpcError:
        """The answer to a request of ``size`` bytes, over the limit."""
        return GrpcError(
            StatusCode.OUT_OF_RANGE,
            f"Error, decoded message length too large: found {size} bytes, "
            f"the limit is: {self.max_message_bytes} bytes",
        )

    def encode(self, message: Any, message_type: type[Any]) -> bytes:
        """The wire form of a reply.

        Raises:
            TypeError: ``message`` is not a ``message_type``.
        """
        if not isinstance(message, message_type):
            raise InvalidArgumentTypeError(
                f"message must be {message_type!r}, not {type(message)!r}"
            )
        return encode(message)

    def decode(self, data: bytes, message_type: type[Any]) -> Any:
        """A request from its wire form.

        Raises:
            GrpcError: OUT_OF_RANGE over the limit; INTERNAL when it does not decode.
        """
        if len(data) > self.max_message_bytes:
            raise self.too_large(len(data))
        try:
            message = decode(message_type, data)
        except Exception as exc:
            raise GrpcError(
                StatusCode.INTERNAL, f"failed to decode Protobuf message: {exc}"
            ) from None
        return message


@dataclass(frozen=True, slots=True)
class Route:
    """What the server runs for one ``:path``: a unary handler and its reply type."""

    #: Serves the call: reads the request, sends the reply and the status.
    handler: Callable[[ServerCall], Awaitable[None]]
    #: The message type the handler sends.
    reply_type: type[Any]


@final
class QueueService:
    """``sepp.v1.QueueService`` over an engine (:meth:`routes`: its handlers by ``:path``).

    Args:
        engine: the running engine.  Its live config's ``[auth] api_keys`` are read on every
            call, so a hot reload changes the accepted keys at once.

    Each call: authenticate (UNAUTHENTICATED with the protocol's messages), decode, call the
    engine, reply.  Replies (including error statuses) are sent completely before the handler
    returns, so a call counted as finished has nothing left to write.  A call cancelled by
    the connection (deadline, client reset, server close) is abandoned; the engine
    documents what a cancelled RPC leaves behind.  An unexpected exception from the engine
    is logged and answered with INTERNAL.
    """

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        self._rpc: EngineRpc = rpc_of(engine)
        self._active = 0
        self._idle: anyio.Event | None = None

    @property
    def active_calls(self) -> int:
        """Calls in progress (between arrival and the last byte of their reply)."""
        return self._active

    async def wait_idle(self) -> None:
        """Return once no call is in progress (at once if none is).

        Cancellation: a plain cancellation point.
        """
        while self._active:
            if self._idle is None:
                self._idle = anyio.Event()
            await self._idle.wait()

    def routes(self) -> dict[str, Route]:
        """Every RPC of the service by its ``:path``."""
        routes: dict[str, Route] = {}
        for rpc in _RPCS:

            async def handle(call: ServerCall, _rpc: _Rpc = rpc) -> None:
                await self._call(call, _rpc)

            routes[f"/{QUEUE_SERVICE}/{rpc.name}"] = Route(handle, rpc.reply_type)
        return routes

    async def _call(self, call: ServerCall, rpc: _Rpc) -> None:
        self._active += 1
        try:
            try:
                reply = await self._serve(call, rpc)
            except GrpcError as exc:
                await call.send_trailing_metadata(status=exc.code, status_message=exc.message)
                return
            await call.send_message(reply)
            await call.send_trailing_metadata()
        finally:
            self._active -= 1
            if not self._active and self._idle is not None:
                self._idle.set()
                self._idle = None

    async def _serve(self, call: ServerCall, rpc: _Rpc) -> Any:
        header = call.metadata.get("authorization")
        try:
            # Before the body is read, like the real server's interceptor: an unauthenticated
            # caller learns nothing about its request's validity.
            authenticate(header, self._engine.config.auth.api_keys)
            request = await call.read_request(rpc.request_type)
            if request is None:
                raise EngineError(StatusCode.INTERNAL, "missing request message")
            # Looked up now, not when the routes were built: a replaced field takes effect.
            handler: Callable[[Any], Awaitable[Any]] = getattr(self._rpc, rpc.method)
            return await handler(request)
        except EngineError as exc:
            raise GrpcError(exc.status, exc.message) from None
        except GrpcError:
            raise
        except Exception:
            logger.exception("%s failed unexpectedly", rpc.name)
            raise GrpcError(StatusCode.INTERNAL, "internal error") from None


# --------------------------------------------------------------------------- health

_SERVING: Final = 1
_NOT_SERVING: Final = 2


class _HealthDecodeError(ValueError):
    """A health message that is not valid protobuf."""


def _read_varint(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= len(data):
            raise _HealthDecodeError("truncated varint")
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7
        if shift >= 64:
            raise _HealthDecodeError("varint too long")


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        low = value & 0x7F
        value >>= 7
        if value:
            out.append(low | 0x80)
        else:
            out.append(low)
            return bytes(out)


def _fields(data: bytes) -> Iterator[tuple[int, int | bytes]]:
    """``(field number, value)`` of each field: an int for varints, bytes otherwise.

    Raises:
        ValueError: the bytes are not a valid protobuf message (groups are not supported).
    """
    pos = 0
    while pos < len(data):
        key, pos = _read_varint(data, pos)
        field, wire_type = key >> 3, key & 7
        value: int | bytes
        if wire_type == 0:
            value, pos = _read_varint(data, pos)
        else:
            if wire_type == 2:
                size, pos = _read_varint(data, pos)
            elif wire_type in (1, 5):
                size = 8 if wire_type == 1 else 4
            else:
                raise _HealthDecodeError(f"unsupported wire type {wire_type}")
            if pos + size > len(data):
                raise _HealthDecodeError("truncated field")
            value, pos = data[pos : pos + size], pos + size
        yield field, value


@final
class HealthCheckRequest:
    """``grpc.health.v1.HealthCheckRequest``: ``string service = 1``."""

    __slots__ = ("service",)

    def __init__(self, service: str = "") -> None:
        self.service = service

    # FromString / SerializeToString: the names the codec calls for a class without a
    # compiled codec (sepp_anyio._wire._codec).
    @classmethod
    def FromString(cls, data: bytes) -> HealthCheckRequest:
        """Parse the wire form; unknown fields are skipped.

        Raises:
            ValueError: the bytes are not a valid protobuf message.
        """
        service = ""
        for field, value in _fields(data):
            if field == 1 and isinstance(value, bytes):
                service = value.decode("utf-8")
        return cls(service)

    def SerializeToString(self) -> bytes:
        encoded = self.service.encode("utf-8")
        return b"\x0a" + _varint(len(encoded)) + encoded if encoded else b""


@final
class HealthCheckResponse:
    """``grpc.health.v1.HealthCheckResponse``: ``ServingStatus status = 1``."""

    __slots__ = ("status",)

    UNKNOWN: Final = 0
    SERVING: Final = _SERVING
    NOT_SERVING: Final = _NOT_SERVING

    def __init__(self, status: int = 0) -> None:
        self.status = status

    @classmethod
    def FromString(cls, data: bytes) -> HealthCheckResponse:
        """Parse the wire form; unknown fields are skipped.

        Raises:
            ValueError: the bytes are not a valid protobuf message.
        """
        status = 0
        for field, value in _fields(data):
            if field == 1 and isinstance(value, int):
                status = value
        return cls(status)

    def SerializeToString(self) -> bytes:
        # proto3: a zero enum is the default and is left off the wire.
        return b"\x08" + _varint(self.status) if self.status else b""


@final
class HealthService:
    """``grpc.health.v1.Health/Check`` for the queue service (:meth:`routes` as above).

    Args:
        engine: the engine whose shutdown, or failing store, turns the status to NOT_SERVING.
    """

    SERVICES: Final = frozenset({"", QUEUE_SERVICE})

    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    def routes(self) -> dict[str, Route]:
        """``Check`` by its ``:path``."""
        return {f"/{HEALTH_SERVICE}/Check": Route(self._check, HealthCheckResponse)}

    async def _check(self, call: ServerCall) -> None:
        try:
            request = await call.read_request(HealthCheckRequest)
        except GrpcError as exc:
            await call.send_trailing_metadata(status=exc.code, status_message=exc.message)
            return
        service = request.service if request is not None else ""
        if service not in self.SERVICES:
            await call.send_trailing_metadata(
                status=StatusCode.NOT_FOUND, status_message=f"unknown service {service!r}"
            )
            return
        # NOT_SERVING while the store fails, so that an orchestrator can take the server out
        # of rotation (or restart it); SERVING again once it has recovered by itself.
        failing = self._engine.shutting_down or self._engine.storage_failed
        status = _NOT_SERVING if failing else _SERVING
        await call.send_message(HealthCheckResponse(status))
        await call.send_trailing_metadata()
