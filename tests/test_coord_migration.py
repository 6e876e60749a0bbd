"""Online migration between classic and consumer groups (groups/migration.py).

Every step is checked by the harness for handler purity and for no partition held by two
members; every test ends with a replay-equality check (fresh shard from the log bytes).
"""
from coord_harness import Parked

from groupcoord.groups.classic.group import ClassicGroup
from groupcoord.groups.config import ShardConfig
from groupcoord.groups.consumer.group import ConsumerGroup
from groupcoord.groups.modern.reconcile import STABLE, UNRELEASED
from groupcoord.groups.topics import TopicCatalog
from groupcoord.protocol import embedded
from groupcoord.protocol import messages as m
from groupcoord.protocol.error_codes import ErrorCode as E

TOPICS = TopicCatalog.of(foo=6, bar=3)
DELAY = 3_000
SESSION = 10_000
REBALANCE = 30_000


# ---------------------------------------------------------------------- helpers
def make(coord, **cfg):
    # Assignment batching off: a target per epoch bump (tests/test_coord_consumer.py).
    return coord(config=ShardConfig(**{"consumer_assignment_interval_ms": 0, **cfg}),
                 topics=TOPICS)


def sub_bytes(topics, owned=None):
    return embedded.encode_subscription(m.ConsumerProtocolSubscription(
        topics=list(topics), owned_partitions=[
            m.ConsumerProtocolSubscriptionTopicPartition(topic=t, partitions=ps)
            for t, ps in sorted((owned or {}).items())]), 1)


def assignment_bytes(parts):
    return embedded.encode_assignment(m.ConsumerProtocolAssignment(assigned_partitions=[
        m.ConsumerProtocolAssignmentTopicPartition(topic=t, partitions=ps)
        for t, ps in sorted(parts.items())]), 1)


def decoded(data):
    a = embedded.decode_assignment(data)[1]
    return {tp.topic: sorted(tp.partitions) for tp in a.assigned_partitions if tp.partitions}


def jreq(member="", topics=("foo",), ptype="consumer", protos=None, owned=None,
         session=SESSION, instance=None):
    protos = protos or [("range", sub_bytes(topics, owned))]
    return m.JoinGroupRequest(group_id="g", session_timeout_ms=session,
                              rebalance_timeout_ms=REBALANCE, member_id=member,
                              group_instance_id=instance, protocol_type=ptype,
                              protocols=[m.JoinGroupRequestProtocol(name=n, metadata=md)
                                         for n, md in protos])


def sreq(member, gen, assignments=None):
    return m.SyncGroupRequest(group_id="g", generation_id=gen, member_id=member,
                              assignments=[m.SyncGroupRequestAssignment(member_id=k,
                                                                        assignment=a)
                                           for k, a in (assignments or {}).items()])


def settle(h, parks):
    for _ in range(10):
        if all(h.answered(p) for p in parks):
            return
        h.advance(DELAY)
    raise AssertionError("classic barrier never completed")


def classic_group(h, plan, ptype="consumer", v=3):
    """Classic members join (JoinGroup v3: the coordinator names them) and the leader syncs
    ``plan``'s assignments in join order. plan: [(topics, {topic: partitions})].
    -> ([member ids], generation)."""
    parks = [h.send(jreq(topics=t, ptype=ptype), v) for t, _ in plan]
    settle(h, parks)
    resps = [h.completion(p) for p in parks]
    ids = [r.member_id for r in resps]
    gen = resps[0].generation_id
    leader = resps[0].leader
    blobs = {mid: assignment_bytes(a) for mid, (_, a) in zip(ids, plan)}
    follower_parks = [h.send(sreq(mid, gen), v) for mid in ids if mid != leader]
    assert h.send(sreq(leader, gen, blobs), v).error_code == 0
    assert all(h.completion(p).error_code == 0 for p in follower_parks)
    assert group(h).state_name() == "Stable"
    return ids, gen


def group(h):
    return h.shard.groups["g"]


def units(h, us):
    g = group(h)
    out = {}
    for tid, p in g.external(us):
        out.setdefault(h.shard.topics.by_id[tid].name, []).append(p)
    return out


def current(h, mid):
    a = group(h).members[mid].a
    return a.epoch, a.state, units(h, a.assigned), units(h, a.pending_revocation)


