"""Codec micro-benchmarks: groupcoord vs kafka-python 3.0.12 (or, for the APIs kafka-python
lacks, the pure-Python baseline in benchmarks/baseline_py.py), encode and decode, side by side.

Opt-in only (the project's testpaths is tests/ and its addopts disable benchmarks):

    PYTHONPATH=src python -m pytest benchmarks/bench_codec.py --benchmark-enable
    python benchmarks/report.py --out docs/benchmarks-codec.md     # runs this + writes the table

Every row is one pytest-benchmark *group* ("<message> v<N> | encode|decode") holding exactly
two benchmarks, impl=groupcoord and impl=kafka-python / baseline, so the two implementations
are timed in the same process, same run, on the same input.

Before anything is timed, ``_verified_case`` checks (outside the timed region) that:
  * kafka-python rows: both sides encode the message to identical bytes, groupcoord decodes
    them back to the original Struct, and kafka-python decodes them and re-encodes the same
    bytes;
  * baseline rows: the baseline's bytes equal groupcoord's, and both decode them to the same
    Struct (equal to the original).

What is timed: encode = one call turning an already-built message object into body bytes
(no header/frame); decode = one call turning body bytes into a message object. Object
construction on the encode side is not timed on either side. groupcoord is called through
the bound codec methods (``get_codec(key, v).encode_request`` etc., the fastest path); the
generic ``P.decode(cls, body, v)`` is timed separately for HeartbeatRequest.
"""
import functools
import uuid

import pytest

import groupcoord.protocol as P

import baseline_py as B

from kafka.protocol.consumer.group import HeartbeatRequest as KHeartbeatRequest
from kafka.protocol.consumer.group import JoinGroupRequest as KJoinGroupRequest
from kafka.protocol.metadata.metadata import MetadataResponse as KMetadataResponse

pytestmark = pytest.mark.perf

KAFKA_PYTHON = "kafka-python"
BASELINE = "baseline"      # benchmarks/baseline_py.py (pure-Python struct.pack/unpack)
GROUPCOORD = "groupcoord"


def _tid(i):
    """Deterministic 16-byte topic id."""
    return uuid.UUID(int=(0x5EED << 96) | (i * 0x9E3779B97F4A7C15 & ((1 << 96) - 1))).bytes


MEMBER_ID = "consumer-1-" + str(uuid.UUID(int=0x1234567890ABCDEF1234567890ABCDEF))
NEW_MEMBER_ID = "Zm9vYmFyYmF6cXV4MTIzNA"   # KIP-848: client-generated, 22 chars
TOPICS = ["orders-%02d" % i for i in range(10)]


# ------------------------------------------------------------------------------ fixtures
# Each builder returns a Case: the message, the codec direction, and the other side's
# encode / decode callables (bound so that the timed call has the same shape on both sides).

class Case:
    def __init__(self, row, version, msg, request, other, other_obj=None, other_encode=None,
                 other_decode=None):
        self.row, self.version, self.msg, self.request = row, version, msg, request
        self.other = other
        codec = P.get_codec(type(msg).API_KEY, version)
        self.gc_encode = codec.encode_request if request else codec.encode_response
        self.gc_decode = codec.decode_request if request else codec.decode_response
        self.other_obj = other_obj
        self.other_encode = other_encode
        self.other_decode = other_decode
        self.body = self.gc_encode(msg)


def _kp(row, version, msg, kcls, kobj):
    # kafka-python: obj.encode() uses the version the object was built with;
    # Cls[v].decode(body) is the versioned-class classmethod.
    return Case(row, version, msg, kcls.is_request(), KAFKA_PYTHON, other_obj=kobj,
                other_encode=kobj.encode, other_decode=kcls[version].decode)


def case_heartbeat():
    kw = dict(group_id="my-group", generation_id=42, member_id=MEMBER_ID, group_instance_id=None)
    return _kp("HeartbeatRequest v4", 4, P.HeartbeatRequest(**kw), KHeartbeatRequest,
               KHeartbeatRequest[4](**kw))


def _join_group(version):
    metadata = bytes(range(100))   # 100-byte ConsumerProtocolSubscription stand-in
    kw = dict(group_id="my-group", session_timeout_ms=45000, rebalance_timeout_ms=300000,
              member_id=MEMBER_ID, group_instance_id=None, protocol_type="consumer")
    msg = P.JoinGroupRequest(protocols=[P.JoinGroupRequestProtocol(name="range",
                                                                   metadata=metadata)],
                             reason=None, **kw)
    kp = KJoinGroupRequest[version](
        protocols=[KJoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=metadata)],
        **({"reason": None} if version >= 8 else {}), **kw)
    return _kp("JoinGroupRequest v%d (1 protocol, 100 B metadata)" % version, version, msg,
               KJoinGroupRequest, kp)


