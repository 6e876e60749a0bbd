"""Online migration between classic Connect groups and connect worker groups
(src/groupcoord/groups/connect/migration.py, connect/classic_members.py; docs/coordinator-migration.md "Connect groups").

Every step runs through the ``coord`` harness (purity, one holder per connector/task, replay of
the durable log at teardown). Notation as test_coord_connect.py: AC0 = connector A, AT1/AT2 its
tasks 0/1, BC0/BT1 connector B and its task 0.
"""
from groupcoord.groups.connect import group as connect
from groupcoord.groups.modern import reconcile as rc
from groupcoord.groups.result import TimerKey
from groupcoord.protocol import embedded
from groupcoord.protocol import messages as m
from groupcoord.protocol.error_codes import ErrorCode as E

from test_coord_connect import ALL, Worker, cfg_state, hb

SESSION = 10_000
REBALANCE = 60_000
DELAY = 3_000                 # the classic initial rebalance delay is 3 s by default


# ----------------------------------------------------------------------------- classic wire
def labels_to_ctl(labels):
    """Seed labels -> ConnectorTaskList entries (connector itself = task -1)."""
    by = {}
    for lab in labels:
        c, kind, n = lab[0], lab[1], int(lab[2:])
        by.setdefault(c, []).append(-1 if kind == "C" else n - 1)
    return [m.ConnectWorkerAssignmentConnectorTaskList(connector=c, tasks=sorted(t))
            for c, t in sorted(by.items())]


def ctl_to_labels(ctls):
    return sorted(("%sC0" % c.connector) if t == -1 else "%sT%d" % (c.connector, t + 1)
                  for c in ctls or () for t in c.tasks)


def worker_md(url, version=0, owned=None):
    alloc = None
    if version >= 1:
        alloc = embedded.encode_connect_assignment(m.ConnectWorkerAssignment(
            leader="", leader_url="", config_offset=1, assignment=labels_to_ctl(owned or []),
            revoked=[]), 1)
    return embedded.encode_connect_metadata(
        m.ConnectWorkerMetadata(url=url, config_offset=1, allocation=alloc), version)


PROTO = {0: "default", 1: "compatible", 2: "sessioned"}


def jreq(member="", url="http://w", version=0, owned=None, ptype="connect", session=SESSION):
    return m.JoinGroupRequest(
        group_id="g", session_timeout_ms=session, rebalance_timeout_ms=REBALANCE,
        member_id=member, protocol_type=ptype, protocols=[m.JoinGroupRequestProtocol(
            name=PROTO[version], metadata=worker_md(url, version, owned))])


def sreq(member, gen, assignments=None):
    return m.SyncGroupRequest(group_id="g", generation_id=gen, member_id=member,
                              assignments=[m.SyncGroupRequestAssignment(member_id=k,
                                                                        assignment=a)
                                           for k, a in (assignments or {}).items()])


def asg_bytes(labels, version=0, revoked=None):
    return embedded.encode_connect_assignment(m.ConnectWorkerAssignment(
        leader="", leader_url="", config_offset=1, assignment=labels_to_ctl(labels),
        revoked=labels_to_ctl(revoked or []) if version >= 1 else None), version)


def classic_group(h, plan, version=0):
    """Classic workers join (JoinGroup v3) and the leader syncs ``plan``'s assignments in join
    order. plan: [labels]. -> ([member ids], generation)."""
    parks = [h.send(jreq(url="http://c%d" % i, version=version), 3) for i in range(len(plan))]
    for _ in range(10):
        if all(h.answered(p) for p in parks):
            break
        h.advance(DELAY)
    resps = [h.completion(p) for p in parks]
    ids = [r.member_id for r in resps]
    gen, leader = resps[0].generation_id, resps[0].leader
    blobs = {mid: asg_bytes(a, version) for mid, a in zip(ids, plan)}
    follower = [h.send(sreq(mid, gen), 3) for mid in ids if mid != leader]
    assert h.send(sreq(leader, gen, blobs), 3).error_code == 0
    assert all(h.completion(p).error_code == 0 for p in follower)
    assert h.shard.groups["g"].state_name() == "Stable"
    return ids, gen


def g_(h):
    return h.shard.groups["g"]


def current(h, mid):
    a = g_(h).current[mid]
    return a.epoch, a.state, [lab(x) for x in g_(h).names(a.assigned)]


def lab(pair):
    c, t = pair
    return "%sC0" % c if t == -1 else "%sT%d" % (c, t + 1)


