"""The two exceptions of the reference server.

- :class:`EngineError`: a whole RPC failed with a gRPC status (the network adapter turns it
  into a status reply; in-process callers see it as is).
- :class:`ConfigError`: the configuration is invalid; the message names the offending key.
"""

from __future__ import annotations

from sepp_anyio._model._error_root import StatusCode


class EngineError(Exception):
    """A whole-call failure of an engine RPC, with the gRPC status and message to reply with.

    Per-job enqueue problems are *not* raised: they come back as ``JobRejection`` values.
    """

    #: The gRPC status code of the reply.
    status: StatusCode
    #: The human-readable status message (the exact wording of the protocol).
    message: str

    def __init__(self, status: StatusCode, message: str) -> None:
        super().__init__(status, message)
        self.status = status
        self.message = message

    def __str__(self) -> str:
        return f"{self.status.name}: {self.message}"


class ConfigError(ValueError):
    """The server configuration is invalid.

    ``key`` is the dotted path of the offending setting (``limits.max_payload_bytes``,
    ``queues[2].name``, ``auth.api_keys[0]``) and the message always starts with it.
    """

    #: Dotted path of the offending key.
    key: str

    def __init__(self, key: str, problem: str) -> None:
        super().__init__(f"{key} {problem}")
        self.key = key
