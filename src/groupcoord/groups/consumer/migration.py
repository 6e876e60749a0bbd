"""Online migration between classic and consumer groups (KIP-848 upgrade and downgrade).

A group id holds one group at a time. This module converts between the two types in one
Result, so the log always replays to a single group type (docs/coordinator-migration.md):

  classic, Empty          --ConsumerGroupHeartbeat epoch 0--> consumer (the classic group is
                                                              tombstoned, a new group starts)
  classic, members,       --ConsumerGroupHeartbeat epoch 0--> consumer: every classic member
  protocol type consumer                                      becomes a consumer-group member
                                                              "using the classic protocol",
                                                              then the heartbeat joins as usual
  classic, members,       --ConsumerGroupHeartbeat----------> GROUP_ID_NOT_FOUND (unchanged)
  other protocol type

Upgrade records, in order: the classic GroupMetadata tombstone; per classic member its
ConsumerGroupMemberMetadata (subscribed topics from its ConsumerProtocolSubscription,
classic_member_metadata = session timeout + supported protocols); the group epoch (= the
classic generation); per member its target (= its classic assignment, decoded from its
ConsumerProtocolAssignment, topics as ids from the catalog); the target epoch (= the
generation); per member its current assignment (STABLE at the generation). The joining
member's own records follow (epoch bump, partition metadata, new target, ...). Offsets are
not touched. Parked classic JoinGroup/SyncGroup requests are answered REBALANCE_IN_PROGRESS
(the members rejoin, now as classic members of the consumer group); classic timers are
cancelled and consumer session timers started with each member's classic session timeout.

The downgrade back to a classic group when the last member using the consumer protocol
leaves is described at its section below. Classic members inside a consumer group
(JoinGroup/SyncGroup/Heartbeat/LeaveGroup, routed by routing.py) are consumer/classic_members.py's.

Everything here is a handler helper: consumer/ calls it with its ``ConsumerTx`` (the group as it
will be, plus records), and it stages the conversion there, never mutating the shard. The
replayers of classic/events.py and consumer.py apply the records. This module imports neither
consumer/ nor connect/: both group types build on it.
"""
from __future__ import annotations

from typing import Optional

from groupcoord.groups.classic.events import RebalanceStarted
from groupcoord.groups.classic.group import ClassicGroup, Member
from groupcoord.groups.classic import rebalance
from groupcoord.groups.classic.rebalance import select_protocol
from groupcoord.groups.errors import Reject
from groupcoord.groups.modern.reconcile import EMPTY_SET, STABLE, MemberAssignment, unit
from groupcoord.groups.records import Record
from groupcoord.groups.result import TimerKey
from groupcoord.groups.timers import CLASSIC_JOIN, CLASSIC_SESSION, CONSUMER_SESSION
from groupcoord.protocol import ProtocolError, embedded
from groupcoord.protocol import messages as m
from groupcoord.protocol.error_codes import ErrorCode as E

__all__ = ["upgrade", "maybe_downgrade", "classic_meta", "uses_classic", "chosen_protocol",
           "topic_name", "CONSUMER_PROTOCOL_TYPE"]

CONSUMER_PROTOCOL_TYPE = "consumer"

_Classic = m.ConsumerGroupMemberMetadataValueClassicMemberMetadata
_Proto = m.ConsumerGroupMemberMetadataValueClassicProtocol


# ====================================================================== upgrade
def upgrade(tx, group, create: bool) -> None:
    """Stage in ``tx`` (a consumer.tx.ConsumerTx of a group id that ``group``, not a consumer group,
    holds; opened with no group) what a ConsumerGroupHeartbeat's conversion needs: an empty
    classic group is dropped, a classic consumer-protocol group is converted; anything else
    is refused with Reject(GROUP_ID_NOT_FOUND)."""
    gid = group.group_id
    if not create or not isinstance(group, ClassicGroup):
        raise Reject(E.GROUP_ID_NOT_FOUND, "Group %s is not a consumer group." % gid)
    if not group.members:
        rebalance.drop_classic(tx, group)
        return
    if group.protocol_type() != CONSUMER_PROTOCOL_TYPE:
        raise Reject(E.GROUP_ID_NOT_FOUND, "Cannot upgrade classic group %s to a consumer "
                     "group: its protocol type is %r, not 'consumer'."
                     % (gid, group.protocol_type()))
    limit = tx.shard.config.consumer_max_size
    if len(group.members) >= limit:
        raise Reject(E.GROUP_MAX_SIZE_REACHED, "The consumer group has reached its maximum "
                     "capacity of %d members." % limit)
    members = [(mb, _decode_member(group, mb)) for mb in group.members.values()]
    rebalance.drop_classic(tx, group)
    _convert(tx, group, members)


