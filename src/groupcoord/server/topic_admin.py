"""The topic catalog's admin APIs, planned purely: CreateTopics, CreatePartitions and
DeleteTopics as ``plan_*(request, version, catalog, limits)`` -> (response, new catalog or
None), Kafka's checks and error codes, and the limits an operator sets on the catalog.

The server persists the new catalog and installs it (``ShardSet.set_topics``) before it
answers (server.py ``create_topics``, catalog.py ``create_partitions`` / ``delete_topics``);
nothing here touches a file, a socket or the event loop.
"""
from __future__ import annotations

import collections
from typing import NamedTuple, Optional

from groupcoord.groups.limits import validate_topic_name
from groupcoord.groups.topics import Topic, TopicCatalog, topic_id_for
from groupcoord.protocol import messages as m
from groupcoord.protocol.api_keys import CREATE_PARTITIONS
from groupcoord.protocol.error_codes import ErrorCode as E
from groupcoord.server.node import NODE_ID, ZERO_UUID

__all__ = ["CatalogLimits", "check_catalog_limits", "plan_create_topics",
           "plan_create_partitions", "plan_delete_topics", "timed_out_response",
           "DEFAULT_PARTITIONS", "MAX_PARTITIONS"]

DEFAULT_PARTITIONS = 1      # Kafka's num.partitions default, for CreateTopics' -1
MAX_PARTITIONS = 1 << 20    # a CreateTopics guard: the catalog is held in memory by every shard


def _name_counts(topics) -> dict:
    """How many times each topic name is given (a name given twice is refused)."""
    return collections.Counter(t.name for t in topics)


def _delete_given(req, version: int) -> list:
    """DeleteTopics' (name, topic id) pairs: names only before v6 (TopicNames), name or id
    from v6 (Topics)."""
    if version >= 6:
        return [(t.name, t.topic_id) for t in req.topics]
    return [(n, ZERO_UUID) for n in req.topic_names]


# ---------------------------------------------------------------------- CreateTopics
CREATE_TOPICS_DISABLED = "CreateTopics is disabled on this node (--allow-create-topics)"


class CatalogLimits(NamedTuple):
    """What clients may do to the topic catalog (``groupcoord serve`` flags). Topics are an
    operator's choice: CreateTopics and CreatePartitions are off unless
    --allow-create-topics, DeleteTopics unless --allow-delete-topics (Kafka's
    delete.topic.enable, here off by default too: a deletion revokes the topic's partitions
    and deletes its committed offsets in every group). The catalog is held in memory by
    every shard and listed by Metadata, so it is bounded."""
    allow_create_topics: bool = False       # --allow-create-topics
    max_topics: int = 10_000                # --max-topics
    max_partitions: int = 2_000_000         # --max-partitions (all topics together)
    allow_delete_topics: bool = False       # --allow-delete-topics


def plan_create_topics(req, version: int, catalog: TopicCatalog,
                       limits: CatalogLimits = CatalogLimits()) -> tuple:
    """-> (response, new catalog or None). Pure: the caller persists the new catalog and
    installs it (``ShardSet.set_topics``) before it sends the response, unless
    ValidateOnly. Per-topic errors as Kafka's: INVALID_TOPIC_EXCEPTION, TOPIC_ALREADY_EXISTS,
    INVALID_PARTITIONS, INVALID_REPLICATION_FACTOR (this node is the only broker),
    INVALID_REPLICA_ASSIGNMENT, INVALID_REQUEST (a name given twice); POLICY_VIOLATION when
    CreateTopics is disabled or a topic would take the catalog over ``limits``."""
    counts = _name_counts(req.topics)
    results = []
    new: list = []
    n_topics = len(catalog)
    n_parts = sum(t.partitions for t in catalog)
    for t in req.topics:
        if not limits.allow_create_topics:
            code, msg, parts = E.POLICY_VIOLATION, CREATE_TOPICS_DISABLED, 0
        else:
            code, msg, parts = _check_creatable(t, version, catalog, counts)
        if not code:
            code, msg = _check_capacity(limits, n_topics, n_parts, parts)
        if code:
            results.append(m.CreateTopicsResponseCreatableTopicResult(
                name=t.name, topic_id=ZERO_UUID, error_code=int(code), error_message=msg,
                num_partitions=-1, replication_factor=-1, configs=None))
            continue
        n_topics += 1
        n_parts += parts
        tid = topic_id_for(t.name)
        new.append(Topic(t.name, tid, parts))
        results.append(m.CreateTopicsResponseCreatableTopicResult(
            name=t.name, topic_id=tid, error_code=0, error_message=None,
            num_partitions=parts, replication_factor=1, configs=[]))
    resp = m.CreateTopicsResponse(topics=results)
    if not new or req.validate_only:
        return resp, None
    return resp, catalog.with_topics(*new)


