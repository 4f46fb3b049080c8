"""Our own HTTP/2, sans-IO (the h11 way): bytes in -> events out, send methods -> bytes out.

Layout, one idea per module:

* ``_connection``: :class:`Connection`, the one stateful object, client and server role,
  made of ``_base`` (its slots, construction and output queue), ``_reader`` (bytes in
  -> events), ``_defences`` (the limits and the protocol errors) and ``_sender`` (send
  methods -> bytes);
* ``_state``: the connection's own state machine (open, draining, closed; its GOAWAYs
  and the SETTINGS handshake);
* ``_stream``: the per-stream state machine (RFC 9113 section 5.1), the only writer of
  a stream's state;
* ``_frames``: the frame header and the frame builders;
* ``_flow``: windows and the window-update policy;
* ``_settings``: SETTINGS identifiers and the peer's values;
* ``_hpack``: the ``hpack`` package's coder with our caches and literal writer;
* ``_headers``: validation of received header lists (RFC 9113 section 8);
* ``_closed``: the bounded memory of streams we reset;
* ``_limits``: the defences and their defaults (their budgets are ``sepp_anyio._bucket``
  token buckets);
* ``_events``, ``_errors``: what the connection reports and raises.

No I/O, no anyio, no clock: the caller passes ``now`` where time matters. The only
runtime dependency is ``hpack``.
"""

from __future__ import annotations

from ._connection import MAX_STREAM_ID as MAX_STREAM_ID
from ._connection import Connection as Connection
from ._errors import ConnectionClosedError as ConnectionClosedError
from ._errors import ErrorCode as ErrorCode
from ._errors import HeaderListTooLargeError as HeaderListTooLargeError
from ._errors import LocalProtocolError as LocalProtocolError
from ._errors import StreamClosedError as StreamClosedError
from ._errors import StreamIdsExhaustedError as StreamIdsExhaustedError
from ._errors import TooManyStreamsError as TooManyStreamsError
from ._events import ConnectionTerminated as ConnectionTerminated
from ._events import DataReceived as DataReceived
from ._events import Event as Event
from ._events import GoAwayReceived as GoAwayReceived
from ._events import Headers as Headers
from ._events import PingAcknowledged as PingAcknowledged
from ._events import PingReceived as PingReceived
from ._events import RemoteSettingsChanged as RemoteSettingsChanged
from ._events import RequestHeadersTooLarge as RequestHeadersTooLarge
from ._events import RequestReceived as RequestReceived
from ._events import ResponseReceived as ResponseReceived
from ._events import SettingsAcknowledged as SettingsAcknowledged
from ._events import StreamReset as StreamReset
from ._events import TrailersReceived as TrailersReceived
from ._events import WindowUpdated as WindowUpdated
from ._limits import Limits as Limits
from ._settings import SettingCode as SettingCode

__all__ = [
    "MAX_STREAM_ID",
    "Connection",
    "ConnectionClosedError",
    "ConnectionTerminated",
    "DataReceived",
    "ErrorCode",
    "Event",
    "GoAwayReceived",
    "HeaderListTooLargeError",
    "Headers",
    "Limits",
    "LocalProtocolError",
    "PingAcknowledged",
    "PingReceived",
    "RemoteSettingsChanged",
    "RequestHeadersTooLarge",
    "RequestReceived",
    "ResponseReceived",
    "SettingCode",
    "SettingsAcknowledged",
    "StreamClosedError",
    "StreamIdsExhaustedError",
    "StreamReset",
    "TooManyStreamsError",
    "TrailersReceived",
    "WindowUpdated",
]
