"""Classic workers inside a connect group: the JoinGroup, SyncGroup, Heartbeat and LeaveGroup
of a worker "using the classic protocol" (routing.py sends them here when a connect group
holds the id; docs/coordinator-migration.md, "Connect groups"). The conversion itself is
connect/migration.py's.

  JoinGroup   answered at once: generation = member epoch (after reconciling towards the
              target with what it owns), leader = the new-protocol worker last chosen to
              compute (never itself: it must not run an assignor), no members
  SyncGroup   its assignment as a ConnectWorkerAssignment in its protocol's version: v0 the
              full set; v1+ the units newly assigned since its join and the ones to revoke
  Heartbeat   REBALANCE_IN_PROGRESS while it is not STABLE at the target epoch, else NONE
  LeaveGroup  removed like a leaving worker (epoch bump)
Classic workers never compute the target: connect/selection.py only considers members
without classic_member_metadata.
"""
from __future__ import annotations

from typing import Optional

from groupcoord.groups import ids
from groupcoord.groups.classic.rebalance import join_error, leave_response
from groupcoord.groups.modern import reconcile as rc
from groupcoord.groups.connect.group import (NO_TARGET, REVOCATION, SESSION, UNITS,
                                             UNKNOWN_UNIT, allocation_pairs, ctl_list, fenced,
                                             leader_of, note_removed, pairs_to_units,
                                             protocol_version, rec_current, rec_epoch, rec_member,
                                             uses_classic)
from groupcoord.groups.connect.selection import choose_worker
from groupcoord.groups.lifecycle import MEMBER_JOINED, MEMBER_LEFT, Event
from groupcoord.groups.modern.group import rebalance_started, settle
from groupcoord.groups.modern.membership import classic_member_id
from groupcoord.groups.result import Result, TimerKey
from groupcoord.groups.tx import GroupTx
from groupcoord.protocol import ProtocolError, embedded
from groupcoord.protocol import messages as m
from groupcoord.protocol.error_codes import ErrorCode as E
from groupcoord.groups.connect.migration import CONNECT_PROTOCOL_TYPE, classic_meta, remove_members

__all__ = ["classic_join", "classic_sync", "classic_heartbeat", "classic_leave"]


def _join_error(v, code, member_id=""):
    return Result(join_error(v, code, member_id))


def classic_join(shard, g, req, ctx) -> Result:
    v, now, cfg = ctx.version, ctx.now_ms, shard.config
    if not cfg.group_min_session_timeout_ms <= req.session_timeout_ms \
            <= cfg.group_max_session_timeout_ms:
        return _join_error(v, E.INVALID_SESSION_TIMEOUT, req.member_id)
    protocols = tuple((p.name, bytes(p.metadata)) for p in req.protocols)
    if req.protocol_type != CONNECT_PROTOCOL_TYPE or not protocols:
        return _join_error(v, E.INCONSISTENT_GROUP_PROTOCOL, req.member_id)
    name, md = protocols[0]
    try:
        _, wm = embedded.decode_connect_metadata(md)
        owned_pairs = allocation_pairs(md)
    except ProtocolError:           # not ConnectProtocol metadata
        return _join_error(v, E.INCONSISTENT_GROUP_PROTOCOL, req.member_id)
    instance = req.group_instance_id if v >= 5 else None
    rt = req.rebalance_timeout_ms if v >= 1 and req.rebalance_timeout_ms >= 0 \
        else req.session_timeout_ms
    gid, mid = g.group_id, req.member_id
    if mid:
        meta = g.members.get(mid)
        if not uses_classic(meta):
            return _join_error(v, E.UNKNOWN_MEMBER_ID, mid)
        if instance is not None and meta.instance_id != instance:
            return fenced(_join_error(v, E.FENCED_INSTANCE_ID, mid), g, mid, instance, -1,
                          "instance-taken")
        cur = g.current[mid]
    else:
        if instance is not None and instance in g.static:
            # Replacing a static worker under a new id is not supported for classic workers.
            return _join_error(v, E.FENCED_INSTANCE_ID)
        if len(g.members) >= cfg.connect_max_size:
            return _join_error(v, E.GROUP_MAX_SIZE_REACHED)
        prefix = instance if instance is not None else ctx.client_id
        mid = ids.generated_id(gid, now, g.epoch, len(g.members), prefix)
        if prefix:
            mid = "%s-%s" % (prefix, mid)
        meta, cur = None, rc.NEW_MEMBER
    new_meta = classic_meta(wm.url, instance if instance is not None else
                            (meta.instance_id if meta else None), ctx.client_id,
                            ctx.client_host, rt, req.session_timeout_ms, protocols)
    tx = GroupTx(gid, now)
    tx.schedule(TimerKey(SESSION, gid, mid), now + req.session_timeout_ms)
    if new_meta != meta:
        tx.emit(rec_member(gid, mid, new_meta))
    epoch = g.epoch
    n_members = len(g.members)
    why = None
    if meta is None:                # a join bumps the epoch; a new-protocol worker computes
        epoch += 1
        tx.emit(rec_epoch(gid, epoch))
        members = dict(g.members)
        members[mid] = new_meta
        n_members += 1
        tx.note(Event(kind=MEMBER_JOINED, group=gid, type="connect", member=mid,
                      instance=new_meta.instance_id, epoch=epoch, client=ctx.client_id,
                      host=ctx.client_host))
        why = ("join", mid)
        rebalance_started(tx, "connect", epoch, why, n_members)
        events, ctimers, _ = choose_worker(g, members, epoch, g.target_epoch, now)
        tx.emit_all(events)
        tx.schedule_all(ctimers)
    # Eager (v0) workers revoke everything before joining; v1+ report their allocation.
    owned = pairs_to_units(g, owned_pairs) if meta is not None else rc.EMPTY_SET
    target = g.target.get(mid, NO_TARGET)
    # A classic worker revokes by rejoining: its reported allocation acknowledges.
    step = rc.reconcile_member(cur, g.target_epoch, target.units, owned, owned, g.holders,
                               mid, joining=meta is None, repeat=None)
    nxt = step.nxt
    if nxt != cur or meta is None:
        tx.emit(rec_current(g, mid, nxt))
    if step.revocation != rc.KEEP:
        tx.schedule(TimerKey(REVOCATION, gid, mid),
                    now + rt if step.revocation == rc.ARM else None)
    settle(tx, g, "connect", epoch=epoch, target_epoch=g.target_epoch, members=n_members,
           changed={mid: nxt}, why=why, unit=UNITS)
    leader, _ = leader_of(g)
    return tx.result(m.JoinGroupResponse(
        error_code=0, generation_id=nxt.epoch,
        protocol_type=CONNECT_PROTOCOL_TYPE if v >= 7 else None, protocol_name=name,
        leader=leader, skip_assignment=False, member_id=mid, members=[]))