def case_join_group_v9():
    return _join_group(9)


def case_join_group_v5():
    return _join_group(5)


def _assignment(cls):
    return [cls(topic_id=_tid(t), partitions=list(range(t % 3, t % 3 + 10))) for t in range(10)]


def case_cg_heartbeat_request():
    msg = P.ConsumerGroupHeartbeatRequest(
        group_id="my-group", member_id=NEW_MEMBER_ID, member_epoch=5, instance_id=None,
        rack_id=None, rebalance_timeout_ms=300000, subscribed_topic_names=list(TOPICS),
        subscribed_topic_regex=None, server_assignor="uniform",
        topic_partitions=_assignment(P.ConsumerGroupHeartbeatRequestTopicPartitions))
    return Case("ConsumerGroupHeartbeatRequest v1 (10 topics x 10 partitions)", 1, msg, True,
                BASELINE, other_encode=functools.partial(
                    B.encode_consumer_group_heartbeat_request_v1, msg),
                other_decode=B.decode_consumer_group_heartbeat_request_v1)


def case_cg_heartbeat_response():
    msg = P.ConsumerGroupHeartbeatResponse(
        throttle_time_ms=0, error_code=0, error_message=None, member_id=NEW_MEMBER_ID,
        member_epoch=6, heartbeat_interval_ms=5000,
        assignment=P.ConsumerGroupHeartbeatResponseAssignment(
            topic_partitions=_assignment(P.ConsumerGroupHeartbeatResponseTopicPartitions)))
    return Case("ConsumerGroupHeartbeatResponse v1 (same 10 x 10 assignment)", 1, msg, False,
                BASELINE, other_encode=functools.partial(
                    B.encode_consumer_group_heartbeat_response_v1, msg),
                other_decode=B.decode_consumer_group_heartbeat_response_v1)


def case_connect_heartbeat():
    # 4 connectors, 100 tasks in all (40 + 30 + 20 + 10), as a worker's full heartbeat.
    counts = {"jdbc-source-orders": 40, "s3-sink-events": 30, "es-sink-search": 20,
              "debezium-pg-users": 10}
    msg = P.ConnectGroupHeartbeatRequest(
        group_id="connect-cluster", member_id="worker-" + str(uuid.UUID(int=7)),
        member_epoch=12, instance_id=None, worker_url="http://connect-worker-3:8083",
        rebalance_timeout_ms=60000, server_assignor=None, client_assignors=None,
        config_state=P.ConnectGroupHeartbeatRequestConfigState(
            config_offset=123456,
            connectors=[P.ConnectGroupHeartbeatRequestConnectorConfig(name=n, task_count=c)
                        for n, c in counts.items()]),
        owned_connectors_and_tasks=P.ConnectGroupHeartbeatRequestConnectorsAndTasks(
            connectors=list(counts),
            tasks=[P.ConnectGroupHeartbeatRequestConnectorTasks(connector=n,
                                                                task_ids=list(range(c)))
                   for n, c in counts.items()]))
    assert sum(len(t.task_ids) for t in msg.owned_connectors_and_tasks.tasks) == 100
    return Case("ConnectGroupHeartbeatRequest v0 (100 tasks, 4 connectors)", 0, msg, True,
                BASELINE, other_encode=functools.partial(
                    B.encode_connect_group_heartbeat_request_v0, msg),
                other_decode=B.decode_connect_group_heartbeat_request_v0)


def case_metadata():
    brokers = [dict(node_id=n, host="broker-%d.kafka.svc.cluster.local" % n, port=9092,
                    rack="rack-%d" % n) for n in (1, 2, 3)]
    topics = []
    for t in range(100):
        parts = []
        for p in range(10):
            r = [1 + (p + k) % 3 for k in range(3)]
            parts.append(dict(error_code=0, partition_index=p, leader_id=r[0], leader_epoch=7,
                              replica_nodes=r, isr_nodes=list(r), offline_replicas=[]))
        topics.append(dict(error_code=0, name="topic-%03d" % t, topic_id=_tid(t),
                           is_internal=False, partitions=parts))
    head = dict(throttle_time_ms=0, cluster_id="Jq3vQm9xT0K2f8b1cZ7wQA", controller_id=1,
                error_code=0)
    msg = P.MetadataResponse(
        brokers=[P.MetadataResponseBroker(**b) for b in brokers],
        topics=[P.MetadataResponseTopic(
            partitions=[P.MetadataResponsePartition(**p) for p in t["partitions"]],
            topic_authorized_operations=-2147483648,
            **{k: v for k, v in t.items() if k != "partitions"}) for t in topics],
        **head)
    K = KMetadataResponse
    kp = K[12](
        brokers=[K.MetadataResponseBroker(**b) for b in brokers],
        topics=[K.MetadataResponseTopic(
            partitions=[K.MetadataResponseTopic.MetadataResponsePartition(**p)
                        for p in t["partitions"]],
            authorized_operations=None,   # kafka-python's "unset" (-2^31 on the wire)
            **{k: (uuid.UUID(bytes=v) if k == "topic_id" else v)
               for k, v in t.items() if k != "partitions"}) for t in topics],
        **head)
    return _kp("MetadataResponse v12 (100 topics x 10 partitions, RF 3)", 12, msg, K, kp)


