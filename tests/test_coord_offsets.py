"""OffsetCommit / OffsetFetch against every group type (tests/coord_harness.py checks replay
equality and purity of every step)."""
import pytest

from coord_harness import Parked
from groupcoord.groups.config import ShardConfig
from groupcoord.groups.topics import TopicCatalog
from groupcoord.protocol import messages as m
from groupcoord.protocol.error_codes import ErrorCode as E

CFG = ShardConfig(group_initial_rebalance_delay_ms=0)
TOPICS = TopicCatalog.of(t=4)


def commit(h, group, gen=-1, member="", instance=None, offsets=None, version=8):
    offsets = offsets or {("t", 0): 10}
    by_topic = {}
    for (t, p), off in offsets.items():
        by_topic.setdefault(t, []).append(m.OffsetCommitRequestPartition(
            partition_index=p, committed_offset=off, committed_metadata="meta-%d" % off,
            committed_leader_epoch=3 if version >= 6 else -1))
    req = m.OffsetCommitRequest(group_id=group, generation_id_or_member_epoch=gen,
                                member_id=member, group_instance_id=instance,
                                topics=[m.OffsetCommitRequestTopic(name=t, partitions=ps)
                                        for t, ps in by_topic.items()])
    resp = h.send(req, version)
    return {(t.name, p.partition_index): p.error_code for t in resp.topics
            for p in t.partitions}


def fetch(h, group, parts=(("t", 0),), version=8, member=None, epoch=-1):
    by_topic = {}
    for t, p in parts or ():
        by_topic.setdefault(t, []).append(p)
    if version >= 8:
        topics = None if parts is None else [m.OffsetFetchRequestTopics(name=t, partition_indexes=ps)
                                              for t, ps in by_topic.items()]
        req = m.OffsetFetchRequest(groups=[m.OffsetFetchRequestGroup(
            group_id=group, member_id=member, member_epoch=epoch, topics=topics)])
        resp = h.send(req, version)
        g = resp.groups[0]
        return g.error_code, {(t.name, p.partition_index): (p.committed_offset, p.metadata,
                                                             p.committed_leader_epoch)
                              for t in g.topics for p in t.partitions}
    topics = None if parts is None else [m.OffsetFetchRequestTopic(name=t, partition_indexes=ps)
                                         for t, ps in by_topic.items()]
    resp = h.send(m.OffsetFetchRequest(group_id=group, topics=topics), version)
    return resp.error_code, {(t.name, p.partition_index): (p.committed_offset, p.metadata,
                                                           p.committed_leader_epoch)
                             for t in resp.topics for p in t.partitions}


def classic_member(h, group="g", version=3):
    """Join a classic group alone and sync; -> (member id, generation)."""
    r = h.send(m.JoinGroupRequest(group_id=group, session_timeout_ms=10_000,
                                  rebalance_timeout_ms=10_000, member_id="",
                                  protocol_type="consumer",
                                  protocols=[m.JoinGroupRequestProtocol(name="range",
                                                                        metadata=b"x")]),
               version)
    if isinstance(r, Parked):
        h.advance(0)
        r = h.completion(r)
    assert r.error_code == 0, r
    s = h.send(m.SyncGroupRequest(group_id=group, generation_id=r.generation_id,
                                  member_id=r.member_id,
                                  assignments=[m.SyncGroupRequestAssignment(
                                      member_id=r.member_id, assignment=b"a")]), 3)
    assert s.error_code == 0
    return r.member_id, r.generation_id


def consumer_member(h, group="cg", member="m1"):
    r = h.send(m.ConsumerGroupHeartbeatRequest(group_id=group, member_id=member, member_epoch=0,
                                               rebalance_timeout_ms=10_000,
                                               subscribed_topic_names=["t"], topic_partitions=[]),
               1)
    assert r.error_code == 0, r
    return r.member_epoch


# ------------------------------------------------------------------------------ simple
@pytest.mark.parametrize("version", [2, 5, 7, 8, 9])
def test_simple_commit_creates_empty_group_and_fetch_reads_it(coord, version):
    h = coord(config=CFG, topics=TOPICS)
    assert commit(h, "s", offsets={("t", 0): 5, ("t", 1): 7}, version=version) == {
        ("t", 0): 0, ("t", 1): 0}
    g = h.shard.group("s")
    assert g is not None and g.TYPE == "classic" and g.state_name() == "Empty"
    err, got = fetch(h, "s", [("t", 0), ("t", 1), ("t", 2)], version=min(version, 8) if version >= 8 else 7)
    assert err == 0
    assert got[("t", 0)][0] == 5 and got[("t", 1)][0] == 7 and got[("t", 2)][0] == -1
    assert got[("t", 0)][1] == "meta-5"


