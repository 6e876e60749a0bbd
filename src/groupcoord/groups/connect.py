"""Connect worker groups (seed: connect-on-new-rebalance-protocol.txt; docs/coordinator-connect.md).

A connect group is a KIP-848 group whose units of work are connectors and tasks and whose target
assignment is computed by one of its workers (a client-side assignor), not by the coordinator.

Epochs (as KIP-848):
  group epoch     bumped (one ConnectWorkerGroupMetadata record per request at most) when a
                  worker joins, changes its assignors (names, ranges, reason, version or
                  metadata), is removed (leave, session expiry, fencing, revocation timeout),
                  when the connectors or their task counts change (ConfigState with a higher
                  ConfigOffset), and when a delayed rebalance the assignor asked for is due.
  target epoch    the group epoch the installed target assignment was computed for.
  member epoch    each worker's, moved towards the target by reconcile.next_assignment.

Computing a target (group epoch > target epoch):
  1. The coordinator chooses a worker (Volatile ChooseWorker) whose version range of the
     selected assignor covers every other worker's, and arms a deadline timer at its rebalance
     timeout. No such worker: the group is stuck ("fatal"): heartbeats answer
     UNSUPPORTED_ASSIGNOR until membership changes.
  2. Every heartbeat of the chosen worker is processed normally and answers COMPUTE_ASSIGNMENT
     (the response still carries its epoch and assignment).
  3. The worker calls PrepareAssignment: it gets the group epoch, the assignor name, the
     coordinator's clock, the stored AssignorState, the connectors and every worker's metadata
     and current target. The coordinator remembers what it handed out (Volatile Prepared).
  4. The worker calls InstallAssignment: validated against the prepared metadata, then the
     target is written at the prepared epoch (member records only for changed targets, then the
     target metadata with AssignorState and the delayed-rebalance deadline).
  The deadline passing, or the chosen worker leaving, makes the coordinator choose again.

Reconciliation, sessions, leaving and static members are those of consumer groups.

State: durable fields come from records (replay only); ``computing``, ``leader`` and
``prepared`` are volatile (lost on restart: the next heartbeat chooses a worker again).
"""
from __future__ import annotations

from typing import Optional

from groupcoord.assign import kernels
from groupcoord.groups import classic, migration_connect
from groupcoord.groups import reconcile as rc
from groupcoord.groups.connect_group import (ASSIGNMENT, DELAYED, LEAVE, NO_TARGET,
                                                  REVOCATION, SESSION, STATIC_LEAVE,
                                                  ChooseWorker, ConnectGroup, Prepared,
                                                  TargetEntry, Unconfirmed, _choose,
                                                  _fmt_ranges, _hb_error, _range_of, _ranges,
                                                  _rec_config, _rec_current, _rec_epoch,
                                                  _rec_member, _rec_target, _rec_target_meta,
                                                  _sigs, select_assignor,
                                                  validate_first_heartbeat, worker_tombstones)
from groupcoord.groups.errors import Reject
from groupcoord.groups.result import EMPTY, Result, TimerKey
from groupcoord.groups.tx import GroupTx
from groupcoord.protocol import messages as m
from groupcoord.protocol.error_codes import ErrorCode as E

__all__ = ["ConnectGroup", "ChooseWorker", "Prepared", "Unconfirmed", "select_assignor",
           "SESSION", "REVOCATION", "ASSIGNMENT", "DELAYED"]


# ----------------------------------------------------------------------------- helpers
def _lookup(shard, gid):
    """(group or None, error message or None) for a request naming an existing group."""
    g = shard.groups.get(gid)
    if g is None:
        return None, "group %s does not exist" % gid
    if g.TYPE != "connect":
        return None, "group %s is a %s group, not a connect group" % (gid, g.TYPE)
    return g, None


def _remove(tx: GroupTx, g: ConnectGroup, mid: str, cfg=None) -> None:
    """Stage the removal of a member (leave, expiry, fencing), with the epoch bump and the
    choice of another worker if it was computing; when only classic workers remain, the
    group goes back to a classic group (migration_connect.maybe_downgrade)."""
    worker_tombstones(tx, g, mid)
    tx.emit(_rec_epoch(g.group_id, g.epoch + 1))
    members = g.members.without(mid)
    events, ctimers, _ = _choose(g, members, g.epoch + 1, g.target_epoch, tx.now, exclude=mid)
    tx.emit_all(events)
    tx.schedule_all(ctimers)
    migration_connect.maybe_downgrade(tx, g, members, g.epoch + 1, cfg)


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


