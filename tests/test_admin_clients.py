"""Admin clients against `groupcoord serve`: kafka-python 3.0.12's KafkaAdminClient and
confluent-kafka 2.16.1's AdminClient list, describe and delete groups of every type, list,
alter and delete their offsets, and describe and alter group configs (groups/admin.py).

Every confluent-kafka call runs in a child process that must exit 0: librdkafka used to abort
at exit (an assertion in rd_kafka_q_destroy0) after an answer it did not expect. The groups'
members are raw protocol clients (tests/serve_proc.py RawClient), so each group is in a known
state: a classic group of the "consumer" protocol type with one member subscribed to t, a
KIP-848 consumer group with one member subscribed to t, and a connect group with one worker.
DescribeGroups describes every group type in classic terms, where Kafka 4 describes classic
groups only (docs/coordinator.md, docs/decisions.md)."""
import json
import os
import subprocess
import sys
import textwrap

import pytest

from serve_proc import RawClient, ServeProc, package_root
from groupcoord.protocol import embedded
from groupcoord.protocol import messages as m

kafka = pytest.importorskip("kafka")
pytest.importorskip("confluent_kafka")
from kafka import KafkaAdminClient  # noqa: E402
from kafka.admin import ConfigResource, ConfigResourceType  # noqa: E402
from kafka.structs import OffsetAndMetadata, TopicPartition  # noqa: E402

CHILD_TIMEOUT_S = 60
SESSION = "consumer.session.timeout.ms"


# ------------------------------------------------------------------------------ the node
@pytest.fixture(scope="module")
def node(tmp_path_factory):
    with ServeProc(tmp_path_factory.mktemp("admin") / "data", topics={"t": 4, "u": 2},
                   shards=8) as srv:
        yield srv


def classic_member(c, group, topic="t"):
    """One member forms a Stable classic group of the "consumer" protocol type."""
    meta = embedded.encode_subscription(m.ConsumerProtocolSubscription(topics=[topic]))
    req = m.JoinGroupRequest(group_id=group, session_timeout_ms=120_000,
                             rebalance_timeout_ms=10_000, member_id="",
                             protocol_type="consumer",
                             protocols=[m.JoinGroupRequestProtocol(name="range", metadata=meta)])
    r = c.call(req, 5)
    assert r.error_code == 79, r                     # MEMBER_ID_REQUIRED
    req.member_id = r.member_id
    r = c.call(req, 5)
    assert r.error_code == 0, r
    asg = embedded.encode_assignment(m.ConsumerProtocolAssignment(assigned_partitions=[
        m.ConsumerProtocolAssignmentTopicPartition(topic=topic, partitions=[0, 1])]))
    s = c.call(m.SyncGroupRequest(group_id=group, generation_id=r.generation_id,
                                  member_id=r.member_id, protocol_type="consumer",
                                  protocol_name="range",
                                  assignments=[m.SyncGroupRequestAssignment(
                                      member_id=r.member_id, assignment=asg)]), 5)
    assert s.error_code == 0, s
    return r.member_id


def consumer_member(c, group, member="m-1", topic="t"):
    r = c.call(m.ConsumerGroupHeartbeatRequest(
        group_id=group, member_id=member, member_epoch=0, rebalance_timeout_ms=10_000,
        subscribed_topic_names=[topic], topic_partitions=[]), 1)
    assert r.error_code == 0, r
    return r.member_epoch


def connect_worker(c, group, member="w-1"):
    r = c.call(m.ConnectGroupHeartbeatRequest(
        group_id=group, member_id=member, member_epoch=0, rebalance_timeout_ms=10_000,
        client_assignors=[m.ConnectGroupHeartbeatRequestAssignor(
            name="incremental-cooperative", minimum_version=0, maximum_version=1, version=1)],
        config_state=m.ConnectGroupHeartbeatRequestConfigState(
            config_offset=1, connectors=[m.ConnectGroupHeartbeatRequestConnectorConfig(
                name="A", task_count=1)])), 0)
    # It joined; COMPUTE_ASSIGNMENT asks it to compute the assignment, which it need not.
    assert r.error_code in (0, 10000) and r.member_id == member, r


