"""Cluster acceptance tests (issue 19, "Tests that must pass"): real `groupcoord serve
--store postgresql://` processes over a private PostgreSQL (tests/pg_server.py), real clients
bootstrapped to every node (tests/cluster_procs.py starts and stops the nodes by PID).

- kill -9 of the node coordinating a confluent-kafka classic group, a group.protocol=consumer
  group, a kafka-python group and an SDK ConnectWorker group: each continues on another node
  within lease + 10 s with the same member ids and epochs (no rejoin), no partition or task is
  held by two members at any time (callback timelines), and every acknowledged offset commit
  is read back afterwards.

Leases are short (2 s) so that a takeover takes seconds. See docs/cluster.md.
"""
import asyncio
import json
import threading
import time

import pytest

from groupcoord.protocol import messages as M
from groupcoord.runtime import shard_for
from cluster_procs import Cluster, Committer, commit_request
from pg_server import pg_db, pg_server  # noqa: F401 (fixtures)
from serve_proc import RawClient, describe_consumer_group
from groupcoord.protocol import decode_response_frame, encode_request_frame

confluent_kafka = pytest.importorskip("confluent_kafka")
kafka = pytest.importorskip("kafka")
from confluent_kafka import Consumer, TopicPartition  # noqa: E402
from kafka import ConsumerRebalanceListener, KafkaConsumer, OffsetAndMetadata  # noqa: E402
from kafka import TopicPartition as KTopicPartition  # noqa: E402

from groupcoord.client import ConnectWorker  # noqa: E402
from test_clients_confluent import Recorder, base_config  # noqa: E402
from test_sdk_connect import Ledger, label  # noqa: E402

SHARDS = 6
LEASE_MS = 2000
TOPIC = "fo-six"
PARTS = 6
CONNECT_CONFIG = {"A": 2, "B": 1}
SESSION_MS = 10000          # classic groups: longer than a takeover, so none expires in it
COMMIT_EVERY_S = 0.3
SETTLE_S = 40.0
ZOMBIE_OFFSET = 10 ** 9
LATE = "late-write-of-a-paused-node"    # the metadata of its commits, looked for in the rows


def names_on_shard(prefix, shard, n=1):
    """Group ids of the form prefix-i whose shard (Kafka's hash) is `shard`."""
    out, i = [], 0
    while len(out) < n:
        g = "%s-%d" % (prefix, i)
        if shard_for(g, SHARDS) == shard:
            out.append(g)
        i += 1
    return out


# ----------------------------------------------------------------------- the clients
class Commits:
    """Offset commits sent and acknowledged: per (group, topic, partition) the offsets sent
    and the acknowledged ones with the time of the acknowledgement."""

    def __init__(self):
        self.sent = {}
        self.acked = []             # (time.monotonic(), group, topic, partition, offset)
        self.failed = []            # (time.monotonic(), group, error text)
        self.lock = threading.Lock()

    def send(self, group, tp, offset):
        with self.lock:
            self.sent.setdefault((group,) + tp, set()).add(offset)

    def ack(self, group, tp, offset):
        with self.lock:
            self.acked.append((time.monotonic(), group, tp[0], tp[1], offset))

    def fail(self, group, why):
        with self.lock:
            self.failed.append((time.monotonic(), group, why))

    def acked_after(self, group, t):
        with self.lock:
            return any(g == group and at > t for at, g, _, _, _ in self.acked)

    def last_acked(self, group):
        """{(topic, partition): the offset acknowledged last}. Not the highest: a client
        retries a commit that failed with a retriable error, so an older offset may be
        applied, and acknowledged, after a newer one."""
        with self.lock:
            out = {}
            for _, g, topic, p, off in self.acked:
                if g == group:
                    out[(topic, p)] = off
            return out

    def history(self, group, tp):
        with self.lock:
            return ([("ack", round(t, 3), off) for t, g, topic, p, off in self.acked
                     if g == group and (topic, p) == tp],
                    sorted(self.sent.get((group,) + tp, ())))