# ----------------------------------------------------------------------------- heartbeat
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
        return _hb_error(E.INVALID_REQUEST, why)
    if req.server_assignor is not None:
        return _hb_error(E.UNSUPPORTED_ASSIGNOR,
                         "connect groups have no server-side assignor; use ClientAssignors")
    gid, mid = req.group_id, req.member_id
    g = shard.groups.get(gid)
    if g is not None and g.TYPE != "connect":
        # A classic Connect group (or an empty classic group) is upgraded by a joining
        # worker; anything else answers GROUP_ID_NOT_FOUND (migration_connect.py).
        return _upgrade(shard, g, req, ctx)
    if g is None:
        if req.member_epoch != 0:
            return _hb_error(E.UNKNOWN_MEMBER_ID, "group %s has no member %s" % (gid, mid))
        g = ConnectGroup(gid)           # a read-only view: replay of the records creates it
    if req.member_epoch == LEAVE:
        return _leave(g, req, ctx, cfg)
    if req.member_epoch == STATIC_LEAVE:
        return _static_leave(g, req, ctx, cfg)
    if req.member_epoch == 0 and mid not in g.members:
        why = validate_first_heartbeat(req)
        if why:
            return _hb_error(E.INVALID_REQUEST, why)
    return _join_or_heartbeat(g, req, ctx, cfg)


def _upgrade(shard, group, req, ctx) -> Result:
    """A joining worker's heartbeat for a group id a classic group holds: the conversion's
    records (migration_connect.upgrade), then the heartbeat's own, computed on the group as
    the conversion leaves it (replayed on a scratch shard; the live shard is not touched).
    When the join is refused, nothing is converted."""
    tx = GroupTx(req.group_id, ctx.now_ms)
    try:
        migration_connect.upgrade(tx, shard, group, req)
    except Reject as rej:
        return _hb_error(rej.code, rej.message)
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
        return _hb_error(E.UNKNOWN_MEMBER_ID, "group %s has no member %s" % (g.group_id, mid))
    tx = GroupTx(g.group_id, ctx.now_ms)
    _remove(tx, g, mid, cfg)
    return tx.result(m.ConnectGroupHeartbeatResponse(member_id=mid, member_epoch=LEAVE))


