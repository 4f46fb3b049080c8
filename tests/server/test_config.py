"""ServerConfig: defaults, TOML parsing, validation naming the key, env overrides."""

from __future__ import annotations

from pathlib import Path

import pytest

from sepp_anyio.server import (
    ApiKey,
    AuthConfig,
    ConfigError,
    LimitsConfig,
    QueueConfig,
    ServerConfig,
    StorageConfig,
)


def error_for(source: str | dict[str, object]) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        ServerConfig.from_toml(source)
    return info.value


def test_defaults_match_the_protocol_table() -> None:
    config = ServerConfig()
    limits, storage = config.limits, config.storage
    assert limits.max_payload_bytes == 1_048_576
    assert limits.max_message_bytes == 16_777_216
    assert limits.max_custom_entries == 64
    assert limits.max_custom_total_bytes == 16_384
    assert limits.max_custom_key_bytes == 256
    assert limits.max_queue_name_bytes == 512
    assert limits.max_job_type_bytes == 256
    assert limits.max_idempotency_key_bytes == 256
    assert limits.max_schedule_horizon_ms == 2_592_000_000
    assert limits.max_enqueue_batch == 256
    assert limits.max_reserve_batch == 256
    assert limits.max_reserve_queues == 32
    assert limits.max_wait_timeout_ms == 300_000
    assert limits.max_lease_duration_ms == 300_000
    assert limits.default_max_attempts == 3
    assert limits.max_attempts_ceiling == 100
    assert limits.default_priority == 0
    assert (limits.retry_delay_ms, limits.retry_backoff, limits.retry_delay_max_ms) == (
        0,
        "none",
        3_600_000,
    )
    assert limits.max_queue_depth is None
    assert limits.allowed_encodings is None
    assert storage.dedup_window_ms == 86_400_000
    assert storage.dead_letter_retention_ms == 0
    assert (storage.sweep_interval_ms, storage.sweep_limit) == (1000, 10_000)
    assert storage.persist_mode == "sync_all"
    assert config.server.listen_addr == "0.0.0.0:50051"
    assert config.server.strict_queues is False
    assert config.auth.api_keys is None
    assert not config.dead_letter_retention_enabled


def test_from_toml_reads_every_section() -> None:
    config = ServerConfig.from_toml(
        """
        [server]
        strict_queues = true
        db_path = "/tmp/x.sqlite3"

        [auth]
        api_keys = ["plain-key", { name = "workers", key = "w-key" }]

        [limits]
        max_reserve_batch = 8
        allowed_encodings = ["json"]
        retry_delay_ms = 100
        retry_backoff = "exponential"

        [storage]
        dead_letter_retention_ms = 60000
        persist_mode = "buffer"

        [logging]
        level = "debug"

        [[queues]]
        name = "emails"
        default_priority = 5
        allowed_job_types = ["send"]

        [[queues]]
        name = "reports"
        """
    )
    assert config.server.strict_queues
    assert config.auth.api_keys == (ApiKey("plain-key"), ApiKey("w-key", "workers"))
    assert config.auth.accepted_keys == frozenset({"plain-key", "w-key"})
    assert config.limits.max_reserve_batch == 8
    assert config.limits.allowed_encodings == ("json",)
    assert config.storage.sqlite_synchronous == "NORMAL"
    assert config.dead_letter_retention_enabled
    assert [q.name for q in config.queues] == ["emails", "reports"]
    assert config.is_declared("emails")
    assert not config.is_declared("other")


def test_per_queue_limits_merge_over_globals() -> None:
    config = ServerConfig(
        limits=LimitsConfig(allowed_encodings=("json",), max_lease_duration_ms=1000),
        queues=(
            QueueConfig(name="a", allowed_encodings=("msgpack",), allowed_job_types=("x",)),
            QueueConfig(name="b", max_lease_duration_ms=50),
        ),
    )
    a, b, other = config.limits_for("a"), config.limits_for("b"), config.limits_for("zzz")
    assert a.allowed_encodings == ("msgpack",)  # replaces the global list
    assert a.allowed_job_types == ("x",)
    assert a.max_lease_duration_ms == 1000
    assert b.allowed_encodings == ("json",)
    assert b.max_lease_duration_ms == 50
    assert other.allowed_job_types is None  # no global job-type allow-list
    assert other == config.default_limits


