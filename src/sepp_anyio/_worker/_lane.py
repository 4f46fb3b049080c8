"""Lanes: groups of queues with their own concurrency, batch size and rate limit.

``Worker(client, [Lane(["emails"], max_in_flight=4), Lane(["reports"], rate=RateLimit(10,
per=60))])``: the lanes share the worker's connection, task group, shutdown and drain,
and each has its own ``CapacityLimiter``, its own reserve loop and, with ``rate``, a token
bucket that is consulted *before* reserving, so a lane never leases a job it may not start
yet (a limit applied inside a handler would hold leases idle, and could lose them).
A lane whose handlers block does not slow another lane's reserves.

Limits are per process: the protocol has nowhere to keep a fleet-wide count, so ten
workers with ``RateLimit(10, per=60)`` start up to a hundred jobs a minute between them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import anyio

from .._bucket import TokenBucket
from .._model._checks import check_count, check_queue_names, check_seconds
from .._model._error_root import InvalidArgumentError, InvalidArgumentTypeError
from ._slots import Slots

if TYPE_CHECKING:
    from .._io._native import Waiter
    from ._lease import JobRun

__all__ = ["Lane", "LaneRun", "LaneStatistics", "RateGate", "RateLimit", "lanes_of"]

_DEFAULT_IN_FLIGHT = 16


def _queue_names(queues: object, name: str) -> tuple[str, ...]:
    if isinstance(queues, str) or not isinstance(queues, Sequence):
        raise InvalidArgumentTypeError(
            f"{name} must be a sequence of queue names, not a {type(queues).__name__}"
        )
    return tuple(check_queue_names(queues, name))


@dataclass(frozen=True, slots=True)
class RateLimit:
    """At most ``count`` job starts per ``per`` seconds, as a token bucket that starts full
    (so a burst of ``count`` goes at once) and refills continuously at ``count / per``
    tokens a second. Per process (see the module docs).

    Raises:
        InvalidArgumentError: ``count`` < 1, or ``per`` not a finite number > 0.
        InvalidArgumentTypeError: an argument of the wrong type.
    """

    count: int
    per: float = 1.0

    def __post_init__(self) -> None:
        check_count(self.count, "RateLimit count")
        per = check_seconds(self.per, "RateLimit per", minimum="positive")
        object.__setattr__(self, "per", per)


@dataclass(frozen=True, slots=True, init=False)
class Lane:
    """Queues reserved together, with their own limits (see the module docs).

    Args:
        queues: the lane's queues, in priority order (a queue belongs to one lane only).
        max_in_flight: the lane's jobs handled at once (its own ``CapacityLimiter``).
        max_jobs: most jobs per reserve; None: all the lane's free capacity.
        rate: a :class:`RateLimit` on the lane's job starts, applied before reserving.

    Raises:
        InvalidArgumentError: no queues, an empty queue name, a count < 1.
        InvalidArgumentTypeError: an argument of the wrong type.
    """

    queues: tuple[str, ...]
    max_in_flight: int
    max_jobs: int | None
    rate: RateLimit | None

    def __init__(
        self,
        queues: Sequence[str],
        *,
        max_in_flight: int = _DEFAULT_IN_FLIGHT,
        max_jobs: int | None = None,
        rate: RateLimit | None = None,
    ) -> None:
        object.__setattr__(self, "queues", _queue_names(queues, "Lane queues"))
        object.__setattr__(self, "max_in_flight", check_count(max_in_flight, "Lane max_in_flight"))
        if max_jobs is not None:
            check_count(max_jobs, "Lane max_jobs")
        object.__setattr__(self, "max_jobs", max_jobs)
        if rate is not None and not isinstance(rate, RateLimit):
            raise InvalidArgumentTypeError(
                f"Lane rate must be a sepp.RateLimit, got a {type(rate).__name__}"
            )
        object.__setattr__(self, "rate", rate)


def lanes_of(queues: object, max_in_flight: int | None, max_jobs: int | None) -> tuple[Lane, ...]:
    """The worker's lanes: the ``Lane`` objects given, or one lane of the queue names.

    Raises:
        InvalidArgumentError: no queues; names and lanes mixed; ``max_in_flight`` or
            ``max_jobs`` given with lanes; a queue in two lanes (each named).
        InvalidArgumentTypeError: ``queues`` is a str or not a sequence.
    """
    if isinstance(queues, str) or not isinstance(queues, Sequence):
        raise InvalidArgumentTypeError(
            "queues must be a sequence of queue names or of sepp.Lane, not a "
            f"{type(queues).__name__}"
        )
    given = list(queues)
    lanes = [item for item in given if isinstance(item, Lane)]
    if not lanes:
        return (
            Lane(
                _queue_names(given, "queues"),
                max_in_flight=_DEFAULT_IN_FLIGHT
                if max_in_flight is None
                else check_count(max_in_flight, "max_in_flight"),
                max_jobs=None if max_jobs is None else check_count(max_jobs, "max_jobs"),
            ),
        )
    if len(lanes) != len(given):
        raise InvalidArgumentError(
            "queues must be all queue names or all sepp.Lane, not a mix (put the names in "
            "a Lane of their own)"
        )
    conflicts = [
        name
        for name, value in (("max_in_flight", max_in_flight), ("max_jobs", max_jobs))
        if value is not None
    ]
    if conflicts:
        raise InvalidArgumentError(
            f"{' and '.join(conflicts)} cannot be given with lanes: each Lane has its own "
            "(Lane(queues, max_in_flight=..., max_jobs=...))"
        )
    owner: dict[str, int] = {}
    for index, lane in enumerate(lanes):
        for queue in lane.queues:
            if queue in owner:
                raise InvalidArgumentError(
                    f"queue {queue!r} is in lane {owner[queue]} and lane {index}: a queue "
                    "belongs to one lane"
                )
            owner[queue] = index
    return tuple(lanes)


class RateGate:
    """A lane's :class:`RateLimit`: the shared token bucket (``_bucket``) on anyio's clock,
    so virtual clocks drive it.

    Starts full. :meth:`take` waits until at least one token is there and takes up to the
    number asked for; :meth:`give_back` returns the ones a reserve did not use.
    """

    __slots__ = ("_bucket",)

    def __init__(self, limit: RateLimit) -> None:
        self._bucket = TokenBucket(limit.count, limit.count / limit.per)

    async def take(self, wanted: int) -> int:
        """Wait for a token, then take ``min(wanted, whole tokens)``; at least one.

        Cancellation (a shutdown while waiting) takes nothing.
        """
        granted = self._bucket.take(anyio.current_time(), wanted)
        while not granted:
            # Until the next refill's own time, which waking at it earns (see _bucket).
            due = self._bucket.next_refill()
            await anyio.sleep_until(due.at)
            granted = self._bucket.take(anyio.current_time(), wanted, due)
        return granted

    def give_back(self, count: int) -> None:
        """Return ``count`` unused tokens (a reserve returned fewer jobs than taken)."""
        self._bucket.give(anyio.current_time(), count)


@dataclass(frozen=True, slots=True)
class LaneStatistics:
    """One lane's counters (see :meth:`Worker.statistics`); the same as the worker's."""

    #: The lane's queues.
    queues: tuple[str, ...]
    in_flight: int
    processed: int
    nacked_retry: int
    nacked_dead_letter: int
    lease_lost: int
    settle_errors: int
    reserves: int
    reserve_errors: int
    max_in_flight_seen: int
    #: Jobs reserved past their deadline and dead-lettered unrun (also counted in
    #: ``nacked_dead_letter``).
    expired: int = 0


@dataclass(eq=False, slots=True)
class LaneRun:
    """The state of one lane's reserve loop and its counters (internal).

    A job of the lane holds a ``limiter`` token from the reserve until its outcome is
    decided, then a ``settles`` slot (with the token given back) until its ack or nack and
    the ``on_outcome`` call are over (see the model in ``_worker``'s module docs).
    """

    lane: Lane
    #: Its capacity, made by run() (a limiter belongs to one event loop): a token per job
    #: whose handler may run now.
    limiter: anyio.CapacityLimiter | None = None
    #: Room for jobs whose outcome is decided and whose ack or nack is on its way
    #: (``max_in_flight`` of them), made by run() too.
    settles: Slots | None = None
    bucket: RateGate | None = None
    #: The reserve in progress (cancelled by shutdown) and the event set once it unwound.
    reserve_scope: anyio.CancelScope | None = None
    reserve_unwound: anyio.Event | None = None
    #: Whether the reserve loop waits for a ``limiter`` token (a job handing one back then
    #: wakes it, and lets it reserve before its own ack goes out).
    awaiting_token: bool = False
    #: Every job of the lane not finished yet (running, or being settled).
    runs: set[JobRun] = field(default_factory=set)
    #: The jobs holding a ``limiter`` token, with the token (its borrower object).
    holding: dict[JobRun, object] = field(default_factory=dict)
    #: Jobs holding a ``settles`` slot (their ack or nack, then on_outcome, on its way).
    settling: int = 0
    #: run(until_idle=True): the worker's job-finish count when this lane's last reserve
    #: came back empty with nothing in flight (None: not idle).
    idle_at: int | None = None
    processed: int = 0
    nacked_retry: int = 0
    nacked_dead: int = 0
    lease_lost: int = 0
    settle_errors: int = 0
    expired: int = 0
    reserves: int = 0
    reserve_errors: int = 0
    max_seen: int = 0

    def start(self, waiter: Callable[[], Waiter]) -> None:
        """Make the per-run parts (inside run(), on its event loop; ``waiter`` makes the
        running backend's own wake-ups)."""
        self.limiter = anyio.CapacityLimiter(self.lane.max_in_flight)
        self.settles = Slots(self.lane.max_in_flight, waiter)
        self.bucket = None if self.lane.rate is None else RateGate(self.lane.rate)
        self.idle_at = None

    def statistics(self) -> LaneStatistics:
        return LaneStatistics(
            queues=self.lane.queues,
            in_flight=len(self.holding),
            processed=self.processed,
            nacked_retry=self.nacked_retry,
            nacked_dead_letter=self.nacked_dead,
            lease_lost=self.lease_lost,
            settle_errors=self.settle_errors,
            reserves=self.reserves,
            reserve_errors=self.reserve_errors,
            max_in_flight_seen=self.max_seen,
            expired=self.expired,
        )
