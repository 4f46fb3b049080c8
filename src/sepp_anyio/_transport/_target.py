"""Parsing of connection targets: ``host:port``, ``http://...``, ``https://...``."""

from __future__ import annotations

from dataclasses import dataclass

from .._model._error_root import InvalidArgumentError

__all__ = ["Target", "parse_target"]

DEFAULT_PORT = 50051


@dataclass(frozen=True, slots=True)
class Target:
    host: str
    port: int
    tls: bool

    @property
    def address(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


def parse_target(target: str) -> Target:
    """Split a target into host, port and whether the scheme asks for TLS.

    Accepted forms: ``host:port``, ``host`` (port 50051), ``[v6addr]:port``,
    and either of those behind ``http://`` (plaintext) or ``https://`` (TLS).
    A trailing ``/`` is ignored.

    Raises:
        ValueError: another scheme, a path, an empty host or a bad port; the
            message quotes the target.
    """
    text = target.strip()
    tls = False
    if "://" in text:
        scheme, _, text = text.partition("://")
        if scheme.lower() == "https":
            tls = True
        elif scheme.lower() != "http":
            raise InvalidArgumentError(
                f"target {target!r}: unsupported scheme {scheme!r} (use http:// or https://)"
            )
    text = text.rstrip("/")
    if "/" in text:
        raise InvalidArgumentError(f"target {target!r}: a path is not allowed, give host:port")
    if text.startswith("["):
        host, sep, rest = text[1:].partition("]")
        if not sep:
            raise InvalidArgumentError(f"target {target!r}: unterminated [IPv6] address")
        port_text = rest[1:] if rest.startswith(":") else rest
        if rest and not rest.startswith(":"):
            raise InvalidArgumentError(
                f"target {target!r}: expected ':port' after the IPv6 address"
            )
    elif text.count(":") > 1:
        # A bare IPv6 address without brackets and without a port.
        host, port_text = text, ""
    else:
        host, _, port_text = text.partition(":")
    if not host:
        raise InvalidArgumentError(f"target {target!r}: the host is empty")
    if port_text == "":
        port = DEFAULT_PORT
    else:
        if not port_text.isascii() or not port_text.isdigit():
            raise InvalidArgumentError(f"target {target!r}: port {port_text!r} is not a number")
        port = int(port_text)
        if not 0 < port < 65536:
            raise InvalidArgumentError(f"target {target!r}: port {port} is outside 1-65535")
    return Target(host=host, port=port, tls=tls)