class ConfluentGroup:
    """Three librdkafka consumers of one group (classic or group.protocol=consumer) with
    their rebalance callbacks, statistics and asynchronous commits recorded."""

    def __init__(self, bootstrap, group, kip848, commits, n=3):
        self.group = group
        self.kip848 = kip848
        self.rec = Recorder()
        self.stats = {}
        self.errors = []
        self.commits = commits
        self.consumers = []
        for i in range(n):
            name = "%s-%d" % (group, i)
            conf = base_config(bootstrap, group, name)
            conf.update({"statistics.interval.ms": 200, "stats_cb": self._stats(name),
                         "on_commit": self._on_commit, "error_cb": self.errors.append})
            if kip848:
                conf.update({"group.protocol": "consumer", "max.poll.interval.ms": 30000})
            else:
                conf.update({"session.timeout.ms": SESSION_MS, "heartbeat.interval.ms": 300,
                             "max.poll.interval.ms": 30000,
                             "partition.assignment.strategy": "range"})
            c = Consumer(conf)
            c.subscribe([TOPIC], **self.rec.callbacks(name))
            self.consumers.append(c)

    def _stats(self, name):
        def cb(raw):
            self.stats[name] = json.loads(raw)
        return cb

    def _on_commit(self, err, partitions):
        if err is not None:
            self.commits.fail(self.group, str(err))
            return
        for tp in partitions:
            if tp.error is None:
                self.commits.ack(self.group, (tp.topic, tp.partition), tp.offset)
            else:
                self.commits.fail(self.group, str(tp.error))

    def poll(self):
        for c in self.consumers:
            msg = c.poll(0.005)
            assert msg is None or msg.error() is None or not msg.error().fatal(), msg.error()

    def owned(self):
        return [frozenset(tp.partition for tp in c.assignment()) for c in self.consumers]

    def commit(self, offset):
        for c in self.consumers:
            parts = [TopicPartition(TOPIC, tp.partition, offset) for tp in c.assignment()]
            if parts:
                for tp in parts:
                    self.commits.send(self.group, (TOPIC, tp.partition), offset)
                c.commit(offsets=parts, asynchronous=True)

    def rebalances(self):
        return [self.stats[c]["cgrp"]["rebalance_cnt"] for c in sorted(self.stats)]

    def close(self):
        for c in self.consumers:
            c.close()


class KafkaPythonGroup:
    """Three kafka-python KafkaConsumers of one (classic) group with a rebalance listener,
    each polled without pause by a thread of its own.

    Why threads: kafka-python 3.0.12 runs JoinGroup + SyncGroup as a task that only a poll()
    collects; a task that completes between two polls is dropped and the next poll sends a
    new JoinGroup (ensure_active_group: `_join_task.is_done` starts a fresh join). The
    leader's new JoinGroup in Stable is a rebalance (as in Kafka), so consumers polled in
    turn from one loop, with other groups' polls in between, rebalanced without end. The
    thread makes the commits too: a KafkaConsumer is used by one thread only."""

    POLL_MS = 100

    def __init__(self, bootstrap, group, commits, n=3):
        self.group = group
        self.rec = Recorder()
        self.commits = commits
        self.consumers = []
        self.lock = threading.Lock()
        self.assigned = [frozenset()] * n   # each consumer's assignment after its last poll
        self.to_commit = [None] * n         # the offset each consumer is to commit next
        self.failure = []                   # an exception a poller thread died of
        self.stop_ev = threading.Event()
        for i in range(n):
            name = "%s-%d" % (group, i)
            c = KafkaConsumer(
                bootstrap_servers=bootstrap.split(","), group_id=group, client_id=name,
                enable_auto_commit=False, auto_offset_reset="earliest",
                session_timeout_ms=SESSION_MS, heartbeat_interval_ms=300,
                max_poll_interval_ms=30000, request_timeout_ms=40000, fetch_max_wait_ms=100,
                reconnect_backoff_ms=50, retry_backoff_ms=50, metadata_max_age_ms=5000)
            c.subscribe([TOPIC], listener=self._listener(name))
            self.consumers.append(c)
        self.threads = [threading.Thread(target=self._run, args=(i,), daemon=True,
                                         name="kpy-%s-%d" % (group, i)) for i in range(n)]
        for t in self.threads:
            t.start()

    def _listener(self, name):
        rec = self.rec

        class Listener(ConsumerRebalanceListener):
            def on_partitions_revoked(self, revoked):
                rec.events.append((time.monotonic(), name, "revoke",
                                   sorted((tp.topic, tp.partition) for tp in revoked)))

            def on_partitions_assigned(self, assigned):
                rec.events.append((time.monotonic(), name, "assign",
                                   sorted((tp.topic, tp.partition) for tp in assigned)))
        return Listener()

    def _run(self, i):
        c = self.consumers[i]
        try:
            while not self.stop_ev.is_set():
                c.poll(timeout_ms=self.POLL_MS)
                mine = frozenset(tp.partition for tp in c.assignment())
                with self.lock:
                    self.assigned[i] = mine
                    offset, self.to_commit[i] = self.to_commit[i], None
                if offset is not None and mine:
                    self._commit(c, mine, offset)
        except Exception as e:              # poll() re-raises it in the test's thread
            self.failure.append(e)

    def _commit(self, c, partitions, offset):
        parts = {KTopicPartition(TOPIC, p): OffsetAndMetadata(offset, "", -1)
                 for p in partitions}
        for tp in parts:
            self.commits.send(self.group, (TOPIC, tp.partition), offset)

        def done(offsets, response, group=self.group):
            if isinstance(response, BaseException):
                self.commits.fail(group, repr(response))
                return
            for tp, om in offsets.items():
                self.commits.ack(group, (tp.topic, tp.partition), om.offset)
        c.commit_async(parts, callback=done)

    def poll(self):
        # The threads poll; this surfaces what one of them died of, and yields the core.
        if self.failure:
            raise self.failure[0]
        time.sleep(0.005)

    def owned(self):
        with self.lock:
            return list(self.assigned)

    def members(self):
        return [(c._coordinator._generation.member_id, c._coordinator._generation.generation_id)
                for c in self.consumers]

    def commit(self, offset):
        with self.lock:
            self.to_commit = [offset] * len(self.consumers)

    def close(self):
        self.stop_ev.set()
        for t in self.threads:
            t.join(30)
        for c in self.consumers:
            c.close(timeout_ms=5000)


