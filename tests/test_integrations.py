"""groupcoord.integrations without a server: the numpy API (assign / diff / validate, what it
copies), the wire formats of each protocol name checked byte for byte against the format
Kafka documents and against kafka-python's and aiokafka's own parsers and assignors, and the
leader step driven through JoinGroup/SyncGroup rounds with real client encoding (safety of
cooperative rounds, convergence, mixed groups). docs/embedding.md."""
import logging
import random
import struct
from collections import namedtuple

import numpy as np
import pytest
from aiokafka.coordinator.assignors.range import RangePartitionAssignor as ARange
from aiokafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor as ARoundRobin
from aiokafka.coordinator.assignors.sticky.sticky_assignor import \
    StickyAssignorUserDataV1 as AStickyUserData
from aiokafka.coordinator.assignors.sticky.sticky_assignor import \
    StickyPartitionAssignor as ASticky
from aiokafka.coordinator.protocol import (ConsumerProtocolMemberAssignment,
                                           ConsumerProtocolMemberMetadata)
from kafka.coordinator.assignors.abstract import RebalanceProtocol
from kafka.coordinator.assignors.cooperative_sticky import \
    CooperativeStickyAssignor as KCooperativeSticky
from kafka.coordinator.assignors.range import RangePartitionAssignor as KRange
from kafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor as KRoundRobin
from kafka.coordinator.assignors.sticky.sticky_assignor import \
    StickyAssignmentExecutor as KExecutor
from kafka.coordinator.assignors.sticky.sticky_assignor import \
    StickyPartitionAssignor as KSticky
from kafka.coordinator.assignors.sticky.user_data import StickyAssignorUserData as KUserData
from kafka.protocol.consumer.metadata import ConsumerProtocolAssignment as KAssignment
from kafka.protocol.consumer.metadata import ConsumerProtocolSubscription as KSubscription
from kafka.structs import TopicPartition as KTP

from groupcoord import integrations as gi
from groupcoord.assign import classic, consumer, kernels
from groupcoord.integrations import aiokafka as A
from groupcoord.integrations import kafka_python as K
from groupcoord.integrations import protocols as P

KMember = namedtuple("KMember", "member_id group_instance_id metadata")


@pytest.fixture(autouse=True)
def _quiet_client_logs():
    # kafka-python's sticky executor logs a warning per conflicting claim
    logging.disable(logging.WARNING)
    yield
    logging.disable(logging.NOTSET)


class Cluster:
    """The two methods the assignors use of kafka-python's / aiokafka's ClusterMetadata."""

    def __init__(self, parts):
        self.parts = dict(parts)

    def topics(self, exclude_internal_topics=True):
        return list(self.parts)

    def partitions_for_topic(self, topic):
        p = self.parts.get(topic)
        if p is None:
            return None
        return set(range(p)) if isinstance(p, int) else set(p)


def kassign(runs, generation_epoch=None, version=0):
    """A SyncGroup assignment as kafka-python decodes it off the wire."""
    ud = b"" if generation_epoch is None else struct.pack(">i", generation_epoch)
    return KAssignment.decode(KAssignment(version, [(t, list(p)) for t, p in runs], ud).encode())


def _rng_subs(rng, n_members, n_topics, homogeneous=False):
    if homogeneous:
        return [list(range(n_topics))] * n_members
    return [sorted(rng.sample(range(n_topics), rng.randint(0, n_topics)))
            for _ in range(n_members)]


# ============================================================================ numpy API

def test_the_module_docstring_example():
    subs = [[0, 1], [0, 1], [1]]
    a = gi.assign("sticky", [4, 2], subs)
    assert gi.validate(a.owner, 3, partitions_per_topic=[4, 2], subscriptions=subs).ok
    # the most balanced: worker 2 can only take pool 1's two units
    assert sorted(np.bincount(a.owner, minlength=3).tolist()) == [2, 2, 2]
    assert set(a.owner[4:].tolist()) <= {0, 1, 2} and set(a.owner[:4].tolist()) <= {0, 1}


