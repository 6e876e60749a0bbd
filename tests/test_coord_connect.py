"""Connect worker groups (src/groupcoord/groups/connect.py; docs/coordinator-connect.md).

Every test drives a coordinator shard through the ``coord`` harness, which checks after each
step that handlers did not mutate state and that no connector/task is held by two workers, and
at teardown that replaying the durable log rebuilds the same group.

Notation as the seed's case studies: AC0 = connector A, AT1 / AT2 = its tasks 0 / 1 (the seed
numbers tasks from 1), BC0 / BT1 = connector B and its task 0.
"""
import msgspec
import numpy as np
import pytest

from groupcoord.assign.connect import (LOST, IcaState, connect_units, incremental_cooperative,
                                       to_wire)
from groupcoord.groups.connect import group as connect
from groupcoord.groups.connect.selection import select_assignor
from groupcoord.groups.modern import reconcile as rc
from groupcoord.groups.config import ShardConfig
from groupcoord.groups.records import Record
from groupcoord.groups.result import Result, TimerKey
from groupcoord.protocol import embedded
from groupcoord.protocol import messages as m
from groupcoord.protocol.error_codes import ErrorCode as E

ICA = "incremental-cooperative"
CONFIG = {"A": 2, "B": 1}
ALL = ["AC0", "AT1", "AT2", "BC0", "BT1"]
DELAY = 30_000               # scheduled.rebalance.max.delay.ms of the test worker
TIMEOUT = 60_000             # workers' rebalance timeout


# ----------------------------------------------------------------------------- wire helpers
def asg(lo=0, hi=2, version=None, name=ICA, reason=0, metadata=b""):
    return m.ConnectGroupHeartbeatRequestAssignor(
        name=name, minimum_version=lo, maximum_version=hi,
        version=hi if version is None else version, reason=reason, metadata=metadata)


def cfg_state(conns=None, offset=1):
    conns = CONFIG if conns is None else conns
    return m.ConnectGroupHeartbeatRequestConfigState(
        config_offset=offset, connectors=[m.ConnectGroupHeartbeatRequestConnectorConfig(
            name=n, task_count=c) for n, c in conns.items()])


def split(labels):
    """Seed labels -> (connectors, {connector: [task ids]})."""
    conns, tasks = [], {}
    for lab in labels:
        c, kind, n = lab[0], lab[1], int(lab[2:])
        if kind == "C":
            conns.append(c)
        else:
            tasks.setdefault(c, []).append(n - 1)
    return conns, tasks


def owned_ct(labels):
    conns, tasks = split(labels)
    return m.ConnectGroupHeartbeatRequestConnectorsAndTasks(
        connectors=conns, tasks=[m.ConnectGroupHeartbeatRequestConnectorTasks(
            connector=c, task_ids=t) for c, t in tasks.items()])


def hb(member, epoch, gid="g", owned=None, assignors=None, config=None, **kw):
    if epoch == 0:
        kw.setdefault("rebalance_timeout_ms", TIMEOUT)
        if assignors is None:
            assignors = [asg()]
    return m.ConnectGroupHeartbeatRequest(
        group_id=gid, member_id=member, member_epoch=epoch, client_assignors=assignors,
        config_state=config,
        owned_connectors_and_tasks=None if owned is None else owned_ct(owned), **kw)


def labels_of(ct):
    """Wire ConnectorsAndTasks -> sorted seed labels."""
    out = ["%sC0" % c for c in ct.connectors]
    out += ["%sT%d" % (t.connector, i + 1) for t in ct.tasks for i in t.task_ids]
    return sorted(out)


def unit_labels(g, units):
    return sorted("%sC0" % c if t < 0 else "%sT%d" % (c, t + 1) for c, t in g.names(units))


def state(h, gid="g"):
    """The seed's view of a group: epochs, target and member assignments."""
    g = h.shard.group(gid)
    return {"group": g.epoch, "target_epoch": g.target_epoch,
            "target": {mid: unit_labels(g, t.units) for mid, t in g.target.items()
                       if t.units},
            "members": {mid: (a.epoch, unit_labels(g, a.assigned))
                        for mid, a in g.current.items()}}


def load(h, records):
    """Put durable records in the harness's log and replay them (what recovery does), then
    re-arm the group timers as the runtime does after loading."""
    h._apply(Result(None, tuple(records)))
    h.shard.rearm(h.now)


# ----------------------------------------------------------------------------- test worker
class WorkerState(msgspec.Struct):
    """The test assignor's opaque AssignorState: the IcaState plus what the last target
    assigned, by name (so that work whose owner departed is recognised as lost)."""
    deadline_ms: int = -1
    lost: list = []             # [(connector, task or -1)]
    assigned: list = []


class Worker:
    """The chosen worker's role: PrepareAssignment, the incremental cooperative assignor,
    InstallAssignment."""

    def __init__(self, h, gid="g", delay=DELAY):
        self.h, self.gid, self.delay = h, gid, delay
        self.prepared = None

    def prepare(self, member, epoch):
        p = self.h.send(m.ConnectGroupPrepareAssignmentRequest(
            group_id=self.gid, member_id=member, member_epoch=epoch))
        assert p.error_code == 0, p
        self.prepared = p
        return p

    def assign(self, p):
        """-> (install members, rebalance delay, assignor state bytes)"""
        names = [c.name for c in p.connectors]
        tc = [c.task_count for c in p.connectors]
        base = connect_units(tc)

        def unit(conn, task):
            if conn not in names:
                return None
            c = names.index(conn)
            if task >= tc[c]:
                return None
            return int(base[c]) + 1 + task

        cur = np.full(int(base[-1]), -1, dtype=np.int32)
        for w, mem in enumerate(p.members):
            ct = mem.connectors_and_tasks
            for c in ct.connectors:
                cur[unit(c, -1)] = w
            for t in ct.tasks:
                for i in t.task_ids:
                    cur[unit(t.connector, i)] = w
        st = msgspec.msgpack.decode(p.assignor_state, type=WorkerState) \
            if p.assignor_state else WorkerState()
        for conn, task in st.assigned:
            u = unit(conn, task)
            if u is not None and cur[u] == -1:
                cur[u] = LOST                     # its owner left the group
        lost = sorted(u for u in (unit(c, t) for c, t in st.lost) if u is not None)
        ica = IcaState(st.deadline_ms, np.array(lost, dtype=np.int32))
        res = incremental_cooperative(tc, cur, len(p.members), p.coordinator_time_ms,
                                      self.delay, ica)
        name_of = [(names[c], t - int(base[c]) - 1) for c in range(len(names))
                   for t in range(int(base[c]), int(base[c + 1]))]
        members = []
        for mem, wa in zip(p.members, to_wire(res.owner, tc, len(p.members))):
            members.append(m.ConnectGroupInstallAssignmentRequestMember(
                member_id=mem.member_id,
                connectors_and_tasks=m.ConnectGroupInstallAssignmentRequestConnectorsAndTasks(
                    connectors=[names[c] for c in wa.connectors],
                    tasks=[m.ConnectGroupInstallAssignmentRequestConnectorTasks(
                        connector=names[c], task_ids=ids) for c, ids in wa.tasks])))
        new = WorkerState(res.next_state.deadline_ms,
                          [name_of[u] for u in res.next_state.lost.tolist()],
                          [name_of[u] for u in np.flatnonzero(res.owner >= 0).tolist()])
        return members, res.rebalance_delay_ms, msgspec.msgpack.encode(new)

    def install(self, member, epoch, members=None, group_epoch=None, delay=None, state=None,
                error=0):
        p = self.prepared
        if members is None:
            members, d, s = self.assign(p)
            delay = d if delay is None else delay
            state = s if state is None else state
        return self.h.send(m.ConnectGroupInstallAssignmentRequest(
            group_id=self.gid, member_id=member, member_epoch=epoch,
            group_epoch=p.group_epoch if group_epoch is None else group_epoch, error=error,
            rebalance_delay_ms=-1 if delay is None else delay, assignor_state=state,
            members=members))

    def compute(self, member, epoch):
        self.prepare(member, epoch)
        r = self.install(member, epoch)
        assert r.error_code == 0, r
        return r


