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

from collections import Counter
from typing import NamedTuple, Optional

from groupcoord.assign import kernels
from groupcoord.coordinator import classic
from groupcoord.coordinator import reconcile as rc
from groupcoord.coordinator.group import Group
from groupcoord.coordinator.record_types import RecordType as RT
from groupcoord.coordinator.records import Record
from groupcoord.coordinator.result import EMPTY, Result, TimerKey, Volatile
from groupcoord.protocol import embedded
from groupcoord.protocol import messages as m
from groupcoord.protocol.error_codes import ErrorCode as E

__all__ = ["ConnectGroup", "API_HANDLERS", "REPLAYERS", "TIMER_KINDS", "ChooseWorker",
           "Prepared", "Unconfirmed", "select_assignor", "SESSION", "REVOCATION", "ASSIGNMENT",
           "DELAYED"]

SESSION = "connect-session"          # per member: heartbeat deadline
REVOCATION = "connect-revocation"    # per member: must revoke before its rebalance timeout
ASSIGNMENT = "connect-assignment"    # per group: the chosen worker must install by then
DELAYED = "connect-rebalance"        # per group: KIP-415 delayed rebalance is due

LEAVE = -1
STATIC_LEAVE = -2
UNKNOWN_UNIT = -1                    # an owned connector/task the group does not know
# ConnectWorkerMetadata / ConnectWorkerAssignment version DescribeGroups shows for workers
# using ConnectGroupHeartbeat: v1 ("compatible", IncrementalCooperativeConnectProtocol) has
# the allocation and the revoked list.
DESCRIBE_PROTOCOL_VERSION = 1


# ----------------------------------------------------------------------------- state
class TargetEntry(NamedTuple):
    units: frozenset
    version: int = 0
    metadata: bytes = b""


NO_TARGET = TargetEntry(rc.EMPTY_SET)


class ChooseWorker(Volatile, frozen=True, gc=False):
    """The worker asked to compute the next target (None: no computation in flight)."""
    group_id: str
    member_id: Optional[str]


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


class Unconfirmed(Volatile, frozen=True, gc=False):
    """A worker was answered an assignment it has not confirmed yet (unconfirmed=True), or it
    has now reported exactly its assignment as owned (False). See _join_or_heartbeat."""
    group_id: str
    member_id: str
    unconfirmed: bool


class ConnectGroup(Group):
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

    # ---- Group interface
    def state_name(self) -> str:
        if not self.members:
            return "Empty"
        if self.epoch > self.target_epoch:
            return "Assigning"
        for a in self.current.values():
            if a.epoch != self.target_epoch or a.state != rc.STABLE:
                return "Reconciling"
        return "Stable"

    def protocol_type(self) -> str:
        return "connect"

    def is_empty(self) -> bool:
        return not self.members

    def validate_offset_commit(self, member_id, instance_id, generation_or_epoch, version):
        if generation_or_epoch < 0 and not self.members:
            return 0                      # an admin commit to an empty group
        cur = self.current.get(member_id or "")
        if cur is None:
            return int(E.UNKNOWN_MEMBER_ID)
        if generation_or_epoch != cur.epoch:
            return int(E.STALE_MEMBER_EPOCH)
        return 0

    def validate_offset_fetch(self, member_id, member_epoch):
        if member_id is None:
            return 0
        cur = self.current.get(member_id)
        if cur is None:
            return int(E.UNKNOWN_MEMBER_ID)
        return 0 if member_epoch == cur.epoch else int(E.STALE_MEMBER_EPOCH)

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
                                frozenset(self.unconfirmed))
        return snap

    def held_units(self):
        return {mid: a.held for mid, a in self.current.items()}

    def deletion(self) -> tuple:
        # What an empty group still keeps, the epoch last (its replay drops the group), as
        # migration_connect's downgrade deletes one.
        gid = self.group_id
        recs = [_rec_current(self, mid, None) for mid in self.current]
        recs += [_rec_target(self, mid, None) for mid in self.target]
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
        from groupcoord.coordinator import migration_connect as mc   # (it imports this module)
        name, _ = select_assignor(self.members)
        leader, url = mc._leader(self)
        members = []
        for mid in sorted(self.members):
            meta, a = self.members[mid], self.current[mid]
            cm = meta.classic_member_metadata
            if cm is not None:
                p = cm.supported_protocols[0]     # the one its SyncGroup answers in
                metadata = bytes(p.metadata)
                version = mc._protocol_version(p.name, metadata)
            else:
                version = DESCRIBE_PROTOCOL_VERSION
                held = embedded.encode_connect_assignment(m.ConnectWorkerAssignment(
                    error=0, leader=leader, leader_url=url, config_offset=self.config_offset,
                    assignment=mc._ctl(self, a.held), revoked=[], delay=0), version)
                metadata = embedded.encode_connect_metadata(m.ConnectWorkerMetadata(
                    url=meta.worker_url or "", config_offset=self.config_offset,
                    allocation=held), version)
            assignment = embedded.encode_connect_assignment(m.ConnectWorkerAssignment(
                error=self.target_error, leader=leader, leader_url=url,
                config_offset=self.config_offset, assignment=mc._ctl(self, a.assigned),
                revoked=mc._ctl(self, a.pending_revocation) if version >= 1 else None,
                delay=0), version)
            members.append(m.DescribeGroupsResponseDescribedGroupMember(
                member_id=mid, group_instance_id=meta.instance_id, client_id=meta.client_id,
                client_host=meta.client_host, member_metadata=metadata,
                member_assignment=assignment))
        return m.DescribeGroupsResponseDescribedGroup(
            error_code=0, group_id=self.group_id, group_state=self.state_name(),
            protocol_type="connect", protocol_data=name or "", members=members)