@pytest.mark.parametrize("seed", range(6))
def test_each_strategy_is_its_kernel(seed):
    rng = random.Random(seed)
    T, M = rng.randint(1, 6), rng.randint(1, 7)
    ppt = np.array([rng.randint(0, 9) for _ in range(T)], np.int32)
    sip, subs = gi.csr(_rng_subs(rng, M, T, homogeneous=seed % 2 == 0))
    n = int(ppt.sum())
    current = np.array([rng.randint(-1, M) for _ in range(n)], np.int32)   # M: departed
    assert np.array_equal(gi.assign("range", ppt, (sip, subs)).owner,
                          classic.range_assign(ppt, sip, subs))
    assert np.array_equal(gi.assign("roundrobin", ppt, (sip, subs)).owner,
                          classic.roundrobin(ppt, sip, subs))
    assert np.array_equal(gi.assign("uniform", ppt, (sip, subs), current).owner,
                          consumer.uniform(ppt, sip, subs, current))
    oip, owned = kernels.members_csr(np.where(current < M, current, -1), M)
    gen = np.zeros(M, np.int32)
    assert np.array_equal(gi.assign("sticky", ppt, (sip, subs), current).owner,
                          classic.sticky_assign(ppt, sip, subs, oip, owned, gen))
    want = classic.cooperative_sticky(ppt, sip, subs, oip, owned, gen)
    got = gi.assign("cooperative-sticky", ppt, (sip, subs), current)
    assert np.array_equal(got.owner, want.target_owner)
    assert np.array_equal(got.final, want.final_owner)
    # lists and CSR are the same input
    lists = [subs[sip[m]:sip[m + 1]].tolist() for m in range(M)]
    assert np.array_equal(gi.assign("sticky", ppt, lists, current).owner,
                          gi.assign("sticky", ppt, (sip, subs), current).owner)


def test_cooperative_sticky_withholds_then_converges():
    ppt = [6, 6]
    subs = [[0, 1]] * 3
    first = gi.assign("cooperative-sticky", ppt, subs)
    assert first.final is not first.owner and first.withheld.size == 0
    # a fourth member joins: what it gets is withheld while its owners release it
    subs4 = subs + [[0, 1]]
    second = gi.assign("cooperative-sticky", ppt, subs4, first.owner)
    assert second.withheld.size == 3                          # 12 units: 3 each
    assert np.all(first.owner[second.withheld] != 3)
    for u in second.withheld:                                 # given to the newcomer next
        assert second.final[u] == 3
    released = second.owner                                   # owners dropped them
    third = gi.assign("cooperative-sticky", ppt, subs4, released)
    assert third.withheld.size == 0
    assert np.array_equal(third.owner, second.final)
    assert np.bincount(third.owner).tolist() == [3, 3, 3, 3]


def test_departed_owners_count_as_nobody():
    ppt, subs = [4], [[0], [0]]
    cur = np.array([0, 5, 1, -7], np.int32)          # members 5 and -7 do not exist
    a = gi.assign("sticky", ppt, subs, cur)
    assert a.owner[0] == 0 and a.owner[2] == 1
    assert sorted(np.bincount(a.owner).tolist()) == [2, 2]


def test_unknown_strategy_and_bad_subscriptions():
    with pytest.raises(ValueError, match="unknown strategy"):
        gi.assign("fastest", [1], [[0]])
    with pytest.raises(ValueError, match="tuple"):
        gi.assign("range", [1], (np.array([0, 1]),))


def _brute_check(owner, n_members, ppt, subs_lists, required):
    topic = np.repeat(np.arange(len(ppt)), ppt)
    un, nm, ns = [], [], []
    for u, o in enumerate(owner):
        if o == -1:
            if required is None or required[u]:
                un.append(u)
        elif not 0 <= o < n_members:
            nm.append(u)
        elif topic[u] not in subs_lists[o]:
            ns.append(u)
    return un, nm, ns


@pytest.mark.parametrize("seed", range(8))
def test_validate_finds_exactly_the_bad_units(seed):
    rng = random.Random(100 + seed)
    T, M = rng.randint(1, 5), rng.randint(1, 6)
    ppt = [rng.randint(0, 7) for _ in range(T)]
    subs_lists = _rng_subs(rng, M, T)
    n = sum(ppt)
    owner = np.array([rng.randint(-3, M + 2) for _ in range(n)], np.int64)
    required = None if seed % 2 else np.array([rng.random() < 0.5 for _ in range(n)])
    c = gi.validate(owner, M, partitions_per_topic=ppt, subscriptions=subs_lists,
                    required=required)
    un, nm, ns = _brute_check(owner.tolist(), M, ppt, subs_lists, required)
    assert c.unassigned.tolist() == un
    assert c.not_member.tolist() == nm
    assert c.not_subscribed.tolist() == ns
    assert c.ok == (not un and not nm and not ns)
    valid = owner[(owner >= 0) & (owner < M)]
    assert c.counts.tolist() == np.bincount(valid, minlength=M).tolist()
    assert c.spread == (max(c.counts) - min(c.counts) if M else 0)


