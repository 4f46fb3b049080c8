"""The admission policy on its own (``_admission``): the caps, the eviction order, the bound
on connections being closed, and exactly-once release.

The occupants here are plain records with the four attributes eviction reads (what a
served connection exposes); the whole path over sockets is tested in
``tests/server_hostile/test_eviction_virtual.py`` and ``test_connection_slots.py``.
"""

from __future__ import annotations

import dataclasses

import anyio
import anyio.abc
import anyio.lowlevel
import pytest

from sepp_anyio import InvalidArgumentError
from sepp_anyio.server._network._admission import Admission, Refusal, Slot

pytestmark = pytest.mark.anyio


@dataclasses.dataclass
class Record:
    """What eviction reads of a connection, and whether it was evicted."""

    handshaken: bool = True
    idle_since: float | None = 0.0
    calls_started: int = 0
    goaways: int = 0  # evict() calls: GOAWAY "evicted" and close

    def evict(self) -> None:
        self.goaways += 1


def evicted(slot: Slot) -> bool:
    """(A call, not the property: mypy would keep an earlier assert's narrowing of it.)"""
    return slot.evicted


def closing(admission: Admission) -> int:
    return admission.closing


def admit(admission: Admission, ip: str = "10.0.0.1") -> Slot:
    slot = admission.admit(ip, anyio.CancelScope())
    assert isinstance(slot, Slot)
    return slot


async def test_handshaking_oldest_first_then_idle_longest_never_busy() -> None:
    admission = Admission(100, 4)
    busy, served, unused, handshaking = (admit(admission) for _ in range(4))
    records = {
        busy: Record(idle_since=None, calls_started=1),
        served: Record(idle_since=1.0, calls_started=3),
        unused: Record(idle_since=5.0),
        handshaking: Record(handshaken=False),
    }
    for slot, record in records.items():
        admission.attach(slot, record)

    first = admit(admission)  # the handshaking one goes: its scope is cancelled, no GOAWAY
    assert evicted(handshaking) and handshaking.scope.cancel_called
    assert records[handshaking].goaways == 0
    admission.attach(first, Record(idle_since=9.0, calls_started=1))
    second = admit(admission)  # never called (though idle for less time) before those that did
    assert evicted(unused) and records[unused].goaways == 1
    third = admit(admission)  # the second still shakes hands (nothing attached): it goes
    assert evicted(second) and not evicted(served)
    admission.attach(third, Record(idle_since=20.0, calls_started=1))
    admit(admission)  # of those that called, the one idle longest
    assert evicted(served) and records[served].goaways == 1
    assert not any(evicted(slot) for slot in (busy, first, third))
    assert admission.open == 4 and closing(admission) == 4 and admission.evictions == 4


async def test_per_ip_refusal_when_nothing_is_evictable_and_total_full() -> None:
    admission = Admission(3, 2)
    for slot in (admit(admission), admit(admission)):
        admission.attach(slot, Record(idle_since=None))
    assert admission.admit("10.0.0.1", anyio.CancelScope()) is Refusal.PER_IP
    assert admission.refusals == 1
    other = admit(admission, "10.0.0.2")
    record = Record(idle_since=None)
    admission.attach(other, record)
    assert not admission.has_room()
    assert admission.admit("10.0.0.3", anyio.CancelScope()) is Refusal.FULL
    # Its call ends: it may be evicted, there is room again.
    record.idle_since = 2.0
    assert admission.has_room()
    admit(admission, "10.0.0.3")
    assert evicted(other) and admission.open_from("10.0.0.2") == 0


async def test_eviction_off_refuses() -> None:
    admission = Admission(2, 1, evict=False)
    slot = admit(admission)
    assert admission.admit("10.0.0.1", anyio.CancelScope()) is Refusal.PER_IP
    admit(admission, "10.0.0.2")
    assert admission.admit("10.0.0.3", anyio.CancelScope()) is Refusal.FULL
    assert not evicted(slot) and admission.evictions == 0


async def test_connections_being_closed_are_bounded() -> None:
    """At most ``max_connections`` evicted connections may be closing at once; past that,
    nothing more is evicted (the newcomer waits or is refused) until they are released."""
    admission = Admission(2, 2)
    slots = [admit(admission), admit(admission)]
    for _ in range(2):
        slots.append(admit(admission))
    assert closing(admission) == 2 and admission.open == 2
    assert admission.admit("10.0.0.1", anyio.CancelScope()) is Refusal.PER_IP
    assert admission.admit("10.0.0.9", anyio.CancelScope()) is Refusal.FULL
    admission.release(slots[0])
    admit(admission, "10.0.0.9")
    assert admission.peak_open == 2 and admission.peak_held == 4


async def test_release_is_exactly_once() -> None:
    admission = Admission(2, 2)
    victim, kept = admit(admission), admit(admission)
    admit(admission)  # evicts victim (still handshaking, the oldest)
    assert evicted(victim) and closing(admission) == 1
    for _ in range(3):
        admission.release(victim)
        admission.release(kept)
    assert closing(admission) == 0 and admission.open == 1 and not evicted(victim)
    assert admission.open_from("10.0.0.1") == 1


async def test_wait_for_room_wakes_on_release_and_on_idle() -> None:
    admission = Admission(1, 1)
    slot = admit(admission)
    record = Record(idle_since=None)
    admission.attach(slot, record)
    woken = anyio.Event()

    async def waiter(*, task_status: anyio.abc.TaskStatus[None]) -> None:
        task_status.started()
        await admission.wait_for_room()  # blocks before start() returns: no room
        woken.set()

    for make_room in ("call ended", "released"):
        async with anyio.create_task_group() as tg:
            woken = anyio.Event()
            await tg.start(waiter)
            await anyio.lowlevel.checkpoint()
            assert not woken.is_set()
            if make_room == "call ended":
                record.idle_since = 3.0
                admission.wake()  # what the connection's on_idle calls
            else:
                admission.release(slot)
            with anyio.fail_after(5):
                await woken.wait()
        slot = admit(admission)  # evicts the idle one, or takes the freed slot
        record = Record(idle_since=None)
        admission.attach(slot, record)


@pytest.mark.parametrize(
    ("value", "error"),
    [(0, InvalidArgumentError), (-1, InvalidArgumentError), (True, TypeError), (1.5, TypeError)],
)
async def test_bad_caps_name_the_field(value: object, error: type[Exception]) -> None:
    with pytest.raises(error, match="max_connections_per_ip"):
        Admission(1, value)  # type: ignore[arg-type]