def install_member(member, labels):
    conns, tasks = split(labels)
    return m.ConnectGroupInstallAssignmentRequestMember(
        member_id=member,
        connectors_and_tasks=m.ConnectGroupInstallAssignmentRequestConnectorsAndTasks(
            connectors=conns, tasks=[m.ConnectGroupInstallAssignmentRequestConnectorTasks(
                connector=c, task_ids=t) for c, t in tasks.items()]))


def assignment(r):
    return None if r.assignment is None else labels_of(r.assignment.connectors_and_tasks)


# ----------------------------------------------------------------------------- case studies
def w1_joins(coord):
    """The seed's "W1 joins the Group"; returns (harness, worker) at its final state."""
    h = coord()
    w = Worker(h)
    r = h.send(hb("W1", 0, config=cfg_state()))
    # W1 joins: group epoch 1, member at epoch 0; it is chosen to compute (COMPUTE_ASSIGNMENT
    # carries its epoch and assignment like a successful response).
    assert (r.error_code, r.member_epoch, assignment(r)) == (E.COMPUTE_ASSIGNMENT, 0, [])
    assert state(h) == {"group": 1, "target_epoch": 0, "target": {},
                        "members": {"W1": (0, [])}}
    w.compute("W1", 0)
    assert state(h) == {"group": 1, "target_epoch": 1, "target": {"W1": ALL},
                        "members": {"W1": (0, [])}}
    r = h.send(hb("W1", 0, owned=[]))
    assert (r.error_code, r.member_epoch, assignment(r)) == (0, 1, ALL)
    assert state(h) == {"group": 1, "target_epoch": 1, "target": {"W1": ALL},
                        "members": {"W1": (1, ALL)}}
    # The only worker: no delayed rebalance.
    assert h.shard.group("g").rebalance_deadline_ms == -1
    # W1 reports the work it started: the assignment is confirmed, no longer repeated.
    r = h.send(hb("W1", 1, owned=ALL))
    assert (r.error_code, r.member_epoch, r.assignment) == (0, 1, None)
    return h, w


def test_case_study_w1_joins(coord):
    w1_joins(coord)


def test_case_study_w2_joins(coord):
    h, w = w1_joins(coord)
    r = h.send(hb("W2", 0))
    # Deviation: the seed lists W2 at epoch 0 here; KIP-848 reconciliation runs in the join
    # heartbeat itself and moves W2 (nothing to revoke, empty target) to the target epoch 1 at
    # once. The seed's next table shows exactly that (W2 epoch=1).
    assert (r.error_code, r.member_epoch, assignment(r)) == (0, 1, [])
    assert state(h) == {"group": 2, "target_epoch": 1, "target": {"W1": ALL},
                        "members": {"W1": (1, ALL), "W2": (1, [])}}
    r = h.send(hb("W1", 1))
    assert (r.error_code, r.member_epoch, r.assignment) == (E.COMPUTE_ASSIGNMENT, 1, None)
    w.compute("W1", 1)
    W1T, W2T = ["AC0", "AT1", "AT2"], ["BC0", "BT1"]
    assert state(h) == {"group": 2, "target_epoch": 2, "target": {"W1": W1T, "W2": W2T},
                        "members": {"W1": (1, ALL), "W2": (1, [])}}
    # W1 is asked to revoke BC0, BT1 (epoch unchanged until it acknowledges).
    r = h.send(hb("W1", 1, owned=ALL))
    assert (r.error_code, r.member_epoch, assignment(r)) == (0, 1, W1T)
    assert h.shard.group("g").current["W1"].state == rc.UNREVOKED
    r = h.send(hb("W1", 1, owned=W1T))
    assert (r.error_code, r.member_epoch, r.assignment) == (0, 2, None)
    assert state(h) == {"group": 2, "target_epoch": 2, "target": {"W1": W1T, "W2": W2T},
                        "members": {"W1": (2, W1T), "W2": (1, [])}}
    r = h.send(hb("W2", 1, owned=[]))
    assert (r.error_code, r.member_epoch, assignment(r)) == (0, 2, W2T)
    assert state(h) == {"group": 2, "target_epoch": 2, "target": {"W1": W1T, "W2": W2T},
                        "members": {"W1": (2, W1T), "W2": (2, W2T)}}
    assert h.shard.group("g").state_name() == "Stable"


AT35 = {"W1": ["AC0", "AT1"], "W2": ["BC0", "BT1"], "W3": ["AT2"]}
# Version ranges that make W3 the only worker covering every other one, so that it is the one
# chosen, as in the seed (with equal ranges the lowest member id, W1, would be).
RANGES = {"W1": (1, 2), "W2": (1, 2), "W3": (0, 2)}


def at_epoch_35(coord, **cfg):
    """The seed's starting point of "Worker leaves"/"Worker bounces", built by replaying the
    records a coordinator would have written by then (exactly what recovery does: it also
    exercises the re-arming of timers). Driving 35 rebalances by hand would test nothing more."""
    h = coord(config=ShardConfig(**cfg)) if cfg else coord()
    gid = "g"
    A = m.ConnectWorkerGroupMemberMetadataValueAssignor
    recs = [Record(m.ConnectWorkerGroupConnectorsTasksMetadataKey(group_id=gid),
                   m.ConnectWorkerGroupConnectorsTasksMetadataValue(
                       config_offset=10, connectors=[
                           m.ConnectWorkerGroupConnectorsTasksMetadataValueConnector(
                               name=n, task_count=c) for n, c in CONFIG.items()]))]
    for mid, (lo, hi) in RANGES.items():
        recs.append(Record(
            m.ConnectWorkerGroupMemberMetadataKey(group_id=gid, member_id=mid),
            m.ConnectWorkerGroupMemberMetadataValue(
                worker_url="http://%s:8083" % mid.lower(), rebalance_timeout_ms=TIMEOUT,
                client_assignors=[A(name=ICA, minimum_version=lo, maximum_version=hi,
                                    version=hi)])))
    TT = m.ConnectWorkerGroupTargetAssignmentMemberValueConnectorTasks
    CT = m.ConnectWorkerGroupCurrentMemberAssignmentValueConnectorTasks
    for mid, labs in AT35.items():
        conns, tasks = split(labs)
        recs.append(Record(
            m.ConnectWorkerGroupTargetAssignmentMemberKey(group_id=gid, member_id=mid),
            m.ConnectWorkerGroupTargetAssignmentMemberValue(
                connectors=conns, tasks=[TT(connector=c, task_ids=t) for c, t in tasks.items()])))
    everything = [(c, -1) for c in CONFIG] + [(c, t) for c, n in CONFIG.items()
                                              for t in range(n)]
    recs.append(Record(
        m.ConnectWorkerGroupTargetAssignmentMetadataKey(group_id=gid),
        m.ConnectWorkerGroupTargetAssignmentMetadataValue(
            assignment_epoch=35, assignor_name=ICA,
            assignor_state=msgspec.msgpack.encode(WorkerState(assigned=everything)))))
    for mid, labs in AT35.items():
        conns, tasks = split(labs)
        recs.append(Record(
            m.ConnectWorkerGroupCurrentMemberAssignmentKey(group_id=gid, member_id=mid),
            m.ConnectWorkerGroupCurrentMemberAssignmentValue(
                member_epoch=35, previous_member_epoch=34, state=rc.STABLE, connectors=conns,
                tasks=[CT(connector=c, task_ids=t) for c, t in tasks.items()])))
    recs.append(Record(m.ConnectWorkerGroupMetadataKey(group_id=gid),
                       m.ConnectWorkerGroupMetadataValue(epoch=35)))
    load(h, recs)
    assert state(h) == {"group": 35, "target_epoch": 35, "target": AT35,
                        "members": {mid: (35, labs) for mid, labs in AT35.items()}}
    return h, Worker(h)


