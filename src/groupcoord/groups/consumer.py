"""KIP-848 consumer groups: ConsumerGroupHeartbeat (api 68) and ConsumerGroupDescribe (api 69).

The coordinator assigns. Three epochs drive a group (docs/coordinator-consumer.md):

  group epoch    bumped (one ConsumerGroupMetadata record) when the membership or what the
                 members subscribe to changes: a member joins, leaves, is fenced or expires,
                 changes its topic names / regex / server assignor / rack, or the catalog
                 changes the subscribed topics (ids, partition counts, regex matches).
  target epoch   the group epoch the target assignment was computed for. A heartbeat that
                 finds group epoch > target epoch computes the new target at once with the
                 group's assignor and writes only the members whose target changed, then the
                 ConsumerGroupTargetAssignmentMetadata record.
  member epoch   each member converges to the target through reconcile.next_assignment:

        STABLE --target moved, nothing to revoke--> STABLE (new epoch) or UNRELEASED
        STABLE --target moved, must revoke-------> UNREVOKED (same epoch, revoke first)
        UNREVOKED --owned reports the revocation--> STABLE / UNRELEASED / UNREVOKED
        UNRELEASED --others released units------> STABLE

     A member that stays UNREVOKED past its rebalance timeout is fenced; a member whose
     session (no heartbeat for consumer_session_timeout_ms) expires is removed. A static
     member (InstanceId) may leave temporarily with epoch -2: it keeps its assignment until
     its session expires or a new member id takes its instance id over (no rebalance).

Member epoch -1 leaves; -2 is the static temporary leave; 0 joins (or resends a lost join).

Handlers only read. Every change is a Record replayed by the replayers (registry.py; also on
recovery); a heartbeat is computed on a ``Plan``: a view of the group with this heartbeat's
edits layered on top, which accumulates the records and timer operations. The heartbeat is a
chain of small steps (validate -> find member -> update member -> group epoch -> target ->
reconcile -> response) so that classic-protocol members can later reuse them.

Topic partitions are units ``reconcile.unit(topic_index, partition)``; topic indices come from
a per-group registry that replay fills from the topic ids in records. Handlers only look up;
a topic new to the group gets a provisional index inside the Plan that never leaves it
(records carry topic ids), so recovery may number topics differently without harm.
"""
from __future__ import annotations

import re
from collections import Counter
from typing import Optional

import msgspec
import numpy as np

from groupcoord.assign import consumer as assignors
from groupcoord.groups import classic, group_config, ids, migration, reconcile
from groupcoord.groups.errors import Reject
from groupcoord.groups.modern import ModernGroup, Unconfirmed, described_member
from groupcoord.groups.reconcile import (EMPTY_SET, NEW_MEMBER, STABLE, UNREVOKED,
                                              MemberAssignment, check_member_epoch,
                                              next_assignment, split_units,
                                              units_of_index, update_holders)
from groupcoord.groups.records import Record
from groupcoord.groups.result import EMPTY, Result, TimerKey
from groupcoord.groups.timers import (CONSUMER_ASSIGNMENT as ASSIGNMENT_TIMER,
                                            CONSUMER_REVOCATION as REVOCATION_TIMER,
                                            CONSUMER_SESSION as SESSION_TIMER)
from groupcoord.groups.tx import GroupTx
from groupcoord.protocol import embedded
from groupcoord.protocol import messages as m
from groupcoord.protocol.error_codes import ErrorCode

__all__ = ["ConsumerGroup", "Plan", "Reject",
           "AssignorJob", "Unconfirmed", "install_offloaded",
           "on_topics_changed", "consumer_group_heartbeat", "consumer_group_describe",
           "SESSION_TIMER", "REVOCATION_TIMER", "ASSIGNMENT_TIMER"]

JOIN_EPOCH = 0
LEAVE_EPOCH = -1
STATIC_LEAVE_EPOCH = -2
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


# ====================================================================== state
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
        mem.a = a

    def remove(self, member_id: str) -> None:
        mem = self.members.pop(member_id, None)
        if mem is None:
            return
        self.unconfirmed.discard(member_id)
        update_holders(self.holders, member_id, mem.a, None)
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
    # (state names, offset validation: modern.py)
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
            snap["volatile"] = frozenset(self.unconfirmed)
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


# ====================================================================== the Plan
class _FreedHolders:
    """holders as seen after this plan's removals: units of removed members are free."""
    __slots__ = ("base", "removed")

    def __init__(self, base: dict, removed: set):
        self.base = base
        self.removed = removed

    def get(self, u, default=None):
        h = self.base.get(u, default)
        return default if h in self.removed else h


