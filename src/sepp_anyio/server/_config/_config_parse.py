"""Turning TOML text and ``SEPP_<SECTION>__<FIELD>`` environment variables into config sections.

The value rules live on the dataclasses in ``_sections.py``; this module maps raw data onto
them and rejects what the real server's schema does not know (unknown sections and keys).
It returns the keyword arguments of a ``ServerConfig`` (``_config.py`` builds it: the
whole's cross-section rules are its own).
"""

from __future__ import annotations

import dataclasses
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .._errors import ConfigError
from ._sections import (
    ApiKey,
    AuthConfig,
    LimitsConfig,
    QueueConfig,
    ServerSection,
    StorageConfig,
    UiConfig,
)

_SECTIONS: dict[str, type[Any]] = {
    "server": ServerSection,
    "limits": LimitsConfig,
    "storage": StorageConfig,
    "ui": UiConfig,
}
# Sections of a real sepp.toml that configure parts the reference server does not have
# (admin UI, logging, OpenTelemetry, metrics, raft).  They are accepted so that one file can
# serve both servers, and otherwise ignored.
_IGNORED_SECTIONS = frozenset({"admin", "logging", "tracing", "metrics", "cluster"})
_DEFAULT_PATH = "sepp.toml"


def config_kwargs_from_toml(source: str | Mapping[str, Any]) -> dict[str, Any]:
    """The ``ServerConfig`` keyword arguments of :meth:`ServerConfig.from_toml`."""
    if isinstance(source, str):
        try:
            data: Mapping[str, Any] = tomllib.loads(source)
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError("config", f"is not valid TOML: {exc}") from None
    else:
        data = source
    return _build(data)


def config_kwargs_from_sources(path: str | Any | None, env: Mapping[str, str]) -> dict[str, Any]:
    """The ``ServerConfig`` keyword arguments of :meth:`ServerConfig.from_sources`."""
    explicit = path is not None
    if path is None and env.get("SEPP_CONFIG"):
        path, explicit = env["SEPP_CONFIG"], True
    if path is None and Path(_DEFAULT_PATH).is_file():
        path = _DEFAULT_PATH
    data: dict[str, Any] = {}
    if path is not None:
        file = Path(path)
        if explicit and not file.exists():
            raise ConfigError("config", f"file not found: {file}")
        try:
            data = tomllib.loads(file.read_text(encoding="utf-8"))
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError("config", f"file {file} is not valid TOML: {exc}") from None
        except OSError as exc:
            raise ConfigError("config", f"file {file} cannot be read: {exc}") from None
    return _build(_apply_env(data, env))


def _build(data: Mapping[str, Any]) -> dict[str, Any]:
    kwargs: dict[str, Any] = {}
    for name, value in data.items():
        if name in _SECTIONS:
            kwargs[name] = _build_table(name, _SECTIONS[name], _table(name, value))
        elif name == "auth":
            kwargs[name] = _build_auth(_table(name, value))
        elif name == "queues":
            if not isinstance(value, list):
                raise ConfigError("queues", "must be an array of tables ([[queues]])")
            kwargs[name] = tuple(
                _build_table(f"queues[{i}]", QueueConfig, _table(f"queues[{i}]", item))
                for i, item in enumerate(value)
            )
        elif name in _IGNORED_SECTIONS:
            table = _table(name, value)
            if name == "cluster" and table.get("enabled", False) is not False:
                raise ConfigError(
                    "cluster.enabled", "is not supported by the reference server (single node)"
                )
        else:
            raise ConfigError(name, "is not a known section")
    return kwargs


def _table(key: str, value: Any) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise ConfigError(key, "must be a table")
    return value


def _build_table(prefix: str, cls: type[Any], table: Mapping[str, Any]) -> Any:
    known = {f.name: f for f in dataclasses.fields(cls) if f.init}
    kwargs: dict[str, Any] = {}
    for key, value in table.items():
        f = known.get(key)
        if f is None:
            raise ConfigError(f"{prefix}.{key}", "is not a known key")
        if f.metadata.get("kind") == "str_list":
            if not isinstance(value, list | tuple):
                raise ConfigError(f"{prefix}.{key}", "must be a list of strings")
            value = tuple(value)
        kwargs[key] = value
    if cls is QueueConfig and "name" not in kwargs:
        raise ConfigError(f"{prefix}.name", "is required")
    return cls(**kwargs)