def beat(h, epochs, owned=None):
    """One heartbeat of each listed worker at its epoch; -> {member: response}."""
    return {mid: h.send(hb(mid, e, owned=None if owned is None else owned[mid]))
            for mid, e in epochs.items()}


def w2_expires(h, w):
    """W1 and W3 keep heartbeating, W2 does not: the coordinator removes it at its session
    timeout, then W3 computes a target that holds W2's work for the delay."""
    for _ in range(9):                                    # 9 x 5 s = the 45 s session
        h.advance(5_000)
        rs = beat(h, {"W1": 35, "W3": 35})
        assert rs["W1"].error_code == 0
    # Deviation (by design): the departed worker's target record is deleted with the member
    # (as Kafka removes a member's records); the seed keeps W2 in target 35 until the next
    # target. Its units are unassigned in both readings.
    assert state(h) == {"group": 36, "target_epoch": 35,
                        "target": {"W1": AT35["W1"], "W3": AT35["W3"]},
                        "members": {"W1": (35, AT35["W1"]), "W3": (35, AT35["W3"])}}
    assert rs["W3"].error_code == E.COMPUTE_ASSIGNMENT
    assert h.shard.group("g").computing == "W3"
    w.compute("W3", 35)
    T36 = {"W1": AT35["W1"], "W3": AT35["W3"]}
    assert state(h) == {"group": 36, "target_epoch": 36, "target": T36,
                        "members": {"W1": (35, AT35["W1"]), "W3": (35, AT35["W3"])}}
    # The assignor asked for a rebalance after the delay; the coordinator keeps the deadline.
    g = h.shard.group("g")
    assert g.rebalance_deadline_ms == h.now + DELAY
    assert h.shard.timers.get(TimerKey(connect.DELAYED, "g")) == h.now + DELAY
    rs = beat(h, {"W1": 35, "W3": 35})
    assert [(r.error_code, r.member_epoch, r.assignment) for r in rs.values()] == \
        [(0, 36, None), (0, 36, None)]       # same work: no Assignment in the response
    assert state(h)["members"] == {"W1": (36, AT35["W1"]), "W3": (36, AT35["W3"])}
    return T36


def test_case_study_worker_leaves(coord):
    h, w = at_epoch_35(coord)
    w2_expires(h, w)
    deadline = h.shard.group("g").rebalance_deadline_ms
    while h.now + 5_000 < deadline:
        h.advance(5_000)
        rs = beat(h, {"W1": 36, "W3": 36})
        assert all(r.error_code == 0 for r in rs.values())
    h.advance(deadline - h.now)                           # the delayed rebalance fires
    assert state(h)["group"] == 37 and state(h)["target_epoch"] == 36
    rs = beat(h, {"W1": 36, "W3": 36})
    assert rs["W1"].error_code == 0 and rs["W3"].error_code == E.COMPUTE_ASSIGNMENT
    w.compute("W3", 36)
    # Deviation (docs/decisions.md, Assignment engine): the seed shows W1=[AC0, AT1, BC0],
    # W3=[BT1 (its "BC1"), AT2], both connectors on W1. Our incremental cooperative assignor
    # balances connectors and tasks separately, so each worker gets one connector.
    T37 = {"W1": ["AC0", "AT1", "BT1"], "W3": ["AT2", "BC0"]}
    assert state(h) == {"group": 37, "target_epoch": 37, "target": T37,
                        "members": {"W1": (36, AT35["W1"]), "W3": (36, AT35["W3"])}}
    rs = beat(h, {"W1": 36, "W3": 36})
    assert {k: (r.member_epoch, assignment(r)) for k, r in rs.items()} == \
        {"W1": (37, T37["W1"]), "W3": (37, T37["W3"])}
    assert state(h)["members"] == {"W1": (37, T37["W1"]), "W3": (37, T37["W3"])}
    assert h.shard.group("g").rebalance_deadline_ms == -1   # nothing held any more


def test_case_study_worker_bounces(coord):
    h, w = at_epoch_35(coord)
    w2_expires(h, w)
    h.advance(5_000)
    # W2 comes back before the delay. It was removed, so its old epoch is rejected; as the
    # seed's response handling says, it rejoins with the same member id at epoch 0.
    r = h.send(hb("W2", 35, owned=AT35["W2"]))
    assert r.error_code == E.UNKNOWN_MEMBER_ID
    r = h.send(hb("W2", 0, assignors=[asg(1, 2)]))
    assert (r.error_code, r.member_epoch, assignment(r)) == (0, 36, [])
    assert state(h)["group"] == 37
    rs = beat(h, {"W1": 36, "W3": 36})
    assert rs["W3"].error_code == E.COMPUTE_ASSIGNMENT and rs["W1"].error_code == 0
    w.compute("W3", 36)
    assert state(h) == {"group": 37, "target_epoch": 37, "target": AT35,
                        "members": {"W1": (36, AT35["W1"]), "W2": (36, []),
                                    "W3": (36, AT35["W3"])}}
    assert h.shard.group("g").rebalance_deadline_ms == -1   # W2 took its work back
    assert h.shard.timers.get(TimerKey(connect.DELAYED, "g")) is None
    rs = beat(h, {"W1": 36, "W2": 36, "W3": 36}, owned={"W1": AT35["W1"], "W2": [],
                                                        "W3": AT35["W3"]})
    assert {k: (r.error_code, r.member_epoch) for k, r in rs.items()} == \
        {"W1": (0, 37), "W2": (0, 37), "W3": (0, 37)}
    assert assignment(rs["W2"]) == AT35["W2"]
    assert state(h) == {"group": 37, "target_epoch": 37, "target": AT35,
                        "members": {mid: (37, labs) for mid, labs in AT35.items()}}


# ----------------------------------------------------------------------------- heartbeat validation
@pytest.mark.parametrize("kw,fragment", [
    (dict(group_id=""), "GroupId"),
    (dict(member_id=""), "MemberId"),
    (dict(member_epoch=-3), "MemberEpoch"),
    (dict(member_epoch=-2), "requires an InstanceId"),
    (dict(instance_id=""), "InstanceId"),
    (dict(rebalance_timeout_ms=-1), "RebalanceTimeoutMs"),
    (dict(rebalance_timeout_ms=0), "RebalanceTimeoutMs"),
    (dict(client_assignors=None), "ClientAssignors must be provided"),
    (dict(server_assignor="uniform"), "can't be used together"),
    (dict(client_assignors=[asg(name="")]), "Name"),
    (dict(client_assignors=[asg(lo=-2, hi=1, version=0)]), "MinimumVersion"),
    (dict(client_assignors=[asg(lo=-1, hi=-1, version=-1)]), "MaximumVersion"),
    (dict(client_assignors=[asg(lo=3, hi=2, version=2)]), "MaximumVersion"),
    (dict(client_assignors=[asg(lo=1, hi=2, version=3)]), "Version"),
    (dict(client_assignors=[asg(lo=1, hi=2, version=0)]), "Version"),
    (dict(config_state=cfg_state({"A": -1})), "task counts"),
])
def test_heartbeat_validation(coord, kw, fragment):
    h = coord()
    base = dict(group_id="g", member_id="W1", member_epoch=0, rebalance_timeout_ms=TIMEOUT,
                client_assignors=[asg()])
    base.update(kw)
    r = h.send(m.ConnectGroupHeartbeatRequest(**base))
    assert r.error_code == E.INVALID_REQUEST and fragment in r.error_message
    assert h.shard.groups == {} and h.log == []


def test_heartbeat_validation_comes_first(coord):
    """A request failing validation and naming an unknown member gets INVALID_REQUEST."""
    h = coord()
    r = h.send(hb("W9", 3, instance_id=""))
    assert r.error_code == E.INVALID_REQUEST
    r = h.send(hb("W9", 3))
    assert r.error_code == E.UNKNOWN_MEMBER_ID


def test_server_assignor_is_unsupported(coord):
    h = coord()
    r = h.send(m.ConnectGroupHeartbeatRequest(group_id="g", member_id="W1", member_epoch=0,
                                              rebalance_timeout_ms=TIMEOUT,
                                              server_assignor="uniform"))
    assert r.error_code == E.UNSUPPORTED_ASSIGNOR and "server-side" in r.error_message


