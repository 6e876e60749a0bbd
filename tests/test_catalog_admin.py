"""The topic catalog's admin APIs (issue 17): DescribeCluster, CreatePartitions and
DeleteTopics as node.py plans (Kafka's errors, ValidateOnly, the --allow-* gates and catalog
limits) at every version; their persistence, failure and TimeoutMs (server/catalog.py); what a
catalog change does to groups (groups/shard.py ``on_catalog_change`` through the
runtime's ``Coordinator.set_topics``): a KIP-848 group gets new partitions and loses deleted
ones, a classic group is told to rebalance, a deleted topic's offsets go; and Produce's answer.
Harness tests check purity and (the ``coord`` fixture) replay equality."""
import asyncio
import json
import types

import pytest

import groupcoord.protocol as P
from groupcoord.groups.classic.group import STATE_PREPARING, STATE_STABLE
from groupcoord.groups.config import ShardConfig
from groupcoord.groups.shard import on_catalog_change
from groupcoord.groups.topics import (Topic, TopicCatalog, catalog_changes,
                                           deleted_topic_offsets, topic_id_for)
from groupcoord.protocol import embedded
from groupcoord.protocol.error_codes import ErrorCode as E
from groupcoord.runtime.config import RuntimeConfig
from groupcoord.runtime.shards import ShardSet
from groupcoord.server import catalog as C
from groupcoord.server import node as N
from groupcoord.server import topic_admin as T

M = P.messages
CAT = TopicCatalog.of(orders=3, payments=1)
ALLOW = T.CatalogLimits(allow_create_topics=True, allow_delete_topics=True)
RANGES = N.node_api_ranges(P.supported_versions(), lambda k: False)
NODE = N.NodeState("broker.example", 9999, "cluster-xyz", lambda: CAT, RANGES)
ZERO = M.ZERO_UUID
BOUND_S = 30.0


def versions(cls):
    lo, hi = cls.VERSIONS
    return range(lo, hi + 1)


def roundtrip(resp, version):
    """Encode + decode at version (proves the response is valid on the wire)."""
    return P.decode(type(resp), P.encode(resp, version), version)


def run(coro):
    async def bounded():
        return await asyncio.wait_for(coro, BOUND_S)
    return asyncio.run(bounded())


# ---------------------------------------------------------------------- DescribeCluster
@pytest.mark.parametrize("v", versions(M.DescribeClusterRequest))
@pytest.mark.parametrize("ops", [False, True])
def test_describe_cluster_is_this_node(v, ops):
    req = M.DescribeClusterRequest(include_cluster_authorized_operations=ops,
                                   include_fenced_brokers=True)
    r = roundtrip(N.describe_cluster(req, v, NODE), v)
    assert (r.error_code, r.error_message) == (0, None)
    assert r.cluster_id == "cluster-xyz" and r.controller_id == 0
    assert [(b.broker_id, b.host, b.port, b.rack, b.is_fenced) for b in r.brokers] == \
        [(0, "broker.example", 9999, None, False)]
    if ops:
        # Kafka without an authorizer: every cluster operation (AclEntry.supportedOperations
        # of CLUSTER: CREATE, ALTER, DESCRIBE, CLUSTER_ACTION, DESCRIBE/ALTER_CONFIGS,
        # IDEMPOTENT_WRITE)
        assert r.cluster_authorized_operations == sum(1 << op for op in (5, 7, 8, 9, 10, 11,
                                                                         12))
    else:
        assert r.cluster_authorized_operations == -2147483648
    if v >= 1:
        assert r.endpoint_type == 1


@pytest.mark.parametrize("v", [1, 2])
def test_describe_cluster_is_a_broker_endpoint(v):
    r = roundtrip(N.describe_cluster(M.DescribeClusterRequest(endpoint_type=2), v, NODE), v)
    assert r.error_code == E.MISMATCHED_ENDPOINT_TYPE == 114 and r.brokers == []
    r = roundtrip(N.describe_cluster(M.DescribeClusterRequest(endpoint_type=7), v, NODE), v)
    assert r.error_code == E.UNSUPPORTED_ENDPOINT_TYPE == 115
    assert r.error_message == "Unsupported endpoint type 7"


