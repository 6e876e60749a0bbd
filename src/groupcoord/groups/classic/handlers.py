"""Classic groups' requests: JoinGroup / SyncGroup / Heartbeat / LeaveGroup (client-side
assignment), and the rebalance a topic catalog change starts.

The group elects a leader among its members; the leader computes every member's assignment
from the metadata the coordinator collected and hands it back in SyncGroup. The coordinator
only runs the barrier (rebalance.py), picks the protocol and stores the result
(docs/coordinator-classic.md). routing.py sends these requests here when the id is held by a
classic group or by none.

Handlers never mutate: each works on a draft copy of its group (``rebalance.ClassicTx``),
applying the same ``events.apply_to`` the shard's replay uses, then returns the events and
records it applied. A record that cannot be written (over message.max.bytes: 40 members with
1 MiB of metadata each) fails the generation as Kafka's failed append does: the leader and
the parked syncs get UNKNOWN_SERVER_ERROR and the group rebalances.
"""
from __future__ import annotations

import logging
from typing import Optional

from groupcoord.groups import ids
from groupcoord.groups.classic.events import (MemberJoined, PendingMemberAdded,
                                              PendingMemberForgotten, StaticMemberReplaced,
                                              SyncReceived)
from groupcoord.groups.classic.group import (SESSION, STATE_COMPLETING, STATE_DEAD,
                                             STATE_PREPARING, STATE_STABLE, SYNC,
                                             ClassicGroup, group_record, session_deadline)
from groupcoord.groups.classic.rebalance import (ClassicTx, after_removal, answer_parked,
                                                 group_value, join_error, join_response,
                                                 join_rebalance_timeout, leave_response,
                                                 park_join, partitions_moved, prepare_rebalance,
                                                 remove_member, session_timeout_refused,
                                                 sync_response, unwritable)
from groupcoord.groups.lifecycle import (MEMBER_FENCED, MEMBER_JOINED, REBALANCE_COMPLETED,
                                         STATIC_REPLACED, Event)
from groupcoord.groups.result import ParkKey, RequestContext, Result, TimerKey
from groupcoord.protocol import embedded
from groupcoord.protocol import messages as m
from groupcoord.protocol.error_codes import ErrorCode as E

log = logging.getLogger("groupcoord.groups")

__all__ = ["handle_join", "handle_sync", "handle_heartbeat", "handle_leave",
           "rebalance_for_topics"]


def _supports(g: Optional[ClassicGroup], protocol_type: str, protocols: tuple,
              exclude: Optional[str]) -> bool:
    """Kafka's supportsProtocols: an empty group takes any non-empty type and list; otherwise
    the type must match and some protocol must be supported by every other member."""
    if not protocol_type or not protocols:
        return False
    if g is None or not g.members:
        return True
    if protocol_type != g._ptype:
        return False
    others = len(g.members)
    mine = ()
    if exclude in g.members:
        others -= 1
        mine = set(n for n, _ in g.members[exclude].protocols)
    if not others:
        return True
    counts = g.protocol_counts
    return any(counts.get(n, 0) - (n in mine) == others for n, _ in protocols)


def _new_member_id(g: ClassicGroup, prefix: str, now: int) -> str:
    salt = 0
    while True:
        mid = "%s-%s" % (prefix, ids.generated_id(g.group_id, now, g.id_seq, salt, prefix))
        if mid not in g.members and mid not in g.pending:
            return mid
        salt += 1


def _joined_event(gid: str, member_id: str, instance_id, req, ctx: RequestContext,
                  rebalance_timeout: int, protocols: tuple) -> MemberJoined:
    return MemberJoined(gid, member_id, instance_id, ctx.client_id, ctx.client_host,
                        req.session_timeout_ms, rebalance_timeout, req.protocol_type, protocols,
                        ctx.version)


def _joined(tx: ClassicTx, member_id: str, instance_id, ctx: RequestContext) -> None:
    tx.note(Event(kind=MEMBER_JOINED, group=tx.gid, type="classic", member=member_id,
                  instance=instance_id, epoch=tx.g.generation, client=ctx.client_id,
                  host=ctx.client_host))


