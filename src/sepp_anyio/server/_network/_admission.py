"""Connection slots: who gets one when a cap is full (eviction instead of refusal).

The server holds at most ``max_connections`` connections, and at most
``max_connections_per_ip`` from one client address.  Refusing the newcomer when a cap is
full would let a few hundred sockets that never send a byte lock everyone out; so, as the
trusted servers do, the newcomer is admitted and the connection that has done least makes
room (:meth:`Admission.admit`):

1. a connection that has not finished its HTTP/2 handshake (client preface and first
   SETTINGS; a TLS handshake too), the oldest first: it is closed at once;
2. else a handshaken connection with no call in progress, the one idle longest, those that
   never started a call before those that did: it gets GOAWAY(NO_ERROR, ``evicted``) and
   is closed as after any GOAWAY;
3. a connection with a call in progress is never evicted.

Only when nothing can be evicted does a cap refuse: per address, the newcomer is closed at
once (:attr:`Refusal.PER_IP`); in total, it must wait (:attr:`Refusal.FULL`, and
:meth:`Admission.wait_for_room` pauses accepting) until a connection closes or becomes
idle.  With eviction switched off (``evict_when_full = false``) the caps always refuse.

An evicted connection stops counting against the caps at once (the newcomer takes its
slot) and counts as *closing* until its task has released it.  Closing connections are
bounded too: at most ``max_connections`` of them at once (past that nothing is evicted),
so the server holds at most ``2 * max_connections`` sockets, and an eviction costs no
memory beyond a closing connection's last second (``close_linger``).

Cost: finding the oldest handshaking connection is O(1) amortized (accept order is kept,
and each connection moves out of that order once, when it has shaken hands); finding the
longest-idle one scans the established connections of the pool (the address's, at most
``max_connections_per_ip``, or all), which only an attacker that completes handshakes
makes happen often.

Everything here runs on the server's event loop between awaits: no locking.  A slot is
evicted at most once (its state says so) and released exactly once.
"""

from __future__ import annotations

import enum
from typing import Final, Protocol, final

import anyio

from ..._model._checks import check_count

__all__ = ["Admission", "Occupant", "Refusal", "Slot"]


class Occupant(Protocol):
    """What eviction reads of a served connection (:class:`._served.ServedConnection`)."""

    @property
    def handshaken(self) -> bool:
        """The client's preface and first SETTINGS have arrived."""
        ...

    @property
    def idle_since(self) -> float | None:
        """When the connection last had no call in progress; None while calls run."""
        ...

    @property
    def calls_started(self) -> int:
        """Calls started on the connection so far."""
        ...

    def evict(self) -> None:
        """Send GOAWAY(NO_ERROR, ``evicted``) and close (a handshaken, idle connection)."""
        ...


class Refusal(enum.Enum):
    """Why :meth:`Admission.admit` gave no slot."""

    #: The address has ``max_connections_per_ip`` connections, all with calls in progress
    #: (or eviction is off): close the newcomer.
    PER_IP = "per_ip"
    #: The server has ``max_connections``, none evictable: wait (:meth:`wait_for_room`).
    FULL = "full"


class _State(enum.Enum):
    OPEN = 1  # counts against the caps
    CLOSING = 2  # evicted, its task not yet done
    RELEASED = 3


@final
class Slot:
    """One admitted connection's place under the caps (made by :meth:`Admission.admit`).

    Attributes:
        ip: the client's address.
        scope: the cancel scope the connection's task runs in; evicting a connection that
            has not finished its handshake cancels it.
        occupant: the served connection once it exists (:meth:`Admission.attach`).
    """

    __slots__ = ("_state", "ip", "occupant", "scope")

    def __init__(self, ip: str, scope: anyio.CancelScope) -> None:
        self.ip = ip
        self.scope = scope
        self.occupant: Occupant | None = None
        self._state = _State.OPEN

    @property
    def evicted(self) -> bool:
        """True once the slot was given to a newer connection (until released)."""
        return self._state is _State.CLOSING

    def __repr__(self) -> str:
        return f"<Slot {self.ip} {self._state.name.lower()}>"


@final
class _Pool:
    """Open slots of one address, or of the whole server, in two groups: those still
    handshaking (in accept order: oldest first) and those established."""

    __slots__ = ("established", "handshaking")

    def __init__(self) -> None:
        # Dicts as ordered sets: insertion order is accept order, removal is O(1).
        self.handshaking: dict[Slot, None] = {}
        self.established: dict[Slot, None] = {}

    def __len__(self) -> int:
        return len(self.handshaking) + len(self.established)


def _handshaken(slot: Slot) -> bool:
    occupant = slot.occupant
    return occupant is not None and occupant.handshaken


def _idle_rank(slot: Slot) -> tuple[bool, float] | None:
    """Eviction order among established slots (smallest first), None if not evictable."""
    occupant = slot.occupant
    assert occupant is not None
    since = occupant.idle_since
    if since is None:
        return None  # a call in progress
    return (occupant.calls_started > 0, since)