def _static_leave(g, req, ctx, cfg) -> Result:
    mid, gid = req.member_id, g.group_id
    meta = g.members.get(mid)
    if meta is None:
        return _hb_error(E.UNKNOWN_MEMBER_ID, "group %s has no member %s" % (gid, mid))
    if meta.instance_id != req.instance_id:
        return _hb_error(E.FENCED_INSTANCE_ID, "member %s is not instance %s"
                         % (mid, req.instance_id), mid)
    cur = g.current[mid]
    # Epoch -2 marks the temporary leave; the previous epoch keeps the real one for the
    # replacement. Its units stay held until it returns or its session expires.
    left = cur._replace(epoch=STATIC_LEAVE, previous_epoch=cur.epoch)
    events, ctimers, _ = _choose(g, g.members, g.epoch, g.target_epoch, ctx.now_ms, exclude=mid)
    tx = GroupTx(gid, ctx.now_ms)
    tx.emit(_rec_current(g, mid, left))
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
            if g.current[replaced].epoch != STATIC_LEAVE:
                return _hb_error(E.UNRELEASED_INSTANCE_ID,
                                 "instance %s is still used by member %s"
                                 % (req.instance_id, replaced), mid)
            base = g.members[replaced]
            old = g.current[replaced]
            cur = old._replace(epoch=old.previous_epoch)
        elif len(g.members) >= cfg.connect_max_size:
            return _hb_error(E.GROUP_MAX_SIZE_REACHED, "group %s has reached its maximum size "
                             "of %d workers" % (gid, cfg.connect_max_size), mid)
        else:
            cur = rc.NEW_MEMBER
    elif meta is None:
        return _hb_error(E.UNKNOWN_MEMBER_ID, "group %s has no member %s" % (gid, mid))
    else:
        if req.instance_id is not None and req.instance_id != meta.instance_id:
            return _hb_error(E.FENCED_INSTANCE_ID, "member %s is not instance %s"
                             % (mid, req.instance_id), mid)
        if req.member_epoch == 0 and cur.epoch == STATIC_LEAVE:
            cur = cur._replace(epoch=cur.previous_epoch)     # back from a temporary leave
        elif req.member_epoch != 0 and rc.check_member_epoch(cur, req.member_epoch, owned):
            # Fenced, not removed (docs/decisions.md, "Connect: a fenced heartbeat does not
            # remove the worker"): the request may be a late copy the live worker sent long
            # ago, and removing it would hand its work to others while it still runs it. A
            # worker that really is behind abandons its work and rejoins at epoch 0; one
            # that is gone is removed by its session timeout.
            return _hb_error(E.FENCED_MEMBER_EPOCH,
                             "member epoch %d does not match the current epoch %d; the member "
                             "must abandon its work and rejoin with epoch 0"
                             % (req.member_epoch, cur.epoch), mid)

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
        err = _check_assignors(members)
        if err:
            return _hb_error(E.UNSUPPORTED_ASSIGNOR, err, mid)
    bump = assignors_changed       # a join, or new assignors / reason / version / metadata
    tx = GroupTx(gid, now)
    _join_records(tx, g, req, mid, meta, new_meta, replaced, bump)
    recs = tx.records
    epoch = g.epoch + 1 if recs and type(recs[-1].key) is m.ConnectWorkerGroupMetadataKey \
        else g.epoch
    target = g.target.get(replaced if replaced is not None else mid, NO_TARGET)
    if replaced is not None and replaced in g.target:
        tx.emit(_rec_target(g, mid, target))
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
        events, ctimers, fatal = _choose(g, members, epoch, g.target_epoch, now,
                                         computing=computing)
    tx.schedule_all(ctimers)
    new_member = meta is None
    if fatal:
        # No worker can compute the target: keep the member where it is and say why.
        if new_member:
            tx.emit(_rec_current(g, mid, cur))
        tx.emit_all(events)          # (the choice's events follow the member's records)
        return tx.result(m.ConnectGroupHeartbeatResponse(
            error_code=int(E.UNSUPPORTED_ASSIGNOR), error_message=fatal, member_id=mid,
            member_epoch=cur.epoch, heartbeat_interval_ms=cfg.connect_heartbeat_interval_ms))

    # ---- reconciliation
    holders = g.holders if replaced is None else _Alias(g.holders, replaced, mid)
    acks = _acknowledging(req, meta, owned)
    nxt = rc.next_assignment(cur, g.target_epoch, target.units, acks, holders, mid)
    if nxt != cur or new_member:
        tx.emit(_rec_current(g, mid, nxt))
    rkey = TimerKey(REVOCATION, gid, mid)
    if nxt.state == rc.UNREVOKED and (cur.state != rc.UNREVOKED or req.member_epoch == 0):
        # (Re)armed by a join or rejoin too: a rejoin cannot acknowledge (_acknowledging) and
        # a return from a temporary leave had its timer cancelled.
        tx.schedule(rkey, now + new_meta.rebalance_timeout_ms)
    elif cur.state == rc.UNREVOKED and nxt.state != rc.UNREVOKED:
        tx.schedule(rkey, None)

    chosen = events[0].member_id if events else computing
    resp = m.ConnectGroupHeartbeatResponse(
        member_id=mid, member_epoch=nxt.epoch,
        heartbeat_interval_ms=cfg.connect_heartbeat_interval_ms)
    if chosen == mid:
        resp.error_code = int(E.COMPUTE_ASSIGNMENT)
        resp.error_message = "compute the target assignment for group epoch %d" % epoch
    # As consumer.heartbeat_response: also repeated while a revocation is pending, and (ours)
    # until the worker confirms it by reporting exactly that work as owned. The answer that
    # carried a change may have gone to a late copy of a request (the worker's retry already
    # answered, so it sees no failure and sends no full heartbeat): its later heartbeats omit
    # their owned set and it would never hear of work given to it (simulation, seed 502670).
    confirmed = owned == nxt.assigned
    repeat = mid in g.unconfirmed
    if req.member_epoch == 0 or nxt.assigned != cur.assigned or nxt.state == rc.UNREVOKED or \
            ((owned is not None or repeat) and not confirmed):
        resp.assignment = _response_assignment(g, nxt.assigned, target)
    unconfirmed = resp.assignment is not None and not confirmed
    if unconfirmed != repeat:
        tx.emit(Unconfirmed(group_id=gid, member_id=mid, unconfirmed=unconfirmed))
    tx.emit_all(events)              # (the choice's events follow the member's records)
    return tx.result(resp)