def _fenced(g, member_id: str, instance_id, code: int) -> tuple:
    """Result.events of a request refused FENCED_INSTANCE_ID: its member id is not the one
    holding the instance id (a static member replaced since); () for any other code."""
    if code != E.FENCED_INSTANCE_ID:
        return ()
    return (Event(kind=MEMBER_FENCED, group=g.group_id, type="classic", member=member_id,
                  instance=instance_id, epoch=g.generation, reason="instance-taken"),)


def handle_join(shard, req: m.JoinGroupRequest, ctx: RequestContext) -> Result:
    v, now, gid = ctx.version, ctx.now_ms, req.group_id
    if not gid:
        return Result(join_error(v, E.INVALID_GROUP_ID, req.member_id))
    g = shard.groups.get(gid)
    cfg = shard.config
    if session_timeout_refused(cfg, req):
        return Result(join_error(v, E.INVALID_SESSION_TIMEOUT, req.member_id))
    if g is not None and g.state == STATE_DEAD:
        return Result(join_error(v, E.COORDINATOR_NOT_AVAILABLE, req.member_id))
    instance = req.group_instance_id if v >= 5 else None
    rt = join_rebalance_timeout(req, v)
    protocols = tuple((p.name, bytes(p.metadata)) for p in req.protocols)
    replacing = g.static_members.get(instance) if g is not None and instance is not None \
        and not req.member_id else None
    if not _supports(g, req.protocol_type, protocols, req.member_id or replacing):
        return Result(join_error(v, E.INCONSISTENT_GROUP_PROTOCOL, req.member_id))
    if not req.member_id:
        if replacing is not None:
            return _replace_static(shard, g, replacing, req, ctx, rt, protocols)
        if g is not None and len(g.members) + len(g.pending) >= cfg.group_max_size:
            return Result(join_error(v, E.GROUP_MAX_SIZE_REACHED))
        tx = ClassicTx(shard, gid, now)
        new_id = _new_member_id(tx.g, instance if instance is not None else ctx.client_id, now)
        if instance is None and v >= 4:
            # KIP-394: the member learns its id first and must rejoin with it.
            tx.emit(PendingMemberAdded(gid, new_id))
            tx.timer(SESSION, new_id, now + req.session_timeout_ms)
            return tx.result(join_error(v, E.MEMBER_ID_REQUIRED, new_id))
        tx.emit(_joined_event(gid, new_id, instance, req, ctx, rt, protocols))
        _joined(tx, new_id, instance, ctx)
        return park_join(tx, new_id)
    if g is None:
        return Result(join_error(v, E.UNKNOWN_MEMBER_ID, req.member_id))
    if req.member_id in g.pending:
        tx = ClassicTx(shard, gid, now)
        tx.emit(_joined_event(gid, req.member_id, None, req, ctx, rt, protocols))
        _joined(tx, req.member_id, None, ctx)
        return park_join(tx, req.member_id)
    err = g.validate_member(req.member_id, instance)
    if err:
        return Result(join_error(v, err, req.member_id),
                      events=_fenced(g, req.member_id, instance, err))
    return _join_known(shard, g, req, ctx, rt, protocols, instance)


def _join_known(shard, g: ClassicGroup, req, ctx, rt: int, protocols: tuple, instance):
    mid = req.member_id
    mb = g.members[mid]
    tx = ClassicTx(shard, g.group_id, ctx.now_ms)
    unchanged = mb.protocols == protocols
    if g.state == STATE_COMPLETING and unchanged or \
            g.state == STATE_STABLE and unchanged and mid != g.leader:
        # It probably lost its JoinGroup response: hand the current generation back.
        tx.session(mid)
        return tx.result(join_response(g, mid, ctx.version))
    if _stale_join(mb, req.protocol_type, protocols):
        # A late copy of a JoinGroup the member retried (its connection broke): counted as a
        # rejoin it would hand an eager member's partitions to others while it runs them.
        # Nothing changes; a member that somehow reads this rejoins.
        return Result(join_error(ctx.version, E.REBALANCE_IN_PROGRESS, mid))
    if g.state == STATE_PREPARING and mb.joined:
        # A second JoinGroup while the first is parked: the first is superseded.
        tx.answer(mid, "join", join_error(mb.join_version, E.REBALANCE_IN_PROGRESS, mid))
    # Stable leader rejoin (it wants a new assignment), changed metadata, or the barrier.
    tx.emit(_joined_event(g.group_id, mid, instance if instance is not None else
                          mb.instance_id, req, ctx, rt, protocols))
    return park_join(tx, mid, "leader-rejoin" if unchanged else "rejoin")


