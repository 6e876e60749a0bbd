"""Node-level APIs: what this process answers as a Kafka *broker*, not as a group coordinator.

Real clients need a broker around the coordinator: they negotiate versions (ApiVersions),
bootstrap (Metadata), look up their coordinator (FindCoordinator), and idle consumers keep
asking for offsets and records (ListOffsets, Fetch) and probe Produce. groupcoord stores no
data, so every answer here is a pure function of (request, version, NodeState).

A single node (a file store, ``NodeState.cluster`` None): node 0 is the only broker, the
controller and the coordinator of every group; every catalog topic's partitions are led by
node 0 and are empty (offset 0, no records).

Cluster mode (a PostgreSQL store): ``NodeState.cluster`` is the node's view of the cluster
(cluster/node.py ClusterNode, read through main.py's ClusterView): ``node_id``,
``shard_count``, ``brokers()`` -> [(node_id, host, port)] of the live nodes sorted by id,
``owner(shard)`` -> the owning node id or None while the shard moves, ``controller_id()``.
Metadata and DescribeCluster list those brokers; the controller (the lowest live id) leads
every partition, so every node gives the same answer; FindCoordinator names the owner of the
group's shard, or COORDINATOR_NOT_AVAILABLE (retriable) while it has none or its owner is
not live.

The topic catalog's admin APIs (CreateTopics, CreatePartitions, DeleteTopics) are planned in
topic_admin.py, as pure as these.

Nothing here touches sockets or the event loop: the connection layer (connection.py) calls
these functions and holds an empty Fetch for its MaxWaitMs.
"""
from __future__ import annotations

import os
from typing import Callable, Optional

from groupcoord.codegen.schema import load_all
from groupcoord.groups.topics import Topic, TopicCatalog
from groupcoord.protocol import messages as m
from groupcoord.protocol.api_keys import (ALTER_USER_SCRAM_CREDENTIALS, API_VERSIONS,
                                          CREATE_ACLS, CREATE_PARTITIONS, CREATE_TOPICS,
                                          DELETE_ACLS, DELETE_TOPICS, DESCRIBE_ACLS,
                                          DESCRIBE_CLUSTER, DESCRIBE_USER_SCRAM_CREDENTIALS,
                                          FETCH, FIND_COORDINATOR, LIST_OFFSETS, METADATA,
                                          PRODUCE, SASL_AUTHENTICATE, SASL_HANDSHAKE)
from groupcoord.protocol.error_codes import ErrorCode as E
from groupcoord.runtime.shards import shard_for

__all__ = ["NodeState", "NODE_APIS", "api_versions", "api_versions_unsupported", "metadata",
           "find_coordinator", "list_offsets", "fetch", "produce", "top_level_error_response",
           "node_api_ranges", "describe_cluster", "NO_DATA_MESSAGE"]

NODE_ID = 0
LEADER_EPOCH = 0            # every partition has had one leader (us) since it was created
ZERO_UUID = m.ZERO_UUID
UNKNOWN_AUTH_OPS = -2147483648

# The APIs answered by the node (here, and the security APIs by connection.py with
# security/); the rest go to the coordinator when it serves them.
NODE_APIS = frozenset((PRODUCE, FETCH, LIST_OFFSETS, METADATA, FIND_COORDINATOR, API_VERSIONS,
                       CREATE_TOPICS, DELETE_TOPICS, CREATE_PARTITIONS, DESCRIBE_CLUSTER,
                       SASL_HANDSHAKE, SASL_AUTHENTICATE, DESCRIBE_ACLS, CREATE_ACLS,
                       DELETE_ACLS, DESCRIBE_USER_SCRAM_CREDENTIALS,
                       ALTER_USER_SCRAM_CREDENTIALS))

# Kafka's AclOperation codes; with no authorizer every operation is allowed.
_TOPIC_OPS = sum(1 << op for op in (3, 4, 5, 6, 7, 8, 10, 11))
_CLUSTER_OPS = sum(1 << op for op in (5, 7, 8, 9, 10, 11, 12))

# Produce's ErrorMessage (v8+); kafka-python shows it in the exception, librdkafka does not
# hand it to the delivery report (docs/server.md, "What a client can and cannot do").
NO_DATA_MESSAGE = "groupcoord is a group coordinator: it stores no messages"


