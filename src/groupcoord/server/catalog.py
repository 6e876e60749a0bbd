"""The node's own files in the data directory: the topic catalog and the cluster id.

<data-dir>/topics.json   {"version": 1, "topics": [{"name": "orders", "partitions": 6}, ...],
                          "given": [{"name": "orders", "partitions": 6}, ...]}
<data-dir>/cluster-id    one line, a Kafka-style cluster id (22 chars of url-safe base64)

Both are written atomically (write a temporary file, fsync it, rename it over the old one,
fsync the directory), so a crash leaves either the old or the new file, never a torn one.
Topic ids are not stored: ``topic_id_for(name)`` derives the same stable id every time.

At start the topics given on the command line (--topic NAME:PARTITIONS, --topics-file) are
merged into the stored catalog: new names are added, a larger partition count is an increase
(allowed, as kafka-topics --alter), a smaller one is refused with a clear error because
partitions can never be removed (committed offsets and assignments refer to them). "given"
records the specs of the last start: a spec given again unchanged is not applied again, so a
client's CreatePartitions or DeleteTopics since then stands when the node restarts with the
same command line (a topic given as orders:6 and raised to 9 by a client is no "decrease",
one deleted by a client is not created again). Files without "given" read as given nothing.

While serving, clients change the catalog with CreateTopics (server.py), CreatePartitions and
DeleteTopics (``create_partitions`` / ``delete_topics`` below), one change at a time (the
server's catalog lock): plan (node.py, pure), write topics.json atomically, then install the
catalog on the shards (``ShardSet.set_topics``), and only then answer. A change acknowledged is
in the file, so it survives a crash; a change whose write failed is answered
KAFKA_STORAGE_ERROR and changed nothing. A deleted topic leaves the file; its id is derived
from its name, so a topic created again under the name gets the same id (Kafka would give
it a new one): what groups held of it was revoked and its committed offsets were deleted
when it was deleted (groups/shard.py ``on_catalog_change``).
"""
from __future__ import annotations

import asyncio
import base64
import logging
import os
import uuid
from typing import Iterable, Optional

import msgspec

from groupcoord.groups.limits import validate_topic_name
from groupcoord.groups.topics import Topic, TopicCatalog, topic_id_for
from groupcoord.protocol.api_keys import CREATE_PARTITIONS, DELETE_TOPICS
from groupcoord.protocol.error_codes import ErrorCode
from groupcoord.server.topic_admin import (MAX_PARTITIONS, plan_create_partitions,
                                           plan_delete_topics, timed_out_response)

__all__ = ["TopicSpec", "CatalogError", "CatalogStore", "parse_topic_arg", "load_topics_file",
           "merge_topics", "load_or_create_cluster_id", "atomic_write", "create_partitions",
           "delete_topics"]

log = logging.getLogger("groupcoord.server")

TOPICS_FILE = "topics.json"
CLUSTER_ID_FILE = "cluster-id"


class CatalogError(ValueError):
    """A topic specification or stored catalog that cannot be used (a startup error)."""


class TopicSpec(msgspec.Struct, forbid_unknown_fields=True):
    name: str
    partitions: int


class _TopicsFile(msgspec.Struct):
    version: int = 1
    topics: list[TopicSpec] = msgspec.field(default_factory=list)
    given: list[TopicSpec] = msgspec.field(default_factory=list)


def _check_spec(spec: TopicSpec, where: str) -> TopicSpec:
    bad = validate_topic_name(spec.name)
    if bad:
        raise CatalogError("%s: %s" % (where, bad))
    if not 1 <= spec.partitions <= MAX_PARTITIONS:
        raise CatalogError("%s: topic %r: partitions must be 1..%d, not %d"
                           % (where, spec.name, MAX_PARTITIONS, spec.partitions))
    return spec


def parse_topic_arg(text: str) -> TopicSpec:
    """'orders:6' -> TopicSpec('orders', 6)."""
    name, sep, parts = text.rpartition(":")
    if not sep:
        raise CatalogError("--topic %r: expected NAME:PARTITIONS" % text)
    try:
        n = int(parts)
    except ValueError:
        raise CatalogError("--topic %r: partitions %r is not an integer" % (text, parts)) \
            from None
    return _check_spec(TopicSpec(name, n), "--topic %s" % text)


def load_topics_file(path: str) -> list:
    """A JSON file [{"name": "orders", "partitions": 6}, ...] -> [TopicSpec]."""
    try:
        with open(path, "rb") as fh:
            data = fh.read()
    except OSError as e:
        raise CatalogError("--topics-file %s: %s" % (path, e.strerror or e)) from None
    try:
        specs = msgspec.json.decode(data, type=list[TopicSpec])
    except msgspec.DecodeError as e:
        raise CatalogError("--topics-file %s: %s (expected [{\"name\": ..., \"partitions\": "
                           "...}, ...])" % (path, e)) from None
    return [_check_spec(s, "--topics-file %s" % path) for s in specs]


