"""`groupcoord serve --store file:DIR --processes 2` (server/processes.py): a supervisor and two
node processes that split the shards (shard s -> node s mod 2 + 1). Both nodes list both in
Metadata and send each group to its owner; a group request at the other node gets
NOT_COORDINATOR; KIP-848 consumers (confluent-kafka) bootstrapped to node 1 alone find the
coordinator of a group on node 2 through FindCoordinator. kill -9 of a node: the supervisor
starts it again, it reloads its shards and the group carries on with the same members and
epochs. SIGTERM to the supervisor stops both nodes (by PID) and exits 0. See
docs/cluster.md, "One machine, every core"."""
import os
import re
import signal
import subprocess
import sys

import pytest

import groupcoord.protocol as P
from groupcoord.runtime import shard_for
from groupcoord.server.processes import owner_of
from serve_proc import RawClient, describe_consumer_group, package_root, wait_until

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import TopicPartition  # noqa: E402

from test_clients_confluent import (Recorder, kip848_consumer, poll_all,  # noqa: E402
                                    stable_ownership)

M = P.messages
# 9 shards, not 50: s mod 9 and s mod 50 place some groups on nodes of different parity, so
# FindCoordinator agreeing with owner_of(shard_for(g, 9), 2) shows --shards reached the nodes.
SHARDS = 9
TOPIC = "pt"
PARTS = 4
LISTEN = re.compile(r"^groupcoord: listening on (\S+):(\d+) \((\d+) shards loaded from (.*); "
                    r"2 processes on ports (\d+)-(\d+)\)$")
STARTED = re.compile(r"node (\d+) \(pid (\d+)\) listening on")
RESTARTED = re.compile(r"node (\d+) restarted \(pid (\d+)")
BOUND_S = 60.0          # bound on every wait (a hang fails the test instead of blocking)


def _group_on(node, prefix):
    """The first group id '<prefix>-<k>' whose shard node owns."""
    return next(g for g in ("%s-%d" % (prefix, k) for k in range(1000))
                if owner_of(shard_for(g, SHARDS), 2) == node)


class Supervised:
    """`groupcoord serve --processes 2` as a child of the test; stderr to a file."""

    def __init__(self, tmp_path):
        self.stderr_path = tmp_path / "supervisor.stderr"
        self.data = tmp_path / "data"
        argv = [sys.executable, "-m", "groupcoord.cli", "serve", "--store",
                "file:%s" % self.data, "--processes", "2", "--port", "0", "--shards",
                str(SHARDS), "--topic", "%s:%d" % (TOPIC, PARTS), "--loop", "asyncio",
                "--group-config", "group.consumer.heartbeat.interval.ms=500"]
        self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                     stderr=open(self.stderr_path, "wb"), text=True,
                                     env=dict(os.environ, PYTHONPATH=package_root()),
                                     start_new_session=True)
        line = self.proc.stdout.readline().rstrip("\n")
        m = LISTEN.match(line)
        assert m, "%r\n%s" % (line, self.stderr())
        assert int(m.group(3)) == SHARDS and m.group(4) == str(self.data)
        self.ports = {1: int(m.group(5)), 2: int(m.group(6))}
        assert self.ports[2] == self.ports[1] + 1 and int(m.group(2)) == self.ports[1]

    def stderr(self):
        return self.stderr_path.read_text(errors="replace")

    def pids(self):
        """node id -> the pid of its latest start, from the supervisor's log."""
        out = {}
        for line in self.stderr().splitlines():
            m = STARTED.search(line) or RESTARTED.search(line)
            if m and "groupcoord.serve" in line and "node-" not in line:
                out[int(m.group(1))] = int(m.group(2))
        return out

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(BOUND_S)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)     # its own session: the nodes too
                self.proc.wait(BOUND_S)
        return self.proc.returncode


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _call(port, req, version):
    with RawClient("127.0.0.1", port) as c:
        return c.call(req, version)