def test_validate_without_subscriptions_and_its_errors():
    c = gi.validate(np.array([0, 1, -1, 2], np.int32), 2)
    assert c.unassigned.tolist() == [2] and c.not_member.tolist() == [3]
    assert c.not_subscribed.size == 0 and not c.ok
    with pytest.raises(ValueError, match="partitions_per_topic"):
        gi.validate([0], 1, subscriptions=[[0]])
    with pytest.raises(ValueError, match="sums to"):
        gi.validate([0, 0], 1, partitions_per_topic=[3], subscriptions=[[0]])
    with pytest.raises(ValueError, match="one-dimensional"):
        gi.validate(np.zeros((2, 2), np.int32), 1)


def test_diff_is_the_kernel_and_keeps_a_reference():
    cur = np.array([0, 0, 1, 1, -1], np.int32)
    tgt = np.array([0, 1, 1, 0, 1], np.int32)
    d = gi.diff(cur, tgt, 2)
    assert d.revoke(0).tolist() == [1] and d.revoke(1).tolist() == [3]
    assert d.assign(0).tolist() == [3] and d.assign(1).tolist() == [1, 4]
    assert d.kept.tolist() == [1, 1]
    assert d.current is cur                             # int32 contiguous: not copied
    d64 = gi.diff(cur.astype(np.int64), tgt, 2)         # other dtypes are converted
    assert d64.current is not cur and not np.shares_memory(d64.current, cur)


@pytest.mark.parametrize("strategy", gi.STRATEGIES)
def test_assign_copies_nothing_it_returns_and_writes_no_input(strategy):
    ppt = np.array([5, 3], np.int32)
    sip = np.array([0, 2, 4, 5], np.int64)
    subs = np.array([0, 1, 0, 1, 1], np.int32)
    cur = np.array([0, 0, 1, 1, 2, 2, -1, 9], np.int32)
    before = [x.copy() for x in (ppt, sip, subs, cur)]
    a = gi.assign(strategy, ppt, (sip, subs), cur)
    for x, b in zip((ppt, sip, subs, cur), before):
        assert np.array_equal(x, b)
        assert not np.shares_memory(a.owner, x) and not np.shares_memory(a.final, x)
    assert a.owner.dtype == np.int32
    assert (a.final is a.owner) == (strategy != "cooperative-sticky")


def test_validate_reads_in_place_and_csr_builds_new():
    owner = np.array([0, 1, 0], np.int32)
    c = gi.validate(owner, 2)
    assert all(not np.shares_memory(x, owner) for x in c[:4])
    sip, vals = gi.csr([[3, 1], [], [2]])
    assert sip.tolist() == [0, 2, 2, 3] and vals.tolist() == [3, 1, 2]
    assert sip.dtype == np.int64 and vals.dtype == np.int32


# ============================================================================ wire formats

def _kafka_documented_sticky_user_data(runs, generation) -> bytes:
    """StickyAssignorUserData v1 as Kafka's schema defines it (non-flexible): array of
    (string Topic, array of int32 Partitions), then int32 Generation; big-endian."""
    out = struct.pack(">i", len(runs))
    for topic, parts in runs:
        raw = topic.encode()
        out += struct.pack(">h", len(raw)) + raw + struct.pack(">i", len(parts))
        out += b"".join(struct.pack(">i", p) for p in parts)
    return out + struct.pack(">i", generation)


RUNS = [("orders", [0, 3, 7]), ("payments", [2]), ("ünïcode", [1, 5])]


def test_sticky_user_data_is_kafkas_documented_v1():
    ud = P.encode_user_data(RUNS, 42)
    assert ud == _kafka_documented_sticky_user_data(RUNS, 42)
    # kafka-python's own parser, and aiokafka's
    k = KUserData.decode(ud, version=1, header=False)
    assert [(t, list(p)) for t, p in k.previous_assignment] == RUNS and k.generation == 42
    a = AStickyUserData.decode(ud)
    assert [(t, list(p)) for t, p in a.previous_assignment] == RUNS and a.generation == 42
    # and back: v1 with generation, v0 (no generation) reads as -1
    assert P.decode_user_data(ud) == (RUNS, 42, None)
    v0 = _kafka_documented_sticky_user_data(RUNS, 0)[:-4]
    assert P.decode_user_data(v0) == (RUNS, -1, None)
    for junk in (b"\x00", b"\xff\xff\xff\xff\x00", b"\x00\x00\x00\x05\x00"):
        assert P.decode_user_data(junk) == ([], -1, None)       # ignored, as Kafka does


