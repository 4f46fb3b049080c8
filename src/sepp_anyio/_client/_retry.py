"""Retrying RPCs that failed transiently, per :class:`~sepp_anyio.RetryPolicy`."""

from __future__ import annotations

import logging
from collections.abc import Collection

from .._grpc import GrpcError
from .._model._errors import error_from_status
from .._model._retries import RetryPolicy
from .._model._size_refusal import size_refusal

__all__ = ["retry_delay"]

logger = logging.getLogger("sepp_anyio")


def retry_delay(
    rpc: str,
    exc: GrpcError,
    index: int,
    *,
    policy: RetryPolicy | None,
    retry_codes: Collection[int],
) -> float:
    """The pause before the next try of ``rpc``, whose try number ``index`` (from 0)
    failed with ``exc``; logged. Called in the ``except`` block of the failed try.

    ``policy=None`` means a single try (reserve and drain are never retried). A status
    in ``retry_codes`` is retried after ``policy.backoff(index)``, until the policy's
    tries run out. A refusal of the request as over the server's message limit is never
    retried, whatever its status (grpc-go's and grpcio's RESOURCE_EXHAUSTED is otherwise
    retried): the same request would be refused again.

    Raises:
        SeppError: the taxonomy error, when the call is not tried again (the transport's
            error is not chained, so it never reaches the caller).
    """
    code = exc.code.value
    if (
        policy is None
        or index + 1 >= policy.max_attempts
        or code not in retry_codes
        or size_refusal(code, exc.message or "") is not None
    ):
        raise error_from_status(code, exc.message or "", rpc=rpc) from None
    delay = policy.backoff(index)
    logger.warning(
        "%s failed with %s (%s); retry %d of %d in %.3fs",
        rpc,
        exc.code.name,
        exc.message or "no message",
        index + 1,
        policy.max_attempts - 1,
        delay,
    )
    return delay
