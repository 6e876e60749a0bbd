"""ConnectGroupHeartbeat (api key 10000): join, heartbeat, leave (epochs -1, -2), the session and
revocation deadlines, and the upgrade of a classic Connect group by a joining worker. The
KIP-848 rules are modern/'s (reconcile.reconcile_member, membership.py); this module supplies
a worker's units (connectors and tasks) and the choice of the worker that computes."""
from __future__ import annotations

from typing import Optional

from groupcoord.groups.connect.group import (LEAVE, NO_TARGET, REVOCATION, SESSION, STATIC_LEAVE,
                                             UNITS, ConnectGroup, Prepared, TargetEntry,
                                             Unconfirmed, fenced, heartbeat_error, note_removed,
                                             rec_config, rec_current, rec_epoch, rec_member,
                                             rec_target, validate_first_heartbeat,
                                             worker_tombstones)
from groupcoord.groups.connect.selection import check_assignors, choose_worker
from groupcoord.groups.errors import Reject
from groupcoord.groups.lifecycle import (MEMBER_EXPIRED, MEMBER_JOINED, MEMBER_LEFT,
                                         STATIC_REPLACED, Event)
from groupcoord.groups.connect import migration
from groupcoord.groups.modern import membership
from groupcoord.groups.modern import reconcile as rc
from groupcoord.groups.modern.group import rebalance_started, settle
from groupcoord.groups.result import EMPTY, Result, TimerKey
from groupcoord.groups.tx import GroupTx
from groupcoord.protocol import messages as m
from groupcoord.protocol.error_codes import ErrorCode as E


def remove_worker(tx: GroupTx, g: ConnectGroup, mid: str, cfg=None, kind: str = MEMBER_LEFT,
                  reason: str = "leave") -> None:
    """Stage the removal of a member (leave, expiry, fencing), with the epoch bump and the
    choice of another worker if it was computing; when only classic workers remain, the
    group goes back to a classic group (migration.maybe_downgrade). ``kind`` and ``reason``:
    its lifecycle event (connect/group.py note_removed)."""
    worker_tombstones(tx, g, mid)
    tx.emit(rec_epoch(g.group_id, g.epoch + 1))
    members = g.members.without(mid)
    events, ctimers, _ = choose_worker(g, members, g.epoch + 1, g.target_epoch, tx.now, exclude=mid)
    tx.emit_all(events)
    tx.schedule_all(ctimers)
    migration.maybe_downgrade(tx, g, members, g.epoch + 1, cfg)
    note_removed(tx, g, (mid,), kind, reason, len(members))


def _assignors(req_assignors):
    A = m.ConnectWorkerGroupMemberMetadataValueAssignor
    return [A(name=a.name, minimum_version=a.minimum_version, maximum_version=a.maximum_version,
              reason=a.reason, version=a.version, metadata=a.metadata) for a in req_assignors]


def _validate_heartbeat(req) -> Optional[str]:
    if not req.group_id:
        return "GroupId can't be empty"
    if not req.member_id:
        return "MemberId can't be empty"
    if req.member_epoch < STATIC_LEAVE:
        return "MemberEpoch must be >= -1 (or -2 for a static member's temporary leave)"
    if req.member_epoch == STATIC_LEAVE and req.instance_id is None:
        return "MemberEpoch -2 (temporary leave) requires an InstanceId"
    if req.instance_id is not None and not req.instance_id:
        return "InstanceId can't be empty"
    if req.server_assignor is not None and req.client_assignors is not None:
        return "ServerAssignor and ClientAssignors can't be used together"
    for a in req.client_assignors or ():
        if not a.name:
            return "Assignor.Name can't be empty"
        if a.minimum_version < -1:
            return "Assignor.MinimumVersion of %s must be >= -1" % a.name
        if a.maximum_version < 0 or a.maximum_version < a.minimum_version:
            return "Assignor.MaximumVersion of %s must be >= 0 and >= MinimumVersion" % a.name
        if not a.minimum_version <= a.version <= a.maximum_version:
            return ("Assignor.Version of %s must be within [MinimumVersion, MaximumVersion]"
                    % a.name)
    if req.client_assignors is not None and \
            len({a.name for a in req.client_assignors}) != len(req.client_assignors):
        return "ClientAssignors lists an assignor twice"
    cs = req.config_state
    if cs is not None:
        if cs.config_offset < -1:
            return "ConfigState.ConfigOffset must be >= -1"
        names = [c.name for c in cs.connectors]
        if not all(names) or len(set(names)) != len(names):
            return "ConfigState.Connectors names must be non-empty and unique"
        if any(c.task_count < 0 for c in cs.connectors):
            return "ConfigState.Connectors task counts must be >= 0"
    return None