def test_sticky_subscription_bytes_equal_aiokafkas_own():
    topics = {"orders", "payments", "ünïcode"}
    ours, theirs = A.StickyAssignor(), ASticky
    assert ours.metadata(topics).encode() == KSubscription(
        version=0, topics=sorted(topics), user_data=b"").encode()   # before any assignment
    ours.on_assignment(ConsumerProtocolMemberAssignment(0, RUNS, struct.pack(">i", 9)))
    mine = ours.metadata(topics).encode()
    md = theirs._metadata(sorted(topics), [KTP(t, p) for t, ps in RUNS for p in ps], 9)
    assert mine == md.encode()
    parsed = ASticky.parse_member_metadata(ConsumerProtocolMemberMetadata.decode(mine))
    assert parsed.generation == 9
    assert sorted(parsed.partitions) == sorted(KTP(t, p) for t, ps in RUNS for p in ps)
    # the kafka-python adapter sends the very same bytes
    kp = K.StickyAssignor()
    kp.on_assignment(kassign(RUNS), 9)
    assert kp.metadata(topics).encode() == mine


def test_kafka_pythons_own_sticky_user_data_has_a_version_prefix_we_read():
    """kafka-python 3.0.12's StickyPartitionAssignor encodes its user data with an int16
    version before Kafka's body (ApiData.encode's header), and its parser expects one, so it
    ignores Kafka's format (Java's, aiokafka's, ours). Our leader reads both."""
    own = KSticky()
    own.on_assignment(kassign(RUNS), 9)
    raw = own.metadata({"orders", "payments", "ünïcode"}).encode()
    ud = KSubscription.decode(raw).user_data
    raw_topics = KSubscription.decode(raw).topics
    assert ud == struct.pack(">h", 1) + _kafka_documented_sticky_user_data(RUNS, 9)
    assert P.decode_user_data(ud) == (RUNS, 9, None)
    ours = KSubscription.decode(K.StickyAssignor().metadata(
        {"orders", "payments", "ünïcode"}).encode())
    kafka_format = KSubscription(version=0, topics=["orders"],
                                 user_data=P.encode_user_data(RUNS, 9))
    assert KSticky.parse_member_metadata(KSubscription.decode(
        kafka_format.encode())).partitions == []              # their leader drops it
    # our leader keeps the claims of kafka-python's own members
    cluster = Cluster({"orders": 8, "payments": 3, "ünïcode": 6})
    members = [KMember("a-theirs", None, KSubscription.decode(raw)),
               KMember("b-ours", None, ours)]
    out = K.StickyAssignor().assign(cluster, members)
    got = {(t, p) for t, ps in out["a-theirs"].assigned_partitions for p in ps}
    assert {(t, p) for t, ps in RUNS for p in ps} <= got and len(got) in (8, 9)
    # ... where ignoring them would have dealt it others (b-ours gets the first ones)
    blind = K.StickyAssignor().assign(cluster, [members[0]._replace(metadata=KSubscription(
        version=0, topics=raw_topics, user_data=b"")), members[1]])
    assert not {(t, p) for t, ps in RUNS for p in ps} <= {
        (t, p) for t, ps in blind["a-theirs"].assigned_partitions for p in ps}


def test_cooperative_sticky_subscription_is_kafkas_v3():
    ours = K.CooperativeStickyAssignor()
    assert ours.supported_protocols() == [RebalanceProtocol.COOPERATIVE]
    first = KSubscription.decode(ours.metadata({"b", "a"}).encode())
    assert first.version == 3 and first.topics == ["a", "b"]
    assert first.owned_partitions == [] and first.generation_id == -1
    ours.on_assignment(kassign(RUNS, version=1), 17)
    raw = ours.metadata({"orders", "payments", "ünïcode"}).encode()
    md = KSubscription.decode(raw)
    assert md.version == 3 and md.generation_id == 17
    # user data: Kafka's CooperativeStickyAssignor user data v0, one int32 generation
    assert md.user_data == struct.pack(">i", 17)
    assert [(tp.topic, tp.partitions) for tp in md.owned_partitions] == RUNS
    parsed = KCooperativeSticky.parse_member_metadata(md)        # kafka-python's own leader
    assert parsed.generation == 17
    assert sorted((tp.topic, tp.partition) for tp in parsed.partitions) == sorted(
        (t, p) for t, ps in RUNS for p in ps)


def test_the_generation_our_cooperative_leader_reads():
    tp = P._topics([("t",)], Cluster({"t": 4}).partitions_for_topic)

    def gens(*members):
        return P._claims(P.COOPERATIVE_STICKY, list(members), tp)[2].tolist()
    v3 = P.MemberMeta("a", None, ["t"], struct.pack(">i", 99), [("t", [0])], 7, 3)
    legacy = P.MemberMeta("b", None, ["t"], struct.pack(">i", 5), [("t", [1])], -1, 1)
    nothing = P.MemberMeta("c", None, ["t"], b"", [("t", [2])], -1, 1)
    assert gens(v3, legacy) == [7, 5]          # GenerationId (v2+), else the 4-byte user data
    assert gens(v3, nothing) == [7, 7]         # no generation at all: counts as current
    assert gens(nothing, nothing) == [-1, -1]