def test_the_admin_apis_are_advertised():
    keys = {a.api_key: (a.min_version, a.max_version)
            for a in N.api_versions(None, 3, NODE).api_keys}
    assert keys[60] == (0, 2) and keys[37] == (0, 3) and keys[20] == (1, 6)


# ---------------------------------------------------------------------- Produce
@pytest.mark.parametrize("v", versions(M.ProduceRequest))
def test_produce_says_why_where_the_version_can(v):
    req = M.ProduceRequest(acks=1, topic_data=[M.ProduceRequestTopicProduceData(
        name="orders", partition_data=[M.ProduceRequestPartitionProduceData(index=0,
                                                                            records=b"x")])])
    p = roundtrip(N.produce(req, v, NODE), v).responses[0].partition_responses[0]
    assert p.error_code == E.INVALID_REQUEST and not E.INVALID_REQUEST.retriable
    assert p.base_offset == -1
    assert p.error_message == ("groupcoord is a group coordinator: it stores no messages"
                               if v >= 8 else None)


# ---------------------------------------------------------------------- CreatePartitions
def _cp(*topics, validate_only=False):
    """topics: (name, count) or (name, count, [broker ids per new partition])."""
    return M.CreatePartitionsRequest(topics=[M.CreatePartitionsRequestCreatePartitionsTopic(
        name=t[0], count=t[1], assignments=None if len(t) < 3 else [
            M.CreatePartitionsRequestCreatePartitionsAssignment(broker_ids=b) for b in t[2]])
        for t in topics], timeout_ms=30_000, validate_only=validate_only)


def _results(resp):
    return [(r.name, r.error_code, r.error_message) for r in resp.results]


@pytest.mark.parametrize("v", versions(M.CreatePartitionsRequest))
def test_create_partitions_grows_topics_with_kafkas_errors(v):
    cat = TopicCatalog.of(orders=3, payments=1, audit=2, logs=1)
    req = _cp(("orders", 5), ("payments", 1), ("audit", 1), ("nope", 4),
              ("logs", 3, [[0], [0]]))
    resp, new = T.plan_create_partitions(req, v, cat, ALLOW)
    assert _results(roundtrip(resp, v)) == [
        ("orders", 0, None),
        ("payments", E.INVALID_PARTITIONS, "Topic already has 1 partition(s)."),
        ("audit", E.INVALID_PARTITIONS,
         "The topic audit currently has 2 partition(s); 1 would not be an increase."),
        ("nope", E.UNKNOWN_TOPIC_OR_PARTITION, "topic 'nope' does not exist"),
        ("logs", 0, None)]
    assert {t.name: t.partitions for t in new} == {"orders": 5, "payments": 1, "audit": 2,
                                                    "logs": 3}
    # a topic keeps its id when it grows
    assert all(t.topic_id == topic_id_for(t.name) for t in new)


def test_create_partitions_assignments_must_be_one_replica_on_this_node_per_new_partition():
    codes = {}
    for name, assign in (("count", [[0]]), ("broker", [[1], [0]]), ("replicas", [[0, 0], [0]]),
                         ("empty", [[], [0]])):
        resp, new = T.plan_create_partitions(_cp(("orders", 5, assign)), 3, CAT, ALLOW)
        codes[name] = resp.results[0].error_code
        assert new is None
    assert set(codes.values()) == {E.INVALID_REPLICA_ASSIGNMENT}
    resp, _ = T.plan_create_partitions(_cp(("orders", 5, [[0]])), 3, CAT, ALLOW)
    assert resp.results[0].error_message == ("Attempted to add 2 additional partition(s), "
                                             "but only 1 assignment(s) were specified.")


