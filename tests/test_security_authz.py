"""Authorization decisions for every API the node serves (server/authz.py over
security/acl.py's Authorizer): allowed, denied with the exact error code, and the refused part
merged into the answer of a request authorized in part. Kafka's rules (KafkaApis/AuthHelper)
as docs/security.md's table states them."""
import pytest

from groupcoord.protocol import api_keys as K
from groupcoord.protocol import messages as m
from groupcoord.protocol.error_codes import ErrorCode as E
from groupcoord.security.acl import (AclBinding, AclOperation as Op, AclPermissionType as Perm,
                                     Authorizer, PatternType, ResourceType as RT)
from groupcoord.server import authz
from groupcoord.server.authz import Who, check

G_AUTH, T_AUTH, C_AUTH = 30, 29, 31
ALICE, BOB, ADMIN = "User:alice", "User:bob", "User:admin"


def allow(rt, name, op, principal=ALICE, pattern=PatternType.LITERAL, host="*"):
    return AclBinding(int(rt), name, int(pattern), principal, host, int(op), int(Perm.ALLOW))


def deny(rt, name, op, principal=ALICE, pattern=PatternType.LITERAL, host="*"):
    return AclBinding(int(rt), name, int(pattern), principal, host, int(op), int(Perm.DENY))


ACLS = [
    allow(RT.GROUP, "a-", Op.READ, pattern=PatternType.PREFIXED),
    allow(RT.GROUP, "a-", Op.DELETE, pattern=PatternType.PREFIXED),
    allow(RT.GROUP, "a-cfg", Op.ALTER_CONFIGS),
    allow(RT.TOPIC, "t", Op.READ),
    allow(RT.TOPIC, "t", Op.WRITE),
    allow(RT.TOPIC, "t", Op.ALTER),
    allow(RT.TOPIC, "t", Op.DELETE),
    allow(RT.TOPIC, "new-", Op.CREATE, pattern=PatternType.PREFIXED),
    deny(RT.GROUP, "a-secret", Op.ALL),
    allow(RT.GROUP, "b-1", Op.READ, principal=BOB),      # so b-1 has ACLs (not "no ACL")
]


def who(principal=ALICE, host="10.0.0.1", acls=ACLS, allow_if_no_acl=False):
    az = Authorizer(super_users=[ADMIN], allow_if_no_acl=allow_if_no_acl)
    az.set_acls(acls)
    return Who(principal, host, az)


class Node:
    """What authz reads of a node: the topic catalog (by id, for Fetch v13+ / DeleteTopics)."""
    class topics:
        by_id: dict = {}


def run(key, version, req, w, resp=None):
    """-> the answer the client gets: the verdict's response, or post(resp) of the
    authorized part, or 'allowed' (run as it is)."""
    v = check(key, version, req, w, Node)
    if v is None:
        return "allowed"
    if v.response is not None:
        return v.response
    assert resp is not None, "partly authorized: give the authorized part's response"
    return v.post(resp(v.request))


# ---------------------------------------------------------------- single-group APIs
SINGLE = [
    (K.JOIN_GROUP, 9, lambda g: m.JoinGroupRequest(group_id=g, session_timeout_ms=10000,
                                                   rebalance_timeout_ms=10000, member_id="",
                                                   protocol_type="consumer", protocols=[])),
    (K.SYNC_GROUP, 5, lambda g: m.SyncGroupRequest(group_id=g, generation_id=1, member_id="x",
                                                   assignments=[])),
    (K.HEARTBEAT, 4, lambda g: m.HeartbeatRequest(group_id=g, generation_id=1, member_id="x")),
    (K.LEAVE_GROUP, 5, lambda g: m.LeaveGroupRequest(group_id=g, members=[])),
    (K.CONSUMER_GROUP_HEARTBEAT, 0, lambda g: m.ConsumerGroupHeartbeatRequest(
        group_id=g, member_id="x", member_epoch=1)),
    (K.CONNECT_GROUP_HEARTBEAT, 0, lambda g: m.ConnectGroupHeartbeatRequest(
        group_id=g, member_id="x", member_epoch=1)),
    (K.CONNECT_GROUP_PREPARE_ASSIGNMENT, 0, lambda g: m.ConnectGroupPrepareAssignmentRequest(
        group_id=g, member_id="x", member_epoch=1)),
    (K.CONNECT_GROUP_INSTALL_ASSIGNMENT, 0, lambda g: m.ConnectGroupInstallAssignmentRequest(
        group_id=g, member_id="x", member_epoch=1, group_epoch=1, members=[])),
]