class Plan(GroupTx):
    """One change of one group, computed without touching it: a GroupTx (tx.py: the records
    and timer operations that make the change) with a draft view of the group as it will be
    after this change (edits layered over the live group). ``result(response)`` packs them."""

    def __init__(self, shard, group_id: str, group: Optional[ConsumerGroup], now_ms: int):
        super().__init__(group_id, now_ms)
        self.shard = shard
        self.group = group
        self.epoch = group.epoch if group else 0
        self.target_epoch = group.target_epoch if group else 0
        self.topic_meta = group.topic_meta if group else {}
        self.metas: dict = {}              # member id -> metadata (joined/changed here)
        self.assignments: dict = {}        # member id -> MemberAssignment (changed here)
        self.targets: dict = {}            # member id -> frozenset (changed here)
        self.removed: set = set()
        self.fresh: set = set()            # member ids whose records must be written
        self.name_delta: Counter = Counter()
        self.regex_delta: Counter = Counter()
        self.overlay: dict = {}            # topic id -> provisional index
        self.overlay_ids: list = []
        self.bumped = False
        self.precomputed = None            # (AssignorJob, owners) being installed

    @classmethod
    def open(cls, shard, group_id: str, now_ms: int, create: bool) -> "Plan":
        g = shard.groups.get(group_id)
        if g is None:
            if not create:
                raise Reject(_E.GROUP_ID_NOT_FOUND, "Consumer group %s not found." % group_id)
            return cls(shard, group_id, None, now_ms)
        if not isinstance(g, ConsumerGroup):
            return _other_group_type(shard, g, create, now_ms)
        return cls(shard, group_id, g, now_ms)

    # ---------------------------------------------------------------- view
    def member_ids(self) -> list:
        out = set(self.metas)
        if self.group is not None:
            out.update(mid for mid in self.group.members if mid not in self.removed)
        return sorted(out)

    def meta(self, mid: str):
        got = self.metas.get(mid)
        if got is not None:
            return got
        mem = self.group.members.get(mid) if self.group is not None else None
        return mem.meta if mem is not None else None

    def assignment(self, mid: str) -> MemberAssignment:
        got = self.assignments.get(mid)
        if got is not None:
            return got
        mem = self.group.members.get(mid) if self.group is not None else None
        return mem.a if mem is not None and mid not in self.removed else NEW_MEMBER

    def target(self, mid: str) -> Optional[frozenset]:
        if mid in self.targets:
            return self.targets[mid]
        if self.group is None or mid in self.removed:
            return None
        return self.group.targets.get(mid)

    def holders(self):
        if self.group is None:
            # A new group; after a migration it already has members holding units.
            return {u: mid for mid, a in self.assignments.items() for u in a.held}
        base = self.group.holders
        return _FreedHolders(base, self.removed) if self.removed else base

    def topic_index(self, topic_id: bytes) -> int:
        """The unit index of a topic: the group's, else a provisional one for this plan."""
        if self.group is not None:
            ix = self.group.topic_ix.get(topic_id)
            if ix is not None:
                return ix
        ix = self.overlay.get(topic_id)
        if ix is None:
            base = len(self.group.topic_ids) if self.group is not None else 0
            ix = self.overlay[topic_id] = base + len(self.overlay_ids)
            self.overlay_ids.append(topic_id)
        return ix

    def topic_id(self, ix: int) -> bytes:
        known = self.group.topic_ids if self.group is not None else ()
        return known[ix] if ix < len(known) else self.overlay_ids[ix - len(known)]

    def owned_units(self, topic_partitions) -> Optional[frozenset]:
        """Owned partitions reported by a member as units (None when not reported). A topic
        the group never assigned maps to a negative index that matches nothing."""
        if topic_partitions is None:
            return None
        ix_of = self.group.topic_ix.get if self.group is not None else {}.get
        out = []
        for tp in topic_partitions:
            out.extend(units_of_index(ix_of(tp.topic_id, -1), tp.partitions))
        return frozenset(out)

    def topic_partitions(self, units, cls) -> list:
        out = [cls(topic_id=self.topic_id(ix), partitions=ps) for ix, ps in split_units(units)]
        out.sort(key=lambda tp: tp.topic_id)
        return out

    # ---------------------------------------------------------------- edits
    def stage_meta(self, mid: str, meta) -> None:
        """Put a member's metadata into the view (no record: the caller writes it)."""
        old = self.meta(mid) if mid not in self.removed else None
        if old is not None:
            _delta(self, old, -1)
        self.metas[mid] = meta
        _delta(self, meta, 1)

    def put_meta(self, mid: str, meta) -> None:
        """Write the member's metadata record if it is new or changed."""
        old = self.meta(mid)
        if mid in self.fresh or old is None or old != meta:
            self.records.append(Record(m.ConsumerGroupMemberMetadataKey(self.group_id, mid),
                                       meta))
            self.stage_meta(mid, meta)

    def put_assignment(self, mid: str, a: MemberAssignment) -> None:
        if mid not in self.fresh and self.assignment(mid) == a and self._has_current(mid):
            return
        self.records.append(Record(
            m.ConsumerGroupCurrentMemberAssignmentKey(self.group_id, mid),
            m.ConsumerGroupCurrentMemberAssignmentValue(
                member_epoch=a.epoch, previous_member_epoch=a.previous_epoch, state=a.state,
                assigned_partitions=self.topic_partitions(
                    a.assigned, m.ConsumerGroupCurrentMemberAssignmentValueTopicPartitions),
                partitions_pending_revocation=self.topic_partitions(
                    a.pending_revocation,
                    m.ConsumerGroupCurrentMemberAssignmentValueTopicPartitions))))
        self.assignments[mid] = a

    def _has_current(self, mid: str) -> bool:
        return mid in self.assignments or (self.group is not None and mid in self.group.members)

    def put_target(self, mid: str, units: frozenset) -> None:
        self.records.append(Record(
            m.ConsumerGroupTargetAssignmentMemberKey(self.group_id, mid),
            m.ConsumerGroupTargetAssignmentMemberValue(topic_partitions=self.topic_partitions(
                units, m.ConsumerGroupTargetAssignmentMemberValueTopicPartition))))
        self.targets[mid] = units

    def remove(self, mid: str) -> None:
        """Tombstones of a member (current assignment, target, metadata: Kafka's order) and
        the cancellation of its timers. The caller bumps the epoch."""
        gid = self.group_id
        meta = self.meta(mid)
        self.records.append(Record(m.ConsumerGroupCurrentMemberAssignmentKey(gid, mid), None))
        self.records.append(Record(m.ConsumerGroupTargetAssignmentMemberKey(gid, mid), None))
        self.records.append(Record(m.ConsumerGroupMemberMetadataKey(gid, mid), None))
        if meta is not None:
            _delta(self, meta, -1)
        self.removed.add(mid)
        self.metas.pop(mid, None)
        self.assignments.pop(mid, None)
        self.targets.pop(mid, None)
        self.fresh.discard(mid)
        self.timers.append((TimerKey(SESSION_TIMER, gid, mid), None))
        self.timers.append((_revocation_key(gid, mid), None))

    def bump(self) -> None:
        """Bump the group epoch (once per plan)."""
        if self.bumped:
            return
        self.bumped = True
        self.epoch += 1
        self.records.append(Record(m.ConsumerGroupMetadataKey(self.group_id),
                                   m.ConsumerGroupMetadataValue(epoch=self.epoch)))

    def fence(self, mid: str) -> None:
        self.remove(mid)
        self.refresh_subscriptions()
        self.bump()

    # ---------------------------------------------------------------- subscriptions
    def subscribed(self) -> tuple:
        """(names, regexes) subscribed by the members of this view."""
        g = self.group
        names = _live_keys(g.name_counts if g else {}, self.name_delta)
        regexes = _live_keys(g.regex_counts if g else {}, self.regex_delta)
        return names, regexes

    def refresh_subscriptions(self) -> bool:
        """Write a ConsumerGroupPartitionMetadata record and bump the epoch when the
        subscribed topics' metadata differs from the recorded one. True if it did."""
        names, regexes = self.subscribed()
        catalog = self.shard.topics
        found = {n for n in names if n in catalog.by_name}
        for rx in regexes:
            found |= _regex_topics(rx, catalog)
        meta = {}
        for n in found:
            t = catalog.by_name[n]
            meta[n] = (t.topic_id, t.partitions)
        if meta == self.topic_meta:
            return False
        self.topic_meta = meta
        self.records.append(Record(
            m.ConsumerGroupPartitionMetadataKey(self.group_id),
            m.ConsumerGroupPartitionMetadataValue(topics=[
                m.ConsumerGroupPartitionMetadataValueTopicMetadata(
                    topic_id=tid, topic_name=n, num_partitions=p)
                for n, (tid, p) in sorted(meta.items())])))
        self.bump()
        return True

    # ---------------------------------------------------------------- target assignment
    def compute_target(self) -> None:
        """The target assignment for the current group epoch, with the group's assignor;
        records only the members whose target changed, then the target epoch."""
        mids = self.member_ids()
        metas = [self.meta(x) for x in mids]
        subs, topics = _resolve_subscriptions(metas, self.shard.topics)
        catalog = self.shard.topics
        tids = [catalog.by_name[n].topic_id for n in topics]
        ppt = np.array([catalog.by_name[n].partitions for n in topics], dtype=np.int32)
        base = assignors.topic_base(ppt).tolist()
        name = _preferred_assignor(metas, self.group_assignors(), self.default_assignor())
        gix = np.array([self.topic_index(t) for t in tids], dtype=np.int64)
        current = self._current_owners(mids, gix, ppt, base)
        if mids:
            job = AssignorJob(self.group_id, self.epoch, name, ppt, _csr(subs, topics),
                              current, _static_flags(name, metas))
            owners = self._owners(job)
            if owners is None:
                return                     # offloaded: the target stays behind meanwhile
        else:
            owners = current
        # Delta: only members that gained or lost a unit get a new target (and a record).
        moved = owners != current
        changed = np.union1d(owners[moved], current[moved])
        changed = changed[changed >= 0].tolist() + self._dropped
        for i, mid in enumerate(mids):
            if self.target(mid) is None:
                changed.append(i)          # a member with no target yet gets one, even empty
        if changed:
            n_units = int(base[-1])
            ti = np.repeat(np.arange(len(tids)), ppt)
            keys = (gix[ti] << 32) | (np.arange(n_units, dtype=np.int64)
                                     - np.asarray(base[:-1], dtype=np.int64)[ti])
            order = np.argsort(owners, kind="stable")
            bounds = np.searchsorted(owners[order], np.arange(len(mids) + 1))
            for i in sorted(set(changed)):
                new = frozenset(keys[order[bounds[i]:bounds[i + 1]]].tolist())
                if self.target(mids[i]) != new:
                    self.put_target(mids[i], new)
        self.records.append(Record(
            m.ConsumerGroupTargetAssignmentMetadataKey(self.group_id),
            m.ConsumerGroupTargetAssignmentMetadataValue(assignment_epoch=self.epoch)))
        self.target_epoch = self.epoch
        interval = self.shard.config.consumer_assignment_interval_ms
        if interval > 0:
            self.timers.append((_assignment_key(self.group_id), self.now + interval))

    def _owners(self, job: "AssignorJob") -> Optional[np.ndarray]:
        """Run the assignor inline, use the result computed off the loop for exactly these
        inputs, or (a large run) hand the job to the runtime and return None."""
        if self.precomputed is not None:
            done, owners = self.precomputed
            if job.same_inputs(done):
                return owners
        limit = self.shard.config.consumer_assignor_offload_partitions
        if limit and len(job.current) >= limit:
            self.offload.append(job)
            return None
        return job.run()

    def _current_owners(self, mids, gix, ppt, base) -> np.ndarray:
        """The previous target as an owner array in this computation's indices (members in
        id order, topics by name; ``gix``: the group's unit index of each topic);
        partitions that no longer exist are dropped. Vectorised: one pass in C over the
        members' unit sets."""
        n_units = int(base[-1])
        current = np.full(n_units, -1, dtype=np.int32)
        units, who = [], []
        for i, mid in enumerate(mids):
            t = self.target(mid)
            if t:
                units.append(np.fromiter(t, dtype=np.int64, count=len(t)))
                who.append(np.full(len(t), i, dtype=np.int32))
        self._dropped = []
        if not units:
            return current
        if not len(gix):
            self._dropped = sorted({int(x[0]) for x in who})
            return current
        u = np.concatenate(units)
        w = np.concatenate(who)
        lut = np.full(int(max(gix.max(), (u >> 32).max())) + 1, -1, dtype=np.int64)
        lut[gix] = np.arange(len(gix))
        ti = lut[u >> 32]
        p = u & 0xFFFFFFFF
        ok = ti >= 0
        ok[ok] &= p[ok] < np.asarray(ppt, dtype=np.int64)[ti[ok]]
        current[np.asarray(base, dtype=np.int64)[ti[ok]] + p[ok]] = w[ok]
        # Members that held units which no longer exist must get a new target even when the
        # assignor leaves everything else in place.
        self._dropped = np.unique(w[~ok]).tolist()
        return current

    def group_assignors(self) -> tuple:
        return tuple(self.shard.config.consumer_assignors)

    def default_assignor(self) -> str:
        return self.shard.config.consumer_assignors[0]

    # ---------------------------------------------------------------- reconciliation
    def reconcile(self, mid: str, owned: Optional[frozenset]) -> tuple:
        """(current, next) assignment of the member; writes the record and moves the
        revocation timer when it changed."""
        cur = self.assignment(mid)
        nxt = next_assignment(cur, self.target_epoch, self.target(mid) or EMPTY_SET, owned,
                              self.holders(), mid)
        # Through the module: the simulation's mutation revoked-keeps-epoch patches it there.
        nxt = reconcile.revoked_moves_epoch(cur, nxt, self.target_epoch)
        self.put_assignment(mid, nxt)
        key = _revocation_key(self.group_id, mid)
        if nxt.state == UNREVOKED:
            if cur.state != UNREVOKED or nxt != cur:
                self.timers.append((key, self.now + max(self.meta(mid).rebalance_timeout_ms, 0)))
        elif cur.state == UNREVOKED:
            self.timers.append((key, None))
        return cur, nxt