def target(h, mid):
    return units(h, group(h).targets.get(mid, ()))


def step_records(h):
    out = []
    for r in h.results[-1].records:
        if not hasattr(r, "type"):
            continue
        out.append((r.type.name, getattr(r.key, "member_id", ""), r.value is None))
    return out


def chb(h, mid, epoch=0, owned=None, topics=("foo",)):
    """A ConsumerGroupHeartbeat (v1, client-chosen member id)."""
    if epoch == 0:
        req = m.ConsumerGroupHeartbeatRequest(
            group_id="g", member_id=mid, member_epoch=0, rebalance_timeout_ms=REBALANCE,
            subscribed_topic_names=list(topics), topic_partitions=[])
    else:
        req = m.ConsumerGroupHeartbeatRequest(
            group_id="g", member_id=mid, member_epoch=epoch, topic_partitions=[
                m.ConsumerGroupHeartbeatRequestTopicPartitions(
                    topic_id=h.shard.topics.get(t).topic_id, partitions=ps)
                for t, ps in sorted((owned or {}).items())])
    return h.send(req, 1)


def commit(h, mid, gen, offset=42):
    return h.send(m.OffsetCommitRequest(
        group_id="g", generation_id_or_member_epoch=gen, member_id=mid, topics=[
            m.OffsetCommitRequestTopic(name="foo", partitions=[
                m.OffsetCommitRequestPartition(partition_index=0, committed_offset=offset)])]),
        8)


# ---------------------------------------------------------------------- 1. upgrade
def test_upgrade_converts_a_classic_consumer_group(coord):
    h = make(coord)
    (a, b), gen = classic_group(h, [(["foo"], {"foo": [0, 1, 2]}),
                                    (["foo", "bar"], {"foo": [3, 4, 5], "bar": [0, 1, 2]})])
    assert commit(h, a, gen).topics[0].partitions[0].error_code == 0
    resp = chb(h, "c")
    assert resp.error_code == 0, resp.error_message
    g = group(h)
    assert isinstance(g, ConsumerGroup)
    # The conversion's records come first, in order; then the join's.
    recs = step_records(h)
    assert recs[:9] == [
        ("GROUP_METADATA", "", True),
        ("CONSUMER_GROUP_MEMBER_METADATA", a, False),
        ("CONSUMER_GROUP_MEMBER_METADATA", b, False),
        ("CONSUMER_GROUP_METADATA", "", False),
        ("CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER", a, False),
        ("CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER", b, False),
        ("CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA", "", False),
        ("CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT", a, False),
        ("CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT", b, False)]
    conv_epoch = h.results[-1].records[3].value.epoch
    assert conv_epoch == gen
    # The join: one epoch bump past the generation, a new target.
    assert g.epoch == g.target_epoch == gen + 1 and resp.member_epoch == gen + 1
    meta_b = g.members[b].meta
    assert meta_b.subscribed_topic_names == ["bar", "foo"]
    assert meta_b.classic_member_metadata.session_timeout_ms == SESSION
    assert [p.name for p in meta_b.classic_member_metadata.supported_protocols] == ["range"]
    assert meta_b.rebalance_timeout_ms == REBALANCE
    # The classic members still hold their classic assignment at the generation; the new
    # member waits for what they must give up (UNRELEASED, nothing yet).
    assert current(h, a) == (gen, STABLE, {"foo": [0, 1, 2]}, {})
    assert current(h, b) == (gen, STABLE, {"foo": [3, 4, 5], "bar": [0, 1, 2]}, {})
    assert current(h, "c")[1] == UNRELEASED and current(h, "c")[2] == {}
    assert target(h, "c") and resp.assignment.topic_partitions == []
    # Offsets stay; classic timers are gone, consumer sessions run on the classic timeouts.
    assert h.shard.offsets["g"][("foo", 0)].offset == 42
    timers = dict(h.shard.timers.items())
    assert not [k for k in timers if k.kind.startswith("classic-")]
    assert timers[("consumer-session", "g", a)] == h.now + SESSION
    assert h.shard.snapshot()["groups"]["g"][0] == "consumer"
    # ConsumerGroupDescribe v1 tells the classic members (type 0) from the new one (type 1).
    d = h.send(m.ConsumerGroupDescribeRequest(group_ids=["g"]), 1).groups[0]
    assert {x.member_id: x.member_type for x in d.members} == {a: 0, b: 0, "c": 1}