class _Alias:
    """holders seen by a static member replacing its previous incarnation."""
    __slots__ = ("h", "old", "new")

    def __init__(self, h, old, new):
        self.h, self.old, self.new = h, old, new

    def get(self, u, default=None):
        v = self.h.get(u, default)
        return self.new if v == self.old else v


def _response_assignment(g, units, target: TargetEntry):
    conns, tasks = g.wire(units)
    T = m.ConnectGroupHeartbeatResponseConnectorTasks
    return m.ConnectGroupHeartbeatResponseAssignment(
        error=g.target_error,
        connectors_and_tasks=m.ConnectGroupHeartbeatResponseConnectorsAndTasks(
            connectors=conns, tasks=[T(connector=c, task_ids=t) for c, t in tasks]),
        version=target.version, metadata=target.metadata)


def _heartbeat(shard, req, ctx) -> Result:
    cfg = shard.config
    if req.member_epoch > 0 and req.owned_connectors_and_tasks is None \
            and req.client_assignors is None and req.config_state is None \
            and req.instance_id is None and req.worker_url is None \
            and req.rebalance_timeout_ms <= 0 and req.server_assignor is None:
        fast = _steady_heartbeat(shard, req, ctx)
        if fast is not None:
            return fast
    why = _validate_heartbeat(req)
    if why:
        return heartbeat_error(E.INVALID_REQUEST, why)
    if req.server_assignor is not None:
        return heartbeat_error(E.UNSUPPORTED_ASSIGNOR,
                         "connect groups have no server-side assignor; use ClientAssignors")
    gid, mid = req.group_id, req.member_id
    g = shard.groups.get(gid)
    if g is not None and g.TYPE != "connect":
        # A classic Connect group (or an empty classic group) is upgraded by a joining
        # worker; anything else answers GROUP_ID_NOT_FOUND (connect/migration.py).
        return _upgrade(shard, g, req, ctx)
    if g is None:
        if req.member_epoch != 0:
            return heartbeat_error(E.UNKNOWN_MEMBER_ID, "group %s has no member %s" % (gid, mid))
        g = ConnectGroup(gid)           # a read-only view: replay of the records creates it
    if req.member_epoch == LEAVE:
        return _leave(g, req, ctx, cfg)
    if req.member_epoch == STATIC_LEAVE:
        return _static_leave(g, req, ctx, cfg)
    if req.member_epoch == 0 and mid not in g.members:
        why = validate_first_heartbeat(req)
        if why:
            return heartbeat_error(E.INVALID_REQUEST, why)
    return _join_or_heartbeat(g, req, ctx, cfg)


def _upgrade(shard, group, req, ctx) -> Result:
    """A joining worker's heartbeat for a group id a classic group holds: the conversion's
    records (migration.upgrade), then the heartbeat's own, computed on the group as
    the conversion leaves it (replayed on a scratch shard; the live shard is not touched).
    When the join is refused, nothing is converted."""
    tx = GroupTx(req.group_id, ctx.now_ms)
    try:
        migration.upgrade(tx, shard, group, req)
    except Reject as rej:
        return heartbeat_error(rej.code, rej.message)
    scratch = shard.scratch()
    for r in tx.records:
        if not isinstance(r.key, m.GroupMetadataKey):     # the classic group's tombstone
            scratch.replay(r)
    view = scratch.groups.get(group.group_id)
    if view is None:                 # an empty classic group: the worker starts a new group
        view = ConnectGroup(group.group_id)
        view.session_ms = shard.config.connect_session_timeout_ms
    res = _join_or_heartbeat(view, req, ctx, shard.config)
    if res.response.error_code not in (0, E.COMPUTE_ASSIGNMENT):
        return res                  # the join is refused: the classic group stays as it was
    tx.emit_all(res.records)
    tx.schedule_all(res.timers)
    tx.events.extend(res.events)
    return tx.result(res.response)