def test_payload_limit_above_message_limit_names_the_key() -> None:
    err = error_for({"limits": {"max_payload_bytes": 100, "max_message_bytes": 10}})
    assert err.key == "limits.max_payload_bytes"
    assert str(err).startswith("limits.max_payload_bytes must be <= limits.max_message_bytes")


def test_default_max_attempts_above_ceiling_names_the_key() -> None:
    err = error_for({"limits": {"default_max_attempts": 5, "max_attempts_ceiling": 4}})
    assert err.key == "limits.default_max_attempts"


def test_retry_delay_max_below_retry_delay_names_the_key() -> None:
    err = error_for({"limits": {"retry_delay_ms": 10, "retry_delay_max_ms": 5}})
    assert err.key == "limits.retry_delay_max_ms"


def test_queue_override_checked_against_merged_limits() -> None:
    err = error_for({"queues": [{"name": "ok"}, {"name": "bad", "default_max_attempts": 101}]})
    assert err.key == "queues[1].default_max_attempts"
    assert "'bad'" in str(err)


def test_unknown_section_rejected() -> None:
    assert error_for("[limitz]\nx = 1").key == "limitz"


def test_unknown_key_rejected() -> None:
    assert error_for("[limits]\nmax_payload = 1").key == "limits.max_payload"
    assert error_for({"queues": [{"name": "q", "colour": "red"}]}).key == "queues[0].colour"
    assert error_for({"auth": {"keys": []}}).key == "auth.keys"


def test_wrong_value_type_rejected() -> None:
    assert error_for('[limits]\nmax_reserve_batch = "8"').key == "limits.max_reserve_batch"
    assert error_for("[limits]\nmax_reserve_batch = true").key == "limits.max_reserve_batch"
    assert error_for("[server]\nstrict_queues = 1").key == "server.strict_queues"
    assert error_for('[limits]\nretry_backoff = "linear"').key == "limits.retry_backoff"
    assert error_for("[limits]\nallowed_encodings = [1]").key == "limits.allowed_encodings[0]"


def test_range_rules() -> None:
    assert error_for("[limits]\ndefault_priority = 10").key == "limits.default_priority"
    assert error_for("[limits]\nmax_reserve_batch = 0").key == "limits.max_reserve_batch"
    assert error_for("[limits]\nmax_queue_name_bytes = 65536").key == "limits.max_queue_name_bytes"
    assert error_for("[storage]\nsweep_limit = 0").key == "storage.sweep_limit"
    assert error_for("[limits]\nmax_queue_depth = -1").key == "limits.max_queue_depth"


@pytest.mark.parametrize("name", ["", ".", "..", "a/b", "tab\there", "del\x7f"])
def test_queue_name_rules(name: str) -> None:
    assert error_for({"queues": [{"name": name}]}).key == "queues[0].name"


def test_queue_name_length_and_uniqueness() -> None:
    err = error_for({"limits": {"max_queue_name_bytes": 3}, "queues": [{"name": "abcd"}]})
    assert err.key == "queues[0].name"
    assert error_for({"queues": [{"name": "a"}, {"name": "a"}]}).key == "queues[1].name"
    assert error_for({"queues": [{"default_priority": 1}]}).key == "queues[0].name"


@pytest.mark.parametrize(
    ("keys", "key"),
    [
        (["good", "bad key"], "auth.api_keys[1]"),
        (["é"], "auth.api_keys[0]"),
        ([""], "auth.api_keys[0]"),
        (["same", "same"], "auth.api_keys[1]"),
        ([{"name": "n"}], "auth.api_keys[0].key"),
        ([{"name": "n", "key": "a"}, {"name": "n", "key": "b"}], "auth.api_keys[1].name"),
        ([{"key": "a", "role": "admin"}], "auth.api_keys[0].role"),
    ],
)
def test_api_key_rules(keys: list[object], key: str) -> None:
    assert error_for({"auth": {"api_keys": keys}}).key == key


