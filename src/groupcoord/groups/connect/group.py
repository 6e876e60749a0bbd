"""The connect worker group's model (docs/coordinator-connect.md): ``ConnectGroup`` and its
members, targets and current assignments, changed by replay only (connect/replay.py); the
record builders; the view of classic Connect protocol bytes (ConnectProtocol /
IncrementalCooperativeConnectProtocol metadata and assignments) that DescribeGroups and the
migration share."""
from __future__ import annotations

from typing import NamedTuple, Optional

from groupcoord.groups.modern import reconcile as rc
from groupcoord.groups.connect.selection import Members, select_assignor
from groupcoord.groups.lifecycle import MEMBER_FENCED, MEMBER_LEFT, Event
from groupcoord.groups.modern.group import (ModernGroup, Unconfirmed, described_member,
                                            rebalance_started, settle)
from groupcoord.groups.records import Record
from groupcoord.groups.result import Result, TimerKey, Volatile
from groupcoord.groups.timers import (CONNECT_ASSIGNMENT, CONNECT_DELAYED_REBALANCE,
                                            CONNECT_REVOCATION, CONNECT_SESSION)
from groupcoord.protocol import embedded
from groupcoord.protocol import messages as m

__all__ = ["ConnectGroup", "Prepared", "Unconfirmed", "worker_tombstones", "note_removed",
           "fenced",
           "uses_classic", "SESSION", "REVOCATION", "ASSIGNMENT", "DELAYED", "UNKNOWN_UNIT",
           "CONNECTOR_TASK"]

SESSION = CONNECT_SESSION            # per member: heartbeat deadline


REVOCATION = CONNECT_REVOCATION      # per member: must revoke before its rebalance timeout


ASSIGNMENT = CONNECT_ASSIGNMENT      # per group: the chosen worker must install by then


DELAYED = CONNECT_DELAYED_REBALANCE  # per group: KIP-415 delayed rebalance is due


LEAVE = -1


STATIC_LEAVE = -2


UNKNOWN_UNIT = -1                    # an owned connector/task the group does not know


DESCRIBE_PROTOCOL_VERSION = 1


CONNECTOR_TASK = -1                   # classic Connect's task id for the connector itself


UNITS = "connectors/tasks"            # what the lifecycle log calls a connect group's units


CTL = m.ConnectWorkerAssignmentConnectorTaskList


class TargetEntry(NamedTuple):
    units: frozenset
    version: int = 0
    metadata: bytes = b""


NO_TARGET = TargetEntry(rc.EMPTY_SET)


class Prepared(Volatile, frozen=True, gc=False):
    """What PrepareAssignment handed out; InstallAssignment is validated against it."""
    group_id: str
    epoch: int
    member_ids: tuple
    connectors: tuple            # ((name, task count), ...) sorted by name
    assignor: str
    # Static members replaced since the prepare, ((old id, new id), ...): the new member took
    # over the old one's target, so the install's entry for the old id is the new one's.
    renamed: tuple = ()

    def current_id(self, member_id: str) -> str:
        for old, new in self.renamed:
            if member_id == old:
                member_id = new
        return member_id