def _stale_join(mb, protocol_type: str, protocols: tuple) -> bool:
    """A "consumer" JoinGroup sent before the member learned a generation it has since
    synced: its subscription (v2+, KIP-792) carries the member's generation (the last it
    joined, -1 after a reset), which only grows until a reset. -1 and undecodable or
    pre-v2 metadata prove nothing."""
    if protocol_type != "consumer" or mb.synced_generation <= 0:
        return False
    gen = -1
    for _, md in protocols:
        try:
            version, sub = embedded.decode_subscription(md)
        except ValueError:               # the codec's DecodeError: not a subscription
            return False
        if version < 2:
            return False
        gen = max(gen, sub.generation_id)
    return 0 <= gen < mb.synced_generation


def _replace_static(shard, g: ClassicGroup, old_id: str, req, ctx, rt: int,
                    protocols: tuple) -> Result:
    """A known group.instance.id joins with no member id: it takes over the member under a
    new id; the old id is fenced (its parked requests get FENCED_INSTANCE_ID)."""
    v = ctx.version
    tx = ClassicTx(shard, g.group_id, ctx.now_ms)
    old = g.members[old_id]
    answer_parked(tx, g, old_id, E.FENCED_INSTANCE_ID)
    tx.timer(SESSION, old_id, None)
    new_id = _new_member_id(tx.g, req.group_instance_id, ctx.now_ms)
    keep = g.state == STATE_STABLE and old.protocols == protocols
    tx.emit(StaticMemberReplaced(g.group_id, old_id, new_id, ctx.client_id, ctx.client_host,
                                 req.session_timeout_ms, rt, protocols))
    tx.note(Event(kind=STATIC_REPLACED, group=g.group_id, type="classic", member=new_id,
                  previous=old_id, instance=req.group_instance_id, epoch=g.generation,
                  client=ctx.client_id, host=ctx.client_host))
    if keep:
        # Same protocols in Stable: keep the assignment, no rebalance; store the new id.
        d = tx.g
        tx.emit(group_record(d, group_value(d, d.state_timestamp)))
        tx.session(new_id)
        leader = new_id == d.leader
        return tx.result(join_response(d, new_id, v, with_members=leader and v >= 9,
                                       skip=leader))
    tx.emit(_joined_event(g.group_id, new_id, req.group_instance_id, req, ctx, rt, protocols))
    return park_join(tx, new_id)