def sync_labels(resp, version=0):
    _, a = embedded.decode_connect_assignment(resp.assignment)
    return ctl_to_labels(a.assignment), ctl_to_labels(a.revoked), a


def converge(h, w, ids, version=0, rounds=6):
    """Drive N1 (new protocol) and the classic workers until everyone is STABLE at the
    target epoch. Returns {member: labels}."""
    g = g_(h)
    for _ in range(rounds):
        g = g_(h)
        n1 = g.current["N1"]
        r = h.send(hb("N1", n1.epoch, owned=[lab(x) for x in g.names(n1.assigned)]))
        if r.error_code == E.COMPUTE_ASSIGNMENT:
            w.compute("N1", r.member_epoch)
        for mid in ids:
            a = g_(h).current[mid]
            hr = h.send(m.HeartbeatRequest(group_id="g", generation_id=a.epoch, member_id=mid),
                        3)
            if hr.error_code == E.REBALANCE_IN_PROGRESS:
                owned = [lab(x) for x in g_(h).names(a.assigned)]
                jr = h.send(jreq(mid, url="http://" + mid, version=version, owned=owned), 3)
                assert jr.error_code == 0 and jr.members == [] and jr.leader != mid, jr
                sr = h.send(sreq(mid, jr.generation_id), 3)
                assert sr.error_code == 0
        g = g_(h)
        if g.epoch == g.target_epoch and all(a.state == rc.STABLE and a.epoch == g.epoch
                                             for a in g.current.values()):
            break
    return {mid: current(h, mid)[2] for mid in g.current}


# ----------------------------------------------------------------------------- upgrade
def test_upgrade_converts_a_classic_connect_group(coord):
    h = coord()
    ids, gen = classic_group(h, [["AC0", "AT1", "AT2"], ["BC0", "BT1"]])
    r = h.send(hb("N1", 0, config=cfg_state()))
    # N1 is the only new-protocol worker: it computes; the group epoch is the generation + 1
    # (the join and the first ConfigState are one bump).
    assert r.error_code == E.COMPUTE_ASSIGNMENT and r.member_epoch == gen
    g = g_(h)
    assert isinstance(g, connect.ConnectGroup)
    assert (g.epoch, g.target_epoch, g.computing) == (gen + 1, gen, "N1")
    assert current(h, ids[0]) == (gen, rc.STABLE, ["AC0", "AT1", "AT2"])
    assert current(h, ids[1]) == (gen, rc.STABLE, ["BC0", "BT1"])
    meta = g.members[ids[0]]
    assert meta.worker_url == "http://c0" and meta.client_assignors == []
    assert meta.classic_member_metadata.session_timeout_ms == SESSION
    assert meta.classic_member_metadata.supported_protocols[0].name == "default"
    assert g.members["N1"].classic_member_metadata is None
    assert (g.config_offset, g.connectors) == (1, {"A": 2, "B": 1})
    # Classic session timers became connect session timers at the classic timeout.
    timers = dict(h.shard.timers.items())
    assert timers[TimerKey(connect.SESSION, "g", ids[0])] == h.now + SESSION
    assert TimerKey("classic-session", "g", ids[0]) not in timers
    w = Worker(h)
    p = w.prepare("N1", gen)
    assert sorted(x.member_id for x in p.members) == sorted(ids + ["N1"])
    w.install("N1", gen)
    final = converge(h, w, ids)
    assert sorted(sum(final.values(), [])) == sorted(ALL)
    assert all(final.values())                       # three workers, five units: none idle


def test_upgrade_of_incremental_workers_uses_allocation_and_revokes(coord):
    h = coord()
    ids, gen = classic_group(h, [["AC0", "AT1", "AT2"], ["BC0", "BT1"]], version=1)
    assert h.send(hb("N1", 0, config=cfg_state())).error_code == E.COMPUTE_ASSIGNMENT
    assert current(h, ids[0]) == (gen, rc.STABLE, ["AC0", "AT1", "AT2"])
    w = Worker(h)
    w.compute("N1", gen)
    # The first classic worker must give work to N1: its rejoin (v1, allocation = what it
    # owns) moves it to UNREVOKED and its SyncGroup lists what to revoke, nothing new.
    hr = h.send(m.HeartbeatRequest(group_id="g", generation_id=gen, member_id=ids[0]), 3)
    assert hr.error_code == E.REBALANCE_IN_PROGRESS
    jr = h.send(jreq(ids[0], version=1, owned=["AC0", "AT1", "AT2"]), 3)
    assert jr.generation_id == gen
    assert g_(h).current[ids[0]].state == rc.UNREVOKED
    new, revoked, a = sync_labels(h.send(sreq(ids[0], gen), 3))
    assert new == [] and revoked and set(revoked) < {"AC0", "AT1", "AT2"}
    assert a.leader == "N1"
    final = converge(h, w, ids, version=1)
    assert sorted(sum(final.values(), [])) == sorted(ALL)


