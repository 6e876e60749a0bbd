"""Node-level APIs (server/node.py, server/topic_admin.py) as pure functions: every answer at
every version must also encode (the codec is strict about fields a version cannot carry)."""
import pytest

import groupcoord.protocol as P
from groupcoord.groups.limits import validate_topic_name
from groupcoord.groups.topics import TopicCatalog, topic_id_for
from groupcoord.protocol.error_codes import ErrorCode as E
from groupcoord.runtime.shards import shard_for
from groupcoord.server import node as N
from groupcoord.server import topic_admin as T

M = P.messages
CAT = TopicCatalog.of(orders=3, payments=1)
ALLOW = T.CatalogLimits(allow_create_topics=True)       # CreateTopics is off by default
RANGES = N.node_api_ranges(P.supported_versions(), lambda k: k in (11, 12, 13, 14))
NODE = N.NodeState("broker.example", 9999, "cluster-xyz", lambda: CAT, RANGES)


def versions(cls):
    lo, hi = cls.VERSIONS
    return range(lo, hi + 1)


def roundtrip(resp, version):
    """Encode + decode at version (proves the response is valid on the wire)."""
    return P.decode(type(resp), P.encode(resp, version), version)


# ---------------------------------------------------------------------- ApiVersions
def test_api_versions_advertise_exactly_node_apis_and_what_the_coordinator_serves():
    keys = {a.api_key: (a.min_version, a.max_version) for a in N.api_versions(None, 3, NODE).api_keys}
    sv = P.supported_versions()
    assert set(keys) == set(N.NODE_APIS) | {11, 12, 13, 14}
    assert all(keys[k] == sv[k] for k in keys)
    # never advertise a key the coordinator does not serve, even with a codec
    assert 68 in sv and 68 not in keys


@pytest.mark.parametrize("v", versions(M.ApiVersionsRequest))
def test_api_versions_encodes_at_every_version(v):
    assert roundtrip(N.api_versions(None, v, NODE), v).error_code == 0


def test_api_versions_unsupported_is_v0_with_error_35_and_ranges():
    resp = N.api_versions_unsupported(NODE)
    assert resp.error_code == 35
    frame = P.encode_response_frame(resp, 0, 7)
    corr, body = P.decode_response_frame(frame[4:], 18, 0)
    assert corr == 7 and body.error_code == 35 and len(body.api_keys) == len(RANGES)


# ---------------------------------------------------------------------- Metadata
@pytest.mark.parametrize("v", versions(M.MetadataRequest))
def test_metadata_all_topics(v):
    req = M.MetadataRequest(topics=[] if v == 0 else None)
    resp = roundtrip(N.metadata(req, v, NODE), v)
    assert [b.node_id for b in resp.brokers] == [0]
    assert (resp.brokers[0].host, resp.brokers[0].port) == ("broker.example", 9999)
    assert [t.name for t in resp.topics] == ["orders", "payments"]
    orders = resp.topics[0]
    assert [p.partition_index for p in orders.partitions] == [0, 1, 2]
    assert all(p.leader_id == 0 and p.replica_nodes == [0] and p.isr_nodes == [0]
               for p in orders.partitions)
    if v >= 1:
        assert resp.controller_id == 0
    if v >= 2:
        assert resp.cluster_id == "cluster-xyz"
    if v >= 10:
        assert orders.topic_id == topic_id_for("orders") != bytes(16)


@pytest.mark.parametrize("v", [1, 4, 9, 13])
def test_metadata_empty_list_means_no_topics_from_v1(v):
    assert roundtrip(N.metadata(M.MetadataRequest(topics=[]), v, NODE), v).topics == []


@pytest.mark.parametrize("v", versions(M.MetadataRequest))
def test_metadata_by_name_and_unknown_never_created(v):
    req = M.MetadataRequest(topics=[M.MetadataRequestTopic(name="payments"),
                                    M.MetadataRequestTopic(name="nope"),
                                    M.MetadataRequestTopic(name="payments")],
                            allow_auto_topic_creation=True)
    resp = roundtrip(N.metadata(req, v, NODE), v)
    assert [(t.name, t.error_code) for t in resp.topics] == [("payments", 0), ("nope", 3)]
    assert resp.topics[1].partitions == []
    assert "nope" not in CAT.by_name