def commit(c, group, parts, gen=-1, member="", version=8):
    by = {}
    for (t, p), off in parts.items():
        by.setdefault(t, []).append(m.OffsetCommitRequestPartition(
            partition_index=p, committed_offset=off, committed_metadata=""))
    r = c.call(m.OffsetCommitRequest(
        group_id=group, generation_id_or_member_epoch=gen, member_id=member,
        topics=[m.OffsetCommitRequestTopic(name=t, partitions=ps) for t, ps in by.items()]),
        version)
    assert all(p.error_code == 0 for t in r.topics for p in t.partitions), r


@pytest.fixture(scope="module")
def groups(node):
    """Groups of every type, with members, each with committed offsets of t and u; and
    'empty-*' groups without members, with offsets (each test changes its own groups only;
    the busy ones are never deleted, empty-ck2 only gets configs)."""
    with RawClient(node.host, node.port, timeout=30) as c:
        mid = classic_member(c, "busy-classic")
        commit(c, "busy-classic", {("t", 0): 1, ("u", 0): 2}, gen=1, member=mid, version=5)
        epoch = consumer_member(c, "busy-consumer")
        commit(c, "busy-consumer", {("t", 0): 1, ("u", 0): 2}, gen=epoch, member="m-1",
               version=9)
        connect_worker(c, "busy-connect")
        for g in ("empty-kp", "empty-ck", "empty-ck2"):
            commit(c, g, {("t", 0): 10, ("t", 1): 11, ("u", 1): 12})
    return node


def kp_admin(node):
    return KafkaAdminClient(bootstrap_servers=node.bootstrap, request_timeout_ms=20_000)


# ------------------------------------------------------------------ confluent, in a child
_PRELUDE = """
import json, sys
from confluent_kafka import (ConsumerGroupState, ConsumerGroupTopicPartitions,
                             ConsumerGroupType, KafkaException, TopicPartition)
from confluent_kafka.admin import (AdminClient, AlterConfigOpType, ConfigEntry,
                                   ConfigResource, ResourceType)
a = AdminClient({"bootstrap.servers": sys.argv[1], "broker.address.family": "v4"})
out = {}

def err(fut):
    try:
        fut.result()
        return None
    except KafkaException as e:
        return e.args[0].name()

def tps(parts):
    return sorted([p.topic, p.partition] for p in parts)
"""


def confluent(node, body: str) -> dict:
    """Run ``body`` (it fills ``out``) with an AdminClient ``a`` in a child process; the
    child must exit 0. -> ``out``."""
    code = _PRELUDE + textwrap.dedent(body) + "\nprint(json.dumps(out))\n"
    env = dict(os.environ, PYTHONPATH=package_root())
    p = subprocess.run([sys.executable, "-c", code, node.bootstrap], capture_output=True,
                       text=True, timeout=CHILD_TIMEOUT_S, env=env)
    assert p.returncode == 0, "child exited %d\nstdout:\n%s\nstderr:\n%s" % (
        p.returncode, p.stdout, p.stderr[-4000:])
    return json.loads(p.stdout.strip().splitlines()[-1])