def _delta(plan: Plan, meta, sign: int) -> None:
    for n in meta.subscribed_topic_names:
        plan.name_delta[n] += sign
    if meta.subscribed_topic_regex:
        plan.regex_delta[meta.subscribed_topic_regex] += sign


def _live_keys(counts, delta: Counter) -> set:
    out = {k for k, c in counts.items() if c + delta.get(k, 0) > 0}
    out.update(k for k, c in delta.items() if c > 0 and k not in counts)
    return out


def _regex_topics(rx: str, catalog) -> set:
    pat = re.compile(rx)
    return {n for n in catalog.by_name if pat.fullmatch(n)}


def _resolve_subscriptions(metas, catalog) -> tuple:
    """Per member, the catalog topics it subscribes (names that exist + regex matches); and
    the union of them, sorted by name."""
    cache: dict = {}
    subs = []
    every: set = set()
    for meta in metas:
        s = {n for n in meta.subscribed_topic_names if n in catalog.by_name}
        rx = meta.subscribed_topic_regex
        if rx:
            got = cache.get(rx)
            if got is None:
                got = cache[rx] = _regex_topics(rx, catalog)
            s |= got
        subs.append(s)
        every |= s
    return subs, sorted(every)


def _csr(subs, topics) -> tuple:
    """Subscriptions as CSR (indptr, topic indices) over the sorted topic list."""
    dense = {n: i for i, n in enumerate(topics)}
    indptr = np.zeros(len(subs) + 1, dtype=np.int64)
    flat: list = []
    for i, s in enumerate(subs):
        flat.extend(sorted(dense[n] for n in s))
        indptr[i + 1] = len(flat)
    return indptr, np.array(flat, dtype=np.int32)


