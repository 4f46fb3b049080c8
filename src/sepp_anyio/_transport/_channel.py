"""The anyio gRPC channel that the generated betterproto2 stubs run on.

``grpclib.client.Channel`` is asyncio-only (it can't even be constructed
under trio), but the stubs only call ``channel.request(...)`` and use the
returned stream. :class:`Channel` provides that same ``request()`` on any
anyio backend. It is the one module of the package, besides the generated stubs, that
names a grpclib type: the ``Cardinality`` the stubs pass (and their ``Deadline``);
everything under it speaks :mod:`sepp_anyio._grpc`.

Lifetime is structured: ``async with Channel(...)`` opens a task group that
owns every connection's reader and keepalive tasks, and leaving the block
closes the connections and ends those tasks.

Connection policy:

* One HTTP/2 connection at a time carries all calls (multiplexed). It is made
  on first use, or eagerly with :meth:`Channel.connect`.
* When it fails (connection lost, keepalive timeout, GOAWAY), its in-flight
  calls fail with UNAVAILABLE and the next call connects again at once.
  After a *failed* connection attempt, the next one waits a jittered,
  exponentially growing backoff, and calls that queue up meanwhile share
  the outcome of a single attempt instead of each hammering the server.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import random
import socket
import ssl
from collections.abc import AsyncIterator, Hashable, Sequence
from typing import TYPE_CHECKING, Any, Self

import anyio
from anyio.streams.tls import TLSAttribute
from grpclib.const import Cardinality

from .._grpc import (
    STABLE_TIMEOUT_FROM,
    STABLE_TIMEOUT_UP_TO,
    GrpcError,
    MetadataLike,
    encode_metadata,
    encode_stable_timeout,
    encode_timeout,
)
from .._io._deadlines import Deadlines
from .._io._native import ANYIO as _ANYIO
from .._io._native import Native, native
from .._model._error_root import InvalidArgumentError, StatusCode
from .._model._limits import DEFAULT_MAX_RECEIVE_MESSAGE_BYTES
from .._version import __version__
from ._connection import Connection
from ._dial import dial
from ._stream import Stream

if TYPE_CHECKING:
    from grpclib.metadata import Deadline

__all__ = ["UNARY_UNARY", "Channel", "default_ssl_context"]

#: The shape of a unary call, for callers of :meth:`Channel.request` other than the stubs.
UNARY_UNARY = Cardinality.UNARY_UNARY

logger = logging.getLogger("sepp_anyio.transport")
# Header lists a channel keeps (one per method and whole-second timeout in use); past
# this, the cache starts over.
_MAX_HEADER_LISTS = 256

USER_AGENT = f"sepp-anyio/{__version__}"


# OpenSSL's reasons for a handshake whose answer was not TLS at all (a plaintext HTTP/2
# server answers a ClientHello with its SETTINGS frame, or a GOAWAY).
_NOT_TLS_REASONS = frozenset(
    {"WRONG_VERSION_NUMBER", "RECORD_LAYER_FAILURE", "PACKET_LENGTH_TOO_LONG", "UNKNOWN_PROTOCOL"}
)


def _connect_failure(exc: BaseException) -> str:
    """Why a TCP connect failed, in the operating system's words.

    asyncio says "Connect call failed ('127.0.0.1', 1)" and anyio "All connection
    attempts failed" (the attempts in its cause); both hide the errno's meaning.
    """
    causes: list[BaseException] = [exc]
    cause = exc.__cause__
    if isinstance(cause, BaseExceptionGroup):
        causes.extend(cause.exceptions)
    elif cause is not None:
        causes.append(cause)
    for each in causes:
        if isinstance(each, socket.gaierror) and each.strerror:
            return each.strerror  # "Name or service not known"
        errno = getattr(each, "errno", None)
        if isinstance(errno, int) and errno > 0:
            return os.strerror(errno)
    return str(exc) or type(exc).__name__


def _looks_like_tls(data: bytes) -> bool:
    """Whether ``data`` starts like a TLS record: a handshake (22) or alert (21), then
    major version 3. An HTTP/2 frame cannot: its first byte is the high byte of a 24-bit
    length, 0 for anything a server sends first."""
    return len(data) >= 2 and data[0] in (21, 22) and data[1] == 3


def default_ssl_context(
    *, cafile: str | None = None, cadata: str | bytes | None = None
) -> ssl.SSLContext:
    """A verifying client context with ALPN ``h2`` (system roots unless a CA is given)."""
    context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=cafile, cadata=cadata)
    context.set_alpn_protocols(["h2"])
    return context


class Channel(anyio.AsyncContextManagerMixin):
    """An HTTP/2 gRPC client channel on anyio (asyncio or trio).

    Args:
        host, port: the server.
        ssl_context: enables TLS; ALPN ``h2`` is required (set on the context).
        server_hostname: the name to verify the certificate against (and the
            ``:authority``), when it differs from ``host``.
        metadata: sent with every call (for instance ``authorization``).
        max_receive_message_bytes: larger response messages fail the call with
            RESOURCE_EXHAUSTED (the connection stays usable); the client's default,
            ``_model._limits.DEFAULT_MAX_RECEIVE_MESSAGE_BYTES`` (64 MiB).
        keepalive_interval, keepalive_timeout: PING cadence and patience;
            ``keepalive_interval=None`` disables keepalive.
        connect_timeout: bound on TCP + TLS + HTTP/2 handshake.
        reconnect_backoff, reconnect_backoff_max: first and largest pause
            after a failed connection attempt (jittered by +/-20%).
    """

    def __init__(
        self,
        host: str,
        port: int,
        *,
        ssl_context: ssl.SSLContext | None = None,
        server_hostname: str | None = None,
        metadata: MetadataLike | None = None,
        user_agent: str = USER_AGENT,
        max_receive_message_bytes: int = DEFAULT_MAX_RECEIVE_MESSAGE_BYTES,
        keepalive_interval: float | None = 30.0,
        keepalive_timeout: float = 10.0,
        connect_timeout: float = 5.0,
        reconnect_backoff: float = 0.1,
        reconnect_backoff_max: float = 5.0,
    ) -> None:
        if max_receive_message_bytes < 1:
            raise InvalidArgumentError("max_receive_message_bytes must be at least 1")
        if keepalive_interval is not None and not keepalive_interval > 0:
            raise InvalidArgumentError("keepalive_interval must be > 0 (or None to disable)")
        if not keepalive_timeout > 0:
            raise InvalidArgumentError("keepalive_timeout must be > 0")
        if not connect_timeout > 0:
            raise InvalidArgumentError("connect_timeout must be > 0")
        self.host = host
        self.port = port
        self._ssl_context = ssl_context
        if ssl_context is not None:
            ssl_context.set_alpn_protocols(["h2"])
        self._server_hostname = server_hostname
        self._max_receive = max_receive_message_bytes
        self._keepalive_interval = keepalive_interval
        self._keepalive_timeout = keepalive_timeout
        self._connect_timeout = connect_timeout
        self._backoff_initial = reconnect_backoff
        self._backoff_max = reconnect_backoff_max

        name = server_hostname or host
        authority = f"[{name}]:{port}" if ":" in name else f"{name}:{port}"
        self.address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        self._scheme = b"https" if ssl_context is not None else b"http"
        self._authority = authority.encode("ascii")
        self._fixed_headers = [
            (b"te", b"trailers"),
            (b"content-type", b"application/grpc+proto"),
            (b"user-agent", user_agent.encode("ascii")),
        ]
        # Credentials are never indexed (HPACK's advice for secrets): they go with
        # the per-call headers, which are sent as literals never indexed. Other
        # constant metadata is indexed, like the fixed headers.
        encoded = encode_metadata(metadata)
        self._indexed_metadata = [(k, v) for k, v in encoded if k != b"authorization"]
        self._base_metadata: list[tuple[bytes, bytes]] = [
            (k, v) for k, v in encoded if k == b"authorization"
        ]
        # The constant headers of a call, by path and stable grpc-timeout (None: no
        # timeout, or one sent as a per-call literal); bounded by _MAX_HEADER_LISTS.
        self._header_lists: dict[tuple[str, int | None], list[tuple[bytes, bytes]]] = {}
        # The running backend's clock and waiters, looked up once (set on entering).
        self.native: Native = _ANYIO
        # The calls' own timeouts (one task instead of a cancel scope per call).
        #: The calls' own timeouts (``Stream`` has them watched), kept by one task.
        self.deadlines = Deadlines()

        self._tg: anyio.abc.TaskGroup | None = None
        self._closed = False
        self._conn: Connection | None = None
        self._connections: set[Connection] = set()
        self._connect_lock = anyio.Lock(fast_acquire=True)
        self._attempts = 0
        self._failures = 0
        self._next_attempt_at = -math.inf
        self._last_error: GrpcError | None = None

    # ------------------------------------------------------------ lifetime

    @contextlib.asynccontextmanager
    async def __asynccontextmanager__(self) -> AsyncIterator[Self]:
        """``async with channel``: the connections' task group lives for the block.

        On exit (also when cancelled) each connection says goodbye (GOAWAY), shielded and
        bounded to a second, then the connections close. The block's own exception comes
        out as itself, not wrapped in an exception group.
        """
        if self._tg is not None or self._closed:
            raise RuntimeError("a Channel can be entered only once")
        body_error: BaseException | None = None
        self.native = native()
        async with anyio.create_task_group() as tg:
            self._tg = tg
            tg.start_soon(self.deadlines.run, self.native, name="sepp-anyio call deadlines")
            try:
                yield self
            except BaseException as exc:
                # Not handed to the task group: it would come back wrapped in an
                # ExceptionGroup. The connection tasks never raise, so there is
                # nothing else to collect.
                body_error = exc
            finally:
                self._closed = True
                # Say goodbye politely (GOAWAY), but never wait long for it, and do
                # it even if we are being cancelled.
                with anyio.CancelScope(shield=True), anyio.move_on_after(1.0):
                    for conn in list(self._connections):
                        if conn.failure is None:
                            conn.goodbye()
                            await conn.flush()
                for conn in list(self._connections):
                    conn.close_soon()
                tg.cancel_scope.cancel()
        if body_error is not None:
            raise body_error

    # ------------------------------------------------------------ calls

    def request(
        self,
        name: str,
        cardinality: Cardinality,
        request_type: type[Any],
        reply_type: type[Any],
        *,
        timeout: float | None = None,
        deadline: Deadline | None = None,
        metadata: MetadataLike | None = None,
    ) -> Stream:
        """Prepare a call (no I/O), as ``grpclib.client.Channel.request`` does.

        ``timeout`` (seconds) and ``deadline`` bound the call locally and are
        sent as ``grpc-timeout``; the caller's ambient anyio deadline is sent
        too. Raises ValueError/TypeError for malformed metadata.
        """
        if self._tg is None or self._closed:
            raise RuntimeError(
                "the connection is closed: use the client inside its `async with` block"
            )
        absolute: float | None = None
        if timeout is not None or deadline is not None:
            now = self.native.now()
            if timeout is not None:
                absolute = now + timeout
            if deadline is not None:
                other = now + deadline.time_remaining()
                absolute = other if absolute is None else min(absolute, other)
        call_metadata = self._base_metadata
        if metadata:
            # Per-call values (traceparent, ...) change on every call: kept out
            # of the HPACK table like grpc-timeout (see request_headers).
            call_metadata = call_metadata + encode_metadata(metadata)
        return Stream(
            self,
            name,
            cardinality,
            request_type,
            reply_type,
            deadline=absolute,
            metadata=call_metadata,
        )

    def request_headers(
        self, path: str, remaining: float, metadata: Sequence[tuple[bytes, bytes]]
    ) -> tuple[list[tuple[bytes, bytes]], Sequence[tuple[bytes, bytes]], Hashable]:
        """A call's headers, given the seconds ``remaining`` until its deadline (inf:
        none): the ones that are the same on every call of ``path`` with this stable
        timeout, the per-call ones, and the key that names the first for the encoder.

        The constant ones (pseudo-headers, fixed headers, constant metadata, and a
        ``grpc-timeout`` of whole seconds, see ``encode_stable_timeout``) go through the
        HPACK table, and the connection's encoder caches their encoding; the per-call
        ones (a grpc-timeout below ten seconds, which changes every call; per-call
        metadata) are sent as literals never indexed. The constant list is the
        channel's own, returned to every call with the same key: it is read, never
        changed.
        """
        timeout: bytes | None = None
        if STABLE_TIMEOUT_FROM <= remaining <= STABLE_TIMEOUT_UP_TO:
            key: tuple[str, int | None] = (path, math.ceil(remaining))
        else:
            key = (path, None)
            if remaining != math.inf:
                timeout = encode_timeout(remaining)
        headers = self._header_lists.get(key)
        if headers is None:
            headers = [
                (b":method", b"POST"),
                (b":scheme", self._scheme),
                (b":path", path.encode("ascii")),
                (b":authority", self._authority),
                *self._fixed_headers,
                *self._indexed_metadata,
            ]
            seconds = key[1]
            if seconds is not None:
                # The same on every call with this timeout: indexed once, then a one-byte
                # reference like the headers above.
                stable = encode_stable_timeout(seconds)
                assert stable is not None
                headers.append((b"grpc-timeout", stable))
            if len(self._header_lists) >= _MAX_HEADER_LISTS:
                self._header_lists.clear()
            self._header_lists[key] = headers
        if timeout is None and not metadata:
            return headers, (), key
        # A value that changes on every call: indexing it would fill the HPACK dynamic
        # table with dead entries and evict the constant headers, which are otherwise
        # sent as one-byte references.
        extra = [] if timeout is None else [(b"grpc-timeout", timeout)]
        extra += metadata
        return headers, extra, key

    # ------------------------------------------------------------ connections

    async def connect(self) -> None:
        """Make sure a connection is up, connecting now if needed.

        Raises:
            GrpcError: UNAVAILABLE with the reason (refused, timed out, TLS
                verification failed, no ALPN h2, ...).
        """
        await self.get_connection()

    def ready_connection(self) -> Connection | None:
        """The current connection if it takes new calls (no I/O), else None."""
        conn = self._conn
        if conn is not None and conn.failure is None and not conn.draining:  # (usable)
            return conn
        return None

    async def get_connection(self) -> Connection:
        """The current connection if usable, else a new one (one attempt at a time)."""
        conn = self._conn
        if conn is not None and conn.usable:
            return conn
        if self._tg is None or self._closed:
            raise GrpcError(StatusCode.UNAVAILABLE, "the channel is closed")
        seen = self._attempts
        async with self._connect_lock:
            conn = self._conn
            if conn is not None and conn.usable:
                return conn
            if self._attempts != seen and self._last_error is not None:
                # An attempt finished while we queued for the lock and it
                # failed: share its verdict rather than retrying at once.
                raise self._last_error
            pause = self._next_attempt_at - anyio.current_time()
            if pause > 0:
                await anyio.sleep(pause)
            self._attempts += 1
            try:
                conn = await self._establish()
            except GrpcError as exc:
                self._failures += 1
                self._last_error = exc
                backoff = min(
                    self._backoff_initial * 1.6 ** (self._failures - 1), self._backoff_max
                )
                self._next_attempt_at = anyio.current_time() + backoff * random.uniform(0.8, 1.2)
                raise
            self._failures = 0
            self._last_error = None
            self._next_attempt_at = -math.inf
            self._conn = conn
            return conn

    async def _establish(self) -> Connection:
        tg = self._tg
        assert tg is not None
        address = self.address
        conn: Connection | None = None
        try:
            with anyio.fail_after(self._connect_timeout):
                stream = await dial(
                    self.host,
                    self.port,
                    self._ssl_context,
                    self._server_hostname or self.host,
                )
                if self._ssl_context is not None:
                    alpn = stream.extra(TLSAttribute.alpn_protocol, None)
                    if alpn != "h2":
                        with anyio.CancelScope(shield=True):
                            await stream.aclose()
                        raise GrpcError(
                            StatusCode.UNAVAILABLE,
                            f"the server at {address} did not negotiate HTTP/2 over TLS"
                            f" (ALPN {alpn!r})",
                        )
                conn = Connection(
                    stream,
                    label=address,
                    max_receive_message_bytes=self._max_receive,
                    keepalive_interval=self._keepalive_interval,
                    keepalive_timeout=self._keepalive_timeout,
                    native=self.native,
                )
                self._connections.add(conn)
                conn.on_closed = self._connections.discard
                tg.start_soon(conn.run, name=f"sepp-anyio connection {address}")
                await conn.flush()
                # The server's SETTINGS tell us its stream limit and windows;
                # they also prove that an HTTP/2 server is listening.
                await conn.ready.wait()
        except TimeoutError:
            if conn is not None:
                conn.close_soon()
            raise GrpcError(
                StatusCode.UNAVAILABLE,
                f"timed out after {self._connect_timeout:g}s connecting to {address}",
            ) from None
        except ssl.SSLError as exc:
            hint = ""
            if exc.reason in _NOT_TLS_REASONS:
                hint = f"; the server does not speak TLS; use http://{address} or tls=False"
            raise GrpcError(
                StatusCode.UNAVAILABLE, f"TLS handshake with {address} failed: {exc}{hint}"
            ) from exc
        except (OSError, anyio.BrokenResourceError) as exc:
            raise GrpcError(
                StatusCode.UNAVAILABLE, f"cannot connect to {address}: {_connect_failure(exc)}"
            ) from exc
        if conn.failure is not None:
            hint = ""
            if self._ssl_context is None:
                if _looks_like_tls(conn.first_bytes):
                    hint = f"; the server speaks TLS; use https://{address} or tls=True"
                elif not conn.first_bytes:
                    # What a TLS server does with a plaintext client's HTTP/2 preface.
                    hint = f"; if the server uses TLS, use https://{address} or tls=True"
            raise GrpcError(
                StatusCode.UNAVAILABLE,
                f"HTTP/2 handshake with {address} failed: {conn.failure.message}{hint}",
            )
        logger.debug("connected to %s", address)
        return conn
