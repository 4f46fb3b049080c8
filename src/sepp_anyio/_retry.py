"""Retrying RPCs that failed transiently, per :class:`~sepp_anyio.RetryPolicy`."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Collection
from typing import TypeVar

import anyio
from grpclib.exceptions import GRPCError

from ._model._errors import error_from_status
from ._model._retries import RetryPolicy

__all__ = ["call_with_retry"]

logger = logging.getLogger("sepp_anyio")

T = TypeVar("T")


async def call_with_retry(
    rpc: str,
    attempt: Callable[[], Awaitable[T]],
    *,
    policy: RetryPolicy | None,
    retry_codes: Collection[int],
) -> T:
    """Run ``attempt`` until it succeeds, fails for good, or the tries run out.

    ``policy=None`` means a single try (reserve and drain are never retried).
    A status in ``retry_codes`` is retried after ``policy.backoff(n)``; the
    sleep is an ordinary anyio sleep, so cancelling the caller cancels it.

    Raises:
        SeppError: the taxonomy error for the last failure (the grpclib error
            is not chained, so it never reaches the caller).
    """
    tries = 1 if policy is None else policy.max_attempts
    for index in range(tries):
        try:
            return await attempt()
        except GRPCError as exc:
            code = exc.status.value
            if index + 1 < tries and code in retry_codes:
                assert policy is not None
                delay = policy.backoff(index)
                logger.warning(
                    "%s failed with %s (%s); retry %d of %d in %.3fs",
                    rpc,
                    exc.status.name,
                    exc.message or "no message",
                    index + 1,
                    tries - 1,
                    delay,
                )
                await anyio.sleep(delay)
                continue
            raise error_from_status(code, exc.message or "", rpc=rpc) from None
    raise AssertionError("unreachable")  # pragma: no cover
