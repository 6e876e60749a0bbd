"""confluent-kafka (librdkafka) against `groupcoord serve`: a classic consumer group, and a
KIP-848 consumer group (group.protocol=consumer) checked through its incremental rebalance
callbacks. See docs/clients.md."""
import time

import pytest

from serve_proc import serve  # noqa: F401  (fixture)

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import Consumer, TopicPartition  # noqa: E402

DEADLINE_S = 40.0


def base_config(bootstrap, group, name):
    """Settings every librdkafka consumer needs against groupcoord (docs/clients.md)."""
    return {
        "bootstrap.servers": bootstrap,
        "broker.address.family": "v4",
        "group.id": group,
        "client.id": name,
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "reconnect.backoff.ms": 50,
        "reconnect.backoff.max.ms": 500,
        "retry.backoff.ms": 50,
        "fetch.wait.max.ms": 100,
        "topic.metadata.refresh.interval.ms": 5000,
        "socket.timeout.ms": 20000,
    }


class Recorder:
    """Rebalance callbacks of several consumers with time.monotonic() stamps."""

    def __init__(self):
        self.events = []   # (t, consumer name, "assign" | "revoke" | "lost", [(topic, partition)])

    def callbacks(self, name):
        def rec(kind):
            def cb(consumer, partitions):
                self.events.append((time.monotonic(), name, kind,
                                    [(p.topic, p.partition) for p in partitions]))
            return cb
        return {"on_assign": rec("assign"), "on_revoke": rec("revoke"), "on_lost": rec("lost")}

    def holdings(self):
        """What each consumer holds according to its callbacks (incremental semantics)."""
        held = {}
        for _, name, kind, parts in self.events:
            s = held.setdefault(name, set())
            if kind == "assign":
                s.update(parts)
            else:
                s.difference_update(parts)
        return held

    def check_exclusive(self):
        """No partition is ever held by two consumers at once: per consumer and partition,
        ownership intervals [assign, revoke) from the callbacks; intervals of different
        consumers for one partition must not overlap. Returns the number of intervals."""
        open_, intervals = {}, {}
        for t, name, kind, parts in sorted(self.events, key=lambda e: e[0]):
            for tp in parts:
                key = (name, tp)
                if kind == "assign":
                    assert key not in open_, "%s assigned %s twice without a revoke" % key
                    open_[key] = t
                elif key in open_:
                    intervals.setdefault(tp, []).append((open_.pop(key), t, name))
                else:
                    raise AssertionError("%s revoked %s it did not hold" % key)
        for (name, tp), t0 in open_.items():
            intervals.setdefault(tp, []).append((t0, float("inf"), name))
        n = 0
        for tp, ivs in intervals.items():
            ivs.sort()
            n += len(ivs)
            for (a0, a1, an), (b0, b1, bn) in zip(ivs, ivs[1:]):
                assert a1 <= b0, ("partition %s held by %s [%.3f, %.3f) and %s [%.3f, %.3f) "
                                  "at once" % (tp, an, a0, a1, bn, b0, b1))
        return n


def poll_all(consumers, seconds=None, until=None, timeout=DEADLINE_S, what="condition"):
    """Poll every consumer round-robin (serving their callbacks) until `until()` is truthy
    (bounded by `timeout`) or for `seconds`."""
    deadline = time.monotonic() + (seconds if seconds is not None else timeout)
    while time.monotonic() < deadline:
        for c in consumers:
            msg = c.poll(0.02)
            assert msg is None or msg.error() is None or msg.error().code() in (
                confluent_kafka.KafkaError._PARTITION_EOF,), msg.error()
        if until is not None:
            v = until()
            if v:
                return v
    if until is not None:
        raise AssertionError("timed out after %.0f s waiting for %s" % (timeout, what))
    return None


def owned_exactly_once(consumers, n_parts, topic, sizes=None):
    owned = [frozenset(tp.partition for tp in c.assignment() if tp.topic == topic)
             for c in consumers]
    flat = sorted(p for o in owned for p in o)
    if flat == list(range(n_parts)) and all(owned) and (
            sizes is None or sorted(len(o) for o in owned) == sorted(sizes)):
        return owned
    return None


