"""Authorization of each request, as Kafka's brokers decide it (KafkaApis and its AuthHelper),
over the Authorizer of security/acl.py. Pure: no sockets, no state; the connection
(connection.py) calls ``check`` after decoding a request and before running it.

    check(api_key, version, request, who, node) ->
        None                     allowed as it is: run the request
        Verdict(response, None, None)   refused whole: answer ``response`` now
        Verdict(None, request2, post)   run ``request2`` (the authorized part) and answer
                                 ``post(response)`` (the refused part merged in, results the
                                 principal may not see left out)

``who`` is the connection's Who: principal ("User:name"), client address and the
authorizer. What each API needs (Kafka's rules; docs/security.md has the table):

  JoinGroup, SyncGroup, Heartbeat, LeaveGroup,         READ on the group
    ConsumerGroupHeartbeat, Connect heartbeat/prepare/    (GROUP_AUTHORIZATION_FAILED)
    install
  ConsumerGroupHeartbeat subscribed topic names        DESCRIBE on each topic
                                                         (TOPIC_AUTHORIZATION_FAILED)
  OffsetCommit                                         READ group; READ on each topic
  OffsetFetch                                          READ group; DESCRIBE on each topic
                                                         (all topics asked: the ones it may
                                                         not describe are left out)
  OffsetDelete                                         DELETE group; READ on each topic
  DescribeGroups, ConsumerGroupDescribe, Connect       DESCRIBE on each group
    describe, FindCoordinator (groups)
  ListGroups                                           DESCRIBE on the cluster, else the
                                                         groups it may describe (filtered)
  DeleteGroups                                         DELETE on each group
  DescribeConfigs / IncrementalAlterConfigs            DESCRIBE_CONFIGS / ALTER_CONFIGS on
                                                         the resource (group, topic, cluster)
  CreateTopics                                         CREATE on the cluster or on the topic
  DeleteTopics / CreatePartitions                      DELETE / ALTER on the topic
  Metadata                                             DESCRIBE on each topic (all topics:
                                                         filtered)
  ListOffsets / Fetch / Produce                        DESCRIBE / READ / WRITE on the topic
  DescribeAcls, DescribeUserScramCredentials           DESCRIBE on the cluster
  CreateAcls, DeleteAcls, AlterUserScramCredentials    ALTER on the cluster
  ApiVersions, SaslHandshake, SaslAuthenticate,        none
    DescribeCluster

Results of refused parts are appended after the authorized results (clients match results
by name, not by position; Kafka merges them in no fixed order either).
"""
from __future__ import annotations

from typing import Callable, NamedTuple, Optional

import msgspec

from groupcoord.protocol import api_keys as K
from groupcoord.protocol import messages as m
from groupcoord.protocol.error_codes import ErrorCode as E
from groupcoord.security.acl import AclOperation, ResourceType

__all__ = ["Who", "Verdict", "check", "CLUSTER_NAME"]

CLUSTER_NAME = "kafka-cluster"
# Plain ints: these are on the heartbeat's path.
READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE = (int(AclOperation.READ), int(AclOperation.WRITE),
                                                int(AclOperation.CREATE),
                                                int(AclOperation.DELETE),
                                                int(AclOperation.ALTER),
                                                int(AclOperation.DESCRIBE))
DESCRIBE_CONFIGS = int(AclOperation.DESCRIBE_CONFIGS)
ALTER_CONFIGS = int(AclOperation.ALTER_CONFIGS)
GROUP, TOPIC, CLUSTER = int(ResourceType.GROUP), int(ResourceType.TOPIC), int(ResourceType.CLUSTER)
GROUP_AUTH = int(E.GROUP_AUTHORIZATION_FAILED)
TOPIC_AUTH = int(E.TOPIC_AUTHORIZATION_FAILED)
CLUSTER_AUTH = int(E.CLUSTER_AUTHORIZATION_FAILED)
UNKNOWN_AUTH_OPS = -2147483648

# ConfigResource types (DescribeConfigs, IncrementalAlterConfigs).
_CONFIG_TOPIC, _CONFIG_BROKER, _CONFIG_BROKER_LOGGER, _CONFIG_GROUP = 2, 4, 8, 32