def test_commit_overwrites_and_fetch_all_topics(coord):
    h = coord(config=CFG)
    commit(h, "s", offsets={("a", 0): 1, ("b", 2): 2})
    commit(h, "s", offsets={("a", 0): 9})
    err, got = fetch(h, "s", None)
    assert err == 0 and got == {("a", 0): (9, "meta-9", 3), ("b", 2): (2, "meta-2", 3)}
    err, got = fetch(h, "s", None, version=5)
    assert got == {("a", 0): (9, "meta-9", 3), ("b", 2): (2, "meta-2", 3)}


def test_fetch_unknown_group_gives_minus_one_without_error(coord):
    h = coord(config=CFG)
    for v in (1, 5, 8):
        err, got = fetch(h, "nobody", [("t", 0)], version=v)
        assert err == 0 and got == {("t", 0): (-1, "", -1)}
    assert h.shard.group("nobody") is None      # reading never creates a group


def test_invalid_group_id_and_oversized_metadata(coord):
    h = coord(config=CFG)
    assert commit(h, "") == {("t", 0): E.INVALID_GROUP_ID}
    req = m.OffsetCommitRequest(group_id="s", topics=[m.OffsetCommitRequestTopic(
        name="t", partitions=[
            m.OffsetCommitRequestPartition(partition_index=0, committed_offset=1,
                                           committed_metadata="x" * 5000),
            m.OffsetCommitRequestPartition(partition_index=1, committed_offset=1,
                                           committed_metadata="ok")])])
    resp = h.send(req, 8)
    codes = [p.error_code for p in resp.topics[0].partitions]
    assert codes == [E.OFFSET_METADATA_TOO_LARGE, 0]
    err, got = fetch(h, "s", [("t", 0), ("t", 1)])
    assert got[("t", 0)][0] == -1 and got[("t", 1)][0] == 1
    assert fetch(h, "", [("t", 0)])[0] == E.INVALID_GROUP_ID


def test_commit_claiming_membership_of_unknown_group_is_rejected(coord):
    h = coord(config=CFG)
    assert commit(h, "x", gen=3, member="m") == {("t", 0): E.ILLEGAL_GENERATION}
    assert commit(h, "x", gen=3, member="m", version=9) == {("t", 0): E.GROUP_ID_NOT_FOUND}
    assert h.shard.group("x") is None and h.log == []


# ----------------------------------------------------------------------------- classic
def test_classic_member_commits_with_generation_checks(coord):
    h = coord(config=CFG, topics=TOPICS)
    mid, gen = classic_member(h)
    assert commit(h, "g", gen=gen, member=mid) == {("t", 0): 0}
    assert commit(h, "g", gen=gen + 1, member=mid) == {("t", 0): E.ILLEGAL_GENERATION}
    assert commit(h, "g", gen=gen, member="stranger") == {("t", 0): E.UNKNOWN_MEMBER_ID}
    # a non-empty classic group refuses admin-style commits
    assert commit(h, "g", gen=-1, member="") == {("t", 0): E.UNKNOWN_MEMBER_ID}
    assert fetch(h, "g")[1][("t", 0)][0] == 10


# ---------------------------------------------------------------------------- consumer
def test_consumer_member_commits_with_epoch_checks(coord):
    h = coord(config=CFG, topics=TOPICS)
    epoch = consumer_member(h)
    assert commit(h, "cg", gen=epoch, member="m1", version=9) == {("t", 0): 0}
    assert commit(h, "cg", gen=epoch + 5, member="m1", version=9) == \
        {("t", 0): E.STALE_MEMBER_EPOCH}
    assert commit(h, "cg", gen=epoch, member="zz", version=9) == {("t", 0): E.UNKNOWN_MEMBER_ID}
    err, got = fetch(h, "cg", version=9, member="m1", epoch=epoch)
    assert err == 0 and got[("t", 0)][0] == 10
    assert fetch(h, "cg", version=9, member="m1", epoch=epoch + 5)[0] == E.STALE_MEMBER_EPOCH
    assert fetch(h, "cg", version=9, member="zz", epoch=epoch)[0] == E.UNKNOWN_MEMBER_ID


# ------------------------------------------------------------------------------ replay
def test_offsets_survive_replay_on_a_fresh_shard(coord):
    h = coord(config=CFG)
    commit(h, "s", offsets={("a", i): i * 10 for i in range(5)})
    fresh = h.replayed()
    assert fresh.offsets["s"][("a", 3)].offset == 30
    assert fresh.group("s").state_name() == "Empty"
