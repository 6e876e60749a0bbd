"""Classic members of a consumer group (KIP-848 online migration): the JoinGroup, SyncGroup,
Heartbeat and LeaveGroup of a member "using the classic protocol" inside a consumer group
(routing.py sends them here when a consumer group holds the id; docs/coordinator-migration.md).

The coordinator assigns for such a member exactly as for the other members (same ConsumerTx steps):
  JoinGroup   update the subscription, reconcile (owned partitions from the subscription),
              answer at once: generation = member epoch, leader = the member, no members
  SyncGroup   its assigned partitions as a ConsumerProtocolAssignment
  Heartbeat   REBALANCE_IN_PROGRESS while it must rejoin (not STABLE at the group epoch)
  LeaveGroup  removed like a consumer member that leaves (epoch bump)
"""
from __future__ import annotations

from typing import Optional

from groupcoord.groups import ids
from groupcoord.groups.classic.rebalance import (join_error, join_rebalance_timeout,
                                                 leave_response, session_timeout_refused)
from groupcoord.groups.consumer.group import SESSION_TIMER, session_ms
from groupcoord.groups.consumer.heartbeat import (check_group_size, fenced_event, note_joined,
                                                  replace_static_member, update_member)
from groupcoord.groups.consumer.target import ensure_target
from groupcoord.groups.consumer.tx import ConsumerTx
from groupcoord.groups.errors import Reject
from groupcoord.groups.lifecycle import MEMBER_LEFT, Event
from groupcoord.groups.consumer.migration import (CONSUMER_PROTOCOL_TYPE, chosen_protocol,
                                              classic_meta, topic_name,
                                              uses_classic)
from groupcoord.groups.modern.membership import classic_member_id
from groupcoord.groups.modern.reconcile import EMPTY_SET, STABLE, units_of_index
from groupcoord.groups.result import Result, TimerKey
from groupcoord.protocol import ProtocolError, embedded
from groupcoord.protocol import messages as m
from groupcoord.protocol.error_codes import ErrorCode as E

__all__ = ["join", "sync", "heartbeat", "leave"]


def join(shard, g, req, ctx) -> Result:
    """JoinGroup of a classic member into the consumer group ``g``."""
    v = ctx.version
    cfg = shard.config
    if session_timeout_refused(cfg, req):
        return Result(join_error(v, E.INVALID_SESSION_TIMEOUT, req.member_id))
    protocols = tuple((p.name, bytes(p.metadata)) for p in req.protocols)
    if req.protocol_type != CONSUMER_PROTOCOL_TYPE or not protocols:
        return Result(join_error(v, E.INCONSISTENT_GROUP_PROTOCOL, req.member_id))
    try:
        _, sub = embedded.decode_subscription(protocols[0][1])
    except ProtocolError:         # the bytes are not a consumer subscription
        return Result(join_error(v, E.INCONSISTENT_GROUP_PROTOCOL, req.member_id))
    instance = req.group_instance_id if v >= 5 else None
    rt = join_rebalance_timeout(req, v)
    tx = ConsumerTx(shard, g.group_id, g, ctx.now_ms)
    holder = g.static.get(instance) if instance is not None else None
    try:
        mid, base, replaced = _join_member(tx, g, req.member_id, instance, ctx)
    except Reject as rej:
        return Result(join_error(v, rej.code, req.member_id),
                      events=fenced_event(shard, g.group_id, req.member_id, instance, -1,
                                          rej.code))
    if instance is None and base is not None:
        instance = base.instance_id      # a static member rejoining at JoinGroup v0-v4
    meta = classic_meta(sub, rt, protocols, ctx.client_id, ctx.client_host, instance,
                        req.session_timeout_ms)
    at = len(tx.events)
    update_member(tx, mid, base, meta, replaced)
    if base is None or replaced:
        note_joined(tx, at, mid, holder if replaced else None, ctx)
    ensure_target(tx)
    owned = EMPTY_SET if base is None else _owned_units(tx, sub)
    nxt = tx.reconcile(mid, owned, joining=base is None, known=base is not None,
                         answered=False).nxt
    tx.timers.append((TimerKey(SESSION_TIMER, g.group_id, mid),
                        ctx.now_ms + req.session_timeout_ms))
    return tx.result(m.JoinGroupResponse(
        error_code=0, generation_id=nxt.epoch,
        protocol_type=CONSUMER_PROTOCOL_TYPE if v >= 7 else None,
        protocol_name=protocols[0][0], leader=mid, skip_assignment=False, member_id=mid,
        members=[]))


