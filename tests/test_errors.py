"""The exception tree, the status -> error taxonomy and HandlerError."""

from __future__ import annotations

import copy
import pickle

import grpclib.const
import pytest

from sepp_anyio._model import _errors
from sepp_anyio._model._errors import (
    KEYLESS_ENQUEUE_RETRYABLE_CODES,
    RETRYABLE_CODES,
    AttemptMismatchError,
    BatchResultCountMismatchError,
    BatchValidationError,
    ClientError,
    ConnectError,
    DuplicateHandlerError,
    EmptyBatchError,
    HandlerError,
    InvalidApiKeyError,
    InvalidArgumentError,
    InvalidArgumentTypeError,
    InvalidRequestError,
    JobConversionError,
    JobNotFoundError,
    JobRejectedError,
    LeaseError,
    MalformedResponseError,
    MalformedServerInfoError,
    OverloadedError,
    RequestTooLargeError,
    ReserveError,
    SeppError,
    ServerInternalError,
    StatusCode,
    TransportError,
    UnauthenticatedError,
    UnexpectedStatusError,
    UnknownQueuesError,
    error_from_status,
)
from sepp_anyio._model._rejections import JobValidationError, QueueFull, UnknownQueue
from sepp_anyio._model._retries import RetryDirective
from sepp_anyio._model._size_refusal import SizeRefusal, size_refusal

S = StatusCode

# ---------------------------------------------------------------------------- StatusCode


def test_status_code_mirrors_grpc_numbering() -> None:
    assert len(StatusCode) == 17
    for status in grpclib.const.Status:
        assert StatusCode[status.name] == status.value


# ---------------------------------------------------------------------------- the tree

TREE: list[tuple[type[BaseException], type[BaseException]]] = [
    (ClientError, SeppError),
    (ConnectError, ClientError),
    (TransportError, ClientError),
    (UnauthenticatedError, ClientError),
    (OverloadedError, ClientError),
    (InvalidRequestError, ClientError),
    (ServerInternalError, ClientError),
    (UnexpectedStatusError, ClientError),
    (MalformedResponseError, ClientError),
    (BatchResultCountMismatchError, MalformedResponseError),
    (MalformedServerInfoError, ClientError),
    (EmptyBatchError, ClientError),
    (InvalidApiKeyError, ClientError),
    (InvalidApiKeyError, ValueError),
    (InvalidApiKeyError, InvalidArgumentError),
    (EmptyBatchError, InvalidArgumentError),
    (RequestTooLargeError, InvalidRequestError),
    (RequestTooLargeError, ClientError),
    (RequestTooLargeError, InvalidArgumentError),
    (RequestTooLargeError, ValueError),
    (InvalidArgumentError, SeppError),
    (InvalidArgumentError, ValueError),
    (InvalidArgumentTypeError, SeppError),
    (InvalidArgumentTypeError, TypeError),
    (LeaseError, SeppError),
    (JobNotFoundError, LeaseError),
    (AttemptMismatchError, LeaseError),
    (ReserveError, SeppError),
    (UnknownQueuesError, ReserveError),
    (JobRejectedError, SeppError),
    (BatchValidationError, SeppError),
    (DuplicateHandlerError, SeppError),
    (JobConversionError, SeppError),
]


@pytest.mark.parametrize(("child", "parent"), TREE, ids=lambda c: c.__name__)
def test_tree_shape(child: type[BaseException], parent: type[BaseException]) -> None:
    assert issubclass(child, parent)


def test_domain_errors_are_not_client_errors() -> None:
    for cls in (LeaseError, ReserveError, JobRejectedError, BatchValidationError):
        assert not issubclass(cls, ClientError)


def test_handler_error_is_deliberately_not_a_sepp_error() -> None:
    assert issubclass(HandlerError, Exception)
    assert not issubclass(HandlerError, SeppError)


def test_module_docstring_draws_every_exception() -> None:
    doc = _errors.__doc__ or ""
    for name in _errors.__all__:
        obj = getattr(_errors, name)
        if isinstance(obj, type) and issubclass(obj, BaseException):
            assert name in doc, name


