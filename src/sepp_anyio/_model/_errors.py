"""Every exception sepp-anyio raises, under one root.

::

    SeppError
    ├── ClientError                      the call failed as a whole
    │   ├── ConnectError                 could not reach the server at connect time
    │   ├── TransportError               UNAVAILABLE, DEADLINE_EXCEEDED, ABORTED, CANCELLED
    │   ├── UnauthenticatedError         UNAUTHENTICATED, PERMISSION_DENIED
    │   ├── OverloadedError              RESOURCE_EXHAUSTED
    │   ├── InvalidRequestError          INVALID_ARGUMENT
    │   │   └── RequestTooLargeError     over the server's message limit (*)
    │   ├── ServerInternalError          INTERNAL, DATA_LOSS, UNKNOWN
    │   ├── UnexpectedStatusError        any other status
    │   ├── MalformedResponseError       the reply breaks the protocol
    │   │   └── BatchResultCountMismatchError
    │   ├── MalformedServerInfoError     server_info() got an unusable reply
    │   ├── EmptyBatchError              enqueue_batch([]) / enqueue_atomic([]) (*)
    │   └── InvalidApiKeyError           the key is not a header value (*)
    ├── LeaseError                       ack / nack / extend: the lease is not ours
    │   ├── JobNotFoundError             NOT_FOUND
    │   └── AttemptMismatchError         FAILED_PRECONDITION
    ├── ReserveError
    │   └── UnknownQueuesError           FAILED_PRECONDITION on reserve (strict mode)
    ├── JobRejectedError                 enqueue(): the server refused the job
    ├── BatchValidationError             enqueue_atomic(): refused, nothing enqueued
    ├── DuplicateHandlerError            two handlers for one job type
    ├── JobConversionError               a reserved/dead-lettered job cannot be decoded
    ├── InvalidArgumentError             (also a ValueError) a bad argument value
    │   ├── TraceContextError            a malformed traceparent
    │   └── (*) EmptyBatchError, InvalidApiKeyError, RequestTooLargeError
    └── InvalidArgumentTypeError         (also a TypeError) an argument of the wrong type

    HandlerError                         raised *by your handler*; not a SeppError

Errors that come from a gRPC status carry it as :attr:`SeppError.code` (a
:class:`StatusCode`) and the server's text as :attr:`SeppError.status_message`; both are
``None`` for errors the client raises itself.

Bad arguments raise :class:`InvalidArgumentError` (a ``ValueError`` too) or
:class:`InvalidArgumentTypeError` (a ``TypeError`` too) where the mistake is made, before
any I/O: ``except SeppError`` catches them, and so do ``except ValueError`` /
``except TypeError``. Outside the tree, on purpose: ``RuntimeError`` for using an object
in the wrong state (a client outside its ``async with``, ``JobCtx.extend`` on a context
that has no lease), and the errors of your own code that sepp-anyio only passes on (a
payload that :func:`json.dumps` cannot serialise, a charset Python does not know).

A lease or reserve call that fails for a reason other than its specific ones raises the
plain :class:`ClientError` subclass (for example a :class:`TransportError` from ``ack``),
not a :class:`LeaseError`: catch ``SeppError`` to handle both.

Cancellation is never converted into any of these.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from ._error_root import InvalidArgumentError, InvalidArgumentTypeError, SeppError, StatusCode
from ._rejections import JobRejection, JobValidationError
from ._retries import RetryDirective
from ._size_refusal import size_refusal

__all__ = [
    "KEYLESS_ENQUEUE_RETRYABLE_CODES",
    "RETRYABLE_CODES",
    "AttemptMismatchError",
    "BatchResultCountMismatchError",
    "BatchValidationError",
    "ClientError",
    "ConnectError",
    "DuplicateHandlerError",
    "EmptyBatchError",
    "HandlerError",
    "InvalidApiKeyError",
    "InvalidArgumentError",
    "InvalidArgumentTypeError",
    "InvalidRequestError",
    "JobConversionError",
    "JobNotFoundError",
    "JobRejectedError",
    "LeaseError",
    "MalformedResponseError",
    "MalformedServerInfoError",
    "OverloadedError",
    "RequestTooLargeError",
    "ReserveError",
    "SeppError",
    "ServerInternalError",
    "StatusCode",
    "TransportError",
    "UnauthenticatedError",
    "UnexpectedStatusError",
    "UnknownQueuesError",
    "error_from_status",
]


#: Codes the :class:`RetryPolicy` retries. CANCELLED is a :class:`TransportError` but is
#: not retried: it usually means our own side gave up.
RETRYABLE_CODES: Final = frozenset(
    {
        StatusCode.UNAVAILABLE,
        StatusCode.DEADLINE_EXCEEDED,
        StatusCode.ABORTED,
        StatusCode.RESOURCE_EXHAUSTED,
    }
)

#: Codes retried for an enqueue in which some job has no idempotency key. After
#: DEADLINE_EXCEEDED or ABORTED the batch may have been committed, and resending jobs
#: without a key would duplicate them; these two codes mean the request never ran.
KEYLESS_ENQUEUE_RETRYABLE_CODES: Final = frozenset(
    {StatusCode.UNAVAILABLE, StatusCode.RESOURCE_EXHAUSTED}
)


# ---------------------------------------------------------------------------- client errors


class ClientError(SeppError):
    """A call failed as a whole: transport trouble, a refusal of the entire request, or a
    reply that breaks the protocol. Whether it is worth retrying depends on :attr:`code`
    (:class:`RetryPolicy` lists the codes it retries); the client's :class:`RetryPolicy`
    already did that."""


class ConnectError(ClientError):
    """The first connection to the server could not be made (or timed out).

    Args:
        addr: the target as given to :func:`connect`.
        reason: why, for example ``"timed out"`` or ``"connection refused"``.
    """

    def __init__(self, addr: str, reason: str) -> None:
        super().__init__(f"could not connect to the sepp server at {addr}: {reason}")
        #: The target as given to :func:`connect`.
        self.addr = addr
        #: Why the connection failed.
        self.reason = reason


class TransportError(ClientError):
    """The call did not complete: the connection dropped, the deadline passed, or the
    call was aborted or cancelled. Usually transient."""


class UnauthenticatedError(ClientError):
    """The server refused the credentials: no API key, a wrong one, or no permission."""


class OverloadedError(ClientError):
    """The server is shedding load (RESOURCE_EXHAUSTED); back off and try again."""


class InvalidRequestError(ClientError):
    """The server refused the request as malformed (INVALID_ARGUMENT). Not retried: the
    same request would be refused again. :attr:`status_message` says which rule.

    Its subclass :class:`RequestTooLargeError` is a request over the server's message
    limit (OUT_OF_RANGE or RESOURCE_EXHAUSTED from the server, or refused before sending).
    """


class ServerInternalError(ClientError):
    """The server failed internally (INTERNAL, DATA_LOSS or UNKNOWN). Not retried: for an
    enqueue the batch may or may not have been committed."""


class UnexpectedStatusError(ClientError):
    """The server answered with a status this call does not expect.

    Args:
        code: the status.
        message: the server's status text.
    """

    def __init__(self, code: StatusCode, message: str, *, rpc: str | None = None) -> None:
        where = f"{rpc}: " if rpc else ""
        detail = f": {message}" if message else ""
        super().__init__(
            f"{where}server answered with unexpected status {code.name} ({int(code)}){detail}",
            code=code,
            status_message=message,
        )


class MalformedResponseError(ClientError):
    """The server's reply is missing something the protocol requires (a result with no
    outcome, an extend reply with no expiry, ...). Indicates a server bug."""


class BatchResultCountMismatchError(MalformedResponseError):
    """The server returned a different number of results than jobs were sent.

    Args:
        expected: the number of jobs sent.
        got: the number of results received.
    """

    def __init__(self, expected: int, got: int) -> None:
        super().__init__(
            f"the server returned {got} result(s) for a batch of {expected} job(s); "
            "the protocol requires one per job"
        )
        #: The number of jobs sent.
        self.expected = expected
        #: The number of results received.
        self.got = got


class MalformedServerInfoError(ClientError):
    """The server-info reply cannot be used (an empty version or no server time).

    Args:
        reason: what is wrong with it.
    """

    def __init__(self, reason: str) -> None:
        super().__init__(f"the server returned malformed server info: {reason}")
        #: What is wrong with the reply.
        self.reason = reason


class EmptyBatchError(ClientError, InvalidArgumentError):
    """An enqueue was called with no jobs. Raised before any RPC: the server would refuse
    the empty batch anyway. Also an :class:`InvalidArgumentError`."""

    def __init__(self) -> None:
        super().__init__("cannot enqueue an empty batch: pass at least one EnqueueRequest")


class InvalidApiKeyError(ClientError, InvalidArgumentError):
    """The API key cannot be sent as an HTTP header value. Raised by :func:`connect`
    before any network activity. Also an :class:`InvalidArgumentError` (and so a
    :class:`ValueError`), since it is a bad argument.

    The key itself is never included in the message.

    Args:
        reason: what is wrong, for example ``"it contains a line break"``.
    """

    def __init__(self, reason: str = "it is not a valid HTTP header value") -> None:
        super().__init__(f"the API key cannot be used: {reason}")
        #: What is wrong with the key.
        self.reason = reason


class RequestTooLargeError(InvalidRequestError, InvalidArgumentError):
    """The request is larger than the server takes in one message, so none of it was
    enqueued; sending it again cannot help (it is never retried). Also an
    :class:`InvalidArgumentError` (and so a :class:`ValueError`).

    gRPC servers bound a request's size (the sepp server and the reference server at
    16 MiB by default, ``[limits] max_message_bytes``; most other gRPC servers at 4 MiB)
    and refuse a larger one unread: tonic-based servers with OUT_OF_RANGE, grpc-go, grpcio
    and grpc-java with RESOURCE_EXHAUSTED. Either becomes this error, naming the limit,
    and the client remembers the limit: for ``remember_message_limit`` seconds (see
    :func:`connect`) an enqueue over it raises this error before anything is sent
    (:attr:`sent` is False, :attr:`code` None). The payload limit is named too when the
    client knows it (from :meth:`Client.server_info`, which the client calls once
    after such a refusal): the limit per job, usually far below the message limit.

    Args:
        rpc: the client method.
        size: the request's size in bytes (None if the server did not say).
        limit: the server's message limit in bytes (None if it did not say).
        sent: whether the request went to the server (False: refused before sending).
        jobs: the number of jobs in the request (a batch over the limit can be split).
        payload_limit: the server's (global) payload limit per job, if known.
    """

    def __init__(
        self,
        rpc: str,
        *,
        size: int | None,
        limit: int | None,
        sent: bool,
        jobs: int = 0,
        payload_limit: int | None = None,
        code: StatusCode | None = None,
        status_message: str | None = None,
    ) -> None:
        what = "the request is" if size is None else f"the request is {size} bytes,"
        if limit is None:
            text = f"{what} over the server's message size limit (the server did not say it)"
        else:
            text = f"{what} over the server's message limit of {limit} bytes"
        if sent:
            text += ", which refused it unread"
        else:
            text += " (not sent: the server stated this limit when it refused a request)"
        if payload_limit is not None:
            text += (
                f"; the server's payload limit is {payload_limit} bytes per job (a queue "
                "may set its own)"
            )
        if jobs > 1:
            text += f"; the batch of {jobs} jobs can be split"
        super().__init__(f"{rpc}: {text}", code=code, status_message=status_message)
        #: The request's size in bytes (None if the server did not say).
        self.size = size
        #: The server's message limit in bytes (None if the server did not say).
        self.limit = limit
        #: Whether the request was sent (False: refused by the client before sending).
        self.sent = sent
        #: The number of jobs in the request (0 when not an enqueue).
        self.jobs = jobs
        #: The server's global payload limit per job, when the client knows it.
        self.payload_limit = payload_limit


# ---------------------------------------------------------------------------- lease / reserve


class LeaseError(SeppError):
    """``ack``, ``nack`` or ``extend`` found that this worker no longer holds the lease.

    With a retrying :class:`RetryPolicy`, a :class:`JobNotFoundError` can also mean an
    earlier try of the same call succeeded and only its reply was lost, so it is not
    proof that the outcome was dropped.
    """


class JobNotFoundError(LeaseError):
    """No in-flight job has this id: it was already settled, its lease expired, it never
    existed, or a lost reply hid an earlier success of this same call (NOT_FOUND)."""


class AttemptMismatchError(LeaseError):
    """The job is in flight but under a newer attempt: the lease expired and the job was
    delivered again, possibly to another worker (FAILED_PRECONDITION)."""


class ReserveError(SeppError):
    """``reserve`` failed for a reason specific to reserving."""


class UnknownQueuesError(ReserveError):
    """The server is in strict mode and at least one requested queue is not declared
    (FAILED_PRECONDITION on reserve). :attr:`status_message` names the queues."""


# ---------------------------------------------------------------------------- enqueue outcomes


class JobRejectedError(SeppError):
    """:meth:`Client.enqueue` delivered the job but the server refused it.

    Not a :class:`ClientError`: the call itself worked. ``rejection.transient`` says
    whether resending the same job later can succeed.

    Args:
        rejection: why the job was refused.
    """

    def __init__(self, rejection: JobRejection) -> None:
        super().__init__(f"the server rejected the job: {rejection}")
        #: Why the job was refused.
        self.rejection = rejection


_MAX_LISTED = 5


class BatchValidationError(SeppError):
    """:meth:`Client.enqueue_atomic` was refused: at least one job failed validation, so
    no job of the batch was enqueued.

    Args:
        errors: every refused job, with its index in the request.
    """

    def __init__(self, errors: Sequence[JobValidationError]) -> None:
        listed = "; ".join(str(err) for err in errors[:_MAX_LISTED])
        more = f"; and {len(errors) - _MAX_LISTED} more" if len(errors) > _MAX_LISTED else ""
        super().__init__(
            f"atomic batch refused, nothing was enqueued: {len(errors)} job(s) failed "
            f"validation: {listed}{more}"
        )
        #: Every refused job with its index in the request, in the server's order.
        self.errors: list[JobValidationError] = list(errors)


# ---------------------------------------------------------------------------- worker / decoding


class DuplicateHandlerError(SeppError):
    """A handler is already registered for this job type.

    Args:
        job_type: the job type registered twice.
    """

    def __init__(self, job_type: str) -> None:
        super().__init__(
            f"a handler for job type {job_type!r} is already registered; "
            "use replace_handler() to swap it"
        )
        #: The job type registered twice.
        self.job_type = job_type


class JobConversionError(SeppError):
    """A job (or dead-letter record) from the server cannot be turned into a
    :class:`Job`: a field does not decode (a time beyond year 9999, a string that is
    not UTF-8, a wrong wire type), or a required one is missing or out of range.

    Reserve and drain never raise it: they log it at ERROR and deliver the rest.
    :meth:`Client.reserve` also dead-letters such a job when its id and attempt could be
    read (otherwise it is redelivered when its lease expires); a drained record is gone
    from the server either way. So this is normally only seen in logs.

    Args:
        reason: which field is wrong and how, for example
            ``"Job.scheduled_at: timestamp out of range"``.
        job_id: the job's id, if it could be read.
        attempt: the job's attempt (the final one, for a dead letter), if it could be
            read.
        queue: the job's queue, if it could be read.
        job_type: the job's type, if it could be read.
    """

    def __init__(
        self,
        reason: str,
        *,
        job_id: str | None = None,
        attempt: int | None = None,
        queue: str | None = None,
        job_type: str | None = None,
    ) -> None:
        which = f"job {job_id!r}" if job_id else "a job"
        known = [
            f"{label} {value!r}" if isinstance(value, str) else f"{label} {value}"
            for label, value in (("attempt", attempt), ("queue", queue), ("job type", job_type))
            if value
        ]
        if known:
            which += f" ({', '.join(known)})"
        super().__init__(f"cannot decode {which} from the server: {reason}")
        #: Which field is wrong and how.
        self.reason = reason
        #: The job's id, if it could be read.
        self.job_id = job_id
        #: The job's attempt, if it could be read.
        self.attempt = attempt
        #: The job's queue, if it could be read.
        self.queue = queue
        #: The job's type, if it could be read.
        self.job_type = job_type


# ---------------------------------------------------------------------------- handler outcome


class HandlerError(Exception):
    """Raise from a worker handler to nack the job with a specific retry decision.

    Build it with :meth:`retry`, :meth:`retry_after` or :meth:`permanent`; the worker
    nacks with :attr:`directive` and sends :attr:`reason`. Any other exception from a
    handler is also a nack, with a backoff.

    Deliberately **not** a :class:`SeppError`: it is an outcome your code chooses, not a
    failure of sepp. Keeping it apart means ``except SeppError`` around client calls
    inside a handler cannot swallow it, and the worker never confuses it with its own
    errors. (sepp-py makes the same choice.)

    Args:
        reason: why the job failed; sent with the nack (an empty one is left off).
        directive: what the server should do; default: the queue's retry policy.
    """

    def __init__(self, reason: str, directive: RetryDirective | None = None) -> None:
        self.reason = reason
        self.directive = directive if directive is not None else RetryDirective.default()
        if not isinstance(self.directive, RetryDirective):
            raise InvalidArgumentTypeError(
                f"directive must be a RetryDirective, got {type(self.directive).__name__}"
            )
        super().__init__(reason)

    @classmethod
    def retry(cls, reason: str) -> HandlerError:
        """Retry under the queue's retry policy."""
        return cls(reason, RetryDirective.default())

    @classmethod
    def retry_after(cls, reason: str, seconds: float) -> HandlerError:
        """Retry no sooner than ``seconds`` from now.

        Raises:
            ValueError: if ``seconds`` is negative or not finite.
        """
        return cls(reason, RetryDirective.after(seconds))

    @classmethod
    def permanent(cls, reason: str) -> HandlerError:
        """Do not retry: dead-letter the job now."""
        return cls(reason, RetryDirective.dead_letter())

    def __str__(self) -> str:
        match self.directive.kind:
            case "after":
                how = f"retry after {self.directive.delay:g}s"
            case "dead_letter":
                how = "dead-letter"
            case _:
                how = "retry"
        return f"{self.reason or 'handler failed'} ({how})"


