"""The node-wide bound on request bytes held in memory (Kafka's queued.max.request.bytes).

    pool = RequestBytesPool(cap=256 << 20, loop=loop)
    pool.add(n)                       # bytes of requests held: partial frames, frames to run
    granted = pool.acquire(conn, n)   # a frame of n > SMALL_FRAME_BYTES bytes may be read
    pool.release(n) / pool.cancel(conn)

What counts (``buffered``): every byte of request frames this node holds, the partial frame a
connection's splitter is growing as bytes arrive and the complete frames waiting to be run;
a connection reports changes with ``add`` and gives its share back when it closes.

Admission. A frame whose size prefix says at most ``SMALL_FRAME_BYTES`` is always read: the
small control requests of well-behaved clients (heartbeats, commits, ApiVersions, Metadata)
never wait behind big half-sent frames. A bigger frame needs a reservation of its whole size
before more of it is read; the connection reading it stops reading until it gets one and
keeps it until the frame has been taken to be run (or the connection closes). It asks only
when it could read on (no frames waiting, room for answers): a connection that does not read
its answers must not sit on bytes others could use. Reservations
are granted while ``reserved + size <= cap``, first come first served (a big frame is not
overtaken forever by smaller ones); a frame bigger than the cap is granted alone, when
nothing else is reserved.

Memory bound: reserved <= cap (or one frame above it); each connection also holds at most
one read (it pauses as soon as a read shows a big frame it has no reservation for) plus a
partial small frame, so ``buffered <= cap + connections x (one read + SMALL_FRAME_BYTES)``.

No deadlock: a reservation waits for nothing (the bytes of its frame only need the client to
send them), and every reservation ends when its frame is taken or its connection closes, so
the head of the queue always gets its turn unless a holder stalls mid-frame; such a holder is
an idle connection, closed after connections.max.idle.ms (Server's reaper; it never closes a
connection that waits for a reservation, as that wait is ours, not the client's).

Throttling is logged once per ``LOG_INTERVAL`` seconds, with the count since the last line.
"""
from __future__ import annotations

import logging
from collections import deque

__all__ = ["RequestBytesPool", "SMALL_FRAME_BYTES", "DEFAULT_QUEUED_MAX_REQUEST_BYTES"]

log = logging.getLogger("groupcoord.server")

DEFAULT_QUEUED_MAX_REQUEST_BYTES = 256 << 20   # Kafka's default is unbounded (-1)
SMALL_FRAME_BYTES = 64 << 10
LOG_INTERVAL = 10.0


class RequestBytesPool:
    __slots__ = ("cap", "loop", "buffered", "reserved", "_waiters", "_throttled",
                 "_logged_at")

    def __init__(self, cap: int, loop):
        self.cap = cap
        self.loop = loop
        self.buffered = 0            # request bytes held by all connections
        self.reserved = 0            # bytes reserved for big frames
        self._waiters: deque = deque()   # (connection, size), first come first served
        self._throttled = 0          # waits since the last log line
        self._logged_at = -1e9

    def add(self, n: int) -> None:
        self.buffered += n

    @property
    def waiting(self) -> int:
        return len(self._waiters)

    def _fits(self, size: int) -> bool:
        return self.reserved + size <= self.cap or self.reserved == 0

    def acquire(self, conn, size: int) -> bool:
        """True: reserved now. False: ``conn.granted()`` is called when it is."""
        if not self._waiters and self._fits(size):
            self.reserved += size
            return True
        self._waiters.append((conn, size))
        self._throttled += 1
        now = self.loop.time()
        if now - self._logged_at >= LOG_INTERVAL:
            log.warning("queued max request bytes (%d) reached: %d byte(s) reserved for big "
                        "frames being received, %d connection(s) waiting to read theirs (the "
                        "latest: %s, a frame of %d bytes); %d wait(s) since the last report",
                        self.cap, self.reserved, len(self._waiters), conn.peer, size,
                        self._throttled)
            self._throttled = 0
            self._logged_at = now
        return False

    def release(self, size: int) -> None:
        self.reserved -= size
        self._grant()

    def cancel(self, conn) -> None:
        """conn closed while waiting: drop its place in the queue."""
        if any(c is conn for c, _ in self._waiters):
            self._waiters = deque((c, s) for c, s in self._waiters if c is not conn)
            self._grant()

    def _grant(self) -> None:
        w = self._waiters
        while w and self._fits(w[0][1]):
            conn, size = w.popleft()
            self.reserved += size
            conn.granted()