def test_optimal_subscription_carries_everything_in_its_user_data():
    kp = K.OptimalAssignor()
    assert kp.supported_protocols() == [RebalanceProtocol.COOPERATIVE]
    kp.on_assignment(kassign(RUNS, 4), 123)
    md = KSubscription.decode(kp.metadata({"orders"}).encode())
    # GenerationId is the coordinator's generation (KIP-792: coordinators compare it with the
    # member's synced generation); the epoch our leaders compare is in the user data
    assert md.generation_id == 123
    assert P.decode_user_data(md.user_data) == (RUNS, 4, P.HOLDING)
    assert [(t.topic, t.partitions) for t in md.owned_partitions] == RUNS
    # what an aiokafka leader sees of it: topics and user data (v0 struct)
    seen = ConsumerProtocolMemberMetadata.decode(kp.metadata({"orders"}).encode())
    assert seen.subscription == ["orders"] and P.decode_user_data(seen.user_data)[0] == RUNS
    aio = A.OptimalAssignor()
    aio.on_assignment(ConsumerProtocolMemberAssignment(0, RUNS, struct.pack(">i", 4)))
    raw = aio.metadata({"orders"})
    assert isinstance(raw, bytes)
    md = KSubscription.decode(raw)
    assert md.owned_partitions == [] and md.generation_id == -1   # eager: holds nothing
    assert P.decode_user_data(md.user_data) == (RUNS, 4, 0)


# ============================================================================ rounds

class Member:
    """One group member: an assignor instance (ours or the client's own) and its client."""

    def __init__(self, member_id, assignor, client, topics, instance_id=None):
        self.member_id, self.assignor, self.client = member_id, assignor, client
        self.topics, self.instance_id = set(topics), instance_id
        self.assigned = set()          # (topic, partition) after its last SyncGroup
        self.cooperative = client == "kafka-python" and \
            assignor.supported_protocols() == [RebalanceProtocol.COOPERATIVE]

    def join_metadata(self) -> bytes:
        md = self.assignor.metadata(self.topics)
        return md if isinstance(md, bytes) else md.encode()

    def held_at_join(self) -> set:
        return set(self.assigned) if self.cooperative else set()   # eager: revoked first

    def receive(self, raw: bytes, generation: int):
        if self.client == "kafka-python":
            a = KAssignment.decode(raw)
            self.assignor.on_assignment(a, generation)
        else:
            a = ConsumerProtocolMemberAssignment.decode(raw)
            self.assignor.on_assignment(a)
        self.assigned = {(t, p) for t, ps in a.assignment for p in ps}


def run_round(members, leader, cluster, generation):
    """One JoinGroup + SyncGroup: -> per member the partitions newly given to it. Raises if a
    partition is given to a member while another one still holds it."""
    raw = {m.member_id: m.join_metadata() for m in members}
    if leader.client == "kafka-python":
        out = leader.assignor.assign(cluster, [
            KMember(m.member_id, m.instance_id, KSubscription.decode(raw[m.member_id]))
            for m in members])
    else:
        out = leader.assignor.assign(cluster, {
            m.member_id: ConsumerProtocolMemberMetadata.decode(raw[m.member_id])
            for m in members})
    held = {m.member_id: m.held_at_join() for m in members}
    new = {}
    for m in members:
        enc = out[m.member_id]
        m.receive(enc if isinstance(enc, bytes) else enc.encode(), generation)
        new[m.member_id] = m.assigned - held[m.member_id]
        for other in members:
            if other is not m:
                both = new[m.member_id] & held[other.member_id]
                assert not both, "%s given %s still held by %s" % (m.member_id, both,
                                                                   other.member_id)
    return new


def settle(members, leader, cluster, generation, max_rounds=4):
    """Rounds until nobody needs to rejoin (a cooperative member that lost a partition does);
    -> (generation reached, rounds run)."""
    for r in range(1, max_rounds + 1):
        generation += 1
        before = {m.member_id: m.held_at_join() for m in members}
        run_round(members, leader, cluster, generation)
        if not any(m.cooperative and before[m.member_id] - m.assigned for m in members):
            return generation, r
    raise AssertionError("no stable assignment after %d rounds" % max_rounds)


def _counts(members):
    return sorted(len(m.assigned) for m in members)


def _all_once(members, cluster):
    flat = [tp for m in members for tp in m.assigned]
    want = {(t, p) for t in cluster.parts for p in cluster.partitions_for_topic(t)}
    return len(flat) == len(set(flat)) and set(flat) == want


def _make(kind, cls, n, topics, start=0):
    return [Member("m%02d" % (start + i), cls(), kind, topics) for i in range(n)]


