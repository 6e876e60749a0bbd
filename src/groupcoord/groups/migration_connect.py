"""Online migration between classic Connect groups and connect worker groups.

The connect counterpart of migration.py (docs/coordinator-migration.md, "Connect groups"):

  classic, Empty (any protocol type) --ConnectGroupHeartbeat epoch 0--> connect group (the
                                                                        classic group is
                                                                        tombstoned)
  classic, workers, protocol type    --ConnectGroupHeartbeat epoch 0--> connect group: every
  "connect"                                                             classic worker becomes a
                                                                        member "using the classic
                                                                        protocol", then the
                                                                        heartbeat joins as usual
  classic, anything else             --ConnectGroupHeartbeat----------> GROUP_ID_NOT_FOUND

Upgrade records, in order: the GroupMetadata tombstone; per classic worker its member metadata
(url from its ConnectWorkerMetadata, no client assignors, classic_member_metadata = session
timeout + the protocols it offered); the group epoch (= the classic generation); per worker its
target (= what it owns); the target metadata at the generation; per worker its current
assignment (STABLE at the generation). The coordinator knows no connector configuration yet
(config offset -1): the joiner's ConfigState bumps the epoch and a new-protocol worker
computes. Then the joining heartbeat is handled by connect.py on the converted group.

What a classic worker owns: eager "default" (v0) assignments are complete; the incremental
protocols (v1 "compatible", v2 "sessioned") send deltas, so a worker owns its join-time
allocation (in its metadata) plus what its last SyncGroup assigned minus what it revoked.
Classic Connect assignments list a connector itself as task id -1 (ConnectProtocol's
CONNECTOR_TASK); our units use sub = task + 1, so the connector (-1) is sub 0.

Classic workers inside a connect group (routing.py sends JoinGroup/SyncGroup/Heartbeat/
LeaveGroup here when a connect group holds the id):
  JoinGroup   answered at once: generation = member epoch (after reconciling towards the
              target with what it owns), leader = the new-protocol worker last chosen to
              compute (never itself: it must not run an assignor), no members
  SyncGroup   its assignment as a ConnectWorkerAssignment in its protocol's version: v0 the
              full set; v1+ the units newly assigned since its join and the ones to revoke
  Heartbeat   REBALANCE_IN_PROGRESS while it is not STABLE at the target epoch, else NONE
  LeaveGroup  removed like a leaving worker (epoch bump)
Classic workers never compute the target: connect.py's worker selection only considers
members without classic_member_metadata.

Downgrade: when a removal leaves only classic workers (nobody could compute any more) and they
share a protocol, the same Result converts the group back to a classic Connect group in
PreparingRebalance (see the downgrade section below).

Handlers only: every change is expressed as connect records replayed by connect.py. This
module builds on connect_group.py (the model) and migration.py (the classic side shared with
consumer groups); connect.py imports it for the upgrade and the downgrade, routing.py for
the classic workers' requests.
"""
from __future__ import annotations

from typing import Optional

from groupcoord.groups import classic, ids
from groupcoord.groups import reconcile as rc
from groupcoord.groups.connect_group import (_CTL, ASSIGNMENT, DELAYED, NO_TARGET,
                                                  REVOCATION, SESSION, UNKNOWN_UNIT,
                                                  _allocation_pairs, _choose, _ctl, _leader,
                                                  _new_protocol, _pairs, _protocol_version,
                                                  _rec_current, _rec_epoch, _rec_member,
                                                  _rec_target_meta, _units, _wire,
                                                  uses_classic, validate_first_heartbeat,
                                                  worker_tombstones)
from groupcoord.groups.errors import Reject
from groupcoord.groups.migration import classic_member_id, drop_classic
from groupcoord.groups.records import Record
from groupcoord.groups.result import Result, TimerKey
from groupcoord.groups.tx import GroupTx
from groupcoord.protocol import ProtocolError, embedded
from groupcoord.protocol import messages as m
from groupcoord.protocol.error_codes import ErrorCode as E

__all__ = ["upgrade", "maybe_downgrade", "remove_members", "classic_join", "classic_sync",
           "classic_heartbeat", "classic_leave", "CONNECT_PROTOCOL_TYPE"]

CONNECT_PROTOCOL_TYPE = "connect"
_Classic = m.ConnectWorkerGroupMemberMetadataValueClassicMemberMetadata
_Proto = m.ConnectWorkerGroupMemberMetadataValueClassicProtocol