# ----------------------------------------------------------------------------- records
def _rec_epoch(gid, epoch):
    return Record(m.ConnectWorkerGroupMetadataKey(group_id=gid),
                  m.ConnectWorkerGroupMetadataValue(epoch=epoch))


def _rec_member(gid, mid, meta):
    return Record(m.ConnectWorkerGroupMemberMetadataKey(group_id=gid, member_id=mid), meta)


def _rec_current(g, mid, a: Optional[rc.MemberAssignment]):
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


def _rec_target(g, mid, t: Optional[TargetEntry], wire=None):
    key = m.ConnectWorkerGroupTargetAssignmentMemberKey(group_id=g.group_id, member_id=mid)
    if t is None:
        return Record(key, None)
    conns, tasks = wire if wire is not None else g.wire(t.units)
    T = m.ConnectWorkerGroupTargetAssignmentMemberValueConnectorTasks
    return Record(key, m.ConnectWorkerGroupTargetAssignmentMemberValue(
        connectors=conns, tasks=[T(connector=c, task_ids=ids) for c, ids in tasks],
        version=t.version, metadata=t.metadata))


def _rec_target_meta(gid, epoch, error, assignor, state, deadline):
    return Record(m.ConnectWorkerGroupTargetAssignmentMetadataKey(group_id=gid),
                  m.ConnectWorkerGroupTargetAssignmentMetadataValue(
                      assignment_epoch=epoch, assignment_error=error, assignor_name=assignor,
                      assignor_state=state, rebalance_deadline_ms=deadline))


def _rec_config(gid, offset, connectors):
    C = m.ConnectWorkerGroupConnectorsTasksMetadataValueConnector
    return Record(m.ConnectWorkerGroupConnectorsTasksMetadataKey(group_id=gid),
                  m.ConnectWorkerGroupConnectorsTasksMetadataValue(
                      config_offset=offset,
                      connectors=[C(name=n, task_count=c) for n, c in sorted(connectors.items())]))


# ----------------------------------------------------------------------------- assignors
def _sig(meta) -> tuple:
    """A worker's assignor signature: (name, min, max) of each client assignor, in order."""
    return tuple((a.name, a.minimum_version, a.maximum_version) for a in meta.client_assignors)


class Members(dict):
    """member id -> ConnectWorkerGroupMemberMetadataValue, counting each distinct assignor
    signature as it changes, so that assignor and worker selection cost O(distinct
    signatures) per heartbeat instead of O(workers) (a join storm of n workers would
    otherwise be O(n^2)). Workers of one cluster usually share one signature."""
    __slots__ = ("sigs",)

    def __init__(self, items=()):
        super().__init__()
        self.sigs: Counter = Counter()
        for k, v in dict(items).items():
            self[k] = v

    def __setitem__(self, k, v):
        old = self.get(k)
        if old is not None:
            self._drop(old)
        super().__setitem__(k, v)
        self.sigs[_sig(v)] += 1

    def __delitem__(self, k):
        self._drop(self[k])
        super().__delitem__(k)

    def pop(self, k, *default):
        if k in self:
            v = self[k]
            del self[k]
            return v
        if default:
            return default[0]
        raise KeyError(k)

    def _drop(self, meta):
        sig = _sig(meta)
        n = self.sigs[sig] - 1
        if n:
            self.sigs[sig] = n
        else:
            del self.sigs[sig]

    def copy(self) -> "Members":
        c = Members.__new__(Members)
        dict.update(c, self)
        c.sigs = Counter(self.sigs)
        return c

    def without(self, mid) -> "Members":
        c = self.copy()
        c.pop(mid, None)
        return c


