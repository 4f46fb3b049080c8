"""The queue-name rule shared by the configuration and by request validation.

The rule itself is the client's too (``sepp_anyio._model._checks``): one rule, so that a
name the client accepts is one this server accepts.
"""

from __future__ import annotations

from ..._model._checks import queue_name_problem

__all__ = ["QUEUE_NAME_HARD_CEILING", "queue_name_problem"]

#: Hard ceiling of ``limits.max_queue_name_bytes``, set by the real server's on-disk key format.
QUEUE_NAME_HARD_CEILING = 65535