def test_upgrade_of_an_empty_classic_group_replaces_it(coord):
    h = coord()
    ids, _ = classic_group(h, [["AC0"]])
    r = h.send(m.LeaveGroupRequest(group_id="g", member_id=ids[0]), 0)
    assert r.error_code == 0 and g_(h).state_name() == "Empty"
    r = h.send(hb("N1", 0, config=cfg_state()))
    assert r.error_code == E.COMPUTE_ASSIGNMENT and r.member_epoch == 0
    assert isinstance(g_(h), connect.ConnectGroup) and list(g_(h).members) == ["N1"]


def test_only_a_joining_heartbeat_upgrades_a_connect_typed_group(coord):
    h = coord()
    classic_group(h, [["AC0"]])
    r = h.send(hb("N1", 3))
    assert r.error_code == E.GROUP_ID_NOT_FOUND
    r = h.send(hb("N1", 0, rebalance_timeout_ms=0))
    assert r.error_code == E.INVALID_REQUEST
    assert g_(h).TYPE == "classic"


def test_non_connect_protocol_type_is_not_upgraded(coord):
    h = coord()
    p = h.send(jreq(ptype="consumer"), 3)
    h.advance(DELAY)
    assert h.completion(p).error_code == 0
    r = h.send(hb("N1", 0))
    assert r.error_code == E.GROUP_ID_NOT_FOUND and "'consumer'" in r.error_message
    assert g_(h).TYPE == "classic"


def test_upgrade_refused_for_undecodable_worker_metadata(coord):
    h = coord()
    req = jreq()
    req.protocols[0].metadata = b"\x00"
    p = h.send(req, 3)
    h.advance(DELAY)
    assert h.completion(p).error_code == 0
    r = h.send(hb("N1", 0))
    assert r.error_code == E.GROUP_ID_NOT_FOUND and "not a valid Connect" in r.error_message
    assert g_(h).TYPE == "classic"


def test_upgrade_answers_parked_classic_requests(coord):
    h = coord()
    ids, gen = classic_group(h, [["AC0"], ["BC0"]])
    # A third worker joins: a rebalance starts and its JoinGroup is parked at the barrier.
    park = h.send(jreq(url="http://c9"), 3)
    assert not h.answered(park)
    assert h.send(hb("N1", 0, config=cfg_state())).error_code == E.COMPUTE_ASSIGNMENT
    assert h.completion(park).error_code == E.REBALANCE_IN_PROGRESS
    assert g_(h).epoch == gen + 1


# ----------------------------------------------------------------------------- classic workers
def n1_group(h):
    """A connect group with N1 stable owning everything."""
    w = Worker(h)
    h.send(hb("N1", 0, config=cfg_state(), worker_url="http://n1"))
    w.compute("N1", 0)
    r = h.send(hb("N1", 0, owned=[]))
    assert r.member_epoch == 1 and r.error_code == 0
    return w


def test_new_classic_worker_joins_a_connect_group_and_never_computes(coord):
    h = coord()
    w = n1_group(h)
    jr = h.send(jreq(url="http://c"), 3)
    assert jr.error_code == 0 and jr.leader == "N1" and jr.members == []
    mid = jr.member_id
    g = g_(h)
    assert g.epoch == 2 and g.computing == "N1"       # the classic worker is not chosen
    assert jr.generation_id == 1 and current(h, mid) == (1, rc.STABLE, [])
    sr = h.send(sreq(mid, 1), 3)
    new, _, a = sync_labels(sr)
    assert new == [] and a.leader == "N1" and a.leader_url == "http://n1"
    hr = h.send(m.HeartbeatRequest(group_id="g", generation_id=1, member_id=mid), 3)
    assert hr.error_code == E.NONE                   # nothing new until N1 installs
    final = converge(h, w, [mid])
    assert final[mid] and sorted(final[mid] + final["N1"]) == sorted(ALL)


