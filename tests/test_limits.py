"""Limits (groups/limits.py, docs/server.md "Limits"): every bound refuses with its error
and writes nothing; the catalog bounds of CreateTopics and startup; the settings' names."""
import subprocess
import sys

import msgspec
import pytest

from groupcoord.groups.config import ShardConfig
from groupcoord.groups.topics import TopicCatalog
from groupcoord.protocol import messages as m
from groupcoord.protocol.error_codes import ErrorCode as E
from groupcoord.server import topic_admin as T
from groupcoord.server.catalog import CatalogError
from groupcoord.server.main import parse_group_config

from coord_harness import Harness

TOPICS = TopicCatalog.of(orders=6)
LONG = "x" * 1025               # over name.max.bytes (1024)
HUGE = "y" * 40_000             # over what a record's string field holds


def harness(**cfg):
    cfg.setdefault("group_initial_rebalance_delay_ms", 0)
    cfg.setdefault("consumer_assignment_interval_ms", 0)
    return Harness(ShardConfig(**cfg), TOPICS)


def commit(group="g", topic="orders", parts=(0,), metadata=None, **kw):
    return m.OffsetCommitRequest(
        group_id=group, generation_id_or_member_epoch=-1, member_id="", topics=[
            m.OffsetCommitRequestTopic(name=topic, partitions=[
                m.OffsetCommitRequestPartition(partition_index=p, committed_offset=5,
                                               committed_metadata=metadata)
                for p in parts])], **kw)


def codes(resp):
    return {p.error_code for t in resp.topics for p in t.partitions}


def cg_hb(group="cg", member="m1", epoch=0, topics=("orders",), **kw):
    base = dict(group_id=group, member_id=member, member_epoch=epoch)
    if epoch == 0:
        base.update(rebalance_timeout_ms=30000, subscribed_topic_names=list(topics),
                    topic_partitions=[])
    base.update(kw)
    return m.ConsumerGroupHeartbeatRequest(**base)


def join(group="cls", member="", metadata=b"x", **kw):
    return m.JoinGroupRequest(group_id=group, session_timeout_ms=10_000,
                              rebalance_timeout_ms=10_000, member_id=member,
                              protocol_type="consumer", protocols=[
                                  m.JoinGroupRequestProtocol(name="range", metadata=metadata)],
                              **kw)


def connect_hb(group="wg", member="w1", **kw):
    kw.setdefault("client_assignors", [m.ConnectGroupHeartbeatRequestAssignor(
        name="incremental-cooperative", minimum_version=0, maximum_version=2, version=2,
        reason=0, metadata=b"")])
    return m.ConnectGroupHeartbeatRequest(group_id=group, member_id=member, member_epoch=0,
                                          rebalance_timeout_ms=60_000, **kw)


def assert_nothing_written(h, before_log):
    assert h.log == before_log, "a refused request wrote records"
    h.check_replay()


# ------------------------------------------------------------------------ name bounds
@pytest.mark.parametrize("name, request_, code", [
    ("join group id", join(group=LONG), E.INVALID_GROUP_ID),
    ("join member id", join(member=HUGE), E.INVALID_REQUEST),
    ("join instance id", join(group_instance_id=LONG), E.INVALID_REQUEST),
    ("join protocol type", msgspec.structs.replace(join(), protocol_type=HUGE),
     E.INVALID_REQUEST),
    ("join protocol name", msgspec.structs.replace(join(), protocols=[
        m.JoinGroupRequestProtocol(name=LONG, metadata=b"")]), E.INVALID_REQUEST),
    ("consumer group id", cg_hb(group=HUGE), E.INVALID_GROUP_ID),
    ("consumer member id", cg_hb(member=HUGE), E.INVALID_REQUEST),
    ("consumer instance id", cg_hb(instance_id=LONG), E.INVALID_REQUEST),
    ("consumer rack", cg_hb(rack_id=HUGE), E.INVALID_REQUEST),
    ("consumer assignor", cg_hb(server_assignor=LONG), E.INVALID_REQUEST),
    ("consumer regex", cg_hb(topics=(), subscribed_topic_regex=HUGE), E.INVALID_REQUEST),
    ("consumer topic name", cg_hb(topics=("t" * 250,)), E.INVALID_REQUEST),
    ("connect group id", connect_hb(group=LONG), E.INVALID_GROUP_ID),
    ("connect member id", connect_hb(member=HUGE), E.INVALID_REQUEST),
    ("connect worker url", connect_hb(worker_url=HUGE), E.INVALID_REQUEST),
    ("connect assignor", connect_hb(client_assignors=[m.ConnectGroupHeartbeatRequestAssignor(
        name=HUGE, minimum_version=0, maximum_version=2, version=2, reason=0,
        metadata=b"")]), E.INVALID_REQUEST),
    ("connect connector", connect_hb(config_state=m.ConnectGroupHeartbeatRequestConfigState(
        config_offset=1, connectors=[m.ConnectGroupHeartbeatRequestConnectorConfig(
            name=HUGE, task_count=1)])), E.INVALID_REQUEST),
    ("commit group id", commit(group=HUGE), E.INVALID_GROUP_ID),
])
def test_an_oversize_name_is_refused_and_nothing_is_written(name, request_, code):
    h = harness()
    before = list(h.log)
    resp = h.send(request_)
    got = codes(resp) if isinstance(resp, m.OffsetCommitResponse) else {resp.error_code}
    assert got == {code}, (name, resp)
    if hasattr(resp, "error_message") and code == E.INVALID_REQUEST:
        assert "name.max.bytes" in resp.error_message or "249" in resp.error_message
    assert not h.shard.groups, name
    assert_nothing_written(h, before)


