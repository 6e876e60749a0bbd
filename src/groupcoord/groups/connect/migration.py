"""Online migration between classic Connect groups and connect worker groups.

The connect counterpart of consumer/migration.py (docs/coordinator-migration.md, "Connect groups"):

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

Classic workers inside a connect group (their JoinGroup, SyncGroup, Heartbeat, LeaveGroup)
are connect/classic_members.py's; it uses classic_meta and remove_members from here.

Downgrade: when a removal leaves only classic workers (nobody could compute any more) and they
share a protocol, the same Result converts the group back to a classic Connect group in
PreparingRebalance (see the downgrade section below).

Handlers only: every change is expressed as connect records replayed by connect/replay.py.
This module builds on connect/group.py and connect/selection.py (the model) and
classic/rebalance.py's drop_classic; connect/heartbeat.py imports it for the upgrade and the
downgrade, connect/classic_members.py for the classic workers' requests.
"""
from __future__ import annotations


from groupcoord.groups.classic.events import RebalanceStarted
from groupcoord.groups.classic.group import ClassicGroup, Member
from groupcoord.groups.classic.rebalance import select_protocol
from groupcoord.groups.modern import reconcile as rc
from groupcoord.groups.connect.group import (ASSIGNMENT, CTL, DELAYED, SESSION, allocation_pairs,
                                             pairs, pairs_to_wire, protocol_version, rec_epoch,
                                             rec_member, rec_target_meta,
                                             validate_first_heartbeat, worker_tombstones)
from groupcoord.groups.connect.selection import choose_worker, new_protocol_workers
from groupcoord.groups.errors import Reject
from groupcoord.groups.classic.rebalance import drop_classic
from groupcoord.groups.records import Record
from groupcoord.groups.result import TimerKey
from groupcoord.groups.timers import CLASSIC_JOIN, CLASSIC_SESSION
from groupcoord.groups.tx import GroupTx
from groupcoord.protocol import ProtocolError, embedded
from groupcoord.protocol import messages as m
from groupcoord.protocol.error_codes import ErrorCode as E

__all__ = ["upgrade", "maybe_downgrade", "remove_members", "classic_meta",
           "CONNECT_PROTOCOL_TYPE"]

CONNECT_PROTOCOL_TYPE = "connect"


ClassicMeta = m.ConnectWorkerGroupMemberMetadataValueClassicMemberMetadata


ClassicProto = m.ConnectWorkerGroupMemberMetadataValueClassicProtocol


def upgrade(tx: GroupTx, shard, group, req) -> None:
    """Stage in ``tx`` the conversion of ``group`` (a classic group holding the id of the
    joining ConnectGroupHeartbeat ``req``, already validated) into a connect group; Reject,
    with nothing staged, when it cannot be (GROUP_ID_NOT_FOUND, INVALID_REQUEST,
    GROUP_MAX_SIZE_REACHED). connect.py then runs the heartbeat on the converted group."""
    gid = req.group_id
    if req.member_epoch != 0 or not isinstance(group, ClassicGroup):
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
        owned = allocation_pairs(md) if version >= 1 else []
        if mb.assignment:
            _, a = embedded.decode_connect_assignment(mb.assignment)
            revoked = set(pairs(a.revoked))
            got = pairs(a.assignment)
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
        classic_member_metadata=ClassicMeta(
            session_timeout_ms=session_timeout,
            supported_protocols=[ClassicProto(name=n, metadata=md) for n, md in protocols]))


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
        owned_of[mb.member_id] = pairs_to_wire(mine)
    recs = [rec_member(gid, mb.member_id, classic_meta(
        url, mb.instance_id, mb.client_id, mb.client_host, mb.rebalance_timeout,
        mb.session_timeout, mb.protocols)) for mb, (url, _) in decoded]
    recs.append(rec_epoch(gid, gen))
    T = m.ConnectWorkerGroupTargetAssignmentMemberValueConnectorTasks
    C = m.ConnectWorkerGroupCurrentMemberAssignmentValueConnectorTasks
    for mid, (conns, tasks) in owned_of.items():
        recs.append(Record(m.ConnectWorkerGroupTargetAssignmentMemberKey(gid, mid),
                           m.ConnectWorkerGroupTargetAssignmentMemberValue(
                               connectors=conns, tasks=[T(connector=c, task_ids=t)
                                                        for c, t in tasks])))
    recs.append(rec_target_meta(gid, gen, 0, None, None, -1))
    for mid, (conns, tasks) in owned_of.items():
        recs.append(Record(m.ConnectWorkerGroupCurrentMemberAssignmentKey(gid, mid),
                           m.ConnectWorkerGroupCurrentMemberAssignmentValue(
                               member_epoch=gen, previous_member_epoch=gen, state=rc.STABLE,
                               connectors=conns,
                               tasks=[C(connector=c, task_ids=t) for c, t in tasks])))
    return recs


