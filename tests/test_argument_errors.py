"""Bad arguments raise errors of the one exception tree (that are also ValueError/TypeError).

Every place where the client, the public types, the payload codecs or the in-memory test
server validate an argument is called with a bad one here: ``except sepp.SeppError``
catches it, and so does ``except ValueError`` (or ``TypeError``), as before.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

import pytest

import sepp_anyio as sepp
from sepp_anyio import (
    EnqueueRequest,
    InvalidArgumentError,
    InvalidArgumentTypeError,
    Payload,
    RetryDirective,
    RetryPolicy,
    SeppError,
    TraceContext,
)
from sepp_anyio._cron import run_cron
from sepp_anyio._wire._convert import seconds_to_duration
from sepp_anyio.testing import open_in_memory_client

Bad = Callable[[], object]


class _NoJson:
    """A class neither pydantic nor msgspec can check (it has no fields they know)."""


_TASK = sepp.Task("q", "t", int)


def _cron(expr: str, **options: Any) -> sepp.Cron[int]:
    return sepp.Cron(expr, _TASK, lambda slot: 1, **options)


# (label, call, the builtin it must also be)
SYNC_CASES: list[tuple[str, Bad, type[Exception]]] = [
    ("EnqueueRequest: empty queue", lambda: EnqueueRequest("", "t"), ValueError),
    ("EnqueueRequest: queue '..'", lambda: EnqueueRequest("..", "t"), ValueError),
    ("EnqueueRequest: queue with '/'", lambda: EnqueueRequest("a/b", "t"), ValueError),
    ("EnqueueRequest: control char", lambda: EnqueueRequest("a\x01", "t"), ValueError),
    ("EnqueueRequest: queue not a str", lambda: EnqueueRequest(1, "t"), TypeError),  # type: ignore[arg-type]
    ("EnqueueRequest: lone surrogate", lambda: EnqueueRequest("q", "\ud800"), ValueError),
    ("EnqueueRequest: priority 12", lambda: EnqueueRequest("q", "t", priority=12), ValueError),
    (
        "EnqueueRequest: priority True",
        lambda: EnqueueRequest("q", "t", priority=True),
        TypeError,
    ),
    (
        "EnqueueRequest: payload not a Payload",
        lambda: EnqueueRequest("q", "t", payload=b"x"),  # type: ignore[arg-type]
        TypeError,
    ),
    (
        "EnqueueRequest: trace context not a TraceContext",
        lambda: EnqueueRequest("q", "t", trace_context="00-x"),  # type: ignore[arg-type]
        TypeError,
    ),
    (
        "EnqueueRequest: custom not a mapping",
        lambda: EnqueueRequest("q", "t", custom=[1]),  # type: ignore[arg-type]
        TypeError,
    ),
    (
        "EnqueueRequest: custom value of a wrong type",
        lambda: EnqueueRequest("q", "t", custom={"k": None}),  # type: ignore[dict-item]
        TypeError,
    ),
    (
        "EnqueueRequest: custom int beyond int64",
        lambda: EnqueueRequest("q", "t", custom={"k": 2**63}),
        ValueError,
    ),
    (
        "EnqueueRequest: scheduled_at and delay",
        lambda: EnqueueRequest("q", "t", scheduled_at=datetime.now(UTC), delay=1.0),
        ValueError,
    ),
    (
        "EnqueueRequest: scheduled_at not a datetime",
        lambda: EnqueueRequest("q", "t", scheduled_at=5),  # type: ignore[arg-type]
        TypeError,
    ),
    ("EnqueueRequest: negative delay", lambda: EnqueueRequest("q", "t", delay=-1), ValueError),
    (
        "EnqueueRequest: infinite delay",
        lambda: EnqueueRequest("q", "t", delay=float("inf")),
        ValueError,
    ),
    ("Payload: empty data", lambda: Payload(b"", "b"), ValueError),
    ("Payload: data not bytes", lambda: Payload("x", "b"), TypeError),  # type: ignore[arg-type]
    ("Payload: empty encoding", lambda: Payload(b"x", ""), ValueError),
    ("Payload.json: not JSON", lambda: Payload(b"x", "text/plain").json(), ValueError),
    ("TraceContext: malformed", lambda: TraceContext("nope"), ValueError),
    ("TraceContext: not a str", lambda: TraceContext(5), TypeError),  # type: ignore[arg-type]
    (
        "TraceContext: tracestate not a str",
        lambda: TraceContext("00-" + "1" * 32 + "-" + "2" * 16 + "-01", 5),  # type: ignore[arg-type]
        TypeError,
    ),
    ("RetryDirective: unknown kind", lambda: RetryDirective("later"), ValueError),  # type: ignore[arg-type]
    ("RetryDirective: after without delay", lambda: RetryDirective("after"), ValueError),
    ("RetryDirective: negative delay", lambda: RetryDirective.after(-1), ValueError),
    ("RetryDirective: delay for default", lambda: RetryDirective("default", 1.0), ValueError),
    ("RetryPolicy: max_attempts a str", lambda: RetryPolicy(max_attempts="3"), TypeError),  # type: ignore[arg-type]
    ("RetryPolicy: negative backoff", lambda: RetryPolicy(initial_backoff=-1), ValueError),
    ("RetryPolicy: NaN multiplier", lambda: RetryPolicy(multiplier=float("nan")), ValueError),
    ("RetryPolicy: multiplier a str", lambda: RetryPolicy(multiplier="2"), TypeError),  # type: ignore[arg-type]
    ("RetryPolicy.backoff: negative index", lambda: RetryPolicy().backoff(-1), ValueError),
    (
        "HandlerError: directive not a RetryDirective",
        lambda: sepp.HandlerError("x", "dead"),  # type: ignore[arg-type]
        TypeError,
    ),
    (
        "HandlerError.retry_after: negative",
        lambda: sepp.HandlerError.retry_after("x", -1),
        ValueError,
    ),
    ("encode_payload: unknown encoding", lambda: sepp.encode_payload(1, "x/unknown"), ValueError),
    (
        "encode_payload: text codec, not str",
        lambda: sepp.encode_payload(1, "text/plain"),
        TypeError,
    ),
    (
        "encode_payload: octet-stream codec, not bytes",
        lambda: sepp.encode_payload("x", "application/octet-stream"),
        TypeError,
    ),
    ("encode_payload: empty result", lambda: sepp.encode_payload("", "text/plain"), ValueError),
    (
        "decode_payload: unknown encoding",
        lambda: sepp.decode_payload(Payload(b"x", "x/unknown")),
        ValueError,
    ),
    (
        "register_codec: already registered",
        lambda: sepp.register_codec(
            sepp.PayloadCodec("application/json", lambda o, e: b"", lambda d, e: None)
        ),
        ValueError,
    ),
    (
        "register_codec: empty media type",
        lambda: sepp.register_codec(sepp.PayloadCodec("", lambda o, e: b"", lambda d, e: None)),
        ValueError,
    ),
    ("connect: bad scheme", lambda: sepp.connect("ftp://h:1"), ValueError),
    ("connect: a path", lambda: sepp.connect("h:1/x"), ValueError),
    ("connect: empty host", lambda: sepp.connect(":1"), ValueError),
    ("connect: bad port", lambda: sepp.connect("h:99999"), ValueError),
    ("connect: port not a number", lambda: sepp.connect("h:x"), ValueError),
    ("connect: unterminated IPv6", lambda: sepp.connect("[::1"), ValueError),
    ("connect: api key not a str", lambda: sepp.connect("h:1", api_key=5), TypeError),  # type: ignore[arg-type]
    ("connect: api key with a space", lambda: sepp.connect("h:1", api_key="a b"), ValueError),
    ("connect: rpc_timeout 0", lambda: sepp.connect("h:1", rpc_timeout=0), ValueError),
    ("connect: rpc_timeout a str", lambda: sepp.connect("h:1", rpc_timeout="1"), TypeError),  # type: ignore[arg-type]
    (
        "connect: connect_timeout NaN",
        lambda: sepp.connect("h:1", connect_timeout=float("nan")),
        ValueError,
    ),
    (
        "connect: max_receive_message_bytes 0",
        lambda: sepp.connect("h:1", max_receive_message_bytes=0),
        ValueError,
    ),
    (
        "connect: keepalive_interval 0",
        lambda: sepp.connect("h:1", keepalive_interval=0),
        ValueError,
    ),
    ("connect: keepalive_timeout 0", lambda: sepp.connect("h:1", keepalive_timeout=0), ValueError),
    ("connect: tls=False with https", lambda: sepp.connect("https://h:1", tls=False), ValueError),
    (
        "connect: tls=False with a CA",
        lambda: sepp.connect("h:1", tls=False, tls_ca_cert="x"),
        ValueError,
    ),
    ("seconds_to_duration: infinite", lambda: seconds_to_duration(float("inf")), ValueError),
    # Typed tasks: a value that does not validate, a declaration no library can check, a
    # handler of the wrong shape (issue #29: these were plain ValueError/TypeError).
    ("Task.encode: wrong type", lambda: _TASK.encode("1"), ValueError),  # type: ignore[arg-type]
    ("Task.request: wrong type", lambda: _TASK.request(None), ValueError),  # type: ignore[arg-type]
    ("Task: unsupported annotation", lambda: sepp.Task("q", "t", _NoJson), TypeError),
    ("Task.check_handler: one parameter", lambda: _TASK.check_handler(lambda v: None), TypeError),
    ("Task.check_handler: not callable", lambda: _TASK.check_handler(5), TypeError),  # type: ignore[arg-type]
    # Job retry policies and expiry (issue #32).
    ("Retry: negative backoff", lambda: sepp.Retry(backoff=-1), ValueError),
    ("Retry: factor below 1", lambda: sepp.Retry(factor=0.5), ValueError),
    ("Retry: unknown jitter", lambda: sepp.Retry(jitter="half"), ValueError),  # type: ignore[arg-type]
    ("Retry: not an exception class", lambda: sepp.Retry(retry_on=(1,)), TypeError),  # type: ignore[arg-type]
    ("Task: retry not a Retry", lambda: sepp.Task("q", "t", int, retry=1), TypeError),  # type: ignore[call-overload]
    ("Task: expires 0", lambda: sepp.Task("q", "t", int, expires=0), ValueError),
    (
        "EnqueueRequest: expires_at not a datetime",
        lambda: EnqueueRequest("q", "t", expires_at=5),  # type: ignore[arg-type]
        TypeError,
    ),
    (
        "EnqueueRequest: expires_at before scheduled_at",
        lambda: EnqueueRequest(
            "q", "t", scheduled_at=datetime(2030, 1, 2, tzinfo=UTC), expires_at=datetime(2030, 1, 1)
        ),
        ValueError,
    ),
    # Cron: the expression, its arguments, run_cron's.
    ("Cron: minute 61", lambda: _cron("61 * * * *"), ValueError),
    ("Cron: 4 fields", lambda: _cron("* * * *"), ValueError),
    ("Cron: unknown shorthand", lambda: _cron("@fortnightly"), ValueError),
    ("Cron: never fires", lambda: _cron("0 0 */20 * 1L"), ValueError),
    ("Cron: 30 February", lambda: _cron("0 0 30 2 *"), ValueError),
    ("Cron: expression not a str", lambda: _cron(5), TypeError),  # type: ignore[arg-type]
    ("Cron: unknown zone", lambda: _cron("* * * * *", timezone="Mars/Olympus"), ValueError),
    ("Cron: zone not a str", lambda: _cron("* * * * *", timezone=3), TypeError),
    ("Cron: empty name", lambda: _cron("* * * * *", name=""), ValueError),
    ("Cron: name not a str", lambda: _cron("* * * * *", name=5), TypeError),
    (
        "Cron: factory not callable",
        lambda: sepp.Cron("* * * * *", _TASK, 5),  # type: ignore[arg-type]
        TypeError,
    ),
    ("Cron: negative catch_up", lambda: _cron("* * * * *", catch_up=-1), ValueError),
    (
        "Cron: catch_up_window over a year",
        lambda: _cron("* * * * *", catch_up_window=400 * 86400),
        ValueError,
    ),
]


@pytest.mark.parametrize(
    ("call", "builtin"), [c[1:] for c in SYNC_CASES], ids=[c[0] for c in SYNC_CASES]
)
def test_bad_arguments_raise_sepp_errors(call: Bad, builtin: type[Exception]) -> None:
    with pytest.raises(SeppError) as caught:
        call()
    assert isinstance(caught.value, builtin)
    expected = InvalidArgumentTypeError if builtin is TypeError else InvalidArgumentError
    assert isinstance(caught.value, expected), type(caught.value)


ClientCall = Callable[[sepp.Client], Awaitable[Any]]

CLIENT_CASES: list[tuple[str, ClientCall, type[Exception]]] = [
    ("enqueue_batch: empty", lambda c: c.enqueue_batch([]), ValueError),
    ("enqueue_batch: not a request", lambda c: c.enqueue_batch([1]), TypeError),  # type: ignore[list-item]
    ("enqueue_atomic: empty", lambda c: c.enqueue_atomic([]), ValueError),
    ("enqueue_atomic: not a request", lambda c: c.enqueue_atomic(["x"]), TypeError),  # type: ignore[list-item]
    ("reserve: queues a str", lambda c: c.reserve("q", lease=1), TypeError),
    ("reserve: no queues", lambda c: c.reserve([], lease=1), ValueError),
    ("reserve: empty queue name", lambda c: c.reserve([""], lease=1), ValueError),
    ("reserve: lease 0", lambda c: c.reserve(["q"], lease=0), ValueError),
    ("reserve: lease a str", lambda c: c.reserve(["q"], lease="1"), TypeError),  # type: ignore[arg-type]
    ("reserve: negative wait", lambda c: c.reserve(["q"], lease=1, wait=-1), ValueError),
    ("reserve: wait a bool", lambda c: c.reserve(["q"], lease=1, wait=True), TypeError),
    ("reserve: max_jobs 0", lambda c: c.reserve(["q"], lease=1, max_jobs=0), ValueError),
    ("reserve: max_jobs a float", lambda c: c.reserve(["q"], lease=1, max_jobs=1.5), TypeError),  # type: ignore[arg-type]
    ("reserve: empty worker id", lambda c: c.reserve(["q"], lease=1, worker_id=""), ValueError),
    ("drain: max a str", lambda c: c.drain_dead_letters(max="1"), TypeError),  # type: ignore[arg-type]
    ("drain: negative max", lambda c: c.drain_dead_letters(max=-1), ValueError),
    ("drain: empty queue", lambda c: c.drain_dead_letters(""), ValueError),
    ("drain: queue not a str", lambda c: c.drain_dead_letters(5), TypeError),  # type: ignore[arg-type]
    ("reserve: worker id not a str", lambda c: c.reserve(["q"], lease=1, worker_id=5), TypeError),  # type: ignore[arg-type]
    ("ack: not a JobCtx", lambda c: c.ack("job-1"), TypeError),  # type: ignore[arg-type]
    ("nack: not a JobCtx", lambda c: c.nack(None), TypeError),  # type: ignore[arg-type]
    ("extend: not a JobCtx", lambda c: c.extend({}, 1.0), TypeError),  # type: ignore[arg-type]
]


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("call", "builtin"), [c[1:] for c in CLIENT_CASES], ids=[c[0] for c in CLIENT_CASES]
)
async def test_bad_client_arguments_raise_sepp_errors(
    call: ClientCall, builtin: type[Exception]
) -> None:
    async with open_in_memory_client() as (client, _):
        with pytest.raises(SeppError) as caught:
            await call(client)
    assert isinstance(caught.value, builtin)
    expected = InvalidArgumentTypeError if builtin is TypeError else InvalidArgumentError
    assert isinstance(caught.value, expected), type(caught.value)


@pytest.mark.anyio
async def test_bad_settle_arguments_raise_sepp_errors() -> None:
    async with open_in_memory_client() as (client, _):
        await client.enqueue(EnqueueRequest("q", "t"))
        [job] = await client.reserve(["q"], lease=30, wait=0)
        with pytest.raises(SeppError) as caught:
            await client.nack(job.ctx, reason=5)  # type: ignore[arg-type]
        assert isinstance(caught.value, InvalidArgumentTypeError)
        with pytest.raises(SeppError) as caught:
            await client.nack(job.ctx, "dead_letter")  # type: ignore[arg-type]
        assert isinstance(caught.value, InvalidArgumentTypeError)
        for seconds in (0, float("nan"), -1):
            with pytest.raises(SeppError) as caught:
                await client.extend(job.ctx, seconds)
            assert isinstance(caught.value, InvalidArgumentError)
            with pytest.raises(SeppError) as caught:
                await job.ctx.extend(seconds)
            assert isinstance(caught.value, InvalidArgumentError)
        await client.ack(job.ctx)


@pytest.mark.anyio
async def test_bad_run_cron_arguments_raise_sepp_errors() -> None:
    async with open_in_memory_client() as (client, _):
        for crons, expected in (
            ([], InvalidArgumentError),
            ([_cron("* * * * *"), _cron("0 * * * *")], InvalidArgumentError),  # same name
            (["* * * * *"], InvalidArgumentTypeError),
        ):
            with pytest.raises(SeppError) as caught:
                await run_cron(client, crons)  # type: ignore[arg-type]
            assert isinstance(caught.value, expected), type(caught.value)


@pytest.mark.anyio
async def test_bad_in_memory_arguments_raise_sepp_errors() -> None:
    with pytest.raises(SeppError) as caught:
        async with open_in_memory_client("", limits={}):
            pass  # pragma: no cover
    assert isinstance(caught.value, InvalidArgumentTypeError)
    with pytest.raises(SeppError) as caught:
        async with open_in_memory_client(api_key="a b"):
            pass  # pragma: no cover
    assert isinstance(caught.value, InvalidArgumentError)


def test_the_argument_errors_are_in_the_tree() -> None:
    assert issubclass(InvalidArgumentError, SeppError) and issubclass(
        InvalidArgumentError, ValueError
    )
    assert issubclass(InvalidArgumentTypeError, SeppError)
    assert issubclass(InvalidArgumentTypeError, TypeError)
    for cls in (sepp.TraceContextError, sepp.EmptyBatchError, sepp.InvalidApiKeyError):
        assert issubclass(cls, InvalidArgumentError), cls
    # Still what they were.
    assert issubclass(sepp.EmptyBatchError, sepp.ClientError)
    assert issubclass(sepp.InvalidApiKeyError, sepp.ClientError)


@pytest.mark.parametrize("delay", [1e12, 1e300, 100 * 365.25 * 86400.0 + 1])
def test_a_delay_beyond_a_hundred_years_is_refused_before_sending(delay: float) -> None:
    """Far enough out, the send time plus the delay does not fit a datetime: refused at
    construction, naming the limit (it was an OverflowError while sending)."""
    with pytest.raises(sepp.InvalidArgumentError, match=r"delay must be at most 3155760000"):
        sepp.EnqueueRequest("q", "t", delay=delay)
    assert sepp.EnqueueRequest("q", "t", delay=100 * 365.25 * 86400.0).delay


def test_enqueue_with_a_huge_delay_is_one_line_and_status_2() -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "sepp_anyio",
            "enqueue",
            "-q",
            "q",
            "-t",
            "t",
            "--delay",
            "1e12",
            "--address",
            "127.0.0.1:9",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    assert "delay must be at most" in done.stderr