# ========================================================================= kafka-python
def test_kafka_python_lists_and_describes_every_group_type(groups):
    a = kp_admin(groups)
    try:
        every = {g["group_id"]: (g["group_type"], g["group_state"], g["protocol_type"])
                 for g in a.list_groups()}
        assert every["busy-classic"] == ("classic", "Stable", "consumer")
        assert every["busy-consumer"] == ("consumer", "Stable", "consumer")
        assert every["busy-connect"][0::2] == ("connect", "connect")
        assert every["empty-ck2"] == ("classic", "Empty", "")
        # v4 state filter and v5 type filter (kafka-python sends them as given).
        assert {g["group_id"] for g in a.list_groups(states_filter=["empty"])} >= {"empty-ck2"}
        assert all(g["group_state"] == "Empty" for g in a.list_groups(states_filter=["empty"]))
        assert {g["group_id"] for g in a.list_groups(types_filter=["consumer"])} == {
            "busy-consumer"}
        # ("connect" is this node's type: kafka-python's GroupType refuses it client-side.)
        assert {g["group_id"] for g in a.list_groups(types_filter=["classic"],
                                                     states_filter=["stable"])} == {
            "busy-classic"}
        d = a.describe_groups(["busy-classic", "busy-consumer", "nope"])
        c = d["busy-classic"]
        assert (c["error"], c["group_state"], c["protocol_type"], c["protocol_data"]) == (
            None, "Stable", "consumer", "range")
        (mb,) = c["members"]
        assert mb["client_id"] == "groupcoord-tests" and mb["client_host"] == "127.0.0.1"
        assert mb["member_metadata"]["topics"] == ["t"]         # ConsumerProtocol, decoded
        assert mb["member_assignment"]["assigned_partitions"] == [
            {"topic": "t", "partitions": [0, 1]}]
        # The KIP-848 group, described in ConsumerProtocol terms (kafka-python decodes the
        # bytes): the server assignor as protocol, what the member owns, its epoch.
        c = d["busy-consumer"]
        assert (c["error"], c["group_state"], c["protocol_type"], c["protocol_data"]) == (
            None, "Stable", "consumer", "uniform")
        assert c["authorized_operations"] == [
            "READ", "DELETE", "DESCRIBE", "DESCRIBE_CONFIGS", "ALTER_CONFIGS"]
        (mb,) = c["members"]
        everything = [{"topic": "t", "partitions": [0, 1, 2, 3]}]
        assert mb == {"member_id": "m-1", "group_instance_id": None,
                      "client_id": "groupcoord-tests", "client_host": "127.0.0.1",
                      "member_metadata": {"topics": ["t"], "user_data": None,
                                          "owned_partitions": everything, "generation_id": 1,
                                          "rack_id": None},
                      "member_assignment": {"assigned_partitions": everything,
                                            "user_data": None}}
        assert "GroupIdNotFoundError" in d["nope"]["error"] and \
            d["nope"]["group_state"] == "Dead"
        # A connect group's bytes are ConnectProtocol's; kafka-python 3.0.12 decodes every
        # member's bytes as ConsumerProtocol whatever the protocol type and catches only
        # struct.error, so it fails on any Connect group (on Kafka's classic ones too).
        with pytest.raises(ValueError):
            a.describe_groups(["busy-connect"])
    finally:
        a.close()


def test_describe_groups_of_a_connect_group_on_the_wire(groups):
    with RawClient(groups.host, groups.port, timeout=30) as c:
        d = c.call(m.DescribeGroupsRequest(groups=["busy-connect"]), 5).groups[0]
    assert (d.error_code, d.group_state, d.protocol_type, d.protocol_data) == (
        0, "Assigning", "connect", "incremental-cooperative")
    (mb,) = d.members
    assert (mb.member_id, mb.client_id, mb.client_host) == (
        "w-1", "groupcoord-tests", "127.0.0.1")
    v, md = embedded.decode_connect_metadata(mb.member_metadata)
    assert (v, md.url, md.config_offset) == (1, "", 1)
    v, a = embedded.decode_connect_assignment(mb.member_assignment)
    # Chosen to compute the first assignment (the leader, in classic terms); nothing yet.
    assert (v, a.error, a.leader, a.config_offset, a.assignment, a.revoked) == (
        1, 0, "w-1", 1, [], [])


def test_kafka_python_offsets_and_group_deletion(groups):
    a = kp_admin(groups)
    try:
        t0, t1, u0, u1 = (TopicPartition("t", 0), TopicPartition("t", 1),
                          TopicPartition("u", 0), TopicPartition("u", 1))
        assert a.alter_group_offsets("empty-kp", {t0: OffsetAndMetadata(20, "x", None)}) == {
            t0: kafka.errors.NoError}
        got = a.list_group_offsets("empty-kp")["empty-kp"]
        assert {tp: o.offset for tp, o in got.items()} == {t0: 20, t1: 11, u1: 12}
        assert a.delete_group_offsets("empty-kp", [u1, TopicPartition("u", 5)]) == {
            u1: kafka.errors.NoError, TopicPartition("u", 5): kafka.errors.NoError}
        assert set(a.list_group_offsets("empty-kp")["empty-kp"]) == {t0, t1}
        # A subscribed topic's offsets stay, per partition; the others go (classic "consumer"
        # protocol group and KIP-848 group alike).
        for g in ("busy-classic", "busy-consumer"):
            assert a.delete_group_offsets(g, [t0, u0]) == {
                t0: kafka.errors.GroupSubscribedToTopicError, u0: kafka.errors.NoError}
            assert set(a.list_group_offsets(g)[g]) == {t0}
        with pytest.raises(kafka.errors.NonEmptyGroupError):
            a.delete_group_offsets("busy-connect", [t0])
        with pytest.raises(kafka.errors.GroupIdNotFoundError):
            a.delete_group_offsets("nope", [t0])
        assert a.delete_groups(["empty-kp", "busy-classic", "busy-consumer", "busy-connect",
                                "nope"]) == {
            "empty-kp": "OK", "busy-classic": "NonEmptyGroupError",
            "busy-consumer": "NonEmptyGroupError", "busy-connect": "NonEmptyGroupError",
            "nope": "GroupIdNotFoundError"}
        assert "empty-kp" not in {g["group_id"] for g in a.list_groups()}
        assert a.list_group_offsets("empty-kp")["empty-kp"] == {}
    finally:
        a.close()


