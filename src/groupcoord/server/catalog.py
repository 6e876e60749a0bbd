"""The node's own files in the data directory: the topic catalog and the cluster id.

<data-dir>/topics.json   {"version": 1, "topics": [{"name": "orders", "partitions": 6}, ...]}
<data-dir>/cluster-id    one line, a Kafka-style cluster id (22 chars of url-safe base64)

Both are written atomically (write a temporary file, fsync it, rename it over the old one,
fsync the directory), so a crash leaves either the old or the new file, never a torn one.
Topic ids are not stored: ``topic_id_for(name)`` derives the same stable id every time.

At start the topics given on the command line (--topic NAME:PARTITIONS, --topics-file) are
merged into the stored catalog: new names are added, a larger partition count is an increase
(allowed, as kafka-topics --alter), a smaller one is refused with a clear error because
partitions can never be removed (committed offsets and assignments refer to them).
"""
from __future__ import annotations

import base64
import os
import uuid
from typing import Iterable, Optional

import msgspec

from groupcoord.coordinator.topics import Topic, TopicCatalog, topic_id_for

__all__ = ["TopicSpec", "CatalogError", "CatalogStore", "parse_topic_arg", "load_topics_file",
           "merge_topics", "load_or_create_cluster_id", "atomic_write"]

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


def _check_spec(spec: TopicSpec, where: str) -> TopicSpec:
    from groupcoord.server.node import MAX_PARTITIONS, validate_topic_name
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


def merge_topics(stored: TopicCatalog, given: Iterable) -> tuple:
    """-> (catalog, changed). Raises CatalogError for a partition decrease or a topic given
    twice with different counts."""
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
    """<data-dir>/topics.json."""

    def __init__(self, data_dir: str):
        self.data_dir = data_dir
        self.path = os.path.join(data_dir, TOPICS_FILE)

    def load(self) -> TopicCatalog:
        try:
            with open(self.path, "rb") as fh:
                data = fh.read()
        except FileNotFoundError:
            return TopicCatalog()
        try:
            f = msgspec.json.decode(data, type=_TopicsFile)
            return TopicCatalog((_check_spec(s, self.path).name, s.partitions)
                                for s in f.topics)
        except (msgspec.DecodeError, ValueError) as e:
            raise CatalogError("%s is not a valid topic catalog: %s" % (self.path, e)) from None

    def save(self, catalog: TopicCatalog) -> None:
        os.makedirs(self.data_dir, exist_ok=True)
        body = _TopicsFile(topics=[TopicSpec(t.name, t.partitions) for t in catalog])
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
