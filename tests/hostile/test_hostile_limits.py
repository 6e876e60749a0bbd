"""Catalog and group limits reached (issue 16, "What to build" 2) while a well-behaved group
runs on the node: CreateTopics is refused unless --allow-create-topics, and past --max-topics
or --max-partitions; a shard that holds shard.max.groups groups refuses a new group; a group
at group.max.size / group.consumer.max.size / group.connect.max.size refuses a new member.
Each refusal carries its error code, the good group keeps its assignment, and nothing
refused shows up afterwards (nor after a kill -9 restart)."""
import pytest

from hostile_harness import (FILLER_PARTITIONS, FILLER_TOPICS, GOOD_PARTITIONS, GROUP_848,
                             GROUP_CLASSIC, MIB, Case, Wire, node_serves, offset_fetch)
from hostile_loads import connect_join
from groupcoord.protocol import messages as M

pytestmark = pytest.mark.hostile

POLICY_VIOLATION, GROUP_MAX_SIZE_REACHED, MEMBER_ID_REQUIRED = 44, 81, 79
BASE_TOPICS = FILLER_TOPICS + 1
BASE_PARTITIONS = FILLER_TOPICS * FILLER_PARTITIONS + GOOD_PARTITIONS


def create(host, port, *topics, validate_only=False):
    """CreateTopics v7 of [(name, partitions)] -> {name: (error code, message)}."""
    req = M.CreateTopicsRequest(topics=[M.CreateTopicsRequestCreatableTopic(
        name=name, num_partitions=parts, replication_factor=1) for name, parts in topics],
        timeout_ms=10_000, validate_only=validate_only)
    with Wire(host, port) as w:
        r = w.call(req, 7)
    return {t.name: (t.error_code, t.error_message) for t in r.topics}


def catalog_of(host, port):
    with Wire(host, port) as w:
        md = w.call(M.MetadataRequest(topics=None), 12)
    return {t.name: len(t.partitions) for t in md.topics}


def test_create_topics_is_refused_unless_allowed(node, good_group):
    n = node()
    g = good_group(n)
    with Case(n, g) as case:
        got = create(n.host, n.port, ("new-topic", 3))
    case.check(64 * MIB)
    code, msg = got["new-topic"]
    assert code == POLICY_VIOLATION and "--allow-create-topics" in (msg or ""), got
    assert "new-topic" not in catalog_of(n.host, n.port)


def test_catalog_limits_reached(node, good_group):
    max_topics = BASE_TOPICS + 19
    max_partitions = BASE_PARTITIONS + 200
    n = node(extra_args=["--allow-create-topics", "--max-topics", str(max_topics),
                         "--max-partitions", str(max_partitions)])
    g = good_group(n)
    with Case(n, g) as case:
        # 18 topics of 10: 119 topics, 180 of the 200 partitions left
        got = create(n.host, n.port, *[("t-%02d" % i, 10) for i in range(18)])
        assert all(code == 0 for code, _ in got.values()), got
        # 21 partitions do not fit in the 20 left: refused, also in validate-only
        over_parts = create(n.host, n.port, ("p-over", 21))
        over_parts_v = create(n.host, n.port, ("p-over", 21), validate_only=True)
        # 20 fit exactly (the 120th topic, the last partition)
        fit = create(n.host, n.port, ("p-fit", 20))
        # the 121st topic
        over_topics = create(n.host, n.port, ("t-over", 1))
    case.check(64 * MIB)
    for got in (over_parts, over_parts_v):
        code, msg = got["p-over"]
        assert code == POLICY_VIOLATION and "--max-partitions" in (msg or ""), got
    assert fit["p-fit"][0] == 0, fit
    code, msg = over_topics["t-over"]
    assert code == POLICY_VIOLATION and "--max-topics" in (msg or ""), over_topics
    cat = catalog_of(n.host, n.port)
    assert len(cat) == max_topics and sum(cat.values()) == max_partitions
    assert "p-over" not in cat and "t-over" not in cat
    # what was created survives a kill -9 restart; nothing refused appears
    g.close()
    n.restart(kill9=True)
    assert catalog_of(n.host, n.port) == cat