class ConnectGroup(ModernGroup):
    TYPE = "connect"

    def __init__(self, group_id: str):
        self.group_id = group_id
        self.epoch = 0
        self.members = Members()        # member id -> ConnectWorkerGroupMemberMetadataValue
        self.current: dict = {}         # member id -> reconcile.MemberAssignment
        self.holders: dict = {}         # unit -> member id (held units)
        self.target: dict = {}          # member id -> TargetEntry
        self.static: dict = {}          # instance id -> member id
        self.target_epoch = 0
        self.target_error = 0
        self.assignor_name: Optional[str] = None
        self.assignor_state: Optional[bytes] = None
        self.rebalance_deadline_ms = -1
        self.session_ms = 45_000        # the shard's connect_session_timeout_ms (for rearm)
        self.config_offset = -1
        self.connectors: dict = {}      # connector name -> task count
        self._cidx: dict = {}           # connector registry: name -> index (grows in replay)
        self._cname: list = []
        # volatile
        self.computing: Optional[str] = None
        self.leader: Optional[str] = None
        self.prepared: Optional[Prepared] = None
        self.unconfirmed: set = set()   # member ids (see Unconfirmed)

    # ---- units: (connector index, 0) is the connector, (index, task + 1) a task
    def register(self, name: str) -> int:
        """Replay only."""
        i = self._cidx.get(name)
        if i is None:
            i = self._cidx[name] = len(self._cname)
            self._cname.append(name)
        return i

    def units(self, connectors, tasks, intern: bool = False) -> frozenset:
        """Units of a wire ConnectorsAndTasks (tasks: objects with .connector, .task_ids).
        Handlers look up (unknown -> UNKNOWN_UNIT); replay interns."""
        look = self.register if intern else (lambda n: self._cidx.get(n, -1))
        out = set()
        for name in connectors:
            i = look(name)
            out.add(rc.unit(i, 0) if i >= 0 else UNKNOWN_UNIT)
        for t in tasks:
            i = look(t.connector)
            for tid in t.task_ids:
                out.add(rc.unit(i, tid + 1) if i >= 0 and tid >= 0 else UNKNOWN_UNIT)
        return frozenset(out)

    def wire(self, units) -> tuple:
        """-> (connector names sorted, [(connector, [task ids sorted])] sorted by name)."""
        conns, tasks = [], {}
        for u in units:
            i, sub = rc.unit_parts(u)
            name = self._cname[i]
            if sub == 0:
                conns.append(name)
            else:
                tasks.setdefault(name, []).append(sub - 1)
        return sorted(conns), [(n, sorted(tasks[n])) for n in sorted(tasks)]

    def names(self, units) -> tuple:
        """External identity of units: sorted (connector, task id or -1 for the connector)."""
        return tuple(sorted((self._cname[i], sub - 1) for i, sub in map(rc.unit_parts, units)))

    # ---- ModernGroup (state names, offset validation: modern/group.py). No commit rule of the
    # protocol: a classic worker is checked by epoch too (reconcile.revoked_moves_epoch moves
    # a worker's epoch once it has revoked, so its late commits are told apart).
    def assignment_of(self, member_id) -> Optional[rc.MemberAssignment]:
        return self.current.get(member_id or "")

    def assignments(self):
        return self.current.values()

    def rearm(self, now_ms: int) -> list:
        ops = []
        for mid, meta in self.members.items():
            cm = meta.classic_member_metadata      # a classic worker keeps its own timeout
            ops.append((TimerKey(SESSION, self.group_id, mid), now_ms + (
                self.session_ms if cm is None else cm.session_timeout_ms)))
            cur = self.current.get(mid)
            if cur is not None and cur.state == rc.UNREVOKED and cur.epoch != STATIC_LEAVE:
                ops.append((TimerKey(REVOCATION, self.group_id, mid),
                            now_ms + meta.rebalance_timeout_ms))
        if self.rebalance_deadline_ms >= 0:
            ops.append((TimerKey(DELAYED, self.group_id), self.rebalance_deadline_ms))
        return ops

    def snapshot(self, durable: bool):
        members = {}
        for mid, meta in self.members.items():
            members[mid] = (meta.instance_id, meta.worker_url, meta.client_id,
                            meta.client_host, meta.rebalance_timeout_ms,
                            tuple((a.name, a.minimum_version, a.maximum_version, a.reason,
                                   a.version, a.metadata) for a in meta.client_assignors),
                            meta.classic_member_metadata)
        current = {mid: (a.epoch, a.previous_epoch, a.state, self.names(a.assigned),
                         self.names(a.pending_revocation)) for mid, a in self.current.items()}
        target = {mid: (self.names(t.units), t.version, t.metadata)
                  for mid, t in self.target.items()}
        snap = {"epoch": self.epoch, "members": members, "current": current,
                "target": target, "static": dict(self.static),
                "target_meta": (self.target_epoch, self.target_error, self.assignor_name,
                                self.assignor_state, self.rebalance_deadline_ms),
                "config": (self.config_offset, tuple(sorted(self.connectors.items())))}
        if not durable:
            snap["volatile"] = (self.computing, self.leader, self.prepared,
                                frozenset(self.unconfirmed), self.lifecycle_state())
            # The indexes replay derives, so that the purity check sees a handler touch them
            # (in external identities: the connector registry depends on what was replayed).
            snap["derived"] = ({self.names((u,)): mid for u, mid in self.holders.items()},
                               dict(self.members.sigs), self.session_ms)
        return snap

    def held_units(self):
        return {mid: a.held for mid, a in self.current.items()}

    def deletion(self) -> tuple:
        # What an empty group still keeps, the epoch last (its replay drops the group), as
        # connect/migration.py's downgrade deletes one.
        gid = self.group_id
        recs = [rec_current(self, mid, None) for mid in self.current]
        recs += [rec_target(self, mid, None) for mid in self.target]
        recs += [Record(m.ConnectWorkerGroupTargetAssignmentMetadataKey(group_id=gid), None),
                 Record(m.ConnectWorkerGroupConnectorsTasksMetadataKey(group_id=gid), None),
                 Record(m.ConnectWorkerGroupMetadataKey(group_id=gid), None)]
        return recs, [(TimerKey(ASSIGNMENT, gid), None), (TimerKey(DELAYED, gid), None)]

    # ---- DescribeGroups (admin.py)
    def as_described_group(self, catalog):
        """The group as a classic Connect group would be described (Kafka 4 answers
        DescribeGroups for classic groups only; see docs/decisions.md): the workers' assignor
        (as ConnectGroupDescribe names it) as the protocol; per worker a ConnectWorkerMetadata
        (url, the group's config offset, what it holds as allocation) and a
        ConnectWorkerAssignment (the installed target's error, the leader last chosen to
        compute, its assigned connectors and tasks, its pending revocations as revoked) at
        DESCRIBE_PROTOCOL_VERSION. A worker using the classic protocol (migration) shows the
        metadata it joined with and its assignment in that protocol's version."""
        name, _ = select_assignor(self.members)
        leader, url = leader_of(self)
        members = []
        for mid in sorted(self.members):
            meta, a = self.members[mid], self.current[mid]
            cm = meta.classic_member_metadata
            if cm is not None:
                p = cm.supported_protocols[0]     # the one its SyncGroup answers in
                metadata = bytes(p.metadata)
                version = protocol_version(p.name, metadata)
            else:
                version = DESCRIBE_PROTOCOL_VERSION
                held = embedded.encode_connect_assignment(m.ConnectWorkerAssignment(
                    error=0, leader=leader, leader_url=url, config_offset=self.config_offset,
                    assignment=ctl_list(self, a.held), revoked=[], delay=0), version)
                metadata = embedded.encode_connect_metadata(m.ConnectWorkerMetadata(
                    url=meta.worker_url or "", config_offset=self.config_offset,
                    allocation=held), version)
            assignment = embedded.encode_connect_assignment(m.ConnectWorkerAssignment(
                error=self.target_error, leader=leader, leader_url=url,
                config_offset=self.config_offset, assignment=ctl_list(self, a.assigned),
                revoked=ctl_list(self, a.pending_revocation) if version >= 1 else None,
                delay=0), version)
            members.append(described_member(mid, meta, metadata, assignment))
        return self.described(name or "", members)


