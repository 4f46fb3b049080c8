"""The transport's verdict on a reply that breaks gRPC itself."""

from __future__ import annotations

from grpclib.const import Status
from grpclib.exceptions import GRPCError

__all__ = ["MalformedReplyError"]


class MalformedReplyError(GRPCError):
    """The server's reply breaks the gRPC protocol, not just the call: a second message
    in a unary response, a ``grpc-status`` that is not a number.

    A ``GRPCError`` with status INTERNAL, so that code expecting the transport's usual
    errors handles it; the client turns it into ``MalformedResponseError`` and never
    retries it (the same server would answer the same way).
    """

    def __init__(self, message: str) -> None:
        super().__init__(Status.INTERNAL, message)