def _sigs(members: dict) -> Counter:
    got = getattr(members, "sigs", None)
    return got if got is not None else Counter(_sig(v) for v in members.values())


def select_assignor(members: dict) -> tuple:
    """(assignor name, None) or (None, why). The candidates are the assignors every worker
    lists. Each worker votes for the first candidate in its own list (its precedence order);
    the most votes wins; a tie goes to the tied candidate listed first by the worker with the
    lowest member id. Counted over distinct signatures (see Members)."""
    members = _new_protocol(members)
    if not members:
        return None, None
    sigs = _sigs(members)
    common = set.intersection(*({a[0] for a in sig} for sig in sigs))
    if not common:
        lists = {mid: [a.name for a in meta.client_assignors] for mid, meta in members.items()}
        return None, "no assignor is supported by every worker (%s)" % ", ".join(
            "%s: %s" % (mid, lists[mid]) for mid in sorted(lists))
    votes: Counter = Counter()
    for sig, cnt in sigs.items():
        votes[next(a[0] for a in sig if a[0] in common)] += cnt
    best = max(votes.values())
    tied = [n for n, v in votes.items() if v == best]
    if len(tied) == 1:
        return tied[0], None
    lowest = members[min(members)]
    return next(a.name for a in lowest.client_assignors if votes.get(a.name) == best), None


def _new_protocol(members: dict) -> dict:
    """The workers that speak ConnectGroupHeartbeat. Classic workers of a migrating group
    (migration_connect.py) list no assignor (a new-protocol worker always lists one) and never
    compute the assignment: they cannot call PrepareAssignment."""
    if () not in _sigs(members):
        return members
    return {k: v for k, v in members.items() if v.classic_member_metadata is None}


def _range_of(sig: tuple, name: str):
    for a in sig:
        if a[0] == name:
            return a[1], a[2]
    return None


def _ranges(members: dict, name: str) -> dict:
    out = {}
    for mid, meta in members.items():
        r = _range_of(_sig(meta), name)
        if r is not None:
            out[mid] = r
    return out


def _fmt_ranges(ranges: dict) -> str:
    return ", ".join("%s [%d-%d]" % (mid, lo, hi) for mid, (lo, hi) in sorted(ranges.items()))


def _bounds(members: dict, name: str) -> tuple:
    """(lowest minimum, highest maximum) of ``name``'s version ranges over the workers."""
    rs = [r for r in (_range_of(sig, name) for sig in _sigs(members)) if r is not None]
    return min(r[0] for r in rs), max(r[1] for r in rs)


def _covers(meta, name: str, lo: int, hi: int) -> bool:
    r = _range_of(_sig(meta), name)
    return r is not None and r[0] <= lo and r[1] >= hi


def _covering(members: dict, name: str) -> list:
    """Workers whose range of ``name`` covers every other worker's range (sorted ids)."""
    lo, hi = _bounds(members, name)
    return sorted(mid for mid, meta in members.items() if _covers(meta, name, lo, hi))


def _choose(g: ConnectGroup, members: dict, epoch: int, target_epoch: int, now_ms: int,
            exclude: Optional[str] = None, computing: Optional[str] = "") -> tuple:
    """Who computes the next target after a change: -> (events, timers, fatal message).

    ``computing`` overrides the group's worker in flight ("" = use it); ``exclude`` is a
    worker that timed out or left (avoided when another one qualifies)."""
    if computing == "":
        computing = g.computing
    gid = g.group_id
    timer = TimerKey(ASSIGNMENT, gid)
    if epoch <= target_epoch or not _new_protocol(members):
        if computing is not None:
            return (ChooseWorker(group_id=gid, member_id=None),), ((timer, None),), None
        return (), (), None
    name, why = select_assignor(members)
    if name is not None and computing is not None and computing != exclude \
            and computing in members \
            and _covers(members[computing], name, *_bounds(members, name)):
        return (), (), None        # the worker in flight still covers everyone: keep it
    cover = _covering(members, name) if name is not None else []
    if not cover:
        if why is None:
            why = ("no worker supports every other worker's version range of assignor %s: %s"
                   % (name, _fmt_ranges(_ranges(members, name))))
        events = (ChooseWorker(group_id=gid, member_id=None),) if computing is not None else ()
        return events, ((timer, None),), why
    pick = [w for w in cover if w != exclude] or cover
    chosen = g.leader if g.leader in pick else pick[0]
    deadline = now_ms + members[chosen].rebalance_timeout_ms
    return (ChooseWorker(group_id=gid, member_id=chosen),), ((timer, deadline),), None