@final
class Admission:
    """The connection caps and the eviction policy of :class:`~._network.NetworkServer`.

    Args:
        max_connections: open connections at once.
        max_connections_per_ip: open connections at once from one address.
        evict: make room by eviction (see the module docstring); False: refuse.

    Raises:
        InvalidArgumentError: a cap below 1.
    """

    def __init__(
        self, max_connections: int, max_connections_per_ip: int, *, evict: bool = True
    ) -> None:
        self.max_connections: Final = check_count(max_connections, "max_connections")
        self.max_connections_per_ip: Final = check_count(
            max_connections_per_ip, "max_connections_per_ip"
        )
        self.evict: Final = evict
        self._all = _Pool()
        self._by_ip: dict[str, _Pool] = {}
        self._changed: anyio.Event | None = None
        #: Connections being closed after their eviction.
        self.closing = 0
        #: The most connections open at once (never above ``max_connections``).
        self.peak_open = 0
        #: The most connections open or closing at once.
        self.peak_held = 0
        #: Connections admitted so far.
        self.admitted = 0
        #: Connections evicted so far.
        self.evictions = 0
        #: Newcomers closed by the per-address cap so far.
        self.refusals = 0

    @property
    def open(self) -> int:
        """Connections holding a slot (evicted ones no longer do)."""
        return len(self._all)

    def open_from(self, ip: str) -> int:
        """Connections holding a slot from ``ip``."""
        pool = self._by_ip.get(ip)
        return 0 if pool is None else len(pool)

    # ------------------------------------------------------------ admission

    def admit(self, ip: str, scope: anyio.CancelScope) -> Slot | Refusal:
        """A slot for a new connection from ``ip`` whose task will run in ``scope``,
        evicting another connection if a cap is full; or why there is none.

        Never blocks.  An eviction happens here, synchronously: the victim is marked, its
        slot freed, and its close started (see the module docstring).
        """
        pool = self._by_ip.get(ip)
        if pool is not None and len(pool) >= self.max_connections_per_ip:
            victim = self._victim(pool)
            if victim is None:
                self.refusals += 1
                return Refusal.PER_IP
            self._evict(victim)
        if len(self._all) >= self.max_connections:
            # (Not after an eviction above: that freed a slot of the total too.)
            victim = self._victim(self._all)
            if victim is None:
                return Refusal.FULL
            self._evict(victim)
        slot = Slot(ip, scope)
        # (Looked up again: an eviction above may have emptied, and so dropped, the pool.)
        pool = self._by_ip.get(ip)
        if pool is None:
            pool = self._by_ip[ip] = _Pool()
        pool.handshaking[slot] = None
        self._all.handshaking[slot] = None
        self.admitted += 1
        held = len(self._all)
        self.peak_open = max(self.peak_open, held)
        self.peak_held = max(self.peak_held, held + self.closing)
        return slot

    def attach(self, slot: Slot, occupant: Occupant) -> None:
        """The served connection of ``slot`` exists (its handshake state is read from it)."""
        slot.occupant = occupant

    def release(self, slot: Slot) -> None:
        """The connection's task is done with its socket; idempotent."""
        state = slot._state
        if state is _State.RELEASED:
            return
        if state is _State.OPEN:
            self._remove(slot)
        else:
            self.closing -= 1
        slot._state = _State.RELEASED
        self.wake()

    def has_room(self) -> bool:
        """Would a newcomer get a slot of the total (freed or by eviction) now?"""
        return len(self._all) < self.max_connections or self._victim(self._all) is not None

    async def wait_for_room(self) -> None:
        """Return once :meth:`has_room` (at once if it has).

        Woken by every release and every :meth:`wake`.  Cancellation: just propagates.
        """
        while not self.has_room():
            if self._changed is None:
                self._changed = anyio.Event()
            await self._changed.wait()

    def wake(self) -> None:
        """A connection may have become evictable (its last call ended): re-check rooms."""
        changed = self._changed
        if changed is not None:
            self._changed = None
            changed.set()

    # ------------------------------------------------------------ eviction

    def _victim(self, pool: _Pool) -> Slot | None:
        """The slot of ``pool`` that has done least, or None if none may be evicted."""
        if not self.evict or self.closing >= self.max_connections:
            return None
        moved: list[Slot] = []
        victim: Slot | None = None
        for slot in pool.handshaking:
            if not _handshaken(slot):
                victim = slot
                break
            moved.append(slot)  # shook hands since it was admitted
        for slot in moved:
            self._establish(slot)
        if victim is not None:
            return victim
        best: tuple[bool, float] | None = None
        for slot in pool.established:
            rank = _idle_rank(slot)
            if rank is not None and (best is None or rank < best):
                best, victim = rank, slot
        return victim

    def _establish(self, slot: Slot) -> None:
        """Move a slot from the handshaking group to the established one, in both pools."""
        for pool in (self._all, self._by_ip[slot.ip]):
            del pool.handshaking[slot]
            pool.established[slot] = None

    def _evict(self, slot: Slot) -> None:
        occupant = slot.occupant
        self._remove(slot)
        slot._state = _State.CLOSING
        self.closing += 1
        self.evictions += 1
        if occupant is not None and occupant.handshaken:
            occupant.evict()
        else:
            # Not a word of HTTP/2 from it yet (or not all of its handshake): just close.
            slot.scope.cancel()

    def _remove(self, slot: Slot) -> None:
        pool = self._by_ip[slot.ip]
        for group in (self._all, pool):
            group.handshaking.pop(slot, None)
            group.established.pop(slot, None)
        if not pool:
            del self._by_ip[slot.ip]