class ConnectGroup:
    """Three SDK ConnectWorkers of one group on an event loop in a thread of their own."""

    def __init__(self, bootstrap, group, n=3):
        self.group = group
        self.ledger = Ledger()
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True,
                                       name="connect-workers")
        self.thread.start()
        self.workers = [ConnectWorker(bootstrap, group, listener=self.ledger.listener("W%d" % i),
                                      member_id="W%d" % i, worker_url="http://w%d:8083" % i,
                                      connectors=CONNECT_CONFIG if i == 0 else None,
                                      scheduled_rebalance_max_delay_ms=3000,
                                      session_timeout_ms=30000, request_timeout_s=5.0)
                        for i in range(n)]
        for w in self.workers:
            self.run(w.start())

    def run(self, coro, timeout=30.0):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def settled(self):
        ws = self.workers
        return (sum(len(w.state.owned) for w in ws) == 5 and all(w.state.owned for w in ws)
                and len({w.member_epoch for w in ws}) == 1)

    def epochs(self):
        return [w.member_epoch for w in self.workers]

    def owned(self):
        return [sorted(label(u) for u in w.state.owned) for w in self.workers]

    def close(self):
        try:
            for w in self.workers:
                self.run(w.stop())
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(10)


def _check_exit(cl, codes):
    """The nodes still running at the end exit 0 on SIGTERM; no node logged a traceback."""
    assert all(c == 0 for c in codes.values()), (codes, cl.logs())
    for n in cl.nodes:
        assert "Traceback" not in cl.stderr_of(n), cl.stderr_of(n)


def _classic_members(cl, node, group):
    g = cl.call(node, M.DescribeGroupsRequest(groups=[group]), 5).groups[0]
    assert g.error_code == 0 and g.group_state == "Stable", g
    return sorted(m.member_id for m in g.members)


def _partition_sets(owned):
    flat = sorted(p for o in owned for p in o)
    return flat == list(range(PARTS)) and all(owned)


