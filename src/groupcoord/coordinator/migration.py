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

Classic members inside a consumer group (JoinGroup/SyncGroup/Heartbeat/LeaveGroup through
classic.py's hooks for other group types) and the downgrade back to a classic group when the
last member using the consumer protocol leaves are described at their sections below.

Everything here is a handler helper: it stages the conversion in a consumer ``Plan`` (the
group as it will be, plus records), never mutating the shard. The replayers of classic.py
and consumer.py apply the records.
"""
from __future__ import annotations

from typing import Optional

from groupcoord.coordinator import classic, ids, migration_connect
from groupcoord.coordinator.consumer import (SESSION_TIMER, ConsumerGroup, Plan, Reject,
                                             check_group_size, ensure_target,
                                             replace_static_member, session_ms, update_member)
from groupcoord.coordinator.reconcile import (EMPTY_SET, STABLE, MemberAssignment, unit,
                                              units_of_index)
from groupcoord.coordinator.records import Record
from groupcoord.coordinator.result import ParkKey, Result, TimerKey
from groupcoord.protocol import embedded
from groupcoord.protocol import messages as m
from groupcoord.protocol.error_codes import ErrorCode as E

__all__ = ["upgrade_plan", "classic_join", "classic_sync", "classic_heartbeat", "classic_leave",
           "CONSUMER_PROTOCOL_TYPE"]

CONSUMER_PROTOCOL_TYPE = "consumer"

_Classic = m.ConsumerGroupMemberMetadataValueClassicMemberMetadata
_Proto = m.ConsumerGroupMemberMetadataValueClassicProtocol


# ====================================================================== upgrade
def upgrade_plan(shard, group, create: bool, now_ms: int) -> Plan:
    """The Plan a ConsumerGroupHeartbeat works on when ``group`` (not a consumer group)
    holds the id: an empty classic group is dropped, a classic consumer-protocol group is
    converted; anything else is refused with GROUP_ID_NOT_FOUND."""
    gid = group.group_id
    if not create or not isinstance(group, classic.ClassicGroup):
        raise Reject(E.GROUP_ID_NOT_FOUND, "Group %s is not a consumer group." % gid)
    plan = Plan(shard, gid, None, now_ms)
    if not group.members:
        _drop_classic(plan, group)
        return plan
    if group.protocol_type() != CONSUMER_PROTOCOL_TYPE:
        raise Reject(E.GROUP_ID_NOT_FOUND, "Cannot upgrade classic group %s to a consumer "
                     "group: its protocol type is %r, not 'consumer'."
                     % (gid, group.protocol_type()))
    limit = shard.config.consumer_max_size
    if len(group.members) >= limit:
        raise Reject(E.GROUP_MAX_SIZE_REACHED, "The consumer group has reached its maximum "
                     "capacity of %d members." % limit)
    members = [(mb, _decode_member(group, mb)) for mb in group.members.values()]
    _drop_classic(plan, group)
    _convert(plan, group, members)
    return plan


def _drop_classic(plan: Plan, g) -> None:
    """The classic group's tombstone; its parked requests are answered REBALANCE_IN_PROGRESS
    (the members rejoin the new group) and its timers cancelled."""
    gid = g.group_id
    plan.records.append(Record(m.GroupMetadataKey(group=gid), None))
    for mid, mb in g.members.items():
        if mb.joined:
            plan.completions.append((ParkKey(gid, mid, "join"), classic._join_error(
                mb.join_version, E.REBALANCE_IN_PROGRESS, mid)))
        if mb.sync_parked:
            plan.completions.append((ParkKey(gid, mid, "sync"), classic._sync_response(
                g, mb.sync_version, E.REBALANCE_IN_PROGRESS)))
        plan.timers.append((TimerKey(classic.SESSION, gid, mid), None))
    for mid in g.pending:
        plan.timers.append((TimerKey(classic.SESSION, gid, mid), None))
    plan.timers.append((TimerKey(classic.JOIN, gid), None))
    plan.timers.append((TimerKey(classic.SYNC, gid), None))


def _decode_member(g, mb) -> tuple:
    """(subscription, assignment) of a classic member, decoded from its metadata for the
    group's protocol (its first protocol before any generation) and its assignment bytes."""
    gid = g.group_id
    md = mb.metadata(g.protocol) if g.protocol is not None else \
        (mb.protocols[0][1] if mb.protocols else b"")
    try:
        _, sub = embedded.decode_subscription(md)
        assignment = embedded.decode_assignment(mb.assignment)[1] if mb.assignment else None
    except Exception as exc:     # any codec error: the member's bytes are not the protocol
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


def _convert(plan: Plan, g, members) -> None:
    """Stage every classic member in the (new) consumer group at the classic generation."""
    gid, gen, catalog = g.group_id, g.generation, plan.shard.topics
    taken: set = set()
    units_of: dict = {}
    for mb, (sub, assignment) in members:
        mid = mb.member_id
        plan.fresh.add(mid)
        plan.put_meta(mid, classic_meta(sub, mb.rebalance_timeout, mb.protocols,
                                        mb.client_id, mb.client_host, mb.instance_id,
                                        mb.session_timeout))
        units = []
        for tp in (assignment.assigned_partitions if assignment is not None else ()):
            t = catalog.get(tp.topic)
            if t is None:
                continue           # a topic the catalog does not know cannot be a unit
            ix = plan.topic_index(t.topic_id)
            for p in tp.partitions:
                u = unit(ix, p)
                # A partition given twice by a faulty leader stays with the first member.
                if 0 <= p < t.partitions and u not in taken:
                    taken.add(u)
                    units.append(u)
        units_of[mid] = frozenset(units)
    plan.epoch = plan.target_epoch = gen
    plan.records.append(Record(m.ConsumerGroupMetadataKey(gid),
                               m.ConsumerGroupMetadataValue(epoch=gen)))
    for mid, units in units_of.items():
        plan.put_target(mid, units)
    plan.records.append(Record(m.ConsumerGroupTargetAssignmentMetadataKey(gid),
                               m.ConsumerGroupTargetAssignmentMetadataValue(
                                   assignment_epoch=gen)))
    for mb, _ in members:
        mid = mb.member_id
        plan.put_assignment(mid, MemberAssignment(gen, gen, STABLE, units_of[mid], EMPTY_SET))
        plan.timers.append((TimerKey(SESSION_TIMER, gid, mid), plan.now + mb.session_timeout))
    plan.fresh.clear()


# ====================================================================== classic members
# A consumer group member "uses the classic protocol" when its metadata carries
# classic_member_metadata. It speaks JoinGroup/SyncGroup/Heartbeat/LeaveGroup; the
# coordinator assigns for it exactly as for the other members (same Plan steps):
#   JoinGroup   update the subscription, reconcile (owned partitions from the subscription),
#               answer at once: generation = member epoch, leader = the member, no members
#   SyncGroup   its assigned partitions as a ConsumerProtocolAssignment
#   Heartbeat   REBALANCE_IN_PROGRESS while it must rejoin (not STABLE at the group epoch)
#   LeaveGroup  removed like a consumer member that leaves (epoch bump)

def _is_connect(g) -> bool:
    """Classic workers of a connect group are migration_connect.py's."""
    return getattr(g, "TYPE", None) == "connect"


def uses_classic(mem) -> bool:
    return mem is not None and mem.meta.classic_member_metadata is not None


def chosen_protocol(meta) -> tuple:
    """(name, metadata) of the classic protocol a member uses: the first it supports."""
    p = meta.classic_member_metadata.supported_protocols[0]
    return p.name, p.metadata


def classic_join(shard, g, req, ctx) -> Result:
    """JoinGroup into a consumer group (classic.handle_join's hook for other group types)."""
    if _is_connect(g):
        return migration_connect.classic_join(shard, g, req, ctx)
    v = ctx.version
    if not isinstance(g, ConsumerGroup):
        return Result(classic._join_error(v, E.INCONSISTENT_GROUP_PROTOCOL, req.member_id))
    cfg = shard.config
    if not cfg.group_min_session_timeout_ms <= req.session_timeout_ms \
            <= cfg.group_max_session_timeout_ms:
        return Result(classic._join_error(v, E.INVALID_SESSION_TIMEOUT, req.member_id))
    protocols = tuple((p.name, bytes(p.metadata)) for p in req.protocols)
    if req.protocol_type != CONSUMER_PROTOCOL_TYPE or not protocols:
        return Result(classic._join_error(v, E.INCONSISTENT_GROUP_PROTOCOL, req.member_id))
    try:
        _, sub = embedded.decode_subscription(protocols[0][1])
    except Exception:             # the bytes are not a consumer subscription
        return Result(classic._join_error(v, E.INCONSISTENT_GROUP_PROTOCOL, req.member_id))
    instance = req.group_instance_id if v >= 5 else None
    rt = req.rebalance_timeout_ms if v >= 1 and req.rebalance_timeout_ms >= 0 \
        else req.session_timeout_ms
    plan = Plan(shard, g.group_id, g, ctx.now_ms)
    try:
        mid, base, replaced = _join_member(plan, g, req.member_id, instance, ctx)
    except Reject as rej:
        return Result(classic._join_error(v, rej.code, req.member_id))
    if instance is None and base is not None:
        instance = base.instance_id      # a static member rejoining at JoinGroup v0-v4
    meta = classic_meta(sub, rt, protocols, ctx.client_id, ctx.client_host, instance,
                        req.session_timeout_ms)
    update_member(plan, mid, base, meta, replaced)
    ensure_target(plan)
    owned = EMPTY_SET if base is None else _owned_units(plan, sub)
    _, nxt = plan.reconcile(mid, owned)
    plan.timers.append((TimerKey(SESSION_TIMER, g.group_id, mid),
                        ctx.now_ms + req.session_timeout_ms))
    return plan.result(m.JoinGroupResponse(
        error_code=0, generation_id=nxt.epoch,
        protocol_type=CONSUMER_PROTOCOL_TYPE if v >= 7 else None,
        protocol_name=protocols[0][0], leader=mid, skip_assignment=False, member_id=mid,
        members=[]))


def _join_member(plan: Plan, g, member_id: str, instance: Optional[str], ctx) -> tuple:
    """(member id, metadata before this join or None, replaced?) of a classic JoinGroup."""
    if member_id:
        mem = g.members.get(member_id)
        if not uses_classic(mem):
            raise Reject(E.UNKNOWN_MEMBER_ID, "not a classic member of the group")
        if instance is not None and g.static.get(instance) != member_id:
            raise Reject(E.FENCED_INSTANCE_ID, "another member holds the instance id")
        return member_id, mem.meta, False
    check_group_size(plan, "")
    holder_id = g.static.get(instance) if instance is not None else None
    prefix = instance if instance is not None else ctx.client_id
    new_id = ids.generated_id(g.group_id, ctx.now_ms, g.epoch, len(g.members), prefix,
                              holder_id or "")
    if prefix:
        new_id = "%s-%s" % (prefix, new_id)       # like classic groups' member ids
    if holder_id is None:
        return new_id, None, False
    # A static member rejoining under a new id takes its predecessor's place.
    holder = g.members[holder_id]
    replace_static_member(plan, holder, new_id)
    return new_id, holder.meta, True


def _owned_units(plan: Plan, sub) -> frozenset:
    """The partitions the member says it owns (its subscription's OwnedPartitions)."""
    ix_of = plan.group.topic_ix.get
    catalog = plan.shard.topics
    out = []
    for tp in sub.owned_partitions:
        t = catalog.get(tp.topic)
        ix = ix_of(t.topic_id, -1) if t is not None else -1
        out.extend(units_of_index(ix, tp.partitions))
    return frozenset(out)


def classic_member_id(g, member_id: str, instance: Optional[str],
                      is_classic=None) -> tuple:
    """(member id, 0) or (None, error code) for a Sync/Heartbeat/Leave naming a classic member
    of a consumer or connect group (the instance id, when given, decides who it is);
    ``is_classic(member entry)`` says whether the member uses the classic protocol."""
    if instance is not None:
        holder = g.static.get(instance)
        if holder is None:
            return None, E.UNKNOWN_MEMBER_ID
        if member_id and holder != member_id:
            return None, E.FENCED_INSTANCE_ID
        member_id = holder
    if not (is_classic or uses_classic)(g.members.get(member_id)):
        return None, E.UNKNOWN_MEMBER_ID
    return member_id, 0


def _classic_member(g, member_id: str, instance: Optional[str]) -> tuple:
    """(member, 0) or (None, error code)."""
    mid, err = classic_member_id(g, member_id, instance)
    return (None, err) if err else (g.members[mid], 0)


def classic_sync(shard, g, req, ctx) -> Result:
    if _is_connect(g):
        return migration_connect.classic_sync(shard, g, req, ctx)
    v = ctx.version
    if not isinstance(g, ConsumerGroup):
        return Result(m.SyncGroupResponse(error_code=int(E.UNKNOWN_MEMBER_ID)))
    mem, err = _classic_member(g, req.member_id, req.group_instance_id if v >= 3 else None)
    if not err and req.generation_id != mem.a.epoch:
        err = E.ILLEGAL_GENERATION
    name = chosen_protocol(mem.meta)[0] if not err else None
    if not err and v >= 5 and (
            req.protocol_type is not None and req.protocol_type != CONSUMER_PROTOCOL_TYPE or
            req.protocol_name is not None and req.protocol_name != name):
        err = E.INCONSISTENT_GROUP_PROTOCOL
    if err:
        return Result(m.SyncGroupResponse(error_code=int(err)))
    plan = Plan(shard, g.group_id, g, ctx.now_ms)
    by: dict = {}
    for tid, p in g.external(mem.a.assigned):
        by.setdefault(shard.topics.by_id[tid].name if tid in shard.topics.by_id
                      else _name_of(g, tid), []).append(p)
    md = chosen_protocol(mem.meta)[1]
    version = min(int.from_bytes(bytes(md[:2]), "big", signed=True),
                  m.ConsumerProtocolAssignment.VERSIONS[1]) if len(md) >= 2 else 0
    blob = embedded.encode_assignment(m.ConsumerProtocolAssignment(assigned_partitions=[
        m.ConsumerProtocolAssignmentTopicPartition(topic=t, partitions=ps)
        for t, ps in sorted(by.items())]), max(version, 0))
    plan.timers.append((mem.session_key, ctx.now_ms + session_ms(mem.meta, 0)))
    return plan.result(m.SyncGroupResponse(
        error_code=0, assignment=blob,
        protocol_type=CONSUMER_PROTOCOL_TYPE if v >= 5 else None,
        protocol_name=name if v >= 5 else None))


def _name_of(g, tid: bytes) -> str:
    for n, (t, _) in g.topic_meta.items():
        if t == tid:
            return n
    return ""


def classic_heartbeat(shard, g, req, ctx) -> Result:
    if _is_connect(g):
        return migration_connect.classic_heartbeat(shard, g, req, ctx)
    if not isinstance(g, ConsumerGroup):
        return Result(m.HeartbeatResponse(error_code=int(E.UNKNOWN_MEMBER_ID)))
    mem, err = _classic_member(g, req.member_id,
                               req.group_instance_id if ctx.version >= 3 else None)
    if not err and req.generation_id != mem.a.epoch:
        err = E.ILLEGAL_GENERATION
    if err:
        return Result(m.HeartbeatResponse(error_code=int(err)))
    a = mem.a
    # Rejoin while the member is not converged on the group's current epoch: its JoinGroup
    # computes the target and moves it on (revoking first, as for any member).
    code = E.REBALANCE_IN_PROGRESS if a.state != STABLE or a.epoch != g.epoch else E.NONE
    return Result(m.HeartbeatResponse(error_code=int(code)),
                  timers=((mem.session_key, ctx.now_ms + session_ms(mem.meta, 0)),))


def classic_leave(shard, g, req, ctx) -> Result:
    if _is_connect(g):
        return migration_connect.classic_leave(shard, g, req, ctx)
    v = ctx.version
    who = [(mi.member_id, mi.group_instance_id) for mi in req.members] if v >= 3 \
        else [(req.member_id, None)]
    plan = Plan(shard, g.group_id, g, ctx.now_ms) if isinstance(g, ConsumerGroup) else None
    codes = []
    for member_id, instance in who:
        if plan is None:
            codes.append(E.UNKNOWN_MEMBER_ID)
            continue
        mem, err = _classic_member(g, member_id, instance)
        if not err and mem.member_id in plan.removed:
            err = E.UNKNOWN_MEMBER_ID
        if not err:
            plan.fence(mem.member_id)
        codes.append(err)
    resp = classic.leave_response(v, who, codes)
    return plan.result(resp) if plan is not None else Result(resp)


# ====================================================================== downgrade
def maybe_downgrade(plan: Plan, left_id: str) -> None:
    """After ``left_id`` was removed in ``plan``: when it was the last member using the
    consumer protocol and classic members remain (with a protocol they all support), append
    the conversion back to a classic group in PreparingRebalance (they must rejoin)."""
    g = plan.group
    left = g.members.get(left_id) if g is not None else None
    if left is None or uses_classic(left):
        return
    rest = plan.member_ids()
    if not rest or len(rest) > plan.shard.config.group_max_size:
        return
    if not all(plan.meta(mid).classic_member_metadata is not None for mid in rest):
        return
    members = [_as_classic_member(plan, mid) for mid in rest]
    common = set(n for n, _ in members[0].protocols)
    for mb in members[1:]:
        common &= set(n for n, _ in mb.protocols)
    if not common:
        return                   # no protocol every member speaks: stay a consumer group
    _downgrade(plan, members)


def _as_classic_member(plan: Plan, mid: str):
    meta = plan.meta(mid)
    cm = meta.classic_member_metadata
    protocols = tuple((p.name, bytes(p.metadata)) for p in cm.supported_protocols)
    return classic.Member(mid, meta.instance_id, meta.client_id, meta.client_host,
                          cm.session_timeout_ms, meta.rebalance_timeout_ms, protocols,
                          _encoded_assignment(plan, plan.assignment(mid).assigned,
                                              protocols[0][1]))


def _encoded_assignment(plan: Plan, units, subscription: bytes) -> bytes:
    """Units as a ConsumerProtocolAssignment, in the version of the member's subscription."""
    catalog = plan.shard.topics
    by: dict = {}
    for u in units:
        tid = plan.topic_id(u >> 32)
        t = catalog.by_id.get(tid)
        name = t.name if t is not None else _name_of(plan.group, tid)
        by.setdefault(name, []).append(u & 0xFFFFFFFF)
    version = int.from_bytes(bytes(subscription[:2]), "big", signed=True) \
        if len(subscription) >= 2 else 0
    version = max(0, min(version, m.ConsumerProtocolAssignment.VERSIONS[1]))
    return embedded.encode_assignment(m.ConsumerProtocolAssignment(assigned_partitions=[
        m.ConsumerProtocolAssignmentTopicPartition(topic=n, partitions=sorted(ps))
        for n, ps in sorted(by.items())]), version)


def _downgrade(plan: Plan, members) -> None:
    """Consumer-group tombstones, then the classic group's GroupMetadata (generation = the
    group epoch after the leave, current assignments kept) and a rebalance."""
    gid, now = plan.group_id, plan.now
    for mb in members:
        plan.remove(mb.member_id)
    plan.records.append(Record(m.ConsumerGroupTargetAssignmentMetadataKey(gid), None))
    plan.records.append(Record(m.ConsumerGroupPartitionMetadataKey(gid), None))
    plan.records.append(Record(m.ConsumerGroupMetadataKey(gid), None))
    protocol = classic._select_protocol(members)
    value = m.GroupMetadataValue(
        protocol_type=CONSUMER_PROTOCOL_TYPE, generation=plan.epoch, protocol=protocol,
        leader=members[0].member_id, current_state_timestamp=now,
        members=[m.GroupMetadataValueMemberMetadata(
            member_id=mb.member_id, group_instance_id=mb.instance_id, client_id=mb.client_id,
            client_host=mb.client_host, rebalance_timeout=mb.rebalance_timeout,
            session_timeout=mb.session_timeout, subscription=mb.metadata(protocol),
            assignment=mb.assignment) for mb in members])
    plan.records.append(Record(m.GroupMetadataKey(group=gid), value))
    # Kafka triggers a rebalance: the members rejoin as plain classic members.
    deadline = now + max(mb.rebalance_timeout for mb in members)
    plan.records.append(classic.RebalanceStarted(gid, deadline, -1, now))
    plan.timers.append((TimerKey(classic.JOIN, gid), deadline))
    for mb in members:
        plan.timers.append((TimerKey(classic.SESSION, gid, mb.member_id),
                            now + mb.session_timeout))
