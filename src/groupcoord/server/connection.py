"""One client connection's requests: each frame decoded and dispatched, its answer put in its
slot (stream.py, the base class, owns framing, flow control and the ordered, coalesced output).

    frame -> decode_request_frame (native)
        node API (node.py)        answered inline (Fetch may be held for MaxWaitMs)
        Metadata                  bytes from the MetadataCache (a job when it must build)
        group API                 ShardSet.submit_nowait(...): the answer now, or a future
        OffsetCommit frame over   scanned, not decoded: its shard refuses it whole (answer
          message.max.bytes       written from the frame) or it is decoded as any other
        CreateTopics              Server.create_topics(...) in a task of its own
        CreatePartitions,         catalog.create_partitions / delete_topics(...), the same
          DeleteTopics

Bad input (docs/server.md has the table): what can be answered is answered (ApiVersions of an
unknown version, a malformed body whose response has a top-level error code); otherwise the
connection is closed. Either way one WARNING line names the peer and the problem.
"""
from __future__ import annotations

import asyncio
import logging
from functools import partial

from groupcoord._native.commit_scan import (VERSIONS as _SCAN_VERSIONS,
                                            offset_commit_error_frame, scan_offset_commit)
from groupcoord.groups import offsets
from groupcoord.groups.config import ShardConfig
from groupcoord.protocol import (DecodeError, ProtocolError, UnsupportedVersionError,
                                 decode_request_frame)
from groupcoord.protocol.api_keys import OFFSET_COMMIT
from groupcoord.protocol.error_codes import ErrorCode as E
from groupcoord.server import node as N
from groupcoord.server.catalog import create_partitions, delete_topics
from groupcoord.server.metadata_cache import response_frame
from groupcoord.server.stream import FrameStream, Owner

__all__ = ["ServerConnection"]

log = logging.getLogger("groupcoord.server")


def _commit_scan_threshold(shards) -> int:
    """The frame size over which an OffsetCommit is scanned before it is decoded: the shards'
    message.max.bytes (the runtime's RuntimeConfig.shard_config; shards without one, a test
    double, have the default). A smaller frame decodes in a few ms at most."""
    cfg = getattr(getattr(shards, "config", None), "shard_config", None)
    return (cfg if isinstance(cfg, ShardConfig) else ShardConfig()).message_max_bytes