def _acknowledging(req, meta, owned):
    """The owned set that may acknowledge a pending revocation. Not that of an epoch-0
    heartbeat of a worker the group knows: a rejoin, or a late copy of its first join whose
    set predates work given to it since (the late copy released work its worker still ran:
    simulation, seeds 209968, 211303). The worker's next heartbeat at its epoch acknowledges."""
    return owned if req.member_epoch != 0 or meta is None else None


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
        tx.emit_all((_rec_current(g, replaced, None), _rec_target(g, replaced, None),
                     _rec_member(gid, replaced, None)))
    if new_meta is not meta and new_meta != meta:
        tx.emit(_rec_member(gid, mid, new_meta))
    cs = req.config_state
    if cs is not None and cs.config_offset > g.config_offset:
        conns = {c.name: c.task_count for c in cs.connectors}
        tx.emit(_rec_config(gid, cs.config_offset, conns))
        bump = bump or conns != g.connectors
    if bump:
        tx.emit(_rec_epoch(gid, g.epoch + 1))


def _check_assignors(members: dict) -> Optional[str]:
    """UNSUPPORTED_ASSIGNOR message when the workers share no assignor or the selected one's
    version ranges do not overlap."""
    name, why = select_assignor(members)
    if why:
        return why
    rs = [r for r in (_range_of(sig, name) for sig in _sigs(members)) if r is not None]
    if max(r[0] for r in rs) > min(r[1] for r in rs):
        return "the version ranges of assignor %s do not overlap: %s" % (
            name, _fmt_ranges(_ranges(members, name)))
    return None


# ----------------------------------------------------------------------------- prepare / install
def _check_chosen(shard, req, resp_cls):
    """The seed's checks shared by Prepare and Install, in its order. -> (group, error Result)"""
    def err(code, msg):
        return None, Result(resp_cls(error_code=int(code), error_message=msg))
    if not req.group_id:
        return err(E.INVALID_REQUEST, "GroupId can't be empty")
    if not req.member_id:
        return err(E.INVALID_REQUEST, "MemberId can't be empty")
    if req.member_epoch < 0:
        return err(E.INVALID_REQUEST, "MemberEpoch must be >= 0")
    g, why = _lookup(shard, req.group_id)
    if g is None:
        return err(E.GROUP_ID_NOT_FOUND, why)
    cur = g.current.get(req.member_id)
    if cur is None:
        return err(E.UNKNOWN_MEMBER_ID, "group %s has no member %s"
                   % (req.group_id, req.member_id))
    if cur.epoch != req.member_epoch:
        return err(E.FENCED_MEMBER_EPOCH, "member epoch %d does not match the current epoch %d"
                   % (req.member_epoch, cur.epoch))
    if g.computing != req.member_id:
        return err(E.UNKNOWN_MEMBER_ID, "member %s is not the worker chosen to compute the "
                   "assignment of group %s" % (req.member_id, req.group_id))
    return g, None


_NO_ASSIGNOR = m.ConnectWorkerGroupMemberMetadataValueAssignor()