OURS_KP = [K.RangeAssignor, K.RoundRobinAssignor, K.StickyAssignor,
           K.CooperativeStickyAssignor, K.OptimalAssignor]
OURS_AIO = [A.RangeAssignor, A.RoundRobinAssignor, A.StickyAssignor, A.OptimalAssignor]


@pytest.mark.parametrize("kind,cls", [pytest.param(k, c, id="%s-%s" % (k, c.name))
                                      for k, classes in (("kafka-python", OURS_KP),
                                                         ("aiokafka", OURS_AIO))
                                      for c in classes])
def test_join_grow_leave_rounds(kind, cls):
    cluster = Cluster({"a": 6, "b": 4})
    members = _make(kind, cls, 1, {"a", "b"})
    gen, _ = settle(members, members[0], cluster, 0)
    assert _counts(members) == [10]
    for k in (2, 3):                                   # members join one at a time
        kept = {m.member_id: set(m.assigned) for m in members}
        members += _make(kind, cls, 1, {"a", "b"}, start=k - 1)
        gen, rounds = settle(members, members[0], cluster, gen)
        assert _all_once(members, cluster)
        assert _counts(members) == ([5, 5] if k == 2 else [3, 3, 4])
        if cls.name in (P.STICKY, P.COOPERATIVE_STICKY, P.OPTIMAL):
            # sticky: only the newcomer's share moved
            moved = sum(len(kept[i] - m.assigned) for i, m in
                        ((m.member_id, m) for m in members if m.member_id in kept))
            assert moved == min(_counts(members))
            assert rounds == (2 if cls.name in P.COOPERATIVE and kind == "kafka-python"
                              else 1)
    kept = {m.member_id: set(m.assigned) for m in members[1:]}
    members = members[1:]                              # the leader leaves
    gen, rounds = settle(members, members[0], cluster, gen)
    assert _all_once(members, cluster) and _counts(members) == [5, 5]
    assert rounds == 1
    if cls.name in (P.STICKY, P.COOPERATIVE_STICKY, P.OPTIMAL):
        assert all(kept[m.member_id] <= m.assigned for m in members)


def test_range_and_roundrobin_equal_the_clients_own():
    rng = random.Random(5)
    for trial in range(30):
        T, M = rng.randint(1, 5), rng.randint(1, 6)
        parts = {"t%d" % t: rng.randint(0, 9) for t in range(T)}
        names = sorted(parts)
        subs = [sorted(rng.sample(names, rng.randint(1, T))) for _ in range(M)]
        same = [names] * M
        cluster = Cluster(parts)
        for ours, theirs, s in ((K.RangeAssignor, KRange, subs),
                                (K.RoundRobinAssignor, KRoundRobin, same)):
            # kafka-python's roundrobin raises KeyError on unequal subscriptions
            # (docs/benchmarks-assign-classic.md), so it is compared on equal ones
            members = [KMember("c%d" % i, None, KSubscription.decode(
                ours().metadata(s[i]).encode())) for i in rng.sample(range(M), M)]
            got = ours().assign(cluster, members)
            want = theirs.assign(cluster, members)
            for m in members:
                assert [(t, list(p)) for t, p in got[m.member_id].assigned_partitions] == \
                    [(t, list(p)) for t, p in want[m.member_id].assigned_partitions
                     if p], (trial, ours.name)
        for ours, theirs in ((A.RangeAssignor, ARange), (A.RoundRobinAssignor, ARoundRobin)):
            md = {"c%d" % i: ConsumerProtocolMemberMetadata.decode(
                ours().metadata(subs[i]).encode()) for i in range(M)}
            got, want = ours().assign(cluster, md), theirs.assign(cluster, md)
            for mid in md:
                assert [tuple(x) for x in got[mid].assignment] == \
                    [(t, p) for t, p in want[mid].assignment if p], (trial, ours.name)


def test_static_members_go_first_in_range():
    cluster = Cluster({"t": 4})
    members = [KMember(mid, inst, KSubscription.decode(K.RangeAssignor().metadata(
        {"t"}).encode())) for mid, inst in (("a", None), ("b", "z-static"), ("c", None))]
    out = K.RangeAssignor().assign(cluster, members)
    assert [list(p) for _, p in out["b"].assigned_partitions] == [[0, 1]]
    assert [list(p) for _, p in out["a"].assigned_partitions] == [[2]]