def test_create_partitions_duplicates_validate_only_and_per_topic_bound():
    resp, new = T.plan_create_partitions(_cp(("orders", 4), ("payments", 2), ("orders", 5)), 3,
                                         CAT, ALLOW)
    assert _results(resp) == [("orders", E.INVALID_REQUEST, "Duplicate topic name."),
                              ("payments", 0, None)]
    assert new.by_name["orders"].partitions == 3 and new.by_name["payments"].partitions == 2
    resp, new = T.plan_create_partitions(_cp(("orders", 4), validate_only=True), 3, CAT,
                                         ALLOW)
    assert _results(resp) == [("orders", 0, None)] and new is None
    resp, new = T.plan_create_partitions(_cp(("orders", T.MAX_PARTITIONS + 1)), 3, CAT,
                                         ALLOW)
    assert resp.results[0].error_code == E.INVALID_PARTITIONS and new is None


def test_create_partitions_is_gated_and_bounded_as_create_topics():
    resp, new = T.plan_create_partitions(_cp(("orders", 4)), 3, CAT, T.CatalogLimits())
    assert _results(resp) == [("orders", E.POLICY_VIOLATION, "CreatePartitions is disabled on "
                               "this node (--allow-create-topics)")] and new is None
    limits = T.CatalogLimits(allow_create_topics=True, max_partitions=6)
    resp, new = T.plan_create_partitions(_cp(("orders", 5), ("payments", 3)), 3, CAT, limits)
    # 3 + 1 partitions now: orders to 5 fits (6), payments to 3 would make 8
    assert [r.error_code for r in resp.results] == [0, E.POLICY_VIOLATION]
    assert "--max-partitions" in resp.results[1].error_message
    assert new.by_name["orders"].partitions == 5 and new.by_name["payments"].partitions == 1


# ---------------------------------------------------------------------- DeleteTopics
def _dt(v, *topics):
    """topics: names, or (name or None, topic id) pairs (v6)."""
    if v >= 6:
        return M.DeleteTopicsRequest(topics=[
            M.DeleteTopicsRequestDeleteTopicState(name=t, topic_id=ZERO) if isinstance(t, str)
            else M.DeleteTopicsRequestDeleteTopicState(name=t[0], topic_id=t[1])
            for t in topics], timeout_ms=30_000)
    return M.DeleteTopicsRequest(topic_names=list(topics), timeout_ms=30_000)


@pytest.mark.parametrize("v", versions(M.DeleteTopicsRequest))
def test_delete_topics_by_name(v):
    cat = TopicCatalog.of(orders=3, payments=1, audit=2)
    resp, new = T.plan_delete_topics(_dt(v, "orders", "nope", "audit", "audit"), v, cat, ALLOW)
    r = roundtrip(resp, v)
    got = [(x.name, x.error_code) for x in r.responses]
    assert got == [("orders", 0), ("nope", E.UNKNOWN_TOPIC_OR_PARTITION),
                   ("audit", E.INVALID_REQUEST)]
    if v >= 5:
        assert r.responses[2].error_message == "Duplicate topic name."
    if v >= 6:
        assert r.responses[0].topic_id == topic_id_for("orders")
    assert sorted(new.by_name) == ["audit", "payments"]
    assert new.by_name["audit"] == cat.by_name["audit"]


def test_delete_topics_by_id_v6():
    cat = TopicCatalog.of(orders=3, payments=1, audit=2)
    oid, pid, aid = (topic_id_for(n) for n in ("orders", "payments", "audit"))
    unknown = topic_id_for("nope")
    resp, new = T.plan_delete_topics(_dt(6, (None, oid), (None, unknown), ("payments", pid),
                                         (None, ZERO), "audit", (None, aid)), 6, cat, ALLOW)
    got = [(x.name, x.topic_id, x.error_code, x.error_message)
           for x in roundtrip(resp, 6).responses]
    assert got == [
        ("orders", oid, 0, None),
        (None, unknown, E.UNKNOWN_TOPIC_ID, "no topic has this id"),
        ("payments", pid, E.INVALID_REQUEST, "You may not specify both topic name and topic "
                                             "id."),
        (None, ZERO, E.INVALID_REQUEST, "Neither topic name nor id were specified."),
        ("audit", aid, E.INVALID_REQUEST, "The provided topic name maps to an ID that was "
                                          "already supplied.")]
    # the name and id of audit cancel each other: only orders is deleted
    assert sorted(new.by_name) == ["audit", "payments"]


