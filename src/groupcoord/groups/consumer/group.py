"""Consumer groups' state (KIP-848, unit = a partition): ConsumerGroup and its members,
changed by replay only (consumer/replay.py). What the heartbeat does with it is
consumer/heartbeat.py; where the target comes from, consumer/target.py.
"""
from __future__ import annotations

import re
from collections import Counter
from typing import Optional

import msgspec

from groupcoord.assign import consumer as assignors
from groupcoord.groups.modern.group import ModernGroup, described_member
from groupcoord.groups.modern.reconcile import (NEW_MEMBER, UNREVOKED, MemberAssignment,
                                                units_of_index, update_holders)
from groupcoord.groups.records import Record
from groupcoord.groups.result import TimerKey
from groupcoord.groups.timers import (CONSUMER_ASSIGNMENT as ASSIGNMENT_TIMER,
                                      CONSUMER_REVOCATION as REVOCATION_TIMER,
                                      CONSUMER_SESSION as SESSION_TIMER)
from groupcoord.protocol import embedded
from groupcoord.protocol import messages as m
from groupcoord.protocol.error_codes import ErrorCode

__all__ = ["ConsumerGroup", "Member", "SESSION_TIMER", "REVOCATION_TIMER", "ASSIGNMENT_TIMER"]

JOIN_EPOCH = 0
MEMBER_TYPE_CLASSIC = 0                  # ConsumerGroupDescribe v1 MemberType (Kafka's values)
MEMBER_TYPE_CONSUMER = 1
# ConsumerProtocol version of the subscriptions and assignments DescribeGroups shows for
# members using the consumer protocol: v3 carries the rack (KIP-881); kafka-python 3.0.12
# decodes v0-3, librdkafka 2.16 reads the assignment's partitions of any version.
DESCRIBE_PROTOCOL_VERSION = 3

ASSIGNORS = {"uniform": assignors.uniform, "range": assignors.range_}

_MetaValue = m.ConsumerGroupMemberMetadataValue
EMPTY_META = _MetaValue(instance_id=None, rack_id=None, client_id="", client_host="",
                        subscribed_topic_names=[], subscribed_topic_regex=None,
                        rebalance_timeout_ms=-1, server_assignor=None)

_E = ErrorCode



class Member:
    """One member: its metadata record value, its current assignment, its session timer key.
    Changed only by replay."""
    __slots__ = ("member_id", "meta", "a", "session_key")

    def __init__(self, group_id: str, member_id: str):
        self.member_id = member_id
        self.meta = EMPTY_META
        self.a = NEW_MEMBER
        self.session_key = TimerKey(SESSION_TIMER, group_id, member_id)


