"""The topic catalog: an input of the shard (Kafka's metadata image, here configured).

Consumer groups subscribe to topics of the catalog; a change of the catalog that touches a
group's subscribed topics bumps that group's epoch (``Shard.update_topics``). Topic ids are
16-byte UUIDs (bytes); a topic is identified by id in records and by name in subscriptions.

What else a change does (``shard.on_catalog_change``, run by the runtime on each live shard after
``update_topics``; docs/server.md, "Topic catalog changes"): classic groups subscribed to a
changed topic rebalance (classic/handlers.py, ``rebalance_for_topics``), and the committed
offsets of a deleted topic are deleted in every group, as tombstones (Kafka's
onPartitionsDeleted).
"""
from __future__ import annotations

import hashlib
from typing import Iterable, Optional

import msgspec

from groupcoord.groups.records import Record
from groupcoord.groups.result import Result
from groupcoord.protocol import messages as m

__all__ = ["Topic", "TopicCatalog", "topic_id_for", "catalog_changes",
           "deleted_topic_offsets"]


class Topic(msgspec.Struct, frozen=True, gc=False):
    name: str
    topic_id: bytes
    partitions: int


def topic_id_for(name: str) -> bytes:
    """A stable, non-zero topic id derived from the name (for catalogs that give none)."""
    d = bytearray(hashlib.sha256(b"groupcoord-topic:" + name.encode()).digest()[:16])
    d[6] = (d[6] & 0x0F) | 0x40       # shaped like a version-4 UUID
    d[8] = (d[8] & 0x3F) | 0x80
    return bytes(d)


class TopicCatalog:
    """Immutable view: name -> Topic and id -> Topic."""
    __slots__ = ("by_name", "by_id")

    def __init__(self, topics: Iterable = ()):
        by_name: dict = {}
        by_id: dict = {}
        for t in topics:
            if isinstance(t, tuple):
                name, parts = t[0], t[1]
                tid = t[2] if len(t) > 2 else topic_id_for(name)
                t = Topic(name, tid, parts)
            if not t.name:
                raise ValueError("topic name must be non-empty")
            if len(t.topic_id) != 16 or t.topic_id == bytes(16):
                raise ValueError("topic %r: id must be 16 non-zero bytes" % t.name)
            if t.partitions < 0:
                raise ValueError("topic %r: negative partition count" % t.name)
            if t.name in by_name or t.topic_id in by_id:
                raise ValueError("duplicate topic %r" % t.name)
            by_name[t.name] = t
            by_id[t.topic_id] = t
        self.by_name = by_name
        self.by_id = by_id

    @classmethod
    def of(cls, **partitions) -> "TopicCatalog":
        """TopicCatalog.of(orders=3, payments=6): ids derived from names."""
        return cls((n, p) for n, p in partitions.items())

    def get(self, name: str) -> Optional[Topic]:
        return self.by_name.get(name)

    def with_topics(self, *topics) -> "TopicCatalog":
        cur = {t.name: t for t in self.by_name.values()}
        for t in TopicCatalog(topics).by_name.values():
            cur[t.name] = t
        return TopicCatalog(cur.values())

    def __len__(self) -> int:
        return len(self.by_name)

    def __iter__(self):
        return iter(sorted(self.by_name.values(), key=lambda t: t.name))


def catalog_changes(old: TopicCatalog, new: TopicCatalog) -> tuple:
    """-> (changed, deleted), frozensets of names. changed: topics created, grown, deleted or
    recreated; deleted: topics of ``old`` that are gone from ``new`` or are now another topic
    (another id) under the same name: what was committed for them is about a topic that is no
    more."""
    changed, deleted = set(), set()
    for name, t in old.by_name.items():
        n = new.by_name.get(name)
        if n is None or n.topic_id != t.topic_id:
            deleted.add(name)
        elif n.partitions != t.partitions:
            changed.add(name)
    changed.update(deleted)
    changed.update(name for name in new.by_name if name not in old.by_name)
    return frozenset(changed), frozenset(deleted)


_TOMBSTONE_OVERHEAD = 64    # a tombstone's bytes besides its group id and topic (estimate)


def deleted_topic_offsets(shard, deleted, max_bytes: int) -> list:
    """The committed offsets of the ``deleted`` topics in every group of the shard, as
    OffsetCommit tombstones (Kafka's OffsetMetadataManager.onPartitionsDeleted): a list of
    Results, each of at most about ``max_bytes / 2`` of records, so that one group with
    many partitions cannot make a batch the runtime must refuse (message.max.bytes). Pure."""
    if not deleted:
        return []
    budget = max(1, max_bytes // 2)
    out, batch, size = [], [], 0
    for gid in sorted(shard.offsets):
        glen = len(gid.encode("utf-8", "surrogatepass"))
        for topic, part in sorted(tp for tp in shard.offsets[gid] if tp[0] in deleted):
            n = _TOMBSTONE_OVERHEAD + glen + len(topic)
            if batch and size + n > budget:
                out.append(Result(None, tuple(batch)))
                batch, size = [], 0
            batch.append(Record(m.OffsetCommitKey(group=gid, topic=topic, partition=part),
                                None))
            size += n
    if batch:
        out.append(Result(None, tuple(batch)))
    return out