@pytest.mark.parametrize("ours_lead", [True, False], ids=["our-leader", "their-leader"])
def test_mixed_cooperative_sticky_group_converges_safely(ours_lead):
    """Our CooperativeStickyAssignor and kafka-python's own, one protocol name, one group."""
    cluster = Cluster({"a": 7, "b": 5})
    kinds = [K.CooperativeStickyAssignor, KCooperativeSticky] if ours_lead else \
        [KCooperativeSticky, K.CooperativeStickyAssignor]
    members = [Member("m00", kinds[0](), "kafka-python", {"a", "b"})]
    gen, _ = settle(members, members[0], cluster, 0)
    for k in range(1, 5):
        kept = {m.member_id: set(m.assigned) for m in members}
        members.append(Member("m%02d" % k, kinds[k % 2](), "kafka-python", {"a", "b"}))
        gen, _ = settle(members, members[0], cluster, gen)
        assert _all_once(members, cluster)
        assert max(_counts(members)) - min(_counts(members)) <= 1
        moved = sum(len(kept[m.member_id] - m.assigned) for m in members[:-1])
        assert moved == len(members[-1].assigned)          # only the newcomer's share moved
    # a member of the other kind leaves: nobody else loses anything
    kept = {m.member_id: set(m.assigned) for m in members}
    members.pop(1)
    gen, rounds = settle(members, members[0], cluster, gen)
    assert _all_once(members, cluster) and rounds == 1
    assert all(kept[m.member_id] <= m.assigned for m in members)


def test_our_leader_keeps_the_claims_of_members_without_a_generation():
    """kafka-python's own cooperative-sticky never reports a generation: its claims still
    count beside members that do (otherwise every rebalance would move its partitions)."""
    cluster = Cluster({"t": 6})
    theirs = KCooperativeSticky()
    theirs.on_assignment(kassign([("t", [0, 1, 2])], version=1), 3)
    ours = K.CooperativeStickyAssignor()
    ours.on_assignment(kassign([("t", [3, 4, 5])], version=1), 3)
    members = [KMember("x-theirs", None, KSubscription.decode(theirs.metadata({"t"}).encode())),
               KMember("y-ours", None, KSubscription.decode(ours.metadata({"t"}).encode()))]
    assert members[0].metadata.version == 1 and members[0].metadata.generation_id == -1
    out = ours.assign(cluster, members)
    assert [list(p) for _, p in out["x-theirs"].assigned_partitions] == [[0, 1, 2]]
    assert [list(p) for _, p in out["y-ours"].assigned_partitions] == [[3, 4, 5]]


@pytest.mark.parametrize("leader_kind", ["kafka-python", "aiokafka"])
def test_mixed_optimal_group_of_cooperative_and_eager_members(leader_kind):
    """groupcoord-optimal: kafka-python members (cooperative, holding their partitions while
    they join) and aiokafka members (eager, holding none) in one group; either may lead."""
    cluster = Cluster({"a": 8, "b": 3})
    make = {"kafka-python": K.OptimalAssignor, "aiokafka": A.OptimalAssignor}
    order = [leader_kind] + [k for k in ("kafka-python", "aiokafka") if k != leader_kind]
    members = [Member("m00", make[order[0]](), order[0], {"a", "b"})]
    gen, _ = settle(members, members[0], cluster, 0)
    for k in range(1, 5):
        kind = order[k % 2]
        members.append(Member("m%02d" % k, make[kind](), kind, {"a", "b"}))
        gen, _ = settle(members, members[0], cluster, gen)     # run_round checks safety
        assert _all_once(members, cluster)
        assert max(_counts(members)) - min(_counts(members)) <= 1
    # the epoch every member reports climbs with the rounds
    epochs = [P.decode_user_data(KSubscription.decode(m.join_metadata()).user_data)[1]
              for m in members]
    assert len(set(epochs)) == 1 and epochs[0] >= 5


def test_an_eager_members_moved_partition_is_given_at_once_under_optimal():
    """A partition only an eager (aiokafka) member claims was revoked before the join: moving
    it must not leave it idle for a round, as no eager member asks for a second one."""
    cluster = Cluster({"t": 4})
    eager = A.OptimalAssignor()
    eager.on_assignment(ConsumerProtocolMemberAssignment(0, [("t", [0, 1, 2, 3])],
                                                         struct.pack(">i", 1)))
    coop = K.OptimalAssignor()
    md = {"e": ConsumerProtocolMemberMetadata.decode(eager.metadata({"t"})),
          "k": ConsumerProtocolMemberMetadata.decode(coop.metadata({"t"}).encode())}
    out = A.OptimalAssignor().assign(cluster, md)
    assert sum(len(p) for _, p in out["e"].assignment) == 2
    assert sum(len(p) for _, p in out["k"].assignment) == 2       # not withheld
    # the same claims marked as still held: the two that move wait for their release
    coop2 = K.OptimalAssignor()
    coop2.on_assignment(kassign([("t", [0, 1, 2, 3])], 1), 1)
    md = {"e": ConsumerProtocolMemberMetadata.decode(K.OptimalAssignor().metadata(
        {"t"}).encode()), "k": ConsumerProtocolMemberMetadata.decode(
        coop2.metadata({"t"}).encode())}
    out = A.OptimalAssignor().assign(cluster, md)
    assert sum(len(p) for _, p in out["e"].assignment) == 0
    assert sum(len(p) for _, p in out["k"].assignment) == 2