def test_classic_worker_request_errors(coord):
    h = coord()
    n1_group(h)
    mid = h.send(jreq(), 3).member_id
    assert h.send(jreq("nobody"), 3).error_code == E.UNKNOWN_MEMBER_ID
    assert h.send(jreq("N1"), 3).error_code == E.UNKNOWN_MEMBER_ID      # not classic
    assert h.send(jreq(ptype="consumer"), 3).error_code == E.INCONSISTENT_GROUP_PROTOCOL
    assert h.send(jreq(session=1), 3).error_code == E.INVALID_SESSION_TIMEOUT
    bad = jreq()
    bad.protocols[0].metadata = b"\x00"
    assert h.send(bad, 3).error_code == E.INCONSISTENT_GROUP_PROTOCOL
    assert h.send(sreq(mid, 7), 3).error_code == E.ILLEGAL_GENERATION
    assert h.send(sreq("N1", 1), 3).error_code == E.UNKNOWN_MEMBER_ID
    assert h.send(m.HeartbeatRequest(group_id="g", generation_id=7, member_id=mid),
                  3).error_code == E.ILLEGAL_GENERATION
    assert h.send(m.HeartbeatRequest(group_id="g", generation_id=1, member_id="x"),
                  3).error_code == E.UNKNOWN_MEMBER_ID
    # Prepare/Install are refused to a classic worker (it is never the chosen one).
    r = h.send(m.ConnectGroupPrepareAssignmentRequest(group_id="g", member_id=mid,
                                                      member_epoch=1))
    assert r.error_code == E.UNKNOWN_MEMBER_ID


def test_classic_leave_removes_the_worker_and_bumps_the_epoch(coord):
    h = coord()
    n1_group(h)
    mid = h.send(jreq(), 3).member_id
    epoch = g_(h).epoch
    r = h.send(m.LeaveGroupRequest(group_id="g", members=[
        m.LeaveGroupRequestMemberIdentity(member_id=mid), m.LeaveGroupRequestMemberIdentity(member_id="x")]), 3)
    assert [x.error_code for x in r.members] == [0, E.UNKNOWN_MEMBER_ID]
    assert mid not in g_(h).members and g_(h).epoch == epoch + 1