def _static_flags(name: str, metas):
    if name != "range":
        return None
    return np.array([x.instance_id is not None for x in metas], dtype=bool)


class AssignorJob:
    """One server-side assignor run: its inputs (plain numpy arrays, owned by the job) and
    the group epoch they belong to. ``run()`` touches nothing else, so the runtime may call
    it in a worker thread (the native assignors release the GIL)."""
    __slots__ = ("group_id", "epoch", "name", "ppt", "indptr", "subs", "current", "static")

    def __init__(self, group_id, epoch, name, ppt, csr, current, static):
        self.group_id = group_id
        self.epoch = epoch
        self.name = name
        self.ppt = ppt
        self.indptr, self.subs = csr
        self.current = current
        self.static = static

    def run(self) -> np.ndarray:
        if self.name == "range":
            return assignors.range_(self.ppt, self.indptr, self.subs, self.current,
                                    static_member=self.static)
        return assignors.uniform(self.ppt, self.indptr, self.subs, self.current)

    def same_inputs(self, other: "AssignorJob") -> bool:
        eq = np.array_equal
        return (self.group_id == other.group_id and self.epoch == other.epoch
                and self.name == other.name and eq(self.ppt, other.ppt)
                and eq(self.indptr, other.indptr) and eq(self.subs, other.subs)
                and eq(self.current, other.current)
                and (self.static is None) == (other.static is None)
                and (self.static is None or eq(self.static, other.static)))

    def __repr__(self):
        return "AssignorJob(%s, epoch %d, %s, %d partitions, %d members)" % (
            self.group_id, self.epoch, self.name, len(self.current), len(self.indptr) - 1)


def install_offloaded(shard, job: AssignorJob, owners, now_ms: int) -> Result:
    """Pure: the records of the target computed off the loop by ``job`` — or nothing when
    the group moved on meanwhile (another epoch, other members or subscriptions: the run
    for the new epoch was requested by the heartbeat that moved it)."""
    g = shard.groups.get(job.group_id)
    if not isinstance(g, ConsumerGroup) or g.epoch != job.epoch or g.target_epoch >= g.epoch:
        return EMPTY
    plan = Plan(shard, job.group_id, g, now_ms)
    plan.precomputed = (job, owners)
    plan.compute_target()
    if plan.target_epoch != plan.epoch:     # inputs differ from the job's: drop the result
        return EMPTY
    return plan.result(None)