# ----------------------------------------------------------------------- test 1: kill -9
def test_kill9_of_the_coordinator_moves_every_group_without_a_rebalance(pg_db, tmp_path):  # noqa: F811
    cl = Cluster(pg_db, tmp_path, shards=SHARDS, lease_ms=LEASE_MS, topics={TOPIC: PARTS})
    commits = Commits()
    groups = []
    try:
        for n in (1, 2, 3):
            cl.start(n)
        owners = cl.wait_balanced({1, 2, 3})
        # Every group on one shard: the node owning it coordinates all four.
        classic, kip848, kpy, connect = (names_on_shard(p, 0)[0] for p in
                                         ("fo-classic", "fo-848", "fo-kpy", "fo-connect"))
        boot = cl.bootstrap()
        ck = ConfluentGroup(boot, classic, False, commits)
        groups.append(ck)
        c8 = ConfluentGroup(boot, kip848, True, commits)
        groups.append(c8)
        kp = KafkaPythonGroup(boot, kpy, commits)
        groups.append(kp)
        cw = ConnectGroup(boot, connect)
        groups.append(cw)
        consumer_groups = [ck, c8, kp]
        offset = [0]
        last_commit = [0.0]

        def pump():
            for g in consumer_groups:
                g.poll()
            if time.monotonic() - last_commit[0] >= COMMIT_EVERY_S:
                last_commit[0] = time.monotonic()
                offset[0] += 1
                for g in consumer_groups:
                    g.commit(offset[0])

        def wait(pred, timeout, what):
            deadline = time.monotonic() + timeout
            while not pred():
                if time.monotonic() > deadline:
                    raise AssertionError("timed out after %.0f s waiting for %s\n%s\n%s"
                                         % (timeout, what, state(), cl.logs()))
                pump()

        def state():
            return "\n".join(
                ["%s owns %s" % (g.group, g.owned()) for g in consumer_groups]
                + ["%s stats %s" % (g.group, sorted(g.stats)) for g in (ck, c8)]
                + ["%s need rejoin %s" % (kpy, [c._coordinator.need_rejoin()
                                                for c in kp.consumers])]
                + ["%s workers %r owned %s" % (connect, cw.workers, cw.owned())]
                + ["librdkafka errors %s" % (ck.errors[-5:] + c8.errors[-5:])]
                + ["commit failures %s" % commits.failed[-10:]])

        def stable():
            return (all(_partition_sets(g.owned()) for g in consumer_groups)
                    and all(len(g.stats) == 3 for g in (ck, c8))
                    and not any(c._coordinator.need_rejoin() for c in kp.consumers)
                    and cw.settled())
        wait(stable, SETTLE_S, "every group to settle")
        t_settled = time.monotonic()
        wait(lambda: all(commits.acked_after(g.group, t_settled) for g in consumer_groups)
             and time.monotonic() - t_settled > 1.0, SETTLE_S, "commits before the kill")

        victim = cl.coordinator(classic)
        assert victim == owners[0]
        assert {cl.coordinator(g) for g in (kip848, kpy, connect)} == {victim}
        before = {
            "classic": _classic_members(cl, victim, classic),
            "kpy": _classic_members(cl, victim, kpy),
            "848": {m.member_id: m.member_epoch for m in describe_consumer_group(
                cl.nodes[victim].host, cl.nodes[victim].port, kip848).members},
            "kpy-gen": kp.members(),
            "connect": cw.epochs(),
            "rebalances": (ck.rebalances(), c8.rebalances()),
        }
        assert len(before["848"]) == 3 and all(e > 0 for e in before["848"].values())
        events = {g.group: len(g.rec.events) for g in consumer_groups}
        connect_events = len(cw.ledger.events)
        beats = [w.heartbeats for w in cw.workers]

        cl.kill9(victim)
        t_kill = time.monotonic()
        # Each group continues on another node within lease + 10 s: a commit acknowledged
        # after the kill (only the coordinator acknowledges one), connect heartbeats answered.
        wait(lambda: all(commits.acked_after(g.group, t_kill) for g in consumer_groups)
             and all(w.heartbeats >= b + 2 for w, b in zip(cw.workers, beats)),
             LEASE_MS / 1000 + 10, "every group to continue after the kill of node %d" % victim)
        moved = time.monotonic() - t_kill
        new = cl.coordinator(classic)
        assert new != victim and new in cl.alive()
        assert {cl.coordinator(g) for g in (kip848, kpy, connect)} == {new}
        # A few more rounds on the new coordinator, then the same members, same epochs.
        t_moved = time.monotonic()
        wait(lambda: time.monotonic() - t_moved > 2.0, 10, "two more seconds of traffic")
        after = {
            "classic": _classic_members(cl, new, classic),
            "kpy": _classic_members(cl, new, kpy),
            "848": {m.member_id: m.member_epoch for m in describe_consumer_group(
                cl.nodes[new].host, cl.nodes[new].port, kip848).members},
            "kpy-gen": kp.members(),
            "connect": cw.epochs(),
            "rebalances": (ck.rebalances(), c8.rebalances()),
        }
        assert after == before, (before, after)
        # No rejoin, no revocation: not one rebalance callback since the kill.
        for g in consumer_groups:
            assert g.rec.events[events[g.group]:] == [], (g.group, g.rec.events[events[g.group]:])
            g.rec.check_exclusive()
        assert cw.ledger.events[connect_events:] == []
        assert cw.ledger.check() == {u: "W%d" % i for i, w in enumerate(cw.workers)
                                     for u in w.state.owned}

        # Every acknowledged commit is read back through any node.
        for g in consumer_groups:
            acked = commits.last_acked(g.group)
            assert set(acked) == {(TOPIC, p) for p in range(PARTS)}
            got = cl.committed(g.group)
            for tp, off in acked.items():
                # A commit sent later may be stored though its answer was lost: never less.
                assert got[tp] >= off and got[tp] in commits.sent[(g.group,) + tp], \
                    (g.group, tp, off, got.get(tp))
        print("failover: node %d killed, groups moved to node %d, %.1f s to the first "
              "acknowledged commit / heartbeats of every group" % (victim, new, moved))
    finally:
        for g in groups:
            try:
                g.close()
            except Exception as e:         # the nodes are stopped all the same
                print("closing %s: %r" % (g.group, e))
        codes = cl.close()
    _check_exit(cl, codes)