CASE_BUILDERS = {
    "heartbeat_v4": case_heartbeat,
    "join_group_v9": case_join_group_v9,
    "join_group_v5": case_join_group_v5,
    "cg_heartbeat_req_v1": case_cg_heartbeat_request,
    "cg_heartbeat_resp_v1": case_cg_heartbeat_response,
    "connect_heartbeat_v0": case_connect_heartbeat,
    "metadata_resp_v12": case_metadata,
}


# ------------------------------------------------------------------------- verification

def _verify(c):
    body = c.body
    assert isinstance(body, bytes) and body
    assert c.gc_decode(body) == c.msg, "groupcoord does not round-trip %s" % c.row
    other_body = bytes(c.other_encode())
    assert other_body == body, "%s and groupcoord encode %s differently" % (c.other, c.row)
    decoded = c.other_decode(body)
    if c.other == KAFKA_PYTHON:
        # kafka-python's compiled decoder bypasses __init__, so a decoded message lacks the
        # _header slot that encode() reads; give it the value __init__ would have set.
        if not hasattr(decoded, "_header"):
            decoded._header = None
        assert bytes(decoded.encode(version=c.version)) == body, \
            "kafka-python does not re-encode %s to the same bytes" % c.row
    else:
        assert decoded == c.msg, "baseline decodes %s differently" % c.row


@functools.lru_cache(maxsize=None)
def _verified_case(key):
    c = CASE_BUILDERS[key]()
    _verify(c)
    return c


# ---------------------------------------------------------------------------- benchmarks

PARAMS = [pytest.param(key, op, impl, id="%s-%s-%s" % (key, op, impl))
          for key in CASE_BUILDERS for op in ("encode", "decode")
          for impl in (GROUPCOORD, "other")]


@pytest.mark.parametrize("key,op,impl", PARAMS)
def test_codec(benchmark, key, op, impl):
    c = _verified_case(key)          # setup + equality assertions: not timed
    impl_name = GROUPCOORD if impl == GROUPCOORD else c.other
    benchmark.group = "%s | %s" % (c.row, op)
    benchmark.name = impl_name
    benchmark.extra_info.update(row=c.row, op=op, impl=impl_name, body_bytes=len(c.body))
    body = c.body
    if impl == GROUPCOORD:
        if op == "encode":
            result = benchmark(c.gc_encode, c.msg)
            assert result == body
        else:
            result = benchmark(c.gc_decode, body)
            assert result == c.msg
    else:
        if op == "encode":
            result = benchmark(c.other_encode)
            assert bytes(result) == body
        else:
            result = benchmark(c.other_decode, body)
            assert result is not None


def test_heartbeat_decode_generic(benchmark):
    """HeartbeatRequest v4 via the convenience API P.decode(cls, body, v) (class -> codec
    lookup on every call), for comparison with the bound-method row."""
    c = _verified_case("heartbeat_v4")
    benchmark.group = "%s | decode (P.decode convenience API)" % c.row
    benchmark.name = GROUPCOORD
    benchmark.extra_info.update(row=c.row, op="decode-generic", impl=GROUPCOORD,
                                body_bytes=len(c.body))
    result = benchmark(P.decode, P.HeartbeatRequest, c.body, 4)
    assert result == c.msg


def test_harness_overhead(benchmark):
    """Reference: the harness timing a trivial one-argument builtin call (``id(body)``); the
    per-call overhead included in every row above."""
    c = _verified_case("heartbeat_v4")
    benchmark.group = "harness overhead (reference)"
    benchmark.name = "id(body)"
    benchmark.extra_info.update(row="harness", op="overhead", impl="none",
                                body_bytes=len(c.body))
    benchmark(id, c.body)