def _other_group_type(shard, group, create: bool, now_ms: int) -> "Plan":
    """A group of another type holds the id: a joining heartbeat may replace an empty classic
    group or convert a classic consumer group (KIP-848 online upgrade, migration.py);
    otherwise Reject(GROUP_ID_NOT_FOUND)."""
    plan = Plan(shard, group.group_id, None, now_ms)
    migration.upgrade(plan, group, create)
    return plan


# ====================================================================== heartbeat steps
def validate_heartbeat(config, req, version: int) -> None:
    """Kafka's request checks, in Kafka's order."""
    epoch = req.member_epoch
    if (version >= 1 or epoch > 0 or epoch == LEAVE_EPOCH) and _blank(req.member_id):
        raise Reject(_E.INVALID_REQUEST, "MemberId can't be empty.")
    if _blank(req.group_id):
        raise Reject(_E.INVALID_REQUEST, "GroupId can't be empty.")
    if req.instance_id is not None and _blank(req.instance_id):
        raise Reject(_E.INVALID_REQUEST, "InstanceId can't be empty.")
    if req.rack_id is not None and _blank(req.rack_id):
        raise Reject(_E.INVALID_REQUEST, "RackId can't be empty.")
    if epoch == JOIN_EPOCH:
        if req.rebalance_timeout_ms == -1:
            raise Reject(_E.INVALID_REQUEST,
                         "RebalanceTimeoutMs must be provided in first request.")
        if req.topic_partitions is None or req.topic_partitions:
            raise Reject(_E.INVALID_REQUEST, "TopicPartitions must be empty when (re-)joining.")
        if req.subscribed_topic_names is None and req.subscribed_topic_regex is None:
            raise Reject(_E.INVALID_REQUEST, "Either SubscribedTopicNames or "
                         "SubscribedTopicRegex must be non-null when (re-)joining.")
    elif epoch == STATIC_LEAVE_EPOCH:
        if req.instance_id is None:
            raise Reject(_E.INVALID_REQUEST, "InstanceId can't be null.")
    elif epoch < STATIC_LEAVE_EPOCH:
        raise Reject(_E.INVALID_REQUEST, "MemberEpoch is invalid.")
    if req.server_assignor is not None and req.server_assignor not in config.consumer_assignors:
        raise Reject(_E.UNSUPPORTED_ASSIGNOR, "ServerAssignor %s is not supported. Supported "
                     "assignors: %s." % (req.server_assignor,
                                         ", ".join(config.consumer_assignors)))
    rx = req.subscribed_topic_regex
    if rx:
        try:
            re.compile(rx)
        except re.error as exc:
            raise Reject(_E.INVALID_REGULAR_EXPRESSION,
                         "SubscribedTopicRegex `%s` is not a valid regular expression: %s."
                         % (rx, exc)) from None


def _blank(s: Optional[str]) -> bool:
    return s is None or not s.strip()


def check_group_size(plan: Plan, member_id: str) -> None:
    g = plan.group
    limit = plan.shard.config.consumer_max_size
    if g is not None and len(g.members) >= limit and (not member_id
                                                      or member_id not in g.members):
        raise Reject(_E.GROUP_MAX_SIZE_REACHED, "The consumer group has reached its maximum "
                     "capacity of %d members." % limit)


def new_member_id(plan: Plan) -> str:
    """v0: the coordinator names a joining member (deterministically, see ids.py)."""
    g = plan.group
    return ids.generated_id(plan.group_id, plan.now, g.epoch if g else 0,
                            len(g.members) if g else 0)


def _check_epoch(mem: Member, epoch: int, owned: Optional[frozenset]) -> None:
    if check_member_epoch(mem.a, epoch, owned):
        raise Reject(_E.FENCED_MEMBER_EPOCH, "The consumer group member has a %s member epoch "
                     "(%d) than the one known by the group coordinator (%d). The member must "
                     "abandon all its partitions and rejoin."
                     % ("greater" if epoch > mem.a.epoch else "smaller", epoch, mem.a.epoch))


def find_member(plan: Plan, member_id: str, epoch: int, instance_id: Optional[str],
                owned: Optional[frozenset]):
    """The member's metadata before this heartbeat (None: a new member). Checks its epoch;
    replaces a departed static member when a new member id takes its instance id."""
    g = plan.group
    mem = g.members.get(member_id) if g is not None else None
    if instance_id is None:
        if mem is None:
            if epoch != JOIN_EPOCH:
                raise Reject(_E.UNKNOWN_MEMBER_ID, "Member %s is not a member of group %s."
                             % (member_id, plan.group_id))
            return None
        _check_epoch(mem, epoch, owned)
        return mem.meta
    holder_id = g.static.get(instance_id) if g is not None else None
    holder = g.members[holder_id] if holder_id is not None else None
    if epoch == JOIN_EPOCH:
        if holder is None:
            if mem is not None:
                _check_epoch(mem, epoch, owned)
                return mem.meta
            return None
        if holder.a.epoch != STATIC_LEAVE_EPOCH:
            raise Reject(_E.UNRELEASED_INSTANCE_ID, "Static member %s with instance id %s is "
                         "still active; it must leave the group (epoch -2) before another "
                         "member takes its instance id." % (holder_id, instance_id))
        replace_static_member(plan, holder, member_id)
        return holder.meta
    if holder is None:
        raise Reject(_E.UNKNOWN_MEMBER_ID, "Instance id %s is unknown." % instance_id)
    if holder_id != member_id:
        raise Reject(_E.FENCED_INSTANCE_ID, "The static member %s with instance id %s was "
                     "fenced by member %s." % (member_id, instance_id, holder_id))
    _check_epoch(holder, epoch, owned)
    return holder.meta


