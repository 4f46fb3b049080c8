"""Real gRPC servers (grpclib and grpcio) and a scriptable raw HTTP/2 server for interop tests.

Every server here runs in background threads of its own (grpclib: a thread with its own asyncio
loop; grpcio: its own completion-queue thread and thread pool; raw h2: plain sockets and threads),
so a test running on either anyio backend can talk to it over loopback TCP. All servers bind to
127.0.0.1 only.

The two gRPC servers implement the same small *test behaviour* of ``sepp.v1.QueueService``:

* ``GetServerInfo`` echoes the request metadata into ``allowed_encodings`` (``"key=value"``, the
  value of a ``-bin`` key as hex) and reports the received timeout as
  ``supported_protocol_versions == ["v1", "timeout=<seconds>" | "timeout=none"]``.
* ``EnqueueBatch`` answers one ``JobResult(success=EnqueueResponse(job_id=checksum_id(data)))`` per
  job, ``data`` being the job's payload bytes.
* ``Reserve`` answers one job ``id="big"`` whose payload is ``pattern_bytes(n)``, with
  ``n = int(worker_id)`` when ``worker_id`` is a decimal string, else ``max_jobs * 1024``.
* ``Ack`` answers ``AckResponse(job_id=request.job_id)``.
* Every other RPC answers UNIMPLEMENTED.

Request metadata ``x-test-action`` (ASCII) or ``x-test-action-bin`` (UTF-8 bytes, for non-ASCII
messages) steers a call; several entries are executed in order before the normal answer:

* ``fail:<CODE>:<message>`` - abort with that status (a trailers-only response).
* ``fail-details:<CODE>:<message>`` - the same, plus ``grpc-status-details-bin`` trailing metadata
  whose value is ``status_details(code, message)`` (a serialized ``google.rpc.Status``).
* ``sleep:<seconds>`` - wait that long (interruptibly: a cancellation is observed and recorded).
* ``trailers-after-data:<CODE>[:<message>]`` - send the normal response message, then end the
  call with that non-OK status in the trailers.
* ``goaway`` - (grpclib only; ignored by grpcio) after the reply, send an HTTP/2 GOAWAY
  (``NO_ERROR``, ``last_stream_id`` = this call's stream) on the call's connection. The
  connection stays open for streams already started; new streams on it are refused with
  ``RST_STREAM(REFUSED_STREAM)``.

Each server records every call in a thread-safe log (``server.events``, a list of ``CallEvent``)
and ``server.wait_for(predicate)`` blocks until a recorded event matches. Tests on an event loop
should call the blocking methods (``wait_for``, ``stop``, ``restart``) through
``anyio.to_thread.run_sync``.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import dataclasses
import selectors
import socket
import ssl
import threading
import time
import zlib
from base64 import b64decode
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from types import TracebackType
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

import grpc
import grpclib.config
import grpclib.const
import grpclib.server
import h2.config
import h2.connection
import h2.events
import h2.exceptions
import h2.settings
from grpclib.const import Status
from grpclib.encoding.base import StatusDetailsCodecBase
from grpclib.encoding.proto import ProtoCodec
from grpclib.exceptions import GRPCError
from grpclib.metadata import decode_timeout
from grpclib.protocol import Connection, EventsProcessor, H2Protocol
from h2.errors import ErrorCodes
from h2.settings import SettingCodes
from hyperframe.frame import GoAwayFrame
from sepp.v1 import queue_pb2, queue_pb2_grpc

from sepp_anyio._proto.sepp import v1 as pb

if TYPE_CHECKING:
    import trustme

__all__ = [
    "CallEvent",
    "EventLog",
    "GrpcioTestServer",
    "GrpclibTestServer",
    "MiB",
    "RawEvent",
    "RawH2Server",
    "RawHandler",
    "RawResponse",
    "Send",
    "TLSMaterial",
    "checksum_id",
    "goaway",
    "grpc_status",
    "http_status",
    "make_tls",
    "pattern_bytes",
    "raw_grpc_call",
    "silent_peer",
    "status_details",
    "str_headers",
]

MiB = 1024 * 1024
LOCALHOST = "127.0.0.1"
ACTION_KEY = "x-test-action"
ACTION_BIN_KEY = "x-test-action-bin"

# Transport-level request headers; everything else (except user-agent) is call metadata.
_NOT_METADATA = frozenset({"te", "content-type", "user-agent"})

T = TypeVar("T")


# --------------------------------------------------------------------------- helpers


def pattern_bytes(n: int) -> bytes:
    """The deterministic payload ``Reserve`` sends: ``bytes(range(256))`` repeated, cut to n."""
    return (bytes(range(256)) * (n // 256 + 1))[:n]


def checksum_id(data: bytes) -> str:
    """The job id ``EnqueueBatch`` answers for a job whose payload data is ``data``."""
    return f"{len(data)}:{zlib.crc32(data)}"


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def status_details(code: int, message: str) -> bytes:
    """A serialized ``google.rpc.Status{code, message}``: what ``fail-details`` sends."""
    encoded = message.encode()
    return b"\x08" + _varint(code) + b"\x12" + _varint(len(encoded)) + encoded


def _decode_bin(value: str) -> bytes:
    return b64decode(value + "=" * (-len(value) % 4))


def _format_metadata(metadata: Iterable[tuple[str, str | bytes]]) -> list[str]:
    return [f"{k}={v.hex() if isinstance(v, bytes) else v}" for k, v in metadata]


# --------------------------------------------------------------------------- TLS


@dataclasses.dataclass(frozen=True)
class TLSMaterial:
    """Certificates for a TLS test server, issued by a trustme CA for localhost/127.0.0.1."""

    ca_pem: bytes
    cert_chain_pem: bytes
    private_key_pem: bytes
    server_ssl_context: ssl.SSLContext
    """Server context with ALPN ``h2`` (for ``GrpclibTestServer``)."""

    def client_ssl_context(self) -> ssl.SSLContext:
        """A client context that trusts the CA and offers ALPN ``h2``."""
        ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cadata=self.ca_pem.decode())
        ctx.set_alpn_protocols(["h2"])
        return ctx

    def grpcio_server_credentials(self) -> Any:
        return grpc.ssl_server_credentials([(self.private_key_pem, self.cert_chain_pem)])

    def grpcio_channel_credentials(self) -> Any:
        return grpc.ssl_channel_credentials(root_certificates=self.ca_pem)


def make_tls(ca: trustme.CA | None = None) -> TLSMaterial:
    """Issue a server certificate for ``localhost`` and ``127.0.0.1`` from ``ca`` (or a new CA)."""
    if ca is None:
        import trustme

        ca = trustme.CA()
    cert = ca.issue_cert("localhost", LOCALHOST)
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    cert.configure_cert(ctx)
    ctx.set_alpn_protocols(["h2"])
    return TLSMaterial(
        ca_pem=ca.cert_pem.bytes(),
        cert_chain_pem=b"".join(blob.bytes() for blob in cert.cert_chain_pems),
        private_key_pem=cert.private_key_pem.bytes(),
        server_ssl_context=ctx,
    )


# --------------------------------------------------------------------------- observation log


class EventLog(Generic[T]):
    """A thread-safe append-only list of events with a blocking ``wait_for``."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._items: list[T] = []

    def append(self, item: T) -> T:
        with self._cond:
            self._items.append(item)
            self._cond.notify_all()
        return item

    def update(self, item: T, **changes: Any) -> None:
        """Change fields of a recorded item (under the lock) and wake the waiters."""
        with self._cond:
            for name, value in changes.items():
                setattr(item, name, value)
            self._cond.notify_all()

    def snapshot(self) -> list[T]:
        with self._cond:
            return list(self._items)

    def clear(self) -> None:
        with self._cond:
            self._items.clear()

    def wait_for(self, predicate: Callable[[T], bool], timeout: float = 5.0) -> T:
        """Block until a recorded item (past or future) matches; raise TimeoutError otherwise."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                for item in self._items:
                    if predicate(item):
                        return item
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise TimeoutError(
                        f"no recorded event matched within {timeout}s; events: {self._items!r}"
                    )
                self._cond.wait(remaining)


@dataclasses.dataclass(eq=False)
class CallEvent:
    """One call as a gRPC test server saw it. Updated in place (under the log's lock)."""

    server: str
    """``"grpclib"`` or ``"grpcio"``."""
    method: str
    """The RPC name, e.g. ``"GetServerInfo"``."""
    metadata: list[tuple[str, str | bytes]]
    """Call metadata in order received; ``-bin`` values decoded to bytes. Excludes pseudo-headers,
    ``te``, ``content-type``, ``user-agent`` and ``grpc-*`` headers."""
    user_agent: str | None
    grpc_timeout: str | None
    """The raw ``grpc-timeout`` header (grpclib only; always None on grpcio)."""
    timeout: float | None
    """Seconds: the decoded header (grpclib) or ``context.time_remaining()`` at arrival
    (grpcio); None without a deadline."""
    actions: list[str]
    peer: str | None
    """``"127.0.0.1:<client port>"``: tells connections apart."""
    concurrent: int
    """Calls in progress on the server when this one arrived, this one included."""
    started_at: float = dataclasses.field(default_factory=time.monotonic)
    request: Any = dataclasses.field(default=None, repr=False)
    """The decoded request message (betterproto2 on grpclib, protobuf on grpcio)."""
    finished: bool = False
    finished_at: float | None = None
    status: str | None = None
    """The status code name the server ended the call with (``"OK"``, ``"NOT_FOUND"``, ...,
    ``"CANCELLED"`` when the handler was interrupted)."""
    message: str | None = None
    cancelled: bool = False
    """True when the handler saw the call cancelled (by the client, its deadline or a stop)."""
    cancel_reason: str | None = None
    """``"client"`` (RST_STREAM / connection lost), ``"deadline"`` or ``"server"`` (stop())."""


# --------------------------------------------------------------------------- test behaviour


@dataclasses.dataclass(frozen=True)
class _Action:
    kind: str  # fail | sleep | trailers-after-data | goaway
    code: str = "OK"
    message: str = ""
    seconds: float = 0.0
    details: bytes | None = None


class _BadAction(Exception):
    pass


def _parse_action(text: str) -> _Action:
    kind, _, rest = text.partition(":")
    if kind in ("fail", "fail-details", "trailers-after-data"):
        code, _, message = rest.partition(":")
        if code not in Status.__members__ or code not in grpc.StatusCode.__members__:
            raise _BadAction(f"unknown status code name {code!r} in {text!r}")
        if kind == "fail-details":
            value = Status[code].value
            return _Action("fail", code, message, details=status_details(value, message))
        if kind == "trailers-after-data" and not message:
            message = "trailers after data"
        return _Action(kind, code, message)
    if kind == "sleep":
        try:
            return _Action("sleep", seconds=float(rest))
        except ValueError:
            raise _BadAction(f"bad sleep duration in {text!r}") from None
    if kind == "goaway" and not rest:
        return _Action("goaway")
    raise _BadAction(f"unknown {ACTION_KEY} {text!r}")


def _actions_of(metadata: Sequence[tuple[str, str | bytes]]) -> list[str]:
    out: list[str] = []
    for key, value in metadata:
        if key == ACTION_KEY and isinstance(value, str):
            out.append(value)
        elif key == ACTION_BIN_KEY and isinstance(value, bytes):
            out.append(value.decode("utf-8"))
    return out


class _Unimplemented(Exception):
    pass


def _build_response(ns: Any, version: str, method: str, request: Any, event: CallEvent) -> Any:
    """The normal answer, built from ``ns`` (the betterproto2 or the protobuf module: both have
    the same message names and fields)."""
    if method == "GetServerInfo":
        timeout = "timeout=none" if event.timeout is None else f"timeout={float(event.timeout)!r}"
        return ns.GetServerInfoResponse(
            server_version=version,
            supported_protocol_versions=["v1", timeout],
            allowed_encodings=_format_metadata(event.metadata),
        )
    if method == "EnqueueBatch":
        results = []
        for job in request.jobs:
            data = job.payload.data if job.payload is not None else b""
            success = ns.EnqueueResponse(job_id=checksum_id(data), deduplicated=False)
            results.append(ns.JobResult(success=success))
        return ns.EnqueueBatchResponse(results=results)
    if method == "Reserve":
        worker_id = request.worker_id or ""
        n = int(worker_id) if worker_id.isdecimal() else (request.max_jobs or 0) * 1024
        payload = ns.Payload(data=pattern_bytes(n), encoding="bytes")
        return ns.ReserveResponse(jobs=[ns.Job(id="big", payload=payload)])
    if method == "Ack":
        return ns.AckResponse(job_id=request.job_id)
    raise _Unimplemented(method)


def _split_headers(
    headers: Iterable[tuple[str, str | bytes]],
) -> tuple[list[tuple[str, str | bytes]], str | None]:
    """(call metadata, user-agent) out of request headers or grpcio invocation metadata."""
    metadata: list[tuple[str, str | bytes]] = []
    user_agent: str | None = None
    for key, value in headers:
        if key == "user-agent":
            user_agent = value if isinstance(value, str) else value.decode("latin-1")
        elif key.startswith((":", "grpc-")) or key in _NOT_METADATA:
            continue
        elif key.endswith("-bin") and isinstance(value, str):
            metadata.append((key, _decode_bin(value)))
        else:
            metadata.append((key, value))
    return metadata, user_agent


class _TestServerBase:
    """Lifecycle (start/stop/restart, context manager), address and the call log."""

    kind = "?"

    def __init__(self, *, host: str, port: int) -> None:
        if host != LOCALHOST:
            raise ValueError("test servers bind to 127.0.0.1 only")
        self.host = host
        self.port = port
        self._log: EventLog[CallEvent] = EventLog()
        self._lock = threading.Lock()
        self._active = 0
        self._stopping = False
        self._running = False

    # -- address

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    # -- lifecycle

    def start(self) -> None:
        """Start serving; returns once the server is listening. Reuses the previous port."""
        if self._running:
            raise RuntimeError("server already running")
        self._stopping = False
        self._start()
        self._running = True

    def stop(self, grace: float | None = None) -> None:
        """Stop listening and send GOAWAY; wait up to ``grace`` seconds (None: 0) for calls in
        progress, cancel the rest and close every connection. Blocks until fully stopped."""
        if not self._running:
            return
        self._stopping = True
        try:
            self._stop(grace)
        finally:
            self._running = False

    def restart(self, grace: float | None = None) -> None:
        """``stop(grace)`` then ``start()`` on the same port."""
        self.stop(grace)
        self.start()

    @property
    def running(self) -> bool:
        return self._running

    def __enter__(self) -> _TestServerBase:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def _start(self) -> None:
        raise NotImplementedError

    def _stop(self, grace: float | None) -> None:
        raise NotImplementedError

    # -- observation log

    @property
    def events(self) -> list[CallEvent]:
        """A snapshot of the calls recorded so far (across restarts)."""
        return self._log.snapshot()

    def clear_events(self) -> None:
        self._log.clear()

    def wait_for(self, predicate: Callable[[CallEvent], bool], timeout: float = 5.0) -> CallEvent:
        """Block until some recorded call matches ``predicate``; raise TimeoutError otherwise."""
        return self._log.wait_for(predicate, timeout)

    # -- recording, for the implementations

    def _record_start(
        self,
        method: str,
        metadata: list[tuple[str, str | bytes]],
        user_agent: str | None,
        grpc_timeout: str | None,
        timeout: float | None,
        peer: str | None,
    ) -> CallEvent:
        with self._lock:
            self._active += 1
            concurrent = self._active
        return self._log.append(
            CallEvent(
                server=self.kind,
                method=method,
                metadata=metadata,
                user_agent=user_agent,
                grpc_timeout=grpc_timeout,
                timeout=timeout,
                actions=_actions_of(metadata),
                peer=peer,
                concurrent=concurrent,
            )
        )

    def _record_end(self, event: CallEvent, **changes: Any) -> None:
        with self._lock:
            self._active -= 1
        self._log.update(event, finished=True, finished_at=time.monotonic(), **changes)

    def _cancel_reason(self, deadline_passed: bool) -> str:
        if self._stopping:
            return "server"
        return "deadline" if deadline_passed else "client"


# --------------------------------------------------------------------------- grpclib server

# The raw request headers of the call being accepted; copied into the handler task's context.
_RAW_HEADERS: contextvars.ContextVar[tuple[tuple[str, str], ...]] = contextvars.ContextVar(
    "_RAW_HEADERS", default=()
)
# The connection (protocol) the call being accepted arrived on, likewise.
_PROTOCOL: contextvars.ContextVar[_TestH2Protocol | None] = contextvars.ContextVar(
    "_PROTOCOL", default=None
)


class _RawStatusDetailsCodec(StatusDetailsCodecBase):
    """Sends ``GRPCError.details`` (already serialized bytes) as ``grpc-status-details-bin``."""

    def encode(self, status: Status, message: str | None, details: Any) -> bytes:
        if not isinstance(details, bytes):
            raise TypeError("details must be bytes")
        return details

    def decode(self, status: Status, message: str | None, data: bytes) -> Any:
        return data


class _TestH2Protocol(H2Protocol):
    """grpclib's H2Protocol with a configurable MAX_CONCURRENT_STREAMS in the *initial* SETTINGS,
    raw GOAWAY frames that leave the connection usable, and draining (refusing new streams)."""

    def __init__(
        self,
        handler: _TestHandler,
        config: grpclib.config.Configuration,
        h2_config: h2.config.H2Configuration,
        *,
        server: _GrpclibServer,
        max_concurrent_streams: int | None,
    ) -> None:
        super().__init__(handler, config, h2_config)
        handler.protocol = self
        self._server = server
        self._max_concurrent_streams = max_concurrent_streams
        self.draining = False
        self.closed = asyncio.Event()
        self.transport: asyncio.Transport | None = None
        self.h2_conn: h2.connection.H2Connection | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # Mirrors H2Protocol.connection_made (grpclib 0.4.9), which offers no hook to change the
        # local settings before the first SETTINGS frame is written. asyncio already sets
        # TCP_NODELAY on TCP transports.
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        h2_conn = h2.connection.H2Connection(config=self.h2_config)
        if self._max_concurrent_streams is not None:
            h2_conn.local_settings = h2.settings.Settings(
                client=False,
                initial_values={
                    SettingCodes.MAX_CONCURRENT_STREAMS: self._max_concurrent_streams,
                    SettingCodes.MAX_HEADER_LIST_SIZE: h2_conn.DEFAULT_MAX_HEADER_LIST_SIZE,
                },
            )
        h2_conn.initiate_connection()
        initial = h2_conn.local_settings.initial_window_size
        conn_delta = self.config.http2_connection_window_size - initial
        stream_delta = self.config.http2_stream_window_size - initial
        if conn_delta:
            h2_conn.increment_flow_control_window(conn_delta)
        if stream_delta:
            h2_conn.update_settings(
                {SettingCodes.INITIAL_WINDOW_SIZE: self.config.http2_stream_window_size}
            )
        self.h2_conn = h2_conn
        self.connection = Connection(h2_conn, transport, config=self.config)
        self.connection.flush()
        self.connection.initialize()
        self.processor = EventsProcessor(self.handler, self.connection)
        self._server.protocols.add(self)

    def connection_lost(self, exc: BaseException | None) -> None:
        try:
            super().connection_lost(exc)
        finally:
            self._server.protocols.discard(self)
            self.closed.set()

    def send_goaway(self, last_stream_id: int | None = None) -> None:
        """Write a GOAWAY(NO_ERROR) frame without closing h2's state machine, so streams up to
        ``last_stream_id`` (default: the highest one received) can still finish. Streams the
        client opens after this are refused."""
        if self.transport is None or self.h2_conn is None or self.transport.is_closing():
            return
        if last_stream_id is None:
            last_stream_id = self.h2_conn.highest_inbound_stream_id
        self.draining = True
        self.connection.flush()
        frame = GoAwayFrame(0, last_stream_id=last_stream_id, error_code=ErrorCodes.NO_ERROR)
        self.transport.write(frame.serialize())

    def close_now(self) -> None:
        """A final GOAWAY (if h2 still allows it), then close the transport."""
        if self.transport is None or self.h2_conn is None or self.transport.is_closing():
            return
        with contextlib.suppress(h2.exceptions.ProtocolError):
            self.h2_conn.close_connection(error_code=ErrorCodes.NO_ERROR)
        data = self.h2_conn.data_to_send()
        if data:
            self.transport.write(data)
        self.transport.close()

    def abort(self) -> None:
        if self.transport is not None:
            self.transport.abort()


class _TestHandler(grpclib.server.Handler):
    protocol: _TestH2Protocol | None = None

    def accept(
        self,
        stream: Any,
        headers: Any,
        release_stream: Callable[[], Any],
    ) -> None:
        if self.protocol is not None and self.protocol.draining:
            stream.reset_nowait(ErrorCodes.REFUSED_STREAM)
            release_stream()
            return
        headers_token = _RAW_HEADERS.set(tuple(headers))
        protocol_token = _PROTOCOL.set(self.protocol)
        try:
            super().accept(stream, headers, release_stream)
        finally:
            _PROTOCOL.reset(protocol_token)
            _RAW_HEADERS.reset(headers_token)


class _GrpclibServer(grpclib.server.Server):
    def __init__(
        self,
        handlers: Sequence[Any],
        *,
        config: grpclib.config.Configuration | None,
        max_concurrent_streams: int | None,
    ) -> None:
        super().__init__(
            handlers,
            codec=ProtoCodec(),
            status_details_codec=_RawStatusDetailsCodec(),
            config=config,
        )
        self._max_concurrent_streams = max_concurrent_streams
        self.protocols: set[_TestH2Protocol] = set()

    def _protocol_factory(self) -> H2Protocol:
        self.__gc_step__()
        handler = _TestHandler(
            self._mapping, self._codec, self._status_details_codec, self.__dispatch__
        )
        self._handlers.add(handler)
        return _TestH2Protocol(
            handler,
            self._config,
            self._h2_config,
            server=self,
            max_concurrent_streams=self._max_concurrent_streams,
        )

    def stop_listening(self) -> None:
        if self._server is not None:
            self._server.close()


#: Every RPC of ``sepp.v1.QueueService``: its method name, request type and reply type.
QUEUE_SERVICE_RPCS: tuple[tuple[str, type[Any], type[Any]], ...] = (
    ("EnqueueBatch", pb.EnqueueBatchRequest, pb.EnqueueBatchResponse),
    ("EnqueueAtomic", pb.EnqueueBatchRequest, pb.EnqueueAtomicResponse),
    ("Reserve", pb.ReserveRequest, pb.ReserveResponse),
    ("Ack", pb.AckRequest, pb.AckResponse),
    ("Nack", pb.NackRequest, pb.NackResponse),
    ("Extend", pb.ExtendRequest, pb.ExtendResponse),
    ("DrainDeadLetters", pb.DrainDeadLettersRequest, pb.DrainDeadLettersResponse),
    ("GetServerInfo", pb.GetServerInfoRequest, pb.GetServerInfoResponse),
)


class _GrpclibService:
    """``sepp.v1.QueueService`` for grpclib (its ``__mapping__`` protocol, written here: the
    generated code has no server side), every RPC routed to one stream-level handler, which
    sees the stream's metadata and deadline."""

    def __init__(self, owner: GrpclibTestServer) -> None:
        self._owner = owner

    def __mapping__(self) -> dict[str, grpclib.const.Handler]:
        mapping: dict[str, grpclib.const.Handler] = {}
        for method, request_type, reply_type in QUEUE_SERVICE_RPCS:

            async def func(stream: grpclib.server.Stream[Any, Any], _method: str = method) -> None:
                await self._owner._handle(_method, stream)

            mapping[f"/sepp.v1.QueueService/{method}"] = grpclib.const.Handler(
                func, grpclib.const.Cardinality.UNARY_UNARY, request_type, reply_type
            )
        return mapping


class GrpclibTestServer(_TestServerBase):
    """``sepp.v1.QueueService`` on grpclib, in a thread with its own asyncio loop.

    ``tls``: a ``TLSMaterial`` (from ``make_tls``) or a server ``ssl.SSLContext`` (give it ALPN
    ``h2``). ``max_concurrent_streams`` goes into the server's initial SETTINGS (h2 default: 100);
    h2 enforces it once the client ACKs the SETTINGS, and a client that exceeds it gets the whole
    connection closed (h2 treats it as a connection error). grpclib has no message size limit, so
    ``max_message_size`` is accepted for symmetry and ignored. ``config`` is passed to grpclib.
    """

    kind = "grpclib"
    version = "grpclib-test"

    def __init__(
        self,
        *,
        host: str = LOCALHOST,
        port: int = 0,
        tls: TLSMaterial | ssl.SSLContext | None = None,
        max_concurrent_streams: int | None = None,
        max_message_size: int | None = None,
        config: grpclib.config.Configuration | None = None,
    ) -> None:
        super().__init__(host=host, port=port)
        self._ssl = tls.server_ssl_context if isinstance(tls, TLSMaterial) else tls
        self._max_concurrent_streams = max_concurrent_streams
        self._config = config
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop_requested: asyncio.Event | None = None
        self._grace = 0.0
        self._ready = threading.Event()
        self._start_errors: list[BaseException] = []
        self._tasks: set[asyncio.Task[Any]] = set()

    def __enter__(self) -> GrpclibTestServer:
        self.start()
        return self

    # -- lifecycle

    def _start(self) -> None:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((self.host, self.port))
            sock.listen(128)
        except BaseException:
            sock.close()
            raise
        self.port = sock.getsockname()[1]
        self._ready.clear()
        self._start_errors.clear()
        self._thread = threading.Thread(
            target=asyncio.run,
            args=(self._main(sock),),
            name=f"grpclib-test-server-{self.port}",
            daemon=True,
        )
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("grpclib test server did not start")
        if self._start_errors:
            self._thread.join()
            raise self._start_errors[0]

    def _stop(self, grace: float | None) -> None:
        assert self._thread is not None
        assert self._loop is not None
        assert self._stop_requested is not None
        self._grace = grace or 0.0
        self._loop.call_soon_threadsafe(self._stop_requested.set)
        self._thread.join()
        self._thread = None

    async def _main(self, sock: socket.socket) -> None:
        try:
            self._loop = asyncio.get_running_loop()
            self._stop_requested = asyncio.Event()
            server = _GrpclibServer(
                [_GrpclibService(self)],
                config=self._config,
                max_concurrent_streams=self._max_concurrent_streams,
            )
            await server.start(sock=sock, ssl=self._ssl)
        except BaseException as exc:
            sock.close()
            self._start_errors.append(exc)
            self._ready.set()
            return
        self._ready.set()
        await self._stop_requested.wait()

        # Graceful part: no new connections, GOAWAY on every connection (new streams refused),
        # then up to `grace` seconds for the calls in progress.
        server.stop_listening()
        for protocol in list(server.protocols):
            protocol.send_goaway()
        pending = {task for task in self._tasks if not task.done()}
        if pending and self._grace > 0:
            await asyncio.wait(pending, timeout=self._grace)
        # Hard part: cancel what is left, close every connection, wait for it all.
        server.close()
        for protocol in list(server.protocols):
            protocol.close_now()
        closing = [asyncio.ensure_future(p.closed.wait()) for p in list(server.protocols)]
        if closing:
            _, not_closed = await asyncio.wait(closing, timeout=1.0)
            for waiter in not_closed:
                waiter.cancel()
            for protocol in list(server.protocols):
                protocol.abort()  # e.g. a TLS peer that never answers close_notify
            if not_closed:
                await asyncio.wait(not_closed)
        await server.wait_closed()
        await asyncio.sleep(0)  # let aborted transports run connection_lost

    # -- the test behaviour

    async def _handle(self, method: str, stream: grpclib.server.Stream[Any, Any]) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        metadata, user_agent = _split_headers(_RAW_HEADERS.get())
        raw_timeout = next((v for k, v in _RAW_HEADERS.get() if k == "grpc-timeout"), None)
        timeout = decode_timeout(raw_timeout) if raw_timeout is not None else None
        addr = stream.peer.addr()
        peer = f"{addr[0]}:{addr[1]}" if addr else None
        event = self._record_start(method, metadata, user_agent, raw_timeout, timeout, peer)
        try:
            request = await stream.recv_message()
            self._log.update(event, request=request)
            status, message = await self._behave(method, request, stream, event)
        except asyncio.CancelledError:
            deadline_passed = stream.deadline is not None and stream.deadline.time_remaining() == 0
            self._record_end(
                event,
                status="CANCELLED",
                cancelled=True,
                cancel_reason=self._cancel_reason(deadline_passed),
            )
            raise
        except GRPCError as exc:
            self._record_end(event, status=exc.status.name, message=exc.message)
            raise
        except BaseException as exc:
            self._record_end(event, status="UNKNOWN", message=repr(exc))
            raise
        else:
            self._record_end(event, status=status, message=message)

    async def _behave(
        self,
        method: str,
        request: Any,
        stream: grpclib.server.Stream[Any, Any],
        event: CallEvent,
    ) -> tuple[str, str | None]:
        trailers: _Action | None = None
        goaway_after = False
        for text in event.actions:
            try:
                action = _parse_action(text)
            except _BadAction as exc:
                raise GRPCError(Status.INVALID_ARGUMENT, str(exc)) from None
            if action.kind == "sleep":
                await asyncio.sleep(action.seconds)
            elif action.kind == "fail":
                raise GRPCError(Status[action.code], action.message, details=action.details)
            elif action.kind == "trailers-after-data":
                trailers = action
            elif action.kind == "goaway":
                goaway_after = True
        try:
            response = _build_response(pb, self.version, method, request, event)
        except _Unimplemented:
            raise GRPCError(
                Status.UNIMPLEMENTED, f"{method} is not part of the test behaviour"
            ) from None
        await stream.send_message(response)
        status, message = "OK", None
        if trailers is not None:
            status, message = trailers.code, trailers.message
            await stream.send_trailing_metadata(status=Status[status], status_message=message)
        elif goaway_after:
            await stream.send_trailing_metadata()
        if goaway_after:
            protocol = _PROTOCOL.get()
            if protocol is not None:
                protocol.send_goaway()
        return status, message


# --------------------------------------------------------------------------- grpcio server


class _GrpcioServicer(queue_pb2_grpc.QueueServiceServicer):
    def __init__(self, owner: GrpcioTestServer) -> None:
        self._owner = owner

    def EnqueueBatch(self, request: Any, context: Any) -> Any:
        return self._owner._handle("EnqueueBatch", request, context)

    def EnqueueAtomic(self, request: Any, context: Any) -> Any:
        return self._owner._handle("EnqueueAtomic", request, context)

    def Reserve(self, request: Any, context: Any) -> Any:
        return self._owner._handle("Reserve", request, context)

    def Ack(self, request: Any, context: Any) -> Any:
        return self._owner._handle("Ack", request, context)

    def Nack(self, request: Any, context: Any) -> Any:
        return self._owner._handle("Nack", request, context)

    def Extend(self, request: Any, context: Any) -> Any:
        return self._owner._handle("Extend", request, context)

    def DrainDeadLetters(self, request: Any, context: Any) -> Any:
        return self._owner._handle("DrainDeadLetters", request, context)

    def GetServerInfo(self, request: Any, context: Any) -> Any:
        return self._owner._handle("GetServerInfo", request, context)


class GrpcioTestServer(_TestServerBase):
    """``sepp.v1.QueueService`` on grpcio (``grpc.server`` with a thread pool).

    ``tls``: a ``TLSMaterial`` or ``(private_key_pem, cert_chain_pem)``.
    ``max_concurrent_streams`` -> ``grpc.max_concurrent_streams``; ``max_message_size`` sets both
    ``grpc.max_receive_message_length`` (grpcio default: 4 MiB) and
    ``grpc.max_send_message_length``. ``max_workers`` bounds the calls handled at once (the
    rest queue); ``options`` are extra channel args. The ``goaway`` action is ignored.
    """

    kind = "grpcio"
    version = "grpcio-test"

    def __init__(
        self,
        *,
        host: str = LOCALHOST,
        port: int = 0,
        tls: TLSMaterial | tuple[bytes, bytes] | None = None,
        max_concurrent_streams: int | None = None,
        max_message_size: int | None = None,
        max_workers: int = 64,
        options: Sequence[tuple[str, Any]] = (),
    ) -> None:
        super().__init__(host=host, port=port)
        if isinstance(tls, TLSMaterial):
            tls = (tls.private_key_pem, tls.cert_chain_pem)
        self._tls = tls
        opts: list[tuple[str, Any]] = [("grpc.so_reuseport", 0)]
        if max_concurrent_streams is not None:
            opts.append(("grpc.max_concurrent_streams", max_concurrent_streams))
        if max_message_size is not None:
            opts.append(("grpc.max_receive_message_length", max_message_size))
            opts.append(("grpc.max_send_message_length", max_message_size))
        opts.extend(options)
        self._options = opts
        self._max_workers = max_workers
        self._server: Any = None
        self._executor: ThreadPoolExecutor | None = None

    def __enter__(self) -> GrpcioTestServer:
        self.start()
        return self

    def _start(self) -> None:
        executor = ThreadPoolExecutor(
            max_workers=self._max_workers, thread_name_prefix=f"grpcio-test-server-{self.port}"
        )
        server = grpc.server(executor, options=self._options)
        try:
            queue_pb2_grpc.add_QueueServiceServicer_to_server(  # type: ignore[no-untyped-call]
                _GrpcioServicer(self), server
            )
            address = f"{self.host}:{self.port}"
            if self._tls is None:
                port = server.add_insecure_port(address)
            else:
                port = server.add_secure_port(address, grpc.ssl_server_credentials([self._tls]))
            if not port:
                raise OSError(f"grpcio test server could not bind {address}")
            server.start()
        except BaseException:
            server.stop(None).wait()
            executor.shutdown(wait=True)
            raise
        self.port = int(port)
        self._server = server
        self._executor = executor

    def _stop(self, grace: float | None) -> None:
        assert self._server is not None
        assert self._executor is not None
        # grpcio sends GOAWAY, refuses new calls, and cancels what is left after `grace`.
        self._server.stop(grace).wait()
        self._executor.shutdown(wait=True)
        self._server = None
        self._executor = None

    # -- the test behaviour

    def _handle(self, method: str, request: Any, context: Any) -> Any:
        metadata, user_agent = _split_headers(
            (md.key, md.value) for md in (context.invocation_metadata() or ())
        )
        remaining = context.time_remaining()
        timeout = None if remaining is None or remaining > 1e9 else float(remaining)
        peer = str(context.peer())
        peer = peer.split(":", 1)[1] if peer.startswith(("ipv4:", "ipv6:")) else peer
        event = self._record_start(method, metadata, user_agent, None, timeout, peer)
        self._log.update(event, request=request)
        terminated = threading.Event()
        if not context.add_callback(terminated.set):
            terminated.set()
        try:
            response, status, message = self._behave(method, request, context, event, terminated)
        except _Abort as abort:
            self._record_end(
                event,
                status=abort.code,
                message=abort.message,
                cancelled=abort.cancel_reason is not None,
                cancel_reason=abort.cancel_reason,
            )
            if abort.details is not None:
                context.set_trailing_metadata((("grpc-status-details-bin", abort.details),))
            context.abort(grpc.StatusCode[abort.code], abort.message)
        except BaseException as exc:
            self._record_end(event, status="UNKNOWN", message=repr(exc))
            raise
        self._record_end(event, status=status, message=message)
        if status != "OK":
            context.set_code(grpc.StatusCode[status])
            context.set_details(message or "")
        return response

    def _behave(
        self,
        method: str,
        request: Any,
        context: Any,
        event: CallEvent,
        terminated: threading.Event,
    ) -> tuple[Any, str, str | None]:
        trailers: _Action | None = None
        for text in event.actions:
            try:
                action = _parse_action(text)
            except _BadAction as exc:
                raise _Abort("INVALID_ARGUMENT", str(exc)) from None
            if action.kind == "sleep":
                terminated.wait(action.seconds)
                if not context.is_active():
                    deadline_passed = event.timeout is not None and context.time_remaining() <= 0
                    raise _Abort(
                        "CANCELLED", "cancelled", cancel_reason=self._cancel_reason(deadline_passed)
                    )
            elif action.kind == "fail":
                raise _Abort(action.code, action.message, details=action.details)
            elif action.kind == "trailers-after-data":
                trailers = action
        try:
            response = _build_response(queue_pb2, self.version, method, request, event)
        except _Unimplemented:
            raise _Abort("UNIMPLEMENTED", f"{method} is not part of the test behaviour") from None
        if trailers is not None:
            return response, trailers.code, trailers.message
        return response, "OK", None


class _Abort(Exception):
    def __init__(
        self,
        code: str,
        message: str,
        *,
        details: bytes | None = None,
        cancel_reason: str | None = None,
    ) -> None:
        super().__init__(code, message)
        self.code = code
        self.message = message
        self.details = details
        self.cancel_reason = cancel_reason


# --------------------------------------------------------------------------- raw HTTP/2 server


class Send(Protocol):
    """Writes ``conn.data_to_send()`` (then ``raw``, verbatim) to the connection's socket."""

    def __call__(self, raw: bytes = b"") -> None: ...


RawHandler = Callable[[h2.connection.H2Connection, h2.events.Event, Send], None]
"""``handler(conn, event, send)``: called on the connection's thread for every h2 event. Nothing
is written unless the handler calls ``send()`` - not even h2's automatic SETTINGS/PING ACKs."""


@dataclasses.dataclass(frozen=True)
class RawEvent:
    connection: int
    """Index of the connection (0, 1, ... in accept order)."""
    kind: str
    """``"connected"``, ``"event"`` (see ``event``), ``"protocol_error"`` or ``"closed"``."""
    event: h2.events.Event | None = None
    error: BaseException | None = None


class RawH2Server:
    """A tiny sans-IO HTTP/2 server (h2 over plain sockets, a thread per connection) whose
    behaviour is scripted by ``handler``. On each new connection it sends its SETTINGS
    (``settings`` override h2's defaults, e.g. ``{SettingCodes.MAX_CONCURRENT_STREAMS: 1}``),
    then feeds received bytes to h2 and hands every event to the handler. Headers are ``str``.

    Every connection and h2 event is recorded (``events``, ``wait_for``). A handler exception
    closes its connection and is re-raised by ``stop()``.
    """

    def __init__(
        self,
        handler: RawHandler,
        *,
        host: str = LOCALHOST,
        port: int = 0,
        settings: Mapping[SettingCodes, int] | Mapping[int, int] | None = None,
    ) -> None:
        if host != LOCALHOST:
            raise ValueError("test servers bind to 127.0.0.1 only")
        self.host = host
        self.port = port
        self._handler = handler
        self._settings = dict(settings or {})
        self._log: EventLog[RawEvent] = EventLog()
        self._listener: socket.socket | None = None
        self._accept_thread: threading.Thread | None = None
        self._threads: list[threading.Thread] = []
        self._sockets: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._connections = 0
        self._errors: list[BaseException] = []

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def events(self) -> list[RawEvent]:
        return self._log.snapshot()

    @property
    def connections(self) -> int:
        """Connections accepted so far."""
        return self._connections

    def wait_for(self, predicate: Callable[[RawEvent], bool], timeout: float = 5.0) -> RawEvent:
        return self._log.wait_for(predicate, timeout)

    def start(self) -> None:
        if self._listener is not None:
            raise RuntimeError("server already running")
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            listener.bind((self.host, self.port))
            listener.listen(64)
        except BaseException:
            listener.close()
            raise
        self.port = listener.getsockname()[1]
        self._stopping.clear()
        self._listener = listener
        self._accept_thread = threading.Thread(
            target=self._accept_loop, args=(listener,), name=f"raw-h2-{self.port}", daemon=True
        )
        self._accept_thread.start()

    def stop(self) -> None:
        """Close the listener and every connection, join all threads."""
        if self._listener is None:
            return
        self._stopping.set()
        assert self._accept_thread is not None
        self._accept_thread.join()
        self._listener.close()
        self._listener = None
        with self._lock:
            for sock in self._sockets:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
            threads, self._threads = self._threads, []
        for thread in threads:
            thread.join()
        errors, self._errors = self._errors, []
        if errors:
            raise errors[0]

    def __enter__(self) -> RawH2Server:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def _accept_loop(self, listener: socket.socket) -> None:
        with selectors.DefaultSelector() as selector:
            selector.register(listener, selectors.EVENT_READ)
            while not self._stopping.is_set():
                if not selector.select(0.05):
                    continue
                try:
                    sock, _ = listener.accept()
                except OSError:
                    continue
                with self._lock:
                    index = self._connections
                    self._connections += 1
                    self._sockets.add(sock)
                    thread = threading.Thread(
                        target=self._serve,
                        args=(index, sock),
                        name=f"raw-h2-{self.port}-conn{index}",
                        daemon=True,
                    )
                    self._threads.append(thread)
                thread.start()

    def _serve(self, index: int, sock: socket.socket) -> None:
        conn = h2.connection.H2Connection(
            config=h2.config.H2Configuration(client_side=False, header_encoding="utf-8")
        )
        if self._settings:
            initial = {
                SettingCodes.MAX_CONCURRENT_STREAMS: 100,
                SettingCodes.MAX_HEADER_LIST_SIZE: conn.DEFAULT_MAX_HEADER_LIST_SIZE,
            }
            initial.update({SettingCodes(k): v for k, v in self._settings.items()})
            conn.local_settings = h2.settings.Settings(client=False, initial_values=initial)
        conn.initiate_connection()
        send_lock = threading.Lock()

        def send(raw: bytes = b"") -> None:
            with send_lock:
                data = conn.data_to_send() + raw
                if data:
                    sock.sendall(data)

        self._log.append(RawEvent(index, "connected"))
        try:
            send()
            with selectors.DefaultSelector() as selector:
                selector.register(sock, selectors.EVENT_READ)
                while not self._stopping.is_set():
                    if not selector.select(0.05):
                        continue
                    data = sock.recv(65536)
                    if not data:
                        break
                    try:
                        events = conn.receive_data(data)
                    except h2.exceptions.ProtocolError as exc:
                        self._log.append(RawEvent(index, "protocol_error", error=exc))
                        break
                    for event in events:
                        self._log.append(RawEvent(index, "event", event=event))
                        self._handler(conn, event, send)
        except OSError:
            pass
        except BaseException as exc:
            with self._lock:
                self._errors.append(exc)
        finally:
            with self._lock:
                self._sockets.discard(sock)
            sock.close()
            self._log.append(RawEvent(index, "closed"))


def silent_peer(conn: h2.connection.H2Connection, event: h2.events.Event, send: Send) -> None:
    """A dead peer: TCP and the server preface (SETTINGS) happen, then nothing is ever sent -
    no SETTINGS ACK, no PING ACK, no response."""


def http_status(code: int, *, body: bytes = b"") -> RawHandler:
    """Answer every request with ``:status <code>`` (and ``body``), no gRPC headers at all.
    A well-behaved peer otherwise: ACKs SETTINGS and PINGs, returns flow-control credit."""

    def handler(conn: h2.connection.H2Connection, event: h2.events.Event, send: Send) -> None:
        if isinstance(event, h2.events.RequestReceived):
            assert event.stream_id is not None
            headers = [(":status", str(code)), ("content-type", "text/plain")]
            conn.send_headers(event.stream_id, headers, end_stream=not body)
            if body:
                conn.send_data(event.stream_id, body, end_stream=True)
        elif isinstance(event, h2.events.DataReceived) and event.stream_id is not None:
            conn.acknowledge_received_data(event.flow_controlled_length or 0, event.stream_id)
        send()

    return handler


def grpc_status(code: int, message: str = "") -> RawHandler:
    """Answer every request with a trailers-only gRPC response ``grpc-status: <code>``."""

    def handler(conn: h2.connection.H2Connection, event: h2.events.Event, send: Send) -> None:
        if isinstance(event, h2.events.RequestReceived):
            assert event.stream_id is not None
            headers = [
                (":status", "200"),
                ("content-type", "application/grpc"),
                ("grpc-status", str(code)),
            ]
            if message:
                headers.append(("grpc-message", grpclib.metadata.encode_grpc_message(message)))
            conn.send_headers(event.stream_id, headers, end_stream=True)
        elif isinstance(event, h2.events.DataReceived) and event.stream_id is not None:
            conn.acknowledge_received_data(event.flow_controlled_length or 0, event.stream_id)
        send()

    return handler


def goaway(
    last_stream_id: int = 0, error_code: int = ErrorCodes.NO_ERROR, debug_data: bytes = b""
) -> RawHandler:
    """On the first request of a connection, answer nothing and send GOAWAY(``last_stream_id``,
    ``error_code``); h2 then treats any further frame as a protocol error, which closes the
    connection. With ``last_stream_id=0`` the request was never processed (safe to retry)."""

    def handler(conn: h2.connection.H2Connection, event: h2.events.Event, send: Send) -> None:
        if isinstance(event, h2.events.RequestReceived):
            conn.close_connection(error_code, debug_data, last_stream_id)
        send()

    return handler


# --------------------------------------------------------------------------- raw HTTP/2 client


@dataclasses.dataclass
class RawResponse:
    """What ``raw_grpc_call`` saw on the wire for its stream (and its connection)."""

    events: list[h2.events.Event]
    """Every h2 event of the connection, in order."""

    @property
    def headers(self) -> list[list[tuple[str, str]]]:
        """Each HEADERS block received on the stream (response headers, then trailers)."""
        return [
            str_headers(e.headers)
            for e in self.events
            if isinstance(e, h2.events.ResponseReceived | h2.events.TrailersReceived)
            and e.headers is not None
        ]

    @property
    def data(self) -> bytes:
        return b"".join(
            e.data
            for e in self.events
            if isinstance(e, h2.events.DataReceived) and e.data is not None
        )

    @property
    def trailers_only(self) -> bool:
        """One HEADERS block carrying ``grpc-status``, no DATA."""
        blocks = self.headers
        return len(blocks) == 1 and "grpc-status" in dict(blocks[0]) and not self.data

    @property
    def goaway(self) -> h2.events.ConnectionTerminated | None:
        for e in self.events:
            if isinstance(e, h2.events.ConnectionTerminated):
                return e
        return None


def str_headers(headers: Iterable[tuple[bytes | str, bytes | str]]) -> list[tuple[str, str]]:
    """Headers as ``str`` pairs, whatever h2's ``header_encoding``."""
    return [
        (k.decode() if isinstance(k, bytes) else k, v.decode() if isinstance(v, bytes) else v)
        for k, v in headers
    ]


def raw_grpc_call(
    address: str,
    method: str,
    request: bytes = b"",
    *,
    metadata: Sequence[tuple[str, str]] = (),
    timeout: float = 5.0,
    linger: float = 0.0,
) -> RawResponse:
    """One unary gRPC call over a fresh plaintext connection, with h2 and a socket, recording
    every h2 event: for asserting wire details (trailers-only, GOAWAY). ``method`` is e.g.
    ``"Ack"``; ``request`` the serialized request message. After the stream ends, keep reading
    ``linger`` seconds (to catch a GOAWAY)."""
    host, _, port = address.rpartition(":")
    if host != LOCALHOST:
        raise ValueError("only 127.0.0.1")
    conn = h2.connection.H2Connection(config=h2.config.H2Configuration(client_side=True))
    conn.initiate_connection()
    stream_id = conn.get_next_available_stream_id()
    headers = [
        (":method", "POST"),
        (":scheme", "http"),
        (":path", f"/sepp.v1.QueueService/{method}"),
        (":authority", address),
        ("content-type", "application/grpc"),
        ("te", "trailers"),
        *metadata,
    ]
    conn.send_headers(stream_id, headers)
    conn.send_data(stream_id, b"\x00" + len(request).to_bytes(4, "big") + request, end_stream=True)
    events: list[h2.events.Event] = []
    deadline = time.monotonic() + timeout
    ended_at: float | None = None
    with socket.create_connection((host, int(port)), timeout=timeout) as sock:
        sock.sendall(conn.data_to_send())
        while True:
            now = time.monotonic()
            stop_at = deadline if ended_at is None else min(deadline, ended_at + linger)
            if now >= stop_at:
                break
            sock.settimeout(stop_at - now)
            try:
                data = sock.recv(65536)
            except TimeoutError:
                break
            if not data:
                break
            for event in conn.receive_data(data):
                events.append(event)
                if isinstance(event, h2.events.DataReceived) and event.stream_id:
                    conn.acknowledge_received_data(
                        event.flow_controlled_length or 0, event.stream_id
                    )
                if (
                    isinstance(event, h2.events.StreamEnded | h2.events.StreamReset)
                    and event.stream_id == stream_id
                ) or isinstance(event, h2.events.ConnectionTerminated):
                    ended_at = time.monotonic() if ended_at is None else ended_at
            out = conn.data_to_send()
            if out:
                sock.sendall(out)
    return RawResponse(events)


# --------------------------------------------------------------------------- scripted grpclib

_NO_REPLY: Any = object()


class ScriptedGrpclibServer(GrpclibTestServer):
    """A ``GrpclibTestServer`` whose answers are scripted per RPC, for tests of a client that
    sends no per-call metadata (so ``x-test-action`` cannot steer it).

    * ``fail_first={"Ack": (n, "UNAVAILABLE")}``: the first ``n`` calls of ``Ack`` fail with that
      status and the message ``"injected <CODE> #<i>"``.
    * ``hang_first={"Ack": n}``: the first ``n`` calls of ``Ack`` never answer; they end when the
      client gives up (the call's event then shows ``cancelled``) or the server stops.
    * ``replies={"Reserve": reply}``: answer with ``reply``, a message, or ``fn(request)``
      returning one (``fn`` may be a coroutine function and may raise ``GRPCError``).

    Calls are counted per method from construction or the last :meth:`script` (which also
    clears the event log); failing and hanging calls count. A method without a scripted reply
    keeps the ``GrpclibTestServer`` test behaviour (``x-test-action`` included).
    """

    def __init__(
        self,
        *,
        replies: Mapping[str, Any] | None = None,
        fail_first: Mapping[str, tuple[int, str]] | None = None,
        hang_first: Mapping[str, int] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self._script_lock = threading.Lock()
        self._replies: dict[str, Any] = {}
        self._fail_first: dict[str, tuple[int, str]] = {}
        self._hang_first: dict[str, int] = {}
        self._seen: dict[str, int] = {}
        self.script(replies=replies, fail_first=fail_first, hang_first=hang_first)

    def __enter__(self) -> ScriptedGrpclibServer:
        self.start()
        return self

    def script(
        self,
        *,
        replies: Mapping[str, Any] | None = None,
        fail_first: Mapping[str, tuple[int, str]] | None = None,
        hang_first: Mapping[str, int] | None = None,
    ) -> None:
        """Replace the whole script, reset the per-method counts and clear the event log."""
        for method, (_, code) in (fail_first or {}).items():
            if code not in Status.__members__:
                raise ValueError(f"unknown status code name {code!r} for {method}")
        with self._script_lock:
            self._replies = dict(replies or {})
            self._fail_first = dict(fail_first or {})
            self._hang_first = dict(hang_first or {})
            self._seen = {}
        self.clear_events()

    def calls(self, method: str) -> int:
        """How many calls of ``method`` (e.g. ``"Ack"``) arrived since the last script."""
        return sum(1 for event in self.events if event.method == method)

    async def _behave(
        self,
        method: str,
        request: Any,
        stream: grpclib.server.Stream[Any, Any],
        event: CallEvent,
    ) -> tuple[str, str | None]:
        with self._script_lock:
            index = self._seen.get(method, 0)
            self._seen[method] = index + 1
            fail = self._fail_first.get(method)
            hang = self._hang_first.get(method, 0)
            reply = self._replies.get(method, _NO_REPLY)
        if fail is not None and index < fail[0]:
            raise GRPCError(Status[fail[1]], f"injected {fail[1]} #{index + 1}")
        if index < hang:
            await asyncio.Event().wait()
        if reply is _NO_REPLY:
            return await super()._behave(method, request, stream, event)
        if callable(reply):
            reply = reply(request)
            if asyncio.iscoroutine(reply):
                reply = await reply
        await stream.send_message(reply)
        return "OK", None