def test_kafka_python_group_configs(groups):
    a = kp_admin(groups)
    try:
        res = ConfigResource(ConfigResourceType.GROUP, "busy-consumer")
        got = a.describe_configs([res], config_filter="all")["group"]["busy-consumer"]
        assert {k: (v["value"], v["config_source"]) for k, v in got.items()} == {
            "consumer.heartbeat.interval.ms": ("1000", "DEFAULT_CONFIG"),
            SESSION: ("45000", "DEFAULT_CONFIG")}
        assert a.alter_configs([ConfigResource(ConfigResourceType.GROUP, "busy-consumer",
                                               {SESSION: "50000"})]) == {
            "group": {"busy-consumer": "OK"}}
        got = a.describe_configs([res])["group"]["busy-consumer"]     # modified only
        assert {k: (v["value"], v["config_source"]) for k, v in got.items()} == {
            SESSION: ("50000", "DYNAMIC_GROUP_CONFIG")}
        bad = a.alter_configs([ConfigResource(ConfigResourceType.GROUP, "busy-consumer",
                                              {SESSION: "1"})], raise_on_unknown=False)
        assert "InvalidConfigurationError" in bad["group"]["busy-consumer"]
        a.reset_configs([ConfigResource(ConfigResourceType.GROUP, "busy-consumer", [SESSION])])
        assert a.describe_configs([res])["group"]["busy-consumer"] == {}
    finally:
        a.close()


# ======================================================================= confluent-kafka
def test_confluent_lists_and_describes_every_group_type(groups):
    out = confluent(groups, """
        r = a.list_consumer_groups(request_timeout=20).result()
        out["all"] = sorted([g.group_id, g.type.name, g.state.name, g.is_simple_consumer_group]
                            for g in r.valid)
        out["errors"] = [str(e) for e in r.errors]
        r = a.list_consumer_groups(request_timeout=20, types={ConsumerGroupType.CONSUMER}).result()
        out["consumer"] = sorted(g.group_id for g in r.valid)
        r = a.list_consumer_groups(request_timeout=20, states={ConsumerGroupState.EMPTY},
                                   types={ConsumerGroupType.CLASSIC}).result()
        out["empty_classic"] = sorted(g.group_id for g in r.valid)
        d = a.describe_consumer_groups(["busy-classic", "busy-consumer", "busy-connect"],
                                       request_timeout=20)
        for gid, fut in d.items():
            try:
                g = fut.result()
            except KafkaException as e:
                out[gid] = [e.args[0].name(), e.args[0].str()]
                continue
            out[gid] = [g.type.name, g.state.name, g.partition_assignor,
                        [[x.client_id, x.host, tps(x.assignment.topic_partitions)]
                         for x in g.members]]
    """)
    assert out["errors"] == []
    listed = {g[0]: g[1:] for g in out["all"]}
    assert listed["busy-classic"] == ["CLASSIC", "STABLE", False]
    assert listed["busy-consumer"] == ["CONSUMER", "STABLE", False]
    assert listed["empty-ck2"] == ["CLASSIC", "EMPTY", True]
    assert "busy-connect" not in listed          # librdkafka lists consumer protocol types
    assert out["consumer"] == ["busy-consumer"]
    assert "empty-ck2" in out["empty_classic"] and "busy-classic" not in out["empty_classic"]
    assert out["busy-classic"] == ["CLASSIC", "STABLE", "range",
                                   [["groupcoord-tests", "127.0.0.1", [["t", 0], ["t", 1]]]]]
    # KIP-848 groups through ConsumerGroupDescribe, with the server assignor's assignment.
    assert out["busy-consumer"] == ["CONSUMER", "STABLE", "uniform",
                                    [["groupcoord-tests", "127.0.0.1",
                                      [["t", 0], ["t", 1], ["t", 2], ["t", 3]]]]]
    # A connect group is neither: ConsumerGroupDescribe answers it as not a consumer group,
    # librdkafka falls back to DescribeGroups, which describes it with protocol type
    # "connect", and librdkafka refuses that as it does a classic Connect group on Kafka.
    assert out["busy-connect"] == [
        "_INVALID_ARG", "GroupId busy-connect is not a consumer group (connect)."]