class Who:
    """The principal of a connection, its client address and the node's authorizer."""
    __slots__ = ("principal", "host", "az")

    def __init__(self, principal: str, host: str, az):
        self.principal = principal
        self.host = host
        self.az = az

    def can(self, op: int, rtype: int, name: str) -> bool:
        return self.az.authorize(self.principal, self.host, op, rtype, name)

    def ops(self, rtype: int, name: str) -> int:
        return self.az.authorized_operations(self.principal, self.host, rtype, name)


class Verdict(NamedTuple):
    response: object = None
    request: object = None
    post: Optional[Callable] = None


def _replace(obj, **kw):
    return msgspec.structs.replace(obj, **kw)


def _partial(req, req_field: str, allowed: list, refused: list, resp_cls,
             resp_field: str) -> Optional[Verdict]:
    """The common shape of a request refused in part: nothing refused -> None (run it as it
    is); everything -> answered now with the refused results; else run the allowed entries
    and append the refused results to the answer's ``resp_field``."""
    if not refused:
        return None
    if not allowed:
        return Verdict(resp_cls(**{resp_field: refused}))

    def post(resp):
        setattr(resp, resp_field, list(getattr(resp, resp_field)) + refused)
        return resp
    return Verdict(None, _replace(req, **{req_field: allowed}), post)


def _top(key: int, version: int, code: int, message: Optional[str] = None) -> Verdict:
    from groupcoord.server.node import top_level_error_response
    return Verdict(top_level_error_response(key, version, code, message))


# ---------------------------------------------------------------------- single group
def _read_group(key, version, req, who, node):
    if who.can(READ, GROUP, req.group_id):
        return None
    return _top(key, version, GROUP_AUTH)


def _consumer_heartbeat(key, version, req, who, node):
    if not who.can(READ, GROUP, req.group_id):
        return _top(key, version, GROUP_AUTH)
    names = req.subscribed_topic_names
    if names:                      # null on a steady heartbeat: nothing more to check
        denied = sorted({n for n in names if not who.can(DESCRIBE, TOPIC, n)})
        if denied:
            return _top(key, version, TOPIC_AUTH,
                        "not authorized to describe subscribed topic(s): %s"
                        % ", ".join(denied))
    return None


# ---------------------------------------------------------------------- offsets
def _commit_topic(t, code: int):
    return m.OffsetCommitResponseTopic(name=t.name, partitions=[
        m.OffsetCommitResponsePartition(partition_index=p.partition_index, error_code=code)
        for p in t.partitions])


def _offset_commit(key, version, req, who, node):
    if not who.can(READ, GROUP, req.group_id):
        return Verdict(m.OffsetCommitResponse(
            topics=[_commit_topic(t, GROUP_AUTH) for t in req.topics]))
    allowed, refused = [], []
    for t in req.topics:
        if who.can(READ, TOPIC, t.name):
            allowed.append(t)
        else:
            refused.append(_commit_topic(t, TOPIC_AUTH))
    return _partial(req, "topics", allowed, refused, m.OffsetCommitResponse, "topics")


def _fetch_partition(cls, index: int, code: int):
    return cls(partition_index=index, committed_offset=-1, committed_leader_epoch=-1,
               metadata="", error_code=code)


def _fetch_topics(topics, who, topic_cls, part_cls):
    """-> (allowed topics, refused response topics) of one group's requested topics."""
    allowed, refused = [], []
    for t in topics:
        if who.can(DESCRIBE, TOPIC, t.name):
            allowed.append(t)
        else:
            refused.append(topic_cls(name=t.name, partitions=[
                _fetch_partition(part_cls, i, TOPIC_AUTH) for i in t.partition_indexes]))
    return allowed, refused


def _visible(topics, who):
    return [t for t in topics if who.can(DESCRIBE, TOPIC, t.name)]


def _offset_fetch(key, version, req, who, node):
    if version >= 8:
        return _offset_fetch_groups(req, who)
    if not who.can(READ, GROUP, req.group_id):
        if version >= 2:
            return Verdict(m.OffsetFetchResponse(error_code=GROUP_AUTH, topics=[]))
        return Verdict(m.OffsetFetchResponse(topics=[
            m.OffsetFetchResponseTopic(name=t.name, partitions=[
                _fetch_partition(m.OffsetFetchResponsePartition, i, GROUP_AUTH)
                for i in t.partition_indexes]) for t in (req.topics or ())]))
    if req.topics is None:                 # every committed topic: hide the unauthorized
        def post_all(resp):
            resp.topics = _visible(resp.topics, who)
            return resp
        return Verdict(None, req, post_all)
    allowed, refused = _fetch_topics(req.topics, who, m.OffsetFetchResponseTopic,
                                     m.OffsetFetchResponsePartition)
    if not refused:
        return None
    if not allowed:
        return Verdict(m.OffsetFetchResponse(error_code=0, topics=refused))

    def post(resp):
        resp.topics = list(resp.topics) + refused
        return resp
    return Verdict(None, _replace(req, topics=allowed), post)


