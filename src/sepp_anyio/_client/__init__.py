"""The client: the calls of ``sepp.v1.QueueService`` (``sepp_anyio.Client``) and how one is made.

The package's modules, one idea each: :mod:`._client` (the :class:`Client` and its calls,
their deadlines, tracing and error mapping), :mod:`._connect` (:func:`connect`: a target,
TLS and an API key into a channel and a client) and :mod:`._retry` (the delay before a
retried call, and which failures may be retried without duplicating a job). Everything
public is re-exported by ``sepp_anyio`` itself.
"""

from __future__ import annotations

from ._client import Client as Client
from ._client import wall_clock_of as wall_clock_of
from ._connect import check_api_key as check_api_key
from ._connect import connect as connect

__all__ = ["Client", "check_api_key", "connect", "wall_clock_of"]