def _decode_member(g, mb) -> tuple:
    """(subscription, assignment) of a classic member, decoded from its metadata for the
    group's protocol (its first protocol before any generation) and its assignment bytes."""
    gid = g.group_id
    md = mb.metadata(g.protocol) if g.protocol is not None else \
        (mb.protocols[0][1] if mb.protocols else b"")
    try:
        _, sub = embedded.decode_subscription(md)
        assignment = embedded.decode_assignment(mb.assignment)[1] if mb.assignment else None
    except ProtocolError as exc:     # the member's bytes are not the consumer protocol
        raise Reject(E.GROUP_ID_NOT_FOUND, "Cannot upgrade classic group %s to a consumer "
                     "group: member %s's subscription or assignment is not a valid consumer "
                     "protocol message (%s)." % (gid, mb.member_id, exc)) from None
    return sub, assignment


def classic_meta(sub, rebalance_timeout: int, protocols, client_id: str,
                 client_host: str, instance_id: Optional[str], session_timeout: int):
    """A ConsumerGroupMemberMetadataValue for a member using the classic protocol."""
    return m.ConsumerGroupMemberMetadataValue(
        instance_id=instance_id, rack_id=sub.rack_id or None, client_id=client_id,
        client_host=client_host, subscribed_topic_names=sorted(set(sub.topics)),
        subscribed_topic_regex=None, rebalance_timeout_ms=rebalance_timeout,
        server_assignor=None,
        classic_member_metadata=_Classic(
            session_timeout_ms=session_timeout,
            supported_protocols=[_Proto(name=n, metadata=bytes(md)) for n, md in protocols]))


def _convert(tx, g, members) -> None:
    """Stage every classic member in the (new) consumer group at the classic generation."""
    gid, gen, catalog = g.group_id, g.generation, tx.shard.topics
    taken: set = set()
    units_of: dict = {}
    for mb, (sub, assignment) in members:
        mid = mb.member_id
        tx.fresh.add(mid)
        tx.put_meta(mid, classic_meta(sub, mb.rebalance_timeout, mb.protocols,
                                        mb.client_id, mb.client_host, mb.instance_id,
                                        mb.session_timeout))
        units = []
        for tp in (assignment.assigned_partitions if assignment is not None else ()):
            t = catalog.get(tp.topic)
            if t is None:
                continue           # a topic the catalog does not know cannot be a unit
            ix = tx.topic_index(t.topic_id)
            for p in tp.partitions:
                u = unit(ix, p)
                # A partition given twice by a faulty leader stays with the first member.
                if 0 <= p < t.partitions and u not in taken:
                    taken.add(u)
                    units.append(u)
        units_of[mid] = frozenset(units)
    tx.epoch = tx.target_epoch = gen
    tx.records.append(Record(m.ConsumerGroupMetadataKey(gid),
                               m.ConsumerGroupMetadataValue(epoch=gen)))
    for mid, units in units_of.items():
        tx.put_target(mid, units)
    tx.records.append(Record(m.ConsumerGroupTargetAssignmentMetadataKey(gid),
                               m.ConsumerGroupTargetAssignmentMetadataValue(
                                   assignment_epoch=gen)))
    for mb, _ in members:
        mid = mb.member_id
        tx.put_assignment(mid, MemberAssignment(gen, gen, STABLE, units_of[mid], EMPTY_SET))
        tx.timers.append((TimerKey(CONSUMER_SESSION, gid, mid), tx.now + mb.session_timeout))
    tx.fresh.clear()


# ====================================================================== classic members
# A consumer group member "uses the classic protocol" when its metadata carries
# classic_member_metadata. Its JoinGroup/SyncGroup/Heartbeat/LeaveGroup are consumer/classic_members.py's
# (routing.py sends them there); these helpers are shared with it.

def uses_classic(mem) -> bool:
    return mem is not None and mem.meta.classic_member_metadata is not None


