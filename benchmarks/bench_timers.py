"""Timer table cost on the heartbeat hot path, against the lazy-deletion heap it replaced.

    PYTHONPATH=src python benchmarks/bench_timers.py [--members 100000] [--seconds 60]

Every member heartbeats every 3 s (virtual) with a 45 s session timeout; each heartbeat
reschedules its session timer to now + 45 s and then asks when to wake up (what
ShardRuntime does after every request that returned timer operations: wake_at now,
next_deadline before), and pop_due(now)
runs once per virtual 5 ms tick. Both structures see the same operations; the run checks
they fire the same keys in the same order (none here: every session is kept alive) and
reports ns per heartbeat and the heap size at the end.

Baseline ("lazy heap", measured in the same run): one heap push per reschedule, stale
entries popped one by one by next_deadline — the structure before this change.
"""
from __future__ import annotations

import argparse
import heapq
import time

from groupcoord.groups.result import TimerKey
from groupcoord.groups.timers import Timers


class LazyHeapTimers:
    """The previous structure: a push per reschedule, lazy deletion on top."""

    def __init__(self):
        self._deadline, self._heap, self._seq = {}, [], 0

    def schedule(self, key, deadline_ms):
        if self._deadline.get(key) == deadline_ms:
            return
        self._deadline[key] = deadline_ms
        self._seq += 1
        heapq.heappush(self._heap, (deadline_ms, self._seq, key))
        if len(self._heap) > 64 and len(self._heap) > 4 * len(self._deadline):
            self._heap = [(d, i, k) for i, (k, d) in enumerate(self._deadline.items())]
            heapq.heapify(self._heap)
            self._seq = len(self._heap)

    def next_deadline(self):
        h = self._heap
        while h and self._deadline.get(h[0][2]) != h[0][0]:
            heapq.heappop(h)
        return h[0][0] if h else None

    def pop_due(self, now_ms):
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


def run(timers, members: int, seconds: int, interval_ms=3000, session_ms=45000):
    keys = [TimerKey("session", "g", "m%d" % i) for i in range(members)]
    for i, k in enumerate(keys):
        timers.schedule(k, session_ms + i % interval_ms)
    # Member i heartbeats at i % interval_ms + n * interval_ms.
    by_tick: dict = {}
    for i in range(members):
        by_tick.setdefault((i % interval_ms) // 5, []).append(keys[i])
    # What ShardRuntime asks after each request: the baseline had only next_deadline.
    wake = type(timers).wake_at if hasattr(timers, "wake_at") else type(timers).next_deadline
    fired, beats = [], 0
    t0 = time.perf_counter()
    for now in range(0, seconds * 1000, 5):
        for k in by_tick.get((now % interval_ms) // 5, ()):
            timers.schedule(k, now + session_ms)
            wake(timers)
            beats += 1
        while (k := timers.pop_due(now)) is not None:
            fired.append(k)
    dt = time.perf_counter() - t0
    return dt, beats, fired, len(timers._heap)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--members", type=int, default=100_000)
    ap.add_argument("--seconds", type=int, default=60, help="virtual seconds of heartbeats")
    a = ap.parse_args(argv)
    rows = []
    for name, cls in (("lazy heap (baseline)", LazyHeapTimers), ("Timers (deferred)", Timers)):
        dt, beats, fired, heap = run(cls(), a.members, a.seconds)
        rows.append((name, dt, beats, fired, heap))
    assert rows[0][3] == rows[1][3], "the two structures fired different keys"
    base = rows[0][1] / rows[0][2]
    print("%d members, %d virtual s, %d heartbeats" % (a.members, a.seconds, rows[0][2]))
    print("| structure | ns / heartbeat | heap entries at end | ratio vs baseline |")
    print("|---|---|---|---|")
    for name, dt, beats, _f, heap in rows:
        per = dt / beats
        print("| %s | %.0f | %d | %.2fx |" % (name, per * 1e9, heap, base / per))


if __name__ == "__main__":
    main()