class NodeState:
    """What the node APIs read: this node's advertised address, the cluster id, the current
    topic catalog (a callable, so it always reflects CreateTopics), the API ranges to
    advertise, and the cluster view (None: a single node; see the module docstring)."""
    __slots__ = ("host", "port", "cluster_id", "_topics", "api_ranges", "_api_versions_body",
                 "cluster", "listener")

    def __init__(self, host: str, port: int, cluster_id: str,
                 topics: Callable[[], TopicCatalog], api_ranges: dict, cluster=None):
        self.host = host
        self.port = port
        self.cluster_id = cluster_id
        self.cluster = cluster
        # The listener (its name) this state answers for when the node has several
        # (server.py): cluster mode then names the other nodes' addresses on it.
        self.listener = None
        self._topics = topics
        self.api_ranges = dict(sorted(api_ranges.items()))
        self._api_versions_body = [m.ApiVersionsResponseApiVersion(k, lo, hi)
                                   for k, (lo, hi) in self.api_ranges.items()]

    @property
    def topics(self) -> TopicCatalog:
        return self._topics()

    def advertised(self):
        return self._api_versions_body

    def brokers(self) -> list:
        return _brokers(self)

    def controller_id(self) -> int:
        return _controller_id(self)


# metadata() also runs over metadata_cache.py's _NodeView (host, port, cluster_id, topics):
# an object without a cluster view is a single node (the cache serves file mode only).
def _brokers(node) -> list:
    """[(node_id, host, port)] sorted by id: this node alone, or the cluster's live nodes
    (never empty: a view that has read none yet lists this node)."""
    c = getattr(node, "cluster", None)
    if c is None:
        return [(NODE_ID, node.host, node.port)]
    lst = getattr(node, "listener", None)
    return list(c.brokers(lst) if lst else c.brokers()) or [(c.node_id, node.host, node.port)]


def _controller_id(node) -> int:
    c = getattr(node, "cluster", None)
    return NODE_ID if c is None else c.controller_id()


# ---------------------------------------------------------------------- ApiVersions
def api_versions(req, version: int, node: NodeState):
    return m.ApiVersionsResponse(error_code=0, api_keys=list(node.advertised()))


def api_versions_unsupported(node: NodeState):
    """The v0 body answering an ApiVersions version we do not speak (the client then retries
    with a version from our ranges)."""
    return m.ApiVersionsResponse(error_code=int(E.UNSUPPORTED_VERSION),
                                 api_keys=list(node.advertised()))


# ---------------------------------------------------------------------- Metadata
def _partitions(t: Topic, leader: int) -> list:
    return [m.MetadataResponsePartition(error_code=0, partition_index=p, leader_id=leader,
                                        leader_epoch=LEADER_EPOCH, replica_nodes=[leader],
                                        isr_nodes=[leader], offline_replicas=[])
            for p in range(t.partitions)]


def _meta_topic(t: Topic, auth_ops: int, leader: int = NODE_ID):
    return m.MetadataResponseTopic(error_code=0, name=t.name, topic_id=t.topic_id,
                                   is_internal=False, partitions=_partitions(t, leader),
                                   topic_authorized_operations=auth_ops)