def chosen_protocol(meta) -> tuple:
    """(name, metadata) of the classic protocol a member uses: the first it supports."""
    p = meta.classic_member_metadata.supported_protocols[0]
    return p.name, p.metadata


def topic_name(g, tid: bytes) -> str:
    for n, (t, _) in g.topic_meta.items():
        if t == tid:
            return n
    return ""


# ====================================================================== downgrade
def maybe_downgrade(tx, left_id: str) -> None:
    """After ``left_id`` was removed in ``tx``: when it was the last member using the
    consumer protocol and classic members remain (with a protocol they all support), append
    the conversion back to a classic group in PreparingRebalance (they must rejoin)."""
    g = tx.group
    left = g.members.get(left_id) if g is not None else None
    if left is None or uses_classic(left):
        return
    rest = tx.member_ids()
    if not rest or len(rest) > tx.shard.config.group_max_size:
        return
    if not all(tx.meta(mid).classic_member_metadata is not None for mid in rest):
        return
    members = [_as_classic_member(tx, mid) for mid in rest]
    common = set(n for n, _ in members[0].protocols)
    for mb in members[1:]:
        common &= set(n for n, _ in mb.protocols)
    if not common:
        return                   # no protocol every member speaks: stay a consumer group
    _downgrade(tx, members)


def _as_classic_member(tx, mid: str):
    meta = tx.meta(mid)
    cm = meta.classic_member_metadata
    protocols = tuple((p.name, bytes(p.metadata)) for p in cm.supported_protocols)
    return Member(mid, meta.instance_id, meta.client_id, meta.client_host,
                  cm.session_timeout_ms, meta.rebalance_timeout_ms, protocols,
                  _encoded_assignment(tx, tx.assignment(mid).assigned, protocols[0][1]))


def _encoded_assignment(tx, units, subscription: bytes) -> bytes:
    """Units as a ConsumerProtocolAssignment, in the version of the member's subscription."""
    catalog = tx.shard.topics
    by: dict = {}
    for u in units:
        tid = tx.topic_id(u >> 32)
        t = catalog.by_id.get(tid)
        name = t.name if t is not None else topic_name(tx.group, tid)
        by.setdefault(name, []).append(u & 0xFFFFFFFF)
    version = int.from_bytes(bytes(subscription[:2]), "big", signed=True) \
        if len(subscription) >= 2 else 0
    version = max(0, min(version, m.ConsumerProtocolAssignment.VERSIONS[1]))
    return embedded.encode_assignment(m.ConsumerProtocolAssignment(assigned_partitions=[
        m.ConsumerProtocolAssignmentTopicPartition(topic=n, partitions=sorted(ps))
        for n, ps in sorted(by.items())]), version)


def _downgrade(tx, members) -> None:
    """Consumer-group tombstones, then the classic group's GroupMetadata (generation = the
    group epoch after the leave, current assignments kept) and a rebalance."""
    gid, now = tx.group_id, tx.now
    for mb in members:
        tx.remove(mb.member_id)
    tx.records.append(Record(m.ConsumerGroupTargetAssignmentMetadataKey(gid), None))
    tx.records.append(Record(m.ConsumerGroupPartitionMetadataKey(gid), None))
    tx.records.append(Record(m.ConsumerGroupMetadataKey(gid), None))
    protocol = select_protocol(members)
    value = m.GroupMetadataValue(
        protocol_type=CONSUMER_PROTOCOL_TYPE, generation=tx.epoch, protocol=protocol,
        leader=members[0].member_id, current_state_timestamp=now,
        members=[m.GroupMetadataValueMemberMetadata(
            member_id=mb.member_id, group_instance_id=mb.instance_id, client_id=mb.client_id,
            client_host=mb.client_host, rebalance_timeout=mb.rebalance_timeout,
            session_timeout=mb.session_timeout, subscription=mb.metadata(protocol),
            assignment=mb.assignment) for mb in members])
    tx.records.append(Record(m.GroupMetadataKey(group=gid), value))
    # Kafka triggers a rebalance: the members rejoin as plain classic members.
    deadline = now + max(mb.rebalance_timeout for mb in members)
    tx.records.append(RebalanceStarted(gid, deadline, -1, now))
    tx.timers.append((TimerKey(CLASSIC_JOIN, gid), deadline))
    for mb in members:
        tx.timers.append((TimerKey(CLASSIC_SESSION, gid, mb.member_id),
                            now + mb.session_timeout))