# ----------------------------------------------------------------------- test 2: a zombie
def _wait(cl, pred, timeout, what):
    return cl.wait(pred, timeout, what, interval=0.05)


def test_a_paused_node_past_its_lease_answers_not_coordinator_and_writes_nothing(
        pg_db, tmp_path):  # noqa: F811
    cl = Cluster(pg_db, tmp_path, shards=SHARDS, lease_ms=LEASE_MS, topics={TOPIC: PARTS})
    committer = None
    try:
        for n in (1, 2, 3):
            cl.start(n)
        owners = cl.wait_balanced({1, 2, 3})
        victim = 2
        shard = min(s for s, o in owners.items() if o == victim)
        group = names_on_shard("zombie", shard)[0]
        committer = Committer(cl, group, TOPIC).start()
        _wait(cl, lambda: len(committer.acked) >= 5, 30, "commits through node %d" % victim)
        assert cl.coordinator(group) == victim
        old_epoch = next(s["epoch"] for s in cl.status()["shards"] if s["shard"] == shard)
        zombie_conn = RawClient(cl.nodes[victim].host, cl.nodes[victim].port, timeout=30)

        cl.pause(victim)
        t_pause = time.monotonic()
        # A commit the paused node reads only when it wakes up, long after its lease.
        zombie_conn.corr += 1
        zombie_conn.sock.sendall(encode_request_frame(
            commit_request(group, TOPIC, 0, ZOMBIE_OFFSET, LATE), 8, zombie_conn.corr,
            "zombie"))

        def taken():
            row = next(s for s in cl.status()["shards"] if s["shard"] == shard)
            return row if row["owner"] not in (None, victim) and row["epoch"] > old_epoch \
                and (row["lease_left_ms"] or 0) > 0 else None
        row = _wait(cl, taken, LEASE_MS / 1000 + 10, "another node to take shard %d" % shard)
        t_taken = time.monotonic()
        _wait(cl, lambda: committer.acked_after(t_taken), 15,
              "commits through the new owner, node %d" % row["owner"])
        # Rows the old tenure wrote; after the takeover no more can commit at that epoch.
        old_rows = cl.sql("SELECT base_offset FROM groupcoord_log WHERE shard = $1 AND "
                          "epoch = $2 ORDER BY base_offset", shard, old_epoch)
        assert old_rows, "node %d wrote nothing at epoch %d before the pause" % (victim,
                                                                                  old_epoch)
        paused_for = time.monotonic() - t_pause
        assert paused_for > LEASE_MS / 1000
        cl.resume(victim)

        # The write it read on waking is refused: NOT_COORDINATOR.
        size = int.from_bytes(zombie_conn._read(4), "big", signed=True)
        corr, resp = decode_response_frame(zombie_conn._read(size), 8, 8)
        assert corr == zombie_conn.corr
        assert resp.topics[0].partitions[0].error_code == 16, resp
        # And so is a new one on a new connection (the node has not taken the shard back:
        # a hand-off to it would take the current owner's release first).
        again = cl.call(victim, commit_request(group, TOPIC, 0, ZOMBIE_OFFSET + 1, LATE),
                        8)
        assert again.topics[0].partitions[0].error_code == 16, again
        zombie_conn.close()
        # Nothing the zombie tried is in the store: its tenure's rows are the same, and no
        # batch holds its offsets.
        assert cl.sql("SELECT base_offset FROM groupcoord_log WHERE shard = $1 AND "
                      "epoch = $2 ORDER BY base_offset", shard, old_epoch) == old_rows
        assert not cl.sql("SELECT base_offset FROM groupcoord_log WHERE shard = $1 AND "
                          "position(convert_to($2, 'UTF8') IN batch) > 0", shard, LATE)
        committer.stop()
        got = cl.committed(group)[(TOPIC, 0)]
        assert got >= committer.last_acked() and got in committer.sent, \
            (got, committer.last_acked())
        assert set(committer.errors) <= Committer.RETRIABLE | {"timeout", "ConnectionRefusedError",
                                                                "ConnectionResetError",
                                                                "TimeoutError", "ConnectionError"}, \
            committer.errors
        err = cl.stderr_of(victim)
        assert ("shard %d lost at epoch %d" % (shard, old_epoch) in err
                or "shard %d fenced at epoch %d" % (shard, old_epoch) in err), err
        print("zombie: node %d paused %.1f s; shard %d taken by node %d at epoch %d; node %d "
              "says:\n%s" % (victim, paused_for, shard, row["owner"], row["epoch"], victim,
                             "\n".join(x for x in err.splitlines() if "shard %d " % shard in x)))
    finally:
        if committer is not None and committer.thread.is_alive():
            committer.stop_ev.set()
        codes = cl.close()
    _check_exit(cl, codes)


