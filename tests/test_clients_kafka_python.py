"""kafka-python (pinned 3.0.12) against `groupcoord serve`: a custom-protocol group through
kafka.coordinator.base.BaseCoordinator, and KafkaConsumer groups with committed offsets.
See docs/clients.md."""
import json
import threading
import time

import pytest

from serve_proc import serve  # noqa: F401  (fixture)

kafka = pytest.importorskip("kafka")
from kafka import KafkaConsumer, OffsetAndMetadata, TopicPartition  # noqa: E402
from kafka.coordinator.base import BaseCoordinator  # noqa: E402
from kafka.net.compat import KafkaNetClient  # noqa: E402

DEADLINE_S = 30.0
SESSION_MS = 6000      # Kafka's default group.min.session.timeout.ms
HEARTBEAT_MS = 200
REBALANCE_MS = 10000   # max_poll_interval_ms = the JoinGroup rebalance timeout


# -- BaseCoordinator with a custom protocol type -------------------------------------------------
WORK_UNITS = 6


class WorkCoordinator(BaseCoordinator):
    """A work-sharding member in the style of Schema Registry / Connect's classic protocol:
    protocol type "groupcoord-work", no topics; the leader deals WORK_UNITS units round-robin
    over the sorted member ids and tells every member the whole membership."""

    def __init__(self, client, name, **configs):
        super().__init__(client, **configs)
        self.name = name
        self.joins = []            # (generation, member_id, protocol, decoded assignment)
        self.led = []              # generations this member assigned as leader
        self.heartbeats = []       # (time.monotonic(), error code) of Heartbeat responses
        self.lock = threading.Lock()

    def protocol_type(self):
        return "groupcoord-work"

    def group_protocols(self):
        return [("deal-v2", json.dumps({"name": self.name, "v": 2}).encode()),
                ("deal-v1", json.dumps({"name": self.name, "v": 1}).encode())]

    def _perform_assignment(self, leader_id, protocol, members):
        ids = sorted(m.member_id for m in members)
        names = {m.member_id: json.loads(bytes(m.metadata))["name"] for m in members}
        out = {}
        for i, mid in enumerate(ids):
            units = [u for u in range(WORK_UNITS) if u % len(ids) == i]
            out[mid] = json.dumps({"leader": leader_id, "protocol": protocol,
                                   "members": ids, "names": names, "units": units}).encode()
        with self.lock:
            self.led.append(self._generation.generation_id)
        return out

    async def _on_join_complete_async(self, generation, member_id, protocol, assignment):
        with self.lock:
            self.joins.append((generation, member_id, protocol, json.loads(bytes(assignment))))

    def _handle_heartbeat_response(self, response, send_time):
        with self.lock:
            self.heartbeats.append((time.monotonic(), response.error_code))
        return super()._handle_heartbeat_response(response, send_time)

    def last_join(self):
        with self.lock:
            return self.joins[-1] if self.joins else None


class Member:
    """One BaseCoordinator member with its own client and a driver thread (the role of a
    consumer's poll loop: heartbeat liveness plus rejoin when the coordinator asks)."""

    def __init__(self, bootstrap, group, name):
        self.client = KafkaNetClient(bootstrap_servers=bootstrap, client_id=name,
                                     request_timeout_ms=REBALANCE_MS + 10000,
                                     reconnect_backoff_ms=50, retry_backoff_ms=50)
        self.client._net.start()
        self.client._manager.bootstrap(10000)
        self.coord = WorkCoordinator(
            self.client, name, group_id=group, session_timeout_ms=SESSION_MS,
            heartbeat_interval_ms=HEARTBEAT_MS, max_poll_interval_ms=REBALANCE_MS,
            request_timeout_ms=REBALANCE_MS + 10000, retry_backoff_ms=50,
            api_version=self.client._manager.broker_version)
        self.stop = threading.Event()
        self.error = None
        self.thread = threading.Thread(target=self._run, name="member-" + name, daemon=True)
        self.thread.start()

    def _run(self):
        try:
            while not self.stop.is_set():
                self.coord.poll_heartbeat()
                if self.coord.need_rejoin() or not self.coord.stable():
                    self.coord.ensure_active_group(timeout_ms=500)
                self.stop.wait(0.05)
        except BaseException as e:  # surfaced by the test
            self.error = e

    def close(self):
        self.stop.set()
        self.thread.join(10)
        try:
            self.coord.close(timeout_ms=5000)
        finally:
            self.client.close()


def _converged(members, n):
    """All members' last joins agree on one generation with n members, and the units dealt
    to them are disjoint and cover every unit. Returns that generation or None."""
    lasts = [m.coord.last_join() for m in members]
    if any(j is None for j in lasts):
        return None
    gens = {j[0] for j in lasts}
    if len(gens) != 1:
        return None
    for m in members:
        if m.coord.need_rejoin() or not m.coord.stable():
            return None
    infos = [j[3] for j in lasts]
    if any(len(i["members"]) != n for i in infos):
        return None
    if {tuple(i["members"]) for i in infos} != {tuple(sorted(j[1] for j in lasts))}:
        return None
    units = sorted(u for i in infos for u in i["units"])
    assert units == list(range(WORK_UNITS)), infos
    return gens.pop()