@pytest.mark.parametrize("v", [10, 11, 12, 13])
def test_metadata_by_topic_id(v):
    tid = topic_id_for("orders")
    unknown = b"\x01" * 16
    req = M.MetadataRequest(topics=[M.MetadataRequestTopic(topic_id=tid, name=None),
                                    M.MetadataRequestTopic(topic_id=unknown, name=None)])
    resp = roundtrip(N.metadata(req, v, NODE), v)
    assert resp.topics[0].name == "orders" and resp.topics[0].topic_id == tid
    assert len(resp.topics[0].partitions) == 3
    assert resp.topics[1].error_code == E.UNKNOWN_TOPIC_ID == 100
    assert resp.topics[1].name == (None if v >= 12 else "")


def test_metadata_sees_a_new_catalog():
    cat = [CAT]
    node = N.NodeState("h", 1, "c", lambda: cat[0], RANGES)
    cat[0] = CAT.with_topics(("fresh", 2))
    resp = N.metadata(M.MetadataRequest(topics=None), 12, node)
    assert "fresh" in [t.name for t in resp.topics]


# ---------------------------------------------------------------------- FindCoordinator
@pytest.mark.parametrize("v", range(0, 4))
def test_find_coordinator_single_key(v):
    resp = roundtrip(N.find_coordinator(M.FindCoordinatorRequest(key="g1"), v, NODE), v)
    assert (resp.error_code, resp.node_id, resp.host, resp.port) == (0, 0, "broker.example", 9999)


@pytest.mark.parametrize("v", [4, 5, 6])
def test_find_coordinator_batched(v):
    req = M.FindCoordinatorRequest(coordinator_keys=["a", "b", "c"], key_type=0)
    resp = roundtrip(N.find_coordinator(req, v, NODE), v)
    assert [(c.key, c.node_id, c.host, c.port, c.error_code) for c in resp.coordinators] == [
        (k, 0, "broker.example", 9999, 0) for k in "abc"]


@pytest.mark.parametrize("v", [1, 3, 4, 6])
def test_find_coordinator_other_key_types_are_errors(v):
    req = M.FindCoordinatorRequest(key="tx", coordinator_keys=["tx"], key_type=1)
    resp = roundtrip(N.find_coordinator(req, v, NODE), v)
    if v >= 4:
        c = resp.coordinators[0]
        assert (c.error_code, c.node_id) == (E.INVALID_REQUEST, -1)
        assert "transaction" in c.error_message
    else:
        assert (resp.error_code, resp.node_id) == (E.INVALID_REQUEST, -1)
        assert "transaction" in resp.error_message


# ---------------------------------------------------------------------- ListOffsets
@pytest.mark.parametrize("v", versions(M.ListOffsetsRequest))
def test_list_offsets(v):
    P_ = M.ListOffsetsRequestListOffsetsPartition
    req = M.ListOffsetsRequest(topics=[
        M.ListOffsetsRequestListOffsetsTopic(name="orders", partitions=[
            P_(partition_index=0, timestamp=-2), P_(partition_index=1, timestamp=-1),
            P_(partition_index=2, timestamp=1_700_000_000_000), P_(partition_index=3, timestamp=-1)]),
        M.ListOffsetsRequestListOffsetsTopic(name="nope", partitions=[P_(partition_index=0)])])
    resp = roundtrip(N.list_offsets(req, v, NODE), v)
    ps = resp.topics[0].partitions
    assert [(p.error_code, p.offset) for p in ps] == [(0, 0), (0, 0), (0, -1), (3, -1)]
    if v >= 4:
        assert ps[0].leader_epoch == -1 and ps[1].leader_epoch == 0
    assert resp.topics[1].partitions[0].error_code == 3


def test_list_offsets_newer_leader_epoch_is_unknown():
    req = M.ListOffsetsRequest(topics=[M.ListOffsetsRequestListOffsetsTopic(name="orders", partitions=[
        M.ListOffsetsRequestListOffsetsPartition(partition_index=0, current_leader_epoch=5, timestamp=-1)])])
    assert N.list_offsets(req, 9, NODE).topics[0].partitions[0].error_code == E.UNKNOWN_LEADER_EPOCH