@pytest.mark.parametrize("key,version,make", SINGLE, ids=[str(k) for k, _, _ in SINGLE])
@pytest.mark.parametrize("principal,group,expect", [
    (ALICE, "a-1", None),            # READ on prefix a-
    (ALICE, "a-secret", G_AUTH),     # DENY ALL wins over the prefixed ALLOW
    (ALICE, "b-1", G_AUTH),          # another's group
    (BOB, "a-1", G_AUTH),            # no ACL for bob on a-*
    (BOB, "b-1", None),
    (ADMIN, "z", None),              # super user
    ("User:eve", "zzz", G_AUTH),     # no ACL at all on zzz, allow-if-no-acl false
])
def test_read_on_the_group(key, version, make, principal, group, expect):
    out = run(key, version, make(group), who(principal))
    if expect is None:
        assert out == "allowed"
    else:
        assert out.error_code == expect


def test_allow_if_no_acl_opens_a_group_without_acls_only():
    w = who("User:eve", allow_if_no_acl=True)
    req = m.HeartbeatRequest(group_id="zzz", generation_id=1, member_id="x")
    assert run(K.HEARTBEAT, 4, req, w) == "allowed"
    # b-1 has an ACL (bob's): eve is not allowed there even so.
    req = m.HeartbeatRequest(group_id="b-1", generation_id=1, member_id="x")
    assert run(K.HEARTBEAT, 4, req, w).error_code == G_AUTH


def test_consumer_heartbeat_needs_describe_on_subscribed_topics():
    req = m.ConsumerGroupHeartbeatRequest(group_id="a-1", member_id="x", member_epoch=0,
                                          subscribed_topic_names=["t", "u", "v"])
    out = run(K.CONSUMER_GROUP_HEARTBEAT, 0, req, who())
    assert out.error_code == T_AUTH
    assert "u, v" in out.error_message
    req.subscribed_topic_names = ["t"]
    assert run(K.CONSUMER_GROUP_HEARTBEAT, 0, req, who()) == "allowed"


# ---------------------------------------------------------------- offsets
def commit(group, *topics):
    return m.OffsetCommitRequest(group_id=group, generation_id_or_member_epoch=1,
                                 member_id="x", topics=[
                                     m.OffsetCommitRequestTopic(name=t, partitions=[
                                         m.OffsetCommitRequestPartition(partition_index=0,
                                                                        committed_offset=5)])
                                     for t in topics])


def commit_ok(req):
    return m.OffsetCommitResponse(topics=[_commit_topic(t, 0) for t in req.topics])


def _commit_topic(t, code):
    return m.OffsetCommitResponseTopic(name=t.name, partitions=[
        m.OffsetCommitResponsePartition(partition_index=p.partition_index, error_code=code)
        for p in t.partitions])


def codes(resp_topics, parts="partitions"):
    return {t.name: [p.error_code for p in getattr(t, parts)] for t in resp_topics}