class ConsumerGroup(ModernGroup):
    TYPE = "consumer"

    def __init__(self, group_id: str, config):
        self.group_id = group_id
        self.epoch = 0
        self.target_epoch = 0
        self.members: dict = {}            # member id -> Member
        self.targets: dict = {}            # member id -> frozenset of units
        self.topic_meta: dict = {}         # subscribed topic name -> (topic id, partitions)
        self.holders: dict = {}            # unit -> member id (assigned or pending revocation)
        self.static: dict = {}             # instance id -> member id
        self.name_counts: Counter = Counter()    # subscribed name -> members subscribing
        self.regex_counts: Counter = Counter()   # regex -> members subscribing
        self.topic_ix: dict = {}           # topic id -> index (registry, filled by replay)
        self.topic_ids: list = []          # index -> topic id
        self.session_ms = config.consumer_session_timeout_ms
        self.default_assignor = config.consumer_assignors[0]
        self.assignor_names = tuple(config.consumer_assignors)
        # volatile
        self.unconfirmed: set = set()      # member ids (see Unconfirmed)

    # ---------------------------------------------------------------- registry (replay)
    def intern(self, topic_id: bytes) -> int:
        ix = self.topic_ix.get(topic_id)
        if ix is None:
            ix = self.topic_ix[topic_id] = len(self.topic_ids)
            self.topic_ids.append(topic_id)
        return ix

    def units_of(self, topic_partitions) -> frozenset:
        out = []
        for tp in topic_partitions:
            out.extend(units_of_index(self.intern(tp.topic_id), tp.partitions))
        return frozenset(out)

    def external(self, units) -> tuple:
        ids_ = self.topic_ids
        return tuple(sorted((ids_[u >> 32], u & 0xFFFFFFFF) for u in units))

    # ---------------------------------------------------------------- mutation (replay only)
    def member(self, member_id: str) -> Member:
        mem = self.members.get(member_id)
        if mem is None:
            mem = self.members[member_id] = Member(self.group_id, member_id)
            self.track(None, mem.a)
        return mem

    def set_meta(self, member_id: str, meta) -> None:
        mem = self.member(member_id)
        self._count(mem.meta, -1)
        old_iid = mem.meta.instance_id
        if old_iid is not None and self.static.get(old_iid) == member_id:
            del self.static[old_iid]
        mem.meta = meta
        self._count(meta, 1)
        if meta.instance_id is not None:
            self.static[meta.instance_id] = member_id

    def set_assignment(self, member_id: str, a: MemberAssignment) -> None:
        mem = self.member(member_id)
        update_holders(self.holders, member_id, mem.a, a)
        self.track(mem.a, a)
        mem.a = a

    def remove(self, member_id: str) -> None:
        mem = self.members.pop(member_id, None)
        if mem is None:
            return
        self.unconfirmed.discard(member_id)
        update_holders(self.holders, member_id, mem.a, None)
        self.track(mem.a, None)
        self._count(mem.meta, -1)
        iid = mem.meta.instance_id
        if iid is not None and self.static.get(iid) == member_id:
            del self.static[iid]

    def _count(self, meta, sign: int) -> None:
        for n in meta.subscribed_topic_names:
            _add(self.name_counts, n, sign)
        if meta.subscribed_topic_regex:
            _add(self.regex_counts, meta.subscribed_topic_regex, sign)

    # ---------------------------------------------------------------- ModernGroup
    # (state names, offset validation: modern/group.py)
    def assignment_of(self, member_id) -> Optional[MemberAssignment]:
        mem = self.members.get(member_id)
        return None if mem is None else mem.a

    def assignments(self):
        return (mem.a for mem in self.members.values())

    def commit_protocol_error(self, member_id, epoch, version):
        mem = self.members[member_id]
        if mem.meta.classic_member_metadata is not None:
            # A classic member commits with its generation (= member epoch), any version.
            return int(_E.ILLEGAL_GENERATION) if epoch != mem.a.epoch else 0
        if version < 9:
            return int(_E.UNSUPPORTED_VERSION)
        return None

    def rearm(self, now_ms: int) -> list:
        ops = []
        for mem in self.members.values():
            ops.append((mem.session_key, now_ms + session_ms(mem.meta, self.session_ms)))
            if mem.a.state == UNREVOKED and mem.a.epoch >= 0:
                ops.append((_revocation_key(self.group_id, mem.member_id),
                            now_ms + max(mem.meta.rebalance_timeout_ms, 0)))
        return ops

    def snapshot(self, durable: bool) -> object:
        ext = self.external
        members = {}
        for mid, mem in self.members.items():
            a = mem.a
            members[mid] = (msgspec.structs.astuple(mem.meta), a.epoch, a.previous_epoch,
                            a.state, ext(a.assigned), ext(a.pending_revocation))
        snap = {
            "epoch": self.epoch,
            "target_epoch": self.target_epoch,
            "topics": tuple(sorted((n, t, p) for n, (t, p) in self.topic_meta.items())),
            "members": members,
            "targets": {mid: ext(t) for mid, t in self.targets.items()},
        }
        if not durable:
            snap["volatile"] = (frozenset(self.unconfirmed), self.lifecycle_state())
            # The indexes replay derives, so that the purity check sees a handler touch them
            # (in external identities: the topic registry's order depends on what was
            # replayed, a compacted log registering fewer topics).
            ids_ = self.topic_ids
            snap["derived"] = ({(ids_[u >> 32], u & 0xFFFFFFFF): mid
                                for u, mid in self.holders.items()},
                               dict(self.static), dict(self.name_counts),
                               dict(self.regex_counts), self.session_ms,
                               {mid: mem.session_key for mid, mem in self.members.items()})
        return snap

    def held_units(self) -> Optional[dict]:
        return {mid: mem.a.held for mid, mem in self.members.items()}

    def preferred_assignor(self) -> str:
        return _preferred_assignor([mem.meta for mem in self.members.values()],
                                   self.assignor_names, self.default_assignor)

    # ---- offsets retention and group expiry (offsets.py)
    def subscribed_topics(self):
        return _Subscribed(self)

    def deletion(self) -> tuple:
        # Kafka's tombstones of a consumer group, the epoch last (its replay drops the group).
        gid = self.group_id
        recs = [Record(m.ConsumerGroupTargetAssignmentMemberKey(gid, mid), None)
                for mid in self.targets]
        recs += [Record(m.ConsumerGroupTargetAssignmentMetadataKey(gid), None),
                 Record(m.ConsumerGroupPartitionMetadataKey(gid), None),
                 Record(m.ConsumerGroupMetadataKey(gid), None)]
        return recs, [(_assignment_key(gid), None)]

    # ---- DescribeGroups (admin.py)
    def as_described_group(self, catalog):
        """The group as a classic consumer group would be described (Kafka 4 answers
        DescribeGroups for classic groups only; see docs/decisions.md): the server assignor
        as the protocol; per member a ConsumerProtocolSubscription (subscribed names and the
        catalog topics its regex matches, what it holds as owned partitions, its epoch as
        generation, its rack) and a ConsumerProtocolAssignment of its current assignment, at
        DESCRIBE_PROTOCOL_VERSION. A member using the classic protocol (migration) shows the
        metadata it joined with and its assignment in that metadata's version, as its
        SyncGroup receives it."""
        names = {tid: n for n, (tid, _) in self.topic_meta.items()}

        def by_topic(units) -> list:
            by: dict = {}
            for tid, p in self.external(units):           # sorted: partitions ascending
                t = catalog.by_id.get(tid)
                name = t.name if t is not None else names.get(tid)
                # A topic no longer named (deleted) cannot be said in ConsumerProtocol.
                if name is not None:
                    by.setdefault(name, []).append(p)
            return sorted(by.items())

        regexes: dict = {}
        members = []
        for mid in sorted(self.members):
            mem = self.members[mid]
            meta, a = mem.meta, mem.a
            cm = meta.classic_member_metadata
            if cm is not None:
                metadata = bytes(cm.supported_protocols[0].metadata)
                version = max(0, min(int.from_bytes(metadata[:2], "big", signed=True),
                                     m.ConsumerProtocolAssignment.VERSIONS[1])) \
                    if len(metadata) >= 2 else 0
            else:
                topics = set(meta.subscribed_topic_names)
                rx = meta.subscribed_topic_regex
                if rx:
                    if rx not in regexes:
                        regexes[rx] = _regex_topics(rx, catalog)
                    topics |= regexes[rx]
                version = DESCRIBE_PROTOCOL_VERSION
                metadata = embedded.encode_subscription(m.ConsumerProtocolSubscription(
                    topics=sorted(topics), owned_partitions=[
                        m.ConsumerProtocolSubscriptionTopicPartition(topic=n, partitions=ps)
                        for n, ps in by_topic(a.held)],
                    generation_id=a.epoch, rack_id=meta.rack_id), version)
            assignment = embedded.encode_assignment(m.ConsumerProtocolAssignment(
                assigned_partitions=[
                    m.ConsumerProtocolAssignmentTopicPartition(topic=n, partitions=ps)
                    for n, ps in by_topic(a.assigned)]), version)
            members.append(described_member(mid, meta, metadata, assignment))
        return self.described(self.preferred_assignor(), members)


