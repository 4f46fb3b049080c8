"""The sepp client: every ``sepp.v1.QueueService`` RPC, with retries and typed errors.

::

    async with sepp_anyio.connect("127.0.0.1:50051", api_key="...") as client:
        ack = await client.enqueue(EnqueueRequest("emails", "send", payload=...))
        jobs = await client.reserve(["emails"], lease=30.0, wait=5.0)

The client runs on whatever anyio backend its caller runs on. It owns one
:class:`~sepp_anyio._transport.Channel` (an HTTP/2 connection multiplexing every
call) whose background tasks live inside ``async with``.
"""

from __future__ import annotations

import copy
import logging
import math
from collections.abc import Callable, Collection, Sequence
from contextlib import AsyncExitStack
from datetime import UTC, datetime
from types import TracebackType
from typing import Any, Protocol

import anyio

from .. import _otel
from .._grpc import GrpcError, MalformedReplyError
from .._model._checks import (
    check_count,
    check_queue_name,
    check_queue_names,
    check_seconds,
    check_str,
)
from .._model._dead_letters import DeadLetterRecord
from .._model._enqueue import EnqueueAck, EnqueueRequest
from .._model._errors import (
    KEYLESS_ENQUEUE_RETRYABLE_CODES,
    RETRYABLE_CODES,
    EmptyBatchError,
    InvalidArgumentTypeError,
    JobConversionError,
    JobRejectedError,
    MalformedResponseError,
    RequestTooLargeError,
    SeppError,
)
from .._model._job import Job, JobCtx, is_traced, set_traced
from .._model._limits import DEFAULT_REMEMBER_MESSAGE_LIMIT, request_size_bound
from .._model._rejections import JobRejection
from .._model._retries import RetryDirective, RetryPolicy
from .._model._server_info import ServerInfo
from .._model._trace import TraceContext
from .._proto.sepp import v1 as pb
from .._transport import UNARY_UNARY
from .._wire import _convert
from .._wire._codec import ElementWise, encode
from ._retry import retry_delay

__all__ = [
    "RESERVE_DEADLINE_SLACK",
    "UNREADABLE_JOB_NACK_TIMEOUT",
    "Client",
]

logger = logging.getLogger("sepp_anyio")

#: Added to a reserve's wait to form its deadline, so the client never gives up
#: before the server's long poll has answered.
RESERVE_DEADLINE_SLACK = 10.0

#: The most time :meth:`Client.reserve` spends dead-lettering the jobs of a reply that it
#: cannot read, shielded from cancellation, before it returns the others.
UNREADABLE_JOB_NACK_TIMEOUT = 5.0

_SERVICE = "/sepp.v1.QueueService/"
# Replies that carry a list of independent items are decoded item by item, so that one
# unreadable item does not make the whole reply (and every other item) unreadable.
_RESERVE_REPLY = ElementWise(pb.ReserveResponse)
_DRAIN_REPLY = ElementWise(pb.DrainDeadLettersResponse)
_ENQUEUE_BATCH_REPLY = ElementWise(pb.EnqueueBatchResponse)

_RETRY_ALL = frozenset(int(code) for code in RETRYABLE_CODES)
_RETRY_KEYLESS = frozenset(int(code) for code in KEYLESS_ENQUEUE_RETRYABLE_CODES)


class _ChannelLike(Protocol):
    """What the client needs from a channel (ours, or the in-memory one)."""

    def request(
        self,
        name: str,
        cardinality: Any,
        request_type: Any,
        reply_type: Any,
        *,
        timeout: float | None = ...,
        deadline: Any = ...,
        metadata: Any = ...,
    ) -> Any: ...


def _utcnow() -> datetime:
    return datetime.now(UTC)


def wall_clock_of(client: Client) -> Callable[[], datetime]:
    """``client``'s "now" on the server's clock (internal): what turns a lease's expiry into
    a duration; the worker's heartbeats and the cron scheduler take it as their clock."""
    return client._wall_clock