# ----------------------------------------------------------------------- test 3: store restart
RETRIABLE_SOCKET = {"timeout", "TimeoutError", "ConnectionRefusedError", "ConnectionResetError",
                    "ConnectionError", "BrokenPipeError"}


def test_postgresql_restarted_under_load_loses_nothing_acknowledged(pg_server, pg_db,  # noqa: F811
                                                                   tmp_path):
    cl = Cluster(pg_db, tmp_path, shards=SHARDS, lease_ms=LEASE_MS, topics={TOPIC: PARTS})
    commits = Commits()
    writers, groups = [], []
    try:
        for n in (1, 2, 3):
            cl.start(n)
        cl.wait_balanced({1, 2, 3})
        boot = cl.bootstrap()
        c8 = ConfluentGroup(boot, names_on_shard("pg-848", 1)[0], True, commits)
        groups.append(c8)
        writers = [Committer(cl, names_on_shard("pg-w%d" % s, s)[0], TOPIC).start()
                   for s in range(SHARDS)]
        offset = [0]
        last = [0.0]

        def pump_until(pred, timeout, what):
            deadline = time.monotonic() + timeout
            while not pred():
                assert time.monotonic() < deadline, "timed out after %.0f s waiting for %s " \
                    "(writers' errors %s, commit failures %s)\n%s" % (
                        timeout, what, [w.errors[-5:] for w in writers], commits.failed[-5:],
                        cl.logs())
                c8.poll()
                if time.monotonic() - last[0] >= COMMIT_EVERY_S:
                    last[0] = time.monotonic()
                    offset[0] += 1
                    c8.commit(offset[0])

        pump_until(lambda: _partition_sets(c8.owned()) and all(len(w.acked) >= 3 for w in writers)
                   and commits.acked_after(c8.group, 0), SETTLE_S, "the load to run")
        t0 = time.monotonic()
        pump_until(lambda: time.monotonic() - t0 > 1.0, 5, "a second of load")
        pg_server.restart()
        t_back = time.monotonic()
        pump_until(lambda: all(w.acked_after(t_back) for w in writers)
                   and commits.acked_after(c8.group, t_back), 60,
                   "every writer and the group to commit again after the restart")
        t_moved = time.monotonic()
        pump_until(lambda: time.monotonic() - t_moved > 1.0, 5, "a second more of load")
        for w in writers:
            w.stop()
        # Retriable errors only: NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE / LOAD_IN_PROGRESS,
        # a connection refused or timed out; librdkafka reported nothing fatal.
        for w in writers:
            assert set(w.errors) <= Committer.RETRIABLE | RETRIABLE_SOCKET, w.errors
        assert not [e for e in c8.errors if e.fatal()], c8.errors
        c8.rec.check_exclusive()
        # Nothing acknowledged is lost.
        for w in writers:
            got = cl.committed(w.group)[(TOPIC, 0)]
            assert got >= w.last_acked() and got in w.sent, (w.group, got, w.last_acked())
        acked = commits.last_acked(c8.group)
        got = cl.committed(c8.group)
        for tp, off in acked.items():
            assert got[tp] >= off and got[tp] in commits.sent[(c8.group,) + tp], \
                (tp, off, got, commits.history(c8.group, tp), commits.failed)
        print("store restart: %.1f s until every writer and the group committed again; "
              "writers' errors %s" % (t_moved - t_back,
                                      sorted({str(e) for w in writers for e in w.errors})))
    finally:
        for w in writers:
            w.stop_ev.set()
        for g in groups:
            g.close()
        codes = cl.close()
    _check_exit(cl, codes)


