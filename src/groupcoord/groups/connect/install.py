"""ConnectGroupPrepareAssignment (api key 10001) and ConnectGroupInstallAssignment (10002): the
chosen worker reads what it needs to compute the target and installs it, validated against
what it was handed; the chosen worker's deadline and the assignor's delayed rebalance."""
from __future__ import annotations


from groupcoord.assign import kernels
from groupcoord.groups.connect.group import (ASSIGNMENT, DELAYED, NO_TARGET, UNITS, Prepared,
                                             TargetEntry, lookup, rec_epoch, rec_target,
                                             rec_target_meta)
from groupcoord.groups.connect.selection import ChooseWorker, choose_worker, select_assignor
from groupcoord.groups.lifecycle import ASSIGNMENT_COMPUTED, Event
from groupcoord.groups.modern.group import rebalance_started, settle
from groupcoord.groups.result import EMPTY, Result, TimerKey
from groupcoord.groups.tx import GroupTx
from groupcoord.protocol import messages as m
from groupcoord.protocol.error_codes import ErrorCode as E


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
    g, why = lookup(shard, req.group_id)
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
        tx.emit(rec_target_meta(gid, p.epoch, req.error, p.assignor, g.assignor_state,
                                 g.rebalance_deadline_ms))
        return _installed(tx, g, p, req)
    problems = _violations(req, p)
    if problems:
        more = len(problems) - 5
        return _install_error(E.INVALID_ASSIGNMENT, "invalid assignment: " + "; ".join(
            problems[:5]) + (" (and %d more)" % more if more > 0 else ""))
    listed = {p.current_id(mem.member_id): mem for mem in req.members}
    moved = 0
    for mid in sorted(g.members):
        mem = listed.get(mid)
        if mem is not None:
            ct = mem.connectors_and_tasks
            new = TargetEntry(g.units(ct.connectors, ct.tasks), mem.version, mem.metadata)
        elif mid in p.member_ids:
            new = NO_TARGET
        else:
            continue                    # joined after the prepare: the next target has it
        old = g.target.get(mid, NO_TARGET)
        if old != new:
            tx.emit(rec_target(g, mid, new))
            moved += len(new.units - old.units)
    deadline = now + req.rebalance_delay_ms if req.rebalance_delay_ms >= 0 else -1
    tx.emit(rec_target_meta(gid, p.epoch, 0, p.assignor, req.assignor_state, deadline))
    return _installed(tx, g, p, req, moved,
                      (TimerKey(DELAYED, gid), deadline if deadline >= 0 else None))


def _installed(tx: GroupTx, g, p, req, moved: int = 0, delayed=None) -> Result:
    """The install's end, after its target records: the chosen worker's deadline cancelled,
    the delayed-rebalance timer (``delayed``: its operation, if the install sets one), and the
    choice of a worker for what is left to compute (none: nobody computes). ``moved``: units
    the new target gives to another worker (for the lifecycle log)."""
    events, ctimers, _ = choose_worker(g, g.members, g.epoch, p.epoch, tx.now, computing=None)
    tx.schedule(TimerKey(ASSIGNMENT, g.group_id), None)
    if delayed is not None:
        tx.schedule(*delayed)
    tx.schedule_all(ctimers)
    tx.emit_all(events or (ChooseWorker(group_id=g.group_id, member_id=None),))
    tx.note(Event(kind=ASSIGNMENT_COMPUTED, group=g.group_id, type="connect", epoch=p.epoch,
                  members=len(g.members), units_moved=moved, unit=UNITS, assignor=p.assignor,
                  worker=req.member_id, error=req.error))
    settle(tx, g, "connect", epoch=g.epoch, target_epoch=p.epoch, members=len(g.members),
           changed={}, moved=moved, unit=UNITS)
    return tx.result(m.ConnectGroupInstallAssignmentResponse())


def _assignment_expired(shard, key, now_ms) -> Result:
    """The chosen worker did not install in time: choose another (it if none other fits)."""
    g = shard.groups.get(key.group_id)
    if g is None or g.TYPE != "connect" or g.computing is None:
        return EMPTY
    events, timers, _ = choose_worker(g, g.members, g.epoch, g.target_epoch, now_ms,
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
    events, timers, _ = choose_worker(g, g.members, g.epoch + 1, g.target_epoch, now_ms)
    tx = GroupTx(g.group_id, now_ms)
    tx.emit(rec_epoch(g.group_id, g.epoch + 1))
    tx.emit_all(events)
    tx.schedule_all(timers)
    why = ("delayed", "")
    rebalance_started(tx, "connect", g.epoch + 1, why, len(g.members))
    settle(tx, g, "connect", epoch=g.epoch + 1, target_epoch=g.target_epoch,
           members=len(g.members), changed={}, why=why, unit=UNITS)
    return tx.result()