def _checked_batch(requests: Sequence[EnqueueRequest]) -> list[EnqueueRequest]:
    """The batch as a list; refused before any other work (span attributes, trace
    stamping, retry rules all read the requests) if it is empty or holds a non-request."""
    batch = list(requests)
    if not batch:
        raise EmptyBatchError()
    for index, request in enumerate(batch):
        if not isinstance(request, EnqueueRequest):
            raise InvalidArgumentTypeError(
                f"jobs[{index}] must be an EnqueueRequest, got {type(request).__name__}"
            )
    return batch


def _with_trace(request: EnqueueRequest, trace_context: TraceContext) -> EnqueueRequest:
    """A copy of ``request`` carrying ``trace_context``.

    Copied rather than rebuilt with ``dataclasses.replace``: the request was
    validated when it was made, and stamping must not validate it again.
    """
    stamped = copy.copy(request)
    object.__setattr__(stamped, "trace_context", trace_context)
    return stamped


def _check_ctx(ctx: object) -> None:
    if not isinstance(ctx, JobCtx):
        raise InvalidArgumentTypeError(
            f"ctx must be the JobCtx of a reserved job, got {type(ctx).__name__}"
        )


class _Lease:
    """The lease behind a reserved job's :class:`JobCtx` (see ``JobCtx.extend``)."""

    # Not the context: the context holds the lease, and a lease holding the context would
    # be a reference cycle per job for the garbage collector (see _LeaseLike.extend).
    __slots__ = ("_client", "known_expiry")

    def __init__(self, client: Client, ctx: JobCtx) -> None:
        self._client = client
        # Starts at the *granted* expiry of the reserve, which the server may
        # have clamped below the lease that was asked for.
        self.known_expiry: datetime = ctx.lease_expires_at

    async def extend(self, ctx: JobCtx, seconds: float) -> datetime:
        return await self._client.extend(ctx, seconds)