class ServerConnection(FrameStream):
    __slots__ = ("_shards", "_node", "_meta", "_dispatch", "_scan_over")

    def __init__(self, server: Owner):
        super().__init__(server)
        self._shards = server.shards
        self._node = server.node
        self._meta = server.metadata_cache
        self._scan_over = _commit_scan_threshold(self._shards)
        self._dispatch = {
            N.API_VERSIONS: self._api_versions,
            N.METADATA: self._metadata,
            N.FIND_COORDINATOR: self._inline(N.find_coordinator),
            N.LIST_OFFSETS: self._inline(N.list_offsets),
            N.FETCH: self._fetch,
            N.PRODUCE: self._produce,
            N.CREATE_TOPICS: self._create_topics,
            N.DESCRIBE_CLUSTER: self._inline(N.describe_cluster),
            N.CREATE_PARTITIONS: partial(self._catalog_change, create_partitions),
            N.DELETE_TOPICS: partial(self._catalog_change, delete_topics),
        }

    # ------------------------------------------------------------------ requests
    # (client id, api key) pairs whose trailing request bytes were logged, process-wide;
    # emptied when full, so client ids cannot grow it without bound.
    _trailing_logged: set = set()

    def _on_frame(self, frame: bytes):
        if (len(frame) > self._scan_over and frame[0] == 0 and frame[1] == OFFSET_COMMIT
                and _SCAN_VERSIONS[0] <= (frame[2] << 8 | frame[3]) <= _SCAN_VERSIONS[1]):
            self._large_commit(frame)
            return
        try:
            header, req = decode_request_frame(frame)
        except ProtocolError as e:
            self._unreadable(e)
            return
        key = header.api_key
        if header.trailing_bytes and log.isEnabledFor(logging.DEBUG):
            # Read and ignored, as Kafka does (librdkafka's Metadata "all topics" has 3).
            seen = ServerConnection._trailing_logged
            if (header.client_id, key) not in seen:
                if len(seen) >= 4096:
                    seen.clear()
                seen.add((header.client_id, key))
                self._warn("%s v%d request from client id %r has %d byte(s) after its last "
                           "field; ignored (logged once per client id and api)"
                           % (type(req).__name__[:-len("Request")], header.api_version,
                              header.client_id, header.trailing_bytes), debug=True)
        fn = self._dispatch.get(key)
        if fn is not None:
            fn(req, header)
        elif self._shards.serves(key):
            self._group_request(req, header, key)
        else:
            # Decodable but not implemented (hence not advertised): as an unknown key.
            self._bad("api key %d (%s) is not served by this node; closing"
                      % (key, type(req).__name__[:-len("Request")]))

    def _group_request(self, req, header, key, slot=None):
        # submit_nowait answers at once what needs no waiting (a steady heartbeat): no task
        # per request on the hot path; otherwise a future completes the slot later.
        # slot: the one the request already holds (a large commit, after its scan).
        res = self._submit(req, header)
        if isinstance(res, asyncio.Future):
            if slot is None:
                slot = self._new_slot()
            res.add_done_callback(partial(self._submitted, slot, key, header.api_version,
                                          header.correlation_id))
        elif slot is None:
            self._answer(res, header.api_version, header.correlation_id)
        else:
            data = self._encode(res, header.api_version, header.correlation_id)
            if data is not None:
                self._fill(slot, data)

    def _submit(self, req, header):
        try:
            return self._shards.submit_nowait(req, header.api_version, header.client_id or "",
                                             self.host)
        except Exception as exc:          # a bug: answered as such, the connection goes on
            fut = self._loop.create_future()
            fut.set_exception(exc)
            return fut

    # ---- OffsetCommit frames over message.max.bytes
    def _large_commit(self, frame: bytes):
        """Scan the frame (native/commit_scan.pyx) instead of decoding it and ask its shard,
        in the queue of its other requests, whether the whole commit is refused
        (offsets.commit_shape_error): if so, the answer is written from the frame, with no
        object per partition; if not (its records may fit in message.max.bytes), it is
        decoded and handled as usual, its answer in the same slot."""
        try:
            scan = scan_offset_commit(frame)
        except ProtocolError as e:
            self._unreadable(e)
            return
        header = scan[0]
        slot = self._new_slot()
        res = self._submit(offsets.commit_shape(*scan[1:]), header)
        if isinstance(res, asyncio.Future):
            res.add_done_callback(partial(self._commit_checked, slot, frame, header))
        else:
            self._commit_refused_or_run(slot, frame, header, offsets.shape_code(res))

    def _commit_checked(self, slot, frame, header, fut):
        if self.closing:
            return
        exc = asyncio.CancelledError() if fut.cancelled() else fut.exception()
        if exc is None:
            code = offsets.shape_code(fut.result())
        else:
            log.error("request from %s (OffsetCommit v%d, scanned) failed", self.peer,
                      header.api_version,
                      exc_info=exc if not isinstance(exc, asyncio.CancelledError) else None)
            code = E.UNKNOWN_SERVER_ERROR
        self._commit_refused_or_run(slot, frame, header, code)

    def _commit_refused_or_run(self, slot, frame, header, code):
        if code:
            self._fill(slot, offset_commit_error_frame(frame, code))
            return
        try:
            header, req = decode_request_frame(frame)
        except ProtocolError as e:        # the scan read these bytes: a bug on our side
            self._bad("OffsetCommit v%d passed the scan but not the decoder (%s); closing"
                      % (header.api_version, e), level=logging.ERROR)
            return
        self._group_request(req, header, header.api_key, slot)

    def _unreadable(self, e: ProtocolError):
        """A request frame the decoder (or the commit scan) refused: answered where the
        protocol allows, else the connection closes."""
        if isinstance(e, UnsupportedVersionError):
            self._unsupported(e)
        elif isinstance(e, DecodeError):
            self._malformed(e)
        else:
            self._bad("unreadable request (%s); closing" % e)

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

    def _metadata(self, req, header):
        version, corr = header.api_version, header.correlation_id
        try:
            res = self._meta.answer(req, version)
        except Exception as exc:          # a bug: answered as such, the connection goes on
            log.error("Metadata v%d for %s failed", version, self.peer, exc_info=exc)
            res = self._loop.create_future()
            res.set_exception(exc)
        slot = self._new_slot()
        if isinstance(res, asyncio.Future):
            # Built over several loop turns: take no further request until it is answered,
            # so a connection has at most one such answer in the making.
            self._job = True
            res.add_done_callback(partial(self._metadata_done, slot, version, corr))
        else:
            self._fill(slot, response_frame(res, version, corr))

    def _metadata_done(self, slot, version, corr, fut):
        self._job = False
        exc = asyncio.CancelledError() if fut.cancelled() else fut.exception()
        if self.closing:
            return
        if exc is None:
            self._fill(slot, response_frame(fut.result(), version, corr))
        else:
            self._internal_error(slot, N.METADATA, version, corr, exc)
        self._kick()

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
        if data is not None:
            self._hold(data, wait_ms / 1000.0)


    def _create_topics(self, req, header):
        slot = self._new_slot()
        task = self._loop.create_task(self.server.create_topics(req, header.api_version))
        task.add_done_callback(partial(self._submitted, slot, N.CREATE_TOPICS,
                                       header.api_version, header.correlation_id))

    def _catalog_change(self, fn, req, header):
        # CreatePartitions / DeleteTopics (catalog.py): a task, as CreateTopics.
        slot = self._new_slot()
        task = self._loop.create_task(fn(self.server, req, header.api_version,
                                         self._loop.time()))
        task.add_done_callback(partial(self._submitted, slot, header.api_key,
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
        self._internal_error(slot, api_key, version, corr, exc)

    def _internal_error(self, slot, api_key, version, corr, exc):
        """Answer a request whose handling raised: UNKNOWN_SERVER_ERROR where its response
        has a request-wide error code, else close (an empty answer would read as success)."""
        resp = N.top_level_error_response(api_key, version, E.UNKNOWN_SERVER_ERROR,
                                          "internal error: %s" % type(exc).__name__)
        if resp is None:
            self._bad("cannot answer api key %d v%d after an internal error (%s); closing"
                      % (api_key, version, type(exc).__name__), level=logging.ERROR)
            return
        data = self._encode(resp, version, corr)
        if data is not None:
            self._fill(slot, data)