@pytest.mark.parametrize("v", versions(M.DeleteTopicsRequest))
def test_delete_topics_is_off_unless_allowed(v):
    for limits in (T.CatalogLimits(), T.CatalogLimits(allow_create_topics=True)):
        resp, new = T.plan_delete_topics(_dt(v, "orders", "nope"), v, CAT, limits)
        r = roundtrip(resp, v)
        # Kafka: TopicDeletionDisabledException from v3, InvalidRequestException before
        want = E.TOPIC_DELETION_DISABLED if v >= 3 else E.INVALID_REQUEST
        assert [(x.name, x.error_code) for x in r.responses] == [("orders", want),
                                                                 ("nope", want)]
        assert new is None
        if v >= 5:
            assert "--allow-delete-topics" in r.responses[0].error_message


@pytest.mark.parametrize("api,cls", [(N.CREATE_PARTITIONS, M.CreatePartitionsRequest),
                                     (N.DELETE_TOPICS, M.DeleteTopicsRequest)])
def test_timed_out_response_at_every_version(api, cls):
    for v in versions(cls):
        req = _cp(("x", 2)) if api == N.CREATE_PARTITIONS else _dt(v, "x")
        r = roundtrip(T.timed_out_response(api, req, v), v)
        results = r.results if api == N.CREATE_PARTITIONS else r.responses
        assert [(x.name, x.error_code) for x in results] == [("x", E.REQUEST_TIMED_OUT)]


# ---------------------------------------------------------------------- catalog changes
def test_catalog_changes():
    old = TopicCatalog([Topic("a", topic_id_for("a"), 2), Topic("b", topic_id_for("b"), 1),
                        Topic("c", topic_id_for("c"), 1), Topic("d", topic_id_for("d"), 4)])
    new = TopicCatalog([Topic("a", topic_id_for("a"), 3), Topic("c", topic_id_for("c"), 1),
                        Topic("d", topic_id_for("other"), 4), Topic("e", topic_id_for("e"), 1)])
    changed, deleted = catalog_changes(old, new)
    # a grew, b is gone, d is another topic under the same name, e is new; c is unchanged
    assert changed == {"a", "b", "d", "e"} and deleted == {"b", "d"}
    assert catalog_changes(old, old) == (frozenset(), frozenset())


LONG = 600_000
DELAY = 3_000
CLASSIC = ShardConfig(group_initial_rebalance_delay_ms=DELAY)


def _classic_group(h, group, topics, n=2, ptype="consumer"):
    """n members join in one initial-delay window (JoinGroup v3: no MEMBER_ID_REQUIRED) and
    sync: a Stable classic group whose members subscribe to ``topics``."""
    md = embedded.encode_subscription(M.ConsumerProtocolSubscription(topics=list(topics)))
    parks = [h.send(M.JoinGroupRequest(group_id=group, session_timeout_ms=LONG,
                                       rebalance_timeout_ms=10_000, member_id="",
                                       protocol_type=ptype, protocols=[
                                           M.JoinGroupRequestProtocol(name="range",
                                                                      metadata=md)]), 3)
             for _ in range(n)]
    for _ in range(10):
        if all(h.answered(p) for p in parks):
            break
        h.advance(DELAY)
    joined = [h.completion(p) for p in parks]
    assert all(r.error_code == 0 for r in joined), joined
    gen, leader = joined[0].generation_id, joined[0].leader
    followers = [h.send(M.SyncGroupRequest(group_id=group, generation_id=gen,
                                           member_id=r.member_id), 3)
                 for r in joined if r.member_id != leader]
    r = h.send(M.SyncGroupRequest(group_id=group, generation_id=gen, member_id=leader,
                                  assignments=[M.SyncGroupRequestAssignment(
                                      member_id=x.member_id, assignment=b"")
                                      for x in joined]), 3)
    assert r.error_code == 0 and all(h.completion(f).error_code == 0 for f in followers)
    assert h.shard.groups[group].state == STATE_STABLE
    return [r.member_id for r in joined], gen