def _join_member(tx: ConsumerTx, g, member_id: str, instance: Optional[str], ctx) -> tuple:
    """(member id, metadata before this join or None, replaced?) of a classic JoinGroup."""
    if member_id:
        mem = g.members.get(member_id)
        if not uses_classic(mem):
            raise Reject(E.UNKNOWN_MEMBER_ID, "not a classic member of the group")
        if instance is not None and g.static.get(instance) != member_id:
            raise Reject(E.FENCED_INSTANCE_ID, "another member holds the instance id")
        return member_id, mem.meta, False
    check_group_size(tx, "")
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
    replace_static_member(tx, holder, new_id)
    return new_id, holder.meta, True


def _owned_units(tx: ConsumerTx, sub) -> frozenset:
    """The partitions the member says it owns (its subscription's OwnedPartitions)."""
    ix_of = tx.group.topic_ix.get
    catalog = tx.shard.topics
    out = []
    for tp in sub.owned_partitions:
        t = catalog.get(tp.topic)
        ix = ix_of(t.topic_id, -1) if t is not None else -1
        out.extend(units_of_index(ix, tp.partitions))
    return frozenset(out)


def _classic_member(g, member_id: str, instance: Optional[str]) -> tuple:
    """(member, 0) or (None, error code)."""
    mid, err = classic_member_id(g, member_id, instance, uses_classic)
    return (None, err) if err else (g.members[mid], 0)


def sync(shard, g, req, ctx) -> Result:
    v = ctx.version
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
    tx = ConsumerTx(shard, g.group_id, g, ctx.now_ms)
    by: dict = {}
    for tid, p in g.external(mem.a.assigned):
        by.setdefault(shard.topics.by_id[tid].name if tid in shard.topics.by_id
                      else topic_name(g, tid), []).append(p)
    md = chosen_protocol(mem.meta)[1]
    version = min(int.from_bytes(bytes(md[:2]), "big", signed=True),
                  m.ConsumerProtocolAssignment.VERSIONS[1]) if len(md) >= 2 else 0
    blob = embedded.encode_assignment(m.ConsumerProtocolAssignment(assigned_partitions=[
        m.ConsumerProtocolAssignmentTopicPartition(topic=t, partitions=ps)
        for t, ps in sorted(by.items())]), max(version, 0))
    tx.timers.append((mem.session_key, ctx.now_ms + session_ms(mem.meta, 0)))
    return tx.result(m.SyncGroupResponse(
        error_code=0, assignment=blob,
        protocol_type=CONSUMER_PROTOCOL_TYPE if v >= 5 else None,
        protocol_name=name if v >= 5 else None))


def heartbeat(shard, g, req, ctx) -> Result:
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


def leave(shard, g, req, ctx) -> Result:
    v = ctx.version
    who = [(mi.member_id, mi.group_instance_id) for mi in req.members] if v >= 3 \
        else [(req.member_id, None)]
    tx = ConsumerTx(shard, g.group_id, g, ctx.now_ms)
    codes = []
    for member_id, instance in who:
        mem, err = _classic_member(g, member_id, instance)
        if not err and mem.member_id in tx.removed:
            err = E.UNKNOWN_MEMBER_ID
        if not err:
            at = len(tx.events)
            tx.fence(mem.member_id)
            tx.events.insert(at, Event(kind=MEMBER_LEFT, group=g.group_id, type="consumer",
                                       member=mem.member_id, instance=mem.meta.instance_id,
                                       epoch=tx.epoch))
        codes.append(err)
    resp = leave_response(v, who, codes)
    return tx.result(resp)