def replace_static_member(plan: Plan, old: Member, new_id: str) -> None:
    """Kafka's static replacement: the new member id takes over the old member's metadata,
    target and current assignment (member epoch 0), the old member is removed, and no
    rebalance happens (the subscription does not change)."""
    old_id = old.member_id
    target = plan.target(old_id)
    if old_id != new_id:
        plan.remove(old_id)
    plan.fresh.add(new_id)
    plan.stage_meta(new_id, old.meta)
    plan.assignments[new_id] = old.a._replace(epoch=0, previous_epoch=0)
    if target is not None and old_id != new_id:
        plan.put_target(new_id, target)


def updated_meta(base, req, ctx):
    """The member's metadata after this heartbeat: null request fields leave a value as it
    was; an empty regex means no regex; topic names are kept sorted and unique."""
    b = base if base is not None else EMPTY_META
    names = b.subscribed_topic_names
    if req.subscribed_topic_names is not None:
        names = sorted(set(req.subscribed_topic_names))
    regex = b.subscribed_topic_regex
    if req.subscribed_topic_regex is not None:
        regex = req.subscribed_topic_regex or None
    return _MetaValue(
        instance_id=req.instance_id if req.instance_id is not None else b.instance_id,
        rack_id=req.rack_id if req.rack_id is not None else b.rack_id,
        client_id=ctx.client_id, client_host=ctx.client_host,
        subscribed_topic_names=names, subscribed_topic_regex=regex,
        rebalance_timeout_ms=(req.rebalance_timeout_ms if req.rebalance_timeout_ms != -1
                              else b.rebalance_timeout_ms),
        server_assignor=(req.server_assignor if req.server_assignor is not None
                         else b.server_assignor),
        classic_member_metadata=b.classic_member_metadata)


def update_member(plan: Plan, member_id: str, base, meta, replaced: bool) -> None:
    """Write the metadata if it changed; bump the group epoch when a member joins (not a
    static replacement) or changes what the assignment depends on."""
    plan.put_meta(member_id, meta)
    if base is None:
        bump = not replaced
    else:
        bump = (base.subscribed_topic_names != meta.subscribed_topic_names
                or base.subscribed_topic_regex != meta.subscribed_topic_regex
                or base.server_assignor != meta.server_assignor
                or base.rack_id != meta.rack_id)
    if bump:
        plan.refresh_subscriptions()
        plan.bump()


def ensure_target(plan: Plan) -> None:
    """Compute the target assignment when the group epoch moved past it — unless the
    assignment interval since the last run is still running (KIP-1263 batching): then the
    target stays behind (members reconcile towards the previous one) and the group's
    assignment timer computes it once for every bump of the interval."""
    if plan.epoch <= plan.target_epoch:
        return
    if plan.shard.config.consumer_assignment_interval_ms > 0:
        due = plan.shard.timers.get(_assignment_key(plan.group_id))
        if due is not None and due > plan.now:
            return
    plan.compute_target()


def heartbeat_response(plan: Plan, member_id: str, cur, nxt, owned, joining: bool):
    """Kafka's rule: the assignment travels when it changed in this heartbeat, when the
    member (re)joins, or when the partitions it reports differ from it; and (ours) on every
    heartbeat while a revocation is pending (finding 2), and until the member confirms it by
    reporting exactly that assignment as owned (finding 10). The answer that carried a change
    may have gone to a late copy of a request: the member saw its retry answered, so its
    next heartbeats omit their owned set; it would never run partitions given to it, or never
    acknowledge a revocation of partitions it never heard of and be fenced by the revocation
    timeout while still running the rest (tests/simulation, seeds 100011 and 502916)."""
    confirmed = owned == nxt.assigned
    repeat = plan.group is not None and member_id in plan.group.unconfirmed
    send = (joining or nxt.assigned != cur.assigned or nxt.state == UNREVOKED
            or ((owned is not None or repeat) and not confirmed))
    unconfirmed = send and not confirmed
    if unconfirmed != repeat:
        plan.records.append(Unconfirmed(group_id=plan.group_id, member_id=member_id,
                                        unconfirmed=unconfirmed))
    assignment = None
    if send:
        assignment = m.ConsumerGroupHeartbeatResponseAssignment(
            topic_partitions=plan.topic_partitions(
                nxt.assigned, m.ConsumerGroupHeartbeatResponseTopicPartitions))
    return m.ConsumerGroupHeartbeatResponse(
        member_id=member_id, member_epoch=nxt.epoch,
        heartbeat_interval_ms=group_config.consumer_intervals(plan.shard, plan.group_id)[1],
        assignment=assignment)


# ====================================================================== handlers
def consumer_group_heartbeat(shard, req, ctx) -> Result:
    fast = _steady_heartbeat(shard, req, ctx)
    if fast is not None:
        return fast
    try:
        validate_heartbeat(shard.config, req, ctx.version)
        if req.member_epoch < 0:
            return _leave(shard, req, ctx)
        return _heartbeat(shard, req, ctx)
    except Reject as rej:
        return Result(m.ConsumerGroupHeartbeatResponse(error_code=rej.code,
                                                       error_message=rej.message))