def rec_epoch(gid, epoch):
    return Record(m.ConnectWorkerGroupMetadataKey(group_id=gid),
                  m.ConnectWorkerGroupMetadataValue(epoch=epoch))


def rec_member(gid, mid, meta):
    return Record(m.ConnectWorkerGroupMemberMetadataKey(group_id=gid, member_id=mid), meta)


def rec_current(g, mid, a: Optional[rc.MemberAssignment]):
    key = m.ConnectWorkerGroupCurrentMemberAssignmentKey(group_id=g.group_id, member_id=mid)
    if a is None:
        return Record(key, None)
    T = m.ConnectWorkerGroupCurrentMemberAssignmentValueConnectorTasks
    conns, tasks = g.wire(a.assigned)
    pconns, ptasks = g.wire(a.pending_revocation)
    return Record(key, m.ConnectWorkerGroupCurrentMemberAssignmentValue(
        member_epoch=a.epoch, previous_member_epoch=a.previous_epoch, state=a.state,
        connectors=conns, tasks=[T(connector=c, task_ids=t) for c, t in tasks],
        connectors_pending_revocation=pconns,
        tasks_pending_revocation=[T(connector=c, task_ids=t) for c, t in ptasks]))


def rec_target(g, mid, t: Optional[TargetEntry], wire=None):
    key = m.ConnectWorkerGroupTargetAssignmentMemberKey(group_id=g.group_id, member_id=mid)
    if t is None:
        return Record(key, None)
    conns, tasks = wire if wire is not None else g.wire(t.units)
    T = m.ConnectWorkerGroupTargetAssignmentMemberValueConnectorTasks
    return Record(key, m.ConnectWorkerGroupTargetAssignmentMemberValue(
        connectors=conns, tasks=[T(connector=c, task_ids=ids) for c, ids in tasks],
        version=t.version, metadata=t.metadata))