def _prepare(shard, req, ctx) -> Result:
    g, err = _check_chosen(shard, req, m.ConnectGroupPrepareAssignmentResponse)
    if err:
        return err
    name, _ = select_assignor(g.members)
    M = m.ConnectGroupPrepareAssignmentResponseMember
    CT = m.ConnectGroupPrepareAssignmentResponseConnectorTasks
    out = []
    for mid in sorted(g.members):
        meta = g.members[mid]
        # A classic worker (migration) lists no assignor: it is given version 0, no metadata.
        a = next((a for a in meta.client_assignors if a.name == name), _NO_ASSIGNOR)
        conns, tasks = g.wire(g.target.get(mid, NO_TARGET).units)
        out.append(M(member_id=mid, member_epoch=g.current[mid].epoch,
                     instance_id=meta.instance_id, worker_url=meta.worker_url,
                     assignor=m.ConnectGroupPrepareAssignmentResponseMemberAssignor(
                         version=a.version, reason=a.reason, metadata=a.metadata),
                     connectors_and_tasks=m.ConnectGroupPrepareAssignmentResponseConnectorsAndTasks(
                         connectors=conns, tasks=[CT(connector=c, task_ids=t) for c, t in tasks])))
    connectors = tuple(sorted(g.connectors.items()))
    C = m.ConnectGroupPrepareAssignmentResponseConnectorConfig
    resp = m.ConnectGroupPrepareAssignmentResponse(
        group_epoch=g.epoch, assignor_name=name, coordinator_time_ms=ctx.now_ms,
        assignor_state=g.assignor_state, config_offset=g.config_offset,
        connectors=[C(name=n, task_count=c) for n, c in connectors], members=out)
    tx = GroupTx(g.group_id, ctx.now_ms)
    tx.emit(Prepared(group_id=g.group_id, epoch=g.epoch, member_ids=tuple(sorted(g.members)),
                     connectors=connectors, assignor=name))
    return tx.result(resp)


def _install_error(code, msg):
    return Result(m.ConnectGroupInstallAssignmentResponse(error_code=int(code),
                                                          error_message=msg))


def _violations(req, p: Prepared) -> list:
    """The seed's Assignment Validation against the prepared metadata: every worker a member,
    listed once; every connector/task known, assigned once; everything assigned unless a
    delayed rebalance is requested."""
    layout, n_units = {}, 0
    for name, count in p.connectors:
        layout[name] = (n_units, count)
        n_units += count + 1
    label = [None] * n_units
    for name, (b, count) in layout.items():
        label[b] = "connector %s" % name
        for t in range(count):
            label[b + 1 + t] = "task %s-%d" % (name, t)
    members, seen, problems = set(p.member_ids), set(), []
    indptr, units, who = [0], [], []
    for mem in req.members:
        mid = p.current_id(mem.member_id)
        if mid not in members:
            problems.append("%r is not a worker of group epoch %d" % (mem.member_id, p.epoch))
        elif mid in seen:
            problems.append("worker %s is listed twice" % mem.member_id)
        seen.add(mid)
        ct = mem.connectors_and_tasks
        for name in ct.connectors:
            if name in layout:
                units.append(layout[name][0])
            else:
                problems.append("unknown connector %r (assigned to %s)" % (name, mem.member_id))
        for t in ct.tasks:
            if t.connector not in layout:
                problems.append("tasks of unknown connector %r (assigned to %s)"
                                % (t.connector, mem.member_id))
                continue
            b, count = layout[t.connector]
            for tid in t.task_ids:
                if 0 <= tid < count:
                    units.append(b + 1 + tid)
                else:
                    problems.append("unknown task %s-%d (assigned to %s)"
                                    % (t.connector, tid, mem.member_id))
        indptr.append(len(units))
        who.append(mem.member_id)
    # Work may stay unassigned only while the assignor holds it for a departed worker, which
    # it says by asking for a delayed rebalance (KIP-415; the seed's "worker leaves" target).
    v = kernels.validate(indptr, units, n_units, require_all=req.rebalance_delay_ms < 0,
                         max_violations=10, want_owner=False)
    for x in v.violations:
        if x.kind == kernels.ViolationKind.DUPLICATE:
            problems.append("%s is assigned to %s and %s" % (label[x.unit], who[x.other],
                                                             who[x.member]))
        elif x.kind == kernels.ViolationKind.UNASSIGNED:
            problems.append("%s is not assigned" % label[x.unit])
    return problems


