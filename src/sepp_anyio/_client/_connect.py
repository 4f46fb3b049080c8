"""``connect()``: from a target string and options to a connected :class:`Client`.

Everything here happens before or around the first connection: the target and every
option are validated when :func:`connect` is called (so a typo fails before any I/O), the
TLS context is built, and entering the returned object opens the channel eagerly, so a
server that cannot be reached is a :class:`~sepp_anyio.ConnectError` at ``async with``
rather than at the first call.
"""

from __future__ import annotations

import ipaddress
import logging
import ssl
from contextlib import AsyncExitStack
from types import TracebackType
from typing import Any

from .._grpc import GrpcError
from .._model._checks import check_seconds
from .._model._error_root import StatusCode
from .._model._errors import (
    ConnectError,
    InvalidApiKeyError,
    InvalidArgumentError,
    InvalidArgumentTypeError,
)
from .._model._limits import DEFAULT_MAX_RECEIVE_MESSAGE_BYTES, DEFAULT_REMEMBER_MESSAGE_LIMIT
from .._model._retries import RetryPolicy
from .._transport import Channel
from .._transport._target import parse_target
from ._client import Client

__all__ = ["check_api_key", "connect"]

logger = logging.getLogger("sepp_anyio")


def check_api_key(api_key: str) -> str:
    """``api_key`` if it can be sent as an ``authorization`` header value.

    Raises:
        InvalidArgumentTypeError: not a str.
        InvalidApiKeyError: empty, or a character a header value cannot carry (the
            message says which kind, never the key).
    """
    if not isinstance(api_key, str):
        raise InvalidArgumentTypeError(f"api_key must be a str, got {type(api_key).__name__}")
    if not api_key:
        raise InvalidApiKeyError("it is empty")
    if "\r" in api_key or "\n" in api_key:
        raise InvalidApiKeyError("it contains a line break")
    if not api_key.isascii():
        raise InvalidApiKeyError("it contains non-ASCII characters")
    if any(not 0x21 <= ord(ch) <= 0x7E for ch in api_key):
        raise InvalidApiKeyError("it contains spaces or control characters")
    return api_key


def _is_loopback(host: str) -> bool:
    """Whether ``host`` names this machine: ``localhost`` (and ``*.localhost``, RFC 6761),
    127.0.0.0/8, ``::1`` or an IPv4-mapped loopback address. Traffic to it never leaves
    the machine, so a plaintext API key there is not worth a warning."""
    name = host.lower().rstrip(".")
    if name == "localhost" or name.endswith(".localhost"):
        return True
    try:
        address = ipaddress.ip_address(name.split("%", 1)[0])
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped.is_loopback
    return address.is_loopback


def _tls_context(
    tls: bool | ssl.SSLContext | None,
    *,
    scheme_tls: bool,
    ca_cert: bytes | str | None,
    server_name: str | None,
) -> ssl.SSLContext | None:
    if isinstance(tls, ssl.SSLContext):
        return tls
    wanted = scheme_tls or bool(tls) or ca_cert is not None or server_name is not None
    if tls is False:
        if scheme_tls:
            raise InvalidArgumentError("tls=False contradicts an https:// target")
        if ca_cert is not None or server_name is not None:
            raise InvalidArgumentError("tls_ca_cert and tls_server_name need TLS, but tls=False")
        return None
    if not wanted:
        return None
    cadata = ca_cert.decode("ascii") if isinstance(ca_cert, bytes) else ca_cert
    context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cadata=cadata)
    context.set_alpn_protocols(["h2"])
    return context


