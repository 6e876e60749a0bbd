"""Topic catalog admin and Produce with real clients against `groupcoord serve` (issue 17):
confluent-kafka 2.16 AdminClient (every call in a child process that must exit 0) and
kafka-python 3.0 KafkaAdminClient: describe_cluster, create_partitions, delete_topics,
with running groups; confluent-kafka Producer and kafka-python KafkaProducer see why
nothing is stored. Every wait is bounded; every process is stopped by its PID (serve_proc)."""
import json
import subprocess
import sys
import textwrap
import time

import pytest

from serve_proc import describe_consumer_group, serve  # noqa: F401  (fixture)

confluent_kafka = pytest.importorskip("confluent_kafka")
kafka = pytest.importorskip("kafka")
from confluent_kafka import Consumer, KafkaError  # noqa: E402
from kafka import KafkaAdminClient, KafkaProducer  # noqa: E402
from kafka.admin import NewPartitions  # noqa: E402
import kafka.errors as KE  # noqa: E402

DEADLINE_S = 60.0
CHILD_TIMEOUT_S = 60.0
ADMIN_FLAGS = ["--allow-create-topics", "--allow-delete-topics"]


# ---------------------------------------------------------------------- helpers
def ck_child(bootstrap, body):
    """Run ``body`` in a child process with ``a``, a confluent-kafka AdminClient; it prints
    one JSON line (``out(...)``). The child must exit 0 (librdkafka must not abort at
    exit). -> the printed value."""
    code = textwrap.dedent("""
        import json, sys
        from confluent_kafka import KafkaException
        from confluent_kafka.admin import AdminClient, NewPartitions
        a = AdminClient({"bootstrap.servers": sys.argv[1], "broker.address.family": "v4",
                         "client.id": "ck-admin"})
        def out(v):
            print(json.dumps(v), flush=True)
        def err_of(f):
            try:
                f.result()
                return None
            except KafkaException as e:
                return e.args[0].name()
    """) + textwrap.dedent(body)
    r = subprocess.run([sys.executable, "-c", code, bootstrap], capture_output=True,
                       text=True, timeout=CHILD_TIMEOUT_S)
    assert r.returncode == 0, "exit %s\nstdout: %s\nstderr: %s" % (r.returncode, r.stdout,
                                                                   r.stderr[-4000:])
    return json.loads(r.stdout.strip().splitlines()[-1])


def kp_admin(srv):
    return KafkaAdminClient(bootstrap_servers=srv.bootstrap, client_id="kp-admin",
                            request_timeout_ms=15000)


def consumer_conf(bootstrap, group, name, protocol):
    conf = {"bootstrap.servers": bootstrap, "broker.address.family": "v4", "group.id": group,
            "client.id": name, "enable.auto.commit": False, "auto.offset.reset": "earliest",
            "reconnect.backoff.ms": 50, "reconnect.backoff.max.ms": 500,
            "retry.backoff.ms": 50, "fetch.wait.max.ms": 100,
            # Long on purpose: a consumer's own metadata refresh must not be what makes it
            # see a catalog change within these tests; the coordinator tells it.
            "topic.metadata.refresh.interval.ms": 300000,
            "max.poll.interval.ms": 30000, "group.protocol": protocol}
    if protocol == "classic":
        conf.update({"session.timeout.ms": 6000, "heartbeat.interval.ms": 200,
                     "partition.assignment.strategy": "range"})
    return conf


# After a topic is deleted, a consumer subscribed to it is told so through poll().
_POLL_OK = (KafkaError._PARTITION_EOF, KafkaError.UNKNOWN_TOPIC_OR_PART,
            KafkaError.UNKNOWN_TOPIC_ID)


def poll_until(consumers, until, what, timeout=DEADLINE_S):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for c in consumers:
            msg = c.poll(0.02)
            assert msg is None or msg.error() is None or msg.error().code() in _POLL_OK, \
                msg.error()
        v = until()
        if v:
            return v
    raise AssertionError("timed out after %.0f s waiting for %s" % (timeout, what))


def held(consumers, topic):
    return [sorted(tp.partition for tp in c.assignment() if tp.topic == topic)
            for c in consumers]


def balanced(consumers, topic, n_parts, per, hold_s=0.5):
    """A predicate for poll_until: every partition held exactly once, ``per`` each, and
    still so after hold_s."""
    state = {"last": None, "since": 0.0}

    def check():
        h = held(consumers, topic)
        flat = sorted(p for x in h for p in x)
        ok = flat == list(range(n_parts)) and all(len(x) == per for x in h)
        now = time.monotonic()
        if not ok or h != state["last"]:
            state["last"], state["since"] = (h if ok else None), now
            return None
        return h if now - state["since"] >= hold_s else None
    return check