def stable_ownership(consumers, n_parts, topic, sizes=None, hold_s=0.5, what="ownership"):
    """Wait until every partition is owned exactly once (with these per-consumer counts)
    and that stays so for hold_s."""
    state = {"last": None, "since": None}

    def check():
        o = owned_exactly_once(consumers, n_parts, topic, sizes)
        now = time.monotonic()
        if o is None or o != state["last"]:
            state["last"], state["since"] = o, now
            return None
        return o if now - state["since"] >= hold_s else None

    return poll_all(consumers, until=check, what=what)


# -- classic protocol --------------------------------------------------------------------------
CLASSIC_TOPIC = "ck-six"


def test_confluent_classic_group(serve):
    srv = serve(topics={CLASSIC_TOPIC: 6})
    consumers = []
    try:
        for i in range(3):
            conf = base_config(srv.bootstrap, "ck-classic", "ck-%d" % i)
            conf.update({"session.timeout.ms": 6000, "heartbeat.interval.ms": 200,
                         "max.poll.interval.ms": 10000,
                         "partition.assignment.strategy": "range"})
            c = Consumer(conf)
            c.subscribe([CLASSIC_TOPIC])
            consumers.append(c)
        owned = stable_ownership(consumers, 6, CLASSIC_TOPIC, [2, 2, 2],
                                 what="3 consumers owning 6")
        assert sorted(len(o) for o in owned) == [2, 2, 2]

        for c, parts in zip(consumers, owned):
            c.commit(offsets=[TopicPartition(CLASSIC_TOPIC, p, 300 + p) for p in parts],
                     asynchronous=False)
        for c in consumers:
            got = c.committed([TopicPartition(CLASSIC_TOPIC, p) for p in range(6)], timeout=10)
            assert [(tp.partition, tp.offset) for tp in got] == [(p, 300 + p) for p in range(6)]
            assert all(tp.error is None for tp in got)

        consumers.pop(0).close()      # LeaveGroup
        owned = stable_ownership(consumers, 6, CLASSIC_TOPIC, [3, 3], what="2 consumers owning 6")
        assert sorted(len(o) for o in owned) == [3, 3]
        got = consumers[0].committed([TopicPartition(CLASSIC_TOPIC, p) for p in range(6)],
                                     timeout=10)
        assert [tp.offset for tp in got] == [300 + p for p in range(6)]
    finally:
        for c in consumers:
            c.close()


# -- KIP-848 consumer protocol -----------------------------------------------------------------
KIP848_TOPIC = "ck-twelve"


def kip848_consumer(bootstrap, group, name, recorder, topic, extra=None):
    conf = base_config(bootstrap, group, name)
    # group.protocol=consumer: session and heartbeat timing come from the coordinator;
    # librdkafka rejects session.timeout.ms / heartbeat.interval.ms /
    # partition.assignment.strategy with this protocol.
    conf.update({"group.protocol": "consumer", "max.poll.interval.ms": 20000})
    conf.update(extra or {})
    c = Consumer(conf)
    c.subscribe([topic], **recorder.callbacks(name))
    return c


def test_confluent_kip848_incremental(serve):
    srv = serve(topics={KIP848_TOPIC: 12})
    rec = Recorder()
    consumers = []
    try:
        for i in range(3):
            consumers.append(kip848_consumer(srv.bootstrap, "ck-848", "k-%d" % i, rec,
                                             KIP848_TOPIC))
        owned = stable_ownership(consumers, 12, KIP848_TOPIC, [4, 4, 4], what="3 members balanced")
        assert sorted(len(o) for o in owned) == [4, 4, 4]
        # the callbacks tell the same story as assignment()
        held = rec.holdings()
        for i, o in enumerate(owned):
            assert {p for (_, p) in held["k-%d" % i]} == set(o)
        t_join4 = time.monotonic()
        consumers.append(kip848_consumer(srv.bootstrap, "ck-848", "k-3", rec, KIP848_TOPIC))
        owned = stable_ownership(consumers, 12, KIP848_TOPIC, [3, 3, 3, 3], hold_s=1.0,
                                 what="4 members balanced")
        assert sorted(len(o) for o in owned) == [3, 3, 3, 3]
        # the new member got its partitions through revocations elsewhere first
        assert any(kind == "revoke" and t > t_join4 for t, _, kind, _ in rec.events)
        n = rec.check_exclusive()
        assert n >= 12 + 3
        held = rec.holdings()
        for i, o in enumerate(owned):
            assert {p for (_, p) in held["k-%d" % i]} == set(o)
        assert not any(kind == "lost" for _, _, kind, _ in rec.events)
    finally:
        for c in consumers:
            c.close()