def _classic_member(g, member_id: str, instance: Optional[str]) -> tuple:
    """(member id, 0) or (None, error code) for a Sync/Heartbeat/Leave naming a worker."""
    return classic_member_id(g, member_id, instance, uses_classic)


def _session(g, mid, now):
    cm = g.members[mid].classic_member_metadata
    return (TimerKey(SESSION, g.group_id, mid), now + cm.session_timeout_ms)


def classic_sync(shard, g, req, ctx) -> Result:
    v = ctx.version
    mid, err = _classic_member(g, req.member_id, req.group_instance_id if v >= 3 else None)
    if not err and req.generation_id != g.current[mid].epoch:
        err = E.ILLEGAL_GENERATION
    if not err:
        name, md = (lambda p: (p.name, p.metadata))(
            g.members[mid].classic_member_metadata.supported_protocols[0])
        if v >= 5 and (req.protocol_type is not None and
                       req.protocol_type != CONNECT_PROTOCOL_TYPE or
                       req.protocol_name is not None and req.protocol_name != name):
            err = E.INCONSISTENT_GROUP_PROTOCOL
    if err:
        return Result(m.SyncGroupResponse(error_code=int(err)))
    a = g.current[mid]
    version = protocol_version(name, md)
    if version == 0:
        assigned, revoked = a.assigned, None
    else:
        owned = pairs_to_units(g, allocation_pairs(md)) - {UNKNOWN_UNIT}
        assigned, revoked = a.assigned - owned, ctl_list(g, owned - a.assigned)
    leader, url = leader_of(g)
    blob = embedded.encode_connect_assignment(m.ConnectWorkerAssignment(
        error=0, leader=leader, leader_url=url, config_offset=g.config_offset,
        assignment=ctl_list(g, assigned), revoked=revoked, delay=0), version)
    return Result(m.SyncGroupResponse(
        error_code=0, assignment=blob,
        protocol_type=CONNECT_PROTOCOL_TYPE if v >= 5 else None,
        protocol_name=name if v >= 5 else None), (), (_session(g, mid, ctx.now_ms),))


def classic_heartbeat(shard, g, req, ctx) -> Result:
    mid, err = _classic_member(g, req.member_id,
                               req.group_instance_id if ctx.version >= 3 else None)
    if not err and req.generation_id != g.current[mid].epoch:
        err = E.ILLEGAL_GENERATION
    if err:
        return Result(m.HeartbeatResponse(error_code=int(err)))
    a = g.current[mid]
    # Rejoin while not converged on the installed target: its JoinGroup reconciles.
    code = E.REBALANCE_IN_PROGRESS if a.state != rc.STABLE or a.epoch != g.target_epoch \
        else E.NONE
    return Result(m.HeartbeatResponse(error_code=int(code)), (),
                  (_session(g, mid, ctx.now_ms),))


def classic_leave(shard, g, req, ctx) -> Result:
    v = ctx.version
    who = [(mi.member_id, mi.group_instance_id) for mi in req.members] if v >= 3 \
        else [(req.member_id, None)]
    codes, leaving = [], []
    for member_id, instance in who:
        mid, err = _classic_member(g, member_id, instance)
        if not err and mid in leaving:
            err = E.UNKNOWN_MEMBER_ID
        if not err:
            leaving.append(mid)
        codes.append(err)
    resp = leave_response(v, who, codes)
    if not leaving:
        return Result(resp)
    tx = GroupTx(g.group_id, ctx.now_ms)
    remove_members(tx, g, leaving, shard.config)
    note_removed(tx, g, leaving, MEMBER_LEFT, "leave", len(g.members) - len(leaving))
    return tx.result(resp)