def _check_capacity(limits: CatalogLimits, n_topics: int, n_parts: int, parts: int) -> tuple:
    if n_topics + 1 > limits.max_topics:
        return (E.POLICY_VIOLATION, "the topic catalog holds %d topics, the most this node "
                "allows (--max-topics %d)" % (n_topics, limits.max_topics))
    if n_parts + parts > limits.max_partitions:
        return (E.POLICY_VIOLATION, "%d more partitions would take the topic catalog to %d, "
                "over the %d this node allows (--max-partitions)"
                % (parts, n_parts + parts, limits.max_partitions))
    return 0, None


def check_catalog_limits(catalog: TopicCatalog, limits: CatalogLimits) -> Optional[str]:
    """Why ``catalog`` (the topics given at startup merged into the stored ones) is over
    ``limits``, or None."""
    n_parts = sum(t.partitions for t in catalog)
    if len(catalog) > limits.max_topics:
        return ("the topic catalog has %d topics, over --max-topics %d"
                % (len(catalog), limits.max_topics))
    if n_parts > limits.max_partitions:
        return ("the topic catalog has %d partitions in all, over --max-partitions %d"
                % (n_parts, limits.max_partitions))
    return None


def _check_creatable(t, version: int, catalog: TopicCatalog, counts: dict) -> tuple:
    if counts[t.name] > 1:
        return E.INVALID_REQUEST, "topic %r appears more than once in the request" % t.name, 0
    bad = validate_topic_name(t.name)
    if bad:
        return E.INVALID_TOPIC_EXCEPTION, bad, 0
    if t.name in catalog.by_name:
        return E.TOPIC_ALREADY_EXISTS, "topic %r already exists" % t.name, 0
    if t.assignments:
        if t.num_partitions != -1 or t.replication_factor != -1:
            return (E.INVALID_REQUEST, "both numPartitions or replicationFactor and "
                    "replicasAssignments were set", 0)
        idx = sorted(a.partition_index for a in t.assignments)
        if idx != list(range(len(idx))):
            return E.INVALID_REPLICA_ASSIGNMENT, "partitions must be numbered 0..n-1", 0
        for a in t.assignments:
            if list(a.broker_ids) != [NODE_ID]:
                return (E.INVALID_REPLICA_ASSIGNMENT, "this cluster has one broker, node %d"
                        % NODE_ID, 0)
        parts = len(idx)
    else:
        parts = t.num_partitions
        if parts == -1 and version >= 4:
            parts = DEFAULT_PARTITIONS
        if parts < 1:
            return E.INVALID_PARTITIONS, "number of partitions must be at least 1", 0
        if t.replication_factor not in (1, -1) or (t.replication_factor == -1 and version < 4):
            return (E.INVALID_REPLICATION_FACTOR, "replication factor must be 1: this "
                    "cluster has one broker", 0)
    if parts > MAX_PARTITIONS:
        return E.INVALID_PARTITIONS, "at most %d partitions per topic" % MAX_PARTITIONS, 0
    return 0, None, parts


# ---------------------------------------------------------------------- CreatePartitions
CREATE_PARTITIONS_DISABLED = ("CreatePartitions is disabled on this node "
                              "(--allow-create-topics)")