# ---------------------------------------------------------------------------- status mapping

_LEASE_RPCS = frozenset({"ack", "nack", "extend"})

_WHAT: dict[StatusCode, tuple[type[ClientError], str]] = {
    StatusCode.UNAVAILABLE: (TransportError, "the server is unavailable"),
    StatusCode.DEADLINE_EXCEEDED: (TransportError, "the deadline passed before a reply"),
    StatusCode.ABORTED: (TransportError, "the call was aborted"),
    StatusCode.CANCELLED: (TransportError, "the call was cancelled"),
    StatusCode.UNAUTHENTICATED: (UnauthenticatedError, "not authenticated"),
    StatusCode.PERMISSION_DENIED: (UnauthenticatedError, "permission denied"),
    StatusCode.RESOURCE_EXHAUSTED: (OverloadedError, "the server is overloaded"),
    StatusCode.INVALID_ARGUMENT: (InvalidRequestError, "the server refused the request"),
    StatusCode.INTERNAL: (ServerInternalError, "the server failed internally"),
    StatusCode.DATA_LOSS: (ServerInternalError, "the server reported data loss"),
    StatusCode.UNKNOWN: (ServerInternalError, "the server failed with an unknown error"),
}


def _normalise_rpc(rpc: str) -> str:
    # Accept "ack", "Ack" and "/sepp.v1.QueueService/Ack" alike.
    return rpc.rsplit("/", 1)[-1].lower()