# ---------------------------------------------------------------------------- SyncGroup
def handle_sync(shard, req: m.SyncGroupRequest, ctx: RequestContext) -> Result:
    v, gid = ctx.version, req.group_id
    g = shard.groups.get(gid)
    err = _member_error(g, gid, req.member_id, req.group_instance_id if v >= 3 else None)
    if not err and req.generation_id != g.generation:
        err = E.ILLEGAL_GENERATION
    if not err and v >= 5 and (
            req.protocol_type is not None and req.protocol_type != (g._ptype or "") or
            req.protocol_name is not None and req.protocol_name != g.protocol):
        err = E.INCONSISTENT_GROUP_PROTOCOL
    if not err and g.state == STATE_PREPARING:
        err = E.REBALANCE_IN_PROGRESS
    if err:
        return Result(m.SyncGroupResponse(error_code=int(err)),
                      events=_fenced(g, req.member_id, req.group_instance_id, err))
    mid = req.member_id
    resp = sync_response(g, v, 0, g.members[mid].assignment)
    if g.state == STATE_STABLE and mid not in g.pending_sync:
        # The common case (a member re-reading its assignment): no state change at all.
        return Result(resp, timers=((TimerKey(SESSION, gid, mid),
                                     session_deadline(g.members[mid], ctx.now_ms)),))
    tx = ClassicTx(shard, gid, ctx.now_ms)
    if g.state == STATE_STABLE:
        tx.emit(SyncReceived(gid, mid, False, v))
        if not tx.g.pending_sync:
            tx.timer(SYNC, "", None)
        tx.session(mid)
        return tx.result(resp)
    # CompletingRebalance
    if mid != g.leader:
        if g.members[mid].sync_parked:
            tx.answer(mid, "sync", sync_response(g, g.members[mid].sync_version,
                                                 E.REBALANCE_IN_PROGRESS))
        tx.emit(SyncReceived(gid, mid, True, v))
        tx.session(mid)
        return tx.result(None, park=ParkKey(gid, mid, "sync"))
    # The leader's assignments complete the generation: one record, every parked sync
    # answered in the same Result (the runtime releases them once the record is durable).
    assignments = {a.member_id: bytes(a.assignment) for a in req.assignments}
    record = group_record(tx.g, group_value(tx.g, ctx.now_ms, assignments))
    too_large = unwritable(record, shard.config.message_max_bytes)
    if too_large:
        # Kafka's classic coordinator when the GroupMetadata append fails: every member
        # waiting for its assignment and the leader get the error (RecordTooLargeException
        # maps to UNKNOWN_SERVER_ERROR) and the group rebalances; nothing is written.
        log.warning("group %s: generation %d not stored: %s; members get "
                    "UNKNOWN_SERVER_ERROR and the group rebalances", gid[:256], g.generation,
                    too_large)
        prepare_rebalance(tx, E.UNKNOWN_SERVER_ERROR, ("store-failed", mid))
        tx.session(mid)
        return tx.result(sync_response(tx.g, v, E.UNKNOWN_SERVER_ERROR))
    tx.emit(SyncReceived(gid, mid, False, v))
    d = tx.g
    parked = [(mb.member_id, mb.sync_version) for mb in d.members.values() if mb.sync_parked]
    since = g.rebalance_since
    tx.note(Event(kind=REBALANCE_COMPLETED, group=gid, type="classic", epoch=d.generation,
                  duration_ms=ctx.now_ms - since if since >= 0 else -1,
                  members=len(d.members), units_moved=partitions_moved(d, assignments),
                  unit="partitions"))
    tx.emit(record)
    for pid, pv in parked:
        tx.answer(pid, "sync", sync_response(d, pv, 0, d.members[pid].assignment))
        tx.session(pid)
    tx.session(mid)
    if not d.pending_sync:
        tx.timer(SYNC, "", None)
    return tx.result(sync_response(d, v, 0, d.members[mid].assignment))


def _member_error(g, gid: str, member_id: str, instance_id: Optional[str]) -> int:
    """The checks SyncGroup, Heartbeat and offset commits share."""
    if not gid:
        return E.INVALID_GROUP_ID
    if g is None or not isinstance(g, ClassicGroup):
        return E.UNKNOWN_MEMBER_ID
    if g.state == STATE_DEAD:
        return E.COORDINATOR_NOT_AVAILABLE
    return g.validate_member(member_id, instance_id)


# ---------------------------------------------------------------------------- Heartbeat
def handle_heartbeat(shard, req: m.HeartbeatRequest, ctx: RequestContext) -> Result:
    g = shard.groups.get(req.group_id)
    err = _member_error(g, req.group_id, req.member_id,
                        req.group_instance_id if ctx.version >= 3 else None)
    if not err and req.generation_id != g.generation:
        err = E.ILLEGAL_GENERATION
    if err:
        return Result(m.HeartbeatResponse(error_code=int(err)),
                      events=_fenced(g, req.member_id, req.group_instance_id, err))
    # Accepted (even in PreparingRebalance, where it tells the member to rejoin): the
    # session restarts.
    mb = g.members[req.member_id]
    ops = ((TimerKey(SESSION, g.group_id, mb.member_id), session_deadline(mb, ctx.now_ms)),)
    code = E.REBALANCE_IN_PROGRESS if g.state == STATE_PREPARING else 0
    return Result(m.HeartbeatResponse(error_code=int(code)), timers=ops)