def _offset_fetch_groups(req, who):
    groups, refused_groups, extra = [], [], {}
    changed = False
    for g in req.groups:
        if not who.can(READ, GROUP, g.group_id):
            refused_groups.append(m.OffsetFetchResponseGroup(group_id=g.group_id, topics=[],
                                                             error_code=GROUP_AUTH))
            changed = True
            continue
        if g.topics is None:
            extra[g.group_id] = None       # filtered in post
            groups.append(g)
            continue
        allowed, refused = _fetch_topics(g.topics, who, m.OffsetFetchResponseTopics,
                                         m.OffsetFetchResponsePartitions)
        if refused:
            changed = True
            extra[g.group_id] = refused
            g = _replace(g, topics=allowed)
        groups.append(g)
    if not changed and not extra:
        return None
    if not groups:
        return Verdict(m.OffsetFetchResponse(groups=refused_groups))

    def post(resp):
        for rg in resp.groups:
            if rg.group_id not in extra:
                continue
            more = extra[rg.group_id]
            if more is None:
                rg.topics = _visible(rg.topics, who)
            elif rg.error_code == 0:
                rg.topics = list(rg.topics) + more
        resp.groups = list(resp.groups) + refused_groups
        return resp
    return Verdict(None, _replace(req, groups=groups), post)


def _offset_delete(key, version, req, who, node):
    if not who.can(DELETE, GROUP, req.group_id):
        return Verdict(m.OffsetDeleteResponse(error_code=GROUP_AUTH, topics=[]))
    denied = [t for t in req.topics if not who.can(READ, TOPIC, t.name)]
    if not denied:
        return None
    refused = [m.OffsetDeleteResponseTopic(name=t.name, partitions=[
        m.OffsetDeleteResponsePartition(partition_index=p.partition_index,
                                        error_code=TOPIC_AUTH) for p in t.partitions])
        for t in denied]
    allowed = [t for t in req.topics if all(t is not d for d in denied)]

    def post(resp):
        if resp.error_code == 0:
            resp.topics = list(resp.topics) + refused
        return resp
    return Verdict(None, _replace(req, topics=allowed), post)


# ---------------------------------------------------------------------- several groups
def _split_groups(ids, who, op):
    allowed, denied = [], []
    for g in ids:
        (allowed if who.can(op, GROUP, g) else denied).append(g)
    return allowed, denied


def _describe_groups(key, version, req, who, node):
    allowed, denied = _split_groups(req.groups, who, DESCRIBE)
    want_ops = version >= 3 and req.include_authorized_operations
    if not denied and not want_ops:
        return None
    refused = [m.DescribeGroupsResponseDescribedGroup(
        error_code=GROUP_AUTH, error_message=None, group_id=g, group_state="",
        protocol_type="", protocol_data="", members=[],
        authorized_operations=UNKNOWN_AUTH_OPS) for g in denied]
    return _described(req, "groups", allowed, refused, want_ops, who,
                      m.DescribeGroupsResponse)


def _described(req, req_field, allowed, refused, want_ops, who, resp_cls) -> Verdict:
    """Every describe API: the refused groups appended, and the principal's authorized
    operations on each described group when asked."""
    def post(resp):
        if want_ops:
            for d in resp.groups:
                if d.error_code == 0:
                    d.authorized_operations = who.ops(GROUP, d.group_id)
        resp.groups = list(resp.groups) + refused
        return resp
    if not allowed:
        return Verdict(post(resp_cls(groups=[])))
    return Verdict(None, _replace(req, **{req_field: allowed}) if refused else req, post)


def _modern_describe(group_cls, resp_cls):
    def chk(key, version, req, who, node):
        allowed, denied = _split_groups(req.group_ids, who, DESCRIBE)
        want_ops = req.include_authorized_operations
        if not denied and not want_ops:
            return None
        refused = [group_cls(error_code=GROUP_AUTH,
                             error_message="not authorized to describe group %s" % g,
                             group_id=g, authorized_operations=UNKNOWN_AUTH_OPS)
                   for g in denied]
        return _described(req, "group_ids", allowed, refused, want_ops, who, resp_cls)
    return chk