def test_offset_commit():
    assert run(K.OFFSET_COMMIT, 9, commit("a-1", "t"), who()) == "allowed"
    out = run(K.OFFSET_COMMIT, 9, commit("b-1", "t", "u"), who())
    assert codes(out.topics) == {"t": [G_AUTH], "u": [G_AUTH]}
    out = run(K.OFFSET_COMMIT, 9, commit("a-1", "t", "u"), who(), commit_ok)
    assert codes(out.topics) == {"t": [0], "u": [T_AUTH]}
    out = run(K.OFFSET_COMMIT, 9, commit("a-1", "u"), who())
    assert codes(out.topics) == {"u": [T_AUTH]}


def test_offset_fetch_single_group():
    req = m.OffsetFetchRequest(group_id="b-1", topics=[
        m.OffsetFetchRequestTopic(name="t", partition_indexes=[0])])
    assert run(K.OFFSET_FETCH, 7, req, who()).error_code == G_AUTH
    out = run(K.OFFSET_FETCH, 1, req, who())        # v0-1: no top-level error code
    assert codes(out.topics) == {"t": [G_AUTH]}
    req = m.OffsetFetchRequest(group_id="a-1", topics=[
        m.OffsetFetchRequestTopic(name="t", partition_indexes=[0]),
        m.OffsetFetchRequestTopic(name="u", partition_indexes=[0, 1])])

    def ok(r):
        return m.OffsetFetchResponse(error_code=0, topics=[m.OffsetFetchResponseTopic(
            name=t.name, partitions=[m.OffsetFetchResponsePartition(
                partition_index=i, committed_offset=7, error_code=0)
                for i in t.partition_indexes]) for t in r.topics])
    out = run(K.OFFSET_FETCH, 7, req, who(), ok)
    assert codes(out.topics) == {"t": [0], "u": [T_AUTH, T_AUTH]}
    # Every topic (null): the ones alice may not describe are left out, not errors.
    req = m.OffsetFetchRequest(group_id="a-1", topics=None)
    out = run(K.OFFSET_FETCH, 7, req, who(), lambda r: m.OffsetFetchResponse(
        error_code=0, topics=[m.OffsetFetchResponseTopic(name=n, partitions=[])
                              for n in ("t", "u")]))
    assert [t.name for t in out.topics] == ["t"]


def test_offset_fetch_groups_v8():
    req = m.OffsetFetchRequest(groups=[
        m.OffsetFetchRequestGroup(group_id="a-1", topics=[
            m.OffsetFetchRequestTopics(name="t", partition_indexes=[0]),
            m.OffsetFetchRequestTopics(name="u", partition_indexes=[0])]),
        m.OffsetFetchRequestGroup(group_id="b-1", topics=None),
        m.OffsetFetchRequestGroup(group_id="a-2", topics=None)])

    def ok(r):
        assert [g.group_id for g in r.groups] == ["a-1", "a-2"]
        return m.OffsetFetchResponse(groups=[m.OffsetFetchResponseGroup(
            group_id=g.group_id, error_code=0, topics=[m.OffsetFetchResponseTopics(
                name=n, partitions=[]) for n in (["t"] if g.topics else ["t", "u"])])
            for g in r.groups])
    out = run(K.OFFSET_FETCH, 9, req, who(), ok)
    by = {g.group_id: g for g in out.groups}
    assert by["b-1"].error_code == G_AUTH
    assert codes(by["a-1"].topics, "partitions") == {"t": [], "u": [T_AUTH]}
    assert [t.name for t in by["a-2"].topics] == ["t"]


def test_offset_delete():
    req = m.OffsetDeleteRequest(group_id="a-1", topics=[
        m.OffsetDeleteRequestTopic(name="t", partitions=[m.OffsetDeleteRequestPartition(0)]),
        m.OffsetDeleteRequestTopic(name="u", partitions=[m.OffsetDeleteRequestPartition(0)])])
    out = run(K.OFFSET_DELETE, 0, req, who(), lambda r: m.OffsetDeleteResponse(
        error_code=0, topics=[m.OffsetDeleteResponseTopic(name=t.name, partitions=[
            m.OffsetDeleteResponsePartition(partition_index=0, error_code=0)])
            for t in r.topics]))
    assert codes(out.topics) == {"t": [0], "u": [T_AUTH]}
    req.group_id = "b-1"
    assert run(K.OFFSET_DELETE, 0, req, who()).error_code == G_AUTH