# ---------------------------------------------------------------------- Fetch
def _fetch_req(v, topics, max_wait=500, min_bytes=1):
    out = []
    for name, parts in topics:
        out.append(M.FetchRequestFetchTopic(
            topic=name if v < 13 else "",
            topic_id=(topic_id_for(name) if name != "?" else b"\x07" * 16) if v >= 13 else bytes(16),
            partitions=[M.FetchRequestFetchPartition(partition=p) for p in parts]))
    return M.FetchRequest(max_wait_ms=max_wait, min_bytes=min_bytes, topics=out)


@pytest.mark.parametrize("v", versions(M.FetchRequest))
def test_fetch_empty_records_and_hold(v):
    resp, hold = N.fetch(_fetch_req(v, [("orders", [0, 2])]), v, NODE)
    assert hold
    resp = roundtrip(resp, v)
    t = resp.responses[0]
    assert (t.topic if v < 13 else t.topic_id) == ("orders" if v < 13 else topic_id_for("orders"))
    for p in t.partitions:
        assert p.error_code == 0 and p.records == b"" and p.high_watermark == 0


@pytest.mark.parametrize("v", versions(M.FetchRequest))
def test_fetch_unknown_topic_or_partition_answers_at_once(v):
    name = "nope" if v < 13 else "?"
    resp, hold = N.fetch(_fetch_req(v, [("orders", [7]), (name, [0])]), v, NODE)
    assert not hold
    resp = roundtrip(resp, v)
    assert resp.responses[0].partitions[0].error_code == E.UNKNOWN_TOPIC_OR_PARTITION
    assert resp.responses[1].partitions[0].error_code == (
        E.UNKNOWN_TOPIC_ID if v >= 13 else E.UNKNOWN_TOPIC_OR_PARTITION)
    assert all(p.records == b"" for t in resp.responses for p in t.partitions)


def test_fetch_min_bytes_zero_is_not_held_and_sessions_are_refused():
    assert not N.fetch(_fetch_req(12, [("orders", [0])], min_bytes=0), 12, NODE)[1]
    req = _fetch_req(12, [("orders", [0])])
    req.session_id = 42
    req.session_epoch = 3
    resp, hold = N.fetch(req, 12, NODE)
    assert resp.error_code == E.FETCH_SESSION_ID_NOT_FOUND and not hold


# ---------------------------------------------------------------------- Produce
@pytest.mark.parametrize("v", versions(M.ProduceRequest))
def test_produce_is_refused_per_partition_with_a_message(v):
    req = M.ProduceRequest(acks=-1, topic_data=[M.ProduceRequestTopicProduceData(
        name="orders", partition_data=[M.ProduceRequestPartitionProduceData(index=i, records=b"x")
                                       for i in (0, 1)])])
    resp = roundtrip(N.produce(req, v, NODE), v)
    ps = resp.responses[0].partition_responses
    assert [(p.index, p.error_code) for p in ps] == [(0, 42), (1, 42)]
    if v >= 8:
        assert "stores no messages" in ps[0].error_message


def test_produce_acks_0_gets_no_response():
    assert N.produce(M.ProduceRequest(acks=0), 9, NODE) is None


# ---------------------------------------------------------------------- CreateTopics
def _ct(*topics, validate_only=False):
    return M.CreateTopicsRequest(topics=[M.CreateTopicsRequestCreatableTopic(
        name=n, num_partitions=p, replication_factor=rf) for n, p, rf in topics],
        validate_only=validate_only)


@pytest.mark.parametrize("v", versions(M.CreateTopicsRequest))
def test_create_topics(v):
    req = _ct(("new", 4, 1), ("orders", 3, 1), ("zero", 0, 1), ("bad name!", 1, 1),
              ("rf3", 1, 3), ("dflt", -1, -1))
    resp, cat = T.plan_create_topics(req, v, CAT, ALLOW)
    resp = roundtrip(resp, v)
    codes = {t.name: t.error_code for t in resp.topics}
    assert codes["new"] == 0
    assert codes["orders"] == E.TOPIC_ALREADY_EXISTS == 36
    assert codes["zero"] == E.INVALID_PARTITIONS == 37
    assert codes["bad name!"] == E.INVALID_TOPIC_EXCEPTION
    assert codes["rf3"] == E.INVALID_REPLICATION_FACTOR
    assert codes["dflt"] == (0 if v >= 4 else E.INVALID_PARTITIONS)
    assert cat.by_name["new"].partitions == 4
    assert cat.by_name["new"].topic_id == topic_id_for("new")
    if v >= 7:
        assert resp.topics[0].topic_id == topic_id_for("new")
    if v >= 5:
        assert resp.topics[0].num_partitions == 4 and resp.topics[0].replication_factor == 1