def plan_create_partitions(req, version: int, catalog: TopicCatalog,
                           limits: CatalogLimits = CatalogLimits()) -> tuple:
    """-> (response, new catalog or None). Pure; the caller persists and installs the new
    catalog before it answers, unless ValidateOnly. Kafka's checks and errors
    (ControllerApis.createPartitions, ReplicationControlManager.createPartitions): a name
    given twice -> INVALID_REQUEST (one result for it); unknown topic ->
    UNKNOWN_TOPIC_OR_PARTITION; a count not above the current -> INVALID_PARTITIONS;
    assignments not one per new partition, or naming another broker than this one ->
    INVALID_REPLICA_ASSIGNMENT. Here also: POLICY_VIOLATION when CreatePartitions is off
    (--allow-create-topics) or the catalog would go over --max-partitions, and
    INVALID_PARTITIONS above MAX_PARTITIONS per topic."""
    counts = _name_counts(req.topics)
    n_parts = sum(t.partitions for t in catalog)
    results, grown, seen = [], [], set()
    for t in req.topics:
        if t.name in seen:
            continue                    # a duplicate name gets one result
        seen.add(t.name)
        if counts[t.name] > 1:
            code, msg, add = E.INVALID_REQUEST, "Duplicate topic name.", 0
        elif not limits.allow_create_topics:
            code, msg, add = E.POLICY_VIOLATION, CREATE_PARTITIONS_DISABLED, 0
        else:
            code, msg, add = _check_growable(t, catalog)
        if not code and n_parts + add > limits.max_partitions:
            code, msg = (E.POLICY_VIOLATION, "%d more partitions would take the topic catalog "
                         "to %d, over the %d this node allows (--max-partitions)"
                         % (add, n_parts + add, limits.max_partitions))
        if code:
            results.append(m.CreatePartitionsResponseCreatePartitionsTopicResult(
                name=t.name, error_code=int(code), error_message=msg))
            continue
        n_parts += add
        old = catalog.by_name[t.name]
        grown.append(Topic(old.name, old.topic_id, t.count))
        results.append(m.CreatePartitionsResponseCreatePartitionsTopicResult(
            name=t.name, error_code=0, error_message=None))
    resp = m.CreatePartitionsResponse(results=results)
    if not grown or req.validate_only:
        return resp, None
    return resp, catalog.with_topics(*grown)


def _check_growable(t, catalog: TopicCatalog) -> tuple:
    cur = catalog.by_name.get(t.name)
    if cur is None:
        return E.UNKNOWN_TOPIC_OR_PARTITION, "topic %r does not exist" % t.name, 0
    if t.count == cur.partitions:
        return (E.INVALID_PARTITIONS, "Topic already has %d partition(s)." % cur.partitions,
                0)
    if t.count < cur.partitions:
        return (E.INVALID_PARTITIONS, "The topic %s currently has %d partition(s); %d would "
                "not be an increase." % (t.name, cur.partitions, t.count), 0)
    if t.count > MAX_PARTITIONS:
        return E.INVALID_PARTITIONS, "at most %d partitions per topic" % MAX_PARTITIONS, 0
    add = t.count - cur.partitions
    if t.assignments is not None:
        if len(t.assignments) != add:
            return (E.INVALID_REPLICA_ASSIGNMENT, "Attempted to add %d additional "
                    "partition(s), but only %d assignment(s) were specified."
                    % (add, len(t.assignments)), 0)
        for a in t.assignments:
            if list(a.broker_ids) != [NODE_ID]:
                return (E.INVALID_REPLICA_ASSIGNMENT, "this cluster has one broker, node %d, "
                        "and every partition one replica: %r" % (NODE_ID, list(a.broker_ids)),
                        0)
    return 0, None, add


# ---------------------------------------------------------------------- DeleteTopics
DELETE_TOPICS_DISABLED = "DeleteTopics is disabled on this node (--allow-delete-topics)"