class Holdings:
    """Rebalance callbacks: checks that no partition is ever held by two consumers at once
    (incremental assign/revoke, KIP-848)."""

    def __init__(self):
        self.owner = {}
        self.violations = []

    def callbacks(self, name):
        def on_assign(_c, parts):
            for tp in parts:
                key = (tp.topic, tp.partition)
                if self.owner.get(key) not in (None, name):
                    self.violations.append((key, self.owner[key], name))
                self.owner[key] = name

        def on_revoke(_c, parts):
            for tp in parts:
                if self.owner.get((tp.topic, tp.partition)) == name:
                    del self.owner[(tp.topic, tp.partition)]
        return {"on_assign": on_assign, "on_revoke": on_revoke, "on_lost": on_revoke}


# ---------------------------------------------------------------------- DescribeCluster
def test_describe_cluster_confluent_and_kafka_python(serve):
    srv = serve(topics={"t": 1})
    ck = ck_child(srv.bootstrap, """
        d = a.describe_cluster(request_timeout=15, include_authorized_operations=True).result()
        out({"cluster_id": d.cluster_id, "controller": [d.controller.id, d.controller.host,
                                                         d.controller.port],
             "nodes": [[n.id, n.host, n.port, n.rack] for n in d.nodes],
             "ops": sorted(op.name for op in d.authorized_operations)})
    """)
    a = kp_admin(srv)
    try:
        kp = a.describe_cluster()
    finally:
        a.close()
    assert ck["cluster_id"] == kp["cluster_id"] and len(kp["cluster_id"]) == 22
    assert ck["controller"] == [0, srv.host, srv.port] and kp["controller_id"] == 0
    assert ck["nodes"] == [[0, srv.host, srv.port, None]]
    assert kp["brokers"] == [{"broker_id": 0, "host": srv.host, "port": srv.port,
                              "rack": None, "is_fenced": False}]
    cluster_ops = ["ALTER", "ALTER_CONFIGS", "CLUSTER_ACTION", "CREATE", "DESCRIBE",
                   "DESCRIBE_CONFIGS", "IDEMPOTENT_WRITE"]
    assert ck["ops"] == cluster_ops and sorted(kp["authorized_operations"]) == cluster_ops


# ---------------------------------------------------------------------- CreatePartitions
def test_create_partitions_grows_a_running_kip848_group(serve):
    """3 group.protocol=consumer members on 6 partitions; the topic grows to 9: each ends
    with 3, none held twice (callbacks, assignment() and ConsumerGroupDescribe agree);
    then the topic is deleted and every member loses it."""
    srv = serve(topics={"six": 6}, extra_args=ADMIN_FLAGS)
    rec = Holdings()
    consumers = []
    try:
        for i in range(3):
            c = Consumer(consumer_conf(srv.bootstrap, "g848", "k%d" % i, "consumer"))
            c.subscribe(["six"], **rec.callbacks("k%d" % i))
            consumers.append(c)
        poll_until(consumers, balanced(consumers, "six", 6, 2), "6 partitions, 2 each")
        errs = ck_child(srv.bootstrap, """
            fs = a.create_partitions([NewPartitions("six", 9)], request_timeout=15)
            out({t: err_of(f) for t, f in fs.items()})
        """)
        assert errs == {"six": None}
        owned = poll_until(consumers, balanced(consumers, "six", 9, 3, hold_s=1.0),
                           "9 partitions, 3 each")
        assert rec.violations == []
        g = describe_consumer_group(srv.host, srv.port, "g848")
        assert g.error_code == 0 and len(g.members) == 3
        described = sorted(sorted(p for t in mb.assignment.topic_partitions
                                  for p in t.partitions) for mb in g.members)
        assert described == sorted(owned)

        errs = ck_child(srv.bootstrap, """
            fs = a.delete_topics(["six"], request_timeout=15)
            res = {t: err_of(f) for t, f in fs.items()}
            md = a.list_topics(timeout=15)
            out([res, sorted(md.topics)])
        """)
        assert errs == [{"six": None}, []]
        poll_until(consumers, lambda: held(consumers, "six") == [[], [], []],
                   "the deleted topic revoked")
        g = describe_consumer_group(srv.host, srv.port, "g848")
        assert [list(mb.assignment.topic_partitions) for mb in g.members] == [[], [], []]
        assert rec.violations == []
    finally:
        for c in consumers:
            c.close()


def test_create_partitions_makes_a_classic_group_rebalance(serve):
    """A classic (range) group learns of new partitions from the coordinator (a rebalance
    it is told of in its next heartbeat), not from its own metadata refresh (5 min here)."""
    srv = serve(topics={"four": 4}, extra_args=ADMIN_FLAGS)
    consumers = []
    try:
        for i in range(2):
            c = Consumer(consumer_conf(srv.bootstrap, "gclassic", "c%d" % i, "classic"))
            c.subscribe(["four"])
            consumers.append(c)
        poll_until(consumers, balanced(consumers, "four", 4, 2), "4 partitions, 2 each")
        errs = ck_child(srv.bootstrap, """
            fs = a.create_partitions([NewPartitions("four", 6)], request_timeout=15)
            out({t: err_of(f) for t, f in fs.items()})
        """)
        assert errs == {"four": None}
        poll_until(consumers, balanced(consumers, "four", 6, 3), "6 partitions, 3 each")
    finally:
        for c in consumers:
            c.close()