def test_confluent_offsets_and_group_deletion(groups):
    out = confluent(groups, """
        f = a.alter_consumer_group_offsets([ConsumerGroupTopicPartitions(
            "empty-ck", [TopicPartition("t", 0, 30)])], request_timeout=20)
        out["alter"] = [tps(f["empty-ck"].result().topic_partitions)]
        f = a.list_consumer_group_offsets([ConsumerGroupTopicPartitions("empty-ck")],
                                          request_timeout=20)
        out["listed"] = sorted([p.topic, p.partition, p.offset]
                               for p in f["empty-ck"].result().topic_partitions)
        d = a.delete_consumer_groups(["empty-ck", "busy-classic", "busy-consumer",
                                      "busy-connect", "nope"], request_timeout=20)
        out["deleted"] = {gid: err(fut) for gid, fut in d.items()}
        r = a.list_consumer_groups(request_timeout=20).result()
        out["after"] = sorted(g.group_id for g in r.valid)
        f = a.list_consumer_group_offsets([ConsumerGroupTopicPartitions("empty-ck")],
                                          request_timeout=20)
        out["offsets_after"] = [[p.topic, p.partition, p.offset]
                                for p in f["empty-ck"].result().topic_partitions]
    """)
    assert out["alter"] == [[["t", 0]]]
    assert out["listed"] == [["t", 0, 30], ["t", 1, 11], ["u", 1, 12]]
    assert out["deleted"] == {"empty-ck": None, "busy-classic": "NON_EMPTY_GROUP",
                              "busy-consumer": "NON_EMPTY_GROUP",
                              "busy-connect": "NON_EMPTY_GROUP", "nope": "GROUP_ID_NOT_FOUND"}
    assert "empty-ck" not in out["after"] and "busy-classic" in out["after"]
    assert out["offsets_after"] == []


def test_confluent_group_configs(groups):
    out = confluent(groups, """
        def described(name):
            f = a.describe_configs([ConfigResource(ResourceType.GROUP, name)],
                                   request_timeout=20)
            (fut,) = f.values()
            return {k: [c.value, int(getattr(c.source, "value", c.source))]
                    for k, c in fut.result().items()}

        out["before"] = described("empty-ck2")
        res = ConfigResource(ResourceType.GROUP, "empty-ck2", incremental_configs=[
            ConfigEntry("consumer.session.timeout.ms", "55000",
                        incremental_operation=AlterConfigOpType.SET)])
        (fut,) = a.incremental_alter_configs([res], request_timeout=20).values()
        out["set"] = err(fut)
        out["after"] = described("empty-ck2")
        res = ConfigResource(ResourceType.GROUP, "empty-ck2", incremental_configs=[
            ConfigEntry("consumer.heartbeat.interval.ms", "100000",
                        incremental_operation=AlterConfigOpType.SET)])
        (fut,) = a.incremental_alter_configs([res], request_timeout=20).values()
        out["bad"] = err(fut)
        res = ConfigResource(ResourceType.GROUP, "empty-ck2", incremental_configs=[
            ConfigEntry("consumer.session.timeout.ms", None,
                        incremental_operation=AlterConfigOpType.DELETE)])
        (fut,) = a.incremental_alter_configs([res], request_timeout=20).values()
        out["delete"] = err(fut)
        out["reset"] = described("empty-ck2")
        (fut,) = a.describe_configs([ConfigResource(ResourceType.BROKER, "0")],
                                    request_timeout=20).values()
        out["broker"] = err(fut)
        (fut,) = a.describe_configs([ConfigResource(ResourceType.TOPIC, "t")],
                                    request_timeout=20).values()
        out["topic"] = err(fut)
    """)
    hb = "consumer.heartbeat.interval.ms"
    assert out["before"] == {hb: ["1000", 5], SESSION: ["45000", 5]}
    assert out["set"] is None
    assert out["after"] == {hb: ["1000", 5], SESSION: ["55000", 8]}
    assert out["bad"] == "INVALID_CONFIG"
    assert out["delete"] is None and out["reset"] == out["before"]
    # Resources this node does not keep: a clear error, the child still exits 0.
    assert out["broker"] == "INVALID_REQUEST" and out["topic"] == "INVALID_REQUEST"