# ----------------------------------------------------------------------------- helpers
def _hb_error(code, message, member_id=None, epoch=0):
    return Result(m.ConnectGroupHeartbeatResponse(error_code=int(code), error_message=message,
                                                  member_id=member_id, member_epoch=epoch))


def _lookup(shard, gid):
    """(group or None, error message or None) for a request naming an existing group."""
    g = shard.groups.get(gid)
    if g is None:
        return None, "group %s does not exist" % gid
    if g.TYPE != "connect":
        return None, "group %s is a %s group, not a connect group" % (gid, g.TYPE)
    return g, None


def worker_tombstones(g: ConnectGroup, mid: str) -> tuple:
    """A worker's tombstones (current assignment, target, metadata: the order recovery needs)
    and the cancellation of its timers. -> (records list, timers list)."""
    gid = g.group_id
    recs = [_rec_current(g, mid, None)]
    if mid in g.target:
        recs.append(_rec_target(g, mid, None))
    recs.append(_rec_member(gid, mid, None))
    return recs, [(TimerKey(SESSION, gid, mid), None), (TimerKey(REVOCATION, gid, mid), None)]


def _remove(g: ConnectGroup, mid: str, now_ms: int, cfg=None) -> tuple:
    """Records and timers removing a member (leave, expiry, fencing), with the epoch bump and
    the choice of another worker if it was computing; when only classic workers remain, the
    group goes back to a classic group (migration_connect.maybe_downgrade).
    -> (records, timers)."""
    gid = g.group_id
    recs, timers = worker_tombstones(g, mid)
    recs.append(_rec_epoch(gid, g.epoch + 1))
    members = g.members.without(mid)
    events, ctimers, _ = _choose(g, members, g.epoch + 1, g.target_epoch, now_ms, exclude=mid)
    from groupcoord.coordinator import migration_connect     # (it imports this module)
    down = migration_connect.maybe_downgrade(g, members, g.epoch + 1, now_ms, cfg)
    if down is not None:
        return tuple(recs) + events + down[0], tuple(timers) + ctimers + down[1]
    return tuple(recs) + events, tuple(timers) + ctimers


def _assignors(req_assignors):
    A = m.ConnectWorkerGroupMemberMetadataValueAssignor
    return [A(name=a.name, minimum_version=a.minimum_version, maximum_version=a.maximum_version,
              reason=a.reason, version=a.version, metadata=a.metadata) for a in req_assignors]


