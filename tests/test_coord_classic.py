"""Classic groups: JoinGroup / SyncGroup / Heartbeat / LeaveGroup (docs/coordinator-classic.md).

Every request goes through the codec at its version (request decoded from its bytes, response
and every later completion encoded at the version of the request it answers), and after every
step the parked requests the harness still waits for must be exactly the ones the group has
parked (no leaked or forgotten park). tests/coord_harness.py adds purity, safety and replay
equality.
"""
import random

import pytest

from coord_harness import Parked
from groupcoord.groups.classic import group as classic_group
from groupcoord.groups.classic.group import ClassicGroup
from groupcoord.groups.classic.rebalance import select_protocol
from groupcoord.groups.config import ShardConfig
from groupcoord.groups.group import Group
from groupcoord.groups.record_types import RecordType
from groupcoord.groups.result import ParkKey, TimerKey
from groupcoord.protocol import decode, embedded, encode
from groupcoord.protocol import messages as m
from groupcoord.protocol.error_codes import ErrorCode as E

DELAY = 3_000
SESSION = 10_000
REBALANCE = 30_000
CFG = ShardConfig(group_initial_rebalance_delay_ms=DELAY)
NODELAY = ShardConfig(group_initial_rebalance_delay_ms=0)


# ------------------------------------------------------------------------------ driver
class Client:
    """Sends requests through the harness at a version, with codec round trips and the
    park bookkeeping check."""

    def __init__(self, h):
        self.h = h
        self.park_versions = {}
        self.seen = 0

    def send(self, req, v, client_id="cli", host="/10.0.0.1"):
        h = self.h
        req = decode(type(req), encode(req, v), v)
        res = h._pure(lambda: h.shard.handle(req, h.now, v, client_id, host))
        h._apply(res)
        self.check_completions()
        out = res.response
        if res.park is not None:
            out = h.waiting[res.park] = Parked(res.park)
            self.park_versions[res.park] = v
        else:
            encode(out, v)
        self.check()
        return out

    def advance(self, ms):
        n = self.h.advance(ms)
        self.check()
        return n

    def check_completions(self):
        h = self.h
        for res in h.results[self.seen:]:
            for key, resp in res.completions:
                encode(resp, self.park_versions[key])
        self.seen = len(h.results)

    def check(self):
        h = self.h
        self.check_completions()
        parked = set()
        for gid, g in h.shard.groups.items():
            if isinstance(g, ClassicGroup):
                # the counters replay keeps equal what they summarise
                assert g.num_joined == sum(mb.joined for mb in g.members.values())
                counts = {}
                for mb in g.members.values():
                    for name in set(n for n, _ in mb.protocols):
                        counts[name] = counts.get(name, 0) + 1
                assert g.protocol_counts == counts
                for mid, mb in g.members.items():
                    if mb.joined:
                        parked.add(ParkKey(gid, mid, "join"))
                    if mb.sync_parked:
                        parked.add(ParkKey(gid, mid, "sync"))
        assert set(h.waiting) == parked, (set(h.waiting), parked)

    def waiting(self, parked):
        return parked.key in self.h.waiting

    def group(self, gid="g"):
        return self.h.shard.group(gid)

    def done(self, parked):
        return self.h.completion(parked)


def jreq(member="", instance=None, protos=(("range", b"r"),), session=SESSION,
         rebalance=REBALANCE, ptype="consumer", group="g"):
    return m.JoinGroupRequest(group_id=group, session_timeout_ms=session,
                              rebalance_timeout_ms=rebalance, member_id=member,
                              group_instance_id=instance, protocol_type=ptype,
                              protocols=[m.JoinGroupRequestProtocol(name=n, metadata=md)
                                         for n, md in protos])


def sreq(member, gen, assignments=None, instance=None, group="g", ptype=None, pname=None):
    return m.SyncGroupRequest(group_id=group, generation_id=gen, member_id=member,
                              group_instance_id=instance, protocol_type=ptype,
                              protocol_name=pname,
                              assignments=[m.SyncGroupRequestAssignment(member_id=k, assignment=a)
                                           for k, a in (assignments or {}).items()])


def hb(c, member, gen, v=4, instance=None, group="g"):
    return c.send(m.HeartbeatRequest(group_id=group, generation_id=gen, member_id=member,
                                     group_instance_id=instance), v).error_code


def join_new(c, v=5, client_id="cli", **kw):
    """A new dynamic member's join, with the MEMBER_ID_REQUIRED round trip at v4+."""
    r = c.send(jreq(**kw), v, client_id=client_id)
    if v >= 4 and kw.get("instance") is None:
        assert r.error_code == E.MEMBER_ID_REQUIRED and r.member_id.startswith(client_id + "-")
        r = c.send(jreq(member=r.member_id, **kw), v, client_id=client_id)
    return r


def form(c, n=2, v=5, sync=True, protos=None):
    """n members join in one initial-delay window; the leader syncs (assignment b"a-<id>")
    and the followers too. -> ([member ids in join order], generation)."""
    parks = [join_new(c, v, client_id="c%d" % i, **({"protos": protos[i]} if protos else {}))
             for i in range(n)]
    assert all(isinstance(p, Parked) for p in parks)
    settle(c, parks)
    resps = [c.done(p) for p in parks]
    ids = [r.member_id for r in resps]
    gen = resps[0].generation_id
    assert all(r.error_code == 0 and r.generation_id == gen and r.leader == ids[0]
               for r in resps)
    if sync:
        assert sync_all(c, ids, gen) == {i: b"a-" + i.encode() for i in ids}
    return ids, gen


def settle(c, parks):
    """Advance one initial delay at a time until every parked join is answered (a window in
    which someone joined is followed by one more)."""
    for _ in range(10):
        if not any(c.waiting(p) for p in parks):
            return
        c.advance(DELAY)
    raise AssertionError("barrier never completed")


def keep_alive(c, ms, members, step=2_000):
    """Advance ``ms`` in steps, heartbeating (member, generation) pairs after each step."""
    while ms > 0:
        c.advance(min(step, ms))
        ms -= step
        for mid, gen in members:
            hb(c, mid, gen)


def sync_all(c, ids, gen, v=3):
    """Followers sync (parked), then the leader; -> member id -> assignment received."""
    leader = c.group().leader
    parks = {i: c.send(sreq(i, gen), v) for i in ids if i != leader}
    r = c.send(sreq(leader, gen, {i: b"a-" + i.encode() for i in ids}), v)
    assert r.error_code == 0
    out = {leader: r.assignment}
    for i, p in parks.items():
        assert isinstance(p, Parked)
        resp = c.done(p)
        assert resp.error_code == 0
        out[i] = resp.assignment
    return out


def group_records(c, gid="g"):
    return [r.value for r in c.h.log
            if r.type == RecordType.GROUP_METADATA and r.key.group == gid]


@pytest.fixture
def client(coord):
    def make(config=CFG):
        return Client(coord(config=config))
    return make