def _wait_converged(members, n, timeout=DEADLINE_S):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for m in members:
            if m.error is not None:
                raise AssertionError("member %s failed: %r" % (m.coord.name, m.error))
        g = _converged(members, n)
        if g is not None:
            return g
        time.sleep(0.05)
    raise AssertionError("group did not converge on %d members within %.0f s: %r"
                         % (n, timeout, [m.coord.last_join() for m in members]))


def test_base_coordinator_custom_protocol(serve):
    srv = serve()
    members = []
    try:
        for name in ("a", "b", "c"):
            members.append(Member(srv.bootstrap, "work-group", name))
        gen3 = _wait_converged(members, 3)
        lasts = [m.coord.last_join() for m in members]
        # the leader's assignment reached all three: same leader, same membership
        leaders = {j[3]["leader"] for j in lasts}
        assert len(leaders) == 1
        leader = leaders.pop()
        assert leader in {j[1] for j in lasts}
        assert {j[2] for j in lasts} == {"deal-v2"}   # the most preferred common protocol
        assert {tuple(j[3]["members"]) for j in lasts} == {tuple(sorted(j[1] for j in lasts))}
        assert sorted(j[3]["names"][j[1]] for j in lasts) == ["a", "b", "c"]
        assert sum(1 for m in members if gen3 in m.coord.led) == 1

        # one leaves (LeaveGroup), the other two rebalance into a new generation
        gone = members.pop(1)
        gone_id = gone.coord.last_join()[1]
        gone.close()
        gen2 = _wait_converged(members, 2)
        assert gen2 > gen3
        for m in members:
            info = m.coord.last_join()[3]
            assert gone_id not in info["members"]
            assert m.coord.last_join()[1] in info["members"]
    finally:
        for m in members:
            m.close()


# -- KafkaConsumer ------------------------------------------------------------------------------
TOPIC = "kp-six"


def _consumer(bootstrap, group, name):
    return KafkaConsumer(
        TOPIC, bootstrap_servers=bootstrap, group_id=group, client_id=name,
        enable_auto_commit=False, auto_offset_reset="earliest",
        session_timeout_ms=SESSION_MS, heartbeat_interval_ms=HEARTBEAT_MS,
        max_poll_interval_ms=REBALANCE_MS, request_timeout_ms=REBALANCE_MS + 10000,
        fetch_max_wait_ms=100, reconnect_backoff_ms=50, retry_backoff_ms=50,
        metadata_max_age_ms=5000)


def _owned(consumers, n_parts, sizes=None, stable_rounds=3, timeout=DEADLINE_S):
    """Poll all consumers round-robin until every partition is owned by exactly one of them
    and no consumer is left empty, the same for `stable_rounds` rounds in a row."""
    deadline = time.monotonic() + timeout
    streak, last = 0, None
    while time.monotonic() < deadline:
        for c in consumers:
            c.poll(timeout_ms=30)
        owned = [frozenset(tp.partition for tp in c.assignment()) for c in consumers]
        flat = sorted(p for o in owned for p in o)
        ok = flat == list(range(n_parts)) and all(owned) and (
            sizes is None or sorted(len(o) for o in owned) == sorted(sizes)) and not any(
            c._coordinator.need_rejoin() for c in consumers)
        if ok and owned == last:
            streak += 1
            if streak >= stable_rounds:
                return owned
        else:
            streak = 0
        last = owned if ok else None
    raise AssertionError("partitions not owned exactly once within %.0f s: %r"
                         % (timeout, [sorted(c.assignment()) for c in consumers]))


def test_kafka_consumer_group(serve):
    srv = serve(topics={TOPIC: 6})
    consumers = []
    try:
        for name in ("kp-1", "kp-2", "kp-3"):
            consumers.append(_consumer(srv.bootstrap, "kp-group", name))
        owned = _owned(consumers, 6, [2, 2, 2])

        # each owner commits explicit offsets for its partitions; all are read back
        for c, parts in zip(consumers, owned):
            c.commit({TopicPartition(TOPIC, p): OffsetAndMetadata(100 + p, "m%d" % p, -1)
                      for p in parts}, timeout_ms=10000)
        for c in consumers:
            for p in range(6):
                assert c.committed(TopicPartition(TOPIC, p), timeout_ms=10000) == 100 + p
        om = consumers[0].committed(TopicPartition(TOPIC, 3), metadata=True, timeout_ms=10000)
        assert om.offset == 103 and om.metadata == "m3"

        # one closes (LeaveGroup): the remaining two own all 6
        consumers.pop(0).close(timeout_ms=5000)
        owned = _owned(consumers, 6, [3, 3])
        # the offsets survive the rebalance
        for p in range(6):
            assert consumers[1].committed(TopicPartition(TOPIC, p), timeout_ms=10000) == 100 + p
    finally:
        for c in consumers:
            c.close(timeout_ms=5000)