def test_upgrade_of_an_empty_classic_group_replaces_it(coord):
    h = make(coord)
    (a,), gen = classic_group(h, [(["foo"], {"foo": [0]})])
    assert commit(h, a, gen).topics[0].partitions[0].error_code == 0
    assert h.send(m.LeaveGroupRequest(group_id="g", member_id=a), 1).error_code == 0
    h.advance(REBALANCE)
    assert group(h).state_name() == "Empty"
    resp = chb(h, "c")
    assert resp.error_code == 0 and resp.member_epoch == 1
    assert step_records(h)[0] == ("GROUP_METADATA", "", True)
    assert isinstance(group(h), ConsumerGroup) and list(group(h).members) == ["c"]
    assert units(h, group(h).members["c"].a.assigned) == {"foo": [0, 1, 2, 3, 4, 5]}
    assert h.shard.offsets["g"][("foo", 0)].offset == 42


def test_empty_classic_group_of_any_protocol_type_is_replaced(coord):
    h = make(coord)
    (a,), _ = classic_group(h, [(["foo"], {})], ptype="connect")
    h.send(m.LeaveGroupRequest(group_id="g", member_id=a), 1)
    assert chb(h, "c").error_code == 0
    assert isinstance(group(h), ConsumerGroup)


def test_non_consumer_protocol_type_is_not_upgraded(coord):
    h = make(coord)
    classic_group(h, [(["foo"], {})], ptype="sr")
    before = h.shard.snapshot(durable=False)
    resp = chb(h, "c")
    assert resp.error_code == E.GROUP_ID_NOT_FOUND
    assert "protocol type" in resp.error_message
    assert isinstance(group(h), ClassicGroup) and h.shard.snapshot(durable=False) == before


def test_only_a_joining_heartbeat_upgrades(coord):
    h = make(coord)
    classic_group(h, [(["foo"], {})])
    resp = chb(h, "c", epoch=3)
    assert resp.error_code == E.GROUP_ID_NOT_FOUND
    assert isinstance(group(h), ClassicGroup)


def test_upgrade_refused_when_a_subscription_is_not_the_consumer_protocol(coord):
    h = make(coord)
    parks = [h.send(jreq(protos=[("range", b"\x00")]), 3)]
    settle(h, parks)
    resp = chb(h, "c")
    assert resp.error_code == E.GROUP_ID_NOT_FOUND and "valid consumer protocol" in \
        resp.error_message
    assert isinstance(group(h), ClassicGroup)


def test_upgrade_refused_when_the_group_is_full(coord):
    h = make(coord, consumer_max_size=2)
    classic_group(h, [(["foo"], {}), (["foo"], {})])
    assert chb(h, "c").error_code == E.GROUP_MAX_SIZE_REACHED
    assert isinstance(group(h), ClassicGroup)


def test_upgrade_during_a_classic_rebalance_answers_parked_requests(coord):
    h = make(coord)
    (a, b), gen = classic_group(h, [(["foo"], {"foo": [0, 1, 2]}),
                                    (["foo"], {"foo": [3, 4, 5]})])
    park = h.send(jreq(member=a), 3)         # a rejoins: PreparingRebalance, a parked
    assert isinstance(park, Parked) and group(h).state_name() == "PreparingRebalance"
    assert chb(h, "c").error_code == 0
    assert h.completion(park).error_code == E.REBALANCE_IN_PROGRESS
    assert current(h, b) == (gen, STABLE, {"foo": [3, 4, 5]}, {})


def test_upgrade_drops_a_partition_assigned_twice_and_unknown_topics(coord):
    h = make(coord)
    (a, b), gen = classic_group(h, [(["foo"], {"foo": [0, 1], "nope": [0]}),
                                    (["foo"], {"foo": [1, 2, 99]})])
    assert chb(h, "c").error_code == 0
    assert current(h, a)[2] == {"foo": [0, 1]}
    assert current(h, b)[2] == {"foo": [2]}