def remove_members(tx: GroupTx, g, mids, cfg=None) -> None:
    """Stage the removal of several workers at once (one epoch bump); back to a classic
    group when only classic workers remain (maybe_downgrade)."""
    members = g.members.copy()        # keeps the assignor signature counts
    for mid in mids:
        worker_tombstones(tx, g, mid)
        members.pop(mid, None)
    tx.emit(rec_epoch(g.group_id, g.epoch + 1))
    computing = None if g.computing in mids else ""
    events, ctimers, _ = choose_worker(g, members, g.epoch + 1, g.target_epoch, tx.now,
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
    if not members or new_protocol_workers(members):
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
    return Member(mid, meta.instance_id, meta.client_id, meta.client_host,
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
    protocol = select_protocol(workers)
    leader = workers[0]
    leader_url = members[leader.member_id].worker_url or ""
    value = m.GroupMetadataValue(
        protocol_type=CONNECT_PROTOCOL_TYPE, generation=epoch, protocol=protocol,
        leader=leader.member_id, current_state_timestamp=now,
        members=[m.GroupMetadataValueMemberMetadata(
            member_id=mb.member_id, group_instance_id=mb.instance_id, client_id=mb.client_id,
            client_host=mb.client_host, rebalance_timeout=mb.rebalance_timeout,
            session_timeout=mb.session_timeout, subscription=mb.metadata(protocol),
            assignment=held_assignment(g, mb, protocol, leader.member_id, leader_url))
            for mb in workers])
    tx.emit(Record(m.GroupMetadataKey(group=gid), value))
    # As Kafka after a downgrade: a rebalance, the workers rejoin as plain classic workers.
    deadline = now + max(mb.rebalance_timeout for mb in workers)
    tx.emit(RebalanceStarted(gid, deadline, -1, now))
    tx.schedule(TimerKey(CLASSIC_JOIN, gid), deadline)
    for mb in workers:
        tx.schedule(TimerKey(CLASSIC_SESSION, gid, mb.member_id), now + mb.session_timeout)


def held_assignment(g, mb, protocol, leader, leader_url) -> bytes:
    """What the worker holds (assigned + pending revocation) as a ConnectWorkerAssignment in
    the version of ``protocol``. For v1+ (deltas) the revoked list is its join-time allocation
    minus what it holds, so that allocation + assignment - revoked (how an upgrade reads a
    classic worker, ``_decode_worker``) is exactly what it holds."""
    md = mb.metadata(protocol)
    version = protocol_version(protocol, md)
    held = g.names(g.current[mb.member_id].held)
    revoked = None
    if version >= 1:
        try:
            alloc = allocation_pairs(md)
        except ProtocolError:        # saved metadata without a readable allocation
            alloc = []
        kept = set(held)
        revoked = ctl_of_pairs(p for p in dict.fromkeys(alloc) if p not in kept)
    return embedded.encode_connect_assignment(m.ConnectWorkerAssignment(
        error=0, leader=leader, leader_url=leader_url, config_offset=g.config_offset,
        assignment=ctl_of_pairs(held), revoked=revoked, delay=0), version)


def ctl_of_pairs(pairs) -> list:
    by: dict = {}
    for c, t in pairs:
        by.setdefault(c, []).append(t)
    return [CTL(connector=c, tasks=sorted(ts)) for c, ts in sorted(by.items())]