def _list_groups(key, version, req, who, node):
    if who.can(DESCRIBE, CLUSTER, CLUSTER_NAME):
        return None

    def post(resp):
        resp.groups = [g for g in resp.groups if who.can(DESCRIBE, GROUP, g.group_id)]
        return resp
    return Verdict(None, req, post)


def _delete_groups(key, version, req, who, node):
    allowed, denied = _split_groups(req.groups_names, who, DELETE)
    refused = [m.DeleteGroupsResponseDeletableGroupResult(group_id=g, error_code=GROUP_AUTH)
               for g in denied]
    return _partial(req, "groups_names", allowed, refused, m.DeleteGroupsResponse, "results")


def _find_coordinator(key, version, req, who, node):
    key_type = req.key_type if version >= 1 else 0
    if key_type != 0:
        return None                        # answered INVALID_REQUEST anyway
    if version < 4:
        if who.can(DESCRIBE, GROUP, req.key):
            return None
        return Verdict(m.FindCoordinatorResponse(error_code=GROUP_AUTH, node_id=-1, host="",
                                                 port=-1))
    denied = {k for k in req.coordinator_keys if not who.can(DESCRIBE, GROUP, k)}
    if not denied:
        return None

    def post(resp):
        for c in resp.coordinators:
            if c.key in denied:
                c.error_code, c.error_message = GROUP_AUTH, None
                c.node_id, c.host, c.port = -1, "", -1
        return resp
    return Verdict(None, req, post)


# ---------------------------------------------------------------------- configs
def _config_resource(rtype: int, name: str, who, op: int) -> int:
    """-> 0 when allowed, else the error code of the refusal."""
    if rtype == _CONFIG_GROUP:
        return 0 if who.can(op, GROUP, name) else GROUP_AUTH
    if rtype == _CONFIG_TOPIC:
        return 0 if who.can(op, TOPIC, name) else TOPIC_AUTH
    if rtype in (_CONFIG_BROKER, _CONFIG_BROKER_LOGGER):
        return 0 if who.can(op, CLUSTER, CLUSTER_NAME) else CLUSTER_AUTH
    return 0                               # answered by the handler (unsupported type)


def _configs(op: int, field: str, resp_field: str, result_cls_name: str, resp_cls_name: str):
    def chk(key, version, req, who, node):
        allowed, refused = [], []
        result_cls = getattr(m, result_cls_name)
        for r in getattr(req, field):
            code = _config_resource(r.resource_type, r.resource_name, who, op)
            if code == 0:
                allowed.append(r)
                continue
            kw = dict(error_code=code, error_message="Authorization failed.",
                      resource_type=r.resource_type, resource_name=r.resource_name)
            if resp_field == "results":
                kw["configs"] = []
            refused.append(result_cls(**kw))
        return _partial(req, field, allowed, refused, getattr(m, resp_cls_name), resp_field)
    return chk


# ---------------------------------------------------------------------- topics
def _create_topics(key, version, req, who, node):
    if who.can(CREATE, CLUSTER, CLUSTER_NAME):
        return None
    allowed, refused = [], []
    for t in req.topics:
        if who.can(CREATE, TOPIC, t.name):
            allowed.append(t)
        else:
            refused.append(m.CreateTopicsResponseCreatableTopicResult(
                name=t.name, topic_id=m.ZERO_UUID, error_code=TOPIC_AUTH,
                error_message="Authorization failed.", topic_config_error_code=0,
                num_partitions=-1, replication_factor=-1, configs=None))
    return _partial(req, "topics", allowed, refused, m.CreateTopicsResponse, "topics")