def _install(shard, req, ctx) -> Result:
    g, err = _check_chosen(shard, req, m.ConnectGroupInstallAssignmentResponse)
    if err:
        return err
    p = g.prepared
    if p is None:
        return _install_error(E.INVALID_REQUEST, "no assignment was prepared: call "
                              "ConnectGroupPrepareAssignment first")
    if req.group_epoch != p.epoch:
        return _install_error(E.STALE_MEMBER_EPOCH, "GroupEpoch %d is not the prepared group "
                              "epoch %d: prepare again" % (req.group_epoch, p.epoch))
    gid, now = g.group_id, ctx.now_ms
    tx = GroupTx(gid, now)
    if req.error != 0:
        # The assignor failed: keep the current target, marked with its error, at the
        # prepared epoch, so that the group does not ask for the same computation again.
        tx.emit(_rec_target_meta(gid, p.epoch, req.error, p.assignor, g.assignor_state,
                                 g.rebalance_deadline_ms))
        return _installed(tx, g, p)
    problems = _violations(req, p)
    if problems:
        more = len(problems) - 5
        return _install_error(E.INVALID_ASSIGNMENT, "invalid assignment: " + "; ".join(
            problems[:5]) + (" (and %d more)" % more if more > 0 else ""))
    listed = {p.current_id(mem.member_id): mem for mem in req.members}
    for mid in sorted(g.members):
        mem = listed.get(mid)
        if mem is not None:
            ct = mem.connectors_and_tasks
            new = TargetEntry(g.units(ct.connectors, ct.tasks), mem.version, mem.metadata)
        elif mid in p.member_ids:
            new = NO_TARGET
        else:
            continue                    # joined after the prepare: the next target has it
        if g.target.get(mid, NO_TARGET) != new:
            tx.emit(_rec_target(g, mid, new))
    deadline = now + req.rebalance_delay_ms if req.rebalance_delay_ms >= 0 else -1
    tx.emit(_rec_target_meta(gid, p.epoch, 0, p.assignor, req.assignor_state, deadline))
    return _installed(tx, g, p, (TimerKey(DELAYED, gid), deadline if deadline >= 0 else None))


def _installed(tx: GroupTx, g, p, delayed=None) -> Result:
    """The install's end, after its target records: the chosen worker's deadline cancelled,
    the delayed-rebalance timer (``delayed``: its operation, if the install sets one), and the
    choice of a worker for what is left to compute (none: nobody computes)."""
    events, ctimers, _ = _choose(g, g.members, g.epoch, p.epoch, tx.now, computing=None)
    tx.schedule(TimerKey(ASSIGNMENT, g.group_id), None)
    if delayed is not None:
        tx.schedule(*delayed)
    tx.schedule_all(ctimers)
    tx.emit_all(events or (ChooseWorker(group_id=g.group_id, member_id=None),))
    return tx.result(m.ConnectGroupInstallAssignmentResponse())


# ----------------------------------------------------------------------------- describe
def _describe(shard, req, ctx) -> Result:
    out = []
    G = m.ConnectGroupDescribeResponseDescribedGroup
    for gid in req.group_ids:
        g, why = _lookup(shard, gid)
        if g is None:
            out.append(G(error_code=int(E.GROUP_ID_NOT_FOUND), error_message=why,
                         group_id=gid))
            continue
        name, _ = select_assignor(g.members)
        members = []
        for mid in sorted(g.members):
            meta = g.members[mid]
            members.append(m.ConnectGroupDescribeResponseMember(
                member_id=mid, instance_id=meta.instance_id, worker_url=meta.worker_url,
                client_id=meta.client_id, client_host=meta.client_host,
                member_epoch=g.current[mid].epoch,
                assignment=_describe_units(g, g.current[mid].assigned),
                target_assignment=_describe_units(g, g.target.get(mid, NO_TARGET).units)))
        out.append(G(group_id=gid, group_state=g.state_name(), group_epoch=g.epoch,
                     assignment_epoch=g.target_epoch, assignor_name=name or "",
                     config_offset=g.config_offset, members=members))
    return Result(m.ConnectGroupDescribeResponse(groups=out))


def _describe_units(g, units):
    conns, tasks = g.wire(units)
    T = m.ConnectGroupDescribeResponseConnectorTasks
    return m.ConnectGroupDescribeResponseConnectorsAndTasks(
        connectors=conns, tasks=[T(connector=c, task_ids=t) for c, t in tasks])


# ----------------------------------------------------------------------------- timers
def _member_timer(shard, key, now_ms, want_unrevoked: bool) -> Result:
    g = shard.groups.get(key.group_id)
    if g is None or g.TYPE != "connect" or key.member_id not in g.members:
        return EMPTY
    if want_unrevoked and g.current[key.member_id].state != rc.UNREVOKED:
        return EMPTY
    tx = GroupTx(g.group_id, now_ms)
    _remove(tx, g, key.member_id, shard.config)
    return tx.result()


def _session_expired(shard, key, now_ms) -> Result:
    return _member_timer(shard, key, now_ms, False)