def test_two_processes_split_the_shards_and_a_killed_one_comes_back(tmp_path):
    sup = Supervised(tmp_path)
    consumers = []
    try:
        pids = sup.pids()
        assert sorted(pids) == [1, 2] and pids[1] != pids[2], sup.stderr()
        ports = sup.ports
        groups = [_group_on(1, "pa"), _group_on(2, "pb")] + ["g-%d" % k for k in range(30)]
        ids = set()
        for node in (1, 2):
            meta = _call(ports[node], M.MetadataRequest(topics=None), 12)
            assert [(b.node_id, b.port) for b in meta.brokers] == [(1, ports[1]),
                                                                  (2, ports[2])]
            assert meta.controller_id == 1
            assert [(t.name, len(t.partitions)) for t in meta.topics] == [(TOPIC, PARTS)]
            ids.add(meta.cluster_id)
            fc = _call(ports[node], M.FindCoordinatorRequest(coordinator_keys=groups,
                                                              key_type=0), 4)
            for c in fc.coordinators:
                want = owner_of(shard_for(c.key, SHARDS), 2)
                assert (c.error_code, c.node_id, c.port) == (0, want, ports[want]), c.key
        assert len(ids) == 1                        # one cluster id, made by the supervisor
        # Both nodes got groups (9 shards over 2), so each owns what owner_of says.
        assert {owner_of(shard_for(g, SHARDS), 2) for g in groups} == {1, 2}

        # KIP-848 groups, one per node, every consumer bootstrapped to node 1 only.
        g1, g2 = groups[0], groups[1]
        boot = "127.0.0.1:%d" % ports[1]
        rec = Recorder()
        for g in (g1, g2):
            for k in range(2):
                consumers.append(kip848_consumer(boot, g, "%s-c%d" % (g, k), rec, TOPIC))
        owned1 = stable_ownership(consumers[:2], PARTS, TOPIC, [2, 2], what="group on node 1")
        owned2 = stable_ownership(consumers[2:], PARTS, TOPIC, [2, 2], what="group on node 2")
        poll_all(consumers, seconds=0.5)
        for c, parts in zip(consumers, owned1 + owned2):
            c.commit(offsets=[TopicPartition(TOPIC, p, 100 + p) for p in parts],
                     asynchronous=False)

        # The group on node 2, asked of node 1: NOT_COORDINATOR; of node 2: its members.
        wrong = _call(ports[1], M.ConsumerGroupDescribeRequest(group_ids=[g2]), 0).groups[0]
        assert wrong.error_code == 16, wrong
        before = describe_consumer_group("127.0.0.1", ports[2], g2)
        assert before.error_code == 0 and len(before.members) == 2, before
        members = {m.member_id: m.member_epoch for m in before.members}
        events = len(rec.events)

        os.kill(pids[2], signal.SIGKILL)
        wait_until(lambda: sup.pids().get(2) not in (None, pids[2]), BOUND_S,
                   what="the supervisor restarting node 2\n" + sup.stderr())
        assert "node 2 (pid %d) exited with status SIGKILL" % pids[2] in sup.stderr()
        assert not _alive(pids[2]) and _alive(pids[1]) and sup.proc.poll() is None

        after = describe_consumer_group("127.0.0.1", ports[2], g2)
        assert after.error_code == 0, after
        assert {m.member_id: m.member_epoch for m in after.members} == members
        # The consumers reach the restarted node again and commit with their epochs.
        for c, parts in zip(consumers[2:], owned2):
            c.commit(offsets=[TopicPartition(TOPIC, p, 200 + p) for p in parts],
                     asynchronous=False)
        poll_all(consumers, seconds=1.0)
        assert rec.events[events:] == []            # no revoke, no lost, no new assignment
        for c, base in ((consumers[0], 100), (consumers[2], 200)):
            got = c.committed([TopicPartition(TOPIC, p) for p in range(PARTS)],
                              timeout=BOUND_S)
            assert [tp.offset for tp in got] == [base + p for p in range(PARTS)]
    finally:
        for c in consumers:
            c.close()
        last = sup.pids()
        rc = sup.stop()
    assert rc == 0, sup.stderr()
    assert not any(_alive(p) for p in last.values()), (last, sup.stderr())
    assert "stopped 2 node process(es)" in sup.stderr()


@pytest.mark.parametrize("argv, says", [
    (["--allow-create-topics"], "catalog is fixed"),
    (["--store", "postgresql://u@127.0.0.1:1/db", "--node-id", "1"], "a file store only"),
    (["--port", "65535"], "above 65535"),
    (["--shards", "1"], "would own none"),
])
def test_processes_refuses_what_it_cannot_run(tmp_path, argv, says):
    args = ["--processes", "2"] + argv
    if "--store" not in argv:
        args += ["--data-dir", str(tmp_path / "d")]
    r = subprocess.run([sys.executable, "-m", "groupcoord.cli", "serve"] + args,
                       capture_output=True, text=True, timeout=BOUND_S,
                       env=dict(os.environ, PYTHONPATH=package_root()))
    assert r.returncode == 2 and says in r.stderr, r.stderr
    assert r.stdout == ""