# ---------------------------------------------------------------------------- status mapping

GENERAL: list[tuple[StatusCode, type[SeppError]]] = [
    (S.UNAVAILABLE, TransportError),
    (S.DEADLINE_EXCEEDED, TransportError),
    (S.ABORTED, TransportError),
    (S.CANCELLED, TransportError),
    (S.UNAUTHENTICATED, UnauthenticatedError),
    (S.PERMISSION_DENIED, UnauthenticatedError),
    (S.RESOURCE_EXHAUSTED, OverloadedError),
    (S.INVALID_ARGUMENT, InvalidRequestError),
    (S.INTERNAL, ServerInternalError),
    (S.DATA_LOSS, ServerInternalError),
    (S.UNKNOWN, ServerInternalError),
    (S.NOT_FOUND, UnexpectedStatusError),
    (S.FAILED_PRECONDITION, UnexpectedStatusError),
    (S.ALREADY_EXISTS, UnexpectedStatusError),
    (S.OUT_OF_RANGE, UnexpectedStatusError),
    (S.UNIMPLEMENTED, UnexpectedStatusError),
    (S.OK, UnexpectedStatusError),
]
assert {code for code, _ in GENERAL} == set(StatusCode)

GENERAL_RPCS = ["enqueue", "enqueue_batch", "enqueue_atomic", "get_server_info", "drain"]


@pytest.mark.parametrize("rpc", GENERAL_RPCS)
@pytest.mark.parametrize(("code", "expected"), GENERAL, ids=lambda v: getattr(v, "name", ""))
def test_general_table(rpc: str, code: StatusCode, expected: type[SeppError]) -> None:
    err = error_from_status(int(code), "the details", rpc=rpc)
    assert type(err) is expected
    assert err.code is code
    assert err.status_message == "the details"
    text = str(err)
    assert rpc in text
    assert code.name in text
    assert "the details" in text


def _lease_expected(code: StatusCode) -> type[SeppError]:
    if code is S.NOT_FOUND:
        return JobNotFoundError
    if code is S.FAILED_PRECONDITION:
        return AttemptMismatchError
    return dict(GENERAL)[code]


@pytest.mark.parametrize("rpc", ["ack", "nack", "extend", "Ack", "/sepp.v1.QueueService/Nack"])
@pytest.mark.parametrize("code", list(StatusCode), ids=lambda c: c.name)
def test_lease_rpc_table(rpc: str, code: StatusCode) -> None:
    err = error_from_status(int(code), "msg", rpc=rpc)
    assert type(err) is _lease_expected(code)
    assert err.code is code
    assert err.status_message == "msg"
    assert rpc in str(err)


@pytest.mark.parametrize("rpc", ["reserve", "Reserve"])
@pytest.mark.parametrize("code", list(StatusCode), ids=lambda c: c.name)
def test_reserve_table(rpc: str, code: StatusCode) -> None:
    err = error_from_status(int(code), "queue 'x' is not declared", rpc=rpc)
    if code is S.FAILED_PRECONDITION:
        assert type(err) is UnknownQueuesError
        assert "queue 'x' is not declared" in str(err)
    else:
        assert type(err) is dict(GENERAL)[code]
    assert err.code is code


def test_not_found_outside_lease_rpcs_is_unexpected() -> None:
    err = error_from_status(5, "nope", rpc="reserve")
    assert isinstance(err, UnexpectedStatusError)
    assert err.code is S.NOT_FOUND
    assert err.status_message == "nope"


def test_lease_not_found_message_mentions_lost_reply_ambiguity() -> None:
    err = error_from_status(5, "", rpc="ack")
    assert "reply was lost" in str(err)
    assert err.status_message == ""


def test_unrecognised_code_is_treated_as_unknown() -> None:
    err = error_from_status(42, "weird", rpc="enqueue")
    assert isinstance(err, ServerInternalError)
    assert err.code is S.UNKNOWN
    assert err.status_message == "weird"
    assert "unrecognised status 42" in str(err)