def test_client_id_over_the_bound_is_refused_where_it_is_stored():
    h = harness()
    resp = h.shard.handle(cg_hb(), 0, None, client_id=LONG)
    assert resp.response.error_code == E.INVALID_REQUEST
    assert "client id" in resp.response.error_message and not resp.records
    resp = h.shard.handle(join(), 0, None, client_id=HUGE)
    assert resp.response.error_code == E.INVALID_REQUEST and not resp.records


def test_name_bound_is_settable_and_counts_utf8_bytes():
    h = harness(name_max_bytes=10)
    assert h.send(cg_hb(member="é" * 6)).error_code == E.INVALID_REQUEST      # 12 bytes
    assert h.send(cg_hb(member="é" * 5)).error_code == 0                     # 10 bytes
    h.check_replay()


# ------------------------------------------------------------------------ offset commits
@pytest.mark.parametrize("topic", ["bad name!", "t" * 250, ".", "..", "", HUGE])
def test_commit_to_an_illegal_topic_name_is_refused(topic):
    h = harness()
    resp = h.send(commit(topic=topic, parts=(0, 1)))
    assert codes(resp) == {E.INVALID_TOPIC_EXCEPTION}
    assert not h.log and not h.shard.offsets


def test_commit_metadata_bound_is_settable():
    h = harness(offset_metadata_max_bytes=8)
    resp = h.send(m.OffsetCommitRequest(
        group_id="g", generation_id_or_member_epoch=-1, member_id="", topics=[
            m.OffsetCommitRequestTopic(name="orders", partitions=[
                m.OffsetCommitRequestPartition(partition_index=0, committed_offset=1,
                                               committed_metadata="12345678"),
                m.OffsetCommitRequestPartition(partition_index=1, committed_offset=1,
                                               committed_metadata="123456789")])]))
    assert [p.error_code for p in resp.topics[0].partitions] == \
        [0, E.OFFSET_METADATA_TOO_LARGE]
    assert set(h.shard.offsets["g"]) == {("orders", 0)}
    h.check_replay()


def test_commit_of_a_million_partitions_is_refused_whole():
    h = harness()
    resp = h.send(commit(parts=range(1_000_000)))
    assert codes(resp) == {E.INVALID_COMMIT_OFFSET_SIZE}
    assert not h.log and not h.shard.offsets and not h.shard.groups


def test_commit_over_message_max_bytes_by_its_metadata_is_refused_whole():
    h = harness(message_max_bytes=20_000)
    ok = h.send(commit(parts=range(4), metadata="m" * 4000))
    assert codes(ok) == {0}
    resp = h.send(commit(parts=range(10), metadata="m" * 4000))
    assert codes(resp) == {E.INVALID_COMMIT_OFFSET_SIZE}
    assert len(h.log) == 4
    h.check_replay()


# ------------------------------------------------------------------------ group count
def test_a_full_shard_refuses_new_groups_of_every_kind_and_serves_the_others():
    h = harness(shard_max_groups=1)
    assert codes(h.send(commit(group="first"))) == {0}
    assert codes(h.send(commit(group="second"))) == {E.POLICY_VIOLATION}
    resp = h.send(cg_hb(group="cg"))
    assert resp.error_code == E.POLICY_VIOLATION and "shard.max.groups" in resp.error_message
    assert h.send(join(group="cls")).error_code == E.POLICY_VIOLATION
    assert h.send(connect_hb(group="wg")).error_code == E.POLICY_VIOLATION
    assert set(h.shard.groups) == {"first"}
    assert codes(h.send(commit(group="first", parts=(1,)))) == {0}     # existing group
    # A request for an unknown group that creates nothing keeps its own error.
    hb = h.send(m.HeartbeatRequest(group_id="nope", generation_id=1, member_id="x"))
    assert hb.error_code != E.POLICY_VIOLATION
    h.check_replay()


# ------------------------------------------------------------------------ record size
def _classic_group(h, metadata: bytes, n=2):
    """n members join (the first leads); -> (leader id, follower ids, generation)."""
    ids = []
    for i in range(n):
        r = h.send(join(member="", metadata=metadata), 9)
        ids.append(r.member_id)                     # MEMBER_ID_REQUIRED gives the id
    parked = [h.send(join(member=mid, metadata=metadata), 9) for mid in ids]
    h.advance(1)                                    # the initial delay is 0: barrier ends
    resps = [h.completion(p) if not isinstance(p, m.JoinGroupResponse) else p for p in parked]
    leader = resps[0].leader
    gen = resps[0].generation_id
    return leader, [i for i in ids if i != leader], gen