def _heartbeat(h, group, member, gen):
    return h.send(M.HeartbeatRequest(group_id=group, generation_id=gen, member_id=member),
                  3).error_code


def _apply_change(h, old, new):
    """What the runtime does on a catalog change: update_topics, then on_catalog_change's
    Results, each checked for purity."""
    h.update_topics(new)
    results = h._pure(lambda: on_catalog_change(h.shard, old, new, h.now))
    for res in results:
        h._apply(res)
    return results


def test_classic_groups_subscribed_to_a_changed_topic_rebalance(coord):
    old = TopicCatalog.of(orders=6, payments=2)
    h = coord(config=CLASSIC, topics=old)
    a_ids, a_gen = _classic_group(h, "a", ["orders"])
    b_ids, b_gen = _classic_group(h, "b", ["payments"])
    c_ids, c_gen = _classic_group(h, "c", ["orders"], ptype="connect")
    new = old.with_topics(("orders", 9))
    results = _apply_change(h, old, new)
    assert len(results) == 1
    assert h.shard.groups["a"].state == STATE_PREPARING
    assert [_heartbeat(h, "a", x, a_gen) for x in a_ids] == [E.REBALANCE_IN_PROGRESS] * 2
    # not subscribed to it, or not a consumer group: untouched
    assert [_heartbeat(h, "b", x, b_gen) for x in b_ids] == [0, 0]
    assert [_heartbeat(h, "c", x, c_gen) for x in c_ids] == [0, 0]
    # a topic created that a member subscribes to, and a deletion, do the same
    h2 = coord(config=CLASSIC, topics=old)
    ids, gen = _classic_group(h2, "d", ["later", "payments"], n=1)
    assert len(_apply_change(h2, old, old.with_topics(("later", 1)))) == 1
    assert _heartbeat(h2, "d", ids[0], gen) == E.REBALANCE_IN_PROGRESS


def test_a_classic_group_rebalancing_already_is_left_alone(coord):
    old = TopicCatalog.of(orders=6)
    h = coord(config=CLASSIC, topics=old)
    ids, gen = _classic_group(h, "a", ["orders"])
    assert len(_apply_change(h, old, old.with_topics(("orders", 7)))) == 1
    cur = h.shard.topics
    assert _apply_change(h, cur, cur.with_topics(("orders", 8))) == []


def _commit(h, group, topic, parts):
    r = h.send(M.OffsetCommitRequest(group_id=group, generation_id_or_member_epoch=-1,
                                     member_id="", topics=[M.OffsetCommitRequestTopic(
                                         name=topic, partitions=[
                                             M.OffsetCommitRequestPartition(
                                                 partition_index=p, committed_offset=10 + p)
                                             for p in parts])]), 8)
    assert all(p.error_code == 0 for t in r.topics for p in t.partitions)


def _committed(h, group):
    return {tp: v.offset for tp, v in h.shard.offsets.get(group, {}).items()}


def test_a_deleted_topics_offsets_are_deleted_in_every_group(coord):
    old = TopicCatalog.of(orders=3, payments=2)
    h = coord(topics=old)
    _commit(h, "g1", "orders", [0, 1, 2])
    _commit(h, "g1", "payments", [0])
    _commit(h, "g2", "orders", [1])
    _commit(h, "g3", "elsewhere", [0])         # commits for any topic name are accepted
    new = TopicCatalog(t for t in old if t.name != "orders")
    results = _apply_change(h, old, new)
    assert [len(r.records) for r in results] == [4]
    assert all(rec.value is None for rec in results[0].records)
    assert _committed(h, "g1") == {("payments", 0): 10}
    assert _committed(h, "g2") == {}
    assert _committed(h, "g3") == {("elsewhere", 0): 10}
    # the groups stay (an empty group without offsets goes with offsets retention)
    assert {"g1", "g2", "g3"} <= set(h.shard.groups)
    # growing a topic deletes nothing
    assert _apply_change(h, new, new.with_topics(("payments", 3))) == []