def error_from_status(code: int, message: str, *, rpc: str) -> SeppError:
    """Map a non-OK gRPC status onto the most specific sepp-anyio error (internal).

    Implements the error taxonomy (peer-clients §2.1 and §2.2): the RPC-specific rows
    first (``ack``/``nack``/``extend``: NOT_FOUND and FAILED_PRECONDITION; ``reserve``:
    FAILED_PRECONDITION), then a server's refusal of a request over its message limit
    (:class:`RequestTooLargeError`, recognised by its text), then the general table. A
    code outside the 17 known ones is treated as UNKNOWN, as the gRPC spec asks of clients.

    Args:
        code: the numeric status (a :class:`StatusCode` or a plain int).
        message: the status details, possibly empty.
        rpc: the client method (``"ack"``) or gRPC method name (``"Ack"`` or the full
            path); used for the RPC-specific rows and in the message.

    Returns:
        the error to raise (the caller raises it ``from`` the transport error).
    """
    try:
        status = StatusCode(code)
        unrecognised = ""
    except ValueError:
        status = StatusCode.UNKNOWN
        unrecognised = f" [unrecognised status {code}]"
    name = _normalise_rpc(rpc)
    detail = (f": {message}" if message else "") + unrecognised

    if name in _LEASE_RPCS:
        if status == StatusCode.NOT_FOUND:
            return JobNotFoundError(
                f"{rpc}: no in-flight job with this id (already acked or nacked, lease "
                "expired, never existed, or an earlier try of this call succeeded and its "
                f"reply was lost){detail}",
                code=status,
                status_message=message,
            )
        if status == StatusCode.FAILED_PRECONDITION:
            return AttemptMismatchError(
                f"{rpc}: attempt mismatch, the job was redelivered and this lease is no "
                f"longer valid{detail}",
                code=status,
                status_message=message,
            )
    if name == "reserve" and status == StatusCode.FAILED_PRECONDITION:
        return UnknownQueuesError(
            f"{rpc}: the server is in strict mode and does not know some requested "
            f"queue(s){detail}",
            code=status,
            status_message=message,
        )
    refusal = size_refusal(status, message)
    if refusal is not None:
        # A request over the server's message limit: OUT_OF_RANGE from tonic, and
        # RESOURCE_EXHAUSTED (which would read as an overloaded server) from the others.
        return RequestTooLargeError(
            rpc,
            size=refusal.size,
            limit=refusal.limit,
            sent=True,
            code=status,
            status_message=message,
        )
    mapped = _WHAT.get(status)
    if mapped is None:
        return UnexpectedStatusError(status, message, rpc=rpc)
    cls, what = mapped
    return cls(f"{rpc}: {what} ({status.name}){detail}", code=status, status_message=message)