# ------------------------------------------------------------------ JoinGroup validation
class OtherGroup(Group):
    TYPE = "consumer"

    def __init__(self, gid):
        self.group_id = gid

    def state_name(self):
        return "Stable"

    def protocol_type(self):
        return "consumer"

    def is_empty(self):
        return False

    def as_described_group(self, catalog):
        return m.DescribeGroupsResponseDescribedGroup(error_code=E.GROUP_ID_NOT_FOUND,
                                                      group_id=self.group_id)

    def validate_offset_commit(self, member_id, instance_id, generation_or_epoch, version):
        return E.UNKNOWN_MEMBER_ID

    def snapshot(self, durable):
        return None if durable else "other"


def test_join_validation_errors(client):
    c = client()
    assert c.send(jreq(group=""), 5).error_code == E.INVALID_GROUP_ID
    assert c.send(jreq(session=5_999), 5).error_code == E.INVALID_SESSION_TIMEOUT
    assert c.send(jreq(session=1_800_001), 5).error_code == E.INVALID_SESSION_TIMEOUT
    assert c.send(jreq(protos=()), 5).error_code == E.INCONSISTENT_GROUP_PROTOCOL
    assert c.send(jreq(ptype=""), 5).error_code == E.INCONSISTENT_GROUP_PROTOCOL
    assert c.group() is None and c.h.log == []          # refused joins create nothing
    c.h.shard.groups["other"] = OtherGroup("other")
    r = c.send(jreq(group="other", member="x"), 9)
    assert r.error_code == E.INCONSISTENT_GROUP_PROTOCOL and r.member_id == "x"
    assert r.generation_id == -1 and r.protocol_name is None


def test_join_protocol_type_and_common_protocol(client):
    c = client()
    ids, gen = form(c, 2, protos=[(("range", b"1"), ("rr", b"1")), (("rr", b"2"),)])
    assert c.group().protocol == "rr"
    assert c.send(jreq(ptype="connect", protos=(("rr", b""),)), 3).error_code == \
        E.INCONSISTENT_GROUP_PROTOCOL
    # supported by one member only
    assert c.send(jreq(protos=(("range", b""),)), 3).error_code == E.INCONSISTENT_GROUP_PROTOCOL
    # a known member may not switch to a protocol the others lack either
    assert c.send(jreq(member=ids[0], protos=(("range", b""),)), 5).error_code == \
        E.INCONSISTENT_GROUP_PROTOCOL
    assert c.group().state == "Stable" and c.group().generation == gen


def test_group_max_size(client):
    c = client(ShardConfig(group_initial_rebalance_delay_ms=DELAY, group_max_size=2))
    form(c, 2)
    assert c.send(jreq(), 5).error_code == E.GROUP_MAX_SIZE_REACHED
    assert c.send(jreq(), 3).error_code == E.GROUP_MAX_SIZE_REACHED
    # MEMBER_ID_REQUIRED members count too
    c2 = client(ShardConfig(group_initial_rebalance_delay_ms=DELAY, group_max_size=1))
    assert c2.send(jreq(), 5).error_code == E.MEMBER_ID_REQUIRED
    assert c2.send(jreq(), 5).error_code == E.GROUP_MAX_SIZE_REACHED


def test_other_type_heartbeat_sync_leave_are_unknown_member(client):
    c = client()
    c.h.shard.groups["other"] = OtherGroup("other")
    assert hb(c, "m", 1, group="other") == E.UNKNOWN_MEMBER_ID
    assert c.send(sreq("m", 1, group="other"), 3).error_code == E.UNKNOWN_MEMBER_ID
    r = c.send(m.LeaveGroupRequest(group_id="other", members=[
        m.LeaveGroupRequestMemberIdentity(member_id="m")]), 3)
    assert r.error_code == 0 and r.members[0].error_code == E.UNKNOWN_MEMBER_ID


# -------------------------------------------------------------------- member id required
def test_member_id_required_then_rejoin(client):
    c = client(NODELAY)
    r = c.send(jreq(), 4, client_id="app")
    assert r.error_code == E.MEMBER_ID_REQUIRED and r.generation_id == -1
    assert r.member_id.startswith("app-") and len(r.member_id) == len("app-") + 22
    assert c.group().state == "Empty" and list(c.group().pending) == [r.member_id]
    j = c.send(jreq(member=r.member_id), 4, client_id="app")
    assert j.error_code == 0 and j.member_id == r.member_id and j.generation_id == 1
    assert j.leader == r.member_id and [x.member_id for x in j.members] == [r.member_id]
    assert not c.group().pending


def test_member_id_required_ids_are_distinct(client):
    c = client()
    a = c.send(jreq(), 5).member_id
    b = c.send(jreq(), 5).member_id
    assert a != b


def test_pending_member_forgotten_after_session_timeout(client):
    c = client()
    r = c.send(jreq(), 5)
    c.advance(SESSION - 1)
    assert r.member_id in c.group().pending
    c.advance(1)
    assert c.group() is None            # nothing else held the group: it is gone
    assert c.send(jreq(member=r.member_id), 5).error_code == E.UNKNOWN_MEMBER_ID
    assert c.h.log == []


def test_old_versions_join_directly(client):
    c = client(NODELAY)
    for v in (0, 1, 2, 3):
        r = c.send(jreq(group="g%d" % v), v, client_id="old")
        assert r.error_code == 0 and r.member_id.startswith("old-") and r.generation_id == 1
        assert r.protocol_name == "range" and r.protocol_type is None


def test_pending_member_blocks_the_barrier_until_it_joins_or_expires(client):
    c = client()
    ids, gen = form(c, 1)
    pend = c.send(jreq(), 5)                              # MEMBER_ID_REQUIRED
    p = c.send(jreq(member=ids[0]), 5)                     # leader rejoin -> rebalance
    assert isinstance(p, Parked) and c.group().state == "PreparingRebalance"
    c.advance(SESSION)                                     # the pending member expires
    r = c.done(p)
    assert r.generation_id == gen + 1 and [x.member_id for x in r.members] == ids
    assert pend.member_id not in c.group().pending


# ------------------------------------------------------------------------- join barrier
def test_barrier_waits_for_every_member_and_answers_all(client):
    c = client()
    ids, gen = form(c, 3)
    a, b, d = ids
    pa = c.send(jreq(member=a, protos=(("range", b"new"),)), 5)   # changed metadata
    assert isinstance(pa, Parked) and c.group().state == "PreparingRebalance"
    pb = c.send(jreq(member=b), 7)
    assert isinstance(pb, Parked)
    rd = c.send(jreq(member=d), 9)                          # the last one completes it
    assert rd.error_code == 0 and rd.generation_id == gen + 1
    ra, rb = c.done(pa), c.done(pb)
    assert ra.leader == rb.leader == rd.leader == a
    assert [(x.member_id, x.metadata) for x in ra.members] == [(a, b"new"), (b, b"r"), (d, b"r")]
    assert rb.members == [] and rd.members == []
    assert rb.protocol_type == "consumer" and rb.protocol_name == "range"
    assert ra.protocol_type is None                        # v5 has no protocol type
    assert rd.protocol_type == "consumer" and rd.skip_assignment is False
    assert c.group().state == "CompletingRebalance"


