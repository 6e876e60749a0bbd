"""Metadata answers spliced from cached bytes, built a bounded slice of work per loop turn.

A MetadataResponse body is, for every version (Kafka's MetadataResponse.json):

    head    = [ThrottleTimeMs v3+] Brokers [ClusterId v2+] [ControllerId v1+]
    count   = Topics array length: int32 N (v0-8) | uvarint N+1 (v9+, flexible)
    entries = N MetadataResponseTopic entries, one after the other
    tail    = [ClusterAuthorizedOperations v8-10] [ErrorCode v13+] [tagged fields v9+]

and a topic entry is

    topic head | partitions count | P partition entries | topic tail

where every partition entry of this node has the same bytes except PartitionIndex (int32 at
offset 2, after ErrorCode int16): one leader (node 0), one replica, no offline replica.

Only the catalog decides the entries, so per catalog object and per (version, topic
authorized operations requested) this module encodes every topic's entry ONCE, in catalog
(name) order, into one blob with the offset of each entry. A Metadata request for all topics
then costs a few small bytes objects; one naming topics costs a slice per known topic plus an
encoding of its unknown names. The semantics stay those of ``node.metadata``: every piece is
cut out of what the codec encodes for a ``node.metadata`` answer (head and tail from an answer
with no topic; a topic's entry from an answer with that one topic; a big topic's partition
entries repeat the template cut from its 1- and 2-partition answers, checked byte for byte
against the 2-partition one). tests/test_server_fairness.py compares whole answers, every
version, with ``encode_response_frame(node.metadata(...))``.

Bounded work per loop turn: building a blob is a job that yields after every small unit (a
topic, or 64k partitions of a big one); the jobs run from one ``call_soon`` callback that
spends at most ``step_seconds`` per loop turn, round robin, so a 2M-partition catalog never
holds the loop. Blob builds run one at a time (memory: one blob in progress), cached blobs
are evicted least recently used beyond ``max_cached_bytes`` (the newest always stays). A
small catalog (or a request naming few topics, blob cached) is answered inline.
"""
from __future__ import annotations

import asyncio
import logging
import struct
import time
from array import array
from collections import OrderedDict, deque
from typing import Optional

import numpy as np

from groupcoord.groups.topics import Topic, TopicCatalog
from groupcoord.protocol import get_codec
from groupcoord.protocol import messages as m
from groupcoord.server import node as N

__all__ = ["MetadataCache", "response_frame"]

log = logging.getLogger("groupcoord.server")

# Answer inline when the work is at most this (else: a job, a slice per loop turn).
INLINE_PARTITIONS = 4096
INLINE_TOPICS = 256
TEMPLATE_MIN_PARTITIONS = 64     # above: partition entries from the template (numpy)
PARTITIONS_PER_UNIT = 1 << 16
UNIT_WORK = 2048                 # partitions (+ 16 per topic) encoded between yields
NAMES_PER_UNIT = 256

_I32 = struct.Struct(">i")
_FRAME_HEAD = struct.Struct(">ii")


def _uvarint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _count(n: int, flexible: bool) -> bytes:
    return _uvarint(n + 1) if flexible else _I32.pack(n)


def _flexible(version: int) -> bool:
    return get_codec(N.METADATA, version).response_header_version == 1


def response_frame(body: tuple, version: int, correlation_id: int) -> tuple:
    """The frame pieces (size | correlation id | [tagged fields] | body) of a Metadata body
    given as a tuple of bytes: the same bytes ``encode_response_frame`` writes."""
    tagged = _flexible(version)
    size = 4 + tagged + sum(len(b) for b in body)
    head = _FRAME_HEAD.pack(size, correlation_id)
    return ((head + b"\x00") if tagged else head,) + body


class _NodeView:
    """What ``node.metadata`` reads, over a given catalog (and, in cluster mode, the brokers
    and controller frozen as the cache saw them: ``_Brokers``)."""
    __slots__ = ("host", "port", "cluster_id", "topics", "cluster")

    def __init__(self, node, topics: TopicCatalog, cluster=None):
        self.host, self.port, self.cluster_id = node.host, node.port, node.cluster_id
        self.topics = topics
        self.cluster = cluster


class _Brokers:
    """A cluster view frozen at one (brokers, controller): every cached piece of one answer
    is cut from answers encoded with the same brokers and leader."""
    __slots__ = ("node_id", "_brokers", "_controller")

    def __init__(self, node_id: int, brokers: tuple, controller: int):
        self.node_id, self._brokers, self._controller = node_id, brokers, controller

    def brokers(self):
        return self._brokers

    def controller_id(self) -> int:
        return self._controller


