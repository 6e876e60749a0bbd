"""The timer table: key -> deadline, and the due keys in deadline order.

Timers are data. Handlers return (TimerKey, deadline | None) operations; ``Timers.apply``
records them; the runtime (or a simulation's virtual clock) asks ``due(now_ms)`` and fires
each key through ``Shard.fire(key, now_ms)``. Rescheduling a key replaces its deadline; a heap
with lazy deletion keeps ``due`` O(log n) per fired timer.
"""
from __future__ import annotations

import heapq
from typing import Iterable, Optional

from groupcoord.coordinator.result import TimerKey

__all__ = ["Timers"]


class Timers:
    __slots__ = ("_deadline", "_heap", "_seq")

    def __init__(self):
        self._deadline: dict = {}
        self._heap: list = []
        self._seq = 0          # tie-break: equal deadlines fire in scheduling order

    def apply(self, ops: Iterable) -> None:
        for key, deadline in ops:
            if deadline is None:
                self._deadline.pop(key, None)
            else:
                self.schedule(key, deadline)

    def schedule(self, key: TimerKey, deadline_ms: int) -> None:
        if self._deadline.get(key) == deadline_ms:
            return
        self._deadline[key] = deadline_ms
        self._seq += 1
        heapq.heappush(self._heap, (deadline_ms, self._seq, key))
        # Bound the garbage of lazy deletion: rebuild when the heap is mostly stale.
        if len(self._heap) > 64 and len(self._heap) > 4 * len(self._deadline):
            self._rebuild()

    def _rebuild(self) -> None:
        self._heap = [(d, i, k) for i, (k, d) in enumerate(self._deadline.items())]
        heapq.heapify(self._heap)
        self._seq = len(self._heap)

    def get(self, key: TimerKey) -> Optional[int]:
        return self._deadline.get(key)

    def next_deadline(self) -> Optional[int]:
        h = self._heap
        while h and self._deadline.get(h[0][2]) != h[0][0]:
            heapq.heappop(h)
        return h[0][0] if h else None

    def pop_due(self, now_ms: int) -> Optional[TimerKey]:
        """The earliest key whose deadline <= now_ms (removed from the table), or None."""
        h = self._heap
        while h:
            d, _, key = h[0]
            if self._deadline.get(key) != d:
                heapq.heappop(h)
                continue
            if d > now_ms:
                return None
            heapq.heappop(h)
            del self._deadline[key]
            return key
        return None

    def keys(self, group_id: Optional[str] = None) -> list:
        if group_id is None:
            return list(self._deadline)
        return [k for k in self._deadline if k.group_id == group_id]

    def items(self) -> list:
        return sorted(self._deadline.items(), key=lambda kv: (kv[1], kv[0]))

    def __len__(self) -> int:
        return len(self._deadline)