# ---------------------------------------------------------------------- 2. classic members
class ClassicClient:
    """A cooperative classic consumer: reports what it owns in its subscription."""

    def __init__(self, h, mid, gen, owned, topics=("foo",), v=7):
        self.h, self.mid, self.gen, self.v = h, mid, gen, v
        self.owned = {t: list(ps) for t, ps in owned.items()}
        self.topics = list(topics)

    def join(self, **kw):
        r = self.h.send(jreq(member=self.mid, topics=self.topics, owned=self.owned, **kw),
                        self.v)
        if r.error_code == 0:
            self.mid, self.gen = r.member_id, r.generation_id
        return r

    def sync(self):
        r = self.h.send(sreq(self.mid, self.gen), self.v)
        if r.error_code == 0:
            self.owned = decoded(r.assignment)
        return r

    def hb(self):
        return self.h.send(m.HeartbeatRequest(group_id="g", generation_id=self.gen,
                                              member_id=self.mid), 4).error_code

    def rebalance(self):
        """Join + sync; -> the heartbeat's code afterwards."""
        assert self.join().error_code == 0
        assert self.sync().error_code == 0
        return self.hb()


def upgraded(coord, **cfg):
    """Classic a (foo 0-2) and b (foo 3-5) at generation 1, upgraded by consumer member c."""
    h = make(coord, **cfg)
    (a, b), gen = classic_group(h, [(["foo"], {"foo": [0, 1, 2]}),
                                    (["foo"], {"foo": [3, 4, 5]})])
    assert chb(h, "c").error_code == 0
    return h, ClassicClient(h, a, gen, {"foo": [0, 1, 2]}), \
        ClassicClient(h, b, gen, {"foo": [3, 4, 5]})


def c_owned(h):
    return units(h, group(h).members["c"].a.assigned)


def test_classic_members_reconcile_through_join_sync_heartbeat(coord):
    h, a, b = upgraded(coord)
    g = group(h)
    gen = a.gen
    assert g.epoch == gen + 1
    # Their epoch is behind the group's: rejoin.
    assert a.hb() == E.REBALANCE_IN_PROGRESS and b.hb() == E.REBALANCE_IN_PROGRESS
    # a must revoke one partition first: the join keeps its epoch, sync gives what it keeps.
    r = a.join()
    assert (r.generation_id, r.leader, r.members, r.protocol_name, r.protocol_type) == \
        (gen, a.mid, [], "range", "consumer")
    assert current(h, a.mid)[1] != STABLE and current(h, a.mid)[3]       # pending revocation
    assert a.sync().error_code == 0 and len(a.owned["foo"]) == 2
    assert a.hb() == E.REBALANCE_IN_PROGRESS                 # still revoking
    # Rejoining with the smaller owned set acknowledges the revocation: new epoch.
    assert a.rebalance() == E.NONE and a.gen == gen + 1
    assert b.rebalance() == E.REBALANCE_IN_PROGRESS and b.rebalance() == E.NONE
    assert current(h, a.mid)[:2] == (gen + 1, STABLE)
    # The consumer member gets the released partitions.
    r = chb(h, "c", epoch=gen + 1, owned={})
    assert r.error_code == 0
    got = {"foo": sorted(a.owned["foo"] + b.owned["foo"] + c_owned(h)["foo"])}
    assert got == {"foo": [0, 1, 2, 3, 4, 5]} and len(c_owned(h)["foo"]) == 2
    assert group(h).state_name() == "Stable"


def test_sync_encodes_the_assignment_in_the_subscription_version(coord):
    h, a, _ = upgraded(coord)
    a.join()
    r = a.sync()
    assert int.from_bytes(r.assignment[:2], "big") == 1                # jreq subscribes at v1
    assert (r.protocol_type, r.protocol_name) == ("consumer", "range")