def plan_delete_topics(req, version: int, catalog: TopicCatalog,
                       limits: CatalogLimits = CatalogLimits()) -> tuple:
    """-> (response, new catalog or None). Pure; the caller persists and installs the new
    catalog before it answers. Topics by name (v1-5: TopicNames) or by name or id (v6:
    Topics). Kafka's checks and errors (ControllerApis.deleteTopics): off ->
    TOPIC_DELETION_DISABLED for every topic (INVALID_REQUEST before v3, as Kafka);
    a name or id given twice -> INVALID_REQUEST (one result); both name and id, or
    neither -> INVALID_REQUEST; a name that maps to an id also given -> INVALID_REQUEST;
    unknown name -> UNKNOWN_TOPIC_OR_PARTITION; unknown id -> UNKNOWN_TOPIC_ID. Results
    in request order (Kafka shuffles them)."""
    R = m.DeleteTopicsResponseDeletableTopicResult
    given = _delete_given(req, version)
    if not limits.allow_delete_topics:
        code = E.TOPIC_DELETION_DISABLED if version >= 3 else E.INVALID_REQUEST
        return m.DeleteTopicsResponse(responses=[
            R(name=n, topic_id=tid, error_code=int(code), error_message=DELETE_TOPICS_DISABLED)
            for n, tid in given]), None
    names: dict = {}
    ids: dict = {}
    for n, tid in given:
        if n is not None and tid == ZERO_UUID:
            names[n] = names.get(n, 0) + 1
        elif n is None and tid != ZERO_UUID:
            ids[tid] = ids.get(tid, 0) + 1
    results: list = []
    gone: dict = {}                     # topic id -> result index, of the topics deleted
    done = set()
    for n, tid in given:
        if n is None and tid == ZERO_UUID:
            results.append(R(name=None, topic_id=tid, error_code=int(E.INVALID_REQUEST),
                             error_message="Neither topic name nor id were specified."))
            continue
        if n is not None and tid != ZERO_UUID:
            results.append(R(name=n, topic_id=tid, error_code=int(E.INVALID_REQUEST),
                             error_message="You may not specify both topic name and topic "
                                           "id."))
            continue
        key = ("name", n) if n is not None else ("id", tid)
        if key in done:
            continue                    # a duplicate gets one result
        done.add(key)
        if (names.get(n, 0) if n is not None else ids.get(tid, 0)) > 1:
            results.append(R(name=n, topic_id=tid, error_code=int(E.INVALID_REQUEST),
                             error_message="Duplicate topic name." if n is not None
                             else "Duplicate topic id."))
            continue
        t = catalog.by_name.get(n) if n is not None else catalog.by_id.get(tid)
        if t is None:
            if n is not None:
                code, msg = E.UNKNOWN_TOPIC_OR_PARTITION, "topic %r does not exist" % n
            else:
                code, msg = E.UNKNOWN_TOPIC_ID, "no topic has this id"
            results.append(R(name=n, topic_id=tid, error_code=int(code), error_message=msg))
            continue
        if t.topic_id in gone:
            # A name and the id it maps to: neither is deleted (Kafka's rule).
            i = gone.pop(t.topic_id)
            results[i] = R(name=t.name, topic_id=t.topic_id, error_code=int(E.INVALID_REQUEST),
                           error_message="The provided topic name maps to an ID that was "
                                         "already supplied.")
            continue
        gone[t.topic_id] = len(results)
        results.append(R(name=t.name, topic_id=t.topic_id if version >= 6 else ZERO_UUID,
                         error_code=0, error_message=None))
    resp = m.DeleteTopicsResponse(responses=results)
    if not gone:
        return resp, None
    return resp, TopicCatalog(t for t in catalog if t.topic_id not in gone)


def timed_out_response(api_key: int, req, version: int):
    """CreatePartitions / DeleteTopics answered REQUEST_TIMED_OUT for every topic: the
    request waited for its turn (catalog changes run one at a time) longer than its
    TimeoutMs, and changed nothing (Kafka's controller fails an event whose deadline passed
    in its queue the same way)."""
    code = int(E.REQUEST_TIMED_OUT)
    msg = "waited more than TimeoutMs for another topic catalog change to finish"
    if api_key == CREATE_PARTITIONS:
        return m.CreatePartitionsResponse(results=[
            m.CreatePartitionsResponseCreatePartitionsTopicResult(
                name=t.name, error_code=code, error_message=msg) for t in req.topics])
    return m.DeleteTopicsResponse(responses=[
        m.DeleteTopicsResponseDeletableTopicResult(name=n, topic_id=tid, error_code=code,
                                                   error_message=msg)
        for n, tid in _delete_given(req, version)])