def test_classic_group_metadata_over_message_max_bytes_fails_the_rebalance_as_kafka():
    h = harness(message_max_bytes=100_000)
    leader, followers, gen = _classic_group(h, b"s" * 60_000)
    before = list(h.log)
    waiting = [h.send(m.SyncGroupRequest(group_id="cls", generation_id=gen, member_id=f,
                                         assignments=[]), 5) for f in followers]
    resp = h.send(m.SyncGroupRequest(group_id="cls", generation_id=gen, member_id=leader,
                                     assignments=[m.SyncGroupRequestAssignment(
                                         member_id=mid, assignment=b"a")
                                         for mid in [leader] + followers]), 5)
    assert resp.error_code == E.UNKNOWN_SERVER_ERROR
    for w in waiting:
        assert h.completion(w).error_code == E.UNKNOWN_SERVER_ERROR
    assert h.shard.group("cls").state_name() == "PreparingRebalance"
    assert_nothing_written(h, before)


def test_classic_group_within_message_max_bytes_completes():
    h = harness(message_max_bytes=200_000)
    leader, followers, gen = _classic_group(h, b"s" * 60_000)
    resp = h.send(m.SyncGroupRequest(group_id="cls", generation_id=gen, member_id=leader,
                                     assignments=[]), 5)
    assert resp.error_code == 0
    assert h.shard.group("cls").state_name() in ("Stable", "CompletingRebalance")
    h.check_replay()


def test_a_subscription_over_message_max_bytes_is_refused():
    h = harness(message_max_bytes=10_000)
    names = ["topic-%05d" % i for i in range(2000)]
    resp = h.send(cg_hb(topics=names))
    assert resp.error_code == E.UNKNOWN_SERVER_ERROR
    assert "message.max.bytes" in resp.error_message
    assert not h.log and not h.shard.groups


# ------------------------------------------------------------------------ settings
def test_group_config_knows_the_limit_settings_by_kafka_names():
    cfg = parse_group_config(["message.max.bytes=2000000", "offset.metadata.max.bytes=100",
                              "shard.max.groups=5", "name.max.bytes=300",
                              "group.max.size=7"])
    assert (cfg.message_max_bytes, cfg.offset_metadata_max_bytes, cfg.shard_max_groups,
            cfg.name_max_bytes, cfg.group_max_size) == (2_000_000, 100, 5, 300, 7)
    assert ShardConfig().message_max_bytes == 1_048_588          # Kafka's default
    assert ShardConfig().offset_metadata_max_bytes == 4096
    for bad in ("name.max.bytes=0", "name.max.bytes=40000", "offset.metadata.max.bytes=40000",
                "shard.max.groups=-1"):
        with pytest.raises(CatalogError):
            parse_group_config([bad])


# ------------------------------------------------------------------------ CreateTopics
def _ct(*specs):
    return m.CreateTopicsRequest(topics=[m.CreateTopicsRequestCreatableTopic(
        name=n, num_partitions=p, replication_factor=1) for n, p in specs])


def test_create_topics_is_disabled_by_default():
    resp, new = T.plan_create_topics(_ct(("fresh", 3)), 7, TOPICS)
    (t,) = resp.topics
    assert t.error_code == E.POLICY_VIOLATION and "--allow-create-topics" in t.error_message
    assert new is None


def test_create_topics_beyond_the_catalog_limits_is_refused_per_topic():
    lim = T.CatalogLimits(allow_create_topics=True, max_topics=3, max_partitions=20)
    resp, new = T.plan_create_topics(_ct(("a", 4), ("b", 100), ("c", 4), ("d", 1)), 7,
                                     TOPICS, lim)
    got = {t.name: (t.error_code, t.error_message) for t in resp.topics}
    assert got["a"][0] == 0 and got["c"][0] == 0
    assert got["b"][0] == E.POLICY_VIOLATION and "--max-partitions" in got["b"][1]
    assert got["d"][0] == E.POLICY_VIOLATION and "--max-topics" in got["d"][1]
    assert sorted(t.name for t in new) == ["a", "c", "orders"]
    assert T.check_catalog_limits(new, lim) is None
    assert "--max-topics" in T.check_catalog_limits(new, lim._replace(max_topics=2))
    assert "--max-partitions" in T.check_catalog_limits(new, lim._replace(max_partitions=13))


@pytest.mark.integration          # a `groupcoord serve` child
def test_serve_refuses_startup_topics_over_the_catalog_limits(tmp_path):
    r = subprocess.run([sys.executable, "-m", "groupcoord.cli", "serve", "--port", "0",
                        "--data-dir", str(tmp_path), "--topic", "a:5", "--topic", "b:5",
                        "--max-topics", "1"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 1
    errors = [ln for ln in r.stderr.splitlines() if "error" in ln.lower()]
    assert len(errors) == 1 and "--max-topics 1" in errors[0], r.stderr