def metadata(req, version: int, node: NodeState):
    cat = node.topics
    auth = _TOPIC_OPS if (version >= 8 and req.include_topic_authorized_operations) \
        else UNKNOWN_AUTH_OPS
    # Every partition is empty and any node answers Fetch and ListOffsets alike; the
    # controller leads them all so that every node's answer names the same leader.
    controller = _controller_id(node)
    want = req.topics
    if want is None or (version == 0 and not want):
        # null (v1+) or, in v0, an empty list: every topic. Never auto-created.
        topics = [_meta_topic(t, auth, controller) for t in cat]
    else:
        topics = []
        seen = set()
        for rt in want:
            # By id (v10+, a null name) or by name; a topic asked twice is answered once.
            by_id = version >= 10 and rt.name is None
            key = ("id", rt.topic_id) if by_id else ("name", rt.name)
            if key in seen:
                continue
            seen.add(key)
            t = cat.by_id.get(rt.topic_id) if by_id else cat.by_name.get(rt.name)
            if t is not None:
                topics.append(_meta_topic(t, auth, controller))
            elif by_id:
                topics.append(m.MetadataResponseTopic(
                    error_code=int(E.UNKNOWN_TOPIC_ID), name=None if version >= 12 else "",
                    topic_id=rt.topic_id, topic_authorized_operations=auth))
            else:
                topics.append(m.MetadataResponseTopic(
                    error_code=int(E.UNKNOWN_TOPIC_OR_PARTITION), name=rt.name,
                    topic_id=ZERO_UUID, topic_authorized_operations=auth))
    cluster_ops = _CLUSTER_OPS if (8 <= version <= 10 and
                                   req.include_cluster_authorized_operations) \
        else UNKNOWN_AUTH_OPS
    return m.MetadataResponse(
        brokers=[m.MetadataResponseBroker(node_id=i, host=h, port=p, rack=None)
                 for i, h, p in _brokers(node)],
        cluster_id=node.cluster_id, controller_id=controller, topics=topics,
        cluster_authorized_operations=cluster_ops, error_code=0)


# ---------------------------------------------------------------------- DescribeCluster
BROKER_ENDPOINTS, CONTROLLER_ENDPOINTS = 1, 2      # KIP-919 EndpointType


def describe_cluster(req, version: int, node: NodeState):
    """As a Kafka broker answers (AuthHelper.computeDescribeClusterResponse): the brokers
    and controller Metadata names (a single node: this one); cluster authorized operations
    are every cluster operation when asked (no authorizer, as Kafka without one), else
    Int.MinValue. This is
    a broker endpoint: EndpointType 2 (controllers) gets MISMATCHED_ENDPOINT_TYPE, an
    unknown type UNSUPPORTED_ENDPOINT_TYPE (v1+; v0 cannot name a type: brokers)."""
    et = req.endpoint_type if version >= 1 else BROKER_ENDPOINTS
    if et != BROKER_ENDPOINTS:
        if et == CONTROLLER_ENDPOINTS:
            code = E.MISMATCHED_ENDPOINT_TYPE
            msg = ("the request was sent to an endpoint of type BROKER, but we wanted an "
                   "endpoint of type CONTROLLER")
        else:
            code, msg = E.UNSUPPORTED_ENDPOINT_TYPE, "Unsupported endpoint type %d" % et
        return m.DescribeClusterResponse(error_code=int(code), error_message=msg)
    ops = _CLUSTER_OPS if req.include_cluster_authorized_operations else UNKNOWN_AUTH_OPS
    return m.DescribeClusterResponse(
        error_code=0, error_message=None, endpoint_type=BROKER_ENDPOINTS,
        cluster_id=node.cluster_id, controller_id=_controller_id(node),
        brokers=[m.DescribeClusterResponseDescribeClusterBroker(
            broker_id=i, host=h, port=p, rack=None, is_fenced=False)
            for i, h, p in _brokers(node)],
        cluster_authorized_operations=ops)


# ---------------------------------------------------------------------- FindCoordinator
GROUP_KEY_TYPE = 0
_KEY_TYPE_NAMES = {1: "transaction", 2: "share"}


def _key_error(key_type: int) -> tuple:
    what = _KEY_TYPE_NAMES.get(key_type)
    if what is None:
        return E.INVALID_REQUEST, "unknown coordinator key type %d" % key_type
    # Not retriable on purpose: no other node will ever coordinate these keys.
    return E.INVALID_REQUEST, ("this node coordinates groups only; it is not a %s coordinator"
                               % what)


def _group_coordinator(key: str, node: NodeState) -> tuple:
    """-> (error code, message, node id, host, port) of the coordinator of group ``key``."""
    c = node.cluster
    if c is None:
        return 0, None, NODE_ID, node.host, node.port
    shard = shard_for(key, c.shard_count)
    owner = c.owner(shard)
    if owner is not None:
        for i, h, p in _brokers(node):
            if i == owner:
                return 0, None, i, h, p
    # No owner (released, expired, being acquired) or an owner that is no longer live (its
    # lease runs out before another node may take the shard): Kafka's answer while a
    # coordinator moves; clients retry FindCoordinator.
    why = ("no node owns shard %d now" % shard if owner is None else
           "shard %d's owner, node %d, is not live" % (shard, owner))
    return int(E.COORDINATOR_NOT_AVAILABLE), "the group's coordinator is moving: " + why, \
        -1, "", -1