class _Subscribed:
    """``topic in`` it: the group subscribes to the topic by name, through a catalog topic
    its subscriptions resolved to, or by a member's regex (Kafka's subscribed topic names)."""
    __slots__ = ("_g", "_rx")

    def __init__(self, g: ConsumerGroup):
        self._g = g
        self._rx = None

    def __contains__(self, topic: str) -> bool:
        g = self._g
        if topic in g.name_counts or topic in g.topic_meta:
            return True
        if not g.regex_counts:
            return False
        if self._rx is None:
            try:
                self._rx = [re.compile(rx) for rx in g.regex_counts]
            except re.error:                 # checked on the way in; keep offsets if not
                return True
        return any(p.fullmatch(topic) for p in self._rx)


def session_ms(meta, default: int) -> int:
    """A member's session timeout: its classic one if it uses the classic protocol."""
    cm = meta.classic_member_metadata
    return cm.session_timeout_ms if cm is not None else default


def _add(counter: Counter, key, sign: int) -> None:
    n = counter.get(key, 0) + sign
    if n:
        counter[key] = n
    else:
        counter.pop(key, None)


def _preferred_assignor(metas, available, default: str) -> str:
    """Kafka's rule: the server assignor most members ask for (ties: the smallest name, to be
    deterministic), else the configured default."""
    counts = Counter(x.server_assignor for x in metas
                     if x.server_assignor is not None and x.server_assignor in available)
    if not counts:
        return default
    return min(counts.items(), key=lambda kv: (-kv[1], kv[0]))[0]


def _revocation_key(group_id: str, member_id: str) -> TimerKey:
    return TimerKey(REVOCATION_TIMER, group_id, member_id)


def _assignment_key(group_id: str) -> TimerKey:
    return TimerKey(ASSIGNMENT_TIMER, group_id, "")


def _regex_topics(rx: str, catalog) -> set:
    pat = re.compile(rx)
    return {n for n in catalog.by_name if pat.fullmatch(n)}