# --------------------------------------------------------------------------- LeaveGroup
def handle_leave(shard, req: m.LeaveGroupRequest, ctx: RequestContext) -> Result:
    v, gid = ctx.version, req.group_id
    if v >= 3:
        who = [(mi.member_id, mi.group_instance_id) for mi in req.members]
    else:
        who = [(req.member_id, None)]
    g = shard.groups.get(gid)
    top = 0
    if not gid:
        top = E.INVALID_GROUP_ID
    elif isinstance(g, ClassicGroup) and g.state == STATE_DEAD:
        top = E.COORDINATOR_NOT_AVAILABLE
    if top:
        return Result(m.LeaveGroupResponse(error_code=int(top)))
    codes = []
    tx = None
    if not isinstance(g, ClassicGroup):
        codes = [E.UNKNOWN_MEMBER_ID] * len(who)
    else:
        tx = ClassicTx(shard, gid, ctx.now_ms)
        for member_id, instance_id in who:
            code = _leave_one(tx, member_id, instance_id)
            codes.append(code)
            tx.events.extend(_fenced(g, member_id, instance_id, code))
        if any(c == 0 for c in codes):
            first = next(mid for (mid, _), c in zip(who, codes) if c == 0)
            left = [ev.member for ev in tx.events if ev.kind != MEMBER_FENCED]
            after_removal(tx, ("leave", left[0] if left else first))
    resp = leave_response(v, who, codes)
    return tx.result(resp) if tx is not None else Result(resp)


def _leave_one(tx: ClassicTx, member_id: str, instance_id: Optional[str]) -> int:
    g = tx.g
    if instance_id is None:
        if member_id in g.pending:
            tx.emit(PendingMemberForgotten(tx.gid, member_id))
            tx.timer(SESSION, member_id, None)
            return 0
        if member_id not in g.members:
            return E.UNKNOWN_MEMBER_ID
        target = member_id
    else:
        # A static member may leave by instance id alone (an empty member id).
        target = g.static_members.get(instance_id)
        if target is None:
            return E.UNKNOWN_MEMBER_ID
        if member_id and member_id != target:
            return E.FENCED_INSTANCE_ID
    remove_member(tx, target)
    return 0


# ------------------------------------------------------------------ topic catalog changes
def _subscribes_to(g: ClassicGroup, topics) -> bool:
    for mb in g.members.values():
        mine = g.member_topics(mb)
        if mine is not None and not topics.isdisjoint(mine):
            return True
    return False


def rebalance_for_topics(shard, topics, now: int) -> list:
    """The catalog changed ``topics`` (created, grown, deleted): every Stable or
    CompletingRebalance group of the "consumer" protocol type with a member subscribed to
    one of them starts a rebalance, so its members learn it from their next heartbeat
    (REBALANCE_IN_PROGRESS) and the leader assigns from fresh metadata. Kafka's coordinator
    does not do this for classic groups (each consumer rejoins when its own metadata refresh
    sees the change, up to metadata.max.age.ms later); this node is the metadata and knows
    at once (docs/decisions.md). -> one Result per group. Pure."""
    out = []
    for gid in sorted(shard.groups):
        g = shard.groups[gid]
        if (isinstance(g, ClassicGroup) and g.state in (STATE_STABLE, STATE_COMPLETING)
                and g.protocol_type() == "consumer" and _subscribes_to(g, topics)):
            tx = ClassicTx(shard, gid, now)
            prepare_rebalance(tx, why=("metadata", ""))
            out.append(tx.result())
    return out