class Client:
    """A connection to a sepp server. Create it with :func:`connect`.

    Use it inside ``async with``; it is safe to share between any number of
    tasks (calls are multiplexed over one HTTP/2 connection). Leaving the
    block closes the connection; calls still running are cancelled with it.

    Errors: every method raises :class:`~sepp_anyio.SeppError` subclasses (see
    ``sepp_anyio._model._errors`` for the tree): for failures, and for bad arguments
    :class:`~sepp_anyio.InvalidArgumentError` / :class:`~sepp_anyio.InvalidArgumentTypeError`
    (also ``ValueError`` / ``TypeError``) before any I/O. Cancellation is never
    caught or converted: a cancelled call is abandoned (its HTTP/2 stream
    reset) and, for writes, may or may not have taken effect on the server.
    """

    def __init__(
        self,
        channel: _ChannelLike,
        *,
        label: str,
        rpc_timeout: float = 30.0,
        retry: RetryPolicy | None = None,
        exit_stack: AsyncExitStack | None = None,
        wall_clock: Callable[[], datetime] | None = None,
        remember_message_limit: float = DEFAULT_REMEMBER_MESSAGE_LIMIT,
    ) -> None:
        # Internal: use connect() (or sepp_anyio.testing for in-process servers).
        # wall_clock is "now" on the server's clock, used to turn a lease's
        # expiry instant into a duration; the in-process server passes its own
        # clock so that trio's MockClock drives both sides consistently.
        self._wall_clock = wall_clock if wall_clock is not None else _utcnow
        self._channel = channel
        self._stub = pb.QueueServiceStub(channel)
        # The RPCs whose replies carry lists, decoded item by item (see _element_wise).
        self._reserve_rpc = self._element_wise("Reserve", _RESERVE_REPLY)
        self._drain_rpc = self._element_wise("DrainDeadLetters", _DRAIN_REPLY)
        self._enqueue_batch_rpc = self._element_wise("EnqueueBatch", _ENQUEUE_BATCH_REPLY)
        self._label = label
        self._rpc_timeout = check_seconds(rpc_timeout, "rpc_timeout", minimum="positive")
        self._retry = retry if retry is not None else RetryPolicy()
        self._exit_stack = exit_stack
        self._remember_limit = check_seconds(remember_message_limit, "remember_message_limit")
        # The message limit the server stated when it last refused a request as too large,
        # checked before sending until _message_limit_until (anyio's clock); see connect().
        self._message_limit: int | None = None
        self._message_limit_until = -math.inf
        # The last ServerInfo read, for the payload limit in a RequestTooLargeError.
        self._server_info: ServerInfo | None = None

    def __repr__(self) -> str:
        return f"<sepp_anyio.Client {self._label}>"

    async def __aenter__(self) -> Client:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._exit_stack is not None:
            stack, self._exit_stack = self._exit_stack, None
            await stack.__aexit__(exc_type, exc, tb)

    # ------------------------------------------------------------ plumbing

    async def _unary(
        self,
        rpc: str,
        method: Any,
        request: Any,
        *,
        timeout: float,  # noqa: ASYNC109 (a gRPC deadline sent to the server, not a local wait)
        retry: bool,
        retry_codes: Collection[int] = _RETRY_ALL,
    ) -> Any:
        """One RPC (with its retries); call it inside the RPC's span, if any.

        The trace metadata is taken here, so that it names the current
        (client) span as the server span's parent.

        Cancelling it abandons the call: the lease may or may not have been extended;
        the old expiry still holds if it was not.
        """
        metadata = _otel.trace_metadata() or None
        policy = self._retry if retry else None
        # The tries in this frame, not in a helper's: every ack goes through here, and
        # each frame more costs at each suspension of the call.
        index = 0
        while True:
            try:
                return await method(request, timeout=timeout, metadata=metadata)
            except MalformedReplyError as exc:
                # Never retried: the same server would break the protocol the same way.
                raise MalformedResponseError(f"{rpc}: {exc.message}") from None
            except GrpcError as exc:
                # Raises the taxonomy error when this was the last try.
                delay = retry_delay(rpc, exc, index, policy=policy, retry_codes=retry_codes)
            # An ordinary sleep: cancelling the caller cancels it.
            await anyio.sleep(delay)
            index += 1

    def _element_wise(self, method: str, reply_type: ElementWise) -> Callable[..., Any]:
        """A call of ``method`` shaped like a stub method, whose reply is decoded item by
        item (see ``_wire._codec.ElementWise``); the generated stub would decode it as one
        strict whole."""
        path = _SERVICE + method

        async def call(request: Any, *, timeout: float, metadata: Any) -> Any:  # noqa: ASYNC109
            async with self._channel.request(
                path,
                UNARY_UNARY,
                type(request),
                reply_type,
                timeout=timeout,
                metadata=metadata,
            ) as stream:
                await stream.send_message(request, end=True)
                reply = await stream.recv_message()
            if reply is None:  # pragma: no cover - the unary streams raise instead
                raise MalformedReplyError(f"the server sent no {reply_type.__name__}")
            return reply

        return call

    @staticmethod
    def _settle_attributes(ctx: JobCtx, operation: str) -> dict[str, Any]:
        attributes: dict[str, Any] = {
            "messaging.operation.type": operation,
            "messaging.operation.name": operation,
            "messaging.destination.name": ctx.queue,
            "messaging.message.id": ctx.id,
            "sepp.job.type": ctx.job_type,
            "sepp.job.attempt": ctx.attempt,
        }
        if ctx.worker_id:
            attributes["messaging.client.id"] = ctx.worker_id
        return attributes

    @staticmethod
    def _stamp(requests: list[EnqueueRequest]) -> list[EnqueueRequest]:
        """Give jobs without a trace context the current span's (never overwrite)."""
        if all(request.trace_context is not None for request in requests):
            return requests
        current = TraceContext.from_current()
        if current is None:
            return requests
        return [
            request if request.trace_context is not None else _with_trace(request, current)
            for request in requests
        ]

    @staticmethod
    def _enqueue_attributes(requests: Sequence[EnqueueRequest]) -> dict[str, Any]:
        queues = sorted({request.queue for request in requests})
        return {
            "messaging.operation.type": "send",
            "messaging.destination.name": ",".join(queues),
            "messaging.batch.message_count": len(requests),
        }

    def _enqueue_retry_codes(self, requests: Sequence[EnqueueRequest]) -> frozenset[int]:
        # DEADLINE_EXCEEDED and ABORTED leave it unknown whether the batch was
        # committed: resending jobs without an idempotency key could enqueue
        # them twice, so those are retried only when every job has a key.
        if all(request.has_idempotency_key for request in requests):
            return _RETRY_ALL
        return _RETRY_KEYLESS

    # ------------------------------------------------------------ producing

    async def enqueue(self, request: EnqueueRequest) -> EnqueueAck:
        """Enqueue one job (a one-job batch on the wire).

        Cancelling it abandons the call: the job may or may not have been enqueued.
        Give it an ``idempotency_key`` to make enqueueing it again safe.

        Raises:
            JobRejectedError: the server refused the job; ``.rejection`` says why (a
                payload over the queue's limit: :class:`PayloadTooLarge`).
            RequestTooLargeError: the request is over the server's message limit (a
                ``ValueError`` too); nothing was enqueued, and when the limit is known
                from an earlier refusal, nothing was sent.
            ClientError: the call failed (after the retry policy's tries).
        """
        (result,) = await self.enqueue_batch([request])
        if isinstance(result, JobRejection):
            raise JobRejectedError(result)
        return result

    async def enqueue_batch(
        self, requests: Sequence[EnqueueRequest]
    ) -> list[EnqueueAck | JobRejection]:
        """Enqueue jobs best effort: each one is accepted or rejected on its own.

        Returns one :class:`EnqueueAck` or :class:`JobRejection` per request,
        in request order.

        The results are decoded one by one, but none can be left out (there is
        one per job, in order): a result that cannot be decoded fails the call,
        with an error naming its index and field and listing the jobs that the
        readable results accepted.

        Cancelling it abandons the call: any of the jobs may or may not have been
        enqueued. Jobs with an ``idempotency_key`` can be sent again safely.

        Raises:
            EmptyBatchError: ``requests`` is empty (no RPC is made).
            RequestTooLargeError: the request is over the server's message limit (a
                ``ValueError`` too); nothing was enqueued, and when the limit is known
                from an earlier refusal, nothing was sent.
            MalformedResponseError: the reply has the wrong number of results
                (``BatchResultCountMismatchError``), a result without outcome, or
                a result that cannot be decoded.
            ClientError: the call failed as a whole.
        """
        requests = _checked_batch(requests)
        reply = await self._send_batch("enqueue_batch", self._enqueue_batch_rpc, requests)
        results = _convert.enqueue_batch_results_from_pb(reply, expected=len(requests))
        for index, result in enumerate(results):
            if isinstance(result, JobRejection):
                logger.debug("job %d of the batch was rejected: %s", index, result)
        return results

    async def enqueue_atomic(self, requests: Sequence[EnqueueRequest]) -> list[EnqueueAck]:
        """Enqueue all the jobs or none of them.

        The reply is decoded as a whole (its acks are all or nothing anyway):
        one that cannot be decoded raises ``ServerInternalError`` naming the
        field, and it is then unknown whether the batch was committed.

        Cancelling it abandons the call: the batch may or may not have been committed
        (all of it or none). With idempotency keys, sending it again is safe.

        Raises:
            BatchValidationError: at least one job was refused, so nothing was
                enqueued; ``.errors`` lists every refused index and why.
            EmptyBatchError: ``requests`` is empty (no RPC is made).
            RequestTooLargeError: the request is over the server's message limit (a
                ``ValueError`` too); nothing was enqueued, and when the limit is known
                from an earlier refusal, nothing was sent.
            MalformedResponseError: the reply breaks the protocol.
            ClientError: the call failed as a whole.
        """
        requests = _checked_batch(requests)
        reply = await self._send_batch("enqueue_atomic", self._stub.enqueue_atomic, requests)
        return _convert.enqueue_atomic_from_pb(reply, expected=len(requests))

    async def _send_batch(self, rpc: str, method: Any, requests: list[EnqueueRequest]) -> Any:
        """The EnqueueBatch/EnqueueAtomic call shared by both: span, trace stamping,
        the delay resolved on the server's clock, and the keyless retry rule."""
        attributes = self._enqueue_attributes(requests)
        attributes["messaging.operation.name"] = "enqueue" if rpc == "enqueue_batch" else rpc
        span_name = "sepp.enqueue" if rpc == "enqueue_batch" else f"sepp.{rpc}"
        with _otel.client_span(span_name, attributes):
            message = _convert.enqueue_batch_request_to_pb(
                self._stamp(requests), now=self._wall_clock()
            )
            self._check_message_size(rpc, requests, message)
            try:
                return await self._unary(
                    rpc,
                    method,
                    message,
                    timeout=self._rpc_timeout,
                    retry=True,
                    retry_codes=self._enqueue_retry_codes(requests),
                )
            except RequestTooLargeError as exc:
                raise await self._refused_as_too_large(rpc, requests, message, exc) from None

    def _check_message_size(self, rpc: str, requests: list[EnqueueRequest], message: Any) -> None:
        """Refuse, before sending, a request over the message limit the server stated
        (see :meth:`_refused_as_too_large`), while it is remembered.

        Raises:
            RequestTooLargeError: the request is over the limit (``sent`` False).
        """
        limit = self._message_limit
        if limit is None:
            return
        if anyio.current_time() >= self._message_limit_until:
            self._message_limit = None
            return
        # Measured exactly (encoded once more) only when a cheap bound says it may be over:
        # the transport encodes the message anyway, and that costs about 2.5 ms per MiB.
        if request_size_bound(requests) <= limit:
            return
        size = len(encode(message))
        if size > limit:
            info = self._server_info
            raise RequestTooLargeError(
                rpc,
                size=size,
                limit=limit,
                sent=False,
                jobs=len(requests),
                payload_limit=None if info is None else info.max_payload_bytes,
            )

    async def _refused_as_too_large(
        self, rpc: str, requests: list[EnqueueRequest], message: Any, exc: RequestTooLargeError
    ) -> RequestTooLargeError:
        """The error to raise for the server's refusal ``exc`` of an enqueue as over its
        message limit: remembers the limit (so later ones are refused before sending) and
        names the payload limit, reading the server info once if it was never read.

        That read is the only call this adds, and only on this path (a refused request,
        at most once per ``remember_message_limit`` while requests stay over the limit):
        the message limit is advertised nowhere but in the refusal, so no info read at
        connect time could have given it. A failed read leaves the payload limit out.
        """
        if exc.limit is not None and self._remember_limit > 0:
            self._message_limit = exc.limit
            self._message_limit_until = anyio.current_time() + self._remember_limit
        info = self._server_info
        if info is None:
            try:
                info = await self._read_server_info(retry=False)
            except SeppError as failure:
                logger.debug("server info for the payload limit not read: %s", failure)
        size = exc.size
        if size is None:  # some servers do not say; the request's size is known here
            size = len(encode(message))
        return RequestTooLargeError(
            rpc,
            size=size,
            limit=exc.limit,
            sent=True,
            jobs=len(requests),
            payload_limit=None if info is None else info.max_payload_bytes,
            code=exc.code,
            status_message=exc.status_message,
        )

    # ------------------------------------------------------------ consuming

    async def reserve(
        self,
        queues: Sequence[str],
        *,
        lease: float,
        wait: float = 30.0,
        max_jobs: int | None = None,
        worker_id: str | None = None,
    ) -> list[Job]:
        """Lease up to ``max_jobs`` jobs, waiting up to ``wait`` seconds for one.

        Queues are tried in the order given. Returns as soon as at least one
        job is leased, and ``[]`` when the wait ends with none (or the server
        is shutting down). The server may clamp ``lease`` and ``wait``; each
        job's ``ctx.lease_expires_at`` is the lease actually granted. The
        call's deadline is ``wait`` + 10 s; it is never retried (a retry could
        lease more jobs than the caller will handle).

        The jobs of the reply are read one by one: a job that cannot be read
        (a field that does not decode, such as a time beyond year 9999, or a
        required field missing or out of range) is left out and logged at
        ERROR, and the others are still returned. When its id and attempt can
        be read, the reserve itself dead-letters it (a nack with
        ``RetryDirective.dead_letter()`` and a reason naming the field) before
        returning, so that it is not redelivered to every worker again and
        again; those nacks run concurrently, shielded from cancellation and
        bounded by 5 seconds in all, and a nack that
        fails is logged at ERROR (the job is then redelivered when its lease
        expires, as is a job without a readable id).

        Cancelling a reserve may still leave a job leased on the server if it
        had already answered; that job is redelivered when its lease expires.

        Raises:
            InvalidArgumentError: no ``queues``, a queue name the server would refuse
                (empty, ``.``, ``..``, a ``/`` or a control character), ``lease`` < 1 ms,
                ``wait`` < 0, ``max_jobs`` < 1, or an empty ``worker_id``.
            UnknownQueuesError: strict mode and an undeclared queue.
            ClientError: the call failed.
        """
        names = check_queue_names(queues)
        lease = check_seconds(lease, "lease", minimum="millisecond")
        wait = check_seconds(wait, "wait")
        if max_jobs is not None:
            check_count(max_jobs, "max_jobs")
        if worker_id is not None:
            check_str(worker_id, "worker_id")
        message = _convert.reserve_request_to_pb(
            names, lease=lease, wait=wait, max_jobs=max_jobs, worker_id=worker_id
        )
        attributes: dict[str, Any] = {
            "messaging.operation.type": "receive",
            "messaging.operation.name": "reserve",
            "messaging.destination.name": ",".join(names),
        }
        if worker_id:
            attributes["messaging.client.id"] = worker_id
        # Asked once for the reserve and for the jobs it brings (their process spans and
        # settles): asking costs a lookup of the environment while no SDK is installed.
        traced = _otel.tracing()
        with _otel.client_span("sepp.reserve", attributes, traced) as span:
            reply = await self._unary(
                "reserve",
                self._reserve_rpc,
                message,
                timeout=wait + RESERVE_DEADLINE_SLACK,
                retry=False,
            )
            if span is not None:
                span.set_attribute("messaging.batch.message_count", len(reply.jobs))
        jobs, errors = _convert.jobs_from_pb(
            reply, worker_id=worker_id, make_lease=lambda ctx: _Lease(self, ctx)
        )
        for job in jobs:
            set_traced(job.ctx, traced)
        if errors:
            await self._dead_letter_unreadable(errors, worker_id=worker_id)
        return jobs

    async def _dead_letter_unreadable(
        self, errors: list[JobConversionError], *, worker_id: str | None
    ) -> None:
        """Log each reserved job that cannot be read and dead-letter those that can be
        named (id and attempt); concurrently, shielded, bounded in all by
        UNREADABLE_JOB_NACK_TIMEOUT. Never raises (but for a bug)."""
        nackable: list[tuple[str, int, JobConversionError]] = []
        for error in errors:
            if error.job_id and error.attempt:
                logger.error("%s; dead-lettering it", error)
                nackable.append((error.job_id, error.attempt, error))
            else:
                logger.error(
                    "%s; skipped: without its id and attempt it cannot be dead-lettered, "
                    "so it is redelivered when its lease expires",
                    error,
                )
        if not nackable:
            return
        # Shielded: these jobs are leased to us, and a worker shutting down (which
        # cancels its reserve) must not leave them to be redelivered to everyone.
        bound = UNREADABLE_JOB_NACK_TIMEOUT
        with anyio.CancelScope(shield=True, deadline=anyio.current_time() + bound) as scope:
            async with anyio.create_task_group() as tg:
                for job_id, attempt, error in nackable:
                    tg.start_soon(self._dead_letter_one, job_id, attempt, error, worker_id)
        if scope.cancelled_caught:
            logger.error(
                "gave up dead-lettering %d unreadable reserved job(s) after %gs; they are "
                "redelivered when their leases expire",
                len(nackable),
                bound,
            )

    async def _dead_letter_one(
        self, job_id: str, attempt: int, error: JobConversionError, worker_id: str | None
    ) -> None:
        attributes: dict[str, Any] = {
            "messaging.operation.type": "nack",
            "messaging.operation.name": "nack",
            "messaging.message.id": job_id,
            "sepp.job.attempt": attempt,
            "sepp.nack.unreadable": True,
        }
        if worker_id:
            attributes["messaging.client.id"] = worker_id
        request = _convert.dead_letter_nack_to_pb(
            job_id,
            attempt,
            reason=f"sepp-anyio could not read the job: {error.reason}",
            worker_id=worker_id,
        )
        try:
            with _otel.client_span("sepp.nack", attributes):
                await self._unary(
                    "nack",
                    self._stub.nack,
                    request,
                    timeout=min(self._rpc_timeout, UNREADABLE_JOB_NACK_TIMEOUT),
                    retry=True,
                )
        except SeppError as exc:
            logger.error(
                "could not dead-letter unreadable job %r (attempt %d): %s", job_id, attempt, exc
            )

    async def ack(self, ctx: JobCtx) -> None:
        """Settle a job as done (it is deleted).

        Cancelling it abandons the call: the ack may or may not have reached the
        server; if it did not, the job is redelivered when its lease expires.

        Raises:
            JobNotFoundError: the job is no longer in flight (lease expired,
                already settled, or an earlier retried try succeeded).
            AttemptMismatchError: the job was redelivered to someone else.
            ClientError: the call failed.
        """
        _check_ctx(ctx)
        with _otel.client_span(
            "sepp.ack", lambda: self._settle_attributes(ctx, "ack"), is_traced(ctx)
        ):
            await self._unary(
                "ack",
                self._stub.ack,
                _convert.ack_request_to_pb(ctx),
                timeout=self._rpc_timeout,
                retry=True,
            )

    async def nack(
        self, ctx: JobCtx, retry: RetryDirective | None = None, reason: str = ""
    ) -> bool:
        """Give a job back: to be retried (now, after a delay) or dead-lettered.

        ``retry`` defaults to :meth:`RetryDirective.default` (the queue's retry
        policy). An empty ``reason`` is left off the wire. Returns whether the
        job was dead-lettered (always for ``RetryDirective.dead_letter()``, and
        when this was its last attempt).

        Cancelling it abandons the call: the nack may or may not have reached the
        server; if it did not, the job is redelivered when its lease expires.

        Raises:
            JobNotFoundError, AttemptMismatchError: as for :meth:`ack`.
            ClientError: the call failed.
        """
        _check_ctx(ctx)
        directive = retry if retry is not None else RetryDirective.default()
        if not isinstance(directive, RetryDirective):
            raise InvalidArgumentTypeError(
                f"retry must be a RetryDirective or None, got {type(directive).__name__}"
            )
        if not isinstance(reason, str):
            raise InvalidArgumentTypeError(f"reason must be a str, got {type(reason).__name__}")
        with _otel.client_span(
            "sepp.nack", lambda: self._settle_attributes(ctx, "nack"), is_traced(ctx)
        ) as span:
            reply = await self._unary(
                "nack",
                self._stub.nack,
                _convert.nack_request_to_pb(ctx, directive, reason=reason or None),
                timeout=self._rpc_timeout,
                retry=True,
            )
            if span is not None:
                span.set_attribute("sepp.nack.dead_lettered", bool(reply.dead_lettered))
        return _convert.nack_dead_lettered_from_pb(reply)

    async def extend(self, ctx: JobCtx, seconds: float) -> datetime:
        """Extend a job's lease to ``seconds`` from now; return the granted expiry.

        Unlike :meth:`JobCtx.extend`, this does **not** update the context's
        known expiry nor ``ctx.lease_expires_at``, so a worker's heartbeat
        does not see it; prefer ``ctx.extend(seconds)``.

        Raises:
            InvalidArgumentError: ``seconds`` is not > 0.
            JobNotFoundError, AttemptMismatchError: as for :meth:`ack`.
            MalformedResponseError: the reply has no expiry.
            ClientError: the call failed.
        """
        _check_ctx(ctx)
        seconds = check_seconds(seconds, "seconds", minimum="millisecond")
        with _otel.client_span(
            "sepp.extend", lambda: self._settle_attributes(ctx, "extend"), is_traced(ctx)
        ):
            reply = await self._unary(
                "extend",
                self._stub.extend,
                _convert.extend_request_to_pb(ctx, seconds),
                timeout=self._rpc_timeout,
                retry=True,
            )
        return _convert.extend_expiry_from_pb(reply)

    # ------------------------------------------------------------ admin

    async def drain_dead_letters(
        self, queue: str | None = None, max: int = 1
    ) -> list[DeadLetterRecord]:
        """Remove and return up to ``max`` dead letters, oldest first.

        **Destructive**: the records are deleted on the server, and the call
        is never retried (a lost reply would lose them twice over). ``max=0``
        returns ``[]`` without an RPC. Replay a record with
        ``client.enqueue(record.to_enqueue_request())``.

        The records are read one by one: a record that cannot be read (a field
        that does not decode, or a required one missing) is **not returned**
        and is logged at ERROR with what could be read of it (job id, queue,
        job type, final attempt); since draining removed it from the server,
        that log line is all that is left of it. The other records are
        returned.

        Cancelling it abandons the call: records the server had already drained are
        gone from the store and not returned (as with a lost reply).

        Raises:
            InvalidArgumentError: ``max`` < 0 or a ``queue`` name the server would refuse.
            ClientError: the call failed.
        """
        check_count(max, "max", minimum=0)
        if queue is not None:
            check_queue_name(queue, "queue")
        if max == 0:
            return []
        attributes = {
            "sepp.drain.queue": queue if queue is not None else "<all>",
            "sepp.drain.max": max,
        }
        with _otel.client_span("sepp.drain_dead_letters", attributes) as span:
            reply = await self._unary(
                "drain_dead_letters",
                self._drain_rpc,
                _convert.drain_request_to_pb(queue, max),
                timeout=self._rpc_timeout,
                retry=False,
            )
            if span is not None:
                span.set_attribute("sepp.drain.drained", len(reply.records))
        records, errors = _convert.dead_letters_from_pb(reply)
        for error in errors:
            logger.error("%s; the drained record is not returned and is gone", error)
        return records

    async def server_info(self) -> ServerInfo:
        """The server's version and limits.

        Cancelling it abandons the call; it changes nothing on the server.

        Raises:
            MalformedServerInfoError: the reply lacks a version or server time.
            ClientError: the call failed.
        """
        return await self._read_server_info(retry=True)

    async def _read_server_info(self, *, retry: bool) -> ServerInfo:
        with _otel.client_span("sepp.get_server_info", {}):
            reply = await self._unary(
                "server_info",
                self._stub.get_server_info,
                pb.GetServerInfoRequest(),
                timeout=self._rpc_timeout,
                retry=retry,
            )
        info = _convert.server_info_from_pb(reply)
        # Kept for the payload limit a RequestTooLargeError names.
        self._server_info = info
        return info