def test_create_topics_validate_only_and_duplicates():
    resp, cat = T.plan_create_topics(_ct(("x", 2, 1), validate_only=True), 7, CAT, ALLOW)
    assert resp.topics[0].error_code == 0 and cat is None
    resp, cat = T.plan_create_topics(_ct(("x", 2, 1), ("x", 2, 1)), 7, CAT, ALLOW)
    assert [t.error_code for t in resp.topics] == [42, 42] and cat is None


@pytest.mark.parametrize("name,ok", [("a.b_c-D9", True), ("", False), (".", False),
                                     ("..", False), ("x" * 249, True), ("x" * 250, False),
                                     ("é", False), ("a b", False)])
def test_topic_name_rules(name, ok):
    assert (validate_topic_name(name) is None) == ok


# ---------------------------------------------------------------------- generic errors
def test_top_level_error_response_only_where_the_version_has_one():
    r = N.top_level_error_response(11, 5, 42, "bad")
    assert r.error_code == 42
    roundtrip(r, 5)
    assert N.top_level_error_response(8, 8, 42) is None          # OffsetCommit: per partition
    assert N.top_level_error_response(3, 12, 42) is None         # Metadata < v13
    assert N.top_level_error_response(3, 13, 42).error_code == 42
    assert N.top_level_error_response(10, 4, 42) is None         # FindCoordinator v4+: per key
    r = N.top_level_error_response(68, 1, 42, "why")
    assert roundtrip(r, 1).error_message == "why"


# ---------------------------------------------------------------------- cluster mode
class FakeView:
    """A cluster view as server/node.py reads it (cluster/node.py ClusterNode's shape)."""

    def __init__(self, node_id, brokers, owners, controller, shard_count=50):
        self.node_id = node_id
        self.shard_count = shard_count
        self._brokers = brokers
        self._owners = owners               # group id -> owner, turned into shard -> owner
        self._controller = controller

    def brokers(self):
        return list(self._brokers)

    def owner(self, shard):
        return {shard_for(g, self.shard_count): o for g, o in self._owners.items()}.get(shard)

    def controller_id(self):
        return self._controller


LIVE = [(1, "n1.example", 9101), (2, "n2.example", 9102), (4, "n4.example", 9104)]
# g-on-4 is owned by node 4, g-moving by nobody, g-dead by node 3 (not live).
OWNERS = {"g-on-4": 4, "g-on-1": 1, "g-moving": None, "g-dead": 3}
VIEW = FakeView(2, LIVE, OWNERS, controller=1)
CNODE = N.NodeState("n2.example", 9102, "cluster-xyz", lambda: CAT, RANGES, cluster=VIEW)


def test_distinct_shards_for_the_cluster_groups():
    # the fake view maps groups to shards: they must not collide
    assert len({shard_for(g, 50) for g in OWNERS}) == len(OWNERS)


@pytest.mark.parametrize("v", versions(M.MetadataRequest))
def test_cluster_metadata_lists_the_live_nodes_and_the_controller_leads(v):
    resp = roundtrip(N.metadata(M.MetadataRequest(topics=[] if v == 0 else None), v, CNODE), v)
    assert [(b.node_id, b.host, b.port) for b in resp.brokers] == LIVE
    if v >= 1:
        assert resp.controller_id == 1
    parts = [p for t in resp.topics for p in t.partitions]
    assert len(parts) == 4 and all(p.leader_id == 1 and p.replica_nodes == [1]
                                   and p.isr_nodes == [1] for p in parts)


def test_cluster_metadata_by_name_leads_from_the_controller_too():
    req = M.MetadataRequest(topics=[M.MetadataRequestTopic(name="payments")])
    (t,) = roundtrip(N.metadata(req, 12, CNODE), 12).topics
    assert [p.leader_id for p in t.partitions] == [1]