def test_rebalance_timeout_removes_silent_member(client):
    c = client()
    ids, gen = form(c, 2)
    p = c.send(jreq(member=ids[1], rebalance=20_000, protos=(("range", b"x"),)), 5)
    # the barrier deadline is the largest rebalance timeout of the members (30 s); a keeps
    # heartbeating (told REBALANCE_IN_PROGRESS) but never rejoins
    for _ in range(5):
        c.advance(REBALANCE // 6)
        assert hb(c, ids[0], gen) == E.REBALANCE_IN_PROGRESS
    c.advance(REBALANCE // 6 - 1)
    assert c.waiting(p)
    c.advance(1)
    r = c.done(p)
    assert r.error_code == 0 and r.generation_id == gen + 1 and r.leader == ids[1]
    assert [x.member_id for x in r.members] == [ids[1]]
    assert list(c.group().members) == [ids[1]]


def test_initial_delay_extends_per_window_up_to_rebalance_timeout(client):
    c = client()
    pa = join_new(c, rebalance=10_000)
    c.advance(1_000)
    pb = join_new(c, rebalance=10_000)
    c.advance(2_000)                       # t=3000: a member joined in the window: +3000
    assert c.group().state == "PreparingRebalance" and c.group().barrier_deadline == 6_000
    c.advance(2_000)
    pc = join_new(c, rebalance=10_000)     # t=5000
    c.advance(1_000)                       # t=6000 -> 9000
    assert c.group().barrier_deadline == 9_000
    c.advance(2_999)
    assert c.waiting(pa)
    c.advance(1)                           # t=9000: a quiet window: complete
    rs = [c.done(p) for p in (pa, pb, pc)]
    assert {r.generation_id for r in rs} == {1} and len(rs[0].members) == 3


def test_initial_delay_is_capped_by_rebalance_timeout(client):
    c = client()
    pa = join_new(c, rebalance=4_000)
    c.advance(2_000)
    join_new(c, rebalance=4_000)
    c.advance(1_000)                       # t=3000: extend, capped at 4000
    assert c.group().barrier_deadline == 4_000
    c.advance(500)
    pc = join_new(c, rebalance=4_000)
    c.advance(500)                         # t=4000: the cap: complete anyway
    assert c.done(pa).generation_id == 1 and c.done(pc).generation_id == 1


def test_no_initial_delay_completes_a_lone_join_at_once(client):
    c = client(NODELAY)
    r = c.send(jreq(), 3)
    assert r.error_code == 0 and r.generation_id == 1 and c.group().state == \
        "CompletingRebalance"


def test_superseded_join_is_answered(client):
    c = client()
    ids, gen = form(c, 2)
    p1 = c.send(jreq(member=ids[0]), 5)
    n = len(c.h.completed[p1.key])
    p2 = c.send(jreq(member=ids[0], protos=(("range", b"2"),)), 6)
    assert c.h.completed[p1.key][n].error_code == E.REBALANCE_IN_PROGRESS
    r = c.send(jreq(member=ids[1]), 5)
    assert r.generation_id == gen + 1
    assert len(c.h.completed[p2.key]) == n + 2
    final = c.h.completed[p2.key][-1]
    assert final.error_code == 0 and final.members[0].metadata == b"2"


# ------------------------------------------------------------------ protocol selection
def _members(*lists):
    return [classic_group.Member("m%d" % i, protocols=tuple((n, b"") for n in names))
            for i, names in enumerate(lists)]


def test_select_protocol_votes_preferences_and_ties():
    sel = select_protocol
    assert sel(_members(["a", "b"], ["b", "a"], ["b"])) == "b"        # b is the only common
    assert sel(_members(["a", "b"], ["a", "b"], ["b", "a"])) == "a"   # 2 votes to 1
    assert sel(_members(["b", "a"], ["a", "b"])) == "a"               # tie: sorts first
    assert sel(_members(["z", "c", "x"], ["c", "z", "x"], ["x", "z", "c"])) == "c"
    assert sel(_members(["q"])) == "q"


def test_protocol_chosen_by_vote_in_a_group(client):
    c = client()
    ids, gen = form(c, 3, sync=False,
                    protos=[(("rr", b"1"), ("range", b"1")), (("range", b"2"), ("rr", b"2")),
                            (("range", b"3"), ("rr", b"3"))])
    assert c.group().protocol == "range"
    # the leader sees every member's metadata for the chosen protocol
    r = c.send(jreq(member=ids[0], protos=(("rr", b"1"), ("range", b"1"))), 7)
    assert (r.generation_id, r.protocol_name) == (gen, "range")
    assert [x.metadata for x in r.members] == [b"1", b"2", b"3"]


# -------------------------------------------------------- known member JoinGroup
def test_stable_follower_unchanged_gets_current_generation(client):
    c = client()
    ids, gen = form(c, 2)
    r = c.send(jreq(member=ids[1]), 5)
    assert r.error_code == 0 and r.generation_id == gen and r.members == []
    assert r.leader == ids[0] and c.group().state == "Stable"
    assert sync_one(c, ids[1], gen) == b"a-" + ids[1].encode()


def sync_one(c, member, gen, v=3):
    r = c.send(sreq(member, gen), v)
    assert r.error_code == 0
    return r.assignment


def test_stable_leader_rejoin_starts_new_generation(client):
    c = client()
    ids, gen = form(c, 2)
    p = c.send(jreq(member=ids[0]), 5)
    assert isinstance(p, Parked) and c.group().state == "PreparingRebalance"
    assert hb(c, ids[1], gen) == E.REBALANCE_IN_PROGRESS
    r = c.send(jreq(member=ids[1]), 5)
    assert r.generation_id == gen + 1 and c.done(p).generation_id == gen + 1


def test_stable_follower_changed_metadata_starts_new_generation(client):
    c = client()
    ids, gen = form(c, 2)
    p = c.send(jreq(member=ids[1], protos=(("range", b"changed"),)), 5)
    assert isinstance(p, Parked)
    r = c.send(jreq(member=ids[0]), 5)
    assert r.generation_id == gen + 1
    assert dict((x.member_id, x.metadata) for x in r.members)[ids[1]] == b"changed"


def test_completing_rebalance_rejoins(client):
    c = client()
    ids, gen = form(c, 2, sync=False)
    # the follower lost its response: same generation back, nothing changes
    r = c.send(jreq(member=ids[1]), 5)
    assert r.generation_id == gen and r.members == []
    # so did the leader: it gets the member list again (Kafka does the same)
    r = c.send(jreq(member=ids[0]), 5)
    assert r.generation_id == gen and len(r.members) == 2
    assert c.group().state == "CompletingRebalance"
    # changed metadata: a new rebalance; a parked sync is answered REBALANCE_IN_PROGRESS
    ps = c.send(sreq(ids[1], gen), 3)
    p = c.send(jreq(member=ids[0], protos=(("range", b"x"),)), 5)
    assert c.done(ps).error_code == E.REBALANCE_IN_PROGRESS
    assert isinstance(p, Parked) and c.group().state == "PreparingRebalance"


def _sub(generation):
    return (("range", embedded.encode_subscription(m.ConsumerProtocolSubscription(
        topics=["t"], generation_id=generation), 3)),)


def test_late_join_copy_from_before_a_synced_generation_is_refused(client):
    # Finding 12 (tests/simulation --seed 3001281 --liveness): the first copy of a JoinGroup
    # a member retried arrived after it synced the generation the retry joined, while a new
    # member's join rebalanced the group; counted as its rejoin, the generation completed
    # without it and its partitions went to others while it ran them (eager).
    c = client()
    ids, gen = form(c, 2, protos=[_sub(-1), _sub(-1)])
    p = c.send(jreq(member=ids[0], protos=_sub(gen)), 5)
    r = c.send(jreq(member=ids[1], protos=_sub(gen)), 5)
    gen2 = r.generation_id
    assert gen2 == gen + 1 and c.done(p).generation_id == gen2
    sync_all(c, ids, gen2)
    late = join_new(c, client_id="late")
    assert isinstance(late, Parked) and c.group().state == "PreparingRebalance"
    # ids[1]'s copy from before it learned gen2: refused, nothing changes
    r = c.send(jreq(member=ids[1], protos=_sub(gen)), 5)
    assert r.error_code == E.REBALANCE_IN_PROGRESS
    assert not c.group().members[ids[1]].joined
    q = c.send(jreq(member=ids[0], protos=_sub(gen2)), 5)
    assert c.waiting(q) and c.waiting(late)
    # its real rejoin (the generation it synced) counts; so would -1 (a reset member)
    assert hb(c, ids[1], gen2) == E.REBALANCE_IN_PROGRESS
    r = c.send(jreq(member=ids[1], protos=_sub(gen2)), 5)
    assert r.error_code == 0 and r.generation_id == gen2 + 1
    assert c.done(q).generation_id == gen2 + 1 == c.done(late).generation_id
    sync_all(c, [ids[0], ids[1], late.key.member_id], gen2 + 1)
    p = c.send(jreq(member=ids[0], protos=_sub(-1)), 5)
    assert isinstance(p, Parked) and c.group().members[ids[0]].joined


# ---------------------------------------------------------------------------- SyncGroup
def test_sync_errors(client):
    c = client()
    ids, gen = form(c, 2, sync=False)
    assert c.send(sreq("nobody", gen), 3).error_code == E.UNKNOWN_MEMBER_ID
    assert c.send(sreq(ids[1], gen + 1), 3).error_code == E.ILLEGAL_GENERATION
    assert c.send(sreq(ids[1], gen, ptype="connect"), 5).error_code == \
        E.INCONSISTENT_GROUP_PROTOCOL
    assert c.send(sreq(ids[1], gen, pname="rr"), 5).error_code == E.INCONSISTENT_GROUP_PROTOCOL
    assert c.send(sreq(ids[1], gen, group=""), 3).error_code == E.INVALID_GROUP_ID
    assert c.send(sreq(ids[1], gen, group="nope"), 3).error_code == E.UNKNOWN_MEMBER_ID
    ok = c.send(sreq(ids[0], gen, {ids[0]: b"x"}, ptype="consumer", pname="range"), 5)
    assert ok.error_code == 0 and ok.protocol_type == "consumer" and ok.protocol_name == "range"
    c.send(jreq(member=ids[0]), 5)
    assert c.send(sreq(ids[1], gen), 3).error_code == E.REBALANCE_IN_PROGRESS


def test_leader_sync_writes_one_record_and_answers_parked(client):
    c = client()
    ids, gen = form(c, 3, sync=False)
    a, b, d = ids
    c.advance(5)
    pb = c.send(sreq(b, gen), 5)
    pd = c.send(sreq(d, gen), 1)
    assert isinstance(pb, Parked) and isinstance(pd, Parked)
    assert group_records(c) == []
    n = len(c.h.log)
    r = c.send(sreq(a, gen, {a: b"A", b: b"B", "stranger": b"S"}), 4)
    assert r.error_code == 0 and r.assignment == b"A"
    assert c.done(pb).assignment == b"B" and c.done(pb).protocol_name == "range"
    assert c.done(pd).assignment == b"" and c.done(pd).protocol_name is None  # d: missing
    assert len(c.h.log) == n + 1
    v = group_records(c)[-1]
    assert (v.generation, v.protocol_type, v.protocol, v.leader) == (gen, "consumer", "range", a)
    assert v.current_state_timestamp == c.h.now
    assert [(x.member_id, x.assignment, x.subscription, x.session_timeout,
             x.rebalance_timeout, x.client_id, x.client_host) for x in v.members] == [
        (a, b"A", b"r", SESSION, REBALANCE, "c0", "/10.0.0.1"),
        (b, b"B", b"r", SESSION, REBALANCE, "c1", "/10.0.0.1"),
        (d, b"", b"r", SESSION, REBALANCE, "c2", "/10.0.0.1")]
    assert c.group().state == "Stable"
    # Stable: answered at once from the stored assignment
    assert c.send(sreq(b, gen), 3).assignment == b"B"


def test_member_answered_out_of_a_parked_sync_has_a_session_again(client):
    c = client()
    ids, gen = form(c, 2, sync=False)
    ps = c.send(sreq(ids[1], gen), 3)
    p = c.send(jreq(member=ids[0], protos=(("range", b"new"),)), 5)
    assert c.done(ps).error_code == E.REBALANCE_IN_PROGRESS
    c.advance(SESSION - 1)                  # ids[1] never rejoins nor heartbeats
    assert c.waiting(p)
    c.advance(1)                            # its session, not the 30 s barrier, ends it
    r = c.done(p)
    assert r.generation_id == gen + 1 and [x.member_id for x in r.members] == [ids[0]]


def test_superseded_sync_is_answered(client):
    c = client()
    ids, gen = form(c, 2, sync=False)
    p1 = c.send(sreq(ids[1], gen), 3)
    p2 = c.send(sreq(ids[1], gen), 3)
    assert c.h.completed[p1.key][0].error_code == E.REBALANCE_IN_PROGRESS
    c.send(sreq(ids[0], gen, {ids[1]: b"x"}), 3)
    assert c.h.completed[p2.key][-1].assignment == b"x"


def test_pending_sync_timeout_removes_member_that_never_syncs(client):
    c = client()
    ids, gen = form(c, 3, sync=False)
    a, b, d = ids
    c.send(sreq(a, gen, {a: b"1", b: b"2", d: b"3"}), 3)
    assert c.send(sreq(b, gen), 3).assignment == b"2"
    # d heartbeats but never syncs
    keep_alive(c, REBALANCE - 1, [(a, gen), (b, gen), (d, gen)])
    assert d in c.group().members
    c.advance(1)
    g = c.group()
    assert d not in g.members and g.state == "PreparingRebalance"


def test_pending_sync_timeout_when_leader_never_syncs(client):
    c = client()
    ids, gen = form(c, 2, sync=False)
    p = c.send(sreq(ids[1], gen), 3)
    keep_alive(c, REBALANCE - 1, [(ids[0], gen)])     # the leader is alive, but never syncs
    assert c.waiting(p)
    c.advance(1)
    assert c.done(p).error_code == E.REBALANCE_IN_PROGRESS
    assert list(c.group().members) == [ids[1]]
    r = c.send(jreq(member=ids[1]), 5)
    assert r.generation_id == gen + 1 and r.leader == ids[1]


def test_no_pending_sync_timeout_once_everyone_synced(client):
    c = client()
    ids, gen = form(c, 2)
    for _ in range(5):
        c.advance(SESSION // 2)
        assert hb(c, ids[0], gen) == 0 and hb(c, ids[1], gen) == 0
    assert c.group().state == "Stable"


# ---------------------------------------------------------------------------- Heartbeat
def test_heartbeats_keep_the_session_and_expiry_removes(client):
    c = client()
    ids, gen = form(c, 2)
    for _ in range(4):
        c.advance(SESSION - 1)
        assert hb(c, ids[0], gen) == 0 and hb(c, ids[1], gen) == 0
    c.advance(SESSION - 1)
    assert hb(c, ids[0], gen) == 0
    c.advance(1)
    # ids[1] stopped: it expired, and a rebalance started
    g = c.group()
    assert ids[1] not in g.members and g.state == "PreparingRebalance"
    assert hb(c, ids[1], gen) == E.UNKNOWN_MEMBER_ID
    assert hb(c, ids[0], gen) == E.REBALANCE_IN_PROGRESS
    r = c.send(jreq(member=ids[0]), 5)
    assert r.generation_id == gen + 1 and len(r.members) == 1


def test_session_expiry_in_completing_rebalance(client):
    c = client()
    ids, gen = form(c, 3, sync=False)
    pb = c.send(sreq(ids[1], gen), 3)
    for _ in range(2):
        c.advance(SESSION // 2)
        hb(c, ids[0], gen)
    # ids[2] never heartbeated: removed; ids[1]'s parked sync is answered
    assert ids[2] not in c.group().members and c.group().state == "PreparingRebalance"
    assert c.done(pb).error_code == E.REBALANCE_IN_PROGRESS


def test_session_expiry_in_preparing_completes_barrier(client):
    c = client()
    ids, gen = form(c, 2)
    c.advance(SESSION - 1_000)
    p = c.send(jreq(member=ids[0]), 5)      # ids[1] will expire at SESSION
    c.advance(1_000)
    r = c.done(p)
    assert r.generation_id == gen + 1 and [x.member_id for x in r.members] == [ids[0]]


def test_session_expiry_of_last_member_makes_group_empty(client):
    c = client()
    ids, gen = form(c, 1)
    c.advance(SESSION)
    g = c.group()
    assert g.state == "Empty" and g.generation == gen + 1 and not g.members
    v = group_records(c)[-1]
    assert v.members == [] and v.generation == gen + 1 and v.protocol is None


def test_parked_join_outlives_session_timeout(client):
    c = client()
    ids, gen = form(c, 2)
    p = c.send(jreq(member=ids[0], session=6_000), 5)
    for _ in range(3):
        c.advance(4_000)
        assert hb(c, ids[1], gen) == E.REBALANCE_IN_PROGRESS
        # a heartbeat of the parked member must not restart a session it cannot keep
        assert hb(c, ids[0], gen) == E.REBALANCE_IN_PROGRESS
    assert ids[0] in c.group().members and c.waiting(p)
    r = c.send(jreq(member=ids[1]), 5)
    assert r.generation_id == gen + 1 and c.done(p).generation_id == gen + 1


# --------------------------------------------------------------------------- LeaveGroup
def test_leave_v0_single_member(client):
    c = client()
    ids, gen = form(c, 2)
    for v in (0, 1, 2):
        assert c.send(m.LeaveGroupRequest(group_id="g", member_id="nobody"), v).error_code == \
            E.UNKNOWN_MEMBER_ID
    r = c.send(m.LeaveGroupRequest(group_id="g", member_id=ids[1]), 1)
    assert r.error_code == 0 and ids[1] not in c.group().members
    assert c.group().state == "PreparingRebalance"
    assert c.send(m.LeaveGroupRequest(group_id="nope", member_id="x"), 0).error_code == \
        E.UNKNOWN_MEMBER_ID
    assert c.send(m.LeaveGroupRequest(group_id="", member_id="x"), 0).error_code == \
        E.INVALID_GROUP_ID


def test_batch_leave_per_member_results(client):
    c = client()
    # a, b dynamic; s static
    pa = join_new(c, client_id="a")
    pb = join_new(c, client_id="b")
    ps = c.send(jreq(instance="inst"), 5)
    settle(c, [pa, pb, ps])
    a, b, s = (c.done(p).member_id for p in (pa, pb, ps))
    assert s.startswith("inst-")
    pend = c.send(jreq(), 5).member_id
    r = c.send(m.LeaveGroupRequest(group_id="g", members=[
        m.LeaveGroupRequestMemberIdentity(member_id=a, reason="bye"),
        m.LeaveGroupRequestMemberIdentity(member_id="ghost"),
        m.LeaveGroupRequestMemberIdentity(member_id="wrong", group_instance_id="inst"),
        m.LeaveGroupRequestMemberIdentity(member_id="", group_instance_id="nobody"),
        m.LeaveGroupRequestMemberIdentity(member_id=a),
        m.LeaveGroupRequestMemberIdentity(member_id=pend),
    ]), 5)
    assert r.error_code == 0
    assert [(x.member_id, x.group_instance_id, x.error_code) for x in r.members] == [
        (a, None, 0), ("ghost", None, E.UNKNOWN_MEMBER_ID),
        ("wrong", "inst", E.FENCED_INSTANCE_ID), ("", "nobody", E.UNKNOWN_MEMBER_ID),
        (a, None, E.UNKNOWN_MEMBER_ID), (pend, None, 0)]
    g = c.group()
    assert list(g.members) == [b, s] and not g.pending and g.state == "PreparingRebalance"
    # a static member may leave by instance id alone
    r = c.send(m.LeaveGroupRequest(group_id="g", members=[
        m.LeaveGroupRequestMemberIdentity(member_id="", group_instance_id="inst")]), 3)
    assert r.members[0].error_code == 0 and list(c.group().members) == [b]
    r = c.send(m.LeaveGroupRequest(group_id="nope", members=[
        m.LeaveGroupRequestMemberIdentity(member_id="x")]), 4)
    assert r.error_code == 0 and r.members[0].error_code == E.UNKNOWN_MEMBER_ID


def test_leader_leaving_elects_first_remaining_member(client):
    c = client()
    ids, gen = form(c, 3)
    c.send(m.LeaveGroupRequest(group_id="g", members=[
        m.LeaveGroupRequestMemberIdentity(member_id=ids[0])]), 3)
    p = c.send(jreq(member=ids[2]), 5)
    r = c.send(jreq(member=ids[1]), 5)
    assert r.generation_id == gen + 1 and r.leader == ids[1] and len(r.members) == 2
    assert c.done(p).leader == ids[1] and c.done(p).members == []


def test_leaving_completes_the_barrier_and_answers_own_park(client):
    c = client()
    ids, gen = form(c, 3)
    pa = c.send(jreq(member=ids[0]), 5)
    pb = c.send(jreq(member=ids[1]), 5)
    # ids[1] leaves while parked: its join is answered; ids[2] leaves: barrier completes
    c.send(m.LeaveGroupRequest(group_id="g", member_id=ids[1]), 2)
    assert c.done(pb).error_code == E.UNKNOWN_MEMBER_ID
    c.send(m.LeaveGroupRequest(group_id="g", member_id=ids[2]), 2)
    r = c.done(pa)
    assert r.error_code == 0 and r.generation_id == gen + 1 and len(r.members) == 1


def test_last_member_leaving_makes_group_empty_with_record(client):
    c = client()
    ids, gen = form(c, 2)
    c.send(m.LeaveGroupRequest(group_id="g", members=[
        m.LeaveGroupRequestMemberIdentity(member_id=i) for i in ids]), 4)
    g = c.group()
    assert g.state == "Empty" and g.generation == gen + 1 and not g.members
    recs = group_records(c)
    v = recs[-1]
    assert (v.generation, v.protocol_type, v.protocol, v.leader, v.members) == \
        (gen + 1, "consumer", None, None, [])
    assert len(recs) == 2               # the sync's and the empty one
    assert c.h.shard.timers.keys("g") == []
    # the group can be joined again, with another protocol type
    r = c.send(jreq(ptype="connect"), 3)
    assert isinstance(r, Parked)
    c.advance(DELAY)
    assert c.done(r).generation_id == gen + 2 and c.group().protocol_type() == "connect"


def test_leave_during_initial_delay_then_empty(client):
    c = client()
    p = join_new(c)
    mid = p.key.member_id
    c.send(m.LeaveGroupRequest(group_id="g", member_id=mid), 0)
    assert c.done(p).error_code == E.UNKNOWN_MEMBER_ID
    c.advance(DELAY)
    g = c.group()
    assert g.state == "Empty" and g.generation == 1 and group_records(c)[-1].members == []


# --------------------------------------------------------------------- static members
def test_static_member_joins_directly_and_is_replaced_in_stable(client):
    c = client()
    pa = join_new(c, client_id="dyn")
    ps = c.send(jreq(instance="i1"), 5, client_id="st")
    settle(c, [pa, ps])
    a, s = c.done(pa).member_id, c.done(ps).member_id
    gen = c.done(pa).generation_id
    sync_all(c, [a, s], gen)
    n = len(group_records(c))
    # the instance restarts: new member id, same protocols: no rebalance
    r = c.send(jreq(instance="i1"), 5, client_id="st2")
    assert r.error_code == 0 and r.generation_id == gen and r.member_id != s
    assert r.member_id.startswith("i1-") and r.members == [] and r.leader == a
    g = c.group()
    assert g.state == "Stable" and list(g.members) == [a, r.member_id]
    recs = group_records(c)
    assert len(recs) == n + 1 and [x.member_id for x in recs[-1].members] == [a, r.member_id]
    assert recs[-1].members[1].assignment == b"a-" + s.encode()
    assert recs[-1].members[1].client_id == "st2"
    # it keeps the assignment
    assert sync_one(c, r.member_id, gen, v=3) == b"a-" + s.encode()
    # the old id is fenced everywhere
    assert hb(c, s, gen, instance="i1") == E.FENCED_INSTANCE_ID
    assert c.send(sreq(s, gen, instance="i1"), 3).error_code == E.FENCED_INSTANCE_ID
    assert c.send(jreq(member=s, instance="i1"), 5).error_code == E.FENCED_INSTANCE_ID
    lr = c.send(m.LeaveGroupRequest(group_id="g", members=[
        m.LeaveGroupRequestMemberIdentity(member_id=s, group_instance_id="i1")]), 3)
    assert lr.members[0].error_code == E.FENCED_INSTANCE_ID
    assert g.validate_offset_commit(s, "i1", gen, 8) == E.FENCED_INSTANCE_ID
    assert classic_group.check_member(g, s, "i1") == E.FENCED_INSTANCE_ID
    assert classic_group.check_member(g, r.member_id, "i1") == 0
    # the new id works
    assert hb(c, r.member_id, gen, instance="i1") == 0
    assert c.h.shard.timers.keys("g").count(
        TimerKey(classic_group.SESSION, "g", s)) == 0


def test_static_leader_replacement_skips_assignment_at_v9(client):
    for v, members in ((9, 2), (8, 0)):
        c = client()
        ps = c.send(jreq(instance="lead"), v)
        pb = join_new(c, v)
        settle(c, [ps, pb])
        gen = c.done(ps).generation_id
        sync_all(c, [c.done(ps).member_id, c.done(pb).member_id], gen)
        r = c.send(jreq(instance="lead"), v)
        assert r.error_code == 0 and r.generation_id == gen and r.leader == r.member_id
        assert len(r.members) == members and r.skip_assignment is (v >= 9)
        assert c.group().leader == r.member_id and c.group().state == "Stable"


def test_static_replacement_with_changed_metadata_rebalances(client):
    c = client()
    ps = c.send(jreq(instance="i1"), 5)
    pb = join_new(c)
    settle(c, [ps, pb])
    s, b = c.done(ps).member_id, c.done(pb).member_id
    gen = c.done(ps).generation_id
    sync_all(c, [s, b], gen)
    p = c.send(jreq(instance="i1", protos=(("range", b"v2"),)), 5)
    assert isinstance(p, Parked) and c.group().state == "PreparingRebalance"
    new = p.key.member_id
    assert new != s and c.group().static_members["i1"] == new
    r = c.send(jreq(member=b), 5)
    assert r.generation_id == gen + 1 and c.done(p).leader == new   # leader id follows
    assert hb(c, s, gen + 1, instance="i1") == E.FENCED_INSTANCE_ID


def test_static_replacement_fences_parked_requests(client):
    c = client()
    ps = c.send(jreq(instance="i1"), 5)
    pb = join_new(c)
    settle(c, [ps, pb])
    s, b = c.done(ps).member_id, c.done(pb).member_id
    gen = c.done(ps).generation_id
    # CompletingRebalance (s leads): b syncs and parks; then the instance restarts
    park_b = c.send(sreq(b, gen), 3)
    p = c.send(jreq(instance="i1"), 5)
    assert c.done(park_b).error_code == E.REBALANCE_IN_PROGRESS
    assert isinstance(p, Parked)
    # now s's replacement is parked at the barrier; yet another restart fences it
    p2 = c.send(jreq(instance="i1"), 7)
    assert c.done(p).error_code == E.FENCED_INSTANCE_ID
    r = c.send(jreq(member=b), 5)
    assert r.generation_id == gen + 1
    assert c.done(p2).generation_id == gen + 1 and c.done(p2).leader == p2.key.member_id


def test_new_member_joining_stable_or_completing_starts_rebalance(client):
    for synced in (True, False):
        c = client()
        ids, gen = form(c, 2, sync=synced)
        parked_sync = None if synced else c.send(sreq(ids[1], gen), 3)
        p = join_new(c, client_id="late")
        assert isinstance(p, Parked) and c.group().state == "PreparingRebalance"
        if parked_sync is not None:
            assert c.done(parked_sync).error_code == E.REBALANCE_IN_PROGRESS
        assert hb(c, ids[0], gen) == E.REBALANCE_IN_PROGRESS
        q = c.send(jreq(member=ids[0]), 5)
        r = c.send(jreq(member=ids[1]), 5)
        assert r.generation_id == gen + 1 and c.done(p).generation_id == gen + 1
        assert [x.member_id for x in c.done(q).members] == ids + [p.key.member_id]
        assert hb(c, ids[0], gen + 1) == 0 and hb(c, ids[0], gen) == E.ILLEGAL_GENERATION


def test_empty_group_id_everywhere(client):
    c = client()
    assert hb(c, "m", 1, group="") == E.INVALID_GROUP_ID
    assert c.send(sreq("m", 1, group=""), 3).error_code == E.INVALID_GROUP_ID
    r = c.send(m.LeaveGroupRequest(group_id="", members=[
        m.LeaveGroupRequestMemberIdentity(member_id="m")]), 3)
    assert r.error_code == E.INVALID_GROUP_ID


def test_unknown_instance_with_member_id_is_unknown(client):
    c = client()
    form(c, 1)
    assert c.send(jreq(member="made-up", instance="zz"), 5).error_code == E.UNKNOWN_MEMBER_ID


# ------------------------------------------------------------------ state x request table
def _setup(c, state):
    """-> (known member id, its generation) with the group in ``state``; the known member
    is a follower that has not rejoined (PreparingRebalance)."""
    if state == "Dead":
        g = ClassicGroup("g")
        g.state = "Dead"
        c.h.shard.groups["g"] = g
        return "m", 0
    if state == "Unknown":
        return "m", 0
    ids, gen = form(c, 2, sync=state not in ("CompletingRebalance",))
    if state == "Empty":
        c.send(m.LeaveGroupRequest(group_id="g", members=[
            m.LeaveGroupRequestMemberIdentity(member_id=i) for i in ids]), 3)
        return ids[1], gen + 1
    if state == "PreparingRebalance":
        c.send(jreq(member=ids[0]), 5)
    assert c.group().state == state
    return ids[1], gen


STATES = ["Empty", "PreparingRebalance", "CompletingRebalance", "Stable", "Dead", "Unknown"]
NA = E.COORDINATOR_NOT_AVAILABLE
U = E.UNKNOWN_MEMBER_ID
IG = E.ILLEGAL_GENERATION
RIP = E.REBALANCE_IN_PROGRESS
# expected outcome per state: (known, unknown, wrong generation); "park" = parked,
# "gen" = answered at the current generation, "gen+1" = completes the barrier
TABLE = {
    "join": {"Empty": (U, U, None), "PreparingRebalance": ("gen+1", U, None),
             "CompletingRebalance": ("gen", U, None), "Stable": ("gen", U, None),
             "Dead": (NA, NA, None), "Unknown": (U, U, None)},
    "sync": {"Empty": (U, U, U), "PreparingRebalance": (RIP, U, IG),
             "CompletingRebalance": ("park", U, IG), "Stable": (0, U, IG),
             "Dead": (NA, NA, NA), "Unknown": (U, U, U)},
    "heartbeat": {"Empty": (U, U, U), "PreparingRebalance": (RIP, U, IG),
                  "CompletingRebalance": (0, U, IG), "Stable": (0, U, IG),
                  "Dead": (NA, NA, NA), "Unknown": (U, U, U)},
    "leave": {"Empty": (U, U, None), "PreparingRebalance": (0, U, None),
              "CompletingRebalance": (0, U, None), "Stable": (0, U, None),
              "Dead": (NA, NA, None), "Unknown": (U, U, None)},
}


CASES = [(state, api, who, TABLE[api][state][who]) for api in sorted(TABLE)
         for state in STATES for who in range(3) if TABLE[api][state][who] is not None]


@pytest.mark.parametrize("state,api,who,expected", CASES)
def test_state_request_table(client, state, api, who, expected):
    """known member / unknown member ("stranger") / known member at a wrong generation
    (JoinGroup and LeaveGroup carry no generation)."""
    c = client()
    known, gen = _setup(c, state)
    member = "stranger" if who == 1 else known
    g_ = gen + 7 if who == 2 else gen
    if api == "join":
        out = c.send(jreq(member=member), 5)
    elif api == "sync":
        out = c.send(sreq(member, g_), 3)
    elif api == "heartbeat":
        out = c.send(m.HeartbeatRequest(group_id="g", generation_id=g_, member_id=member), 3)
    else:
        out = c.send(m.LeaveGroupRequest(group_id="g", members=[
            m.LeaveGroupRequestMemberIdentity(member_id=member)]), 3)
        if out.error_code == 0:
            out = out.members[0]
    if expected == "park":
        assert isinstance(out, Parked)
    elif expected == "gen":
        assert out.error_code == 0 and out.generation_id == gen
    elif expected == "gen+1":
        assert out.error_code == 0 and out.generation_id == gen + 1
    else:
        assert out.error_code == expected
    if state == "Dead":
        del c.h.shard.groups["g"]


# ------------------------------------------------------------------ describe and list
def test_describe_and_list_per_state(client):
    c = client()
    assert c.send(m.DescribeGroupsRequest(groups=["g"]), 5).groups[0].group_state == "Dead"
    ids, gen = form(c, 2, sync=False)
    d = c.send(m.DescribeGroupsRequest(groups=["g"]), 4).groups[0]
    assert (d.group_state, d.protocol_type, d.protocol_data) == \
        ("CompletingRebalance", "consumer", "")
    # Kafka's: metadata and assignments only while Stable.
    assert [(x.member_id, x.client_id, x.member_metadata) for x in d.members] == \
        [(ids[0], "c0", b""), (ids[1], "c1", b"")]
    sync_all(c, ids, gen)
    d = c.send(m.DescribeGroupsRequest(groups=["g"]), 0).groups[0]
    assert (d.group_state, d.protocol_data) == ("Stable", "range")
    assert [x.member_metadata for x in d.members] == [b"r", b"r"]
    assert [x.member_assignment for x in d.members] == [b"a-" + i.encode() for i in ids]
    c.send(jreq(member=ids[0]), 5)
    d = c.send(m.DescribeGroupsRequest(groups=["g"]), 5).groups[0]
    assert d.group_state == "PreparingRebalance" and d.protocol_data == ""
    assert all(x.member_metadata == b"" and x.member_assignment == b"" for x in d.members)
    lg = c.send(m.ListGroupsRequest(), 5).groups
    assert [(x.group_id, x.protocol_type, x.group_state, x.group_type) for x in lg] == \
        [("g", "consumer", "PreparingRebalance", "classic")]
    lg = c.send(m.ListGroupsRequest(states_filter=["Stable"]), 4).groups
    assert lg == []


# ------------------------------------------------------------------------------ offsets
def test_validate_offset_commit():
    g = classic_group.new_empty_group("x")
    assert (g.state_name(), g.generation, g.protocol_type(), g.snapshot(True)) == \
        ("Empty", 0, "", None)
    assert g.validate_offset_commit("", None, -1, 8) == 0
    assert g.validate_offset_commit("m", None, 1, 8) == E.UNKNOWN_MEMBER_ID
    g.members["m"] = classic_group.Member("m", instance_id="i")
    g.static_members["i"] = "m"
    g.generation = 3
    g.state = "Stable"
    assert g.validate_offset_commit("", None, -1, 8) == E.UNKNOWN_MEMBER_ID
    assert g.validate_offset_commit("m", None, 3, 8) == 0
    assert g.validate_offset_commit("m", "i", 3, 8) == 0
    assert g.validate_offset_commit("old", "i", 3, 8) == E.FENCED_INSTANCE_ID
    assert g.validate_offset_commit("m", None, 2, 8) == E.ILLEGAL_GENERATION
    assert g.validate_offset_commit("z", None, 3, 8) == E.UNKNOWN_MEMBER_ID
    g.state = "PreparingRebalance"
    assert g.validate_offset_commit("m", None, 3, 8) == 0
    g.state = "CompletingRebalance"
    assert g.validate_offset_commit("m", None, 3, 8) == E.REBALANCE_IN_PROGRESS
    g.state = "Dead"
    assert g.validate_offset_commit("m", None, 3, 8) == E.COORDINATOR_NOT_AVAILABLE


# ----------------------------------------------------------------------------- recovery
def test_recovery_gives_stable_group_and_rearm_keeps_members(client):
    c = client()
    ids, gen = form(c, 2)
    c.send(jreq(instance="st"), 5)              # a rebalance in flight is not durable
    fresh = c.h.replayed()
    g = fresh.group("g")
    assert g.state_name() == "Stable" and g.generation == gen and list(g.members) == ids
    assert g.snapshot(True) == c.group().snapshot(True)
    assert g.members[ids[1]].assignment == b"a-" + ids[1].encode()
    assert g.members[ids[1]].protocols == (("range", b"r"),)
    assert g.protocol_counts == {"range": 2} and g.num_joined == 0
    fresh.rearm(1_000)
    assert sorted(k.member_id for k in fresh.timers.keys("g")) == sorted(ids)
    # drive the recovered shard: heartbeats work, silence expires
    res = fresh.handle(m.HeartbeatRequest(group_id="g", generation_id=gen, member_id=ids[0]),
                       2_000, 4)
    assert res.response.error_code == 0
    fresh.apply(res)
    res = fresh.handle(m.SyncGroupRequest(group_id="g", generation_id=gen, member_id=ids[1]),
                       2_000, 3)
    assert res.response.assignment == b"a-" + ids[1].encode()     # not applied: ids[1] idles
    for key in fresh.due(1_000 + SESSION):
        fresh.apply(fresh.fire(key, 1_000 + SESSION))
    g = fresh.group("g")
    assert list(g.members) == [ids[0]] and g.state_name() == "PreparingRebalance"


def test_recovery_of_empty_and_never_written_groups(client):
    c = client()
    ids, gen = form(c, 1)
    c.send(m.LeaveGroupRequest(group_id="g", member_id=ids[0]), 0)
    p = join_new(c, group="h")             # group h: no record yet
    fresh = c.h.replayed()
    assert fresh.group("g").state_name() == "Empty" and fresh.group("g").generation == gen + 1
    assert fresh.group("h") is None and c.group("h").snapshot(True) is None
    c.advance(DELAY)
    assert c.done(p).generation_id == 1


def test_tombstone_removes_group():
    from groupcoord.groups.records import Record
    from groupcoord.groups.shard import Shard
    sh = Shard(strict=True)
    sh.replay(Record(m.GroupMetadataKey(group="g"), m.GroupMetadataValue(
        protocol_type="consumer", generation=4, protocol="range", leader="a",
        members=[m.GroupMetadataValueMemberMetadata(member_id="a", session_timeout=SESSION,
                                                    rebalance_timeout=REBALANCE)])))
    g = sh.group("g")
    assert g.state_name() == "Stable" and g.generation == 4
    sh.replay(Record(m.GroupMetadataKey(group="g"), None))
    assert sh.group("g") is None and g.state_name() == "Dead"


# ------------------------------------------------------------------- randomized traffic
@pytest.mark.parametrize("seed", [1, 2, 3, 4, 5, 6, 7, 8])
def test_random_traffic_keeps_every_invariant(client, seed):
    """Members join, rejoin, sync, heartbeat, leave and go silent at random; the driver's
    checks (no leaked park, codec-valid responses) and the harness's (purity, replay) must
    hold throughout, and in the end every parked request is answered."""
    print("seed", seed)
    rnd = random.Random(seed)
    c = client()
    instances = {}                          # member id -> group.instance.id
    states = set()

    def pick():
        g = c.group()
        if g is not None and g.members and rnd.random() < 0.85:
            if g.state == "CompletingRebalance" and rnd.random() < 0.5:
                return g.leader
            return rnd.choice(sorted(g.members))
        return rnd.choice(sorted(instances)) if instances else "ghost"

    for _ in range(400):
        op = rnd.random()
        g = c.group()
        gen = g.generation if g is not None else 0
        states.add(g.state if g is not None else None)
        v = rnd.choice([0, 3, 4, 5, 7, 9])
        if op < 0.12:
            inst = "i%d" % rnd.randrange(3) if v >= 5 and rnd.random() < 0.3 else None
            r = c.send(jreq(instance=inst, protos=rnd.choice(
                [(("range", b"1"),), (("range", b"2"), ("rr", b"2"))])), v)
            if not isinstance(r, Parked) and r.error_code == E.MEMBER_ID_REQUIRED \
                    and rnd.random() < 0.8:
                r = c.send(jreq(member=r.member_id), v)
            mid = r.key.member_id if isinstance(r, Parked) else r.member_id
            if mid:
                instances[mid] = inst
        elif op < 0.3:
            mid = pick()
            inst = instances.get(mid)
            c.send(jreq(member=mid, instance=inst, protos=rnd.choice(
                [(("range", b"1"),), (("range", b"1"),), (("range", b"3"),)])),
                max(v, 5) if inst else v)
        elif op < 0.5:
            mid = pick()
            asg = {x: b"p" for x in g.members} if g is not None and rnd.random() < 0.9 else {}
            c.send(sreq(mid, gen, asg), rnd.choice([0, 3, 5]))
        elif op < 0.8:
            for mid in ([pick()] if rnd.random() < 0.3 else list(g.members) if g else []):
                hb(c, mid, gen if rnd.random() < 0.95 else 99)
        elif op < 0.83:
            c.send(m.LeaveGroupRequest(group_id="g", member_id=pick()), 1)
        else:
            c.advance(rnd.choice([100, 500, 1_000, 2_000, 12_000]))
    c.advance(10 * REBALANCE)
    assert c.h.waiting == {}
    assert {"PreparingRebalance", "CompletingRebalance"} <= states