# ---------------------------------------------------------------- several groups
def test_describe_groups_and_modern_describes():
    req = m.DescribeGroupsRequest(groups=["a-1", "b-1"], include_authorized_operations=True)
    out = run(K.DESCRIBE_GROUPS, 5, req, who(), lambda r: m.DescribeGroupsResponse(groups=[
        m.DescribeGroupsResponseDescribedGroup(error_code=0, group_id=g, group_state="Empty",
                                               protocol_type="", protocol_data="",
                                               members=[], authorized_operations=0)
        for g in r.groups]))
    by = {g.group_id: g for g in out.groups}
    assert by["b-1"].error_code == G_AUTH
    # alice: READ and DELETE on a-* (DESCRIBE implied): Kafka's bitfield of group ops.
    assert by["a-1"].authorized_operations == (1 << 3) | (1 << 6) | (1 << 8)
    for key, cls in ((K.CONSUMER_GROUP_DESCRIBE, m.ConsumerGroupDescribeRequest),
                     (K.CONNECT_GROUP_DESCRIBE, m.ConnectGroupDescribeRequest)):
        out = run(key, 0, cls(group_ids=["b-1"]), who())
        assert [(g.group_id, g.error_code) for g in out.groups] == [("b-1", G_AUTH)]
        assert run(key, 0, cls(group_ids=["a-1"]), who()) == "allowed"


def test_list_groups_filters_silently_unless_cluster_describe():
    listed = m.ListGroupsResponse(error_code=0, groups=[
        m.ListGroupsResponseListedGroup(group_id=g, protocol_type="consumer")
        for g in ("a-1", "b-1", "zzz")])
    out = run(K.LIST_GROUPS, 4, m.ListGroupsRequest(), who(), lambda r: listed)
    assert [g.group_id for g in out.groups] == ["a-1"]
    w = who(acls=ACLS + [allow(RT.CLUSTER, "kafka-cluster", Op.DESCRIBE)])
    assert run(K.LIST_GROUPS, 4, m.ListGroupsRequest(), w) == "allowed"


def test_delete_groups():
    req = m.DeleteGroupsRequest(groups_names=["a-1", "b-1"])
    out = run(K.DELETE_GROUPS, 2, req, who(), lambda r: m.DeleteGroupsResponse(results=[
        m.DeleteGroupsResponseDeletableGroupResult(group_id=g, error_code=0)
        for g in r.groups_names]))
    assert {r.group_id: r.error_code for r in out.results} == {"a-1": 0, "b-1": G_AUTH}
    out = run(K.DELETE_GROUPS, 2, m.DeleteGroupsRequest(groups_names=["b-1"]), who())
    assert [(r.group_id, r.error_code) for r in out.results] == [("b-1", G_AUTH)]


def test_find_coordinator():
    assert run(K.FIND_COORDINATOR, 3, m.FindCoordinatorRequest(key="a-1"), who()) == "allowed"
    assert run(K.FIND_COORDINATOR, 3, m.FindCoordinatorRequest(key="b-1"),
               who()).error_code == G_AUTH
    req = m.FindCoordinatorRequest(key_type=0, coordinator_keys=["a-1", "b-1"])
    out = run(K.FIND_COORDINATOR, 4, req, who(), lambda r: m.FindCoordinatorResponse(
        coordinators=[m.FindCoordinatorResponseCoordinator(key=k, node_id=0, host="h",
                                                           port=1, error_code=0)
                      for k in r.coordinator_keys]))
    assert {c.key: (c.error_code, c.node_id) for c in out.coordinators} == {
        "a-1": (0, 0), "b-1": (G_AUTH, -1)}