class _Entries:
    __slots__ = ("blob", "offsets", "size")

    def __init__(self, blob: memoryview, offsets: array):
        self.blob = blob
        self.offsets = offsets
        self.size = len(blob) + offsets.itemsize * len(offsets)


class _Catalog:
    """One catalog object's topics in answer order and its cached entry blobs."""
    __slots__ = ("catalog", "topics", "index", "partitions", "entries", "building")

    def __init__(self, catalog: TopicCatalog):
        self.catalog = catalog
        self.topics = list(catalog)                       # name order, as node.metadata
        self.index = {t.name: i for i, t in enumerate(self.topics)}
        self.partitions = sum(t.partitions for t in self.topics)
        self.entries: OrderedDict = OrderedDict()         # (version, auth) -> _Entries
        self.building: dict = {}                          # (version, auth) -> Future

    @property
    def small(self) -> bool:
        return self.partitions <= INLINE_PARTITIONS and len(self.topics) <= INLINE_TOPICS


def _all_request(auth: bool, cluster: bool = False):
    return m.MetadataRequest(topics=None, include_topic_authorized_operations=auth,
                             include_cluster_authorized_operations=cluster)


class MetadataCache:
    """``answer(req, version)`` -> a tuple of bytes (the response body) or a Future of one."""

    def __init__(self, node, loop: asyncio.AbstractEventLoop, step_seconds: float = 0.002,
                 max_cached_bytes: int = 64 << 20):
        self.node = node
        self.loop = loop
        self.step_seconds = step_seconds
        self.max_cached_bytes = max_cached_bytes
        self._cat: Optional[_Catalog] = None
        self._head_tails: dict = {}      # (version, cluster ops) -> (head, tail)
        self._jobs: deque = deque()      # [generator, future, finish] run round robin
        self._builds: deque = deque()    # blob builds waiting for their turn (one runs)
        self._build_running = False
        self._scheduled = False
        self._view = None                # cluster mode: the _Brokers the cache was cut for

    # ------------------------------------------------------------------ public
    def answer(self, req, version: int):
        cv = self._catalog()
        auth = version >= 8 and bool(req.include_topic_authorized_operations)
        cluster = 8 <= version <= 10 and bool(req.include_cluster_authorized_operations)
        key = (version, auth)
        ent = cv.entries.get(key)
        if ent is not None:
            cv.entries.move_to_end(key)
            return self._respond(cv, req, version, auth, cluster, ent)
        if cv.small:
            ent = self._drive(self._build(cv, version, auth))
            self._store(cv, key, ent)
            return self._respond(cv, req, version, auth, cluster, ent)
        out = self.loop.create_future()
        built = cv.building.get(key)
        if built is None:
            built = cv.building[key] = self.loop.create_future()
            self._builds.append((cv, key, built))
            self._next_build()
        built.add_done_callback(
            lambda f: self._after_build(f, out, cv, req, version, auth, cluster))
        return out

    @property
    def cached_bytes(self) -> int:
        cv = self._cat
        return 0 if cv is None else sum(e.size for e in cv.entries.values())

    # ------------------------------------------------------------------ pieces
    def _catalog(self) -> _Catalog:
        c = getattr(self.node, "cluster", None)
        if c is not None:
            # Cluster mode: the brokers (head) and the leader of every partition (entries)
            # follow the live nodes; a change of either starts the cache over.
            lst = getattr(self.node, "listener", None)
            brokers = tuple(c.brokers(lst) if lst else c.brokers())
            controller = c.controller_id()
            v = self._view
            if v is None or v.brokers() != brokers or v.controller_id() != controller:
                self._view = _Brokers(c.node_id, brokers, controller)
                self._cat = None
                self._head_tails = {}
        cat = self.node.topics
        cv = self._cat
        if cv is None or cv.catalog is not cat:
            # A new catalog: the old blobs describe topics that changed. Builds under way
            # finish for the requests already waiting on them and are not cached.
            cv = self._cat = _Catalog(cat)
        return cv

    def _head_tail(self, version: int, cluster: bool) -> tuple:
        key = (version, cluster)
        ht = self._head_tails.get(key)
        if ht is None:
            codec = get_codec(N.METADATA, version)
            req = _all_request(False, cluster)
            e0 = codec.encode_response(N.metadata(
                req, version, _NodeView(self.node, TopicCatalog(), self._view)))
            e1 = codec.encode_response(N.metadata(req, version, _NodeView(
                self.node, TopicCatalog([Topic("t", b"\x01" * 16, 0)]), self._view)))
            flexible = _flexible(version)
            # e0 = head|count(0)|tail, e1 = head|count(1)|entry|tail: the counts first
            # differ in their last byte (int32 0/1) or only byte (uvarint 1/2).
            same = 0
            while e0[same] == e1[same]:
                same += 1
            head_len = same - (0 if flexible else 3)
            tail_len = len(e0) - head_len - len(_count(0, flexible))
            ht = self._head_tails[key] = (e0[:head_len], e0[len(e0) - tail_len:])
        return ht

    def _codec_entry(self, t: Topic, version: int, auth: bool) -> bytes:
        head, tail = self._head_tail(version, False)
        e = get_codec(N.METADATA, version).encode_response(N.metadata(
            _all_request(auth), version, _NodeView(self.node, TopicCatalog([t]), self._view)))
        return e[len(head) + len(_count(1, _flexible(version))):len(e) - len(tail)]

    def _unknown_entries(self, run: list, version: int, auth: bool) -> bytes:
        # The entries node.metadata answers for names/ids the catalog does not have.
        head, tail = self._head_tail(version, False)
        req = m.MetadataRequest(topics=run, include_topic_authorized_operations=auth)
        e = get_codec(N.METADATA, version).encode_response(
            N.metadata(req, version, _NodeView(self.node, TopicCatalog(), self._view)))
        return e[len(head) + len(_count(len(run), _flexible(version))):len(e) - len(tail)]

    def _template(self, t: Topic, version: int, auth: bool) -> tuple:
        """-> (topic head, partition entry of index 0, topic tail) cut from the codec's
        entries of t with 1 and 2 partitions."""
        e1 = self._codec_entry(Topic(t.name, t.topic_id, 1), version, auth)
        e2 = self._codec_entry(Topic(t.name, t.topic_id, 2), version, auth)
        flexible = _flexible(version)
        size = len(e2) - len(e1)
        same = 0
        while same < len(e1) and e1[-1 - same] == e2[-1 - same]:
            same += 1
        # The two last partition entries differ only in PartitionIndex's last byte (0 / 1).
        tail_len = same - (size - 6)
        start = len(e1) - tail_len - size
        head = e1[:start - len(_count(1, flexible))]
        p0 = e1[start:start + size]
        tail = e1[len(e1) - tail_len:]
        if (p0[2:6] != b"\x00\x00\x00\x00" or head + _count(2, flexible) + p0 + p0[:2]
                + _I32.pack(1) + p0[6:] + tail != e2):
            raise RuntimeError("Metadata v%d: the partition entry layout is not the one "
                               "this cache expects" % version)
        return head, p0, tail

    # ------------------------------------------------------------------ jobs
    def _build(self, cv: _Catalog, version: int, auth: bool):
        """Generator: encodes every topic's entry; yields between units; returns _Entries."""
        flexible = _flexible(version)
        # One growing bytearray (no final join: that would copy it all in one loop turn).
        blob = bytearray()
        offsets = array("Q", [0])
        work = 0
        for t in cv.topics:
            if t.partitions <= TEMPLATE_MIN_PARTITIONS:
                blob += self._codec_entry(t, version, auth)
                work += t.partitions + 16
            else:
                head, p0, tail = self._template(t, version, auth)
                blob += head
                blob += _count(t.partitions, flexible)
                row = np.frombuffer(p0, np.uint8)
                for lo in range(0, t.partitions, PARTITIONS_PER_UNIT):
                    hi = min(t.partitions, lo + PARTITIONS_PER_UNIT)
                    block = np.empty((hi - lo, len(p0)), np.uint8)
                    block[:] = row
                    block[:, 2:6] = np.arange(lo, hi, dtype=">i4").view(np.uint8).reshape(
                        hi - lo, 4)
                    blob += block.data
                    yield
                blob += tail
                work += 512               # two small encodes and a copy: a unit's quarter
            offsets.append(len(blob))
            if work >= UNIT_WORK:
                work = 0
                yield
        return _Entries(memoryview(blob).toreadonly(), offsets)

    def _named(self, cv: _Catalog, want: list, version: int, auth: bool, ent: _Entries):
        """Generator: the entries of a request naming topics, as node.metadata answers it
        (each name or id once, in request order); returns (count, tuple of pieces: slices
        of the blob, no copy)."""
        blob, offsets, index = ent.blob, ent.offsets, cv.index
        by_id, by_name = cv.catalog.by_id, cv.catalog.by_name
        seen: set = set()
        out: list = []
        run: list = []
        n = 0
        for i, rt in enumerate(want):
            if version >= 10 and rt.name is None:
                key = ("id", rt.topic_id)
                t = by_id.get(rt.topic_id)
            else:
                key = ("name", rt.name)
                t = by_name.get(rt.name)
            if key in seen:
                continue
            seen.add(key)
            n += 1
            if t is None:
                run.append(rt)
            else:
                if run:
                    out.append(self._unknown_entries(run, version, auth))
                    run = []
                j = index[t.name]
                out.append(blob[offsets[j]:offsets[j + 1]])
            if i % NAMES_PER_UNIT == NAMES_PER_UNIT - 1:
                if run:
                    out.append(self._unknown_entries(run, version, auth))
                    run = []
                yield
        if run:
            out.append(self._unknown_entries(run, version, auth))
        return n, tuple(out)

    def _respond(self, cv, req, version, auth, cluster, ent):
        head, tail = self._head_tail(version, cluster)
        flexible = _flexible(version)
        want = req.topics
        if want is None or (version == 0 and not want):
            return (head + _count(len(cv.topics), flexible), ent.blob, tail)
        gen = self._named(cv, want, version, auth, ent)
        if len(want) <= INLINE_TOPICS:
            n, body = self._drive(gen)
            return (head + _count(n, flexible),) + body + (tail,)
        fut = self.loop.create_future()
        self._start(gen, fut, lambda r: (head + _count(r[0], flexible),) + r[1] + (tail,))
        return fut

    def _after_build(self, built, out, cv, req, version, auth, cluster):
        if out.done():
            return
        if built.cancelled() or built.exception() is not None:
            out.set_exception(built.exception() if not built.cancelled()
                              else asyncio.CancelledError())
            return
        try:
            res = self._respond(cv, req, version, auth, cluster, built.result())
        except Exception as e:
            out.set_exception(e)
            return
        if isinstance(res, asyncio.Future):
            res.add_done_callback(lambda f: _chain(f, out))
        else:
            out.set_result(res)

    def _store(self, cv: _Catalog, key, ent: _Entries):
        if cv is not self._cat:
            return                      # the catalog changed meanwhile: not worth keeping
        cv.entries[key] = ent
        cv.entries.move_to_end(key)
        while len(cv.entries) > 1 and self.cached_bytes > self.max_cached_bytes:
            cv.entries.popitem(last=False)

    def _next_build(self):
        if self._build_running or not self._builds:
            return
        cv, key, built = self._builds.popleft()
        self._build_running = True

        def done(ent):
            self._store(cv, key, ent)
            return ent

        def finished(f):
            self._build_running = False
            cv.building.pop(key, None)
            self._next_build()
        built.add_done_callback(finished)
        self._start(self._build(cv, *key), built, done)

    def _start(self, gen, fut, finish):
        self._jobs.append([gen, fut, finish])
        if not self._scheduled:
            self._scheduled = True
            self.loop.call_soon(self._run)

    def _run(self):
        # At most step_seconds of job work per loop turn, one unit per job in turn.
        self._scheduled = False
        jobs = self._jobs
        deadline = time.perf_counter() + self.step_seconds
        while jobs:
            job = jobs[0]
            gen, fut, finish = job
            try:
                next(gen)
            except StopIteration as stop:
                jobs.popleft()
                if not fut.done():
                    try:
                        fut.set_result(finish(stop.value))
                    except Exception as e:      # pragma: no cover - finish is plain code
                        fut.set_exception(e)
            except Exception as e:
                jobs.popleft()
                log.error("Metadata answer failed: %s", e, exc_info=True)
                if not fut.done():
                    fut.set_exception(e)
            else:
                jobs.rotate(-1)
            if time.perf_counter() >= deadline:
                break
        if jobs and not self._scheduled:
            self._scheduled = True
            self.loop.call_soon(self._run)

    @staticmethod
    def _drive(gen):
        while True:
            try:
                next(gen)
            except StopIteration as stop:
                return stop.value


def _chain(src: asyncio.Future, dst: asyncio.Future) -> None:
    if dst.done():
        return
    if src.cancelled():
        dst.set_exception(asyncio.CancelledError())
    elif src.exception() is not None:
        dst.set_exception(src.exception())
    else:
        dst.set_result(src.result())