def test_offset_tombstones_come_in_batches_under_message_max_bytes(coord):
    old = TopicCatalog.of(orders=200)
    h = coord(topics=old)
    for g in ("g1", "g2"):
        _commit(h, g, "orders", range(200))
    budget = 4_000
    results = deleted_topic_offsets(h.shard, {"orders"}, budget)
    assert len(results) > 2
    for res in results:
        size = sum(len(b) for rec in res.records for b in (rec.key.group.encode(),
                                                           rec.key.topic.encode()))
        assert size + 64 * len(res.records) <= budget // 2
    keys = [(r.key.group, r.key.partition) for res in results for r in res.records]
    assert sorted(keys) == sorted((g, p) for g in ("g1", "g2") for p in range(200))
    for res in results:
        h._apply(res)
    assert h.shard.offsets == {}


# ---------------------------------------------------------------------- the runtime
def _hb(group, member, epoch, topics, owned=()):
    kw = dict(group_id=group, member_id=member, member_epoch=epoch,
              topic_partitions=[M.ConsumerGroupHeartbeatRequestTopicPartitions(
                  topic_id=t, partitions=[p]) for t, p in owned])
    if epoch == 0:
        kw.update(rebalance_timeout_ms=30_000, subscribed_topic_names=list(topics))
    return M.ConsumerGroupHeartbeatRequest(**kw)


async def _converge(coord, group, members, topics, state=None, rounds=12):
    """Heartbeat every member until nobody's assignment changes; -> member -> (epoch, parts)."""
    state = dict(state or {mid: (0, []) for mid in members})
    for _ in range(rounds):
        changed = False
        for mid in members:
            epoch, parts = state[mid]
            r = await coord.submit(_hb(group, mid, epoch, topics, parts), 1)
            assert r.error_code == 0, r
            a = r.assignment
            new = None if a is None else sorted(
                (t.topic_id, p) for t in a.topic_partitions for p in t.partitions)
            if r.member_epoch != epoch or (new is not None and new != parts):
                changed = True
                state[mid] = (r.member_epoch, parts if new is None else new)
        if not changed:
            return state
    raise AssertionError("no convergence: %r" % state)


def _fake_server(loop, coord, store, limits=ALLOW):
    """What catalog.create_partitions / delete_topics use of the Server."""
    return types.SimpleNamespace(loop=loop, shards=coord, store=store,
                                 config=types.SimpleNamespace(catalog_limits=limits),
                                 _topics_lock=asyncio.Lock())


def _make(tmp_path, topics):
    return ShardSet(RuntimeConfig(data_dir=str(tmp_path / "shards"), shards=2,
                                  shard_config=ShardConfig(
                                      consumer_assignment_interval_ms=0)), topics=topics)


def _fetch(group, topic, parts):
    return M.OffsetFetchRequest(group_id=group, topics=[M.OffsetFetchRequestTopic(
        name=topic, partition_indexes=list(parts))])