# ---------------------------------------------------------------- configs
def test_describe_and_alter_configs():
    req = m.DescribeConfigsRequest(resources=[
        m.DescribeConfigsRequestDescribeConfigsResource(resource_type=32, resource_name="a-cfg"),
        m.DescribeConfigsRequestDescribeConfigsResource(resource_type=32, resource_name="b-1"),
        m.DescribeConfigsRequestDescribeConfigsResource(resource_type=2, resource_name="u"),
        m.DescribeConfigsRequestDescribeConfigsResource(resource_type=4, resource_name="0")])
    out = run(K.DESCRIBE_CONFIGS, 4, req, who(), lambda r: m.DescribeConfigsResponse(results=[
        m.DescribeConfigsResponseDescribeConfigsResult(
            error_code=0, resource_type=x.resource_type, resource_name=x.resource_name,
            configs=[]) for x in r.resources]))
    # ALTER_CONFIGS implies DESCRIBE_CONFIGS (a-cfg).
    assert {(r.resource_type, r.resource_name): r.error_code for r in out.results} == {
        (32, "a-cfg"): 0, (32, "b-1"): G_AUTH, (2, "u"): T_AUTH, (4, "0"): C_AUTH}
    req = m.IncrementalAlterConfigsRequest(resources=[
        m.IncrementalAlterConfigsRequestAlterConfigsResource(resource_type=32,
                                                             resource_name="a-1", configs=[])])
    out = run(K.INCREMENTAL_ALTER_CONFIGS, 1, req, who())
    assert [(r.resource_name, r.error_code) for r in out.responses] == [("a-1", G_AUTH)]


# ---------------------------------------------------------------- topics
def test_create_delete_alter_topics():
    req = m.CreateTopicsRequest(topics=[
        m.CreateTopicsRequestCreatableTopic(name=n, num_partitions=1, replication_factor=1,
                                            assignments=[], configs=[])
        for n in ("new-x", "other")])
    out = run(K.CREATE_TOPICS, 5, req, who(), lambda r: m.CreateTopicsResponse(topics=[
        m.CreateTopicsResponseCreatableTopicResult(name=t.name, error_code=0)
        for t in r.topics]))
    assert {t.name: t.error_code for t in out.topics} == {"new-x": 0, "other": T_AUTH}
    w = who(acls=ACLS + [allow(RT.CLUSTER, "kafka-cluster", Op.CREATE)])
    assert run(K.CREATE_TOPICS, 5, req, w) == "allowed"
    out = run(K.DELETE_TOPICS, 5, m.DeleteTopicsRequest(topic_names=["u"]), who())
    assert [(r.name, r.error_code) for r in out.responses] == [("u", T_AUTH)]
    assert run(K.DELETE_TOPICS, 5, m.DeleteTopicsRequest(topic_names=["t"]), who()) \
        == "allowed"
    req = m.CreatePartitionsRequest(topics=[
        m.CreatePartitionsRequestCreatePartitionsTopic(name="u", count=3)])
    out = run(K.CREATE_PARTITIONS, 3, req, who())
    assert [(r.name, r.error_code) for r in out.results] == [("u", T_AUTH)]


def test_metadata_filters_all_and_refuses_named():
    def topic(n):
        return m.MetadataResponseTopic(error_code=0, name=n, partitions=[],
                                       topic_authorized_operations=authz.UNKNOWN_AUTH_OPS)

    def resp(r):
        return m.MetadataResponse(brokers=[], topics=[topic("t"), topic("u")])
    out = run(K.METADATA, 12, m.MetadataRequest(topics=None), who(), resp)
    assert [t.name for t in out.topics] == ["t"]
    req = m.MetadataRequest(topics=[m.MetadataRequestTopic(name="t"),
                                    m.MetadataRequestTopic(name="u")])
    out = run(K.METADATA, 12, req, who(), resp)
    assert {t.name: t.error_code for t in out.topics} == {"t": 0, "u": T_AUTH}