def _validate_first_heartbeat(req) -> Optional[str]:
    # Only a worker the group does not know yet is joining: a member still at epoch 0 (no
    # target installed yet) keeps heartbeating with epoch 0 and only the changed fields.
    if req.rebalance_timeout_ms <= 0:
        return "RebalanceTimeoutMs must be provided in the first request"
    if req.client_assignors is None and req.server_assignor is None:
        return "ClientAssignors must be provided in the first request"
    return None


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
        from groupcoord.coordinator import migration_connect
        return migration_connect.upgrade(shard, g, req, ctx)
    if g is None:
        if req.member_epoch != 0:
            return _hb_error(E.UNKNOWN_MEMBER_ID, "group %s has no member %s" % (gid, mid))
        g = ConnectGroup(gid)           # a read-only view: replay of the records creates it
    if req.member_epoch == LEAVE:
        return _leave(g, req, ctx, cfg)
    if req.member_epoch == STATIC_LEAVE:
        return _static_leave(g, req, ctx, cfg)
    if req.member_epoch == 0 and mid not in g.members:
        why = _validate_first_heartbeat(req)
        if why:
            return _hb_error(E.INVALID_REQUEST, why)
    return _join_or_heartbeat(g, req, ctx, cfg)


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
    recs, timers = _remove(g, mid, ctx.now_ms, cfg)
    return Result(m.ConnectGroupHeartbeatResponse(member_id=mid, member_epoch=LEAVE),
                  recs, timers)


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
    timers = ((TimerKey(SESSION, gid, mid), ctx.now_ms + cfg.connect_session_timeout_ms),
              (TimerKey(REVOCATION, gid, mid), None)) + ctimers
    return Result(m.ConnectGroupHeartbeatResponse(member_id=mid, member_epoch=STATIC_LEAVE),
                  (_rec_current(g, mid, left),) + events, timers)


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
    recs = _join_records(g, req, mid, meta, new_meta, replaced, bump)
    epoch = g.epoch + 1 if recs and type(recs[-1].key) is m.ConnectWorkerGroupMetadataKey \
        else g.epoch
    target = g.target.get(replaced if replaced is not None else mid, NO_TARGET)
    if replaced is not None and replaced in g.target:
        recs.append(_rec_target(g, mid, target))
    p = g.prepared
    if replaced is not None and p is not None and replaced in p.member_ids:
        # A computation is in flight with the old id in its member list: its install must
        # give the old id's target to the replacement (else the replacement kept its old
        # target next to a new one that moved those units: units twice, others nowhere).
        recs.append(Prepared(
            group_id=gid, epoch=p.epoch, connectors=p.connectors, assignor=p.assignor,
            member_ids=tuple(sorted(mid if x == replaced else x for x in p.member_ids)),
            renamed=p.renamed + ((replaced, mid),)))

    timers = [(TimerKey(SESSION, gid, mid), now + cfg.connect_session_timeout_ms)]
    if replaced is not None:
        timers += [(TimerKey(SESSION, gid, replaced), None),
                   (TimerKey(REVOCATION, gid, replaced), None)]
    computing = g.computing if g.computing != replaced else None
    if members is g.members and epoch == g.epoch and \
            (computing is not None) == (epoch > g.target_epoch):
        # Membership and epoch unchanged, and either nothing to compute or a computation
        # already in flight by a worker that still qualifies: selection would not change.
        events, ctimers, fatal = (), (), None
    else:
        events, ctimers, fatal = _choose(g, members, epoch, g.target_epoch, now,
                                         computing=computing)
    timers += ctimers
    new_member = meta is None
    if fatal:
        # No worker can compute the target: keep the member where it is and say why.
        if new_member:
            recs.append(_rec_current(g, mid, cur))
        return Result(m.ConnectGroupHeartbeatResponse(
            error_code=int(E.UNSUPPORTED_ASSIGNOR), error_message=fatal, member_id=mid,
            member_epoch=cur.epoch, heartbeat_interval_ms=cfg.connect_heartbeat_interval_ms),
            tuple(recs) + events, tuple(timers))

    # ---- reconciliation
    holders = g.holders if replaced is None else _Alias(g.holders, replaced, mid)
    acks = _acknowledging(req, meta, owned)
    nxt = rc.next_assignment(cur, g.target_epoch, target.units, acks, holders, mid)
    if nxt != cur or new_member:
        recs.append(_rec_current(g, mid, nxt))
    rkey = TimerKey(REVOCATION, gid, mid)
    if nxt.state == rc.UNREVOKED and (cur.state != rc.UNREVOKED or req.member_epoch == 0):
        # (Re)armed by a join or rejoin too: a rejoin cannot acknowledge (_acknowledging) and
        # a return from a temporary leave had its timer cancelled.
        timers.append((rkey, now + new_meta.rebalance_timeout_ms))
    elif cur.state == rc.UNREVOKED and nxt.state != rc.UNREVOKED:
        timers.append((rkey, None))

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
        recs.append(Unconfirmed(group_id=gid, member_id=mid, unconfirmed=unconfirmed))
    return Result(resp, tuple(recs) + events, tuple(timers))


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