def test_empty_api_key_list_refuses_everyone() -> None:
    config = ServerConfig.from_toml("[auth]\napi_keys = []")
    assert config.auth.accepted_keys == frozenset()
    assert ServerConfig().auth.accepted_keys is None


def test_tls_paths_both_or_neither() -> None:
    assert error_for('[server]\ntls_cert_path = "c.pem"').key == "server.tls_key_path"
    config = ServerConfig.from_toml('[server]\ntls_cert_path = "c"\ntls_key_path = "k"')
    assert config.server.tls_enabled


def test_cluster_mode_rejected_other_sections_ignored() -> None:
    assert error_for("[cluster]\nenabled = true").key == "cluster.enabled"
    ServerConfig.from_toml('[cluster]\nenabled = false\n[admin]\nlisten_addr = "x"')


def test_toml_syntax_error() -> None:
    assert error_for("[limits\n").key == "config"


def test_python_construction_validates_too() -> None:
    with pytest.raises(ConfigError, match=r"^storage\.sweep_interval_ms must be >= 1"):
        StorageConfig(sweep_interval_ms=0)
    with pytest.raises(ConfigError, match=r"auth\.api_keys\[0\]"):
        AuthConfig(api_keys=(ApiKey("has space"),))


def test_env_overrides_beat_the_file(tmp_path: Path) -> None:
    path = tmp_path / "sepp.toml"
    path.write_text("[limits]\nmax_reserve_batch = 8\nmax_enqueue_batch = 9\n")
    config = ServerConfig.from_sources(
        path,
        env={
            "SEPP_LIMITS__MAX_RESERVE_BATCH": "16",
            "SEPP_SERVER__STRICT_QUEUES": "true",
            "SEPP_LIMITS__ALLOWED_ENCODINGS": '["json", "msgpack"]',
            "SEPP_AUTH__API_KEYS": '["k1", {name = "n", key = "k2"}]',
            "SEPP_QUEUES": '[{name = "emails", default_priority = 3}]',
            "SEPP_SERVER__LISTEN_ADDR": "127.0.0.1:6000",
            "SEPP_STORAGE__DEAD_LETTER_RETENTION_MS": "1000",
            # Same prefix, not server settings: ignored.
            "SEPP_API_KEY": "client-side",
            "SEPP_WORKER__CONCURRENCY": "4",
        },
    )
    assert config.limits.max_reserve_batch == 16
    assert config.limits.max_enqueue_batch == 9
    assert config.server.strict_queues
    assert config.limits.allowed_encodings == ("json", "msgpack")
    assert config.auth.accepted_keys == frozenset({"k1", "k2"})
    assert config.limits_for("emails").default_priority == 3
    assert config.server.listen_addr == "127.0.0.1:6000"
    assert config.dead_letter_retention_enabled


def test_env_override_errors_name_key_and_variable() -> None:
    with pytest.raises(ConfigError) as info:
        ServerConfig.from_sources(env={"SEPP_LIMITS__MAX_RESERVE_BATCH": "lots"})
    assert info.value.key == "limits.max_reserve_batch"
    assert "SEPP_LIMITS__MAX_RESERVE_BATCH" in str(info.value)
    with pytest.raises(ConfigError) as info:
        ServerConfig.from_sources(env={"SEPP_LIMITS__NOPE": "1"})
    assert info.value.key == "limits.nope"
    with pytest.raises(ConfigError) as info:
        ServerConfig.from_sources(env={"SEPP_SERVER__STRICT_QUEUES": "maybe"})
    assert info.value.key == "server.strict_queues"


def test_config_path_from_env_and_missing_explicit_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert ServerConfig.from_sources(env={}) == ServerConfig()  # no ./sepp.toml: defaults
    (tmp_path / "sepp.toml").write_text("[limits]\nmax_reserve_batch = 3\n")
    assert ServerConfig.from_sources(env={}).limits.max_reserve_batch == 3
    other = tmp_path / "other.toml"
    other.write_text("[limits]\nmax_reserve_batch = 4\n")
    assert ServerConfig.from_sources(env={"SEPP_CONFIG": str(other)}).limits.max_reserve_batch == 4
    with pytest.raises(ConfigError, match="config file not found"):
        ServerConfig.from_sources(tmp_path / "missing.toml", env={})