def test_classic_member_request_errors(coord):
    h, a, b = upgraded(coord)
    hbreq = m.HeartbeatRequest(group_id="g", generation_id=a.gen, member_id="zz")
    assert h.send(hbreq, 4).error_code == E.UNKNOWN_MEMBER_ID
    # A member using the consumer protocol is unknown to the classic APIs.
    assert h.send(m.HeartbeatRequest(group_id="g", generation_id=2, member_id="c"),
                  4).error_code == E.UNKNOWN_MEMBER_ID
    assert h.send(m.HeartbeatRequest(group_id="g", generation_id=a.gen + 5,
                                     member_id=a.mid), 4).error_code == E.ILLEGAL_GENERATION
    assert h.send(sreq(a.mid, a.gen + 5), 5).error_code == E.ILLEGAL_GENERATION
    bad = m.SyncGroupRequest(group_id="g", generation_id=a.gen, member_id=a.mid,
                             protocol_type="consumer", protocol_name="roundrobin")
    assert h.send(bad, 5).error_code == E.INCONSISTENT_GROUP_PROTOCOL
    assert h.send(jreq(member=a.mid, ptype="sr"), 7).error_code == \
        E.INCONSISTENT_GROUP_PROTOCOL
    assert h.send(jreq(member=a.mid, protos=[("range", b"\x00")]), 7).error_code == \
        E.INCONSISTENT_GROUP_PROTOCOL
    assert h.send(jreq(member="c"), 7).error_code == E.UNKNOWN_MEMBER_ID
    assert h.send(jreq(member=a.mid, session=1), 7).error_code == E.INVALID_SESSION_TIMEOUT
    r = h.send(m.LeaveGroupRequest(group_id="g", members=[
        m.LeaveGroupRequestMemberIdentity(member_id="c")]), 3)
    assert r.members[0].error_code == E.UNKNOWN_MEMBER_ID and "c" in group(h).members


def test_classic_leave_removes_the_member_and_bumps_the_epoch(coord):
    h, a, b = upgraded(coord)
    epoch = group(h).epoch
    assert h.send(m.LeaveGroupRequest(group_id="g", member_id=a.mid), 1).error_code == 0
    assert a.mid not in group(h).members and group(h).epoch == epoch + 1
    assert h.send(m.LeaveGroupRequest(group_id="g", member_id=a.mid), 1).error_code == \
        E.UNKNOWN_MEMBER_ID


def test_new_classic_member_joins_a_consumer_group(coord):
    h = make(coord)
    assert chb(h, "c").error_code == 0
    assert c_owned(h) == {"foo": [0, 1, 2, 3, 4, 5]}
    r = h.send(jreq(), 3)
    assert r.error_code == 0 and r.member_id and r.generation_id == 2
    d = ClassicClient(h, r.member_id, r.generation_id, {})
    meta = group(h).members[d.mid].meta
    assert meta.classic_member_metadata.session_timeout_ms == SESSION
    # c must release half first: d waits (empty assignment, rejoin requested).
    assert d.sync().error_code == 0 and d.owned == {}
    assert d.hb() == E.REBALANCE_IN_PROGRESS
    r = chb(h, "c", epoch=1, owned={"foo": [0, 1, 2, 3, 4, 5]})
    kept = {tp.topic_id: tp.partitions for tp in r.assignment.topic_partitions}
    assert len(sum(kept.values(), [])) == 3
    chb(h, "c", epoch=1, owned={"foo": sum(kept.values(), [])})
    assert d.rebalance() == E.NONE and len(d.owned["foo"]) == 3


def test_static_classic_member_rejoining_with_a_new_id_takes_its_place(coord):
    h = make(coord)
    assert chb(h, "c").error_code == 0
    r1 = h.send(jreq(instance="i1"), 5)
    assert r1.error_code == 0 and r1.member_id.startswith("i1-")
    epoch = group(h).epoch
    r2 = h.send(jreq(instance="i1"), 5)          # same millisecond: still a new id
    assert r2.error_code == 0 and r2.member_id != r1.member_id
    assert r1.member_id not in group(h).members and group(h).static["i1"] == r2.member_id
    assert group(h).epoch == epoch                      # same subscription: no rebalance
    assert h.send(jreq(member=r1.member_id, instance="i1"), 5).error_code == \
        E.UNKNOWN_MEMBER_ID


def test_classic_member_session_expires_on_its_classic_timeout(coord):
    h, a, b = upgraded(coord)
    h.advance(SESSION - 1)
    assert chb(h, "c", epoch=group(h).members["c"].a.epoch, owned={}).error_code == 0
    assert a.mid in group(h).members
    h.advance(1)
    assert a.mid not in group(h).members and b.mid not in group(h).members
    assert "c" in group(h).members


def test_classic_member_commits_offsets_with_its_generation(coord):
    h, a, _ = upgraded(coord)
    assert commit(h, a.mid, a.gen).topics[0].partitions[0].error_code == 0
    assert commit(h, a.mid, a.gen + 1).topics[0].partitions[0].error_code == \
        E.ILLEGAL_GENERATION