# ====================================================================== upgrade
def upgrade(tx: GroupTx, shard, group, req) -> None:
    """Stage in ``tx`` the conversion of ``group`` (a classic group holding the id of the
    joining ConnectGroupHeartbeat ``req``, already validated) into a connect group; Reject,
    with nothing staged, when it cannot be (GROUP_ID_NOT_FOUND, INVALID_REQUEST,
    GROUP_MAX_SIZE_REACHED). connect.py then runs the heartbeat on the converted group."""
    gid = req.group_id
    if req.member_epoch != 0 or not isinstance(group, classic.ClassicGroup):
        raise Reject(E.GROUP_ID_NOT_FOUND, "group %s is a %s group, not a connect group"
                     % (gid, group.TYPE))
    why = validate_first_heartbeat(req)
    if why:
        raise Reject(E.INVALID_REQUEST, why)
    if group.members and group.protocol_type() != CONNECT_PROTOCOL_TYPE:
        raise Reject(E.GROUP_ID_NOT_FOUND, "Cannot upgrade classic group %s to a connect "
                     "group: its protocol type is %r, not 'connect'."
                     % (gid, group.protocol_type()))
    cfg = shard.config
    if len(group.members) >= cfg.connect_max_size:
        raise Reject(E.GROUP_MAX_SIZE_REACHED, "group %s has reached its maximum size of %d "
                     "workers" % (gid, cfg.connect_max_size))
    decoded = [(mb, _decode_worker(group, mb)) for mb in group.members.values()]
    drop_classic(tx, group)
    if decoded:
        tx.emit_all(_convert(group, decoded))
        for mb, _ in decoded:
            tx.schedule(TimerKey(SESSION, gid, mb.member_id), tx.now + mb.session_timeout)


def _decode_worker(g, mb) -> tuple:
    """(url, owned pairs) of a classic worker, from its metadata for the group's protocol
    (its first protocol before any generation) and its last assignment."""
    md = mb.metadata(g.protocol) if g.protocol is not None else \
        (mb.protocols[0][1] if mb.protocols else b"")
    try:
        version, wm = embedded.decode_connect_metadata(md)
        owned = _allocation_pairs(md) if version >= 1 else []
        if mb.assignment:
            _, a = embedded.decode_connect_assignment(mb.assignment)
            revoked = set(_pairs(a.revoked))
            got = _pairs(a.assignment)
            owned = got if version == 0 else \
                [p for p in dict.fromkeys(owned + got) if p not in revoked]
    except ProtocolError as exc:    # the bytes are not the Connect protocol
        raise Reject(E.GROUP_ID_NOT_FOUND, "Cannot upgrade classic group %s to a connect "
                     "group: worker %s's metadata or assignment is not a valid Connect "
                     "protocol message (%s)." % (g.group_id, mb.member_id, exc)) from None
    return wm.url, owned


def classic_meta(url, instance_id, client_id, client_host, rebalance_timeout, session_timeout,
                 protocols):
    return m.ConnectWorkerGroupMemberMetadataValue(
        instance_id=instance_id, worker_url=url, client_id=client_id, client_host=client_host,
        rebalance_timeout_ms=rebalance_timeout, client_assignors=[],
        classic_member_metadata=_Classic(
            session_timeout_ms=session_timeout,
            supported_protocols=[_Proto(name=n, metadata=md) for n, md in protocols]))


def _convert(g, decoded) -> list:
    gid, gen = g.group_id, g.generation
    taken: set = set()
    owned_of = {}
    for mb, (_, owned) in decoded:
        mine = []
        for p in owned:
            if p not in taken:       # given twice by a faulty leader: the first worker keeps it
                taken.add(p)
                mine.append(p)
        owned_of[mb.member_id] = _wire(mine)
    recs = [_rec_member(gid, mb.member_id, classic_meta(
        url, mb.instance_id, mb.client_id, mb.client_host, mb.rebalance_timeout,
        mb.session_timeout, mb.protocols)) for mb, (url, _) in decoded]
    recs.append(_rec_epoch(gid, gen))
    T = m.ConnectWorkerGroupTargetAssignmentMemberValueConnectorTasks
    C = m.ConnectWorkerGroupCurrentMemberAssignmentValueConnectorTasks
    for mid, (conns, tasks) in owned_of.items():
        recs.append(Record(m.ConnectWorkerGroupTargetAssignmentMemberKey(gid, mid),
                           m.ConnectWorkerGroupTargetAssignmentMemberValue(
                               connectors=conns, tasks=[T(connector=c, task_ids=t)
                                                        for c, t in tasks])))
    recs.append(_rec_target_meta(gid, gen, 0, None, None, -1))
    for mid, (conns, tasks) in owned_of.items():
        recs.append(Record(m.ConnectWorkerGroupCurrentMemberAssignmentKey(gid, mid),
                           m.ConnectWorkerGroupCurrentMemberAssignmentValue(
                               member_epoch=gen, previous_member_epoch=gen, state=rc.STABLE,
                               connectors=conns,
                               tasks=[C(connector=c, task_ids=t) for c, t in tasks])))
    return recs


