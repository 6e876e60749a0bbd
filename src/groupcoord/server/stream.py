"""A client connection's byte stream: request frames in, response slots out in request order,
and the flow control between them. ServerConnection (connection.py) is the one subclass: it
turns each frame into a request and fills its slot with the answer.

    data_received -> FrameSplitter (native) -> frames queue -> _process: at most a turn's
        worth while there is room -> _on_frame(frame)          (the subclass: dispatch)
    _new_slot / _answer / _fill -> _schedule_flush -> _flush: one transport.write per turn

Ordering. Kafka clients pipeline requests and match responses by position as much as by
correlation id, so responses leave in REQUEST ORDER. Every request that will be answered gets a
slot at the tail of a queue when it is taken; a slot is filled when its response is encoded;
the flusher writes the filled slots at the head of the queue and stops at the first empty one.
A JoinGroup parked at the barrier therefore holds back the responses queued after it on the
same connection only; other connections have their own queues.

Coalescing. Filling a slot does not write: it schedules one flush (``call_soon``) per
connection, so everything that became ready during one loop iteration (the inline answers of
one turn, the tasks that completed together) goes out in one ``transport.write``. A flush
writes at most WRITE_BYTES_PER_TURN; the rest follows in the next turns (or on
``resume_writing``), so a 50 MB Metadata answer is never copied in one go: the slot holds the
cache's bytes, not a copy.

Flow control (docs/server.md, "Flow control and fairness"). The frames of one read go to a
per-connection frames queue, and reading stays paused while that queue is not empty: the
queue never holds more than one read. Frames are taken from it only while the connection has
room: fewer than ``max_in_flight_per_connection`` unanswered requests, no Metadata job of its
own under way, the transport not over its high-water mark (``pause_writing``) and the bytes of
its responses not yet written (ours plus the transport's buffer) under
``max_queued_response_bytes``. At most ``requests_per_turn`` frames (or REQUEST_BYTES_PER_TURN
bytes) are taken per loop turn; the rest continue from ``call_soon``, after the other
connections' reads. Reading resumes when the queue is empty and there is room again (with the
in-flight count down to half the cap: hysteresis).

Request memory. The bytes this connection holds of requests (its partial frame, its queued
frames) count in the server's RequestBytesPool (queued.max.request.bytes, flow.py): a frame
above SMALL_FRAME_BYTES is read only with a reservation for its whole size, asked for once
its size prefix has arrived (and the connection could read on) and given back when the frame
is taken to be run.
"""
from __future__ import annotations

import abc
import asyncio
import logging
from bisect import bisect_left
from collections import deque
from time import perf_counter as _perf
from typing import Optional, Protocol

from groupcoord.protocol import (EncodeError, FrameSplitter, FrameTooLargeError, ProtocolError,
                                 encode_response_frame)
from groupcoord.server.flow import SMALL_FRAME_BYTES

__all__ = ["FrameStream", "Owner", "REQUEST_BYTES_PER_TURN", "WRITE_BYTES_PER_TURN"]


class Owner(Protocol):
    """What a connection uses of the server that accepted it (server.Server). Spelled out
    here rather than imported: server.py imports the connections, and no import cycle is
    allowed (tests/test_import_graph.py)."""
    config: object             # server.ServerConfig
    shards: object             # the node's shards: the runtime's ShardSet (server.py)
    node: object               # node.NodeState
    loop: asyncio.AbstractEventLoop
    request_pool: object       # flow.RequestBytesPool
    metadata_cache: object     # metadata_cache.MetadataCache
    stopping: bool

    def _admit(self, conn: "FrameStream") -> bool: ...
    def _forget(self, conn: "FrameStream") -> None: ...
    async def create_topics(self, req, version: int): ...


log = logging.getLogger("groupcoord.server")

REQUEST_BYTES_PER_TURN = 1 << 20    # with requests_per_turn: the work taken per loop turn
WRITE_BYTES_PER_TURN = 1 << 20      # the most one flush copies into the transport


def _peer_name(transport) -> tuple:
    peer = transport.get_extra_info("peername")
    if isinstance(peer, (tuple, list)) and len(peer) >= 2:
        host = str(peer[0])
        return host, ("[%s]:%s" % (host, peer[1]) if ":" in host else "%s:%s" % (host, peer[1]))
    return "", str(peer)


