"""anyio-native gRPC over HTTP/2 (our own ``_http2`` core): the transport under the client.

Private. The generated stubs take a :class:`Channel` in place of grpclib's; errors are
:class:`~sepp_anyio._grpc.GrpcError`, which the client translates.
"""

from __future__ import annotations

from ._channel import UNARY_UNARY as UNARY_UNARY
from ._channel import Channel as Channel
from ._channel import default_ssl_context as default_ssl_context
from ._stream import Stream as Stream

__all__ = ["UNARY_UNARY", "Channel", "Stream", "default_ssl_context"]