# ====================================================================== classic workers
def _join_error(v, code, member_id=""):
    return Result(classic._join_error(v, code, member_id))


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
        owned_pairs = _allocation_pairs(md)
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
            return _join_error(v, E.FENCED_INSTANCE_ID, mid)
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
        tx.emit(_rec_member(gid, mid, new_meta))
    epoch = g.epoch
    if meta is None:                # a join bumps the epoch; a new-protocol worker computes
        epoch += 1
        tx.emit(_rec_epoch(gid, epoch))
        members = dict(g.members)
        members[mid] = new_meta
        events, ctimers, _ = _choose(g, members, epoch, g.target_epoch, now)
        tx.emit_all(events)
        tx.schedule_all(ctimers)
    # Eager (v0) workers revoke everything before joining; v1+ report their allocation.
    owned = _units(g, owned_pairs) if meta is not None else rc.EMPTY_SET
    target = g.target.get(mid, NO_TARGET)
    nxt = rc.next_assignment(cur, g.target_epoch, target.units, owned, g.holders, mid)
    if nxt != cur or meta is None:
        tx.emit(_rec_current(g, mid, nxt))
    rkey = TimerKey(REVOCATION, gid, mid)
    if nxt.state == rc.UNREVOKED and (cur.state != rc.UNREVOKED or meta is None):
        tx.schedule(rkey, now + rt)
    elif cur.state == rc.UNREVOKED and nxt.state != rc.UNREVOKED:
        tx.schedule(rkey, None)
    leader, _ = _leader(g)
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
    version = _protocol_version(name, md)
    if version == 0:
        assigned, revoked = a.assigned, None
    else:
        owned = _units(g, _allocation_pairs(md)) - {UNKNOWN_UNIT}
        assigned, revoked = a.assigned - owned, _ctl(g, owned - a.assigned)
    leader, url = _leader(g)
    blob = embedded.encode_connect_assignment(m.ConnectWorkerAssignment(
        error=0, leader=leader, leader_url=url, config_offset=g.config_offset,
        assignment=_ctl(g, assigned), revoked=revoked, delay=0), version)
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
    resp = classic.leave_response(v, who, codes)
    if not leaving:
        return Result(resp)
    tx = GroupTx(g.group_id, ctx.now_ms)
    remove_members(tx, g, leaving, shard.config)
    return tx.result(resp)


def remove_members(tx: GroupTx, g, mids, cfg=None) -> None:
    """Stage the removal of several workers at once (one epoch bump); back to a classic
    group when only classic workers remain (maybe_downgrade)."""
    members = g.members.copy()        # keeps the assignor signature counts
    for mid in mids:
        worker_tombstones(tx, g, mid)
        members.pop(mid, None)
    tx.emit(_rec_epoch(g.group_id, g.epoch + 1))
    computing = None if g.computing in mids else ""
    events, ctimers, _ = _choose(g, members, g.epoch + 1, g.target_epoch, tx.now,
                                 computing=computing)
    tx.emit_all(events)
    tx.schedule_all(ctimers)
    maybe_downgrade(tx, g, members, g.epoch + 1, cfg)


# ====================================================================== downgrade
# When a removal (epoch -1 leave, session expiry, fencing, revocation timeout, classic
# LeaveGroup) leaves only classic workers, nobody can compute a target any more: the group
# goes back to a classic Connect group, in the same Result, so that the workers' classic
# rebalance assigns what the departed workers ran. Records after the removal's own:
#   per remaining worker: current assignment, target and member metadata tombstones;
#   target metadata, connector configuration and group epoch tombstones (the epoch last: its
#   replay drops the connect group);
#   one GroupMetadataValue: protocol type "connect", generation = the group epoch after the
#   removal, protocol voted as classic groups do over the workers' saved protocols, leader =
#   first worker by id, subscription = its saved metadata for that protocol, assignment =
#   what it holds as a ConnectWorkerAssignment in that protocol's version;
#   the volatile RebalanceStarted: PreparingRebalance, the workers must rejoin.
# Not when a new-protocol worker remains, when the workers share no protocol or when they
# exceed group_max_size: the group stays a connect group (its classic workers keep their
# targets) until a later removal or a new-protocol worker's join changes that.