def _build_auth(table: Mapping[str, Any]) -> AuthConfig:
    for key in table:
        if key != "api_keys":
            raise ConfigError(f"auth.{key}", "is not a known key")
    raw = table.get("api_keys")
    if raw is None:
        return AuthConfig()
    if not isinstance(raw, list | tuple):
        raise ConfigError("auth.api_keys", "must be a list of keys or of {name, key} tables")
    entries: list[ApiKey] = []
    for i, item in enumerate(raw):
        where = f"auth.api_keys[{i}]"
        if isinstance(item, str):
            entries.append(ApiKey(item))
            continue
        if not isinstance(item, Mapping):
            raise ConfigError(where, "must be a string or a {name, key} table")
        for key in item:
            if key not in ("name", "key"):
                raise ConfigError(f"{where}.{key}", "is not a known key")
        key_value, name = item.get("key"), item.get("name")
        if not isinstance(key_value, str):
            raise ConfigError(f"{where}.key", "is required and must be a string")
        if name is not None and not isinstance(name, str):
            raise ConfigError(f"{where}.name", "must be a string")
        entries.append(ApiKey(key_value, name))
    return AuthConfig(api_keys=tuple(entries))


def _apply_env(data: Mapping[str, Any], env: Mapping[str, str]) -> dict[str, Any]:
    """Overlay ``SEPP_<SECTION>__<FIELD>`` variables on the parsed file (env wins).

    Variables without ``__`` (``SEPP_CONFIG``, client settings sharing the prefix) and with a
    section the reference server does not model are ignored; an unknown field of a known
    section is an error, since it is almost certainly a typo.
    """
    merged: dict[str, Any] = {k: dict(v) if isinstance(v, Mapping) else v for k, v in data.items()}
    for var in sorted(env):
        if not var.upper().startswith("SEPP_"):
            continue
        rest = var[len("SEPP_") :]
        if rest.lower() == "queues":
            merged["queues"] = _parse_env_toml(var, "queues", env[var])
            continue
        section, sep, name = rest.partition("__")
        section, name = section.lower(), name.lower()
        if not sep or (section not in _SECTIONS and section != "auth"):
            continue
        key = f"{section}.{name}"
        table = merged.setdefault(section, {})
        if not isinstance(table, dict):
            raise ConfigError(section, "must be a table")
        if section == "auth":
            if name != "api_keys":
                raise ConfigError(key, f"is not a known key (set by {var})")
            table[name] = _parse_env_toml(var, key, env[var])
            continue
        fields = {f.name: f for f in dataclasses.fields(_SECTIONS[section]) if f.init}
        f = fields.get(name)
        if f is None:
            raise ConfigError(key, f"is not a known key (set by {var})")
        table[name] = _parse_env_value(var, key, f.metadata.get("kind", "str"), env[var])
    return merged


def _parse_env_value(var: str, key: str, kind: str, raw: str) -> Any:
    text = raw.strip()
    if kind == "int":
        try:
            return int(text)
        except ValueError:
            raise ConfigError(key, f"must be an integer, not {raw!r} (set by {var})") from None
    if kind == "bool":
        if text.lower() in ("true", "false"):
            return text.lower() == "true"
        raise ConfigError(key, f"must be true or false, not {raw!r} (set by {var})")
    if kind == "str_list":
        return _parse_env_toml(var, key, raw)
    return raw


def _parse_env_toml(var: str, key: str, raw: str) -> Any:
    """Parse a TOML value such as ``["a", "b"]`` or ``[{name = "q"}]``."""
    try:
        return tomllib.loads(f"value = {raw}")["value"]
    except tomllib.TOMLDecodeError:
        raise ConfigError(key, f"must be a TOML array, not {raw!r} (set by {var})") from None