# ---------------------------------------------------------------------- 3. downgrade
def rejoin_both(h, a, b):
    """a and b rejoin the (classic) barrier: the second join completes it."""
    pa = h.send(jreq(member=a.mid, owned=a.owned), 5)
    assert isinstance(pa, Parked)
    rb = h.send(jreq(member=b.mid, owned=b.owned), 5)
    return h.completion(pa), rb


def leave_c(h):
    return h.send(m.ConsumerGroupHeartbeatRequest(group_id="g", member_id="c",
                                                  member_epoch=-1), 1)


def test_last_consumer_member_leaving_downgrades_to_classic(coord):
    h, a, b = upgraded(coord)
    assert a.rebalance() == E.REBALANCE_IN_PROGRESS      # a revoked one partition
    epoch = group(h).epoch
    assert leave_c(h).error_code == 0
    g = group(h)
    assert isinstance(g, ClassicGroup)
    assert g.state_name() == "PreparingRebalance" and g.generation == epoch + 1
    assert g.protocol_type() == "consumer" and g.protocol == "range" and g.leader == a.mid
    recs = step_records(h)
    assert recs[-4:] == [("CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA", "", True),
                         ("CONSUMER_GROUP_PARTITION_METADATA", "", True),
                         ("CONSUMER_GROUP_METADATA", "", True),
                         ("GROUP_METADATA", "", False)]
    for mid in (a.mid, b.mid, "c"):
        assert ("CONSUMER_GROUP_MEMBER_METADATA", mid, True) in recs
    # Current assignments travel as ConsumerProtocolAssignment, subscriptions as they were.
    assert decoded(g.members[a.mid].assignment) == a.owned
    assert decoded(g.members[b.mid].assignment) == {"foo": [3, 4, 5]}
    assert embedded.decode_subscription(g.members[a.mid].metadata("range"))[1].topics == \
        ["foo"]
    timers = dict(h.shard.timers.items())
    assert not [k for k in timers if k.kind.startswith("consumer-")]
    assert timers[("classic-join", "g", "")] == h.now + REBALANCE
    # The members rejoin as a plain classic group and complete a generation.
    assert a.hb() == E.ILLEGAL_GENERATION
    ra, rb = rejoin_both(h, a, b)
    assert ra.error_code == rb.error_code == 0 and ra.generation_id == epoch + 2
    assert ra.leader == a.mid and len(ra.members) == 2


def test_consumer_member_session_expiry_downgrades(coord):
    h, a, b = upgraded(coord)
    for _ in range(10):
        h.advance(SESSION // 2)
        a.hb()
        b.hb()
    assert isinstance(group(h), ClassicGroup)
    assert set(group(h).members) == {a.mid, b.mid}


def test_no_downgrade_while_a_consumer_member_remains_or_without_common_protocol(coord):
    h, a, b = upgraded(coord)
    assert h.send(m.LeaveGroupRequest(group_id="g", member_id=a.mid), 1).error_code == 0
    assert isinstance(group(h), ConsumerGroup)
    # b now speaks only "roundrobin", a newcomer only "range": no common protocol.
    r = h.send(jreq(), 3)
    assert r.error_code == 0
    assert b.join(protos=[("roundrobin", sub_bytes(["foo"], b.owned))]).error_code == 0
    assert leave_c(h).error_code == 0
    assert isinstance(group(h), ConsumerGroup) and "c" not in group(h).members


def test_upgrade_downgrade_upgrade_round_trip(coord):
    h, a, b = upgraded(coord)
    assert leave_c(h).error_code == 0
    gen = group(h).generation
    ra, rb = rejoin_both(h, a, b)
    assert ra.generation_id == gen + 1
    a.gen = b.gen = gen + 1
    a.h.send(sreq(b.mid, gen + 1), 5)
    assert h.send(sreq(a.mid, gen + 1, {a.mid: assignment_bytes({"foo": [0, 1, 2]}),
                                        b.mid: assignment_bytes({"foo": [3, 4, 5]})}),
                  5).error_code == 0
    assert group(h).state_name() == "Stable"
    assert chb(h, "d").error_code == 0
    g = group(h)
    assert isinstance(g, ConsumerGroup) and g.epoch == gen + 2
    assert current(h, a.mid)[:3] == (gen + 1, STABLE, {"foo": [0, 1, 2]})
