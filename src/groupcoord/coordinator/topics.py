"""The topic catalog: an input of the shard (Kafka's metadata image, here configured).

Consumer groups subscribe to topics of the catalog; a change of the catalog that touches a
group's subscribed topics bumps that group's epoch (``Shard.update_topics``). Topic ids are
16-byte UUIDs (bytes); a topic is identified by id in records and by name in subscriptions.
"""
from __future__ import annotations

import hashlib
from typing import Iterable, Optional

import msgspec

__all__ = ["Topic", "TopicCatalog", "topic_id_for"]


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