def test_assignors_must_be_shared_and_overlap(coord):
    h = coord()
    assert h.send(hb("W1", 0, assignors=[asg(1, 2)])).error_code == E.COMPUTE_ASSIGNMENT
    r = h.send(hb("W2", 0, assignors=[asg(3, 4)]))
    assert r.error_code == E.UNSUPPORTED_ASSIGNOR and "W1 [1-2], W2 [3-4]" in r.error_message
    r = h.send(hb("W2", 0, assignors=[asg(0, 1, name="eager")]))
    assert r.error_code == E.UNSUPPORTED_ASSIGNOR and "no assignor" in r.error_message
    assert set(h.shard.group("g").members) == {"W1"}
    # An existing member changing to a conflicting list is rejected and keeps its old one.
    r = h.send(hb("W1", 0, assignors=[asg(0, 1, name="eager")]))
    assert r.error_code == 0 or r.error_code == E.COMPUTE_ASSIGNMENT
    assert h.send(hb("W2", 0, assignors=[asg(1, 1)])).error_code == E.UNSUPPORTED_ASSIGNOR


def test_assignor_selection_votes_in_precedence_order(coord):
    h = coord()
    eager = asg(0, 0, name="eager")
    h.send(hb("W1", 0, assignors=[asg(), eager]))
    h.send(hb("W2", 0, assignors=[eager, asg()]))
    h.send(hb("W3", 0, assignors=[eager, asg()]))
    assert select_assignor(h.shard.group("g").members) == ("eager", None)
    h.send(hb("W3", -1))
    # One vote each: the tie goes to the first choice of the lowest member id (W1).
    assert select_assignor(h.shard.group("g").members) == (ICA, None)


def test_non_connect_group_is_not_found(coord):
    h = coord()
    h.shard.groups["c"] = type("Classic", (), {"TYPE": "classic", "held_units": lambda s: None,
                                              "snapshot": lambda s, d: None})()
    try:
        r = h.send(hb("W1", 0, gid="c"))
        assert r.error_code == E.GROUP_ID_NOT_FOUND and "classic" in r.error_message
        r = h.send(m.ConnectGroupPrepareAssignmentRequest(group_id="c", member_id="W1"))
        assert r.error_code == E.GROUP_ID_NOT_FOUND
    finally:
        del h.shard.groups["c"]


# ----------------------------------------------------------------------------- epochs
def stable_pair(coord, w2_instance=None, **cfg):
    """W1 and W2 stable at epoch 2 with the seed's W2-joins target."""
    h = coord(config=ShardConfig(**cfg)) if cfg else coord()
    w = Worker(h)
    h.send(hb("W1", 0, config=cfg_state()))
    w.compute("W1", 0)
    h.send(hb("W1", 0, owned=[]))
    h.send(hb("W2", 0, instance_id=w2_instance))
    h.send(hb("W1", 1))
    w.compute("W1", 1)
    h.send(hb("W1", 1, owned=ALL))
    h.send(hb("W1", 1, owned=["AC0", "AT1", "AT2"]))
    h.send(hb("W2", 1, owned=[]))
    assert state(h)["members"] == {"W1": (2, ["AC0", "AT1", "AT2"]), "W2": (2, ["BC0", "BT1"])}
    h.send(hb("W2", 2, owned=["BC0", "BT1"]))    # W2 reports the work it started
    return h, w


def test_noop_heartbeat_writes_nothing(coord):
    h, w = stable_pair(coord)
    n = len(h.log)
    r = h.send(hb("W2", 2))
    r2 = h.send(hb("W2", 2, owned=["BC0", "BT1"], config=cfg_state()))   # same config offset
    assert (r.error_code, r.member_epoch, r.assignment) == (0, 2, None)
    assert (r2.error_code, r2.assignment) == (0, None)
    assert len(h.log) == n
    # The owned work differs from the assignment: the response repeats the assignment.
    r = h.send(hb("W2", 2, owned=["BC0"]))
    assert assignment(r) == ["BC0", "BT1"] and len(h.log) == n


@pytest.mark.parametrize("change", ["reason", "metadata", "version", "range", "list"])
def test_assignor_changes_bump_the_epoch(coord, change):
    h, w = stable_pair(coord)
    new = {"reason": [asg(reason=1)], "metadata": [asg(metadata=b"x")],
           "version": [asg(version=1)], "range": [asg(0, 3)],
           "list": [asg(), asg(0, 0, name="eager")]}[change]
    r = h.send(hb("W2", 2, assignors=new))
    assert r.error_code == (E.COMPUTE_ASSIGNMENT if change == "range" else 0)
    assert state(h)["group"] == 3
    assert isinstance(h.log[-1].value, m.ConnectWorkerGroupMetadataValue)
    # With [0-3] W2 is the only worker covering the other's range: it computes.
    chosen = "W2" if change == "range" else "W1"
    assert h.shard.group("g").computing == chosen
    assert h.send(hb(chosen, 2)).error_code == E.COMPUTE_ASSIGNMENT


def test_url_and_timeout_changes_are_stored_without_a_bump(coord):
    h, w = stable_pair(coord)
    r = h.send(hb("W2", 2, worker_url="http://w2:8083", rebalance_timeout_ms=5_000))
    assert r.error_code == 0 and state(h)["group"] == 2
    meta = h.shard.group("g").members["W2"]
    assert (meta.worker_url, meta.rebalance_timeout_ms) == ("http://w2:8083", 5_000)


def test_config_state_changes(coord):
    h, w = stable_pair(coord)
    n = len(h.log)
    # A lower (or equal) config offset is ignored, whatever it says.
    h.send(hb("W2", 2, config=cfg_state({"A": 2}, offset=0)))
    h.send(hb("W2", 2, config=cfg_state({"A": 5}, offset=1)))
    assert len(h.log) == n and state(h)["group"] == 2
    # A newer offset with the same connectors is persisted without a bump.
    h.send(hb("W2", 2, config=cfg_state(offset=2)))
    assert len(h.log) == n + 1 and state(h)["group"] == 2
    assert h.shard.group("g").config_offset == 2
    # More tasks: persisted, one epoch bump, a new computation covers the new task.
    r = h.send(hb("W2", 2, config=cfg_state({"A": 3, "B": 1}, offset=3)))
    assert r.error_code == 0 and state(h)["group"] == 3
    assert [type(x.value).__name__ for x in h.log[-2:]] == [
        "ConnectWorkerGroupConnectorsTasksMetadataValue", "ConnectWorkerGroupMetadataValue"]
    h.send(hb("W1", 2))
    p = w.prepare("W1", 2)
    assert [(c.name, c.task_count) for c in p.connectors] == [("A", 3), ("B", 1)]
    assert p.config_offset == 3
    assert w.install("W1", 2).error_code == 0
    tgt = state(h)["target"]
    assert sorted(tgt["W1"] + tgt["W2"]) == ["AC0", "AT1", "AT2", "AT3", "BC0", "BT1"]
    # A new connector: bump again.
    r = h.send(hb("W1", 2, config=cfg_state({"A": 3, "B": 1, "C": 0}, offset=4)))
    assert (r.error_code, r.member_epoch, state(h)["group"]) == (E.COMPUTE_ASSIGNMENT, 3, 4)
    # Removed connector and tasks: bump; their units leave nobody's target at the next install.
    r = h.send(hb("W1", 3, config=cfg_state({"C": 1}, offset=5)))
    assert r.error_code == E.COMPUTE_ASSIGNMENT and state(h)["group"] == 5