# ----------------------------------------------------------------------- test 4: a node joins
def test_a_joining_node_takes_its_share_without_a_rebalance(pg_db, tmp_path):  # noqa: F811
    _node_joins(pg_db, tmp_path, ["848", "classic", "connect", "848", "classic", "connect"])


def test_a_joining_node_takes_its_share_from_kafka_python_groups_too(pg_db, tmp_path):  # noqa: F811
    # Two kafka-python groups among six: each consumer polled in turn from the test's loop,
    # they rebalanced without end (KafkaPythonGroup says why).
    _node_joins(pg_db, tmp_path, ["848", "kpy", "connect", "classic", "kpy", "connect"])


def _node_joins(pg_db, tmp_path, kinds):  # noqa: F811
    cl = Cluster(pg_db, tmp_path, shards=SHARDS, lease_ms=LEASE_MS, topics={TOPIC: PARTS})
    commits = Commits()
    groups = []
    try:
        for n in (1, 2):
            cl.start(n)
        cl.wait_balanced({1, 2})
        boot = cl.bootstrap()
        # One group on every shard, of the kinds given in turn, two members each.
        for shard, kind in enumerate(kinds):
            g = names_on_shard("join-%s" % kind, shard)[0]
            groups.append(ConfluentGroup(boot, g, True, commits, n=2) if kind == "848" else
                          ConfluentGroup(boot, g, False, commits, n=2) if kind == "classic" else
                          KafkaPythonGroup(boot, g, commits, n=2) if kind == "kpy" else
                          ConnectGroup(boot, g, n=2))
        consumer_groups = [g for g in groups if not isinstance(g, ConnectGroup)]
        connect_groups = [g for g in groups if isinstance(g, ConnectGroup)]
        offset = [0]
        last = [0.0]

        def wait(pred, timeout, what):
            deadline = time.monotonic() + timeout
            while not pred():
                assert time.monotonic() < deadline, "timed out after %.0f s waiting for %s: " \
                    "%s; commit failures %s; kafka-python %s\n%s" % (
                        timeout, what, [(g.group, g.owned()) for g in groups],
                        commits.failed[-10:], [(g.members(), cl.call(
                            cl.coordinator(g.group), M.DescribeGroupsRequest(
                                groups=[g.group]), 5).groups[0]) for g in consumer_groups
                            if isinstance(g, KafkaPythonGroup)], cl.logs())
                for g in consumer_groups:
                    g.poll()
                if time.monotonic() - last[0] >= COMMIT_EVERY_S:
                    last[0] = time.monotonic()
                    offset[0] += 1
                    for g in consumer_groups:
                        g.commit(offset[0])

        def settled():
            return (all(_partition_sets(g.owned()) for g in consumer_groups)
                    and all(len(g.stats) == 2 for g in consumer_groups
                            if isinstance(g, ConfluentGroup))
                    and not any(c._coordinator.need_rejoin() for g in consumer_groups
                                if isinstance(g, KafkaPythonGroup) for c in g.consumers)
                    and all(g.settled() for g in connect_groups))
        wait(settled, SETTLE_S, "every group to settle")
        t0 = time.monotonic()
        # A second more: librdkafka's statistics (every 200 ms) catch up with the callbacks.
        wait(lambda: all(commits.acked_after(g.group, t0) for g in consumer_groups)
             and time.monotonic() - t0 > 1.0, SETTLE_S, "commits from every group")

        def identity():
            out = {}
            for g in groups:
                if isinstance(g, ConnectGroup):
                    out[g.group] = (g.epochs(), g.owned())
                elif isinstance(g, KafkaPythonGroup):
                    out[g.group] = (g.members(), g.owned())
                else:
                    out[g.group] = (g.rebalances(), g.owned())
            return out
        before_owners = cl.owners()
        before = identity()
        before_848 = {g.group: {m.member_id: m.member_epoch for m in describe_consumer_group(
            cl.nodes[before_owners[shard_for(g.group, SHARDS)]].host,
            cl.nodes[before_owners[shard_for(g.group, SHARDS)]].port, g.group).members}
            for g in groups if isinstance(g, ConfluentGroup) and g.kip848}
        events = {g.group: len(g.rec.events) for g in consumer_groups}
        connect_events = {g.group: len(g.ledger.events) for g in connect_groups}
        beats = {g.group: [w.heartbeats for w in g.workers] for g in connect_groups}

        cl.start(3)
        t_join = time.monotonic()
        owners = cl.wait_balanced({1, 2, 3})
        moved = sorted(s for s in owners if owners[s] != before_owners[s])
        assert sorted(s for s, o in owners.items() if o == 3) == moved and len(moved) == 2, \
            (before_owners, owners)
        # Every group goes on (its coordinator moved or not), with the same members.
        wait(lambda: all(commits.acked_after(g.group, t_join) for g in consumer_groups)
             and all(all(w.heartbeats >= b + 2 for w, b in zip(g.workers, beats[g.group]))
                     for g in connect_groups), LEASE_MS / 1000 + 10,
             "every group to continue after node 3 joined")
        for g in groups:
            assert cl.coordinator(g.group) == owners[shard_for(g.group, SHARDS)]
        t_moved = time.monotonic()
        wait(lambda: time.monotonic() - t_moved > 2.0, 10, "two more seconds of traffic")
        assert identity() == before
        for name, members in before_848.items():
            node = owners[shard_for(name, SHARDS)]
            now = describe_consumer_group(cl.nodes[node].host, cl.nodes[node].port, name)
            assert {m.member_id: m.member_epoch for m in now.members} == members
        # No member lost a partition or a task: not one rebalance callback since the join.
        for g in consumer_groups:
            assert g.rec.events[events[g.group]:] == [], (g.group, g.rec.events[events[g.group]:])
            g.rec.check_exclusive()
        for g in connect_groups:
            assert g.ledger.events[connect_events[g.group]:] == []
            g.ledger.check()
        for g in consumer_groups:
            got = cl.committed(g.group)
            for tp, off in commits.last_acked(g.group).items():
                assert got[tp] >= off and got[tp] in commits.sent[(g.group,) + tp], \
                    (g.group, tp, off, got.get(tp), commits.history(g.group, tp))
        print("join: node 3 took shards %s (%s); every group went on %.1f s after the join"
              % (moved, {s: before_owners[s] for s in moved}, t_moved - t_join))
    finally:
        for g in groups:
            try:
                g.close()
            except Exception as e:         # the nodes are stopped all the same
                print("closing %s: %r" % (g.group, e))
        codes = cl.close()
    _check_exit(cl, codes)
