"""Defaults that are defined once and used by every layer that has one."""

from __future__ import annotations

import inspect

import sepp_anyio
from sepp_anyio._model._limits import DEFAULT_MAX_RECEIVE_MESSAGE_BYTES
from sepp_anyio._transport import Channel


def _default(function: object, name: str) -> object:
    return inspect.signature(function).parameters[name].default  # type: ignore[arg-type]


def test_one_default_max_receive_size() -> None:
    # The client's and the transport's defaults are the same constant: 64 MiB.
    assert DEFAULT_MAX_RECEIVE_MESSAGE_BYTES == 64 << 20
    assert _default(sepp_anyio.connect, "max_receive_message_bytes") == (64 << 20)
    assert _default(Channel, "max_receive_message_bytes") == (64 << 20)