class FrameStream(asyncio.Protocol, metaclass=abc.ABCMeta):
    __slots__ = ("server", "_loop", "_splitter", "_queue", "_flush_pending", "transport", "host",
                 "peer", "_reading_paused", "_writing_paused", "closing", "last_active", "_held",
                 "_max_in_flight", "_resume_at", "_bad_logged", "admitted", "_pool", "_frames",
                 "_frames_bytes", "_pushed", "_popped", "_proc_scheduled", "_broken", "_job",
                 "_out", "_queued_bytes", "_max_queued", "_per_turn", "_prefix", "_partial_size",
                 "_grant", "_grant_frame", "_mem_wait", "_want_size", "_pool_bytes",
                 "_stats", "_bounds", "_item_error", "_key", "_t0", "_enc", "_enc_code")

    def __init__(self, server: Owner):
        cfg = server.config
        self.server = server
        self._loop = server.loop
        self._pool = server.request_pool
        self._splitter = FrameSplitter(cfg.max_frame_bytes)
        self._queue: deque = deque()        # slots [data | None, size] in request order
        self._out: deque = deque()          # pieces of filled head slots not yet written
        self._queued_bytes = 0              # bytes of filled slots and of _out
        self._flush_pending = False
        self.transport = None
        self.host = ""
        self.peer = "?"
        self._reading_paused = False
        self._writing_paused = False
        self.closing = False
        self.admitted = False
        self.last_active = self._loop.time()
        self._held: dict = {}                # id(slot) -> (TimerHandle, slot, frame bytes)
        self._max_in_flight = max(1, cfg.max_in_flight_per_connection)
        self._resume_at = self._max_in_flight // 2
        # Above the transport's high-water mark: a transport buffer over our bound has
        # called pause_writing, so resume_writing tells us when there is room again.
        self._max_queued = max(cfg.max_queued_response_bytes, cfg.write_buffer_high + 1)
        self._per_turn = max(1, cfg.requests_per_turn)
        self._bad_logged = False
        # Frames split from reads, not yet taken (reading is paused while there are any).
        self._frames: deque = deque()
        self._frames_bytes = 0
        self._pushed = self._popped = 0      # frames ever queued / taken
        self._proc_scheduled = False
        self._broken: Optional[str] = None   # the stream broke after the queued frames
        # An answer of ours is being built over several turns (Metadata): no other request
        # is taken until it is done.
        self._job = False
        # The partial frame: its first bytes (for the size prefix) and declared size.
        self._prefix = b""
        self._partial_size = -1
        # Request-memory reservation (flow.py): its size, and None while it covers the
        # partial frame, else the index (in _pushed order) of the queued frame it covers.
        self._grant = 0
        self._grant_frame: Optional[int] = None
        self._mem_wait = False
        self._want_size = 0
        self._pool_bytes = 0                 # what this connection counts in the pool
        # Request metrics (server/metrics.py RequestStats; None: not counted). Every slot
        # made while a frame runs carries its api key << 16 (_key: the subclass sets it once
        # it knows the key) and the start of the loop turn that took it; _fill adds the error
        # code of a failed answer _encode just made (_enc / _enc_code); _flush counts the
        # slots it hands over, with one clock read per flush.
        st = getattr(server, "stats", None)
        self._stats = st.table if st is not None else None
        self._bounds = st.bounds if st is not None else ()
        self._item_error = st.item_error if st is not None else None
        self._key = -1 << 16
        self._t0 = 0.0
        self._enc = None
        self._enc_code = 0

    @abc.abstractmethod
    def _on_frame(self, frame: bytes) -> None:
        """Run one request frame: answer it (a slot, filled now or later) or close."""

    # ------------------------------------------------------------------ asyncio.Protocol
    def connection_made(self, transport):
        self.transport = transport
        self.host, self.peer = _peer_name(transport)
        if not self.server._admit(self):
            self.closing = True
            transport.abort()
            return
        self.admitted = True
        transport.set_write_buffer_limits(high=self.server.config.write_buffer_high)

    def connection_lost(self, exc):
        if self.admitted and not self._bad_logged and self._splitter.pending:
            log.warning("connection from %s closed in the middle of a request: %d byte(s) of "
                        "an incomplete frame dropped", self.peer, self._splitter.pending)
        self.closing = True
        for handle, _slot, _data in self._held.values():
            handle.cancel()
        self._held.clear()
        self._queue.clear()
        self._out.clear()
        self._queued_bytes = 0
        self._frames.clear()
        self._frames_bytes = 0
        self._splitter = FrameSplitter(0)     # drops the partial frame's buffer
        self._release_memory()
        if self.admitted:
            self.server._forget(self)

    def eof_received(self):
        return False  # a half-closed client gets the connection closed

    def pause_writing(self):
        self._writing_paused = True
        self._sync_reading()

    def resume_writing(self):
        self._writing_paused = False
        if self._out:
            self._schedule_flush()
        self._kick()

    def data_received(self, data):
        if self.closing:
            return
        self.last_active = self._loop.time()
        try:
            frames = self._splitter.feed(data)
        except FrameTooLargeError as e:
            frames = e.frames
            self._broken = ("frame size %d is outside 0..%d (max frame bytes); closing"
                            % (e.size, e.limit))
        self._track_partial(data)
        if frames:
            if self._grant and self._grant_frame is None:
                # A reservation is only taken for a partial frame: frames[0] completes it.
                self._grant_frame = self._pushed
            self._frames.extend(frames)
            self._pushed += len(frames)
            self._frames_bytes += sum(map(len, frames))
        self._process(True)

    # ------------------------------------------------------------------ flow control
    def _track_partial(self, data) -> None:
        # The splitter keeps the partial frame's bytes; its 4-byte size prefix is the start
        # of them: within this read, or (pending > this read) seen in earlier reads.
        p = self._splitter.pending
        if p == 0:
            self._prefix = b""
            self._partial_size = -1
            return
        n = len(data)
        if p <= n:
            self._prefix = bytes(data[n - p:n - p + 4])
        elif len(self._prefix) < 4:
            self._prefix += bytes(data[:4 - len(self._prefix)])
        self._partial_size = (int.from_bytes(self._prefix, "big") if len(self._prefix) == 4
                              else -1)

    def _account(self) -> None:
        held = self._splitter.pending + self._frames_bytes
        if held != self._pool_bytes:
            self._pool.add(held - self._pool_bytes)
            self._pool_bytes = held

    def _check_memory(self) -> None:
        # Reserve only when this connection would read on: a reservation held by one that
        # cannot read (its answers unread) would keep the bytes from everybody else.
        if (self._partial_size > SMALL_FRAME_BYTES and not self._grant and not self._mem_wait
                and not self.closing and not self._frames and self._room()):
            if self._pool.acquire(self, self._partial_size):
                self._grant, self._grant_frame = self._partial_size, None
            else:
                self._mem_wait, self._want_size = True, self._partial_size

    def granted(self) -> None:
        """The pool reserved the bytes of our partial frame: read on."""
        self._mem_wait = False
        self._grant, self._grant_frame = self._want_size, None
        self._sync_reading()

    def _release_grant(self) -> None:
        size, self._grant, self._grant_frame = self._grant, 0, None
        self._pool.release(size)

    def _release_memory(self) -> None:
        if self._mem_wait:
            self._mem_wait = False
            self._pool.cancel(self)
        if self._grant:
            self._release_grant()
        self._account()

    @property
    def throttled(self) -> bool:
        """Waiting for a request-memory reservation (the wait is ours, not the client's)."""
        return self._mem_wait

    @property
    def queued_response_bytes(self) -> int:
        """Bytes of responses not yet handed to the transport."""
        return self._queued_bytes

    def _room(self) -> bool:
        return (len(self._queue) < self._max_in_flight and not self._writing_paused
                and not self._job and self._queued_bytes
                + self.transport.get_write_buffer_size() < self._max_queued)

    def _process(self, inline: bool = False) -> None:
        """Take frames while there is room, at most a turn's worth; then read again.
        inline: called from data_received, else a continuation from call_soon."""
        self._proc_scheduled = False
        if self.closing:
            return
        frames = self._frames
        n = size = 0
        if self._stats is not None:
            self._t0 = _perf()           # request metrics: one clock read per turn
        while frames:
            if not self._room():
                break                    # _kick() continues when room comes back
            if n >= self._per_turn or size >= REQUEST_BYTES_PER_TURN:
                self._schedule_process()
                break
            f = frames.popleft()
            self._frames_bytes -= len(f)
            self._popped += 1
            n += 1
            size += len(f)
            if self._grant_frame is not None and self._popped > self._grant_frame:
                self._release_grant()
            self._on_frame(f)
            if self.closing:
                return
        if not frames and self._broken is not None:
            self._bad(self._broken)
            return
        self._account()
        if inline or frames:
            self._sync_reading()
        else:
            # A continuation that emptied the queue reads again from the next turn, so a
            # read cannot add a second turn's worth of frames to this one.
            self._loop.call_soon(self._sync_reading)

    def _schedule_process(self) -> None:
        if not self._proc_scheduled:
            self._proc_scheduled = True
            self._loop.call_soon(self._process)

    def _kick(self) -> None:
        # Something that limited us changed (a flush, the transport drained, a job ended).
        if self.closing:
            return
        if self._frames:
            if self._room():
                self._schedule_process()
        else:
            self._sync_reading()

    def _want_read(self) -> bool:
        if (self.closing or self.server.stopping or self._frames or self._mem_wait
                or self._writing_paused or self._job or self._broken is not None):
            return False
        if (self._partial_size > SMALL_FRAME_BYTES
                and not (self._grant and self._grant_frame is None)):
            return False
        if self._queued_bytes + self.transport.get_write_buffer_size() >= self._max_queued:
            return False
        limit = self._resume_at if self._reading_paused else self._max_in_flight - 1
        return len(self._queue) <= limit

    def _sync_reading(self) -> None:
        self._check_memory()
        if self._want_read():
            if self._reading_paused:
                self._reading_paused = False
                try:
                    self.transport.resume_reading()
                except (RuntimeError, AttributeError):
                    pass
        else:
            self._pause_reading()

    def _pause_reading(self):
        if not self._reading_paused and not self.closing:
            self._reading_paused = True
            try:
                self.transport.pause_reading()
            except (RuntimeError, AttributeError):
                pass

    def stop_reading(self):
        """Shutdown: read no further requests (those already read are still answered)."""
        self._pause_reading()

    # ------------------------------------------------------------------ held responses
    def _hold(self, data, delay_s: float) -> None:
        """A response that is ready but goes out ``delay_s`` from now (an empty Fetch held
        for its MaxWaitMs), or at shutdown (release_held), in its request's place."""
        slot = self._new_slot()
        handle = self._loop.call_later(delay_s, self._release, slot)
        self._held[id(slot)] = (handle, slot, data)

    def _release(self, slot):
        item = self._held.pop(id(slot), None)
        if item is not None:
            self._fill(slot, item[2])

    def release_held(self):
        """Answer every held Fetch now (shutdown)."""
        for handle, slot, data in list(self._held.values()):
            handle.cancel()
            self._fill(slot, data)
        self._held.clear()

    # ------------------------------------------------------------------ output
    def _new_slot(self) -> list:
        # [response bytes, size, api key << 16 (+ error code), loop-turn start of its frame]
        # (the last two: metrics, see __init__)
        slot = [None, 0, self._key, self._t0]
        self._queue.append(slot)
        return slot

    def _encode(self, resp, version, corr) -> Optional[bytes]:
        try:
            data = encode_response_frame(resp, version, corr)
            if self._stats is not None:
                try:
                    code = resp.error_code
                except AttributeError:   # per-item codes only (OffsetCommit, ...)
                    code = self._item_error(resp)
                if code:                 # a success needs nothing: the slot says 0
                    self._enc, self._enc_code = data, code
            return data
        except (EncodeError, ProtocolError, TypeError) as e:
            # A bug on our side: the client would wait forever for this correlation id.
            log.error("cannot encode %s v%d for %s: %s; closing the connection",
                      type(resp).__name__, version, self.peer, e)
            self._close()
            return None

    def _answer(self, resp, version, corr):
        data = self._encode(resp, version, corr)
        if data is not None:
            slot = self._new_slot()
            self._fill(slot, data)

    def _fill(self, slot, data):
        """data: the frame's bytes, or a tuple of its pieces (a cached Metadata body)."""
        if self.closing:
            return
        size = len(data) if type(data) is bytes else sum(map(len, data))
        slot[0], slot[1] = data, size
        if self._enc is data:           # a failed answer (metrics on): its error code
            slot[2] += self._enc_code & 0xFFFF
            self._enc = None
        self._queued_bytes += size
        q = self._queue
        if q and q[0][0] is not None:
            self._schedule_flush()

    def _schedule_flush(self):
        if not self._flush_pending:
            self._flush_pending = True
            self._loop.call_soon(self._flush)

    def _flush(self, everything: bool = False):
        """Write the filled slots at the head of the queue: at most WRITE_BYTES_PER_TURN
        (all of it when closing), in one transport.write."""
        self._flush_pending = False
        if self.closing:
            return
        q, out = self._queue, self._out
        if self._stats is not None:
            self._take_counted(q, out)
        while q and q[0][0] is not None:
            data = q.popleft()[0]
            if type(data) is bytes:
                out.append(data)
            else:
                out.extend(data)
        if not out:
            return
        budget = None if everything else WRITE_BYTES_PER_TURN
        parts = []
        n = 0
        while out and (budget is None or n < budget):
            p = out.popleft()
            if budget is not None and n + len(p) > budget:
                mv = memoryview(p)
                take = budget - n
                out.appendleft(mv[take:])
                p = mv[:take]
            parts.append(p)
            n += len(p)
        self.transport.write(parts[0] if len(parts) == 1 and type(parts[0]) is bytes
                             else b"".join(parts))
        self._queued_bytes -= n
        self.last_active = self._loop.time()
        if out and not self._writing_paused:
            self._schedule_flush()
        self._kick()

    def _take_counted(self, q: deque, out: deque) -> None:
        """_flush's taking of the filled slots at the head of the queue, counting each in
        the request metrics: by (api key << 16) + error code, with its latency from the
        start of the turn that took its frame to now. A run of slots with the same key and
        turn (a pipelined window) is added at once: one clock read, one bucket search."""
        st = self._stats
        k = t = None
        n = 0
        while q and q[0][0] is not None:
            slot = q.popleft()
            data = slot[0]
            if type(data) is bytes:
                out.append(data)
            else:
                out.extend(data)
            if slot[2] == k and slot[3] == t:
                n += 1
            else:
                if n:
                    self._add(st, k, t, n)
                k, t, n = slot[2], slot[3], 1
        if n:
            self._add(st, k, t, n)

    def _add(self, st: dict, k: int, t0: float, n: int) -> None:
        row = st.get(k)
        if row is None:
            row = st[k] = [0] * (len(self._bounds) + 1) + [0.0]
        lat = _perf() - t0
        row[bisect_left(self._bounds, lat)] += n
        row[-1] += lat * n

    def in_flight(self) -> int:
        """Requests read and not answered yet (taken ones with a slot, queued frames)."""
        return len(self._queue) + len(self._frames)

    # ------------------------------------------------------------------ closing
    def _warn(self, what: str, debug: bool = False):
        # debug: an expected negotiation step (a newer ApiVersions), not bad input.
        log.log(logging.DEBUG if debug else logging.WARNING, "client %s: %s", self.peer, what)

    def _bad(self, what: str, level: int = logging.WARNING):
        """Log one line, write what is already answered, and close this connection."""
        if not self._bad_logged:
            self._bad_logged = True
            log.log(level, "client %s: %s", self.peer, what)
        self._flush(everything=True)
        self._close()

    def _close(self):
        if not self.closing:
            self.closing = True
            self.transport.close()

    def close(self, reason: Optional[str] = None):
        """Close from the server (idle reaping, shutdown): written data is flushed first."""
        if reason:
            log.info("client %s: %s", self.peer, reason)
        self._flush(everything=True)
        self._close()