def _steady_heartbeat(shard, req, ctx) -> Optional[Result]:
    """The hot path: a STABLE member at the target epoch that changes nothing (optional
    fields null or equal to what the coordinator has; owned partitions, if reported, exactly
    its assignment). A few dict and attribute reads, one response, one session-timer op, no
    record. Anything else takes the general path, which gives the same answer."""
    g = shard.groups.get(req.group_id)
    if g.__class__ is not ConsumerGroup:
        return None
    mem = g.members.get(req.member_id)
    if mem is None:
        return None
    a = mem.a
    epoch = a.epoch
    if (req.member_epoch != epoch or epoch != g.target_epoch or g.epoch != epoch
            or a.state != STABLE or req.member_id in g.unconfirmed):
        return None
    owned = req.topic_partitions
    if owned is not None and not _owns_exactly(g.topic_ix, owned, a.assigned):
        return None                    # the response must carry the assignment
    meta = mem.meta
    if ((req.subscribed_topic_names is not None
         and req.subscribed_topic_names != meta.subscribed_topic_names)
            or (req.subscribed_topic_regex is not None
                and req.subscribed_topic_regex != (meta.subscribed_topic_regex or ""))
            or (req.instance_id is not None and req.instance_id != meta.instance_id)
            or (req.rack_id is not None and req.rack_id != meta.rack_id)
            or (req.server_assignor is not None and req.server_assignor != meta.server_assignor)
            or (req.rebalance_timeout_ms != -1
                and req.rebalance_timeout_ms != meta.rebalance_timeout_ms)
            or ctx.client_id != meta.client_id or ctx.client_host != meta.client_host):
        return None
    # The group's own settings (admin.py, IncrementalAlterConfigs) or the node's.
    session, interval = group_config.consumer_intervals(shard, req.group_id)
    return Result(m.ConsumerGroupHeartbeatResponse(
        member_id=req.member_id, member_epoch=epoch, heartbeat_interval_ms=interval),
        (), ((mem.session_key, ctx.now_ms + session),))


def _owns_exactly(topic_ix: dict, owned, assigned: frozenset) -> bool:
    units = []
    for tp in owned:
        ix = topic_ix.get(tp.topic_id)
        if ix is None:
            if tp.partitions:
                return False
            continue
        units.extend(units_of_index(ix, tp.partitions))
    return len(units) == len(assigned) and frozenset(units) == assigned


def _heartbeat(shard, req, ctx) -> Result:
    epoch = req.member_epoch
    joining = epoch == JOIN_EPOCH
    plan = Plan.open(shard, req.group_id, ctx.now_ms, create=joining)
    check_group_size(plan, req.member_id)
    member_id = req.member_id or new_member_id(plan)
    owned = EMPTY_SET if joining else plan.owned_units(req.topic_partitions)
    base = find_member(plan, member_id, epoch, req.instance_id, owned)
    replaced = member_id in plan.fresh
    update_member(plan, member_id, base, updated_meta(base, req, ctx), replaced)
    ensure_target(plan)
    cur, nxt = plan.reconcile(member_id, owned)
    plan.timers.append((TimerKey(SESSION_TIMER, plan.group_id, member_id),
                        ctx.now_ms + group_config.consumer_session_ms(shard, plan.group_id)))
    return plan.result(heartbeat_response(plan, member_id, cur, nxt, owned, joining))


def _leave(shard, req, ctx) -> Result:
    """Epoch -1: the member leaves (removed, epoch bump). Epoch -2: a static member leaves
    for a while: it keeps its assignment (pending revocations dropped) at epoch -2."""
    plan = Plan.open(shard, req.group_id, ctx.now_ms, create=False)
    g = plan.group
    if req.instance_id is None:
        mem = g.members.get(req.member_id)
        if mem is None:
            raise Reject(_E.UNKNOWN_MEMBER_ID, "Member %s is not a member of group %s."
                         % (req.member_id, req.group_id))
    else:
        holder_id = g.static.get(req.instance_id)
        if holder_id is None:
            raise Reject(_E.UNKNOWN_MEMBER_ID, "Instance id %s is unknown." % req.instance_id)
        if holder_id != req.member_id:
            raise Reject(_E.FENCED_INSTANCE_ID, "The static member %s with instance id %s was "
                         "fenced by member %s." % (req.member_id, req.instance_id, holder_id))
        mem = g.members[holder_id]
    mid = mem.member_id
    if req.member_epoch == STATIC_LEAVE_EPOCH:
        plan.put_assignment(mid, mem.a._replace(epoch=STATIC_LEAVE_EPOCH,
                                                pending_revocation=EMPTY_SET))
        plan.timers.append((_revocation_key(plan.group_id, mid), None))
    else:
        plan.fence(mid)
        _after_fence(plan, mid)
    return plan.result(m.ConsumerGroupHeartbeatResponse(member_id=mid,
                                                        member_epoch=req.member_epoch))


def consumer_group_describe(shard, req, ctx) -> Result:
    out = []
    for gid in req.group_ids:
        g = shard.groups.get(gid)
        if g is None:
            out.append(m.ConsumerGroupDescribeResponseDescribedGroup(
                error_code=int(_E.GROUP_ID_NOT_FOUND), group_id=gid,
                error_message="Group %s not found." % gid))
        elif not isinstance(g, ConsumerGroup):
            out.append(m.ConsumerGroupDescribeResponseDescribedGroup(
                error_code=int(_E.GROUP_ID_NOT_FOUND), group_id=gid,
                error_message="Group %s is not a consumer group." % gid))
        else:
            out.append(_describe(g, shard.topics))
    return Result(m.ConsumerGroupDescribeResponse(groups=out))