def _steady_heartbeat(shard, req, ctx) -> Optional[Result]:
    """The hot path: a STABLE worker at the target epoch that changes nothing, in a group with
    nothing new to choose. Same outcome as the general path (no record, a session timer),
    without its work; None when any condition fails (the general path decides)."""
    g = shard.groups.get(req.group_id)
    if type(g) is not ConnectGroup:
        return None
    mid = req.member_id
    cur = g.current.get(mid)
    if cur is None or cur.epoch != req.member_epoch or cur.state != rc.STABLE \
            or cur.epoch != g.target_epoch or g.computing == mid \
            or (g.computing is not None) != (g.epoch > g.target_epoch) \
            or mid in g.unconfirmed:
        return None
    meta = g.members[mid]
    if meta.client_id != ctx.client_id or meta.client_host != ctx.client_host:
        return None
    cfg = shard.config
    return Result(m.ConnectGroupHeartbeatResponse(
        member_id=mid, member_epoch=cur.epoch,
        heartbeat_interval_ms=cfg.connect_heartbeat_interval_ms), (),
        ((TimerKey(SESSION, g.group_id, mid), ctx.now_ms + cfg.connect_session_timeout_ms),))


def _leave(g, req, ctx, cfg) -> Result:
    mid = req.member_id
    if mid not in g.members:
        return heartbeat_error(E.UNKNOWN_MEMBER_ID, "group %s has no member %s" % (g.group_id, mid))
    tx = GroupTx(g.group_id, ctx.now_ms)
    remove_worker(tx, g, mid, cfg)
    return tx.result(m.ConnectGroupHeartbeatResponse(member_id=mid, member_epoch=LEAVE))


def _static_leave(g, req, ctx, cfg) -> Result:
    mid, gid = req.member_id, g.group_id
    meta = g.members.get(mid)
    if meta is None:
        return heartbeat_error(E.UNKNOWN_MEMBER_ID, "group %s has no member %s" % (gid, mid))
    if meta.instance_id != req.instance_id:
        return fenced(heartbeat_error(E.FENCED_INSTANCE_ID, "member %s is not instance %s"
                                      % (mid, req.instance_id), mid),
                      g, mid, req.instance_id, req.member_epoch, "instance-taken")
    cur = g.current[mid]
    # Epoch -2 marks the temporary leave; the previous epoch keeps the real one for the
    # replacement. Its units stay held until it returns or its session expires.
    left = cur._replace(epoch=STATIC_LEAVE, previous_epoch=cur.epoch)
    events, ctimers, _ = choose_worker(g, g.members, g.epoch, g.target_epoch, ctx.now_ms, exclude=mid)
    tx = GroupTx(gid, ctx.now_ms)
    tx.note(Event(kind=MEMBER_LEFT, group=gid, type="connect", member=mid,
                  instance=meta.instance_id, epoch=g.epoch, reason="static-leave"))
    tx.emit(rec_current(g, mid, left))
    tx.emit_all(events)
    tx.schedule(TimerKey(SESSION, gid, mid), ctx.now_ms + cfg.connect_session_timeout_ms)
    tx.schedule(TimerKey(REVOCATION, gid, mid), None)
    tx.schedule_all(ctimers)
    return tx.result(m.ConnectGroupHeartbeatResponse(member_id=mid, member_epoch=STATIC_LEAVE))


