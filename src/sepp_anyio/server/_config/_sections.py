"""The sections of the server configuration: frozen dataclasses mirroring the real server's TOML.

Sections and keys follow ``sepp.toml`` of the Rust server: ``[server]``, ``[auth]``,
``[limits]``, ``[storage]`` and ``[[queues]]`` (per-queue overrides), and each queue's merged
view (:class:`QueueLimits`).  Every object validates itself on construction; problems raise
:class:`~sepp_anyio.server.ConfigError` naming the key.

The whole (:class:`~._config.ServerConfig`) is in ``_config.py``, reading TOML files and
``SEPP_<SECTION>__<FIELD>`` environment overrides in ``_config_parse.py``; this module only
holds the values and their rules.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Literal

from .._errors import ConfigError
from ._names import QUEUE_NAME_HARD_CEILING

U32_MAX = 2**32 - 1
I64_MAX = 2**63 - 1

RetryBackoff = Literal["none", "exponential"]
PersistMode = Literal["sync_all", "sync_data", "buffer"]


# Field helpers.  The metadata drives both validation (here) and parsing (in _config_parse):
# "kind" is the value shape, "lo"/"hi" the inclusive integer range, "choices" an enumeration.
def _int(default: int, *, lo: int = 0, hi: int = I64_MAX) -> Any:
    return field(default=default, metadata={"kind": "int", "lo": lo, "hi": hi})


def _opt_int(*, lo: int = 0, hi: int = I64_MAX) -> Any:
    return field(default=None, metadata={"kind": "int", "lo": lo, "hi": hi})


def _bool(default: bool) -> Any:
    return field(default=default, metadata={"kind": "bool"})


def _str(default: str) -> Any:
    return field(default=default, metadata={"kind": "str"})


def _opt_str() -> Any:
    return field(default=None, metadata={"kind": "str"})


def _str_list() -> Any:
    return field(default=None, metadata={"kind": "str_list"})


def _choice(default: str | None, *choices: str) -> Any:
    return field(default=default, metadata={"kind": "choice", "choices": choices})


def check_fields(obj: object, prefix: str) -> None:
    """Check every field of the dataclass *obj* against its metadata."""
    for f in dataclasses.fields(obj):  # type: ignore[arg-type]
        kind = f.metadata.get("kind")
        value = getattr(obj, f.name)
        if kind is None or value is None:
            continue
        key = f"{prefix}.{f.name}"
        if kind == "int":
            if isinstance(value, bool) or not isinstance(value, int):
                raise ConfigError(key, f"must be an integer, not {value!r}")
            if value < f.metadata["lo"]:
                raise ConfigError(key, f"must be >= {f.metadata['lo']}")
            if value > f.metadata["hi"]:
                raise ConfigError(key, f"must be <= {f.metadata['hi']}")
        elif kind == "bool":
            if not isinstance(value, bool):
                raise ConfigError(key, f"must be a boolean, not {value!r}")
        elif kind == "str":
            if not isinstance(value, str) or not value:
                raise ConfigError(key, "must be a non-empty string")
        elif kind == "str_list":
            if not isinstance(value, tuple):
                raise ConfigError(key, "must be a list of strings")
            for i, item in enumerate(value):
                if not isinstance(item, str) or not item:
                    raise ConfigError(f"{key}[{i}]", "must be a non-empty string")
        elif kind == "choice" and value not in f.metadata["choices"]:
            allowed = ", ".join(repr(c) for c in f.metadata["choices"])
            raise ConfigError(key, f"must be one of {allowed}, not {value!r}")


@dataclass(frozen=True, kw_only=True)
class ServerSection:
    """``[server]``: network settings (used by the network adapter and CLI) and strict mode."""

    #: ``host:port`` the gRPC server binds to.
    listen_addr: str = _str("0.0.0.0:50051")
    #: Path of the durable database (the SQLite file of the reference server).
    db_path: str = _str("./sepp-data")
    #: PEM certificate for TLS; set both paths or neither.
    tls_cert_path: str | None = _opt_str()
    #: PEM private key for TLS; set both paths or neither.
    tls_key_path: str | None = _opt_str()
    #: Only queues declared in ``[[queues]]`` may be used (hot-reloadable).
    strict_queues: bool = _bool(False)

    # The network side's defences (``http2-hardening.md``); read when the server starts.
    #: TLS handshake time allowed after accept.
    tls_handshake_timeout_ms: int = _int(10_000, lo=1)
    #: Time for the client's HTTP/2 preface and first SETTINGS after accept (after TLS),
    #: however the bytes trickle in; then the connection is closed.
    handshake_timeout_ms: int = _int(5_000, lo=1)
    #: Time for the client to acknowledge our SETTINGS (else SETTINGS_TIMEOUT).
    settings_ack_timeout_ms: int = _int(10_000, lo=1)
    #: A connection without calls this long (PINGs do not count) gets GOAWAY ``idle`` and
    #: is closed; 0: never.
    idle_timeout_ms: int = _int(300_000)
    #: Nothing read this long: the server PINGs; 0: never.
    keepalive_time_ms: int = _int(60_000)
    #: A server PING unanswered this long closes the connection.
    keepalive_timeout_ms: int = _int(20_000, lo=1)
    #: Output pending with none of it written this long closes the connection; 0: never.
    write_timeout_ms: int = _int(30_000)
    #: The longest a call runs (grpc-timeout is clamped to it).
    max_call_duration_ms: int = _int(600_000, lo=1)
    #: Connections at once.  When full, a newcomer evicts the connection that has done
    #: least (see ``evict_when_full``); accepting pauses while every one has a call running.
    max_connections: int = _int(1024, lo=1)
    #: Connections at once from one client IP address.  When full, a newcomer evicts one of
    #: them, or is closed at once if every one has a call running.
    max_connections_per_ip: int = _int(128, lo=1)
    #: When a cap is full, evict a connection to admit the newcomer: first one still in its
    #: handshake (oldest first, closed), then an idle one (idle longest, never-used first;
    #: GOAWAY ``evicted``); never one with a call running.  False: refuse the newcomer.
    evict_when_full: bool = _bool(True)
    #: Client PINGs sooner than this after the previous one are strikes ...
    keepalive_min_time_ms: int = _int(10_000)
    #: ... also while no call is open (if false, 2 h is the minimum then) ...
    keepalive_permit_without_stream: bool = _bool(True)
    #: ... and one more strike than this ends the connection (``too_many_pings``).
    keepalive_max_strikes: int = _int(2)
    #: SETTINGS_MAX_CONCURRENT_STREAMS (calls running at once per connection).
    http2_max_concurrent_streams: int = _int(100, lo=1, hi=U32_MAX)
    #: New streams taken from one read; more are refused.
    http2_max_new_streams_per_read: int = _int(200, lo=1)
    #: Rapid-reset budget (CVE-2023-44487): client resets of calls not yet started.
    http2_reset_budget: int = _int(200, lo=1)
    #: Resets the rapid-reset budget regains per second.
    http2_reset_refill_per_second: int = _int(10)
    #: SETTINGS_MAX_FRAME_SIZE, checked on each frame header.
    http2_max_frame_size: int = _int(16_384, lo=16_384, hi=(1 << 24) - 1)
    #: SETTINGS_MAX_HEADER_LIST_SIZE (over: RESOURCE_EXHAUSTED).
    http2_max_header_list_size: int = _int(16 << 10, lo=1, hi=U32_MAX)
    #: Decoded header bytes at which HPACK decoding stops (ENHANCE_YOUR_CALM).
    http2_max_decoded_header_bytes: int = _int(32 << 10, lo=1)
    #: Encoded bytes of one header block (HEADERS and its CONTINUATION frames).
    http2_max_header_block_bytes: int = _int(32 << 10, lo=1)
    #: CONTINUATION frames in one header block.
    http2_max_continuations: int = _int(8)
    #: Reply frames (ACKs, resets) queued while the client does not read.
    http2_max_queued_control_frames: int = _int(1000, lo=1)
    #: Queued output at which reading pauses.
    http2_max_pending_output_bytes: int = _int(1 << 20, lo=1)
    #: Budget of cheap useless frames (PINGs, SETTINGS, frames on closed streams): burst.
    http2_glitch_burst: int = _int(1000, lo=1)
    #: Useless frames the budget regains per second.
    http2_glitch_refill_per_second: int = _int(33)
    #: Empty DATA or CONTINUATION frames in a row before the connection is closed.
    http2_max_consecutive_empty_frames: int = _int(10, lo=1)
    #: Entries in one SETTINGS frame.
    http2_max_settings_entries: int = _int(32, lo=1)
    #: Request bytes being assembled on one connection (received, not yet handed to a
    #: handler); over it, flow-control credit is held back until some are consumed.  Keep it
    #: at least ``[limits] max_message_bytes``, or one such message can stall.
    max_buffered_request_bytes_per_connection: int = _int(32 << 20, lo=1)
    #: Request bytes being assembled across the server; over it, credit is held back on
    #: every connection and new streams are refused (REFUSED_STREAM).
    max_buffered_request_bytes: int = _int(256 << 20, lo=1)

    # Connection lifetime (``http2-hardening.md`` §6, "Max age").
    #: A connection this old (give or take 10 %, drawn per connection so that clients do
    #: not all reconnect at once) gets a graceful GOAWAY; its calls may finish; 0: never.
    max_connection_age_ms: int = _int(3_600_000)
    #: Calls still running this long after the age GOAWAY are cancelled and the
    #: connection closed (the longest Reserve wait, 5 min, plus slack); 0: they may run on.
    max_connection_age_grace_ms: int = _int(360_000)

    def __post_init__(self) -> None:
        check_fields(self, "server")
        if (self.tls_cert_path is None) != (self.tls_key_path is None):
            present, missing = (
                ("tls_cert_path", "tls_key_path")
                if self.tls_key_path is None
                else ("tls_key_path", "tls_cert_path")
            )
            raise ConfigError(
                f"server.{missing}", f"must be set when server.{present} is; set both or neither"
            )

    @property
    def tls_enabled(self) -> bool:
        """True when both TLS paths are set."""
        return self.tls_cert_path is not None and self.tls_key_path is not None


@dataclass(frozen=True, slots=True)
class ApiKey:
    """One accepted API key; newer configs give each key a name (``{name, key}``)."""

    #: The secret, visible ASCII 0x21-0x7E.
    key: str = field(repr=False)
    #: Optional label, for logs.
    name: str | None = None


@dataclass(frozen=True, kw_only=True)
class AuthConfig:
    """``[auth]``: API keys.  Enforced by the network adapter, not by the engine.

    ``api_keys`` None (absent) disables auth; an empty tuple refuses every call.
    """

    api_keys: tuple[ApiKey, ...] | None = None

    def __post_init__(self) -> None:
        if self.api_keys is None:
            return
        seen_keys: set[str] = set()
        seen_names: set[str] = set()
        for i, entry in enumerate(self.api_keys):
            key = f"auth.api_keys[{i}]"
            if not isinstance(entry, ApiKey):
                raise ConfigError(key, "must be an ApiKey")
            if not entry.key:
                raise ConfigError(key, "must not be empty")
            if any(not "\x21" <= c <= "\x7e" for c in entry.key):
                raise ConfigError(key, "must contain only visible ASCII characters (0x21-0x7E)")
            if entry.key in seen_keys:
                raise ConfigError(key, "duplicates an earlier key")
            seen_keys.add(entry.key)
            if entry.name is not None:
                if not entry.name:
                    raise ConfigError(f"{key}.name", "must not be empty")
                if entry.name in seen_names:
                    raise ConfigError(f"{key}.name", f"duplicates an earlier name {entry.name!r}")
                seen_names.add(entry.name)

    @property
    def accepted_keys(self) -> frozenset[str] | None:
        """The accepted secrets, or None when auth is disabled."""
        if self.api_keys is None:
            return None
        return frozenset(entry.key for entry in self.api_keys)


@dataclass(frozen=True, kw_only=True)
class LimitsConfig:
    """``[limits]``: global limits (protocol §3.12); many can be overridden per queue."""

    max_lease_duration_ms: int = _int(300_000, lo=1)
    default_max_attempts: int = _int(3, lo=1, hi=U32_MAX)
    max_attempts_ceiling: int = _int(100, lo=1, hi=U32_MAX)
    default_priority: int = _int(0, hi=9)
    max_reserve_batch: int = _int(256, lo=1, hi=U32_MAX)
    max_reserve_queues: int = _int(32, lo=1, hi=U32_MAX)
    max_wait_timeout_ms: int = _int(300_000, lo=1)
    max_enqueue_batch: int = _int(256, lo=1, hi=U32_MAX)
    #: Cap on live jobs (ready + scheduled + inflight) per queue; None = unlimited.
    max_queue_depth: int | None = _opt_int()
    max_payload_bytes: int = _int(1 << 20, lo=1)
    #: Largest decoded gRPC request (enforced by the network adapter).
    max_message_bytes: int = _int(16 << 20, lo=1)
    max_custom_entries: int = _int(64, lo=1, hi=U32_MAX)
    max_custom_total_bytes: int = _int(16 << 10, lo=1)
    max_custom_key_bytes: int = _int(256, lo=1, hi=U32_MAX)
    max_queue_name_bytes: int = _int(512, lo=1, hi=QUEUE_NAME_HARD_CEILING)
    max_job_type_bytes: int = _int(256, lo=1, hi=U32_MAX)
    max_idempotency_key_bytes: int = _int(256, lo=1, hi=U32_MAX)
    max_schedule_horizon_ms: int = _int(30 * 24 * 3600 * 1000, lo=1)
    #: Encoding allow-list; None = anything, () = every payload is rejected.
    allowed_encodings: tuple[str, ...] | None = _str_list()
    retry_delay_ms: int = _int(0)
    retry_backoff: Literal["none", "exponential"] = _choice("none", "none", "exponential")
    retry_delay_max_ms: int = _int(3_600_000)

    def __post_init__(self) -> None:
        check_fields(self, "limits")


@dataclass(frozen=True, kw_only=True)
class StorageConfig:
    """``[storage]``: restart-only settings of the store and of the sweeper."""

    #: ``sync_all``/``sync_data``: durable before replying; ``buffer``: the OS flushes.
    persist_mode: Literal["sync_all", "sync_data", "buffer"] = _choice(
        "sync_all", "sync_all", "sync_data", "buffer"
    )
    #: Longest the timer sleeps between sweeps (it normally wakes at the next deadline).
    sweep_interval_ms: int = _int(1000, lo=1)
    #: Items handled per sweep phase, and records examined per DrainDeadLetters call.
    sweep_limit: int = _int(10_000, lo=1)
    dedup_window_ms: int = _int(86_400_000, lo=1)
    #: 0 disables the dead-letter store.
    dead_letter_retention_ms: int = _int(0)
    # The following keys are accepted for compatibility with real sepp.toml files; they tune
    # the Rust server's fjall store and have no effect here.
    command_queue_capacity: int = _int(4096, lo=1)
    cache_size_bytes: int | None = _opt_int(lo=1)
    max_journaling_size_bytes: int | None = _opt_int(lo=64 * 1024 * 1024)
    max_cached_files: int | None = _opt_int(lo=10)
    worker_threads: int | None = _opt_int(lo=1)

    def __post_init__(self) -> None:
        check_fields(self, "storage")

    @property
    def sqlite_synchronous(self) -> Literal["FULL", "NORMAL"]:
        """The SQLite ``synchronous`` level equivalent to ``persist_mode``."""
        return "NORMAL" if self.persist_mode == "buffer" else "FULL"


@dataclass(frozen=True, kw_only=True)
class UiConfig:
    """``[ui]``: the web console (``sepp-anyio server --ui-port``; needs ``sepp-anyio[ui]``).

    It listens on the server's host; None (the default) leaves it off.
    """

    #: TCP port of the console; 0 picks a free one; None: no console.
    port: int | None = _opt_int(hi=65535)
    #: Rows per page of a job or dead-letter listing (the most a page may ask for).
    page_size: int = _int(50, lo=1, hi=1000)
    #: Bytes of a payload shown in a job's preview; the rest is cut off.
    payload_preview_bytes: int = _int(4096, lo=16, hi=1_048_576)

    def __post_init__(self) -> None:
        check_fields(self, "ui")


@dataclass(frozen=True, kw_only=True)
class QueueConfig:
    """One ``[[queues]]`` entry: a declared queue and its overrides (None = inherit)."""

    name: str = field(metadata={"kind": "str"})
    max_lease_duration_ms: int | None = _opt_int(lo=1)
    default_max_attempts: int | None = _opt_int(lo=1, hi=U32_MAX)
    max_attempts_ceiling: int | None = _opt_int(lo=1, hi=U32_MAX)
    default_priority: int | None = _opt_int(hi=9)
    retry_delay_ms: int | None = _opt_int()
    retry_backoff: Literal["none", "exponential"] | None = _choice(None, "none", "exponential")
    retry_delay_max_ms: int | None = _opt_int()
    max_payload_bytes: int | None = _opt_int(lo=1)
    #: Replaces the global list when set.
    allowed_encodings: tuple[str, ...] | None = _str_list()
    #: Per queue only: None = any job type, () = none.
    allowed_job_types: tuple[str, ...] | None = _str_list()
    max_schedule_horizon_ms: int | None = _opt_int(lo=1)
    max_custom_entries: int | None = _opt_int(lo=1, hi=U32_MAX)
    max_custom_total_bytes: int | None = _opt_int(lo=1)
    max_custom_key_bytes: int | None = _opt_int(lo=1, hi=U32_MAX)
    #: Restart-only, like the global one.
    dedup_window_ms: int | None = _opt_int(lo=1)
    max_queue_depth: int | None = _opt_int()


@dataclass(frozen=True, kw_only=True, slots=True)
class QueueLimits:
    """The effective limits of one queue: its overrides merged over the globals."""

    max_lease_duration_ms: int
    default_max_attempts: int
    max_attempts_ceiling: int
    default_priority: int
    retry_delay_ms: int
    retry_backoff: RetryBackoff
    retry_delay_max_ms: int
    max_payload_bytes: int
    allowed_encodings: tuple[str, ...] | None
    allowed_job_types: tuple[str, ...] | None
    max_schedule_horizon_ms: int
    max_custom_entries: int
    max_custom_total_bytes: int
    max_custom_key_bytes: int
    dedup_window_ms: int
    max_queue_depth: int | None


def merge_limits(
    limits: LimitsConfig, storage: StorageConfig, q: QueueConfig | None
) -> QueueLimits:
    def pick(name: str, default: Any) -> Any:
        value = None if q is None else getattr(q, name)
        return default if value is None else value

    return QueueLimits(
        max_lease_duration_ms=pick("max_lease_duration_ms", limits.max_lease_duration_ms),
        default_max_attempts=pick("default_max_attempts", limits.default_max_attempts),
        max_attempts_ceiling=pick("max_attempts_ceiling", limits.max_attempts_ceiling),
        default_priority=pick("default_priority", limits.default_priority),
        retry_delay_ms=pick("retry_delay_ms", limits.retry_delay_ms),
        retry_backoff=pick("retry_backoff", limits.retry_backoff),
        retry_delay_max_ms=pick("retry_delay_max_ms", limits.retry_delay_max_ms),
        max_payload_bytes=pick("max_payload_bytes", limits.max_payload_bytes),
        allowed_encodings=pick("allowed_encodings", limits.allowed_encodings),
        # No global equivalent: an undeclared queue accepts every job type.
        allowed_job_types=None if q is None else q.allowed_job_types,
        max_schedule_horizon_ms=pick("max_schedule_horizon_ms", limits.max_schedule_horizon_ms),
        max_custom_entries=pick("max_custom_entries", limits.max_custom_entries),
        max_custom_total_bytes=pick("max_custom_total_bytes", limits.max_custom_total_bytes),
        max_custom_key_bytes=pick("max_custom_key_bytes", limits.max_custom_key_bytes),
        dedup_window_ms=pick("dedup_window_ms", storage.dedup_window_ms),
        max_queue_depth=pick("max_queue_depth", limits.max_queue_depth),
    )


def check_merged(merged: QueueLimits, max_message_bytes: int, scope: str, where: str) -> None:
    """Cross-field rules, applied to the globals and to each queue's merged view."""
    ceiling_key = "limits.max_attempts_ceiling" if scope == "limits" else "max_attempts_ceiling"
    if merged.default_max_attempts > merged.max_attempts_ceiling:
        raise ConfigError(
            f"{scope}.default_max_attempts",
            f"must be <= {ceiling_key} ({merged.max_attempts_ceiling}){where}",
        )
    if merged.max_payload_bytes > max_message_bytes:
        raise ConfigError(
            f"{scope}.max_payload_bytes",
            f"must be <= limits.max_message_bytes ({max_message_bytes}){where}",
        )
    delay_key = "limits.retry_delay_ms" if scope == "limits" else "retry_delay_ms"
    if merged.retry_delay_max_ms < merged.retry_delay_ms:
        raise ConfigError(
            f"{scope}.retry_delay_max_ms",
            f"must be >= {delay_key} ({merged.retry_delay_ms}){where}",
        )