def rec_target_meta(gid, epoch, error, assignor, state, deadline):
    return Record(m.ConnectWorkerGroupTargetAssignmentMetadataKey(group_id=gid),
                  m.ConnectWorkerGroupTargetAssignmentMetadataValue(
                      assignment_epoch=epoch, assignment_error=error, assignor_name=assignor,
                      assignor_state=state, rebalance_deadline_ms=deadline))


def rec_config(gid, offset, connectors):
    C = m.ConnectWorkerGroupConnectorsTasksMetadataValueConnector
    return Record(m.ConnectWorkerGroupConnectorsTasksMetadataKey(group_id=gid),
                  m.ConnectWorkerGroupConnectorsTasksMetadataValue(
                      config_offset=offset,
                      connectors=[C(name=n, task_count=c) for n, c in sorted(connectors.items())]))



def heartbeat_error(code, message, member_id=None, epoch=0):
    return Result(m.ConnectGroupHeartbeatResponse(error_code=int(code), error_message=message,
                                                  member_id=member_id, member_epoch=epoch))


def worker_tombstones(tx, g: ConnectGroup, mid: str) -> None:
    """Stage in ``tx`` (a GroupTx) a worker's tombstones (current assignment, target,
    metadata: the order recovery needs) and the cancellation of its timers."""
    gid = g.group_id
    tx.emit(rec_current(g, mid, None))
    if mid in g.target:
        tx.emit(rec_target(g, mid, None))
    tx.emit(rec_member(gid, mid, None))
    tx.schedule(TimerKey(SESSION, gid, mid), None)
    tx.schedule(TimerKey(REVOCATION, gid, mid), None)


def note_removed(tx, g: ConnectGroup, mids, kind: str, reason: str, members: int) -> None:
    """The lifecycle events of the removal of workers ``mids`` (staged in ``tx`` with one
    epoch bump, ``members`` workers left): one per worker (``kind``: left or expired, for
    ``reason``, a code of lifecycle.REASONS), the rebalance it starts."""
    epoch = g.epoch + 1
    for mid in mids:
        meta = g.members.get(mid)
        tx.note(Event(kind=kind, group=g.group_id, type="connect", member=mid,
                      instance=meta.instance_id if meta is not None else None, epoch=epoch,
                      reason="" if kind == MEMBER_LEFT else reason))
    why = (reason, mids[0] if mids else "")
    rebalance_started(tx, "connect", epoch, why, members)
    settle(tx, g, "connect", epoch=epoch, target_epoch=g.target_epoch, members=members,
           changed=dict.fromkeys(mids), why=why, unit=UNITS)