def test_empty_status_message_reads_cleanly() -> None:
    err = error_from_status(14, "", rpc="enqueue")
    assert str(err) == "enqueue: the server is unavailable (UNAVAILABLE)"


def test_retryable_code_sets() -> None:
    assert (
        frozenset({S.UNAVAILABLE, S.DEADLINE_EXCEEDED, S.ABORTED, S.RESOURCE_EXHAUSTED})
        == RETRYABLE_CODES
    )
    assert frozenset({S.UNAVAILABLE, S.RESOURCE_EXHAUSTED}) == KEYLESS_ENQUEUE_RETRYABLE_CODES
    assert S.CANCELLED not in RETRYABLE_CODES
    # IntEnum members hash like ints, so raw numbers work for membership tests too.
    assert 14 in RETRYABLE_CODES


# ---------------------------------------------------------------------------- individual errors


def test_client_raised_errors_have_no_status() -> None:
    for err in (EmptyBatchError(), ConnectError("h:1", "refused"), JobConversionError("x")):
        assert err.code is None
        assert err.status_message is None


def test_connect_error() -> None:
    err = ConnectError("127.0.0.1:50051", "timed out")
    assert err.addr == "127.0.0.1:50051"
    assert err.reason == "timed out"
    assert str(err) == "could not connect to the sepp server at 127.0.0.1:50051: timed out"


def test_unexpected_status_error() -> None:
    err = UnexpectedStatusError(S.UNIMPLEMENTED, "no such method")
    assert err.code is S.UNIMPLEMENTED
    assert err.status_message == "no such method"
    assert "UNIMPLEMENTED (12)" in str(err)
    assert "no such method" in str(err)


def test_batch_result_count_mismatch() -> None:
    err = BatchResultCountMismatchError(3, 2)
    assert (err.expected, err.got) == (3, 2)
    assert isinstance(err, MalformedResponseError)
    assert "2 result(s) for a batch of 3" in str(err)


def test_invalid_api_key_error_is_a_value_error_and_hides_the_key() -> None:
    err = InvalidApiKeyError("it contains a line break")
    assert isinstance(err, ValueError)
    assert str(err) == "the API key cannot be used: it contains a line break"
    assert "not a valid HTTP header value" in str(InvalidApiKeyError())


def test_malformed_server_info_error() -> None:
    err = MalformedServerInfoError("server_version is empty")
    assert err.reason == "server_version is empty"
    assert "server_version is empty" in str(err)


def test_empty_batch_error() -> None:
    assert "empty batch" in str(EmptyBatchError())


def test_job_rejected_error_carries_the_rejection() -> None:
    rejection = QueueFull("emails", 100)
    err = JobRejectedError(rejection)
    assert err.rejection is rejection
    assert str(err) == "the server rejected the job: queue 'emails' is full (max depth 100)"


def test_batch_validation_error_lists_failures() -> None:
    errors = [JobValidationError(i, UnknownQueue(f"q{i}")) for i in range(7)]
    err = BatchValidationError(errors)
    assert err.errors == errors
    text = str(err)
    assert "7 job(s) failed validation" in text
    assert "job 0: queue 'q0'" in text
    assert "job 4: queue 'q4'" in text
    assert "q5" not in text
    assert "and 2 more" in text


def test_batch_validation_error_copies_the_list() -> None:
    errors = [JobValidationError(0, UnknownQueue("q"))]
    err = BatchValidationError(errors)
    errors.clear()
    assert len(err.errors) == 1


def test_duplicate_handler_error() -> None:
    err = DuplicateHandlerError("send_welcome")
    assert err.job_type == "send_welcome"
    assert "'send_welcome'" in str(err)
    assert "replace_handler" in str(err)