def _delete_topics(key, version, req, who, node):
    cat = node.topics if node is not None else None

    def name_of(s):
        if s.name is not None:
            return s.name
        t = cat.by_id.get(s.topic_id) if cat is not None else None
        return t.name if t is not None else None

    def refusal(name, topic_id):
        return m.DeleteTopicsResponseDeletableTopicResult(
            name=name, topic_id=topic_id, error_code=TOPIC_AUTH,
            error_message="Authorization failed.")
    refused = []
    if version >= 6:
        allowed = []
        for s in req.topics:
            n = name_of(s)
            if n is None or who.can(DELETE, TOPIC, n):
                allowed.append(s)          # an unknown id: UNKNOWN_TOPIC_ID from the handler
            else:
                refused.append(refusal(s.name, s.topic_id))
        field = "topics"
    else:
        allowed = [n for n in req.topic_names if who.can(DELETE, TOPIC, n)]
        refused = [refusal(n, m.ZERO_UUID) for n in req.topic_names
                   if not who.can(DELETE, TOPIC, n)]
        field = "topic_names"
    return _partial(req, field, allowed, refused, m.DeleteTopicsResponse, "responses")


def _create_partitions(key, version, req, who, node):
    allowed, refused = [], []
    for t in req.topics:
        if who.can(ALTER, TOPIC, t.name):
            allowed.append(t)
        else:
            refused.append(m.CreatePartitionsResponseCreatePartitionsTopicResult(
                name=t.name, error_code=TOPIC_AUTH, error_message="Authorization failed."))
    return _partial(req, "topics", allowed, refused, m.CreatePartitionsResponse, "results")


def _metadata(key, version, req, who, node):
    """Always a post: the topics the principal may not describe are left out (all topics)
    or answered TOPIC_AUTHORIZATION_FAILED (named ones, whether they exist or not, so that
    their existence is not revealed), and authorized operations are this principal's."""
    all_topics = req.topics is None or (version == 0 and not req.topics)

    def post(resp):
        out = []
        for t in resp.topics:
            name = t.name
            if name is not None and not who.can(DESCRIBE, TOPIC, name):
                if all_topics:
                    continue
                t = m.MetadataResponseTopic(error_code=TOPIC_AUTH, name=name,
                                            topic_id=m.ZERO_UUID, is_internal=False,
                                            partitions=[],
                                            topic_authorized_operations=UNKNOWN_AUTH_OPS)
            elif t.topic_authorized_operations != UNKNOWN_AUTH_OPS and t.error_code == 0:
                t.topic_authorized_operations = who.ops(TOPIC, name)
            out.append(t)
        resp.topics = out
        if resp.cluster_authorized_operations != UNKNOWN_AUTH_OPS:
            resp.cluster_authorized_operations = who.ops(CLUSTER, CLUSTER_NAME)
        return resp
    return Verdict(None, req, post)


def _describe_cluster(key, version, req, who, node):
    if not req.include_cluster_authorized_operations:
        return None

    def post(resp):
        if resp.error_code == 0:
            resp.cluster_authorized_operations = who.ops(CLUSTER, CLUSTER_NAME)
        return resp
    return Verdict(None, req, post)


def _topic_partitions_post(op: int, req_field: str, topics_field: str, parts_field: str):
    """ListOffsets, Fetch, Produce: every partition of a topic the principal may not use
    answers TOPIC_AUTHORIZATION_FAILED (these APIs carry no data here anyway)."""
    def chk(key, version, req, who, node):
        cat = node.topics if node is not None else None

        def name_of(t):
            if key == K.FETCH:
                if version >= 13:
                    x = cat.by_id.get(t.topic_id) if cat is not None else None
                    return x.name if x is not None else None
                return t.topic
            return t.name
        denied = set()
        for t in getattr(req, req_field):
            n = name_of(t)
            if n is not None and not who.can(op, TOPIC, n):
                denied.add(n)
        if not denied:
            return None

        def post(resp):
            for t in getattr(resp, topics_field):
                if name_of(t) in denied:
                    for p in getattr(t, parts_field):
                        p.error_code = TOPIC_AUTH
            return resp
        return Verdict(None, req, post)
    return chk


# ---------------------------------------------------------------------- security admin
def _cluster_admin(op: int, refuse: Callable):
    def chk(key, version, req, who, node):
        if who.can(op, CLUSTER, CLUSTER_NAME):
            return None
        return Verdict(refuse(req, version))
    return chk


def _refuse_describe_acls(req, version):
    return m.DescribeAclsResponse(error_code=CLUSTER_AUTH, error_message="Authorization "
                                  "failed.", resources=[])


def _refuse_create_acls(req, version):
    return m.CreateAclsResponse(results=[
        m.CreateAclsResponseAclCreationResult(error_code=CLUSTER_AUTH,
                                              error_message="Authorization failed.")
        for _ in req.creations])