def _revocation_expired(shard, key, now_ms) -> Result:
    return _member_timer(shard, key, now_ms, True)


def _assignment_expired(shard, key, now_ms) -> Result:
    """The chosen worker did not install in time: choose another (it if none other fits)."""
    g = shard.groups.get(key.group_id)
    if g is None or g.TYPE != "connect" or g.computing is None:
        return EMPTY
    events, timers, _ = _choose(g, g.members, g.epoch, g.target_epoch, now_ms,
                                exclude=g.computing)
    tx = GroupTx(g.group_id, now_ms)
    tx.emit_all(events)
    tx.schedule_all(timers)
    return tx.result()


def _delayed_rebalance(shard, key, now_ms) -> Result:
    """The assignor's delayed rebalance is due: a new group epoch asks for a new target (not
    when one is already pending, e.g. a re-armed past deadline after a restart)."""
    g = shard.groups.get(key.group_id)
    if g is None or g.TYPE != "connect" or g.rebalance_deadline_ms < 0 \
            or now_ms < g.rebalance_deadline_ms or g.epoch != g.target_epoch:
        return EMPTY
    events, timers, _ = _choose(g, g.members, g.epoch + 1, g.target_epoch, now_ms)
    tx = GroupTx(g.group_id, now_ms)
    tx.emit(_rec_epoch(g.group_id, g.epoch + 1))
    tx.emit_all(events)
    tx.schedule_all(timers)
    return tx.result()


# ----------------------------------------------------------------------------- replay
def _group(shard, gid: str) -> ConnectGroup:
    g = shard.groups.get(gid)
    if g is None or classic.is_offsets_only(g):
        g = shard.groups[gid] = ConnectGroup(gid)
        g.session_ms = shard.config.connect_session_timeout_ms
    return g


def _replay_epoch(shard, key, value):
    if value is None:
        shard.groups.pop(key.group_id, None)
    else:
        _group(shard, key.group_id).epoch = value.epoch


def _replay_member(shard, key, value):
    g = _group(shard, key.group_id)
    old = g.members.pop(key.member_id, None)
    if value is None:
        g.unconfirmed.discard(key.member_id)
    if old is not None and old.instance_id is not None \
            and g.static.get(old.instance_id) == key.member_id:
        del g.static[old.instance_id]
    if value is not None:
        g.members[key.member_id] = value
        if value.instance_id is not None:
            g.static[value.instance_id] = key.member_id


def _replay_config(shard, key, value):
    g = _group(shard, key.group_id)
    if value is None:
        g.config_offset, g.connectors = -1, {}
        return
    g.config_offset = value.config_offset
    g.connectors = {c.name: c.task_count for c in value.connectors}
    for c in value.connectors:
        g.register(c.name)


def _replay_target_meta(shard, key, value):
    g = _group(shard, key.group_id)
    if value is None:
        value = m.ConnectWorkerGroupTargetAssignmentMetadataValue()
    g.target_epoch = value.assignment_epoch
    g.target_error = value.assignment_error
    g.assignor_name = value.assignor_name
    g.assignor_state = value.assignor_state
    g.rebalance_deadline_ms = value.rebalance_deadline_ms


def _replay_target(shard, key, value):
    g = _group(shard, key.group_id)
    if value is None:
        g.target.pop(key.member_id, None)
    else:
        g.target[key.member_id] = TargetEntry(
            g.units(value.connectors, value.tasks, intern=True), value.version, value.metadata)


def _replay_current(shard, key, value):
    g = _group(shard, key.group_id)
    mid = key.member_id
    old = g.current.pop(mid, None)
    new = None
    if value is not None:
        new = rc.MemberAssignment(
            value.member_epoch, value.previous_member_epoch, value.state,
            g.units(value.connectors, value.tasks, intern=True),
            g.units(value.connectors_pending_revocation, value.tasks_pending_revocation,
                    intern=True))
        g.current[mid] = new
    rc.update_holders(g.holders, mid, old, new)


def _replay_choose(shard, ev, _):
    g = shard.groups.get(ev.group_id)
    if g is not None:
        g.computing = ev.member_id
        g.prepared = None
        if ev.member_id is not None:
            g.leader = ev.member_id


def _replay_prepared(shard, ev, _):
    g = shard.groups.get(ev.group_id)
    if g is not None:
        g.prepared = ev