def connect(
    target: str,
    *,
    api_key: str | None = None,
    tls: bool | ssl.SSLContext | None = None,
    tls_ca_cert: bytes | str | None = None,
    tls_server_name: str | None = None,
    rpc_timeout: float = 30.0,
    connect_timeout: float = 5.0,
    retry: RetryPolicy | None = None,
    max_receive_message_bytes: int = DEFAULT_MAX_RECEIVE_MESSAGE_BYTES,
    keepalive_interval: float | None = 30.0,
    keepalive_timeout: float = 10.0,
    remember_message_limit: float = DEFAULT_REMEMBER_MESSAGE_LIMIT,
) -> _Connector:
    """Connect to a sepp server; use as ``async with connect(...) as client``.

    Args:
        target: ``host:port``, ``http://host:port`` or ``https://host:port``
            (TLS on); the port defaults to 50051.
        api_key: sent as ``authorization: Bearer <key>`` on every call.
        tls: ``True`` for TLS with the system's roots, an ``ssl.SSLContext``
            for full control, ``False`` to refuse TLS; ``None`` follows the
            target's scheme (and ``tls_ca_cert`` / ``tls_server_name``).
        tls_ca_cert: PEM of a CA to trust instead of the system roots.
        tls_server_name: the name to verify the server's certificate against.
        rpc_timeout: deadline of every call except reserve (whose deadline is
            its wait + 10 s).
        connect_timeout: bound on the first connection, made eagerly.
        retry: retries of transient failures (default: none).
        max_receive_message_bytes: larger replies fail with OverloadedError.
        keepalive_interval, keepalive_timeout: HTTP/2 PINGs that detect a
            dead connection while a long poll is idle.
        remember_message_limit: after the server refuses a request as over its message
            limit (:class:`RequestTooLargeError`, which states the limit), enqueues over
            that limit are refused the same way *before* they are sent, for this many
            seconds (default 300); then the next one is sent again, in case the server
            was restarted with a larger limit. ``0``: never refuse before sending. No
            server advertises its message limit, so until a refusal none is known.

    Entering the returned object validates everything, connects, and yields
    a :class:`Client`; leaving it closes the connection.

    A plaintext connection with an API key logs a warning (the key travels
    in the clear), except to a loopback address (``localhost``, 127.0.0.0/8,
    ``::1``). A failed connection is raised as :class:`ConnectError`, not
    logged; when TLS on one side only is the likely cause, its message says
    which scheme (or ``tls=``) to use.

    Raises:
        InvalidApiKeyError: the key cannot be a header value (before any I/O).
        InvalidArgumentError: a malformed target or option (InvalidArgumentTypeError
            for an option of the wrong type).
        ConnectError: the server could not be reached within connect_timeout.
    """
    return _Connector(
        target,
        api_key=api_key,
        tls=tls,
        tls_ca_cert=tls_ca_cert,
        tls_server_name=tls_server_name,
        rpc_timeout=rpc_timeout,
        connect_timeout=connect_timeout,
        retry=retry,
        max_receive_message_bytes=max_receive_message_bytes,
        keepalive_interval=keepalive_interval,
        keepalive_timeout=keepalive_timeout,
        remember_message_limit=remember_message_limit,
    )


class _Connector:
    """The object :func:`connect` returns: validated at once, connected on entry."""

    def __init__(self, target: str, **options: Any) -> None:
        parsed = parse_target(target)
        api_key = options["api_key"]
        metadata: list[tuple[str, str]] = []
        if api_key is not None:
            metadata.append(("authorization", f"Bearer {check_api_key(api_key)}"))
        ssl_context = _tls_context(
            options["tls"],
            scheme_tls=parsed.tls,
            ca_cert=options["tls_ca_cert"],
            server_name=options["tls_server_name"],
        )
        check_seconds(options["rpc_timeout"], "rpc_timeout", minimum="positive")
        check_seconds(options["remember_message_limit"], "remember_message_limit")
        self._connect_timeout = check_seconds(
            options["connect_timeout"], "connect_timeout", minimum="positive"
        )
        self._target = target
        self._address = parsed.address
        self._host = parsed.host
        self._has_key = api_key is not None
        self._tls = ssl_context is not None
        self._options = options
        self._channel = Channel(
            parsed.host,
            parsed.port,
            ssl_context=ssl_context,
            server_hostname=options["tls_server_name"],
            metadata=metadata,
            max_receive_message_bytes=options["max_receive_message_bytes"],
            keepalive_interval=options["keepalive_interval"],
            keepalive_timeout=options["keepalive_timeout"],
            connect_timeout=self._connect_timeout,
        )
        self._client: Client | None = None

    async def __aenter__(self) -> Client:
        if self._has_key and not self._tls and not _is_loopback(self._host):
            logger.warning(
                "API key configured without TLS; it is sent in plaintext to %s", self._address
            )
        stack = AsyncExitStack()
        await stack.__aenter__()
        try:
            await stack.enter_async_context(self._channel)
            try:
                await self._channel.connect()
            except GrpcError as exc:
                reason = exc.message or exc.code.name
                if exc.code is StatusCode.DEADLINE_EXCEEDED:
                    reason = "timed out"
                # Raised, not also logged: the caller decides how to report it (the CLI
                # prints one line), and a log line as well would say it twice.
                raise ConnectError(self._target, reason) from None
        except BaseException:
            await stack.aclose()
            raise
        logger.info(
            "connected to sepp server at %s (tls=%s, auth=%s)",
            self._address,
            self._tls,
            self._has_key,
        )
        self._client = Client(
            self._channel,
            label=self._address,
            rpc_timeout=self._options["rpc_timeout"],
            retry=self._options["retry"],
            exit_stack=stack,
            remember_message_limit=self._options["remember_message_limit"],
        )
        return self._client

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._client is not None:
            client, self._client = self._client, None
            await client.__aexit__(exc_type, exc, tb)
