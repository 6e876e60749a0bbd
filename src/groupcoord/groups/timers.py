"""The timer table: key -> deadline, and the due keys in deadline order.

Timers are data. Handlers return (TimerKey, deadline | None) operations; ``Timers.apply``
records them; the runtime (or a simulation's virtual clock) asks ``due(now_ms)`` and fires
each key through ``Shard.fire(key, now_ms)``.

Structure. A heap of (deadline, seq, key) entries with at most one *live* entry per key: the
one ``_queued[key]`` names. The common reschedule (a heartbeat pushing its
session deadline later) is O(1): only the table changes, and the live entry keeps its older,
earlier deadline. When that entry's deadline passes it is *deferred*: re-pushed once at
the key's real deadline. So a member heartbeating every 3 s with a 45 s session costs about one
heap operation per 45 s instead of one per heartbeat. An earlier deadline pushes a new
entry (the old one becomes stale: ``_queued[key]`` no longer names it); stale
entries are dropped when they surface, and the heap is rebuilt when they dominate it.

Order. Keys fire in (deadline, seq) order, seq being the order in which the deadlines were
set: equal deadlines fire in scheduling order, deferral and rebuilds keep each key's seq.
"""
from __future__ import annotations

import heapq
from typing import Iterable, Optional

from groupcoord.groups.result import TimerKey

__all__ = ["Timers", "CLASSIC_SESSION", "CLASSIC_JOIN", "CLASSIC_SYNC", "CONSUMER_SESSION",
           "CONSUMER_REVOCATION", "CONSUMER_ASSIGNMENT", "CONNECT_SESSION",
           "CONNECT_REVOCATION", "CONNECT_ASSIGNMENT", "CONNECT_DELAYED_REBALANCE",
           "OFFSETS_RETENTION"]

# Timer kinds (TimerKey.kind), every one named here once; registry.py says which function
# fires each. Per member: the session deadlines, the revocation deadlines (a member must
# revoke within its rebalance timeout). Per group: classic's join barrier and pending-sync
# deadlines; the consumer assignment interval (KIP-1263 batching: bumps meanwhile leave the
# target behind, this computes it when the interval ends); the connect chosen worker's
# install deadline and the KIP-415 delayed rebalance. Per shard (group id ""): the offsets
# retention check.
CLASSIC_SESSION = "classic-session"
CLASSIC_JOIN = "classic-join"
CLASSIC_SYNC = "classic-sync"
CONSUMER_SESSION = "consumer-session"
CONSUMER_REVOCATION = "consumer-revocation"
CONSUMER_ASSIGNMENT = "consumer-assignment"
CONNECT_SESSION = "connect-session"
CONNECT_REVOCATION = "connect-revocation"
CONNECT_ASSIGNMENT = "connect-assignment"
CONNECT_DELAYED_REBALANCE = "connect-rebalance"
OFFSETS_RETENTION = "offsets-retention"


class Timers:
    __slots__ = ("_deadline", "_seq_of", "_queued", "_heap", "_seq")

    def __init__(self):
        self._deadline: dict = {}     # key -> deadline (ms): the table
        self._seq_of: dict = {}       # key -> seq of the schedule that set that deadline
        self._queued: dict = {}       # key -> (deadline, seq) of its live heap entry;
        self._heap: list = []         # that deadline is never later than the key's
        self._seq = 0

    def apply(self, ops: Iterable) -> None:
        for key, deadline in ops:
            if deadline is None:
                self.cancel(key)
            else:
                self.schedule(key, deadline)

    def cancel(self, key: TimerKey) -> None:
        if self._deadline.pop(key, None) is not None:
            del self._seq_of[key]
            del self._queued[key]        # its heap entry is now stale

    def schedule(self, key: TimerKey, deadline_ms: int) -> None:
        if self._deadline.get(key) == deadline_ms:
            return
        self._deadline[key] = deadline_ms
        self._seq += 1
        self._seq_of[key] = self._seq
        q = self._queued.get(key)
        if q is not None and q[0] <= deadline_ms:
            return                       # the live entry surfaces first and is deferred
        self._queued[key] = (deadline_ms, self._seq)
        heapq.heappush(self._heap, (deadline_ms, self._seq, key))
        # Bound the garbage of lazy deletion: rebuild when the heap is mostly stale.
        if len(self._heap) > 64 and len(self._heap) > 4 * len(self._deadline):
            self._rebuild()

    def _rebuild(self) -> None:
        seq_of = self._seq_of
        self._heap = [(d, seq_of[k], k) for k, d in self._deadline.items()]
        heapq.heapify(self._heap)
        self._queued = {k: (d, s) for d, s, k in self._heap}

    def _settle(self) -> Optional[tuple]:
        """Drop stale entries and defer live ones whose key's deadline moved later, until
        the top entry is exact: -> that entry, or None when the heap is empty."""
        h = self._heap
        queued, deadline = self._queued, self._deadline
        while h:
            top = h[0]
            d, s, key = top
            q = queued.get(key)
            if q is None or q[1] != s:
                heapq.heappop(h)                  # stale: cancelled, fired or superseded
                continue
            real, real_seq = deadline[key], self._seq_of[key]
            if real_seq == s:
                return top
            # Deferred: the key was rescheduled since this entry was pushed (later, or to the
            # same deadline with a newer seq): re-queue it at its real place.
            queued[key] = (real, real_seq)
            heapq.heapreplace(h, (real, real_seq, key))
        return None

    def get(self, key: TimerKey) -> Optional[int]:
        return self._deadline.get(key)

    def next_deadline(self) -> Optional[int]:
        """The earliest deadline in the table (exact), or None."""
        top = self._settle()
        return top[0] if top is not None else None

    def wake_at(self) -> Optional[int]:
        """A lower bound of next_deadline, in O(1): when to look again. The runtime arms its
        wake-up here after every request; waking early costs one pop_due that defers the
        entries whose keys moved on (settling here instead would defer the top entry on
        nearly every heartbeat, as the key beating now is usually the one at the top)."""
        h = self._heap
        return h[0][0] if h else None

    def pop_due(self, now_ms: int) -> Optional[TimerKey]:
        """The earliest key whose deadline <= now_ms (removed from the table), or None."""
        h = self._heap
        # Entries are never later than their key's deadline, so a top entry beyond now_ms
        # means nothing is due (no need to settle it).
        if not h or h[0][0] > now_ms:
            return None
        top = self._settle()
        if top is None or top[0] > now_ms:
            return None
        heapq.heappop(h)
        key = top[2]
        del self._deadline[key], self._seq_of[key], self._queued[key]
        return key

    def keys(self, group_id: Optional[str] = None) -> list:
        if group_id is None:
            return list(self._deadline)
        return [k for k in self._deadline if k.group_id == group_id]

    def items(self) -> list:
        return sorted(self._deadline.items(), key=lambda kv: (kv[1], kv[0]))

    def __len__(self) -> int:
        return len(self._deadline)