def test_admin_errors_and_the_catalog_surviving_kill_9(serve):
    srv = serve(topics={"a": 2, "b": 1, "c": 3}, extra_args=ADMIN_FLAGS)
    errs = ck_child(srv.bootstrap, """
        fs = a.create_partitions([NewPartitions("a", 4), NewPartitions("b", 1),
                                  NewPartitions("nope", 2)], request_timeout=15)
        cp = {t: err_of(f) for t, f in fs.items()}
        fs = a.create_partitions([NewPartitions("c", 5)], validate_only=True,
                                 request_timeout=15)
        cp.update({"c (validate only)": err_of(fs["c"])})
        fs = a.delete_topics(["nope"], request_timeout=15)
        out([cp, {t: err_of(f) for t, f in fs.items()}])
    """)
    assert errs == [{"a": None, "b": "INVALID_PARTITIONS", "nope": "UNKNOWN_TOPIC_OR_PART",
                     "c (validate only)": None}, {"nope": "UNKNOWN_TOPIC_OR_PART"}]
    admin = kp_admin(srv)
    try:
        admin.create_partitions({"b": NewPartitions(3)})
        with pytest.raises(KE.InvalidPartitionsError):
            admin.create_partitions({"b": NewPartitions(2)})
        with pytest.raises(KE.UnknownTopicOrPartitionError):
            admin.create_partitions({"nope": NewPartitions(2)})
        res = admin.delete_topics(["c"])
        assert [(t["name"], t["error_code"]) for t in res["topics"]] == [("c", 0)]
        with pytest.raises(KE.UnknownTopicOrPartitionError):
            admin.delete_topics(["c"])
    finally:
        admin.close()
    srv.restart(kill9=True)            # acknowledged changes are in topics.json
    admin = kp_admin(srv)
    try:
        topics = {t["name"]: len(t["partitions"]) for t in admin.describe_topics()}
        listed = sorted(admin.list_topics())
    finally:
        admin.close()
    assert topics == {"a": 4, "b": 3}
    assert listed == ["a", "b"]


def test_catalog_changes_are_off_unless_allowed(serve):
    srv = serve(topics={"a": 2})
    errs = ck_child(srv.bootstrap, """
        fs = a.create_partitions([NewPartitions("a", 4)], request_timeout=15)
        cp = {t: err_of(f) for t, f in fs.items()}
        fs = a.delete_topics(["a"], request_timeout=15)
        out([cp, {t: err_of(f) for t, f in fs.items()}])
    """)
    assert errs == [{"a": "POLICY_VIOLATION"}, {"a": "TOPIC_DELETION_DISABLED"}]
    admin = kp_admin(srv)
    try:
        with pytest.raises(KE.PolicyViolationError):
            admin.create_partitions({"a": NewPartitions(4)})
        with pytest.raises(KE.TopicDeletionDisabledError):
            admin.delete_topics(["a"])
        assert [len(t["partitions"]) for t in admin.describe_topics(["a"])] == [2]
    finally:
        admin.close()


# ---------------------------------------------------------------------- Produce
NO_MESSAGES = "groupcoord is a group coordinator: it stores no messages"


def test_producers_fail_at_once_saying_why(serve):
    srv = serve(topics={"t": 2})
    code = textwrap.dedent("""
        import json, sys
        from confluent_kafka import Producer
        p = Producer({"bootstrap.servers": sys.argv[1], "broker.address.family": "v4",
                      "message.timeout.ms": 30000})
        got = []
        p.produce("t", b"value", callback=lambda err, msg: got.append(err))
        left = p.flush(30)
        e = got[0] if got else None
        print(json.dumps({"left": left, "reports": len(got),
                          "error": None if e is None else [e.name(), e.str(), e.retriable(),
                                                          e.fatal()]}), flush=True)
    """)
    r = subprocess.run([sys.executable, "-c", code, srv.bootstrap], capture_output=True,
                       text=True, timeout=CHILD_TIMEOUT_S)
    assert r.returncode == 0, r.stderr[-4000:]
    got = json.loads(r.stdout.strip().splitlines()[-1])
    # librdkafka reports the code (it does not hand Produce's ErrorMessage to the delivery
    # report), permanent: one attempt, no retries until message.timeout.ms
    assert got == {"left": 0, "reports": 1,
                   "error": ["INVALID_REQUEST", "Broker: Invalid request", False, False]}

    # kafka-python shows the message; its default, idempotent, producer stops earlier:
    # this node does not serve InitProducerId
    p = KafkaProducer(bootstrap_servers=srv.bootstrap, enable_idempotence=False,
                      request_timeout_ms=15000)
    try:
        with pytest.raises(KE.InvalidRequestError) as err:
            p.send("t", b"value").get(timeout=30)
        assert NO_MESSAGES in str(err.value)
    finally:
        p.close(10)
    p = KafkaProducer(bootstrap_servers=srv.bootstrap, request_timeout_ms=15000)
    try:
        with pytest.raises(KE.IncompatibleBrokerVersion, match="InitProducerId"):
            p.send("t", b"value").get(timeout=30)
    finally:
        p.close(10)