def maybe_downgrade(tx: GroupTx, g, members, epoch: int, cfg) -> None:
    """``members``: the workers left after a removal (staged in ``tx``) taking the group to
    ``epoch``. Stage the conversion to a classic group when it applies."""
    if not members or _new_protocol(members):
        return                   # empty, or someone speaks ConnectGroupHeartbeat: stay
    if cfg is not None and len(members) > cfg.group_max_size:
        return
    workers = [_as_classic_worker(g, mid, members[mid]) for mid in sorted(members)]
    common = set(n for n, _ in workers[0].protocols)
    for mb in workers[1:]:
        common &= set(n for n, _ in mb.protocols)
    if not common:
        return                   # no protocol every worker speaks: a classic group can't form
    _downgrade(tx, g, members, workers, epoch)


def _as_classic_worker(g, mid, meta):
    cm = meta.classic_member_metadata
    return classic.Member(mid, meta.instance_id, meta.client_id, meta.client_host,
                          cm.session_timeout_ms, meta.rebalance_timeout_ms,
                          tuple((p.name, bytes(p.metadata)) for p in cm.supported_protocols))


def _downgrade(tx: GroupTx, g, members, workers, epoch) -> None:
    gid, now = g.group_id, tx.now
    for mb in workers:
        worker_tombstones(tx, g, mb.member_id)
    tx.emit_all((Record(m.ConnectWorkerGroupTargetAssignmentMetadataKey(group_id=gid), None),
                 Record(m.ConnectWorkerGroupConnectorsTasksMetadataKey(group_id=gid), None),
                 Record(m.ConnectWorkerGroupMetadataKey(group_id=gid), None)))
    tx.schedule(TimerKey(ASSIGNMENT, gid), None)
    tx.schedule(TimerKey(DELAYED, gid), None)
    protocol = classic._select_protocol(workers)
    leader = workers[0]
    leader_url = members[leader.member_id].worker_url or ""
    value = m.GroupMetadataValue(
        protocol_type=CONNECT_PROTOCOL_TYPE, generation=epoch, protocol=protocol,
        leader=leader.member_id, current_state_timestamp=now,
        members=[m.GroupMetadataValueMemberMetadata(
            member_id=mb.member_id, group_instance_id=mb.instance_id, client_id=mb.client_id,
            client_host=mb.client_host, rebalance_timeout=mb.rebalance_timeout,
            session_timeout=mb.session_timeout, subscription=mb.metadata(protocol),
            assignment=_held_assignment(g, mb, protocol, leader.member_id, leader_url))
            for mb in workers])
    tx.emit(Record(m.GroupMetadataKey(group=gid), value))
    # As Kafka after a downgrade: a rebalance, the workers rejoin as plain classic workers.
    deadline = now + max(mb.rebalance_timeout for mb in workers)
    tx.emit(classic.RebalanceStarted(gid, deadline, -1, now))
    tx.schedule(TimerKey(classic.JOIN, gid), deadline)
    for mb in workers:
        tx.schedule(TimerKey(classic.SESSION, gid, mb.member_id), now + mb.session_timeout)


def _held_assignment(g, mb, protocol, leader, leader_url) -> bytes:
    """What the worker holds (assigned + pending revocation) as a ConnectWorkerAssignment in
    the version of ``protocol``. For v1+ (deltas) the revoked list is its join-time allocation
    minus what it holds, so that allocation + assignment - revoked (how an upgrade reads a
    classic worker, ``_decode_worker``) is exactly what it holds."""
    md = mb.metadata(protocol)
    version = _protocol_version(protocol, md)
    held = g.names(g.current[mb.member_id].held)
    revoked = None
    if version >= 1:
        try:
            alloc = _allocation_pairs(md)
        except ProtocolError:        # saved metadata without a readable allocation
            alloc = []
        kept = set(held)
        revoked = _ctl_of_pairs(p for p in dict.fromkeys(alloc) if p not in kept)
    return embedded.encode_connect_assignment(m.ConnectWorkerAssignment(
        error=0, leader=leader, leader_url=leader_url, config_offset=g.config_offset,
        assignment=_ctl_of_pairs(held), revoked=revoked, delay=0), version)


def _ctl_of_pairs(pairs) -> list:
    by: dict = {}
    for c, t in pairs:
        by.setdefault(c, []).append(t)
    return [_CTL(connector=c, tasks=sorted(ts)) for c, ts in sorted(by.items())]