def test_partitions_grow_durably_and_a_consumer_group_takes_them(tmp_path):
    store = C.CatalogStore(str(tmp_path))
    store.save(TopicCatalog.of(orders=6))

    async def go():
        coord = _make(tmp_path, store.load())
        await coord.start()
        srv = _fake_server(asyncio.get_running_loop(), coord, store)
        members = ["m1", "m2", "m3"]
        st = await _converge(coord, "cg", members, ["orders"])
        assert sorted(len(p) for _, p in st.values()) == [2, 2, 2]
        resp = await C.create_partitions(srv, _cp(("orders", 9)), 3, srv.loop.time())
        # answered after topics.json holds it
        on_disk = json.loads((tmp_path / "topics.json").read_text())
        st = await _converge(coord, "cg", members, ["orders"], st)
        await coord.close()
        return resp, on_disk, st

    resp, on_disk, st = run(go())
    assert _results(resp) == [("orders", 0, None)]
    assert on_disk["topics"] == [{"name": "orders", "partitions": 9}]
    held = [tp for _, parts in st.values() for tp in parts]
    assert sorted(len(p) for _, p in st.values()) == [3, 3, 3]
    assert sorted(held) == sorted((topic_id_for("orders"), p) for p in range(9))
    assert C.CatalogStore(str(tmp_path)).load().by_name["orders"].partitions == 9


def test_a_deleted_topic_is_revoked_and_its_offsets_stay_deleted_after_restart(tmp_path):
    store = C.CatalogStore(str(tmp_path))
    store.save(TopicCatalog.of(orders=4, payments=2))

    async def go():
        coord = _make(tmp_path, store.load())
        await coord.start()
        srv = _fake_server(asyncio.get_running_loop(), coord, store)
        st = await _converge(coord, "cg", ["m1", "m2"], ["orders", "payments"])
        for g in ("cg-offsets", "other"):
            r = await coord.submit(M.OffsetCommitRequest(
                group_id=g, generation_id_or_member_epoch=-1, member_id="",
                topics=[M.OffsetCommitRequestTopic(name=t, partitions=[
                    M.OffsetCommitRequestPartition(partition_index=0, committed_offset=5)])
                    for t in ("orders", "payments")]), 8)
            assert all(p.error_code == 0 for t in r.topics for p in t.partitions)
        resp = await C.delete_topics(srv, _dt(6, "orders"), 6, srv.loop.time())
        st = await _converge(coord, "cg", ["m1", "m2"], ["orders", "payments"], st)
        await coord.close()
        # restart on what is on disk
        coord = _make(tmp_path, C.CatalogStore(str(tmp_path)).load())
        await coord.start()
        after = {}
        for g in ("cg-offsets", "other"):
            r = await coord.submit(_fetch(g, "orders", [0]), 5)
            r2 = await coord.submit(_fetch(g, "payments", [0]), 5)
            after[g] = (r.topics[0].partitions[0].committed_offset,
                        r2.topics[0].partitions[0].committed_offset)
        topics = sorted(coord.topics.by_name)
        await coord.close()
        return resp, st, after, topics

    resp, st, after, topics = run(go())
    assert [(r.name, r.error_code) for r in resp.responses] == [("orders", 0)]
    held = sorted(tp for _, parts in st.values() for tp in parts)
    assert held == [(topic_id_for("payments"), 0), (topic_id_for("payments"), 1)]
    assert after == {"cg-offsets": (-1, 5), "other": (-1, 5)}
    assert topics == ["payments"]


def test_a_change_whose_write_fails_is_refused_and_changes_nothing(tmp_path):
    store = C.CatalogStore(str(tmp_path))
    store.save(TopicCatalog.of(orders=2))
    before = (tmp_path / "topics.json").read_bytes()

    def broken(_catalog):
        raise OSError(28, "No space left on device")

    async def go():
        coord = _make(tmp_path, store.load())
        await coord.start()
        srv = _fake_server(asyncio.get_running_loop(), coord, store)
        store.save = broken
        r1 = await C.create_partitions(srv, _cp(("orders", 4), ("nope", 2)), 3, srv.loop.time())
        r2 = await C.delete_topics(srv, _dt(4, "orders"), 4, srv.loop.time())
        topics = coord.topics
        await coord.close()
        return r1, r2, topics

    r1, r2, topics = run(go())
    assert [(r.name, r.error_code) for r in r1.results] == [
        ("orders", E.KAFKA_STORAGE_ERROR), ("nope", E.UNKNOWN_TOPIC_OR_PARTITION)]
    assert "No space left on device" in r1.results[0].error_message
    assert [(r.name, r.error_code) for r in r2.responses] == [("orders", E.KAFKA_STORAGE_ERROR)]
    assert topics.by_name["orders"].partitions == 2
    assert (tmp_path / "topics.json").read_bytes() == before