def fenced(res: Result, g: ConnectGroup, mid: str, instance, member_epoch: int,
           reason: str) -> Result:
    """``res`` (a refusal) with the lifecycle event of a fenced worker."""
    return res._replace(events=(Event(
        kind=MEMBER_FENCED, group=g.group_id, type="connect", member=mid or "",
        instance=instance, epoch=g.epoch, reason=reason, member_epoch=member_epoch),))


def uses_classic(meta) -> bool:
    return meta is not None and meta.classic_member_metadata is not None


def pairs(ctls) -> list:
    """ConnectorTaskList entries -> [(connector, task id or -1)] in order."""
    return [(c.connector, t) for c in ctls or () for t in c.tasks]


def pairs_to_wire(pairs) -> tuple:
    """Pairs -> (connector names, [(connector, task ids)]) sorted, as connect records want."""
    conns, tasks = set(), {}
    for c, t in pairs:
        if t == CONNECTOR_TASK:
            conns.add(c)
        else:
            tasks.setdefault(c, set()).add(t)
    return sorted(conns), [(c, sorted(tasks[c])) for c in sorted(tasks)]


def ctl_list(g, units) -> list:
    """Units -> ConnectorTaskList entries (connector as task -1), sorted."""
    by: dict = {}
    for name, t in g.names(units):
        by.setdefault(name, []).append(t)
    return [CTL(connector=c, tasks=sorted(ts)) for c, ts in sorted(by.items())]


def pairs_to_units(g, pairs) -> frozenset:
    """Pairs -> units of ``g`` (unknown connectors -> UNKNOWN_UNIT). Lookup only."""
    look = g._cidx.get
    out = set()
    for c, t in pairs:
        i = look(c, -1)
        out.add(rc.unit(i, t + 1) if i >= 0 and t >= CONNECTOR_TASK else UNKNOWN_UNIT)
    return frozenset(out)


def protocol_version(name: str, metadata: bytes) -> int:
    try:
        return min(embedded.decode_connect_metadata(metadata)[0],
                   m.ConnectWorkerAssignment.VERSIONS[1])
    except Exception:
        return {"compatible": 1, "sessioned": 2}.get(name, 0)


def allocation_pairs(metadata: bytes) -> list:
    """What a v1+ worker says it owns in its JoinGroup metadata (allocation)."""
    version, wm = embedded.decode_connect_metadata(metadata)
    if version < 1 or not wm.allocation:
        return []
    return pairs(embedded.decode_connect_assignment(wm.allocation)[1].assignment)


def leader_of(g) -> tuple:
    """(member id, url) of the new-protocol worker last chosen to compute, or ("", "")."""
    meta = g.members.get(g.leader) if g.leader is not None else None
    if meta is None or uses_classic(meta):
        return "", ""
    return g.leader, meta.worker_url or ""


def validate_first_heartbeat(req) -> Optional[str]:
    # Only a worker the group does not know yet is joining: a member still at epoch 0 (no
    # target installed yet) keeps heartbeating with epoch 0 and only the changed fields.
    if req.rebalance_timeout_ms <= 0:
        return "RebalanceTimeoutMs must be provided in the first request"
    if req.client_assignors is None and req.server_assignor is None:
        return "ClientAssignors must be provided in the first request"
    return None


def lookup(shard, gid):
    """(group or None, error message or None) for a request naming an existing group."""
    g = shard.groups.get(gid)
    if g is None:
        return None, "group %s does not exist" % gid
    if g.TYPE != "connect":
        return None, "group %s is a %s group, not a connect group" % (gid, g.TYPE)
    return g, None
