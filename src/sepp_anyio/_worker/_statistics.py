"""What :meth:`Worker.statistics` returns: a snapshot of the worker's counters."""

from __future__ import annotations

from dataclasses import dataclass

from ._lane import LaneStatistics

__all__ = ["WorkerStatistics"]


@dataclass(frozen=True, slots=True)
class WorkerStatistics:
    """A snapshot of a worker's counters (see :meth:`Worker.statistics`)."""

    #: Jobs currently being handled (each holds one of ``max_in_flight`` slots): from the
    #: reserve until the outcome is decided; a job whose ack or nack is on its way holds
    #: a settle slot instead, and is not counted.
    in_flight: int
    #: Jobs acked.
    processed: int
    #: Jobs nacked for another attempt.
    nacked_retry: int
    #: Jobs nacked onto the dead-letter path (permanent, or out of attempts).
    nacked_dead_letter: int
    #: Jobs whose lease was lost while running (cancelled, not settled).
    lease_lost: int
    #: Acks or nacks that failed (the job will be redelivered, or already was settled).
    settle_errors: int
    #: Reserve calls made, and those that failed.
    reserves: int
    reserve_errors: int
    #: The most jobs that were ever in flight at once.
    max_in_flight_seen: int
    #: The same counters per lane, in the worker's order of lanes.
    lanes: tuple[LaneStatistics, ...] = ()
    #: Jobs reserved past their deadline and dead-lettered unrun (also counted in
    #: ``nacked_dead_letter``).
    expired: int = 0