def find_coordinator(req, version: int, node: NodeState):
    key_type = req.key_type if version >= 1 else GROUP_KEY_TYPE
    if version >= 4:
        out = []
        for key in req.coordinator_keys:
            if key_type == GROUP_KEY_TYPE:
                code, msg, nid, host, port = _group_coordinator(key, node)
            else:
                code, msg = _key_error(key_type)
                code, nid, host, port = int(code), -1, "", -1
            out.append(m.FindCoordinatorResponseCoordinator(
                key=key, node_id=nid, host=host, port=port, error_code=code,
                error_message=msg))
        return m.FindCoordinatorResponse(coordinators=out)
    if key_type == GROUP_KEY_TYPE:
        code, msg, nid, host, port = _group_coordinator(req.key, node)
        return m.FindCoordinatorResponse(error_code=code,
                                         error_message=msg if version >= 1 else None,
                                         node_id=nid,
                                         host=host, port=port)
    code, msg = _key_error(key_type)
    return m.FindCoordinatorResponse(error_code=int(code), error_message=msg, node_id=-1,
                                     host="", port=-1)


# ---------------------------------------------------------------------- ListOffsets
EARLIEST, LATEST, MAX_TIMESTAMP, EARLIEST_LOCAL = -2, -1, -3, -4


def _epoch_error(current_leader_epoch: int) -> int:
    # -1 = the client does not know; above ours = it knows a newer leader than we do.
    if current_leader_epoch > LEADER_EPOCH:
        return int(E.UNKNOWN_LEADER_EPOCH)
    return 0


def list_offsets(req, version: int, node: NodeState):
    cat = node.topics
    topics = []
    for rt in req.topics:
        t = cat.by_name.get(rt.name)
        parts = []
        for p in rt.partitions:
            err = 0
            if t is None or not 0 <= p.partition_index < t.partitions:
                err = int(E.UNKNOWN_TOPIC_OR_PARTITION)
            elif version >= 4:
                err = _epoch_error(p.current_leader_epoch)
            if err:
                parts.append(m.ListOffsetsResponseListOffsetsPartitionResponse(
                    partition_index=p.partition_index, error_code=err, timestamp=-1,
                    offset=-1, leader_epoch=-1))
                continue
            ts = p.timestamp
            # Every partition is empty: log start = end = 0. Like Kafka, LATEST carries the
            # current leader epoch, EARLIEST the epoch of the first batch (none: -1), and a
            # timestamp lookup in an empty log finds nothing (offset -1).
            if ts == LATEST:
                off, epoch = 0, LEADER_EPOCH
            elif ts in (EARLIEST, EARLIEST_LOCAL):
                off, epoch = 0, -1
            else:
                off, epoch = -1, -1
            parts.append(m.ListOffsetsResponseListOffsetsPartitionResponse(
                partition_index=p.partition_index, error_code=0, timestamp=-1, offset=off,
                leader_epoch=epoch if version >= 4 else -1))
        topics.append(m.ListOffsetsResponseListOffsetsTopicResponse(name=rt.name,
                                                                    partitions=parts))
    return m.ListOffsetsResponse(topics=topics)


