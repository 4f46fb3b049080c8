"""``sepp-anyio enqueue``, ``sepp-anyio info`` and ``sepp-anyio dlq drain``.

Small one-shot commands against a running server: each connects, makes its calls, prints
what happened on stdout and exits (0, or 1 with one error line when the server refuses or
cannot be reached; 2 for bad input, detected before connecting).
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import dataclasses
import json
import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from .._client import Client
from .._model._dead_letters import DeadLetterRecord
from .._model._enqueue import EnqueueAck, EnqueueRequest
from .._model._errors import SeppError
from .._model._payload import Payload
from .._model._retries import RetryPolicy
from ._common import (
    EXIT_FAILURE,
    EXIT_USAGE,
    CliError,
    Parser,
    add_connection_options,
    add_log_level_option,
    check_connection_options,
    configure_logging,
    describe,
    error_line,
    nonempty_text,
    nonnegative_seconds,
    open_client,
    parse,
    positive_int,
    queue_name,
    run_async,
    table,
)

__all__ = ["dlq_main", "enqueue_main", "info_main"]

#: Transient failures are retried (never in a way that could enqueue a job twice).
_RETRY = RetryPolicy(max_attempts=3)
_DEFAULT_DLQ_MAX = 100
_DRAIN_CALL_MAX = 256
_PREVIEW = 40

# --------------------------------------------------------------------------- enqueue


@dataclasses.dataclass(frozen=True)
class _Json:
    value: Any


def _json_arg(text: str) -> _Json:
    try:
        return _Json(json.loads(text))
    except json.JSONDecodeError as exc:
        raise argparse.ArgumentTypeError(f"not valid JSON ({exc})") from None


def _priority(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if not 0 <= value <= 9:
        raise argparse.ArgumentTypeError(f"must be an integer from 0 to 9, not {text!r}")
    return value


def _custom(text: str) -> tuple[str, str]:
    key, eq, value = text.partition("=")
    if not eq or not key:
        raise argparse.ArgumentTypeError(f"must be KEY=VALUE, not {text!r}")
    return key, value


def enqueue_parser(prog: str) -> Parser:
    """The ``enqueue`` subcommand's argument parser."""
    parser = Parser(
        prog=prog,
        description="Enqueue one job and print its id (or the id it was deduplicated to).",
        epilog="examples:\n"
        f"  {prog} -q emails -t send_welcome --json '{{\"user\": 42}}'\n"
        f"  {prog} -q images -t resize --data-file cat.png --encoding image/png\n"
        f"  {prog} -q reports -t monthly --priority 9 --delay 60 --idempotency-key 2024-05",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--queue", "-q", required=True, type=queue_name, help="the queue")
    parser.add_argument(
        "--type",
        "-t",
        required=True,
        type=nonempty_text,
        dest="job_type",
        metavar="TYPE",
        help="the job type",
    )
    payload = parser.add_argument_group("payload (optional; at most one of these)")
    source = payload.add_mutually_exclusive_group()
    source.add_argument(
        "--json",
        type=_json_arg,
        metavar="DATA",
        help="a JSON document (sent as application/json unless --encoding says otherwise)",
    )
    source.add_argument("--text", metavar="TEXT", help="text, sent as text/plain; charset=utf-8")
    source.add_argument(
        "--data-file",
        metavar="FILE",
        help="the payload's bytes from FILE ('-' for stdin); give --encoding "
        "(default: application/json for *.json, else application/octet-stream)",
    )
    payload.add_argument("--encoding", "-e", metavar="E", help="the payload's encoding label")
    options = parser.add_argument_group("job options")
    options.add_argument(
        "--priority", "-p", type=_priority, metavar="N", help="0 (lowest) to 9 (highest)"
    )
    options.add_argument(
        "--delay",
        type=nonnegative_seconds,
        metavar="SECONDS",
        help="do not run before this many seconds from now",
    )
    options.add_argument(
        "--idempotency-key",
        "-k",
        type=nonempty_text,
        metavar="KEY",
        help="a resend with the same key within the server's window is deduplicated",
    )
    options.add_argument(
        "--max-attempts", type=positive_int, metavar="N", help="deliveries before dead-lettering"
    )
    options.add_argument(
        "--custom",
        type=_custom,
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="custom metadata (a string value; repeatable)",
    )
    add_connection_options(parser)
    add_log_level_option(parser, default="WARNING")
    return parser


def _read_data(path: str) -> bytes:
    if path == "-":
        return sys.stdin.buffer.read()
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise CliError(
            f"--data-file: cannot read {path!r}: {exc.strerror or exc}", EXIT_USAGE
        ) from None


def _payload(args: argparse.Namespace) -> Payload | None:
    encoding: str | None = args.encoding
    if encoding is not None and not encoding.strip():
        raise CliError("--encoding must not be empty", EXIT_USAGE)
    if args.json is not None:
        try:
            return Payload.from_json(args.json.value, encoding=encoding or "application/json")
        except ValueError as exc:  # NaN and friends, which json.loads accepts
            raise CliError(f"argument --json: {exc}", EXIT_USAGE) from None
    if args.text is not None:
        if not args.text:
            raise CliError("--text must not be empty (leave out the payload instead)", EXIT_USAGE)
        try:
            return Payload.from_text(args.text, encoding or "text/plain; charset=utf-8")
        except (ValueError, LookupError) as exc:
            raise CliError(f"argument --text: {exc}", EXIT_USAGE) from None
    if args.data_file is not None:
        data = _read_data(args.data_file)
        if not data:
            raise CliError(
                f"--data-file {args.data_file!r} is empty (leave out the payload for a job "
                "without data)",
                EXIT_USAGE,
            )
        if encoding is None:
            json_file = args.data_file.lower().endswith(".json")
            encoding = "application/json" if json_file else "application/octet-stream"
        return Payload(data, encoding)
    if encoding is not None:
        raise CliError("--encoding needs a payload (--json, --text or --data-file)", EXIT_USAGE)
    return None


#: The options of the request's fields, for the errors of the request's own checks (their
#: messages start with the field's name).
_FIELD_OPTIONS = {
    "queue": "--queue",
    "job_type": "--type",
    "idempotency_key": "--idempotency-key",
    "priority": "--priority",
    "max_attempts": "--max-attempts",
    "custom": "--custom",
    "delay": "--delay",
}


def _naming_the_option(message: str) -> str:
    field, space, rest = message.partition(" ")
    base = field.split("[", 1)[0]  # custom['key'] ...
    option = _FIELD_OPTIONS.get(base)
    if option is None or not space:
        return message
    return f"{option}{field[len(base) :]} {rest}"


def _request(args: argparse.Namespace) -> EnqueueRequest:
    try:
        return EnqueueRequest(
            args.queue,
            args.job_type,
            payload=_payload(args),
            idempotency_key=args.idempotency_key,
            priority=args.priority,
            max_attempts=args.max_attempts,
            custom=dict(args.custom),
            delay=args.delay,
        )
    except (TypeError, ValueError) as exc:
        raise CliError(_naming_the_option(str(exc)), EXIT_USAGE) from None


def enqueue_main(argv: Sequence[str], *, prog: str = "sepp-anyio enqueue") -> int:
    """Run the ``enqueue`` subcommand; return the exit status."""
    args = parse(enqueue_parser(prog), argv)
    if isinstance(args, int):
        return args
    configure_logging(args.log_level)
    try:
        check_connection_options(args)
        request = _request(args)
    except CliError as exc:
        error_line(prog, exc.message)
        return exc.code

    async def enqueue() -> int:
        async with open_client(args, retry=_RETRY) as client:
            ack = await client.enqueue(request)
        if ack.deduplicated:
            print(
                f"deduplicated: job {ack.job_id} was already enqueued with idempotency key "
                f"{request.idempotency_key!r}"
            )
        else:
            print(f"enqueued job {ack.job_id} on queue {request.queue!r}")
        return 0

    return run_async(prog, enqueue)


# --------------------------------------------------------------------------- info


def info_parser(prog: str) -> Parser:
    """The ``info`` subcommand's argument parser."""
    parser = Parser(prog=prog, description="Show the server's version and global limits.")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead")
    add_connection_options(parser)
    add_log_level_option(parser, default="WARNING")
    return parser


def _size(n: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale and n % scale == 0:
            return f"{n // scale} {unit}"
    return f"{n} bytes"


def _duration(seconds: float) -> str:
    for unit, scale in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= scale and seconds % scale == 0:
            return f"{seconds / scale:g} {unit}"
    return f"{seconds:g} s"


def info_main(argv: Sequence[str], *, prog: str = "sepp-anyio info") -> int:
    """Run the ``info`` subcommand; return the exit status."""
    args = parse(info_parser(prog), argv)
    if isinstance(args, int):
        return args
    configure_logging(args.log_level)
    try:
        check_connection_options(args)
    except CliError as exc:
        error_line(prog, exc.message)
        return exc.code

    async def info() -> int:
        async with open_client(args, retry=_RETRY) as client:
            server = await client.server_info()
        if args.json:
            fields = dataclasses.asdict(server)
            fields["server_time"] = server.server_time.isoformat()
            print(json.dumps(fields, indent=2))
            return 0
        offset = (server.server_time - datetime.now(UTC)).total_seconds()
        rows = [
            ("version", server.version),
            ("protocol versions", ", ".join(server.supported_protocol_versions)),
            ("server time", f"{server.server_time.isoformat()} ({offset:+.3f} s from here)"),
            ("strict queues", "yes" if server.strict_queues else "no"),
            ("dead-letter retention", "on" if server.dead_letter_retention_enabled else "off"),
            (
                "allowed encodings",
                ", ".join(server.allowed_encodings) or "none"
                if server.restricts_encodings
                else "any",
            ),
            ("max payload", _size(server.max_payload_bytes)),
            ("max enqueue batch", str(server.max_enqueue_batch)),
            ("max reserve batch", str(server.max_reserve_batch)),
            ("max reserve queues", str(server.max_reserve_queues)),
            ("max wait (long poll)", _duration(server.max_wait_timeout)),
            ("max lease", _duration(server.max_lease_duration)),
            ("max schedule horizon", _duration(server.max_schedule_horizon)),
            ("max queue name", _size(server.max_queue_name_bytes)),
            ("max job type", _size(server.max_job_type_bytes)),
            ("max idempotency key", _size(server.max_idempotency_key_bytes)),
            ("max custom entries", str(server.max_custom_entries)),
            ("max custom total", _size(server.max_custom_total_bytes)),
            ("max custom key", _size(server.max_custom_key_bytes)),
        ]
        print(f"sepp server at {args.address}")
        print(table(("setting", "value"), rows))
        return 0

    return run_async(prog, info)


# --------------------------------------------------------------------------- dlq drain


def _dlq_queue(text: str) -> str:
    if not text:
        raise argparse.ArgumentTypeError("must not be empty (leave out --queue for every queue)")
    return queue_name(text)


def dlq_parser(prog: str) -> Parser:
    """The ``dlq`` subcommand's argument parser (one action so far: ``drain``)."""
    parser = Parser(prog=prog, description="Work with the server's dead letters.")
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    drain = actions.add_parser(
        "drain",
        help="remove dead letters (optionally re-enqueueing them) and print them",
        description="Remove up to --max dead letters, oldest first, print them, and with "
        "--requeue enqueue each again as a fresh job (same queue, type, payload, priority, "
        "max attempts, custom and trace context). Draining is destructive: without "
        "--requeue, the printed records are all that is left of the jobs (--json prints "
        "them whole, payloads included).",
    )
    drain.add_argument(
        "--queue", "-q", type=_dlq_queue, help="only this queue (default: every queue)"
    )
    drain.add_argument(
        "--max",
        type=positive_int,
        default=_DEFAULT_DLQ_MAX,
        metavar="N",
        help=f"drain at most N records (default: {_DEFAULT_DLQ_MAX})",
    )
    drain.add_argument("--requeue", action="store_true", help="enqueue every drained job again")
    drain.add_argument(
        "--json",
        action="store_true",
        help="print one JSON object per record (payload in base64) instead of a table",
    )
    add_connection_options(drain)
    add_log_level_option(drain, default="WARNING")
    return parser


def _record_json(record: DeadLetterRecord) -> dict[str, Any]:
    payload = record.payload
    return {
        "queue": record.queue,
        "job_id": record.job_id,
        "job_type": record.job_type,
        "payload": None
        if payload is None
        else {
            "encoding": payload.encoding,
            "data_base64": base64.b64encode(payload.data).decode("ascii"),
        },
        "priority": record.priority,
        "max_attempts": record.max_attempts,
        "custom": dict(record.custom),
        "trace_context": None
        if record.trace_context is None
        else dataclasses.asdict(record.trace_context),
        "enqueued_at": record.enqueued_at.isoformat(),
        "scheduled_at": None if record.scheduled_at is None else record.scheduled_at.isoformat(),
        "cause": record.cause.value,
        "failed_at": record.failed_at.isoformat(),
        "final_attempt": record.final_attempt,
        "last_reason": record.last_reason,
    }


def _preview(payload: Payload | None) -> str:
    if payload is None:
        return "-"
    try:
        text = payload.data.decode("utf-8")
    except UnicodeDecodeError:
        return f"<{len(payload.data)} bytes {payload.encoding}>"
    text = " ".join(text.split())
    return text if len(text) <= _PREVIEW else text[: _PREVIEW - 3] + "..."


def _replay_request(record: DeadLetterRecord) -> EnqueueRequest:
    # The key makes a retried enqueue safe; it names this dead letter, so replaying
    # another one (even of a job that failed again) is never deduplicated away.
    return dataclasses.replace(
        record.to_enqueue_request(), idempotency_key=f"dlq-replay:{record.job_id}"
    )


def _save(records: list[DeadLetterRecord]) -> Path:
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    path = Path(f"sepp-dlq-not-requeued-{stamp}.jsonl").resolve()
    with path.open("a", encoding="utf-8") as out:
        for record in records:
            out.write(json.dumps(_record_json(record)) + "\n")
    return path


_NO_RETENTION = (
    "the server at {address} keeps no dead letters (its dead-letter retention is off), so "
    "there is nothing to drain: start it with 'sepp-anyio server --dead-letter-retention "
    "SECONDS', or set [storage] dead_letter_retention_ms in its sepp.toml"
)


async def _requeue(
    client: Client,
    batch: list[DeadLetterRecord],
    requeued: dict[str, str | None],
    lost: dict[str, str],
) -> str | None:
    """Enqueue ``batch`` again; record each new job id in ``requeued`` (None: not requeued)
    and why in ``lost``. Returns the failure when the call itself failed (stop draining).
    """
    try:
        results = await client.enqueue_batch([_replay_request(r) for r in batch])
    except SeppError as exc:
        failure = f"re-enqueueing failed ({describe(exc)})"
        for record in batch:
            requeued[record.job_id] = None
            lost[record.job_id] = failure
        return failure
    for record, result in zip(batch, results, strict=True):
        if isinstance(result, EnqueueAck):
            requeued[record.job_id] = result.job_id
        else:
            requeued[record.job_id] = None
            lost[record.job_id] = f"rejected: {result}"
    return None


def _json_line(
    record: DeadLetterRecord, requeued: dict[str, str | None] | None, lost: dict[str, str]
) -> str:
    fields = _record_json(record)
    if requeued is not None:  # --requeue: the new job's id, or why there is none
        fields["requeued_as"] = requeued.get(record.job_id)
        if record.job_id in lost:
            fields["not_requeued"] = lost[record.job_id]
    return json.dumps(fields)


def _print_table(
    drained: list[DeadLetterRecord], requeued: dict[str, str | None] | None, lost: dict[str, str]
) -> None:
    def new_id(record: DeadLetterRecord) -> str:
        assert requeued is not None
        if record.job_id in lost:
            return "NOT requeued: " + lost[record.job_id]
        return requeued.get(record.job_id) or "-"

    rows = [
        (
            r.job_id,
            r.queue,
            r.job_type,
            r.cause.value,
            str(r.final_attempt),
            r.failed_at.strftime("%Y-%m-%d %H:%M:%S"),
            _preview_reason(r.last_reason),
            _preview(r.payload),
            *((new_id(r),) if requeued is not None else ()),
        )
        for r in drained
    ]
    headers: tuple[str, ...] = ("dead job", "queue", "type", "cause", "attempts", "failed at (UTC)")
    headers += ("last reason", "payload") + (("requeued as",) if requeued is not None else ())
    if rows:
        print(table(headers, rows))


async def _drain(args: argparse.Namespace) -> int:
    drained: list[DeadLetterRecord] = []
    # --requeue: dead job id -> the new job's id (None: not requeued); else None.
    requeued: dict[str, str | None] | None = {} if args.requeue else None
    lost: dict[str, str] = {}  # dead job id -> why it was not requeued
    failure: str | None = None
    try:
        async with open_client(args, retry=_RETRY) as client:
            while len(drained) < args.max:
                batch = await client.drain_dead_letters(
                    args.queue, min(args.max - len(drained), _DRAIN_CALL_MAX)
                )
                if not batch:
                    break
                drained.extend(batch)
                if requeued is not None:
                    failure = await _requeue(client, batch, requeued, lost)
                if args.json:  # after the requeue, so each line has its new job id
                    for record in batch:
                        print(_json_line(record, requeued, lost), flush=True)
                if failure is not None:
                    break
            if not drained:
                info = await client.server_info()
                if not info.dead_letter_retention_enabled:
                    raise CliError(_NO_RETENTION.format(address=args.address))
        if not args.json:
            _print_table(drained, requeued, lost)
        where = "" if args.queue is None else f" from queue {args.queue!r}"
        done = f"drained {len(drained)} dead letter(s){where}"
        if requeued is not None:
            done += f", requeued {len(drained) - len(lost)}"
        print(done, file=sys.stderr if args.json else sys.stdout, flush=True)
    except BrokenPipeError:
        # Stdout's reader went away: which records it read is unknown, and a drained record
        # that was not requeued exists nowhere else, so every one of them is saved.
        unsafe = [r for r in drained if requeued is None or requeued.get(r.job_id) is None]
        if unsafe:
            path = _save(unsafe)
            with contextlib.suppress(OSError):
                error_line(
                    args.prog,
                    f"stdout was closed: the {len(unsafe)} drained record(s) not requeued "
                    f"were saved to {path}",
                )
        raise
    if lost:
        path = _save([r for r in drained if r.job_id in lost])
        reason = failure or f"{len(lost)} job(s) were rejected"
        raise CliError(
            f"{reason}: the {len(lost)} drained record(s) not requeued were saved to {path}",
            EXIT_FAILURE,
        )
    return 0


def _preview_reason(reason: str | None) -> str:
    if not reason:
        return "-"
    reason = " ".join(reason.split())
    return reason if len(reason) <= _PREVIEW else reason[: _PREVIEW - 3] + "..."


def dlq_main(argv: Sequence[str], *, prog: str = "sepp-anyio dlq") -> int:
    """Run the ``dlq`` subcommand; return the exit status."""
    args = parse(dlq_parser(prog), argv)
    if isinstance(args, int):
        return args
    configure_logging(args.log_level)
    try:
        check_connection_options(args)
    except CliError as exc:
        error_line(prog, exc.message)
        return exc.code
    args.prog = prog

    async def drain() -> int:
        return await _drain(args)

    return run_async(prog, drain)