# ----------------------------------------------------------------------------- worker selection
def test_worker_selection_covering_range(coord):
    h = coord()
    # Ids chosen so that the covering worker is not the lowest id.
    h.send(hb("z-A", 0, assignors=[asg(1, 5)]))
    h.send(hb("a-B", 0, assignors=[asg(3, 4)]))
    h.send(hb("b-C", 0, assignors=[asg(2, 4)]))
    g = h.shard.group("g")
    assert g.computing == "z-A"
    assert h.send(hb("a-B", 0, assignors=[asg(3, 4)])).error_code == 0
    assert h.send(hb("z-A", 0, assignors=[asg(1, 5)])).error_code == E.COMPUTE_ASSIGNMENT
    r = h.send(m.ConnectGroupPrepareAssignmentRequest(group_id="g", member_id="a-B",
                                                      member_epoch=0))
    assert r.error_code == E.UNKNOWN_MEMBER_ID and "not the worker chosen" in r.error_message


def test_no_covering_worker_is_fatal_until_membership_changes(coord):
    h = coord()
    h.send(hb("W1", 0, assignors=[asg(1, 3)], config=cfg_state()))
    r = h.send(hb("W2", 0, assignors=[asg(2, 5)]))
    # The join is accepted (the ranges overlap) but nobody can compute: UNSUPPORTED_ASSIGNOR
    # naming the ranges, no reconciliation, no chosen worker.
    assert r.error_code == E.UNSUPPORTED_ASSIGNOR
    assert "W1 [1-3], W2 [2-5]" in r.error_message
    assert h.shard.group("g").computing is None
    r = h.send(hb("W1", 0))
    assert r.error_code == E.UNSUPPORTED_ASSIGNOR
    # A third worker covering both ends the fatal state.
    r = h.send(hb("W3", 0, assignors=[asg(0, 6)]))
    assert r.error_code == E.COMPUTE_ASSIGNMENT and h.shard.group("g").computing == "W3"
    # So does membership shrinking: W3 and W2 leave, W1 alone can compute.
    h.send(hb("W3", -1))
    assert h.send(hb("W1", 0)).error_code == E.UNSUPPORTED_ASSIGNOR
    h.send(hb("W2", -1))
    assert h.send(hb("W1", 0)).error_code == E.COMPUTE_ASSIGNMENT


LONG_SESSION = ShardConfig(connect_session_timeout_ms=10 * TIMEOUT)


def test_reselection_when_the_chosen_worker_times_out(coord):
    h = coord(config=LONG_SESSION)
    h.send(hb("W1", 0, config=cfg_state()))
    h.send(hb("W2", 0))
    g = h.shard.group("g")
    assert g.computing == "W1"
    assert h.shard.timers.get(TimerKey(connect.ASSIGNMENT, "g")) == TIMEOUT
    h.advance(TIMEOUT - 1)
    assert g.computing == "W1"
    h.advance(1)
    assert g.computing == "W2"
    assert h.send(hb("W2", 0)).error_code == E.COMPUTE_ASSIGNMENT
    assert h.send(hb("W1", 0)).error_code == 0
    r = h.send(m.ConnectGroupPrepareAssignmentRequest(group_id="g", member_id="W1",
                                                      member_epoch=0))
    assert r.error_code == E.UNKNOWN_MEMBER_ID
    # W2 times out too: W1 is the other qualifying worker again.
    h.advance(TIMEOUT)
    assert g.computing == "W1"


def test_reselection_when_the_chosen_worker_leaves(coord):
    h = coord()
    h.send(hb("W1", 0, config=cfg_state()))
    h.send(hb("W2", 0))
    Worker(h).prepare("W1", 0)
    h.send(hb("W1", -1))
    g = h.shard.group("g")
    assert g.computing == "W2" and g.prepared is None
    Worker(h).compute("W2", 0)
    assert state(h)["target"] == {"W2": ALL}


def test_only_one_worker_when_alone_is_reselected(coord):
    h = coord(config=LONG_SESSION)
    h.send(hb("W1", 0))
    h.advance(TIMEOUT)
    assert h.shard.group("g").computing == "W1"


# ----------------------------------------------------------------------- prepare / install checks
def prep(gid="g", member="W1", epoch=0):
    return m.ConnectGroupPrepareAssignmentRequest(group_id=gid, member_id=member,
                                                  member_epoch=epoch)


def inst(gid="g", member="W1", epoch=0, group_epoch=1, members=(), delay=-1, error=0):
    return m.ConnectGroupInstallAssignmentRequest(
        group_id=gid, member_id=member, member_epoch=epoch, group_epoch=group_epoch,
        error=error, rebalance_delay_ms=delay, members=list(members))


@pytest.mark.parametrize("make", [prep, inst])
def test_prepare_install_checks_in_order(coord, make):
    h = coord()
    h.send(hb("W1", 0, config=cfg_state()))
    h.send(hb("W2", 0))            # W1 is chosen, W2 is not
    e1 = h.shard.group("g").current["W2"].epoch
    cases = [
        (make(gid="", member="", epoch=-1), E.INVALID_REQUEST, "GroupId"),
        (make(gid="nope", member="", epoch=-1), E.INVALID_REQUEST, "MemberId"),
        (make(gid="nope", member="W1", epoch=-1), E.INVALID_REQUEST, "MemberEpoch"),
        (make(gid="nope", member="W9", epoch=0), E.GROUP_ID_NOT_FOUND, "nope"),
        (make(member="W9", epoch=7), E.UNKNOWN_MEMBER_ID, "no member W9"),
        (make(member="W2", epoch=e1 + 1), E.FENCED_MEMBER_EPOCH, "epoch"),
        (make(member="W2", epoch=e1), E.UNKNOWN_MEMBER_ID, "not the worker chosen"),
    ]
    for req, code, fragment in cases:
        r = h.send(req)
        assert (r.error_code, fragment in (r.error_message or "")) == (code, True), (req, r)


def test_install_checks_after_the_chosen_one(coord):
    h = coord()
    h.send(hb("W1", 0, config=cfg_state()))
    r = h.send(inst(members=[install_member("W1", ALL)]))
    assert r.error_code == E.INVALID_REQUEST and "Prepare" in r.error_message
    w = Worker(h)
    w.prepare("W1", 0)
    # Invalid and for the wrong epoch: the epoch check comes first.
    r = h.send(inst(group_epoch=0, members=[install_member("W9", ALL)]))
    assert r.error_code == E.STALE_MEMBER_EPOCH and "prepared group epoch 1" in r.error_message
    r = h.send(inst(members=[install_member("W9", ALL)]))
    assert r.error_code == E.INVALID_ASSIGNMENT
    assert state(h)["target_epoch"] == 0
    assert h.send(inst(members=[install_member("W1", ALL)])).error_code == 0
    assert state(h)["target"] == {"W1": ALL}
    # Installed: the worker is no longer computing.
    assert h.send(inst(members=[install_member("W1", ALL)])).error_code == E.UNKNOWN_MEMBER_ID


@pytest.mark.parametrize("members,fragments", [
    ([("W1", ["AC0", "AT1", "BC0", "BT1"])], ["task A-1 is not assigned"]),
    ([("W1", ALL), ("W2", ["AT1"])], ["task A-0 is assigned to W1 and W2"]),
    ([("W1", ALL), ("W1", [])], ["worker W1 is listed twice"]),
    ([("W1", ["AC0", "AT1", "AT2"]), ("W9", ["BC0", "BT1"])], ["'W9' is not a worker"]),
    ([("W1", ALL + ["CC0"])], ["unknown connector 'C'"]),
    ([("W1", ALL + ["CT1"])], ["unknown connector 'C'"]),
    ([("W1", ALL + ["AT3"])], ["unknown task A-2"]),
])
def test_invalid_assignments(coord, members, fragments):
    h = coord()
    h.send(hb("W1", 0, config=cfg_state()))
    h.send(hb("W2", 0))
    Worker(h).prepare("W1", 0)
    n = len(h.log)
    r = h.send(inst(group_epoch=2, members=[install_member(w, labs) for w, labs in members]))
    assert r.error_code == E.INVALID_ASSIGNMENT
    for f in fragments:
        assert f in r.error_message, r.error_message
    assert len(h.log) == n and h.shard.group("g").computing == "W1"