def _join_or_heartbeat(g, req, ctx, cfg) -> Result:
    gid, mid, now = g.group_id, req.member_id, ctx.now_ms
    meta = g.members.get(mid)
    cur = g.current.get(mid)
    owned = None
    if req.owned_connectors_and_tasks is not None:
        o = req.owned_connectors_and_tasks
        owned = g.units(o.connectors, o.tasks)
    replaced = None                  # the static member this join replaces
    base = meta
    if req.member_epoch == 0 and meta is None:
        if req.instance_id is not None and req.instance_id in g.static:
            replaced = g.static[req.instance_id]
            try:
                membership.check_instance_free(replaced, g.current[replaced], req.instance_id)
            except Reject as rej:
                return heartbeat_error(rej.code, rej.message, mid)
            base = g.members[replaced]
            old = g.current[replaced]
            cur = old._replace(epoch=old.previous_epoch)
        elif len(g.members) >= cfg.connect_max_size:
            return heartbeat_error(E.GROUP_MAX_SIZE_REACHED, "group %s has reached its maximum size "
                             "of %d workers" % (gid, cfg.connect_max_size), mid)
        else:
            cur = rc.NEW_MEMBER
    elif meta is None:
        return heartbeat_error(E.UNKNOWN_MEMBER_ID, "group %s has no member %s" % (gid, mid))
    else:
        if req.instance_id is not None and req.instance_id != meta.instance_id:
            return fenced(heartbeat_error(E.FENCED_INSTANCE_ID, "member %s is not instance %s"
                                          % (mid, req.instance_id), mid),
                          g, mid, req.instance_id, req.member_epoch, "instance-taken")
        if req.member_epoch == 0 and cur.epoch == STATIC_LEAVE:
            cur = cur._replace(epoch=cur.previous_epoch)     # back from a temporary leave
        elif req.member_epoch != 0:
            # Fenced, not removed (docs/decisions.md, "Connect: a fenced heartbeat does not
            # remove the worker"): the request may be a late copy the live worker sent long
            # ago, and removing it would hand its work to others while it still runs it. A
            # worker that really is behind abandons its work and rejoins at epoch 0; one
            # that is gone is removed by its session timeout.
            try:
                membership.check_epoch(cur, req.member_epoch, owned)
            except Reject as rej:
                return fenced(heartbeat_error(rej.code, rej.message, mid), g, mid,
                              meta.instance_id, req.member_epoch, "stale-epoch")

    # ---- member information
    if meta is not None and replaced is None and req.instance_id is None \
            and req.worker_url is None and req.rebalance_timeout_ms <= 0 \
            and req.client_assignors is None and meta.client_id == ctx.client_id \
            and meta.client_host == ctx.client_host:
        new_meta = meta              # nothing about the worker changed (the common case)
    else:
        new_meta = _member_meta(req, ctx, base)
    if new_meta is meta:
        members = g.members          # unchanged: no O(members) copy per heartbeat
        assignors_changed = False
    else:
        assignors_changed = base is None or new_meta.client_assignors != base.client_assignors
        members = g.members.copy()
        if replaced is not None:
            del members[replaced]
        members[mid] = new_meta
    if assignors_changed:
        err = check_assignors(members)
        if err:
            return heartbeat_error(E.UNSUPPORTED_ASSIGNOR, err, mid)
    bump = assignors_changed       # a join, or new assignors / reason / version / metadata
    tx = GroupTx(gid, now)
    _join_records(tx, g, req, mid, meta, new_meta, replaced, bump)
    recs = tx.records
    epoch = g.epoch + 1 if recs and type(recs[-1].key) is m.ConnectWorkerGroupMetadataKey \
        else g.epoch
    new_member = meta is None
    if new_member:
        tx.note(Event(kind=STATIC_REPLACED if replaced is not None else MEMBER_JOINED,
                      group=gid, type="connect", member=mid, instance=new_meta.instance_id,
                      epoch=epoch, client=ctx.client_id, host=ctx.client_host,
                      previous=replaced or ""))
    why = None
    if epoch != g.epoch:
        why = ("join" if new_member and replaced is None
               else "assignors" if assignors_changed else "config", mid)
        rebalance_started(tx, "connect", epoch, why, len(members))
    changed = {} if replaced is None else {replaced: None}
    target = g.target.get(replaced if replaced is not None else mid, NO_TARGET)
    if replaced is not None and replaced in g.target:
        tx.emit(rec_target(g, mid, target))
    p = g.prepared
    if replaced is not None and p is not None and replaced in p.member_ids:
        # A computation is in flight with the old id in its member list: its install must
        # give the old id's target to the replacement (else the replacement kept its old
        # target next to a new one that moved those units: units twice, others nowhere).
        tx.emit(Prepared(
            group_id=gid, epoch=p.epoch, connectors=p.connectors, assignor=p.assignor,
            member_ids=tuple(sorted(mid if x == replaced else x for x in p.member_ids)),
            renamed=p.renamed + ((replaced, mid),)))

    tx.schedule(TimerKey(SESSION, gid, mid), now + cfg.connect_session_timeout_ms)
    if replaced is not None:
        tx.schedule(TimerKey(SESSION, gid, replaced), None)
        tx.schedule(TimerKey(REVOCATION, gid, replaced), None)
    computing = g.computing if g.computing != replaced else None
    if members is g.members and epoch == g.epoch and \
            (computing is not None) == (epoch > g.target_epoch):
        # Membership and epoch unchanged, and either nothing to compute or a computation
        # already in flight by a worker that still qualifies: selection would not change.
        events, ctimers, fatal = (), (), None
    else:
        events, ctimers, fatal = choose_worker(g, members, epoch, g.target_epoch, now,
                                         computing=computing)
    tx.schedule_all(ctimers)
    if fatal:
        # No worker can compute the target: keep the member where it is and say why.
        if new_member:
            tx.emit(rec_current(g, mid, cur))
            changed[mid] = cur
        tx.emit_all(events)          # (the choice's events follow the member's records)
        settle(tx, g, "connect", epoch=epoch, target_epoch=g.target_epoch,
               members=len(members), changed=changed, why=why, unit=UNITS)
        return tx.result(m.ConnectGroupHeartbeatResponse(
            error_code=int(E.UNSUPPORTED_ASSIGNOR), error_message=fatal, member_id=mid,
            member_epoch=cur.epoch, heartbeat_interval_ms=cfg.connect_heartbeat_interval_ms))

    # ---- reconciliation (modern/reconcile.py: the rules every modern group type shares)
    holders = g.holders if replaced is None else _Alias(g.holders, replaced, mid)
    joining = req.member_epoch == 0
    step = rc.reconcile_member(
        cur, g.target_epoch, target.units, owned,
        rc.acknowledging(owned, joining and meta is not None), holders, mid,
        joining=joining, repeat=mid in g.unconfirmed)
    nxt = step.nxt
    if nxt != cur or new_member:
        tx.emit(rec_current(g, mid, nxt))
    if step.revocation != rc.KEEP:
        tx.schedule(TimerKey(REVOCATION, gid, mid), now + new_meta.rebalance_timeout_ms
                    if step.revocation == rc.ARM else None)

    chosen = events[0].member_id if events else computing
    resp = m.ConnectGroupHeartbeatResponse(
        member_id=mid, member_epoch=nxt.epoch,
        heartbeat_interval_ms=cfg.connect_heartbeat_interval_ms)
    if chosen == mid:
        resp.error_code = int(E.COMPUTE_ASSIGNMENT)
        resp.error_message = "compute the target assignment for group epoch %d" % epoch
    if step.send:
        resp.assignment = _response_assignment(g, nxt.assigned, target)
    if step.unconfirmed is not None:
        tx.emit(Unconfirmed(group_id=gid, member_id=mid, unconfirmed=step.unconfirmed))
    tx.emit_all(events)              # (the choice's events follow the member's records)
    changed[mid] = nxt
    settle(tx, g, "connect", epoch=epoch, target_epoch=g.target_epoch, members=len(members),
           changed=changed, why=why, unit=UNITS)
    return tx.result(resp)


