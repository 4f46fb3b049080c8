"""``sepp-anyio enqueue``, ``info`` and ``dlq drain``, in subprocesses against a server on
loopback; the results are checked through a client of our own."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

import sepp_anyio as sepp
from sepp_anyio.server import ServerProcess

from ._util import (
    assert_one_line_error,
    closed_port,
    retention_server,
    run_cli,
    run_cli_into_closed_pipe,
    with_client,
)


def _reserve_all(server: ServerProcess, queue: str) -> list[sepp.Job]:
    async def call(client: sepp.Client) -> list[sepp.Job]:
        return await client.reserve([queue], lease=30.0, wait=0.5, max_jobs=100)

    return with_client(server.address, call)


def _dead_letters(server: ServerProcess, queue: str, count: int) -> list[str]:
    """Make ``count`` dead letters on ``queue`` (nacked with dead_letter); their ids."""

    async def call(client: sepp.Client) -> list[str]:
        for n in range(count):
            payload = sepp.Payload.from_json({"n": n})
            await client.enqueue(sepp.EnqueueRequest(queue, "doomed", payload=payload))
        jobs = await client.reserve([queue], lease=30.0, wait=1.0, max_jobs=count)
        for job in jobs:
            assert await client.nack(job.ctx, sepp.RetryDirective.dead_letter(), "no way")
        return [job.ctx.id for job in jobs]

    return with_client(server.address, call)


# --------------------------------------------------------------------------- enqueue


def test_enqueue_json_with_every_option(server: ServerProcess, queue: str) -> None:
    before = datetime.now(UTC)
    result = run_cli(
        "enqueue", "--queue", queue, "--type", "send", "--json", '{"user": 42}',
        "--priority", "7", "--delay", "0.3", "--max-attempts", "4",
        "--custom", "tenant=acme", "--custom", "source=cli",
        "--idempotency-key", "k-1", "--address", server.address,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("enqueued job ")
    job_id = result.stdout.split()[2]
    (job,) = _reserve_all(server, queue)
    assert job.ctx.id == job_id
    assert job.payload == sepp.Payload(b'{"user":42}', "application/json")
    assert (job.ctx.priority, job.ctx.max_attempts) == (7, 4)
    assert dict(job.ctx.custom) == {"tenant": "acme", "source": "cli"}
    assert job.ctx.scheduled_at is not None
    assert (job.ctx.scheduled_at - before).total_seconds() >= 0.25


def test_enqueue_twice_with_one_key_is_deduplicated(server: ServerProcess, queue: str) -> None:
    args = ("enqueue", "-q", queue, "-t", "t", "-k", "once", "-a", server.address)
    first = run_cli(*args)
    second = run_cli(*args)
    assert first.returncode == second.returncode == 0
    job_id = first.stdout.split()[2]
    assert second.stdout.startswith(f"deduplicated: job {job_id} was already enqueued")
    assert len(_reserve_all(server, queue)) == 1


def test_enqueue_data_file_text_stdin_and_no_payload(
    server: ServerProcess, queue: str, tmp_path: Path
) -> None:
    image = tmp_path / "cat.png"
    image.write_bytes(b"\x89PNG...")
    document = tmp_path / "order.json"
    document.write_text('{"id": 1}')
    commands = [
        ("--data-file", str(image), "--encoding", "image/png"),
        ("--data-file", str(document)),
        ("--data-file", str(image)),
        ("--text", "héllo"),
        ("--json", "[1, 2]", "--encoding", "json"),
        (),
    ]
    for extra in commands:
        result = run_cli("enqueue", "-q", queue, "-t", "t", "-a", server.address, *extra)
        assert result.returncode == 0, result.stderr
    piped = run_cli(
        "enqueue", "-q", queue, "-t", "t", "-a", server.address, "--data-file", "-",
        "-e", "text/csv", stdin=b"a,b\n",
    )  # fmt: skip
    assert piped.returncode == 0, piped.stderr
    payloads = [job.payload for job in _reserve_all(server, queue)]
    assert payloads == [
        sepp.Payload(b"\x89PNG...", "image/png"),
        sepp.Payload(b'{"id": 1}', "application/json"),
        sepp.Payload(b"\x89PNG...", "application/octet-stream"),
        sepp.Payload("héllo".encode(), "text/plain; charset=utf-8"),
        sepp.Payload(b"[1,2]", "json"),
        None,
        sepp.Payload(b"a,b\n", "text/csv"),
    ]


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        (("--json", "{not json"), "argument --json: not valid JSON"),
        (("--json", "NaN"), "argument --json: Out of range float values are not JSON"),
        (("--priority", "12"), "argument --priority/-p: must be an integer from 0 to 9, not '12'"),
        (("--priority", "high"), "must be an integer from 0 to 9, not 'high'"),
        (("--priority", "-1"), "must be an integer from 0 to 9"),
        (("--delay", "-1"), "argument --delay"),
        (("--max-attempts", "0"), "argument --max-attempts: must be >= 1"),
        (("--custom", "novalue"), "must be KEY=VALUE"),
        (("--encoding", "x/y"), "--encoding needs a payload"),
        (("--json", "1", "--text", "a"), "not allowed with argument"),
        (("--data-file", "/no/such/file"), "--data-file: cannot read '/no/such/file'"),
        (("--text", ""), "--text must not be empty"),
        (("--address", "http://h:1/path"), "a path is not allowed"),
        (("--api-key", "has space"), "API key"),
        (("--frobnicate",), "unrecognized arguments: --frobnicate"),
    ],
)
def test_enqueue_bad_input_is_one_line_and_exit_2(extra: tuple[str, ...], needle: str) -> None:
    result = run_cli("enqueue", "-q", "q", "-t", "t", *extra)
    assert_one_line_error(result, 2, needle)


def test_enqueue_bad_queue_name_and_missing_required(tmp_path: Path) -> None:
    assert_one_line_error(
        run_cli("enqueue", "-q", "a/b", "-t", "t"),
        2,
        "argument --queue/-q: queue name must not contain '/', got 'a/b'",
    )
    assert_one_line_error(run_cli("enqueue", "-t", "t"), 2, "--queue/-q")
    empty = tmp_path / "empty.bin"
    empty.write_bytes(b"")
    result = run_cli("enqueue", "-q", "q", "-t", "t", "--data-file", str(empty))
    assert_one_line_error(result, 2, "is empty")


def test_enqueue_unreachable_server_is_one_line_and_exit_1() -> None:
    address = f"127.0.0.1:{closed_port()}"
    result = run_cli("enqueue", "-q", "q", "-t", "t", "--address", address)
    assert_one_line_error(result, 1, f"could not connect to the sepp server at {address}")


def test_enqueue_rejected_by_the_server_exit_1(
    server: ServerProcess, queue: str, tmp_path: Path
) -> None:
    big = tmp_path / "big.bin"
    big.write_bytes(b"x" * ((1 << 20) + 1))  # the server's default max_payload_bytes + 1
    result = run_cli(
        "enqueue", "-q", queue, "-t", "t", "--data-file", str(big), "-a", server.address
    )
    assert_one_line_error(result, 1, "the server rejected the job", "payload")


def test_address_from_the_environment(server: ServerProcess, queue: str) -> None:
    result = run_cli("enqueue", "-q", queue, "-t", "t", env={"SEPP_ADDR": server.address})
    assert result.returncode == 0, result.stderr
    assert len(_reserve_all(server, queue)) == 1


# --------------------------------------------------------------------------- info


def test_info_table_and_json(server: ServerProcess) -> None:
    table = run_cli("info", "--address", server.address)
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    assert lines[0] == f"sepp server at {server.address}"
    assert lines[1].split() == ["setting", "value"]
    rows = dict(re.split(r"\s{2,}", line, maxsplit=1) for line in lines[3:])
    assert rows["protocol versions"] == "v1"
    assert rows["max payload"] == "1 MiB"
    assert rows["dead-letter retention"] == "on"
    assert rows["max lease"] == "5 min"
    as_json = run_cli("info", "--json", "--address", server.address)
    fields = json.loads(as_json.stdout)
    assert fields["max_payload_bytes"] == 1 << 20
    assert fields["supported_protocol_versions"] == ["v1"]


def test_info_unreachable_server() -> None:
    result = run_cli("info", "--address", f"127.0.0.1:{closed_port()}")
    assert_one_line_error(result, 1, "could not connect")


def test_info_wrong_api_key_on_a_server_with_auth(tmp_path: Path) -> None:
    with ServerProcess("--memory", "--port", "0", "--api-key", "right", cwd=tmp_path) as server:
        # (--log-level ERROR: the warning that the key travels without TLS is not an error.)
        result = run_cli("info", "-a", server.address, "--api-key", "wrong", "--log-level", "ERROR")
        assert_one_line_error(result, 1, "UnauthenticatedError")
        ok = run_cli("info", "-a", server.address, env={"SEPP_API_KEY": "right"})
        assert ok.returncode == 0, ok.stderr


# --------------------------------------------------------------------------- dlq drain


def test_dlq_drain_prints_and_removes(server: ServerProcess, queue: str) -> None:
    dead = _dead_letters(server, queue, 3)
    result = run_cli("dlq", "drain", "--queue", queue, "--max", "2", "-a", server.address)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].split()[:4] == ["dead", "job", "queue", "type"]
    assert [line.split()[0] for line in lines[2:4]] == dead[:2]
    assert "rejected" in lines[2] and "no way" in lines[2] and '{"n":0}' in lines[2]
    assert lines[-1] == f"drained 2 dead letter(s) from queue {queue!r}"
    rest = run_cli("dlq", "drain", "-q", queue, "-a", server.address, "--json")
    (record,) = [json.loads(line) for line in rest.stdout.splitlines()]
    assert record["job_id"] == dead[2]
    assert record["payload"] == {"encoding": "application/json", "data_base64": "eyJuIjoyfQ=="}
    assert record["cause"] == "rejected" and record["last_reason"] == "no way"
    assert "drained 1 dead letter(s)" in rest.stderr
    empty = run_cli("dlq", "drain", "-q", queue, "-a", server.address)
    assert empty.stdout == f"drained 0 dead letter(s) from queue {queue!r}\n"


def test_dlq_drain_requeue(server: ServerProcess, queue: str) -> None:
    dead = _dead_letters(server, queue, 2)
    result = run_cli("dlq", "drain", "-q", queue, "--requeue", "-a", server.address)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[-1].endswith("requeued 2")
    jobs = _reserve_all(server, queue)
    assert sorted(job.payload.json()["n"] for job in jobs if job.payload) == [0, 1]
    assert {job.ctx.id for job in jobs}.isdisjoint(dead)  # fresh jobs
    for job in jobs:
        assert job.ctx.attempt == 1
        assert job.ctx.id in result.stdout  # printed in the "requeued as" column


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        ((), "the following arguments are required: ACTION"),
        (("purge",), "invalid choice: 'purge'"),
        (("drain", "--max", "0"), "argument --max: must be >= 1"),
        (("drain", "--queue", ""), "argument --queue/-q: must not be empty (leave out --queue"),
    ],
)
def test_dlq_bad_input(args: tuple[str, ...], needle: str) -> None:
    assert_one_line_error(run_cli("dlq", *args), 2, needle)


def test_dlq_unreachable_server() -> None:
    result = run_cli("dlq", "drain", "--address", f"127.0.0.1:{closed_port()}")
    assert_one_line_error(result, 1, "could not connect")


def test_tls_and_api_key_options(tmp_path: Path) -> None:
    from tests.server_net._util import write_tls_files
    from tests.support.servers import make_tls

    tls = make_tls()
    cert, key = write_tls_files(tls, tmp_path)
    ca = tmp_path / "ca.pem"
    ca.write_bytes(tls.ca_pem)
    args = ("--memory", "--port", "0", "--api-key", "s3cret", "--tls-cert", str(cert))
    with ServerProcess(*args, "--tls-key", str(key), cwd=tmp_path) as server:
        address = f"https://localhost:{server.port}"
        secure = ("-a", address, "--tls-ca-cert", str(ca), "--api-key", "s3cret")
        info = run_cli("info", *secure)
        assert info.returncode == 0, info.stderr
        assert info.stdout.startswith(f"sepp server at {address}")
        enqueued = run_cli("enqueue", "-q", "tls", "-t", "t", *secure)
        assert enqueued.returncode == 0, enqueued.stderr
        # The server's certificate is not trusted without the CA: one line, exit 1.
        untrusted = run_cli("info", "-a", address, "--api-key", "s3cret")
        assert_one_line_error(untrusted, 1, "could not connect", "CERTIFICATE_VERIFY_FAILED")
        # A name the certificate does not carry.
        wrong_name = run_cli("info", *secure, "--tls-server-name", "example.com")
        assert_one_line_error(wrong_name, 1, "could not connect")


# --------------------------------------------------------------------------- errors naming the fix


@pytest.fixture(scope="module")
def auth_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """A server that accepts one API key, ``right`` (and keeps dead letters)."""
    cwd = tmp_path_factory.mktemp("auth-server")
    args = ("--memory", "--port", "0", "--api-key", "right", "--dead-letter-retention", "60")
    with ServerProcess(*args, "--log-level", "ERROR", cwd=cwd) as server:
        yield server


@pytest.mark.parametrize(
    "command",
    [
        ("info",),
        ("enqueue", "-q", "q", "-t", "t"),
        ("dlq", "drain"),
        ("demo", "--jobs", "1"),
    ],
    ids=lambda command: command[0],
)
def test_unauthenticated_names_the_api_key_options(
    auth_server: ServerProcess, command: tuple[str, ...]
) -> None:
    args = [*command, "--address", auth_server.address, "--log-level", "ERROR"]
    needles = ("UnauthenticatedError", "--api-key KEY", "$SEPP_API_KEY")
    assert_one_line_error(run_cli(*args), 1, "missing API key", *needles)
    assert_one_line_error(run_cli(*args, "--api-key", "wrong"), 1, "invalid API key", *needles)
    ok = run_cli(*args, env={"SEPP_API_KEY": "right"})
    assert ok.returncode == 0, ok.stderr


def test_plaintext_to_a_tls_server_is_reported_once(tmp_path: Path) -> None:
    from tests.server_net._util import write_tls_files
    from tests.support.servers import make_tls

    cert, key = write_tls_files(make_tls(), tmp_path)
    args = ("--memory", "--port", "0", "--tls-cert", str(cert), "--tls-key", str(key))
    with ServerProcess(*args, cwd=tmp_path) as server:
        result = run_cli("info", "-a", f"127.0.0.1:{server.port}")
    line = assert_one_line_error(result, 1, "could not connect")
    assert line.count("could not connect") == 1, line


# --------------------------------------------------------------------------- dead letters


def test_dlq_drain_against_a_server_without_retention_says_so(tmp_path: Path) -> None:
    with ServerProcess("--memory", "--port", "0", cwd=tmp_path) as server:
        result = run_cli("dlq", "drain", "-a", server.address)
    line = assert_one_line_error(
        result, 1, "keeps no dead letters", "--dead-letter-retention SECONDS"
    )
    assert server.address in line
    assert "drained 0" not in result.stdout


@pytest.mark.parametrize("retention", [True, False], ids=["retention", "no-retention"])
def test_an_empty_dlq_drain_is_no_warning_of_the_server(tmp_path: Path, retention: bool) -> None:
    """The server logged "WARNING ... drained 0 dead-letter record(s)" for every drain
    that found nothing (a new user's first `dlq drain`); removing records stays a
    warning, since it is destructive."""
    queue = "empty-dlq"
    with retention_server(tmp_path, log_level="INFO", retention=retention) as server:
        result = run_cli("dlq", "drain", "-q", queue, "-a", server.address)
        line = server.wait_for_line(rf"drained 0 dead-letter record\(s\) from queue '{queue}'")
        assert " INFO " in line and "WARNING" not in line, line
        if retention:
            assert result.returncode == 0, result.stderr
            assert result.stdout.strip() == f"drained 0 dead letter(s) from queue '{queue}'"
            assert result.stderr == ""
            _dead_letters(server, queue, 1)
            assert run_cli("dlq", "drain", "-q", queue, "-a", server.address).returncode == 0
            line = server.wait_for_line(r"drained 1 dead-letter record\(s\) from queue")
            assert " WARNING " in line, line
        else:  # still explained, on the command's side
            assert_one_line_error(result, 1, "keeps no dead letters", "--dead-letter-retention")
            assert " WARNING " not in server.output, server.output


def test_dlq_drain_requeue_json_prints_the_new_job_ids(server: ServerProcess, queue: str) -> None:
    dead = _dead_letters(server, queue, 2)
    result = run_cli("dlq", "drain", "-q", queue, "--requeue", "--json", "-a", server.address)
    assert result.returncode == 0, result.stderr
    records = [json.loads(line) for line in result.stdout.splitlines()]
    assert [record["job_id"] for record in records] == dead
    assert "drained 2 dead letter(s)" in result.stderr and "requeued 2" in result.stderr
    jobs = {job.ctx.id: job for job in _reserve_all(server, queue)}
    assert {record["requeued_as"] for record in records} == set(jobs)
    for record in records:
        job = jobs[record["requeued_as"]]
        assert job.payload is not None
        assert job.payload.json() == {"n": dead.index(record["job_id"])}
        assert "not_requeued" not in record


# --------------------------------------------------------------------------- a closed stdout


@pytest.mark.parametrize("buffered", [False, True], ids=["unbuffered", "buffered"])
@pytest.mark.parametrize(
    "command",
    [("info",), ("info", "--json"), ("enqueue", "-q", "pipe", "-t", "t"), ("demo", "--jobs", "1")],
    ids=lambda command: "-".join(command[:2]),
)
def test_a_closed_stdout_exits_141_without_a_traceback(
    server: ServerProcess, command: tuple[str, ...], buffered: bool
) -> None:
    env = {"PYTHONUNBUFFERED": ""} if buffered else None
    result = run_cli_into_closed_pipe(*command, "--address", server.address, env=env)
    assert result.returncode == 141, result.stderr
    assert result.stderr == ""  # no traceback, no "Exception ignored", no error line


def test_a_closed_stdout_during_dlq_drain_saves_the_drained_records(
    server: ServerProcess, queue: str, tmp_path: Path
) -> None:
    dead = _dead_letters(server, queue, 3)
    result = run_cli_into_closed_pipe(
        "dlq", "drain", "-q", queue, "--json", "-a", server.address, cwd=tmp_path
    )
    assert result.returncode == 141, result.stderr
    (line,) = result.stderr.splitlines()  # one line, no traceback
    assert line.startswith("sepp-anyio dlq: error: stdout was closed: the 3 drained record(s)")
    (saved,) = tmp_path.glob("sepp-dlq-not-requeued-*.jsonl")
    assert str(saved) in line
    assert [json.loads(row)["job_id"] for row in saved.read_text().splitlines()] == dead
    empty = run_cli("dlq", "drain", "-q", queue, "-a", server.address)
    assert empty.stdout == f"drained 0 dead letter(s) from queue {queue!r}\n"
