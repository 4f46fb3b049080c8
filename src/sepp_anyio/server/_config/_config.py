"""Server configuration: :class:`ServerConfig`, the whole of it, validated on construction.

Its sections are in ``_sections.py``; reading TOML text, files and ``SEPP_<SECTION>__<FIELD>``
environment overrides is ``_config_parse.py``'s, which builds the sections and hands them
here (so this module imports the parser, never the other way round).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .._errors import ConfigError
from ._config_parse import config_kwargs_from_sources, config_kwargs_from_toml
from ._names import queue_name_problem
from ._sections import (
    AuthConfig,
    LimitsConfig,
    QueueConfig,
    QueueLimits,
    ServerSection,
    StorageConfig,
    UiConfig,
    check_fields,
    check_merged,
    merge_limits,
)

__all__ = ["ServerConfig"]


@dataclass(frozen=True, kw_only=True)
class ServerConfig:
    """The whole server configuration.  Construction validates it (raises ConfigError).

    Build it in Python (``ServerConfig(limits=LimitsConfig(max_reserve_batch=8))``), from TOML
    (:meth:`from_toml`) or from a file plus environment overrides (:meth:`from_sources`).
    """

    server: ServerSection = field(default_factory=ServerSection)
    auth: AuthConfig = field(default_factory=AuthConfig)
    limits: LimitsConfig = field(default_factory=LimitsConfig)
    storage: StorageConfig = field(default_factory=StorageConfig)
    queues: tuple[QueueConfig, ...] = ()
    ui: UiConfig = field(default_factory=UiConfig)
    _defaults: QueueLimits = field(init=False, repr=False, compare=False)
    _declared: Mapping[str, QueueLimits] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        defaults = merge_limits(self.limits, self.storage, None)
        check_merged(defaults, self.limits.max_message_bytes, "limits", "")
        declared: dict[str, QueueLimits] = {}
        for i, q in enumerate(self.queues):
            scope = f"queues[{i}]"
            if not isinstance(q, QueueConfig):
                raise ConfigError(scope, "must be a QueueConfig")
            check_fields(q, scope)
            problem = queue_name_problem(q.name)
            if problem is not None:
                raise ConfigError(f"{scope}.name", problem)
            size = len(q.name.encode())
            if size > self.limits.max_queue_name_bytes:
                raise ConfigError(
                    f"{scope}.name",
                    f"is {size} bytes, more than limits.max_queue_name_bytes "
                    f"({self.limits.max_queue_name_bytes})",
                )
            if q.name in declared:
                raise ConfigError(f"{scope}.name", f"duplicates queue {q.name!r}")
            merged = merge_limits(self.limits, self.storage, q)
            check_merged(merged, self.limits.max_message_bytes, scope, f" (queue {q.name!r})")
            declared[q.name] = merged
        object.__setattr__(self, "_defaults", defaults)
        object.__setattr__(self, "_declared", declared)

    @property
    def default_limits(self) -> QueueLimits:
        """The limits of an undeclared queue (the globals)."""
        return self._defaults

    def limits_for(self, queue: str) -> QueueLimits:
        """The effective limits of *queue* (declared overrides, else the globals)."""
        return self._declared.get(queue, self._defaults)

    def is_declared(self, queue: str) -> bool:
        """True if *queue* has a ``[[queues]]`` entry."""
        return queue in self._declared

    @property
    def dead_letter_retention_enabled(self) -> bool:
        """``storage.dead_letter_retention_ms > 0``."""
        return self.storage.dead_letter_retention_ms > 0

    @classmethod
    def from_toml(cls, source: str | Mapping[str, Any]) -> ServerConfig:
        """Build a config from TOML text or from an already-parsed mapping.

        Raises:
            ConfigError: on a TOML syntax error, an unknown section or key, a value of the
                wrong type, or any rule violation; the message names the key.
        """
        return cls(**config_kwargs_from_toml(source))

    @classmethod
    def from_sources(
        cls, path: str | os.PathLike[str] | None = None, env: Mapping[str, str] | None = None
    ) -> ServerConfig:
        """Read the config file, then apply ``SEPP_<SECTION>__<FIELD>`` overrides from *env*.

        With *path* None, ``SEPP_CONFIG`` from *env* is used, else ``./sepp.toml`` if it
        exists, else the defaults.  *env* defaults to ``os.environ``.

        Raises:
            ConfigError: if an explicit path does not exist, or as :meth:`from_toml`.
        """
        return cls(**config_kwargs_from_sources(path, os.environ if env is None else env))