def commit_new_group(host, port, group):
    req = M.OffsetCommitRequest(group_id=group, generation_id_or_member_epoch=-1, topics=[
        M.OffsetCommitRequestTopic(name="good", partitions=[
            M.OffsetCommitRequestPartition(partition_index=0, committed_offset=1)])])
    with Wire(host, port) as w:
        r = w.call(req, 8)
    return r.topics[0].partitions[0].error_code


def test_groups_per_shard_limit(node, good_group):
    """One shard, shard.max.groups 6: the two good groups and four groups of commits fill
    it; a fifth commit group, a classic JoinGroup, a ConsumerGroupHeartbeat and a Connect
    heartbeat creating a group are each refused POLICY_VIOLATION; existing groups carry on."""
    n = node(shards=1, group_config=("shard.max.groups=6",))
    g = good_group(n)
    with Case(n, g) as case:
        fill = [commit_new_group(n.host, n.port, "fill-%d" % i) for i in range(4)]
        over_commit = commit_new_group(n.host, n.port, "fill-over")
        with Wire(n.host, n.port) as w:
            join = w.call(M.JoinGroupRequest(
                group_id="over-classic", session_timeout_ms=6000, rebalance_timeout_ms=10000,
                member_id="", protocol_type="consumer",
                protocols=[M.JoinGroupRequestProtocol(name="range", metadata=b"")]), 9)
            cgh = w.call(M.ConsumerGroupHeartbeatRequest(
                group_id="over-848", member_id="m-over-1", member_epoch=0,
                rebalance_timeout_ms=10000, subscribed_topic_names=["good"],
                topic_partitions=[]), 1)
            conn = w.call(connect_join("W1", group="over-connect"), 0)
        # an existing group still takes commits
        again = commit_new_group(n.host, n.port, "fill-0")
    case.check(64 * MIB)
    assert fill == [0, 0, 0, 0], fill
    assert over_commit == POLICY_VIOLATION
    assert join.error_code == POLICY_VIOLATION, join        # JoinGroup has no message field
    for r in (cgh, conn):
        assert r.error_code == POLICY_VIOLATION and "shard.max.groups" in r.error_message, r
    assert again == 0
    with Wire(n.host, n.port) as w:
        listed = sorted(x.group_id for x in w.call(M.ListGroupsRequest(), 4).groups)
    assert listed == sorted([GROUP_848, GROUP_CLASSIC] + ["fill-%d" % i for i in range(4)])
    assert offset_fetch(n.host, n.port, "fill-over") == {}


def test_group_size_limits(node, good_group):
    """group.max.size 2 and group.consumer.max.size 2 (the good groups have 2 members each),
    group.connect.max.size 1: one more member is refused GROUP_MAX_SIZE_REACHED and the good
    groups do not rebalance."""
    n = node(group_config=("group.max.size=2", "group.consumer.max.size=2",
                           "group.connect.max.size=1"))
    g = good_group(n)
    with Case(n, g) as case:
        with Wire(n.host, n.port) as w:
            join = M.JoinGroupRequest(
                group_id=GROUP_CLASSIC, session_timeout_ms=6000, rebalance_timeout_ms=10000,
                member_id="", protocol_type="consumer",
                protocols=[M.JoinGroupRequestProtocol(name="range", metadata=b"")])
            j = w.call(join, 9)
            if j.error_code == MEMBER_ID_REQUIRED:     # Kafka's first step of a new member
                join.member_id = j.member_id
                j = w.call(join, 9)
            cgh = w.call(M.ConsumerGroupHeartbeatRequest(
                group_id=GROUP_848, member_id="m-third-1", member_epoch=0,
                rebalance_timeout_ms=10000, subscribed_topic_names=["good"],
                topic_partitions=[]), 1)
            w1 = w.call(connect_join("W1", group="size-connect"), 0)
            w2 = w.call(connect_join("W2", group="size-connect"), 0)
    case.check(64 * MIB)
    assert j.error_code == GROUP_MAX_SIZE_REACHED, j
    assert cgh.error_code == GROUP_MAX_SIZE_REACHED, cgh
    assert w1.error_code in (0, 10000), w1          # joined (asked to compute: 10000)
    assert w2.error_code == GROUP_MAX_SIZE_REACHED, w2
    assert node_serves(n.host, n.port)