def test_classic_worker_session_expires_on_its_classic_timeout(coord):
    h = coord()
    n1_group(h)
    mid = h.send(jreq(session=SESSION), 3).member_id
    for _ in range(3):             # N1 keeps heartbeating past the classic worker's timeout
        h.advance(SESSION // 2)
        n1 = g_(h).current["N1"]
        h.send(hb("N1", n1.epoch, owned=[lab(x) for x in g_(h).names(n1.assigned)]))
    assert mid not in g_(h).members and "N1" in g_(h).members


# ----------------------------------------------------------------------------- downgrade
def upgraded(coord, plan=(("AC0", "AT1", "AT2"), ("BC0", "BT1")), version=0, **kw):
    """A classic Connect group upgraded by N1, converged. -> (h, w, classic ids)."""
    h = coord(**kw)
    ids, gen = classic_group(h, [list(p) for p in plan], version=version)
    assert h.send(hb("N1", 0, config=cfg_state())).error_code == E.COMPUTE_ASSIGNMENT
    w = Worker(h)
    w.compute("N1", gen)
    converge(h, w, ids, version=version)
    return h, w, ids


def held(h):
    """{member: labels it holds (assigned + pending revocation)} of the connect group."""
    g = g_(h)
    return {mid: sorted(lab(x) for x in g.names(a.held)) for mid, a in g.current.items()}


def assert_downgraded(h, ids, generation, held_before, protocol="default"):
    g = g_(h)
    assert g.TYPE == "classic" and g.state_name() == "PreparingRebalance"
    assert (g.protocol_type(), g.generation, g.protocol) == ("connect", generation, protocol)
    assert g.leader == min(ids) and list(g.members) == sorted(ids)
    for mid in ids:
        mb = g.members[mid]
        _, a = embedded.decode_connect_assignment(mb.assignment)
        assert ctl_to_labels(a.assignment) == held_before[mid]
        assert a.leader == min(ids) and a.config_offset == 1
        assert mb.session_timeout == SESSION and mb.rebalance_timeout == REBALANCE
    timers = dict(h.shard.timers.items())
    assert not any(k.kind.startswith("connect-") for k in timers if k.group_id == "g")
    assert timers[TimerKey("classic-join", "g")] == h.now + REBALANCE
    assert all(timers[TimerKey("classic-session", "g", mid)] == h.now + SESSION for mid in ids)


def classic_rebalance(h, ids, plan, version=0):
    """Every worker rejoins (JoinGroup v3 with its id), the leader syncs ``plan``
    ({member: labels}). -> generation."""
    parks = [h.send(jreq(mid, url="http://" + mid, version=version), 3) for mid in ids]
    # The last rejoin completes the barrier: it is answered at once, the others were parked.
    resps = [p if isinstance(p, m.JoinGroupResponse) else h.completion(p) for p in parks]
    assert all(r.error_code == 0 for r in resps), resps
    gen, leader = resps[0].generation_id, resps[0].leader
    lead = next(r for r in resps if r.member_id == leader)
    assert sorted(x.member_id for x in lead.members) == sorted(ids)
    follower = [h.send(sreq(mid, gen), 3) for mid in ids if mid != leader]
    blobs = {mid: asg_bytes(plan[mid], version) for mid in ids}
    assert h.send(sreq(leader, gen, blobs), 3).error_code == 0
    assert all(h.completion(p).error_code == 0 for p in follower)
    assert g_(h).state_name() == "Stable"
    return gen


def test_last_new_protocol_worker_leaving_downgrades_to_classic(coord):
    h, w, ids = upgraded(coord)
    before, epoch = held(h), g_(h).epoch
    assert before["N1"]                        # N1 runs something the classic rebalance redoes
    r = h.send(hb("N1", -1))
    assert r.error_code == 0 and r.member_epoch == -1
    assert_downgraded(h, ids, epoch + 1, before)
    # A classic heartbeat now says rejoin; recovery gives the group Stable at the generation.
    a = h.send(m.HeartbeatRequest(group_id="g", generation_id=epoch + 1, member_id=ids[0]), 3)
    assert a.error_code == E.REBALANCE_IN_PROGRESS
    r = h.replayed().groups["g"]
    assert (r.TYPE, r.state_name(), r.generation, r.protocol) == \
        ("classic", "Stable", epoch + 1, "default")


def test_upgrade_downgrade_classic_rebalance_upgrade_round_trip(coord):
    h, w, ids = upgraded(coord)
    epoch = g_(h).epoch
    h.send(hb("N1", -1))
    plan = {ids[0]: ["AC0", "AT1", "AT2"], ids[1]: ["BC0", "BT1"]}
    gen = classic_rebalance(h, ids, plan)
    assert gen == epoch + 2
    # A new-protocol worker upgrades the group again, starting from what the rebalance gave.
    r = h.send(hb("N2", 0, config=cfg_state()))
    assert r.error_code == E.COMPUTE_ASSIGNMENT and r.member_epoch == gen
    g = g_(h)
    assert g.TYPE == "connect" and (g.epoch, g.target_epoch) == (gen + 1, gen)
    assert current(h, ids[0]) == (gen, rc.STABLE, plan[ids[0]])
    assert current(h, ids[1]) == (gen, rc.STABLE, plan[ids[1]])
    w.compute("N2", gen)
    g = g_(h)
    assert g.epoch == g.target_epoch and sorted(
        lab(x) for t in g.target.values() for x in g.names(t.units)) == sorted(ALL)


def test_incremental_workers_downgrade_to_what_they_hold(coord):
    h, w, ids = upgraded(coord, version=1)
    before, epoch = held(h), g_(h).epoch
    h.send(hb("N1", -1))
    assert_downgraded(h, ids, epoch + 1, before, protocol="compatible")
    for mid in ids:
        # Their saved metadata's allocation is what they owned at their last JoinGroup; the
        # revoked list cancels what they gave away since.
        _, a = embedded.decode_connect_assignment(g_(h).members[mid].assignment)
        assert not set(ctl_to_labels(a.revoked)) & set(before[mid])
    # Upgrading straight away (no rejoin) reads back exactly what each worker holds.
    assert h.send(hb("N2", 0, config=cfg_state())).error_code == E.COMPUTE_ASSIGNMENT
    for mid in ids:
        assert current(h, mid)[2] == before[mid]


def test_session_expiry_of_the_last_new_protocol_worker_downgrades(coord):
    from groupcoord.groups.config import ShardConfig
    h, w, ids = upgraded(coord, config=ShardConfig(connect_session_timeout_ms=8_000))
    before, epoch = held(h), g_(h).epoch
    for _ in range(4):                 # the classic workers heartbeat, N1 is silent
        h.advance(3_000)
        if g_(h).TYPE != "connect":
            break
        for mid in ids:
            a = g_(h).current[mid]
            h.send(m.HeartbeatRequest(group_id="g", generation_id=a.epoch, member_id=mid), 3)
    assert "N1" not in g_(h).members
    g = g_(h)
    assert g.TYPE == "classic" and g.generation == epoch + 1
    assert {mid: ctl_to_labels(embedded.decode_connect_assignment(g.members[mid].assignment)[1]
                               .assignment) for mid in ids} == {mid: before[mid] for mid in ids}


def test_fencing_the_last_new_protocol_worker_does_not_downgrade(coord):
    # A fenced heartbeat removes nobody (a late copy must not evict a live worker): the
    # group stays a connect group until N1 leaves or its session expires (tests above).
    h, w, ids = upgraded(coord)
    before, epoch = held(h), g_(h).epoch
    r = h.send(hb("N1", epoch + 5, owned=[]))
    assert r.error_code == E.FENCED_MEMBER_EPOCH
    assert g_(h).TYPE == "connect" and "N1" in g_(h).members and held(h) == before


def test_no_downgrade_while_a_new_protocol_worker_remains(coord):
    h, w, ids = upgraded(coord)
    assert h.send(hb("N2", 0)).error_code == 0
    epoch = g_(h).epoch
    h.send(hb("N1", -1))
    g = g_(h)
    assert g.TYPE == "connect" and "N2" in g.members and g.epoch == epoch + 1


def test_no_common_protocol_blocks_the_downgrade_until_a_worker_leaves(coord):
    h, w, ids = upgraded(coord, plan=(("AC0", "AT1", "AT2", "BC0", "BT1"),))
    # A classic worker speaking only "sessioned" joins; the first speaks only "default".
    jr = h.send(jreq(url="http://s", version=2), 3)
    assert jr.error_code == 0
    other = jr.member_id
    h.send(hb("N1", -1))
    g = g_(h)
    assert g.TYPE == "connect" and sorted(g.members) == sorted(ids + [other])
    # Nobody can compute; the "sessioned" worker leaving unblocks it: back to classic.
    before, epoch = held(h), g.epoch
    r = h.send(m.LeaveGroupRequest(group_id="g", member_id=other), 0)
    assert r.error_code == 0
    assert_downgraded(h, ids, epoch + 1, before)
    gen = classic_rebalance(h, ids, {ids[0]: list(ALL)})
    assert gen == epoch + 2


def test_downgrade_revokes_what_the_saved_allocation_no_longer_holds(coord):
    h = coord()
    # Classic v1 generation: c0 joined owning everything, the leader moved B to c1.
    parks = [h.send(jreq(url="http://c0", version=1, owned=ALL), 3),
             h.send(jreq(url="http://c1", version=1, owned=[]), 3)]
    while not all(h.answered(p) for p in parks):
        h.advance(DELAY)
    c0, c1 = [h.completion(p) for p in parks]
    gen, leader = c0.generation_id, c0.leader
    blobs = {c0.member_id: asg_bytes([], 1, revoked=["BC0", "BT1"]),
             c1.member_id: asg_bytes(["BC0", "BT1"], 1)}
    follower = [r.member_id for r in (c0, c1) if r.member_id != leader][0]
    park = h.send(sreq(follower, gen), 3)
    assert h.send(sreq(leader, gen, blobs), 3).error_code == 0
    assert h.completion(park).error_code == 0
    ids = [c0.member_id, c1.member_id]
    assert h.send(hb("N1", 0, config=cfg_state())).error_code == E.COMPUTE_ASSIGNMENT
    before, epoch = held(h), g_(h).epoch
    assert before[ids[0]] == ["AC0", "AT1", "AT2"] and before[ids[1]] == ["BC0", "BT1"]
    h.send(hb("N1", -1))                           # before computing anything
    assert_downgraded(h, ids, epoch + 1, before, protocol="compatible")
    _, a = embedded.decode_connect_assignment(g_(h).members[ids[0]].assignment)
    assert ctl_to_labels(a.revoked) == ["BC0", "BT1"]
    # c0's saved allocation still lists B: without the revoked list an upgrade would give it
    # back to c0 (the first worker) while c1 runs it.
    assert h.send(hb("N2", 0, config=cfg_state())).error_code == E.COMPUTE_ASSIGNMENT
    assert current(h, ids[0])[2] == ["AC0", "AT1", "AT2"]
    assert current(h, ids[1])[2] == ["BC0", "BT1"]
