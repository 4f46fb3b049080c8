"""Parsing of connection targets: ``host:port``, ``http://...``, ``https://...``."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

from .._model._error_root import InvalidArgumentError

__all__ = ["Target", "parse_target"]

DEFAULT_PORT = 50051

#: What a target may look like, for the errors that refuse one.
_FORMS = (
    "expected host, host:port, [IPv6 address]:port or an IPv6 address alone "
    "(each optionally behind http:// or https://)"
)


@dataclass(frozen=True, slots=True)
class Target:
    host: str
    port: int
    tls: bool

    @property
    def address(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


def _is_ipv6(text: str) -> bool:
    try:
        ipaddress.IPv6Address(text)  # also takes a zone: fe80::1%eth0
    except ValueError:
        return False
    return True


def parse_target(target: str, *, name: str = "target") -> Target:
    """Split a target into host, port and whether the scheme asks for TLS.

    Accepted forms: ``host:port``, ``host`` (port 50051), ``[v6addr]:port``, ``[v6addr]``,
    a bare IPv6 address such as ``::1`` (port 50051), and any of those behind
    ``http://`` (plaintext) or ``https://`` (TLS). A trailing ``/`` is ignored.

    A target with more than one ``:`` and no brackets must be an IPv6 address, and an
    unambiguous one: ``127.0.0.1:50051:9`` is refused (it is neither), and so is
    ``::1:8080``, which is both a valid address and ``::1`` with a port (write
    ``[::1]:8080`` or ``[::1:8080]``); ``2001:db8::1`` is not ambiguous (``2001:db8:`` is
    not an address).

    Args:
        target: the text to parse.
        name: what the errors call it (``"--address"`` for the command line).

    Raises:
        InvalidArgumentError: another scheme, a path, an empty host, a malformed or
            ambiguous address, an empty or bad port; the message quotes the target,
            says what is wrong and which forms are expected.
    """
    text = target.strip()
    tls = False
    if "://" in text:
        scheme, _, text = text.partition("://")
        if scheme.lower() == "https":
            tls = True
        elif scheme.lower() != "http":
            raise InvalidArgumentError(
                f"{name} {target!r}: unsupported scheme {scheme!r} (use http:// or https://)"
            )
    text = text.rstrip("/")
    if "/" in text:
        raise InvalidArgumentError(f"{name} {target!r}: a path is not allowed, give host:port")
    port_text: str | None  # None: no port given (the default one)
    if text.startswith("["):
        host, sep, rest = text[1:].partition("]")
        if not sep:
            raise InvalidArgumentError(f"{name} {target!r}: unterminated [IPv6] address")
        if rest and not rest.startswith(":"):
            raise InvalidArgumentError(
                f"{name} {target!r}: expected ':port' after the IPv6 address"
            )
        if host and not _is_ipv6(host):
            raise InvalidArgumentError(
                f"{name} {target!r}: {host!r} in brackets is not an IPv6 address; {_FORMS}"
            )
        port_text = rest[1:] if rest else None
    elif text.count(":") > 1:
        # Without brackets, only a whole IPv6 address can hold several colons. Anything
        # else (127.0.0.1:50051:9, a typo) would otherwise be taken for an IPv6 host.
        if not _is_ipv6(text):
            raise InvalidArgumentError(f"{name} {target!r} is malformed: {_FORMS}")
        before, _, last = text.rpartition(":")
        if last.isascii() and last.isdigit() and _is_ipv6(before):
            raise InvalidArgumentError(
                f"{name} {target!r} is ambiguous: write [{before}]:{last} for port {last} "
                f"of {before}, or [{text}] for that address on the default port"
            )
        host, port_text = text, None
    else:
        host, colon, after = text.partition(":")
        port_text = after if colon else None
    if not host:
        raise InvalidArgumentError(f"{name} {target!r}: the host is empty; {_FORMS}")
    if any(c.isspace() or not c.isprintable() for c in host):
        raise InvalidArgumentError(
            f"{name} {target!r}: the host {host!r} contains spaces or control characters"
        )
    if port_text is None:
        port = DEFAULT_PORT
    elif port_text == "":
        raise InvalidArgumentError(
            f"{name} {target!r}: the port after ':' is empty (leave out the ':' for the "
            f"default port, {DEFAULT_PORT})"
        )
    else:
        if not port_text.isascii() or not port_text.isdigit():
            raise InvalidArgumentError(f"{name} {target!r}: port {port_text!r} is not a number")
        port = int(port_text)
        if not 0 < port < 65536:
            raise InvalidArgumentError(f"{name} {target!r}: port {port} is outside 1-65535")
    return Target(host=host, port=port, tls=tls)