# ---------------------------------------------------------------------- Fetch
def fetch(req, version: int, node: NodeState) -> tuple:
    """-> (response, hold): hold is True when the response should be held for MaxWaitMs
    (nothing to return and no error, as Kafka waits for MinBytes that never arrive here)."""
    if version >= 7 and req.session_id != 0:
        # We never create fetch sessions (every response says session 0), so an incremental
        # fetch names a session we do not have; the client falls back to a full fetch.
        return m.FetchResponse(error_code=int(E.FETCH_SESSION_ID_NOT_FOUND),
                               session_id=0, responses=[]), False
    cat = node.topics
    by_id = version >= 13
    any_error = False
    out = []
    for rt in req.topics:
        if by_id:
            t = cat.by_id.get(rt.topic_id)
            missing = int(E.UNKNOWN_TOPIC_ID)
        else:
            t = cat.by_name.get(rt.topic)
            missing = int(E.UNKNOWN_TOPIC_OR_PARTITION)
        parts = []
        for p in rt.partitions:
            if t is None:
                err = missing
            elif not 0 <= p.partition < t.partitions:
                err = int(E.UNKNOWN_TOPIC_OR_PARTITION)
            else:
                err = _epoch_error(p.current_leader_epoch) if version >= 9 else 0
            if err:
                any_error = True
                parts.append(m.FetchResponsePartitionData(
                    partition_index=p.partition, error_code=err, high_watermark=-1,
                    last_stable_offset=-1, log_start_offset=-1, aborted_transactions=None,
                    records=b""))
            else:
                # Any position is "caught up, no data yet": answering OFFSET_OUT_OF_RANGE
                # for a committed offset above 0 would make clients reset (and re-commit)
                # positions their group legitimately stored here.
                parts.append(m.FetchResponsePartitionData(
                    partition_index=p.partition, error_code=0, high_watermark=0,
                    last_stable_offset=0, log_start_offset=0,
                    aborted_transactions=None if req.isolation_level == 0 else [],
                    records=b""))
        out.append(m.FetchResponseFetchableTopicResponse(
            topic=rt.topic if not by_id else "",
            topic_id=rt.topic_id if by_id else ZERO_UUID, partitions=parts))
    resp = m.FetchResponse(error_code=0, session_id=0, responses=out)
    hold = (not any_error) and req.max_wait_ms > 0 and req.min_bytes > 0
    return resp, hold


# ---------------------------------------------------------------------- Produce
def produce(req, version: int, node: NodeState):
    """None when acks=0 (Kafka sends no response then); else every partition answered
    INVALID_REQUEST with the reason in ErrorMessage (v8+). Why 42 (docs/decisions.md): no
    client retries it (librdkafka's default action for it is permanent, kafka-python's and
    Java's InvalidRequestException are not retriable), so a producer fails at once, and it
    does not send users after ACLs (29, 31) or a topic policy (44)."""
    if req.acks == 0:
        return None
    code = int(E.INVALID_REQUEST)
    return m.ProduceResponse(responses=[
        m.ProduceResponseTopicProduceResponse(name=t.name, partition_responses=[
            m.ProduceResponsePartitionProduceResponse(
                index=p.index, error_code=code, base_offset=-1, log_append_time_ms=-1,
                log_start_offset=-1, record_errors=[], error_message=NO_DATA_MESSAGE)
            for p in t.partition_data])
        for t in req.topic_data])


# ---------------------------------------------------------------------- generic errors
_SCHEMA_DIR = os.path.join(os.path.dirname(m.__file__), "schemas")
_TOP_LEVEL: Optional[dict] = None


def _top_level_fields() -> dict:
    # {api_key: (error code versions, error message versions)} from the schemas: which
    # response versions can carry a request-wide error.
    global _TOP_LEVEL
    if _TOP_LEVEL is None:
        out = {}
        for spec in load_all(_SCHEMA_DIR).values():
            if spec.type != "response":
                continue
            fields = {f.name: f for f in spec.fields}
            out[spec.api_key] = (fields.get("ErrorCode"), fields.get("ErrorMessage"))
        _TOP_LEVEL = out
    return _TOP_LEVEL


def top_level_error_response(api_key: int, version: int, code: int,
                             message: Optional[str] = None):
    """A response of api_key at version carrying ``code`` as its request-wide error, or None
    when that response has no top-level error code (the caller then closes the
    connection: an empty response without an error would read as success)."""
    from groupcoord.protocol import get_codec
    ec, em = _top_level_fields().get(api_key, (None, None))
    if ec is None or not ec.present(version):
        return None
    resp_t = get_codec(api_key, version).response_type
    kw = {"error_code": int(code)}
    if em is not None and em.present(version) and message is not None:
        kw["error_message"] = message
    if api_key == METADATA:
        kw["brokers"] = []
    return resp_t(**kw)


def node_api_ranges(supported: dict, serves: Callable[[int], bool]) -> dict:
    """The ranges to advertise: APIs with a codec AND an implementation (node or coordinator).
    Never advertise something we would not answer."""
    return {k: r for k, r in supported.items() if k in NODE_APIS or serves(k)}
