"""One client connection: bytes in, frames, dispatch, responses out in request order.

    data_received -> FrameSplitter (native) -> decode_request_frame (native)
        node API (node.py)        answered inline (Fetch may be held for MaxWaitMs)
        group API                 coordinator.submit(...) in a task of its own
        CreateTopics              Server.create_topics(...) in a task of its own

Ordering. Kafka clients pipeline requests and match responses by position as much as by
correlation id, so responses leave in REQUEST ORDER. Every request that will be answered gets a
slot at the tail of a queue when it is read; a slot is filled when its response is encoded;
the flusher writes the filled slots at the head of the queue and stops at the first empty one.
A JoinGroup parked at the barrier therefore holds back the responses queued after it on the
same connection only; other connections have their own queues.

Coalescing. Filling a slot does not write: it schedules one flush (``call_soon``) per
connection, so everything that became ready during one loop iteration (the inline answers of a
whole read, the tasks that completed together) goes out in one ``transport.write``.

Back-pressure. Reading pauses while the queue holds ``max_in_flight`` requests or the
transport's write buffer is above its high-water mark, and resumes at half the limit with the
buffer drained, so a client that pipelines without reading cannot make us buffer without bound.

Bad input (docs/server.md has the table): what can be answered is answered (ApiVersions of an
unknown version, a malformed body whose response has a top-level error code); otherwise the
connection is closed. Either way one WARNING line names the peer and the problem.
"""
from __future__ import annotations

import asyncio
import logging
from collections import deque
from functools import partial
from typing import TYPE_CHECKING, Optional

from groupcoord.protocol import (DecodeError, EncodeError, FrameSplitter, FrameTooLargeError,
                                 ProtocolError, UnsupportedVersionError, decode_request_frame,
                                 encode_response_frame)
from groupcoord.protocol.error_codes import ErrorCode as E
from groupcoord.server import node as N

if TYPE_CHECKING:  # pragma: no cover
    from groupcoord.server.server import Server

__all__ = ["Connection"]

log = logging.getLogger("groupcoord.server")


def _peer_name(transport) -> tuple:
    peer = transport.get_extra_info("peername")
    if isinstance(peer, (tuple, list)) and len(peer) >= 2:
        host = str(peer[0])
        return host, ("[%s]:%s" % (host, peer[1]) if ":" in host else "%s:%s" % (host, peer[1]))
    return "", str(peer)