def _join_records(g, req, mid, meta, new_meta, replaced, bump) -> list:
    """Member / config / epoch records of a join or heartbeat; the epoch record, if any, is
    last."""
    gid = g.group_id
    recs = []
    if replaced is not None:
        recs += [_rec_current(g, replaced, None), _rec_target(g, replaced, None),
                 _rec_member(gid, replaced, None)]
    if new_meta is not meta and new_meta != meta:
        recs.append(_rec_member(gid, mid, new_meta))
    cs = req.config_state
    if cs is not None and cs.config_offset > g.config_offset:
        conns = {c.name: c.task_count for c in cs.connectors}
        recs.append(_rec_config(gid, cs.config_offset, conns))
        bump = bump or conns != g.connectors
    if bump:
        recs.append(_rec_epoch(gid, g.epoch + 1))
    return recs


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
    ev = Prepared(group_id=g.group_id, epoch=g.epoch, member_ids=tuple(sorted(g.members)),
                  connectors=connectors, assignor=name)
    return Result(resp, (ev,))


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
    if req.error != 0:
        # The assignor failed: keep the current target, marked with its error, at the
        # prepared epoch, so that the group does not ask for the same computation again.
        recs = [_rec_target_meta(gid, p.epoch, req.error, p.assignor, g.assignor_state,
                                 g.rebalance_deadline_ms)]
        return _installed(g, p, recs, [], now)
    problems = _violations(req, p)
    if problems:
        more = len(problems) - 5
        return _install_error(E.INVALID_ASSIGNMENT, "invalid assignment: " + "; ".join(
            problems[:5]) + (" (and %d more)" % more if more > 0 else ""))
    listed = {p.current_id(mem.member_id): mem for mem in req.members}
    recs = []
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
            recs.append(_rec_target(g, mid, new))
    deadline = now + req.rebalance_delay_ms if req.rebalance_delay_ms >= 0 else -1
    recs.append(_rec_target_meta(gid, p.epoch, 0, p.assignor, req.assignor_state, deadline))
    dkey = TimerKey(DELAYED, gid)
    return _installed(g, p, recs, [(dkey, deadline if deadline >= 0 else None)], now)


def _installed(g, p, recs, timers, now) -> Result:
    events, ctimers, _ = _choose(g, g.members, g.epoch, p.epoch, now, computing=None)
    timers = [(TimerKey(ASSIGNMENT, g.group_id), None)] + timers + list(ctimers)
    if not events:
        events = (ChooseWorker(group_id=g.group_id, member_id=None),)
    return Result(m.ConnectGroupInstallAssignmentResponse(), tuple(recs) + events,
                  tuple(timers))


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
    recs, timers = _remove(g, key.member_id, now_ms, shard.config)
    return Result(None, recs, timers)


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
    return Result(None, events, timers)


def _delayed_rebalance(shard, key, now_ms) -> Result:
    """The assignor's delayed rebalance is due: a new group epoch asks for a new target (not
    when one is already pending, e.g. a re-armed past deadline after a restart)."""
    g = shard.groups.get(key.group_id)
    if g is None or g.TYPE != "connect" or g.rebalance_deadline_ms < 0 \
            or now_ms < g.rebalance_deadline_ms or g.epoch != g.target_epoch:
        return EMPTY
    events, timers, _ = _choose(g, g.members, g.epoch + 1, g.target_epoch, now_ms)
    return Result(None, (_rec_epoch(g.group_id, g.epoch + 1),) + events, timers)


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


def _replay_unconfirmed(shard, ev, _):
    g = shard.groups.get(ev.group_id)
    if isinstance(g, ConnectGroup):
        if ev.unconfirmed:
            g.unconfirmed.add(ev.member_id)
        else:
            g.unconfirmed.discard(ev.member_id)


API_HANDLERS = {10000: _heartbeat, 10001: _prepare, 10002: _install, 10003: _describe}
REPLAYERS = {
    RT.CONNECT_WORKER_GROUP_METADATA: _replay_epoch,
    RT.CONNECT_WORKER_GROUP_MEMBER_METADATA: _replay_member,
    RT.CONNECT_WORKER_GROUP_CONNECTORS_TASKS_METADATA: _replay_config,
    RT.CONNECT_WORKER_GROUP_TARGET_ASSIGNMENT_METADATA: _replay_target_meta,
    RT.CONNECT_WORKER_GROUP_TARGET_ASSIGNMENT_MEMBER: _replay_target,
    RT.CONNECT_WORKER_GROUP_CURRENT_MEMBER_ASSIGNMENT: _replay_current,
    ChooseWorker: _replay_choose,
    Prepared: _replay_prepared,
    Unconfirmed: _replay_unconfirmed,
}
TIMER_KINDS = {SESSION: _session_expired, REVOCATION: _revocation_expired,
               ASSIGNMENT: _assignment_expired, DELAYED: _delayed_rebalance}