def test_unassigned_work_is_allowed_only_with_a_delayed_rebalance(coord):
    h = coord()
    h.send(hb("W1", 0, config=cfg_state()))
    Worker(h).prepare("W1", 0)
    some = [install_member("W1", ["AC0", "AT1"])]
    assert h.send(inst(members=some)).error_code == E.INVALID_ASSIGNMENT
    assert h.send(inst(members=some, delay=1_000)).error_code == 0
    assert state(h)["target"] == {"W1": ["AC0", "AT1"]}


def test_assignment_for_an_old_epoch_after_a_worker_left(coord):
    """W1 prepares with W1+W2; W2 leaves; W1 prepares again (epoch 3, W1 only) and then
    installs what it computed for the old membership: INVALID_ASSIGNMENT."""
    h = coord()
    h.send(hb("W1", 0, config=cfg_state()))
    h.send(hb("W2", 0))
    w = Worker(h)
    p = w.prepare("W1", 0)
    old_members, _, _ = w.assign(p)
    h.send(hb("W2", -1))
    assert h.send(hb("W1", 0)).error_code == E.COMPUTE_ASSIGNMENT
    w.prepare("W1", 0)
    r = h.send(inst(group_epoch=3, members=old_members))
    assert r.error_code == E.INVALID_ASSIGNMENT and "'W2' is not a worker" in r.error_message
    # And for the old epoch itself: stale.
    r = h.send(inst(group_epoch=2, members=old_members))
    assert r.error_code == E.STALE_MEMBER_EPOCH


def test_worker_left_during_computation_is_dropped(coord):
    """Valid against the prepared metadata: installed at the prepared epoch; the departed
    worker's share stays unassigned until the next computation, which starts at once."""
    h = coord()
    h.send(hb("W1", 0, config=cfg_state()))
    h.send(hb("W2", 0))
    w = Worker(h)
    w.prepare("W1", 0)
    h.send(hb("W2", -1))               # group epoch 3
    assert w.install("W1", 0).error_code == 0
    g = h.shard.group("g")
    assert (g.epoch, g.target_epoch) == (3, 2)
    assert "W2" not in g.target and state(h)["target"]["W1"] != ALL
    assert g.computing == "W1"         # epoch 3 needs a target: W1 again
    w.compute("W1", 0)
    # The assignor sees W2's share as lost work and holds it for the delay.
    assert g.target_epoch == 3 and g.rebalance_deadline_ms == h.now + DELAY


def test_assignor_error_keeps_the_current_target(coord):
    h, w = stable_pair(coord)
    before = state(h)["target"]
    h.send(hb("W2", 2, assignors=[asg(reason=1)]))      # epoch 3
    h.send(hb("W1", 2))
    w.prepare("W1", 2)
    r = w.install("W1", 2, members=[], error=3)
    assert r.error_code == 0
    g = h.shard.group("g")
    assert (g.epoch, g.target_epoch, g.target_error) == (3, 3, 3)
    assert state(h)["target"] == before and g.computing is None
    r = h.send(hb("W1", 2))
    assert (r.error_code, r.member_epoch) == (0, 3)
    # A successful install clears the error.
    h.send(hb("W2", 2, assignors=[asg(reason=2)]))
    h.send(hb("W1", 3))
    w.compute("W1", 3)
    assert g.target_error == 0


def test_prepare_returns_the_group_state(coord):
    h, w = stable_pair(coord, w2_instance="i2")
    h.send(hb("W2", 2, assignors=[asg(reason=4, metadata=b"m2")], worker_url="http://w2"))
    h.now = 123_456
    h.send(hb("W1", 2))
    p = w.prepare("W1", 2)
    assert (p.group_epoch, p.assignor_name, p.coordinator_time_ms, p.config_offset) == \
        (3, ICA, 123_456, 1)
    assert msgspec.msgpack.decode(p.assignor_state, type=WorkerState).assigned
    assert [(x.member_id, x.member_epoch, x.instance_id, x.worker_url, x.assignor.reason,
             x.assignor.metadata, labels_of(x.connectors_and_tasks)) for x in p.members] == [
        ("W1", 2, None, None, 0, b"", ["AC0", "AT1", "AT2"]),
        ("W2", 2, "i2", "http://w2", 4, b"m2", ["BC0", "BT1"])]
    prepared = h.shard.group("g").prepared
    assert (prepared.epoch, prepared.member_ids, prepared.connectors) == \
        (3, ("W1", "W2"), (("A", 2), ("B", 1)))


# ----------------------------------------------------------------------------- reconciliation
def test_lost_response_is_tolerated(coord):
    h, w = w1_joins(coord)             # W1 moved 0 -> 1; pretend that response was lost
    r = h.send(hb("W1", 0, owned=[]))
    assert (r.error_code, r.member_epoch, assignment(r)) == (0, 1, ALL)
    r = h.send(hb("W1", 0))
    assert r.error_code == 0                     # epoch 0 is a rejoin, not a stale epoch
    # An epoch the coordinator never gave: fenced.
    r = h.send(hb("W1", 5))
    assert r.error_code == E.FENCED_MEMBER_EPOCH


def test_fenced_epoch_does_not_remove_the_member(coord):
    """An epoch the member cannot be at is fenced, but nothing changes: the request may be a
    late copy the live worker sent long ago (docs/decisions.md). The worker that really is
    behind abandons its work and rejoins at epoch 0; it gets its work back."""
    h, w = stable_pair(coord)
    g = h.shard.group("g")
    before = (dict(g.members), dict(g.current), dict(g.target), g.epoch, g.computing)
    session = h.shard.timers.get(TimerKey(connect.SESSION, "g", "W2"))
    res = h.shard.handle(hb("W2", 3), h.now, 0)
    assert res.response.error_code == E.FENCED_MEMBER_EPOCH
    assert "rejoin with epoch 0" in res.response.error_message
    assert not res.records and not res.timers
    h.send(hb("W2", 1))                          # an older epoch, not the previous one
    g = h.shard.group("g")
    assert (dict(g.members), dict(g.current), dict(g.target), g.epoch, g.computing) == before
    assert h.shard.timers.get(TimerKey(connect.SESSION, "g", "W2")) == session
    # The live worker goes on at its epoch, unaffected.
    r = h.send(hb("W2", 2))
    assert (r.error_code, r.member_epoch) == (0, 2)
    # A worker that was behind rejoins with epoch 0 and is given its assignment again.
    r = h.send(hb("W2", 0, owned=[]))
    assert (r.error_code, r.member_epoch) == (0, 2)
    assert assignment(r) == ["BC0", "BT1"]


@pytest.mark.parametrize("late", ["join", "heartbeat"])
def test_assignment_is_repeated_until_the_worker_confirms_it(coord, late):
    """Found by the simulation (liveness, seed 502670): the first copy of a request the worker
    retried arrives after the retry was answered and after the work it waits for was released;
    it is answered with that work, and the answer is lost. The worker saw its retry answered,
    so its next heartbeats omit their owned set: the assignment must be repeated until the
    worker reports exactly that work as owned, or it never runs it."""
    h, w = w1_joins(coord)
    W1T, W2T = ["AC0", "AT1", "AT2"], ["BC0", "BT1"]
    h.send(hb("W2", 0, owned=[]))
    h.send(hb("W1", 1))
    w.compute("W1", 1)
    h.send(hb("W1", 1, owned=ALL))               # W1 is asked to revoke W2's part
    r = h.send(hb("W2", 1, owned=[]))
    assert (r.member_epoch, r.assignment) == (2, None)     # UNRELEASED: W1 still holds it
    if late == "heartbeat":
        # The retry of an epoch-2 heartbeat (full, after the broken connection) is answered
        # first: nothing released yet.
        r = h.send(hb("W2", 2, owned=[]))
        assert (r.member_epoch, r.assignment) == (2, None)
    h.send(hb("W1", 1, owned=W1T))               # W1 acknowledges: W2's part is free
    copy = hb("W2", 0, owned=[]) if late == "join" else hb("W2", 2)
    lost = h.send(copy)                          # the late first copy; nobody reads this
    assert assignment(lost) == W2T
    assert state(h)["members"]["W2"] == (2, W2T)
    # W2's next heartbeat carries no owned set (nothing changed for it): it is still told.
    for _ in range(2):
        r = h.send(hb("W2", 2))
        assert (r.error_code, r.member_epoch, assignment(r)) == (0, 2, W2T)
    # W2 starts the work and reports it: confirmed, no longer repeated (the steady path).
    r = h.send(hb("W2", 2, owned=W2T))
    assert (r.error_code, r.assignment) == (0, None)
    n = len(h.log)
    r = h.send(hb("W2", 2))
    assert (r.error_code, r.member_epoch, r.assignment) == (0, 2, None)
    assert len(h.log) == n