def test_optimal_is_more_balanced_than_kafka_pythons_cooperative_sticky():
    """Heterogeneous subscriptions where kafka-python's sticky balancing stops short: found by
    a random search (docs/embedding.md). m0 only reads a (2 partitions), m1-m3 only b (2),
    m4 both; m0 owns a-0 and a-1, m4 owns b-0."""
    cluster = Cluster({"a": 2, "b": 2})
    subs = [["a"], ["b"], ["b"], ["b"], ["a", "b"]]
    owned = [[("a", [0, 1])], [], [], [], [("b", [0])]]

    def member(i):
        return KMember("m%d" % i, None, KSubscription.decode(KSubscription(
            version=3, topics=subs[i], user_data=b"", owned_partitions=[
                KSubscription.TopicPartition(topic=t, partitions=p) for t, p in owned[i]],
            generation_id=1, rack_id=None).encode()))
    members = [member(i) for i in range(5)]
    parsed = {m.member_id: KCooperativeSticky.parse_member_metadata(m.metadata)
              for m in members}
    ex = KExecutor(cluster, parsed)
    ex.perform_initial_assignment()
    ex.balance()
    theirs = sorted((sum(len(p) for _, p in ex.get_final_assignment(m.member_id))
                     for m in members), reverse=True)
    assert theirs == [2, 1, 1, 0, 0]
    # ours, over two cooperative rounds (a-1 moves from m0 to m4 once m0 released it)
    ours = [Member("m%d" % i, K.OptimalAssignor(), "kafka-python", subs[i]) for i in range(5)]
    for m, o in zip(ours, owned):
        m.assigned = {(t, p) for t, ps in o for p in ps}
        m.assignor.on_assignment(kassign(o, 1), 1)
    settle(ours, ours[0], cluster, 1)
    assert sorted((len(m.assigned) for m in ours), reverse=True) == [1, 1, 1, 1, 0]


def test_partition_ids_topics_and_claims_that_do_not_exist():
    cluster = Cluster({"t": {0, 2, 5}, "u": 2})      # ids with gaps, a topic "x" unknown
    ours = K.StickyAssignor()
    ours.on_assignment(kassign([("t", [2, 3]), ("x", [0])]), 1)     # t-3 and x do not exist
    other = K.StickyAssignor()
    members = [KMember("a", None, KSubscription.decode(ours.metadata({"t", "x"}).encode())),
               KMember("b", None, KSubscription.decode(other.metadata({"t", "u"}).encode()))]
    out = ours.assign(cluster, members)
    got = {m: sorted((t, p) for t, ps in out[m].assigned_partitions for p in ps)
           for m in ("a", "b")}
    assert ("t", 2) in got["a"]                       # its valid claim kept
    assert sorted(got["a"] + got["b"]) == [("t", 0), ("t", 2), ("t", 5), ("u", 0), ("u", 1)]
    assert all(t != "u" for t, _ in got["a"])


def test_aiokafka_assignors_work_as_classes_too():
    """aiokafka calls what it is given: a class (state on the class) or an instance."""
    class Mine(A.StickyAssignor):          # a fresh class, so no other test shares its state
        pass
    cluster = Cluster({"t": 2})
    md = {"a": ConsumerProtocolMemberMetadata.decode(Mine.metadata({"t"}).encode())}
    out = Mine.assign(cluster, md)
    Mine.on_assignment(out["a"])
    assert Mine._held == [("t", [0, 1])] and Mine._generation == 0
    inst = Mine()
    assert inst._held == [("t", [0, 1])]          # instances start from the class's state
    inst.on_assignment(ConsumerProtocolMemberAssignment(0, [("t", [1])], struct.pack(">i", 6)))
    assert inst._held == [("t", [1])] and Mine._held == [("t", [0, 1])]
    assert P.decode_user_data(inst.metadata({"t"}).user_data) == ([("t", [1])], 6, None)


def test_unknown_protocol_names():
    with pytest.raises(ValueError, match="unknown protocol"):
        P.subscription("fastest", ["t"], None, -1)
    with pytest.raises(ValueError, match="unknown protocol"):
        P.leader_assign("fastest", [], Cluster({}).partitions_for_topic)
    assert P.leader_assign(P.RANGE, [], Cluster({}).partitions_for_topic).runs == []
