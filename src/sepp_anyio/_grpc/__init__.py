"""Sans-IO gRPC over HTTP/2, for both roles: the rules of the wire, written once.

Nothing here does I/O or touches an event loop; the client's transport
(:mod:`sepp_anyio._transport`) and the reference server (:mod:`sepp_anyio.server`) both
build on it, each on its own role of :mod:`sepp_anyio._http2`:

* :mod:`._status`: :class:`GrpcError`, a status code of :class:`~sepp_anyio._model.
  _error_root.StatusCode` and a message, the error value of both roles; the HTTP status
  table for responses without a ``grpc-status``; reading a received status;
* :mod:`._framing`: the 5-byte message prefix, its size limit and compressed flag, and
  the one-message rule of unary calls (:class:`MessageDecoder`);
* :mod:`._timeout`: ``grpc-timeout``, one grammar for writing and reading it;
* :mod:`._message`: ``grpc-message``'s percent-encoding, both ways;
* :mod:`._metadata`: the key and value rules of custom metadata, for what we send and
  for what we receive;
* :mod:`._headers`: the header lists of a response (headers, trailers, trailers-only).
"""

from __future__ import annotations

from ._framing import (
    PREFIX_SIZE,
    UNARY,
    CompressedMessageError,
    ExtraMessageError,
    MessageDecoder,
    MessageTooLargeError,
    encode_message,
    read_prefix,
)
from ._headers import OK_TRAILERS, RESPONSE_HEADERS, trailers, trailers_only
from ._message import decode_grpc_message, encode_grpc_message
from ._metadata import MetadataLike, encode_metadata, metadata_problem
from ._status import GrpcError, MalformedReplyError, read_status, status_from_http
from ._timeout import (
    STABLE_TIMEOUT_FROM,
    STABLE_TIMEOUT_UP_TO,
    decode_timeout,
    encode_stable_timeout,
    encode_timeout,
)

__all__ = [
    "OK_TRAILERS",
    "PREFIX_SIZE",
    "RESPONSE_HEADERS",
    "STABLE_TIMEOUT_FROM",
    "STABLE_TIMEOUT_UP_TO",
    "UNARY",
    "CompressedMessageError",
    "ExtraMessageError",
    "GrpcError",
    "MalformedReplyError",
    "MessageDecoder",
    "MessageTooLargeError",
    "MetadataLike",
    "decode_grpc_message",
    "decode_timeout",
    "encode_grpc_message",
    "encode_message",
    "encode_metadata",
    "encode_stable_timeout",
    "encode_timeout",
    "metadata_problem",
    "read_prefix",
    "read_status",
    "status_from_http",
    "trailers",
    "trailers_only",
]