def test_epoch_zero_heartbeat_of_a_known_worker_does_not_acknowledge_a_revocation(coord):
    """Found by the simulation (seeds 209968, 211303): the first copy of a worker's join
    (epoch 0, owning nothing) arrives after the worker was given work and asked to revoke part
    of it; its owned set acknowledged the revocation and the work went to another worker while
    it still ran it. A rejoin (or such a copy) is answered with the worker's assignment; only
    a heartbeat at its epoch acknowledges, and the revocation timer runs again."""
    h, w = w1_joins(coord)
    W1T, W2T = ["AC0", "AT1", "AT2"], ["BC0", "BT1"]
    h.send(hb("W2", 0, owned=[]))
    h.send(hb("W1", 1))
    w.compute("W1", 1)
    r = h.send(hb("W1", 1, owned=ALL))
    assert assignment(r) == W1T                  # W1 must revoke W2's part
    h.advance(1_000)
    late = h.send(hb("W1", 0, owned=[], config=cfg_state()))     # W1's first join, late
    assert (late.error_code, late.member_epoch, assignment(late)) == (0, 1, W1T)
    g = h.shard.group("g")
    assert g.current["W1"].state == rc.UNREVOKED and g.holders
    assert unit_labels(g, g.current["W1"].pending_revocation) == W2T
    assert h.shard.timers.get(TimerKey(connect.REVOCATION, "g", "W1")) == h.now + TIMEOUT
    r = h.send(hb("W2", 1, owned=[]))
    assert (r.member_epoch, r.assignment) == (2, None)     # still held by W1: not given
    # W1 (live all along) revokes and acknowledges at its epoch: W2 gets its part.
    r = h.send(hb("W1", 1, owned=W1T))
    assert (r.error_code, r.member_epoch) == (0, 2)
    assert h.shard.timers.get(TimerKey(connect.REVOCATION, "g", "W1")) is None
    assert assignment(h.send(hb("W2", 2))) == W2T