def test_job_conversion_error() -> None:
    err = JobConversionError("priority 12 is out of range (0-9)", job_id="abc")
    assert err.job_id == "abc"
    assert err.reason == "priority 12 is out of range (0-9)"
    assert str(err) == "cannot decode job 'abc' from the server: priority 12 is out of range (0-9)"
    assert "cannot decode a job" in str(JobConversionError("the job has no id"))


# ---------------------------------------------------------------------------- HandlerError


def test_handler_error_retry() -> None:
    err = HandlerError.retry("busy")
    assert err.reason == "busy"
    assert err.directive == RetryDirective.default()
    assert str(err) == "busy (retry)"


def test_handler_error_retry_after() -> None:
    err = HandlerError.retry_after("rate limited", 5.0)
    assert err.directive == RetryDirective.after(5.0)
    assert err.directive.delay == 5.0
    assert str(err) == "rate limited (retry after 5s)"


def test_handler_error_permanent() -> None:
    err = HandlerError.permanent("bad input")
    assert err.directive == RetryDirective.dead_letter()
    assert str(err) == "bad input (dead-letter)"


def test_handler_error_defaults_to_queue_policy() -> None:
    assert HandlerError("x").directive.kind == "default"
    assert str(HandlerError("")) == "handler failed (retry)"


@pytest.mark.parametrize("seconds", [-1.0, float("inf"), float("nan")])
def test_handler_error_retry_after_validates(seconds: float) -> None:
    with pytest.raises(ValueError, match="delay"):
        HandlerError.retry_after("x", seconds)


def test_handler_error_rejects_a_non_directive() -> None:
    with pytest.raises(TypeError, match="RetryDirective"):
        HandlerError("x", "dead_letter")  # type: ignore[arg-type]


def test_handler_error_can_be_raised_and_caught() -> None:
    with pytest.raises(HandlerError) as info:
        raise HandlerError.permanent("nope")
    assert info.value.directive.kind == "dead_letter"


def test_error_from_status_takes_a_status_code_or_an_int() -> None:
    for code in (S.NOT_FOUND, 5):
        err = error_from_status(code, "gone", rpc="ack")
        assert isinstance(err, JobNotFoundError)
        assert err.code is S.NOT_FOUND


# ---------------------------------------------------------------------------- message size

TONIC = (
    "Error, decoded message length too large: found 20000054 bytes, the limit is: 16777216 bytes"
)

#: What each kind of gRPC server says when a request is over its message limit.
SIZE_REFUSALS: list[tuple[str, StatusCode, str, SizeRefusal]] = [
    ("tonic-and-reference", S.OUT_OF_RANGE, TONIC, SizeRefusal(20000054, 16777216)),
    (
        "grpc-go",
        S.RESOURCE_EXHAUSTED,
        "grpc: received message larger than max (20000054 vs. 4194304)",
        SizeRefusal(20000054, 4194304),
    ),
    (
        "grpc-go-decompressed",
        S.RESOURCE_EXHAUSTED,
        "grpc: received message after decompression larger than max (5000000 vs. 4194304)",
        SizeRefusal(5000000, 4194304),
    ),
    (
        "grpcio",
        S.RESOURCE_EXHAUSTED,
        "SERVER: Received message larger than max (20000054 vs. 4194304)",
        SizeRefusal(20000054, 4194304),
    ),
    (
        "grpc-java",
        S.RESOURCE_EXHAUSTED,
        "gRPC message exceeds maximum size 4194304: 20000054",
        SizeRefusal(20000054, 4194304),
    ),
    (
        "grpc-dotnet",
        S.RESOURCE_EXHAUSTED,
        "Received message exceeds the maximum configured message size.",
        SizeRefusal(None, None),
    ),
]