def _refuse_delete_acls(req, version):
    return m.DeleteAclsResponse(filter_results=[
        m.DeleteAclsResponseDeleteAclsFilterResult(
            error_code=CLUSTER_AUTH, error_message="Authorization failed.",
            matching_acls=[]) for _ in req.filters])


def _refuse_describe_scram(req, version):
    return m.DescribeUserScramCredentialsResponse(
        error_code=CLUSTER_AUTH, error_message="Authorization failed.", results=[])


def _refuse_alter_scram(req, version):
    users = [d.name for d in req.deletions] + [u.name for u in req.upsertions]
    seen, out = set(), []
    for u in users:
        if u not in seen:
            seen.add(u)
            out.append(m.AlterUserScramCredentialsResponseAlterUserScramCredentialsResult(
                user=u, error_code=CLUSTER_AUTH, error_message="Authorization failed."))
    return m.AlterUserScramCredentialsResponse(results=out)


_CHECKS: dict = {
    K.JOIN_GROUP: _read_group,
    K.SYNC_GROUP: _read_group,
    K.HEARTBEAT: _read_group,
    K.LEAVE_GROUP: _read_group,
    K.CONSUMER_GROUP_HEARTBEAT: _consumer_heartbeat,
    K.CONNECT_GROUP_HEARTBEAT: _read_group,
    K.CONNECT_GROUP_PREPARE_ASSIGNMENT: _read_group,
    K.CONNECT_GROUP_INSTALL_ASSIGNMENT: _read_group,
    K.OFFSET_COMMIT: _offset_commit,
    K.OFFSET_FETCH: _offset_fetch,
    K.OFFSET_DELETE: _offset_delete,
    K.DESCRIBE_GROUPS: _describe_groups,
    K.CONSUMER_GROUP_DESCRIBE: _modern_describe(m.ConsumerGroupDescribeResponseDescribedGroup,
                                                m.ConsumerGroupDescribeResponse),
    K.CONNECT_GROUP_DESCRIBE: _modern_describe(m.ConnectGroupDescribeResponseDescribedGroup,
                                               m.ConnectGroupDescribeResponse),
    K.LIST_GROUPS: _list_groups,
    K.DELETE_GROUPS: _delete_groups,
    K.FIND_COORDINATOR: _find_coordinator,
    K.DESCRIBE_CONFIGS: _configs(DESCRIBE_CONFIGS, "resources", "results",
                                 "DescribeConfigsResponseDescribeConfigsResult",
                                 "DescribeConfigsResponse"),
    K.INCREMENTAL_ALTER_CONFIGS: _configs(
        ALTER_CONFIGS, "resources", "responses",
        "IncrementalAlterConfigsResponseAlterConfigsResourceResponse",
        "IncrementalAlterConfigsResponse"),
    K.CREATE_TOPICS: _create_topics,
    K.DELETE_TOPICS: _delete_topics,
    K.CREATE_PARTITIONS: _create_partitions,
    K.METADATA: _metadata,
    K.DESCRIBE_CLUSTER: _describe_cluster,
    K.LIST_OFFSETS: _topic_partitions_post(DESCRIBE, "topics", "topics", "partitions"),
    K.FETCH: _topic_partitions_post(READ, "topics", "responses", "partitions"),
    K.PRODUCE: _topic_partitions_post(WRITE, "topic_data", "responses",
                                      "partition_responses"),
}

_SECURITY_CHECKS = (
    ("DESCRIBE_ACLS", DESCRIBE, _refuse_describe_acls),
    ("CREATE_ACLS", ALTER, _refuse_create_acls),
    ("DELETE_ACLS", ALTER, _refuse_delete_acls),
    ("DESCRIBE_USER_SCRAM_CREDENTIALS", DESCRIBE, _refuse_describe_scram),
    ("ALTER_USER_SCRAM_CREDENTIALS", ALTER, _refuse_alter_scram),
)
for _name, _op, _refuse in _SECURITY_CHECKS:
    _CHECKS[getattr(K, _name)] = _cluster_admin(_op, _refuse)


def check(key: int, version: int, req, who: Who, node=None) -> Optional[Verdict]:
    """None (allowed as it is) or a Verdict; APIs not in the table need no authorization."""
    fn = _CHECKS.get(key)
    if fn is None:
        return None
    return fn(key, version, req, who, node)
