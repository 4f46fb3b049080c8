"""sepp-anyio: structured-concurrency client and worker for the sepp job queue.

Runs on trio and asyncio (via anyio). Every public name is re-exported here;
the underscored modules are private.
"""

# The layering rule. The package is in tiers; a module imports its own tier and
# lower ones only, and nothing imports in a cycle (tests/test_import_graph.py checks
# both; imports under TYPE_CHECKING count for the tiers, not for cycles):
#
#   0. leaves, importing nothing of the package: _version, _proto (generated),
#      _bucket (the token bucket), _http2 (sans-IO HTTP/2; only _bucket), _io (byte
#      streams on asyncio's and trio's own primitives), _otel (plain values in and
#      out; only _version);
#   1. _model: the public data model (types, errors, rejections, limits, payload
#      codecs, the validation rules in _checks);
#   2. _logcontext (only _model), _wire (public <-> protobuf, the compiled codecs),
#      _grpc (sans-IO gRPC over HTTP/2 for both roles: only _model);
#   3. _transport (gRPC over HTTP/2 under the client) and server (the reference
#      server: only _model, _grpc, _wire, _proto, _http2, _io and _version);
#   4. the client package _client (client, connect, retry);
#   5. what is built on the client alone: _tasks (typed tasks), _cron, _health;
#   6. _worker (the worker package: facade, lanes, leases, lifespan, middleware,
#      outcomes), which the client and everything below never import;
#   7. _cli (the command line), which nothing below imports;
#   8. the public faces: this module, __main__, testing (which may import anything).

from __future__ import annotations

import contextlib as _contextlib

from ._client import Client as Client
from ._client import connect as connect
from ._cron import Cron as Cron
from ._health import serve_health as serve_health
from ._logcontext import current_job as current_job
from ._model._codecs import PayloadCodec as PayloadCodec
from ._model._codecs import decode_payload as decode_payload
from ._model._codecs import encode_payload as encode_payload
from ._model._codecs import register_codec as register_codec
from ._model._dead_letters import DeadLetterCause as DeadLetterCause
from ._model._dead_letters import DeadLetterRecord as DeadLetterRecord
from ._model._enqueue import CustomValue as CustomValue
from ._model._enqueue import EnqueueAck as EnqueueAck
from ._model._enqueue import EnqueueRequest as EnqueueRequest
from ._model._errors import AttemptMismatchError as AttemptMismatchError
from ._model._errors import BatchResultCountMismatchError as BatchResultCountMismatchError
from ._model._errors import BatchValidationError as BatchValidationError
from ._model._errors import ClientError as ClientError
from ._model._errors import ConnectError as ConnectError
from ._model._errors import DuplicateHandlerError as DuplicateHandlerError
from ._model._errors import EmptyBatchError as EmptyBatchError
from ._model._errors import HandlerError as HandlerError
from ._model._errors import InvalidApiKeyError as InvalidApiKeyError
from ._model._errors import InvalidArgumentError as InvalidArgumentError
from ._model._errors import InvalidArgumentTypeError as InvalidArgumentTypeError
from ._model._errors import InvalidRequestError as InvalidRequestError
from ._model._errors import JobConversionError as JobConversionError
from ._model._errors import JobNotFoundError as JobNotFoundError
from ._model._errors import JobRejectedError as JobRejectedError
from ._model._errors import LeaseError as LeaseError
from ._model._errors import MalformedResponseError as MalformedResponseError
from ._model._errors import MalformedServerInfoError as MalformedServerInfoError
from ._model._errors import OverloadedError as OverloadedError
from ._model._errors import RequestTooLargeError as RequestTooLargeError
from ._model._errors import ReserveError as ReserveError
from ._model._errors import SeppError as SeppError
from ._model._errors import ServerInternalError as ServerInternalError
from ._model._errors import StatusCode as StatusCode
from ._model._errors import TransportError as TransportError
from ._model._errors import UnauthenticatedError as UnauthenticatedError
from ._model._errors import UnexpectedStatusError as UnexpectedStatusError
from ._model._errors import UnknownQueuesError as UnknownQueuesError
from ._model._job import Job as Job
from ._model._job import JobCtx as JobCtx
from ._model._payload import Payload as Payload
from ._model._rejections import CustomEntriesTooMany as CustomEntriesTooMany
from ._model._rejections import CustomKeyTooLong as CustomKeyTooLong
from ._model._rejections import CustomMapTooLarge as CustomMapTooLarge
from ._model._rejections import EncodingNotAllowed as EncodingNotAllowed
from ._model._rejections import IdempotencyKeyTooLong as IdempotencyKeyTooLong
from ._model._rejections import InvalidRequest as InvalidRequest
from ._model._rejections import JobRejection as JobRejection
from ._model._rejections import JobTypeNameTooLong as JobTypeNameTooLong
from ._model._rejections import JobTypeNotAllowed as JobTypeNotAllowed
from ._model._rejections import JobValidationError as JobValidationError
from ._model._rejections import PayloadTooLarge as PayloadTooLarge
from ._model._rejections import QueueClosing as QueueClosing
from ._model._rejections import QueueFull as QueueFull
from ._model._rejections import QueueNameTooLong as QueueNameTooLong
from ._model._rejections import ScheduledTooFar as ScheduledTooFar
from ._model._rejections import UnknownQueue as UnknownQueue
from ._model._rejections import UnknownRejection as UnknownRejection
from ._model._results import InvalidResultError as InvalidResultError
from ._model._results import JobFailedError as JobFailedError
from ._model._results import Result as Result
from ._model._results import ResultTimeoutError as ResultTimeoutError
from ._model._retries import RetryDirective as RetryDirective
from ._model._retries import RetryPolicy as RetryPolicy
from ._model._retry_policy import Retry as Retry
from ._model._server_info import ServerInfo as ServerInfo
from ._model._trace import TraceContext as TraceContext
from ._model._trace import TraceContextError as TraceContextError
from ._tasks._results import ResultHandle as ResultHandle
from ._tasks._results import Results as Results
from ._tasks._task import Task as Task
from ._tasks._task import TaskPayloadError as TaskPayloadError
from ._version import __version__ as __version__
from ._worker import Handler as Handler
from ._worker import ShutdownHandle as ShutdownHandle
from ._worker import Worker as Worker
from ._worker import WorkerStatistics as WorkerStatistics
from ._worker._batch_item import BatchCtx as BatchCtx
from ._worker._batch_item import BatchItem as BatchItem
from ._worker._lane import Lane as Lane
from ._worker._lane import LaneStatistics as LaneStatistics
from ._worker._lane import RateLimit as RateLimit
from ._worker._outcome import Outcome as Outcome