@pytest.mark.parametrize(
    ("code", "text", "refusal"), [c[1:] for c in SIZE_REFUSALS], ids=[c[0] for c in SIZE_REFUSALS]
)
def test_every_servers_size_refusal_is_a_request_too_large_error(
    code: StatusCode, text: str, refusal: SizeRefusal
) -> None:
    assert size_refusal(int(code), text) == refusal
    err = error_from_status(int(code), text, rpc="enqueue_batch")
    assert type(err) is RequestTooLargeError
    assert isinstance(err, InvalidRequestError) and isinstance(err, ValueError)
    assert (err.size, err.limit, err.sent, err.code, err.status_message) == (
        refusal.size,
        refusal.limit,
        True,
        code,
        text,
    )
    if refusal.limit is not None:
        assert str(err) == (
            f"enqueue_batch: the request is {refusal.size} bytes, over the server's message "
            f"limit of {refusal.limit} bytes, which refused it unread"
        )
    else:
        assert str(err) == (
            "enqueue_batch: the request is over the server's message size limit (the server "
            "did not say it), which refused it unread"
        )


@pytest.mark.parametrize(
    ("code", "text"),
    [
        (S.RESOURCE_EXHAUSTED, "the server is overloaded"),
        (S.RESOURCE_EXHAUSTED, "grpc: trying to send message larger than max (9 vs. 4)"),
        (S.OUT_OF_RANGE, "offset out of range"),
        (S.OUT_OF_RANGE, ""),
        (S.INTERNAL, TONIC),  # the text alone is not enough: the status must fit it
        # A number too long to be a size (and to convert cheaply) is no size refusal.
        (S.OUT_OF_RANGE, TONIC.replace("20000054", "9" * 5000)),
    ],
)
def test_other_statuses_keep_their_mapping(code: StatusCode, text: str) -> None:
    assert size_refusal(int(code), text) is None
    assert type(error_from_status(int(code), text, rpc="enqueue")) is not RequestTooLargeError


def test_a_request_too_large_error_names_the_payload_limit_and_the_batch() -> None:
    err = RequestTooLargeError(
        "enqueue_atomic", size=70000, limit=65536, sent=False, jobs=10, payload_limit=16384
    )
    assert str(err) == (
        "enqueue_atomic: the request is 70000 bytes, over the server's message limit of 65536 "
        "bytes (not sent: the server stated this limit when it refused a request); the "
        "server's payload limit is 16384 bytes per job (a queue may set its own); the batch "
        "of 10 jobs can be split"
    )
    assert (err.code, err.status_message, err.jobs, err.payload_limit) == (None, None, 10, 16384)


# ---------------------------------------------------------------------------- pickling

SAMPLES: list[SeppError] = [
    SeppError("root", code=S.INTERNAL, status_message="x"),
    ConnectError("h:1", "refused"),
    UnexpectedStatusError(S.UNIMPLEMENTED, "nope", rpc="ack"),
    BatchResultCountMismatchError(2, 1),
    MalformedServerInfoError("server_version is empty"),
    EmptyBatchError(),
    InvalidApiKeyError("it contains a line break"),
    JobRejectedError(QueueFull("q", 3)),
    BatchValidationError([JobValidationError(0, UnknownQueue("q"))]),
    DuplicateHandlerError("t"),
    JobConversionError("bad", job_id="j"),
    error_from_status(14, "down", rpc="enqueue"),
    error_from_status(5, "gone", rpc="ack"),
    error_from_status(9, "strict", rpc="reserve"),
    RequestTooLargeError("enqueue_batch", size=3, limit=2, sent=False, jobs=2, payload_limit=1),
    error_from_status(
        11,
        "Error, decoded message length too large: found 3 bytes, the limit is: 2 bytes",
        rpc="enqueue_batch",
    ),
]


@pytest.mark.parametrize("err", SAMPLES, ids=lambda e: type(e).__name__)
def test_errors_survive_pickle_and_copy(err: SeppError) -> None:
    for clone in (pickle.loads(pickle.dumps(err)), copy.copy(err)):
        assert type(clone) is type(err)
        assert str(clone) == str(err)
        assert vars(clone) == vars(err)


def test_handler_error_survives_pickle() -> None:
    clone = pickle.loads(pickle.dumps(HandlerError.retry_after("slow", 2.0)))
    assert clone.reason == "slow"
    assert clone.directive == RetryDirective.after(2.0)