def test_list_offsets_fetch_produce_per_topic():
    req = m.ListOffsetsRequest(replica_id=-1, topics=[
        m.ListOffsetsRequestListOffsetsTopic(name=n, partitions=[
            m.ListOffsetsRequestListOffsetsPartition(partition_index=0, timestamp=-1)])
        for n in ("t", "u")])
    out = run(K.LIST_OFFSETS, 7, req, who(), lambda r: m.ListOffsetsResponse(topics=[
        m.ListOffsetsResponseListOffsetsTopicResponse(name=t.name, partitions=[
            m.ListOffsetsResponseListOffsetsPartitionResponse(partition_index=0,
                                                              error_code=0)])
        for t in r.topics]))
    assert codes(out.topics) == {"t": [0], "u": [T_AUTH]}
    req = m.FetchRequest(topics=[m.FetchRequestFetchTopic(topic="u", partitions=[
        m.FetchRequestFetchPartition(partition=0)])])
    out = run(K.FETCH, 12, req, who(), lambda r: m.FetchResponse(responses=[
        m.FetchResponseFetchableTopicResponse(topic="u", partitions=[
            m.FetchResponsePartitionData(partition_index=0, error_code=0)])]))
    assert [p.error_code for p in out.responses[0].partitions] == [T_AUTH]
    req = m.ProduceRequest(acks=1, timeout_ms=1000, topic_data=[
        m.ProduceRequestTopicProduceData(name="t", partition_data=[])])
    assert run(K.PRODUCE, 9, req, who()) == "allowed"      # WRITE on t


# ---------------------------------------------------------------- security admin
def test_acl_and_scram_apis_need_the_cluster():
    cases = [
        (K.DESCRIBE_ACLS, 3, m.DescribeAclsRequest(resource_type_filter=1,
                                                   pattern_type_filter=1, operation=1,
                                                   permission_type=1)),
        (K.CREATE_ACLS, 3, m.CreateAclsRequest(creations=[m.CreateAclsRequestAclCreation(
            resource_type=3, resource_name="g", resource_pattern_type=3, principal=ALICE,
            host="*", operation=3, permission_type=3)])),
        (K.DELETE_ACLS, 3, m.DeleteAclsRequest(filters=[m.DeleteAclsRequestDeleteAclsFilter(
            resource_type_filter=1, pattern_type_filter=1, operation=1,
            permission_type=1)])),
        (K.DESCRIBE_USER_SCRAM_CREDENTIALS, 0, m.DescribeUserScramCredentialsRequest()),
        (K.ALTER_USER_SCRAM_CREDENTIALS, 0, m.AlterUserScramCredentialsRequest(
            deletions=[m.AlterUserScramCredentialsRequestScramCredentialDeletion(
                name="carol", mechanism=1)], upsertions=[])),
    ]
    for key, version, req in cases:
        out = run(key, version, req, who())
        errs = ([out.error_code] if hasattr(out, "error_code") else
                [r.error_code for r in getattr(out, "results", None)
                 or getattr(out, "filter_results", None) or []])
        assert errs and all(e == C_AUTH for e in errs), (key, out)
        assert run(key, version, req, who(ADMIN)) == "allowed"


def test_every_api_we_serve_is_decided():
    """Every API the node advertises is either in authz's table or needs no authorization
    (by Kafka's rules): adding an API without deciding its permissions fails here."""
    from groupcoord.protocol import supported_versions
    from groupcoord.runtime.shards import GROUP_APIS
    from groupcoord.server.node import NODE_APIS
    served = set(NODE_APIS) | set(GROUP_APIS)
    needs_none = {K.API_VERSIONS, K.SASL_HANDSHAKE, K.SASL_AUTHENTICATE}
    undecided = {k for k in served if k in supported_versions()} - set(authz._CHECKS) \
        - needs_none - {K.DESCRIBE_CLUSTER}
    assert not undecided
