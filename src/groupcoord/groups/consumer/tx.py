"""ConsumerTx: the draft one change of a consumer group is computed on -- a GroupTx (tx.py:
the records and timer operations that make the change) with a view of the group as it will
be after it (edits layered over the live group; handlers never mutate the group)."""
from __future__ import annotations

from collections import Counter
from typing import Optional

from groupcoord.groups.consumer import migration
from groupcoord.groups.consumer.group import (ConsumerGroup, _regex_topics, _revocation_key)
from groupcoord.groups.errors import Reject
from groupcoord.groups.modern import reconcile
from groupcoord.groups.modern.group import Unconfirmed, rebalance_started, settle
from groupcoord.groups.modern.reconcile import (EMPTY_SET, NEW_MEMBER, MemberAssignment,
                                                split_units, units_of_index)
from groupcoord.groups.records import Record
from groupcoord.groups.result import TimerKey
from groupcoord.groups.timers import CONSUMER_SESSION as SESSION_TIMER
from groupcoord.groups.tx import GroupTx
from groupcoord.protocol import messages as m
from groupcoord.protocol.error_codes import ErrorCode as _E

__all__ = ["ConsumerTx"]


class _FreedHolders:
    """holders as seen after this tx's removals: units of removed members are free."""
    __slots__ = ("base", "removed")

    def __init__(self, base: dict, removed: set):
        self.base = base
        self.removed = removed

    def get(self, u, default=None):
        h = self.base.get(u, default)
        return default if h in self.removed else h


class ConsumerTx(GroupTx):
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
        # The lifecycle log (modern/group.py settle): why the epoch moves, set by the step
        # that moves it, (reason, member id); the bump's; units the targets computed moved.
        self.why: Optional[tuple] = None
        self.started: Optional[tuple] = None
        self.moved = 0

    @classmethod
    def open(cls, shard, group_id: str, now_ms: int, create: bool) -> "ConsumerTx":
        g = shard.groups.get(group_id)
        if g is None:
            if not create:
                raise Reject(_E.GROUP_ID_NOT_FOUND, "Consumer group %s not found." % group_id)
            return cls(shard, group_id, None, now_ms)
        if not isinstance(g, ConsumerGroup):
            return _other_group_type(shard, g, create, now_ms)
        return cls(shard, group_id, g, now_ms)

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
        """The unit index of a topic: the group's, else a provisional one for this tx."""
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
        """Bump the group epoch (once per tx), for the reason in ``why`` (none given: the
        subscribed topics changed)."""
        if self.bumped:
            return
        self.bumped = True
        self.started = self.why or ("metadata", "")
        self.epoch += 1
        self.records.append(Record(m.ConsumerGroupMetadataKey(self.group_id),
                                   m.ConsumerGroupMetadataValue(epoch=self.epoch)))
        rebalance_started(self, "consumer", self.epoch, self.started, self.member_count())

    def fence(self, mid: str, reason: str = "leave") -> None:
        """Remove a member (it left, or a deadline passed: ``reason``) and bump the epoch."""
        self.why = (reason, mid)
        self.remove(mid)
        self.refresh_subscriptions()
        self.bump()

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

    def member_count(self) -> int:
        """How many members the group has after this change (without listing them)."""
        g = self.group
        if g is None:
            return len(self.metas)
        n = len(g.members)
        if self.removed:
            n -= sum(1 for mid in self.removed if mid in g.members)
        if self.metas:
            n += sum(1 for mid in self.metas if mid not in g.members)
        return n

    def result(self, response=None, park=None):
        """GroupTx.result, after the lifecycle events of the change (settle). A change that
        moved no epoch, target or assignment cannot start or complete a rebalance."""
        if self.bumped or self.moved or self.removed or self.assignments \
                or self.target_epoch != (self.group.target_epoch if self.group else 0):
            changed = dict(self.assignments)
            if self.removed:
                changed.update(dict.fromkeys(self.removed))
            settle(self, self.group, "consumer", epoch=self.epoch,
                   target_epoch=self.target_epoch, members=self.member_count(),
                   changed=changed, why=self.started, moved=self.moved)
        return super().result(response, park)

    def reconcile(self, mid: str, owned: Optional[frozenset], joining: bool, known: bool,
                  answered: bool = True) -> "reconcile.Step":
        """The member's step (modern/reconcile.py: reconcile_member): writes its current
        assignment when it changed, moves its revocation timer, records whether it must
        confirm what it was answered. ``known``: the member id was in the group before this
        request; ``answered``: False for a classic-protocol member (SyncGroup answers it)."""
        cur = self.assignment(mid)
        if answered:
            acks = reconcile.acknowledging(owned, joining and known)
            repeat = self.group is not None and mid in self.group.unconfirmed
        else:
            acks, repeat = owned, None
        step = reconcile.reconcile_member(
            cur, self.target_epoch, self.target(mid) or EMPTY_SET, owned, acks, self.holders(),
            mid, joining=joining, repeat=repeat)
        self.put_assignment(mid, step.nxt)
        if step.revocation == reconcile.ARM:
            self.timers.append((_revocation_key(self.group_id, mid),
                                self.now + max(self.meta(mid).rebalance_timeout_ms, 0)))
        elif step.revocation == reconcile.CANCEL:
            self.timers.append((_revocation_key(self.group_id, mid), None))
        if step.unconfirmed is not None:
            self.records.append(Unconfirmed(group_id=self.group_id, member_id=mid,
                                            unconfirmed=step.unconfirmed))
        return step


def _delta(tx: ConsumerTx, meta, sign: int) -> None:
    for n in meta.subscribed_topic_names:
        tx.name_delta[n] += sign
    if meta.subscribed_topic_regex:
        tx.regex_delta[meta.subscribed_topic_regex] += sign


def _live_keys(counts, delta: Counter) -> set:
    out = {k for k, c in counts.items() if c + delta.get(k, 0) > 0}
    out.update(k for k, c in delta.items() if c > 0 and k not in counts)
    return out


def _other_group_type(shard, group, create: bool, now_ms: int) -> "ConsumerTx":
    """A group of another type holds the id: a joining heartbeat may replace an empty classic
    group or convert a classic consumer group (KIP-848 online upgrade, consumer/migration.py);
    otherwise Reject(GROUP_ID_NOT_FOUND)."""
    tx = ConsumerTx(shard, group.group_id, None, now_ms)
    migration.upgrade(tx, group, create)
    return tx