class Connection(asyncio.Protocol):
    __slots__ = ("server", "_coord", "_node", "_loop", "_splitter", "_queue", "_flush_pending",
                 "transport", "host", "peer", "_reading_paused", "_writing_paused", "closing",
                 "last_active", "_held", "_max_in_flight", "_resume_at", "_bad_logged",
                 "_dispatch", "admitted")

    def __init__(self, server: "Server"):
        self.server = server
        self._coord = server.coordinator
        self._node = server.node
        self._loop = server.loop
        self._splitter = FrameSplitter(server.config.max_frame_bytes)
        self._queue: deque = deque()        # slots [bytes | None] in request order
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
        self._max_in_flight = max(1, server.config.max_in_flight_per_connection)
        self._resume_at = self._max_in_flight // 2
        self._bad_logged = False
        self._dispatch = {
            N.API_VERSIONS: self._api_versions,
            N.METADATA: self._inline(N.metadata),
            N.FIND_COORDINATOR: self._inline(N.find_coordinator),
            N.LIST_OFFSETS: self._inline(N.list_offsets),
            N.FETCH: self._fetch,
            N.PRODUCE: self._produce,
            N.CREATE_TOPICS: self._create_topics,
        }

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
        if self.admitted:
            self.server._forget(self)

    def eof_received(self):
        return False  # a half-closed client gets the connection closed

    def pause_writing(self):
        self._writing_paused = True
        self._pause_reading()

    def resume_writing(self):
        self._writing_paused = False
        self._maybe_resume()

    def data_received(self, data):
        if self.closing:
            return
        self.last_active = self._loop.time()
        try:
            frames = self._splitter.feed(data)
        except FrameTooLargeError as e:
            for f in e.frames:
                self._on_frame(f)
                if self.closing:
                    return
            self._bad("frame size %d is outside 0..%d (max frame bytes); closing"
                      % (e.size, e.limit))
            return
        for f in frames:
            self._on_frame(f)
            if self.closing:
                return

    # ------------------------------------------------------------------ requests
    def _on_frame(self, frame: bytes):
        try:
            header, req = decode_request_frame(frame)
        except UnsupportedVersionError as e:
            self._unsupported(e)
            return
        except DecodeError as e:
            self._malformed(e)
            return
        except ProtocolError as e:
            self._bad("unreadable request (%s); closing" % e)
            return
        key = header.api_key
        fn = self._dispatch.get(key)
        if fn is not None:
            fn(req, header)
        elif self._coord.serves(key):
            self._group_request(req, header, key)
        else:
            # Decodable but not implemented (hence not advertised): as an unknown key.
            self._bad("api key %d (%s) is not served by this node; closing"
                      % (key, type(req).__name__[:-len("Request")]))

    def _group_request(self, req, header, key):
        # submit_nowait answers at once what needs no waiting (a steady heartbeat): no task
        # per request on the hot path; otherwise a future completes the slot later.
        try:
            res = self._coord.submit_nowait(req, header.api_version,
                                            header.client_id or "", self.host)
        except Exception as exc:          # a bug: answered as such, the connection goes on
            fut = self._loop.create_future()
            fut.set_exception(exc)
            res = fut
        if isinstance(res, asyncio.Future):
            slot = self._new_slot()
            res.add_done_callback(partial(self._submitted, slot, key, header.api_version,
                                          header.correlation_id))
        else:
            self._answer(res, header.api_version, header.correlation_id)

    def _unsupported(self, e: UnsupportedVersionError):
        corr = getattr(e, "correlation_id", None)
        if e.api_key == N.API_VERSIONS and corr is not None:
            # The one request every client may send at a version we do not know: answer in
            # v0 (header v0, body v0) with UNSUPPORTED_VERSION and our ranges.
            self._warn("ApiVersions v%s is not supported; answered UNSUPPORTED_VERSION with "
                       "our version ranges" % e.api_version, debug=True)
            self._answer(N.api_versions_unsupported(self._node), 0, corr)
            return
        if e.api_key in self._node.api_ranges:
            lo, hi = self._node.api_ranges[e.api_key]
            self._bad("api key %d version %d is not supported (we speak %d-%d, as ApiVersions "
                      "says); closing" % (e.api_key, e.api_version, lo, hi))
        else:
            self._bad("unknown api key %s (version %s); closing" % (e.api_key, e.api_version))

    def _malformed(self, e: DecodeError):
        h = getattr(e, "header", None)
        if h is not None:
            resp = N.top_level_error_response(h.api_key, h.api_version, E.INVALID_REQUEST,
                                              "malformed request: %s" % e)
            if resp is not None:
                self._warn("malformed %s v%d request (%s); answered INVALID_REQUEST"
                           % (type(resp).__name__[:-len("Response")], h.api_version, e))
                self._answer(resp, h.api_version, h.correlation_id)
                return
            self._bad("malformed api key %d v%d request (%s); closing"
                      % (h.api_key, h.api_version, e))
            return
        self._bad("malformed request header (%s); closing" % e)

    # ---- node APIs
    def _inline(self, fn):
        node = self._node

        def handle(req, header):
            self._answer(fn(req, header.api_version, node), header.api_version,
                         header.correlation_id)
        return handle

    def _api_versions(self, req, header):
        self._answer(N.api_versions(req, header.api_version, self._node), header.api_version,
                     header.correlation_id)

    def _produce(self, req, header):
        resp = N.produce(req, header.api_version, self._node)
        if resp is not None:           # acks=0: Kafka sends no response at all
            self._answer(resp, header.api_version, header.correlation_id)

    def _fetch(self, req, header):
        resp, hold = N.fetch(req, header.api_version, self._node)
        wait_ms = min(req.max_wait_ms, self.server.config.fetch_max_wait_cap_ms)
        if not hold or wait_ms <= 0 or self.server.stopping:
            self._answer(resp, header.api_version, header.correlation_id)
            return
        data = self._encode(resp, header.api_version, header.correlation_id)
        if data is None:
            return
        slot = self._new_slot()
        handle = self._loop.call_later(wait_ms / 1000.0, self._release, slot)
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

    def _create_topics(self, req, header):
        slot = self._new_slot()
        task = self._loop.create_task(self.server.create_topics(req, header.api_version))
        task.add_done_callback(partial(self._submitted, slot, N.CREATE_TOPICS,
                                       header.api_version, header.correlation_id))

    # ---- completion of tasks
    def _submitted(self, slot, api_key, version, corr, task):
        if self.closing:
            if not task.cancelled() and task.exception() is not None:
                log.error("request from %s (api key %d v%d) failed after the connection "
                          "closed", self.peer, api_key, version, exc_info=task.exception())
            return
        if task.cancelled():
            exc = asyncio.CancelledError()
        else:
            exc = task.exception()
        if exc is None:
            data = self._encode(task.result(), version, corr)
            if data is not None:
                self._fill(slot, data)
            return
        log.error("request from %s (api key %d v%d) failed", self.peer, api_key, version,
                  exc_info=exc if not isinstance(exc, asyncio.CancelledError) else None)
        resp = N.top_level_error_response(api_key, version, E.UNKNOWN_SERVER_ERROR,
                                          "internal error: %s" % type(exc).__name__)
        if resp is None:
            self._bad("cannot answer api key %d v%d after an internal error; closing"
                      % (api_key, version), level=logging.ERROR)
            return
        data = self._encode(resp, version, corr)
        if data is not None:
            self._fill(slot, data)

    # ------------------------------------------------------------------ output
    def _new_slot(self) -> list:
        slot = [None]
        self._queue.append(slot)
        if len(self._queue) >= self._max_in_flight:
            self._pause_reading()
        return slot

    def _encode(self, resp, version, corr) -> Optional[bytes]:
        try:
            return encode_response_frame(resp, version, corr)
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

    def _fill(self, slot, data: bytes):
        if self.closing:
            return
        slot[0] = data
        q = self._queue
        if not self._flush_pending and q and q[0][0] is not None:
            self._flush_pending = True
            self._loop.call_soon(self._flush)

    def _flush(self):
        self._flush_pending = False
        if self.closing:
            return
        q = self._queue
        if not q or q[0][0] is None:
            return
        first = q.popleft()[0]
        if q and q[0][0] is not None:
            out = [first]
            while q and q[0][0] is not None:
                out.append(q.popleft()[0])
            self.transport.write(b"".join(out))
        else:
            self.transport.write(first)
        self.last_active = self._loop.time()
        if self._reading_paused:
            self._maybe_resume()

    def in_flight(self) -> int:
        return len(self._queue)

    # ------------------------------------------------------------------ flow control
    def _pause_reading(self):
        if not self._reading_paused and not self.closing:
            self._reading_paused = True
            try:
                self.transport.pause_reading()
            except (RuntimeError, AttributeError):
                pass

    def _maybe_resume(self):
        if (self._reading_paused and not self._writing_paused and not self.closing
                and not self.server.stopping and len(self._queue) <= self._resume_at):
            self._reading_paused = False
            try:
                self.transport.resume_reading()
            except (RuntimeError, AttributeError):
                pass

    def stop_reading(self):
        """Shutdown: read no further requests (those already read are still answered)."""
        self._pause_reading()

    # ------------------------------------------------------------------ closing
    def _warn(self, what: str, debug: bool = False):
        # debug: an expected negotiation step (a newer ApiVersions), not bad input.
        log.log(logging.DEBUG if debug else logging.WARNING, "client %s: %s", self.peer, what)

    def _bad(self, what: str, level: int = logging.WARNING):
        """Log one line, write what is already answered, and close this connection."""
        if not self._bad_logged:
            self._bad_logged = True
            log.log(level, "client %s: %s", self.peer, what)
        self._flush()
        self._close()

    def _close(self):
        if not self.closing:
            self.closing = True
            self.transport.close()

    def close(self, reason: Optional[str] = None):
        """Close from the server (idle reaping, shutdown): written data is flushed first."""
        if reason:
            log.info("client %s: %s", self.peer, reason)
        self._flush()
        self._close()