__all__ = [
    "AttemptMismatchError",
    "BatchCtx",
    "BatchItem",
    "BatchResultCountMismatchError",
    "BatchValidationError",
    "Client",
    "ClientError",
    "ConnectError",
    "Cron",
    "CustomEntriesTooMany",
    "CustomKeyTooLong",
    "CustomMapTooLarge",
    "CustomValue",
    "DeadLetterCause",
    "DeadLetterRecord",
    "DuplicateHandlerError",
    "EmptyBatchError",
    "EncodingNotAllowed",
    "EnqueueAck",
    "EnqueueRequest",
    "Handler",
    "HandlerError",
    "IdempotencyKeyTooLong",
    "InvalidApiKeyError",
    "InvalidArgumentError",
    "InvalidArgumentTypeError",
    "InvalidRequest",
    "InvalidRequestError",
    "InvalidResultError",
    "Job",
    "JobConversionError",
    "JobCtx",
    "JobFailedError",
    "JobNotFoundError",
    "JobRejectedError",
    "JobRejection",
    "JobTypeNameTooLong",
    "JobTypeNotAllowed",
    "JobValidationError",
    "Lane",
    "LaneStatistics",
    "LeaseError",
    "MalformedResponseError",
    "MalformedServerInfoError",
    "Outcome",
    "OverloadedError",
    "Payload",
    "PayloadCodec",
    "PayloadTooLarge",
    "QueueClosing",
    "QueueFull",
    "QueueNameTooLong",
    "RateLimit",
    "RequestTooLargeError",
    "ReserveError",
    "Result",
    "ResultHandle",
    "ResultTimeoutError",
    "Results",
    "Retry",
    "RetryDirective",
    "RetryPolicy",
    "ScheduledTooFar",
    "SeppError",
    "ServerInfo",
    "ServerInternalError",
    "ShutdownHandle",
    "StatusCode",
    "Task",
    "TaskPayloadError",
    "TraceContext",
    "TraceContextError",
    "TransportError",
    "UnauthenticatedError",
    "UnexpectedStatusError",
    "UnknownQueue",
    "UnknownQueuesError",
    "UnknownRejection",
    "Worker",
    "WorkerStatistics",
    "__version__",
    "connect",
    "current_job",
    "decode_payload",
    "encode_payload",
    "register_codec",
    "serve_health",
]

# Public names report this package (``sepp_anyio.Client``, not ``sepp_anyio._client.Client``)
# in reprs, tracebacks and pickles, as anyio's do; only what the private modules define.
for _name in __all__:
    _obj = globals()[_name]
    if getattr(_obj, "__module__", "").startswith(__name__ + "._"):
        with _contextlib.suppress(AttributeError, TypeError):
            _obj.__module__ = __name__
del _name, _obj