def test_a_change_waiting_longer_than_its_timeout_is_refused(tmp_path):
    store = C.CatalogStore(str(tmp_path))
    store.save(TopicCatalog.of(orders=2))

    async def go():
        coord = _make(tmp_path, store.load())
        await coord.start()
        loop = asyncio.get_running_loop()
        srv = _fake_server(loop, coord, store)
        await srv._topics_lock.acquire()         # another change is under way
        short = _cp(("orders", 3))
        short.timeout_ms = 50
        r_short = await C.create_partitions(srv, short, 3, loop.time())
        r_zero = await C.delete_topics(srv, M.DeleteTopicsRequest(topic_names=["orders"],
                                                                   timeout_ms=0),
                                       4, loop.time())
        # one that may wait long enough runs once the other change ends
        waiting = asyncio.ensure_future(C.create_partitions(srv, _cp(("orders", 4)), 3,
                                                            loop.time()))
        await asyncio.sleep(0)
        assert not waiting.done()
        srv._topics_lock.release()
        r_long = await waiting
        # a free lock never makes a request wait, whatever its timeout
        free = _cp(("orders", 5))
        free.timeout_ms = 0
        r_free = await C.create_partitions(srv, free, 3, loop.time())
        topics = coord.topics
        await coord.close()
        return r_short, r_zero, r_long, r_free, topics

    r_short, r_zero, r_long, r_free, topics = run(go())
    assert [r.error_code for r in r_short.results] == [E.REQUEST_TIMED_OUT]
    assert [r.error_code for r in r_zero.responses] == [E.REQUEST_TIMED_OUT]
    assert [r.error_code for r in r_long.results] == [0]
    assert [r.error_code for r in r_free.results] == [0]
    assert topics.by_name["orders"].partitions == 5
    assert C.CatalogStore(str(tmp_path)).load().by_name["orders"].partitions == 5


# ---------------------------------------------------------------------- the command line
def test_a_restart_with_the_same_command_line_keeps_client_changes(tmp_path):
    """topics.json records the specs of the last start ("given"): given again unchanged,
    they are not applied again, so a partition count a client raised is no "decrease" and a
    topic a client deleted is not created again; a changed spec is applied as before."""
    store = C.CatalogStore(str(tmp_path))
    given = [C.TopicSpec("a", 2), C.TopicSpec("c", 3)]
    cat, changed = C.merge_topics(store.load(), given, store.given)
    store.save(cat, given={s.name: s.partitions for s in given})
    # clients: a raised to 4, c deleted
    store.save(TopicCatalog.of(a=4))
    store = C.CatalogStore(str(tmp_path))
    cat, changed = C.merge_topics(store.load(), given, store.given)
    assert not changed and {t.name: t.partitions for t in cat} == {"a": 4}
    # what the operator changes is applied (and a decrease is still refused)
    cat, changed = C.merge_topics(store.load(), [C.TopicSpec("a", 6), C.TopicSpec("c", 1)],
                                  store.given)
    assert changed and {t.name: t.partitions for t in cat} == {"a": 6, "c": 1}
    with pytest.raises(C.CatalogError, match="cannot be removed"):
        C.merge_topics(store.load(), [C.TopicSpec("a", 3)], store.given)
    # a file without "given" (written before it existed) reads as given nothing
    raw = json.loads((tmp_path / "topics.json").read_text())
    assert raw["given"] == [{"name": "a", "partitions": 2}, {"name": "c", "partitions": 3}]
    del raw["given"]
    (tmp_path / "topics.json").write_text(json.dumps(raw))
    store = C.CatalogStore(str(tmp_path))
    assert store.load().by_name["a"].partitions == 4 and store.given == {}