def test_unrevoked_member_is_fenced_at_its_rebalance_timeout(coord):
    h, w = w1_joins(coord)
    h.send(hb("W2", 0))
    h.send(hb("W1", 1))
    w.compute("W1", 1)
    r = h.send(hb("W1", 1, owned=ALL))
    assert h.shard.group("g").current["W1"].state == rc.UNREVOKED
    # W2 is at the target epoch but its work is still held by W1: UNRELEASED.
    r = h.send(hb("W2", 1, owned=[]))
    assert (r.member_epoch, r.assignment) == (2, None)
    assert h.shard.group("g").current["W2"].state == rc.UNRELEASED
    deadline = h.shard.timers.get(TimerKey(connect.REVOCATION, "g", "W1"))
    assert deadline == h.now + TIMEOUT
    for _ in range(TIMEOUT // 10_000 - 1):
        h.advance(10_000)
        h.send(hb("W1", 1))                      # heartbeats without acknowledging
        h.send(hb("W2", 2))
    assert "W1" in h.shard.group("g").members
    h.advance(10_000)
    g = h.shard.group("g")
    assert "W1" not in g.members and g.epoch == 3
    # W1's work is released: W2 gets its own target part at once.
    r = h.send(hb("W2", 2))
    assert assignment(r) == ["BC0", "BT1"]


def test_revocation_acknowledged_cancels_the_timer(coord):
    h, w = stable_pair(coord)
    assert h.shard.timers.get(TimerKey(connect.REVOCATION, "g", "W1")) is None


def test_session_expiry_and_leave(coord):
    h, w = stable_pair(coord, connect_session_timeout_ms=10_000)
    h.advance(9_999)
    h.send(hb("W1", 2))
    h.advance(1)
    g = h.shard.group("g")
    assert "W2" not in g.members and g.epoch == 3
    r = h.send(hb("W1", -1))
    assert (r.error_code, r.member_epoch) == (0, -1)
    assert g.members == {} and g.epoch == 4 and g.state_name() == "Empty"
    assert g.computing is None
    assert h.shard.timers.keys("g") == []
    assert h.send(hb("W1", -1)).error_code == E.UNKNOWN_MEMBER_ID


# ----------------------------------------------------------------------------- static members
def test_static_member_temporary_leave_and_return(coord):
    h, w = stable_pair(coord, w2_instance="i2")
    r = h.send(hb("W2", -2, instance_id="i2"))
    assert (r.error_code, r.member_epoch) == (0, -2)
    g = h.shard.group("g")
    assert g.epoch == 2 and g.current["W2"].epoch == -2
    assert g.held_units()["W2"]                  # its work stays held for it
    # Another member claiming the instance while it is away replaces it, keeping its work.
    r = h.send(hb("W2b", 0, instance_id="i2"))
    assert (r.error_code, r.member_epoch, assignment(r)) == (0, 2, ["BC0", "BT1"])
    assert "W2" not in g.members and g.epoch == 2 and g.static == {"i2": "W2b"}
    assert state(h)["target"]["W2b"] == ["BC0", "BT1"]
    # The instance is in use now.
    r = h.send(hb("W2c", 0, instance_id="i2"))
    assert r.error_code == E.UNRELEASED_INSTANCE_ID
    r = h.send(hb("W1", 2, instance_id="i2"))
    assert r.error_code == E.FENCED_INSTANCE_ID


def test_static_replacement_between_prepare_and_install(coord):
    """The install lists the member ids the prepare handed out; a static member replaced in
    between (found by the simulation, seed 100331) gets the old id's entry, and nothing is
    left assigned twice or not at all."""
    h, w = stable_pair(coord, w2_instance="i2")
    g = h.shard.group("g")
    # New work: a bump, W1 is chosen and prepares with W1 and W2.
    r = h.send(hb("W1", 2, config=cfg_state({"A": 3, "B": 1}, offset=3)))
    assert r.error_code == E.COMPUTE_ASSIGNMENT
    p = w.prepare("W1", 2)
    assert [x.member_id for x in p.members] == ["W1", "W2"]
    # W2 bounces: leaves temporarily, W2b takes its instance id (no bump).
    h.send(hb("W2", -2, instance_id="i2"))
    assert h.send(hb("W2b", 0, instance_id="i2")).error_code == 0
    assert g.epoch == 3 and g.prepared.member_ids == ("W1", "W2b")
    plan = [install_member("W1", ["AC0", "AT1", "AT2", "AT3"]),
            install_member("W2", ["BC0", "BT1"])]
    assert w.install("W1", 2, members=plan).error_code == 0
    tgt = state(h)["target"]
    assert tgt == {"W1": ["AC0", "AT1", "AT2", "AT3"], "W2b": ["BC0", "BT1"]}
    # Listing both the old and the new id is one worker listed twice.
    r = h.send(hb("W1", 2, config=cfg_state({"A": 3, "B": 2}, offset=4)))
    p = w.prepare("W1", 3)
    plan = [install_member("W1", ["AC0", "AT1", "AT2", "AT3"]),
            install_member("W2b", ["BC0", "BT1"]), install_member("W2b", ["BT2"])]
    r = w.install("W1", 3, members=plan)
    assert r.error_code == E.INVALID_ASSIGNMENT and "listed twice" in r.error_message


def test_static_member_that_does_not_return_expires(coord):
    h, w = stable_pair(coord, w2_instance="i2", connect_session_timeout_ms=10_000)
    h.send(hb("W2", -2, instance_id="i2"))
    h.advance(5_000)
    h.send(hb("W1", 2))
    h.advance(5_000)
    assert "W2" not in h.shard.group("g").members and h.shard.group("g").epoch == 3


# ----------------------------------------------------------------------------- delayed rebalance
def test_delayed_rebalance_fires_once(coord):
    h = coord()
    h.send(hb("W1", 0, config=cfg_state()))
    w = Worker(h)
    w.prepare("W1", 0)
    assert w.install("W1", 0, delay=5_000).error_code == 0
    h.send(hb("W1", 0, owned=[]))
    g = h.shard.group("g")
    assert g.rebalance_deadline_ms == 5_000
    h.advance(4_999)
    assert g.epoch == 1
    h.advance(1)
    assert g.epoch == 2 and g.computing == "W1"
    assert h.send(hb("W1", 1)).error_code == E.COMPUTE_ASSIGNMENT
    w.compute("W1", 1)
    assert g.rebalance_deadline_ms == -1
    h.advance(60_000 // 2)
    assert g.epoch == 2


def test_recovery_replays_and_rearms(coord):
    h, w = stable_pair(coord)
    h.send(hb("W2", 2, assignors=[asg(reason=1)]))        # epoch 3, W1 computing
    w.prepare("W1", 2)
    w.install("W1", 2, delay=20_000)
    h.send(hb("W1", 2, owned=["AC0", "AT1", "AT2"]))
    # A fresh coordinator loads the durable log.
    h2 = coord()
    h2.now = h.now + 1_000
    load(h2, h.log)
    assert h2.shard.snapshot(True) == h.shard.snapshot(True)
    g2 = h2.shard.group("g")
    assert g2.computing is None and g2.prepared is None
    keys = {k.kind for k in h2.shard.timers.keys("g")}
    assert keys == {connect.SESSION, connect.DELAYED}
    assert h2.shard.timers.get(TimerKey(connect.DELAYED, "g")) == \
        h.shard.group("g").rebalance_deadline_ms
    # Heartbeats continue; the delayed rebalance still fires at its absolute deadline.
    r = h2.send(hb("W2", 2))
    assert (r.error_code, r.member_epoch) == (0, 3)
    h2.advance(g2.rebalance_deadline_ms - h2.now)
    assert g2.epoch == 4 and g2.computing == "W1"
    assert h2.send(hb("W1", 3)).error_code == E.COMPUTE_ASSIGNMENT
    Worker(h2).compute("W1", 3)
    assert g2.target_epoch == 4


def test_recovery_chooses_again_on_the_next_heartbeat(coord):
    h = coord()
    h.send(hb("W1", 0, config=cfg_state()))
    h2 = coord()
    load(h2, h.log)
    assert h2.shard.group("g").computing is None
    assert h2.send(hb("W1", 0)).error_code == E.COMPUTE_ASSIGNMENT
    Worker(h2).compute("W1", 0)
    assert state(h2)["target"] == {"W1": ALL}


def test_past_deadline_after_restart_does_not_bump_twice(coord):
    h = coord()
    h.send(hb("W1", 0, config=cfg_state()))
    w = Worker(h)
    w.prepare("W1", 0)
    w.install("W1", 0, delay=1_000)
    h.advance(1_000)                       # fired: epoch 2, computation pending
    assert h.shard.group("g").epoch == 2
    h2 = coord()
    h2.now = 50_000
    load(h2, h.log)
    h2.fire_due()
    assert h2.shard.group("g").epoch == 2


# ----------------------------------------------------------------------------- describe / offsets
def test_describe(coord):
    h, w = stable_pair(coord)
    h.send(hb("W2", 2, worker_url="http://w2"))
    r = h.send(m.ConnectGroupDescribeRequest(group_ids=["g", "nope"]))
    d, missing = r.groups
    assert (d.error_code, d.group_state, d.group_epoch, d.assignment_epoch, d.assignor_name,
            d.config_offset) == (0, "Stable", 2, 2, ICA, 1)
    assert [(x.member_id, x.worker_url, x.member_epoch, labels_of(x.assignment),
             labels_of(x.target_assignment)) for x in d.members] == [
        ("W1", None, 2, ["AC0", "AT1", "AT2"], ["AC0", "AT1", "AT2"]),
        ("W2", "http://w2", 2, ["BC0", "BT1"], ["BC0", "BT1"])]
    assert missing.error_code == E.GROUP_ID_NOT_FOUND
    # W3 joins from a named client (the harness sends with empty ones).
    res = h._pure(lambda: h.shard.handle(hb("W3", 0, instance_id="i-3"), h.now, None,
                                         "worker-3", "10.0.0.3"))
    h._apply(res)
    g = h.shard.group("g")
    assert g.state_name() == "Assigning"
    h.send(hb("W1", 2))
    w.compute("W1", 2)
    h.send(hb("W1", 2, owned=["AC0", "AT1", "AT2"]))        # W1 must revoke AT2 for W3
    assert g.state_name() == "Reconciling"
    # DescribeGroups describes it in classic Connect terms (docs/coordinator.md).
    c = h.send(m.DescribeGroupsRequest(groups=["g"]), 5).groups[0]
    assert (c.error_code, c.group_id, c.group_state, c.protocol_type, c.protocol_data) == (
        0, "g", "Reconciling", "connect", ICA)

    def labels(ctls):
        return sorted(("%sC0" % x.connector) if t == -1 else "%sT%d" % (x.connector, t + 1)
                      for x in ctls for t in x.tasks)

    got = {}
    for x in c.members:
        mv, md = embedded.decode_connect_metadata(x.member_metadata)
        av, a = embedded.decode_connect_assignment(x.member_assignment)
        alloc = embedded.decode_connect_assignment(md.allocation)[1]
        assert (alloc.leader, alloc.config_offset, alloc.revoked) == ("W1", 1, [])
        got[x.member_id] = (x.group_instance_id, x.client_id, x.client_host,
                            (mv, md.url, md.config_offset, labels(alloc.assignment)),
                            (av, a.error, a.leader, a.leader_url, a.config_offset,
                             labels(a.assignment), labels(a.revoked), a.delay))
    # Metadata: url, config offset, what it holds; assignment: what it is assigned, what it
    # must revoke, the worker that computed (the leader in classic terms).
    assert got == {
        "W1": (None, "", "", (1, "", 1, ["AC0", "AT1", "AT2"]),
               (1, 0, "W1", "", 1, ["AC0", "AT1"], ["AT2"], 0)),
        "W2": (None, "", "", (1, "http://w2", 1, ["BC0", "BT1"]),
               (1, 0, "W1", "", 1, ["BC0", "BT1"], [], 0)),
        "W3": ("i-3", "worker-3", "10.0.0.3", (1, "", 1, []),
               (1, 0, "W1", "", 1, [], [], 0))}
    lg = h.send(m.ListGroupsRequest(), 5).groups
    assert [(x.group_id, x.group_type, x.protocol_type, x.group_state) for x in lg] == [
        ("g", "connect", "connect", "Reconciling")]


def test_offset_validation(coord):
    h, w = stable_pair(coord)
    g = h.shard.group("g")
    assert g.validate_offset_commit("W1", None, 2, 9) == 0
    assert g.validate_offset_commit("W1", None, 1, 9) == E.STALE_MEMBER_EPOCH
    assert g.validate_offset_commit("W9", None, 2, 9) == E.UNKNOWN_MEMBER_ID
    assert g.validate_offset_commit("", None, -1, 9) == E.UNKNOWN_MEMBER_ID
    assert g.validate_offset_fetch(None, -1) == 0
    assert g.validate_offset_fetch("W1", 1) == E.STALE_MEMBER_EPOCH
    h.send(hb("W1", -1))
    h.send(hb("W2", -1))
    assert g.validate_offset_commit("", None, -1, 9) == 0


def test_group_max_size(coord):
    h = coord(config=ShardConfig(connect_max_size=1))
    h.send(hb("W1", 0))
    r = h.send(hb("W2", 0))
    assert r.error_code == E.GROUP_MAX_SIZE_REACHED and "W2" not in h.shard.group("g").members