def _describe(g: ConsumerGroup, catalog):
    names = {tid: n for n, (tid, _) in g.topic_meta.items()}
    names.update((t.topic_id, t.name) for t in catalog.by_id.values())

    def assignment(units):
        by: dict = {}
        for tid, p in g.external(units):
            by.setdefault(tid, []).append(p)
        return m.ConsumerGroupDescribeResponseAssignment(topic_partitions=[
            m.ConsumerGroupDescribeResponseTopicPartitions(
                topic_id=tid, topic_name=names.get(tid, ""), partitions=ps)
            for tid, ps in by.items()])

    members = []
    for mid in sorted(g.members):
        mem = g.members[mid]
        meta = mem.meta
        members.append(m.ConsumerGroupDescribeResponseMember(
            member_id=mid, instance_id=meta.instance_id, rack_id=meta.rack_id,
            member_epoch=mem.a.epoch, client_id=meta.client_id, client_host=meta.client_host,
            subscribed_topic_names=list(meta.subscribed_topic_names),
            subscribed_topic_regex=meta.subscribed_topic_regex,
            assignment=assignment(mem.a.assigned),
            target_assignment=assignment(g.targets.get(mid, EMPTY_SET)),
            # A classic-protocol member inside a consumer group (migration) says so.
            member_type=(MEMBER_TYPE_CLASSIC if meta.classic_member_metadata is not None
                         else MEMBER_TYPE_CONSUMER)))
    return m.ConsumerGroupDescribeResponseDescribedGroup(
        group_id=g.group_id, group_state=g.state_name(), group_epoch=g.epoch,
        assignment_epoch=g.target_epoch, assignor_name=g.preferred_assignor(),
        members=members)


def _after_fence(plan: Plan, member_id: str) -> None:
    """The last member using the consumer protocol left: maybe downgrade (migration.py)."""
    migration.maybe_downgrade(plan, member_id)


# ====================================================================== timers
def _member_timer(shard, key: TimerKey, now_ms: int, want_unrevoked: bool) -> Result:
    """A member's session or revocation deadline passed: it is fenced (then maybe the group
    downgrades), unless it is gone or, for the revocation timer, no longer revoking."""
    g = shard.groups.get(key.group_id)
    if not isinstance(g, ConsumerGroup):
        return EMPTY
    mem = g.members.get(key.member_id)
    if mem is None or want_unrevoked and (mem.a.state != UNREVOKED or mem.a.epoch < 0):
        return EMPTY
    plan = Plan(shard, key.group_id, g, now_ms)
    plan.fence(key.member_id)
    _after_fence(plan, key.member_id)
    return plan.result(None)


def _session_expired(shard, key: TimerKey, now_ms: int) -> Result:
    return _member_timer(shard, key, now_ms, False)


def _revocation_expired(shard, key: TimerKey, now_ms: int) -> Result:
    return _member_timer(shard, key, now_ms, True)


def _assignment_due(shard, key: TimerKey, now_ms: int) -> Result:
    """The assignment interval ended: compute the target if bumps left it behind."""
    g = shard.groups.get(key.group_id)
    if not isinstance(g, ConsumerGroup) or not g.members or g.epoch <= g.target_epoch:
        return EMPTY
    plan = Plan(shard, key.group_id, g, now_ms)
    plan.compute_target()
    return plan.result(None)


def on_topics_changed(shard, now_ms: int) -> Result:
    """The catalog changed: bump the epoch of every consumer group whose subscribed topics'
    metadata (ids, partition counts, regex matches) changed."""
    records: list = []
    for gid in sorted(shard.groups):
        g = shard.groups[gid]
        if isinstance(g, ConsumerGroup) and g.members:
            plan = Plan(shard, gid, g, now_ms)
            if plan.refresh_subscriptions():
                records.extend(plan.records)
    return Result(None, tuple(records)) if records else EMPTY


# ====================================================================== replay
def _group(shard, group_id: str, create: bool) -> Optional[ConsumerGroup]:
    g = shard.groups.get(group_id)
    if create and (g is None or classic.is_offsets_only(g)):
        g = shard.groups[group_id] = ConsumerGroup(group_id, shard.config)
        g.session_ms = group_config.consumer_session_ms(shard, group_id)   # for rearm
    return g if isinstance(g, ConsumerGroup) else None


def _replay_group_metadata(shard, key, value) -> None:
    if value is None:
        if isinstance(shard.groups.get(key.group_id), ConsumerGroup):
            del shard.groups[key.group_id]
        return
    g = _group(shard, key.group_id, True)
    if g is not None:
        g.epoch = value.epoch


def _replay_partition_metadata(shard, key, value) -> None:
    g = _group(shard, key.group_id, value is not None)
    if g is not None:
        g.topic_meta = {} if value is None else {
            t.topic_name: (t.topic_id, t.num_partitions) for t in value.topics}


def _replay_member_metadata(shard, key, value) -> None:
    g = _group(shard, key.group_id, value is not None)
    if g is None:
        return
    if value is None:
        g.remove(key.member_id)
    else:
        g.set_meta(key.member_id, value)


def _replay_target_member(shard, key, value) -> None:
    g = _group(shard, key.group_id, value is not None)
    if g is None:
        return
    if value is None:
        g.targets.pop(key.member_id, None)
    else:
        g.targets[key.member_id] = g.units_of(value.topic_partitions)


def _replay_target_metadata(shard, key, value) -> None:
    g = _group(shard, key.group_id, value is not None)
    if g is not None:
        g.target_epoch = 0 if value is None else value.assignment_epoch


def _replay_current_assignment(shard, key, value) -> None:
    g = _group(shard, key.group_id, value is not None)
    if g is None:
        return
    if value is None:
        if key.member_id in g.members:
            g.set_assignment(key.member_id, NEW_MEMBER)
        return
    g.set_assignment(key.member_id, MemberAssignment(
        value.member_epoch, value.previous_member_epoch, value.state,
        g.units_of(value.assigned_partitions), g.units_of(value.partitions_pending_revocation)))