def _member_meta(req, ctx, base):
    return m.ConnectWorkerGroupMemberMetadataValue(
        instance_id=req.instance_id if req.instance_id is not None
        else (base.instance_id if base else None),
        worker_url=req.worker_url if req.worker_url is not None
        else (base.worker_url if base else None),
        client_id=ctx.client_id, client_host=ctx.client_host,
        rebalance_timeout_ms=req.rebalance_timeout_ms if req.rebalance_timeout_ms > 0
        else base.rebalance_timeout_ms,
        client_assignors=_assignors(req.client_assignors) if req.client_assignors is not None
        else base.client_assignors)


def _join_records(tx: GroupTx, g, req, mid, meta, new_meta, replaced, bump) -> None:
    """Stage the member / config / epoch records of a join or heartbeat; the epoch record, if
    any, is last."""
    gid = g.group_id
    if replaced is not None:
        tx.emit_all((rec_current(g, replaced, None), rec_target(g, replaced, None),
                     rec_member(gid, replaced, None)))
    if new_meta is not meta and new_meta != meta:
        tx.emit(rec_member(gid, mid, new_meta))
    cs = req.config_state
    if cs is not None and cs.config_offset > g.config_offset:
        conns = {c.name: c.task_count for c in cs.connectors}
        tx.emit(rec_config(gid, cs.config_offset, conns))
        bump = bump or conns != g.connectors
    if bump:
        tx.emit(rec_epoch(gid, g.epoch + 1))


def _member_timer(shard, key, now_ms, want_unrevoked: bool) -> Result:
    g = shard.groups.get(key.group_id)
    if g is None or g.TYPE != "connect" or not membership.expiry_removes(
            g.current.get(key.member_id), want_unrevoked):
        return EMPTY
    tx = GroupTx(g.group_id, now_ms)
    remove_worker(tx, g, key.member_id, shard.config, MEMBER_EXPIRED,
                  "revocation-timeout" if want_unrevoked else "session-expired")
    return tx.result()


def _session_expired(shard, key, now_ms) -> Result:
    return _member_timer(shard, key, now_ms, False)


def _revocation_expired(shard, key, now_ms) -> Result:
    return _member_timer(shard, key, now_ms, True)