def merge_topics(stored: TopicCatalog, given: Iterable,
                 previous: Optional[dict] = None) -> tuple:
    """-> (catalog, changed). Raises CatalogError for a partition decrease or a topic given
    twice with different counts. previous: name -> partitions given at the last start; a
    spec given again unchanged is skipped when the stored topic is gone or has at least
    that many partitions (a client deleted or raised it since)."""
    wanted: dict = {}
    for s in given:
        if s.name in wanted and wanted[s.name] != s.partitions:
            raise CatalogError("topic %r given twice, with %d and %d partitions"
                               % (s.name, wanted[s.name], s.partitions))
        wanted[s.name] = s.partitions
    cur = {t.name: t for t in stored.by_name.values()}
    changed = False
    for name, parts in wanted.items():
        t = cur.get(name)
        if (previous or {}).get(name) == parts and (t is None or t.partitions >= parts):
            if t is None:
                log.info("topic %r (given as %s:%d at the last start too) was deleted by a "
                         "client since; not created again (give another partition count to "
                         "create it)", name, name, parts)
            continue
        if t is not None and parts < t.partitions:
            raise CatalogError(
                "topic %r has %d partitions in the data directory and %d were given: "
                "partitions cannot be removed (give %d or more, or use a new data directory)"
                % (name, t.partitions, parts, t.partitions))
        if t is None or parts > t.partitions:
            cur[name] = Topic(name, topic_id_for(name), parts)
            changed = True
    return TopicCatalog(cur.values()), changed


def atomic_write(path: str, data: bytes) -> None:
    d = os.path.dirname(os.path.abspath(path))
    tmp = "%s.tmp.%d" % (path, os.getpid())
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            n = os.write(fd, view)
            view = view[n:]
        os.fsync(fd)
    finally:
        os.close(fd)
    try:
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise
    dfd = os.open(d, os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


class CatalogStore:
    """<data-dir>/topics.json. ``given``: the command line's specs recorded with the catalog
    (name -> partitions), read by ``load`` and kept by every ``save``."""

    def __init__(self, data_dir: str):
        self.data_dir = data_dir
        self.path = os.path.join(data_dir, TOPICS_FILE)
        self.given: dict = {}

    def load(self) -> TopicCatalog:
        try:
            with open(self.path, "rb") as fh:
                data = fh.read()
        except FileNotFoundError:
            return TopicCatalog()
        try:
            f = msgspec.json.decode(data, type=_TopicsFile)
            cat = TopicCatalog((_check_spec(s, self.path).name, s.partitions)
                               for s in f.topics)
        except (msgspec.DecodeError, ValueError) as e:
            raise CatalogError("%s is not a valid topic catalog: %s" % (self.path, e)) from None
        self.given = {s.name: s.partitions for s in f.given}
        return cat

    def save(self, catalog: TopicCatalog, given: Optional[dict] = None) -> None:
        """Write the catalog (and ``given``, when not None, as the new recorded specs)."""
        os.makedirs(self.data_dir, exist_ok=True)
        if given is not None:
            self.given = dict(given)
        body = _TopicsFile(topics=[TopicSpec(t.name, t.partitions) for t in catalog],
                           given=[TopicSpec(n, p) for n, p in sorted(self.given.items())])
        atomic_write(self.path, msgspec.json.format(msgspec.json.encode(body), indent=2) + b"\n")


def new_cluster_id() -> str:
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


def load_or_create_cluster_id(data_dir: Optional[str]) -> str:
    """The cluster id stored in the data directory, created on first start (Kafka's format:
    a random UUID in url-safe base64 without padding)."""
    if data_dir is None:
        return new_cluster_id()
    path = os.path.join(data_dir, CLUSTER_ID_FILE)
    try:
        with open(path, encoding="ascii") as fh:
            cid = fh.read().strip()
        if cid:
            return cid
    except FileNotFoundError:
        pass
    cid = new_cluster_id()
    os.makedirs(data_dir, exist_ok=True)
    atomic_write(path, cid.encode() + b"\n")
    return cid


# ---------------------------------------------------------------------- changes by clients
async def create_partitions(server, req, version: int, arrived: float):
    """CreatePartitions (37) on the running server (``arrived``: loop time the request was
    taken, for its TimeoutMs)."""

    def done(resp, new):
        log.info("topic partitions raised: %s", ", ".join(
            "%s to %d" % (r.name, new.by_name[r.name].partitions)
            for r in resp.results if r.error_code == 0))

    return await _change(server, CREATE_PARTITIONS, req, version, arrived,
                         plan_create_partitions, "results", done)


async def delete_topics(server, req, version: int, arrived: float):
    """DeleteTopics (20) on the running server."""

    def done(resp, new):
        log.info("topic(s) deleted: %s", ", ".join(
            str(r.name) for r in resp.responses if r.error_code == 0))

    return await _change(server, DELETE_TOPICS, req, version, arrived,
                         plan_delete_topics, "responses", done)


async def _change(server, api_key: int, req, version: int, arrived: float, plan,
                  results: str, done):
    """One catalog change: wait for the catalog lock (at most TimeoutMs from ``arrived``:
    REQUEST_TIMED_OUT otherwise, nothing changed), plan against the current catalog,
    persist, install, answer. ``results``: the response's field of per-topic results."""
    lock = server._topics_lock          # shared with Server.create_topics
    if lock.locked():
        left = arrived + max(0, req.timeout_ms) / 1000.0 - server.loop.time()
        try:
            await asyncio.wait_for(lock.acquire(), max(0.0, left))
        except asyncio.TimeoutError:
            return timed_out_response(api_key, req, version)
    else:
        await lock.acquire()            # free: taken without waiting
    try:
        shards = server.shards
        resp, new = plan(req, version, shards.topics, server.config.catalog_limits)
        if new is None:
            return resp
        if server.store is not None:
            try:
                await server.loop.run_in_executor(None, server.store.save, new)
            except OSError as e:
                log.error("cannot persist the topic catalog: %s", e)
                # Nothing changed: each topic the plan accepted is answered so.
                for r in getattr(resp, results):
                    if r.error_code == 0:
                        r.error_code = int(ErrorCode.KAFKA_STORAGE_ERROR)
                        r.error_message = "cannot persist the topic catalog: %s" % e
                return resp
        await shards.set_topics(new)
        done(resp, new)
        return resp
    finally:
        lock.release()