def test_a_view_that_read_no_node_yet_lists_this_node():
    node = N.NodeState("me.example", 9107, "c", lambda: CAT, RANGES,
                       cluster=FakeView(7, [], {}, controller=7))
    resp = roundtrip(N.metadata(M.MetadataRequest(topics=None), 12, node), 12)
    assert [(b.node_id, b.host, b.port) for b in resp.brokers] == [(7, "me.example", 9107)]
    assert resp.controller_id == 7


@pytest.mark.parametrize("v", versions(M.DescribeClusterRequest))
def test_cluster_describe_cluster_lists_the_live_nodes(v):
    req = M.DescribeClusterRequest(include_cluster_authorized_operations=False,
                                   endpoint_type=1)
    resp = roundtrip(N.describe_cluster(req, v, CNODE), v)
    assert resp.controller_id == 1
    assert [(b.broker_id, b.host, b.port) for b in resp.brokers] == LIVE


@pytest.mark.parametrize("v", range(0, 4))
def test_cluster_find_coordinator_names_the_owner_of_the_group_shard(v):
    resp = roundtrip(N.find_coordinator(M.FindCoordinatorRequest(key="g-on-4"), v, CNODE), v)
    assert (resp.error_code, resp.node_id, resp.host, resp.port) == (0, 4, "n4.example", 9104)
    for g in ("g-moving", "g-dead"):
        resp = roundtrip(N.find_coordinator(M.FindCoordinatorRequest(key=g), v, CNODE), v)
        assert (resp.error_code, resp.node_id, resp.host, resp.port) == (
            E.COORDINATOR_NOT_AVAILABLE, -1, "", -1)
        if v >= 1:
            assert "moving" in resp.error_message


@pytest.mark.parametrize("v", [4, 5, 6])
def test_cluster_find_coordinator_batched_answers_each_key(v):
    keys = ["g-on-4", "g-moving", "g-on-1", "g-dead"]
    req = M.FindCoordinatorRequest(coordinator_keys=keys, key_type=0)
    resp = roundtrip(N.find_coordinator(req, v, CNODE), v)
    got = [(c.key, c.error_code, c.node_id, c.host, c.port) for c in resp.coordinators]
    na = int(E.COORDINATOR_NOT_AVAILABLE)
    assert got == [("g-on-4", 0, 4, "n4.example", 9104), ("g-moving", na, -1, "", -1),
                   ("g-on-1", 0, 1, "n1.example", 9101), ("g-dead", na, -1, "", -1)]
    assert "no node owns shard %d" % shard_for("g-moving", 50) in resp.coordinators[1].error_message
    assert "node 3, is not live" in resp.coordinators[3].error_message
    # the group key type only: transactions are still refused, not looked up
    req = M.FindCoordinatorRequest(coordinator_keys=["tx"], key_type=1)
    assert roundtrip(N.find_coordinator(req, v, CNODE), v).coordinators[0].error_code == \
        E.INVALID_REQUEST


def test_file_mode_has_no_cluster_view():
    assert NODE.cluster is None and NODE.brokers() == [(0, "broker.example", 9999)]
    assert NODE.controller_id() == 0


@pytest.mark.parametrize("v", [0, 1, 9, 12, 13])
def test_cluster_metadata_from_the_cache_follows_the_live_brokers(v):
    # The cache cuts answers from node.metadata's: in cluster mode every piece (brokers,
    # controller, every partition's leader) must be of the brokers live now, also after a
    # node joined or the controller moved.
    import asyncio
    from groupcoord.server.metadata_cache import MetadataCache, response_frame
    view = FakeView(2, list(LIVE), OWNERS, controller=1)
    node = N.NodeState("n2.example", 9102, "cluster-xyz", lambda: CAT, RANGES, cluster=view)
    loop = asyncio.new_event_loop()
    try:
        cache = MetadataCache(node, loop)
        req = M.MetadataRequest(topics=[] if v == 0 else None)
        for brokers, controller in ((list(LIVE), 1),
                                    (LIVE + [(5, "n5.example", 9105)], 1),
                                    (LIVE[1:], 2)):
            view._brokers, view._controller = brokers, controller
            got = cache.answer(req, v)
            assert not isinstance(got, asyncio.Future)       # a small catalog: inline
            frame = b"".join(response_frame(got, v, 5))
            assert frame == bytes(P.encode_response_frame(N.metadata(req, v, node), v, 5))
    finally:
        loop.close()
