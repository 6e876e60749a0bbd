"""Real `groupcoord serve --store postgresql://` processes for the cluster acceptance tests
(tests/test_cluster_failover.py).

    cl = Cluster(dsn, tmp_path, shards=6, lease_ms=2000, topics={"t": 6})
    cl.start(1); cl.start(2); cl.start(3)    # each prints its listening line first
    cl.wait_balanced({1, 2, 3})              # every shard owned by a live node, evenly
    cl.owner_of(shard) / cl.coordinator(group) / cl.committed(group)
    cl.kill9(1); cl.pause(2); cl.resume(2)   # SIGKILL / SIGSTOP / SIGCONT by PID
    cl.close()                               # SIGCONT, SIGTERM, SIGKILL after a bound

Every node is a ServeProc (tests/serve_proc.py) with the cluster arguments instead of a data
dir; its catalog dir is its own under tmp_path. Waits are bounded and say what they waited
for; a failure carries the nodes' stderr tails.
"""
import asyncio
import os
import signal
import sys
import time

from groupcoord.cluster.status import fetch_status
from groupcoord.protocol import messages as M
from serve_proc import RawClient, ServeProc

# Groups form fast and members heartbeat often, so the tests take seconds, not minutes.
GROUP_CONFIG = ("group.initial.rebalance.delay.ms=300",
                "group.consumer.heartbeat.interval.ms=500",
                "group.connect.heartbeat.interval.ms=500")


class NodeProc(ServeProc):
    """One cluster node: `serve --store DSN --node-id N --lease-ms L`."""

    def __init__(self, dsn, node_id, work_dir, shards, lease_ms, topics, loop="asyncio",
                 extra_args=()):
        # work_dir: ServeProc's directory of the node (made at start); the node keeps nothing
        # on local disk, its catalog and logs are in the store.
        super().__init__(work_dir, topics=topics, shards=shards, loop=loop,
                         extra_args=extra_args)
        self.dsn = dsn
        self.node_id = node_id
        self.lease_ms = lease_ms
        self.paused = False

    def _argv(self):
        argv = [sys.executable, "-m", "groupcoord.cli", "serve", "--store", self.dsn,
                "--node-id", str(self.node_id), "--lease-ms", str(self.lease_ms),
                "--host", self.host, "--port", str(self.port),
                "--shards", str(self.shards), "--loop", self.loop]
        for name, parts in self.topics.items():
            argv += ["--topic", "%s:%d" % (name, parts)]
        if self.log_level:
            argv += ["--log-level", self.log_level]
        for kv in GROUP_CONFIG:
            argv += ["--group-config", kv]
        return argv + self.extra_args


class Cluster:
    def __init__(self, dsn, tmp_path, *, shards=6, lease_ms=2000, topics=None, extra_args=()):
        self.dsn = dsn
        self.tmp_path = tmp_path
        self.shards = shards
        self.lease_ms = lease_ms
        self.topics = dict(topics or {})
        self.extra_args = list(extra_args)
        self.nodes = {}             # node id -> NodeProc (killed ones stay, for their logs)
        self.stderr = {}            # node id -> its stderr, kept when close() removes it

    # ------------------------------------------------------------------ processes
    def start(self, node_id):
        p = NodeProc(self.dsn, node_id, self.tmp_path / ("node-%d" % node_id), self.shards,
                     self.lease_ms, self.topics, extra_args=self.extra_args)
        self.nodes[node_id] = p
        return p.start()

    def alive(self):
        return sorted(n for n, p in self.nodes.items() if p.proc.poll() is None)

    def bootstrap(self, ids=None):
        return ",".join(self.nodes[n].bootstrap for n in (ids or sorted(self.nodes)))

    def kill9(self, node_id):
        self.nodes[node_id].kill9()

    def pause(self, node_id):
        p = self.nodes[node_id]
        os.kill(p.proc.pid, signal.SIGSTOP)
        p.paused = True

    def resume(self, node_id):
        p = self.nodes[node_id]
        os.kill(p.proc.pid, signal.SIGCONT)
        p.paused = False

    def close(self):
        """Stop every node by its PID: SIGCONT a paused one, SIGTERM, SIGKILL after a
        bound. -> {node id: exit code} of the nodes that were running."""
        codes = {}
        for n, p in self.nodes.items():
            if p.proc is not None and p.proc.poll() is None:
                if p.paused:
                    self.resume(n)
                codes[n] = p.stop(timeout=30)
            self.stderr[n] = p.stderr_text(10 ** 8)   # close() removes the file
            p.close()
        return codes

    def stderr_of(self, node_id):
        p = self.nodes[node_id]
        return self.stderr[node_id] if node_id in self.stderr else p.stderr_text(10 ** 8)

    def logs(self, tail=6000):
        return "\n".join("---- node %d (pid %s) stderr:\n%s" % (n, p.proc.pid,
                                                                self.stderr_of(n)[-tail:])
                         for n, p in sorted(self.nodes.items()))

    # ------------------------------------------------------------------ the store's view
    def status(self):
        return asyncio.run(fetch_status(self.dsn, self.lease_ms))

    def owners(self):
        """{shard: owner} of the shards whose lease is current by the database's clock."""
        st = self.status()
        return {s["shard"]: s["owner"] for s in st["shards"]
                if s["owner"] is not None and (s["lease_left_ms"] or 0) > 0}

    def wait_balanced(self, live, timeout=60.0):
        """Until every shard is held by a node of `live` with a current lease, each of them
        holding shards/n or shards/n + 1. -> {shard: owner}."""
        live = set(live)
        lo = self.shards // len(live)
        hi = lo + (1 if self.shards % len(live) else 0)

        def balanced():
            o = self.owners()
            counts = [sum(1 for v in o.values() if v == n) for n in live]
            return o if (len(o) == self.shards and set(o.values()) <= live
                         and all(lo <= c <= hi for c in counts)) else None
        return self.wait(balanced, timeout, "shards balanced over nodes %s" % sorted(live))

    def wait(self, pred, timeout, what, interval=0.1):
        deadline = time.monotonic() + timeout
        while True:
            v = pred()
            if v:
                return v
            if time.monotonic() > deadline:
                raise AssertionError("timed out after %.0f s waiting for %s\n%s"
                                     % (timeout, what, self.logs()))
            time.sleep(interval)

    def sql(self, query, *args):
        """The rows of one query on the store (a connection of its own)."""
        import asyncpg

        async def go():
            conn = await asyncpg.connect(self.dsn, timeout=10)
            try:
                return await conn.fetch(query, *args, timeout=10)
            finally:
                await conn.close()
        return asyncio.run(go())

    # ------------------------------------------------------------------ the nodes' answers
    def call(self, node_id, request, version, timeout=10.0):
        p = self.nodes[node_id]
        with RawClient(p.host, p.port, timeout=timeout) as c:
            return c.call(request, version)

    def find_coordinator(self, group, via):
        """(error code, node id) FindCoordinator v4 answers at node `via`."""
        r = self.call(via, M.FindCoordinatorRequest(coordinator_keys=[group], key_type=0), 4)
        c = r.coordinators[0]
        return c.error_code, c.node_id

    def coordinator(self, group, timeout=30.0):
        """The node every live node names as the group's coordinator, once they agree."""
        def agreed():
            answers = set()
            for n in self.alive():
                if self.nodes[n].paused:
                    continue
                try:
                    answers.add(self.find_coordinator(group, n))
                except OSError:
                    return None
            if len(answers) == 1:
                err, node = answers.pop()
                return node if err == 0 else None
            return None
        return self.wait(agreed, timeout, "the live nodes to agree on %r's coordinator" % group)

    def committed(self, group, via=None, timeout=30.0):
        """{(topic, partition): offset} OffsetFetch v7 reads from the group's coordinator
        (found through FindCoordinator at `via`, any live node by default); retries the
        retriable answers, bounded."""
        def fetch():
            n = via if via is not None else self.alive()[0]
            try:
                err, coord = self.find_coordinator(group, n)
                if err:
                    return None
                r = self.call(coord, M.OffsetFetchRequest(group_id=group, topics=None), 7)
            except OSError:
                return None
            if r.error_code in (14, 15, 16):
                return None
            assert r.error_code == 0, r
            out = {}
            for t in r.topics:
                for p in t.partitions:
                    assert p.error_code == 0, (group, t.name, p)
                    if p.committed_offset >= 0:
                        out[(t.name, p.partition_index)] = p.committed_offset
            return ("ok", out)
        return self.wait(fetch, timeout, "the committed offsets of %r" % group)[1]


# ---------------------------------------------------------------------- a steady writer
def commit_request(group, topic, partition, offset, metadata):
    """OffsetCommit v8 of one partition, outside any generation (a standalone commit)."""
    return M.OffsetCommitRequest(
        group_id=group, generation_id_or_member_epoch=-1, member_id="",
        topics=[M.OffsetCommitRequestTopic(name=topic, partitions=[
            M.OffsetCommitRequestPartition(partition_index=partition, committed_offset=offset,
                                           committed_metadata=metadata)])])


class Committer:
    """A thread committing offsets 1, 2, 3... of one partition of `group` as a client would:
    FindCoordinator at the nodes in turn, OffsetCommit to the coordinator, a fresh search
    after a retriable error (14, 15, 16) or a connection failure / timeout. Records every
    offset sent, the acknowledged ones and every error code seen."""

    RETRIABLE = {14, 15, 16}

    def __init__(self, cluster, group, topic, partition=0, timeout_s=1.0, every_s=0.05):
        import threading
        self.cl = cluster
        self.group, self.topic, self.partition = group, topic, partition
        self.timeout_s, self.every_s = timeout_s, every_s
        self.sent, self.acked, self.errors = [], [], []   # offsets; (t, offset); codes
        self.stop_ev = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True, name="committer")
        self.n = 0

    def start(self):
        self.thread.start()
        return self

    def stop(self):
        self.stop_ev.set()
        self.thread.join(30)
        assert not self.thread.is_alive()

    def _coordinator(self):
        for n in self.cl.alive():
            try:
                err, node = self.cl.find_coordinator(self.group, n) if not \
                    self.cl.nodes[n].paused else (15, None)
            except OSError:
                continue
            if err == 0:
                return node
        return None

    def _run(self):
        coord = None
        while not self.stop_ev.wait(self.every_s):
            if coord is None:
                coord = self._coordinator()
                if coord is None:
                    continue
            self.n += 1
            self.sent.append(self.n)
            try:
                r = self.cl.call(coord, commit_request(self.group, self.topic, self.partition,
                                                       self.n, "w"), 8, timeout=self.timeout_s)
            except OSError as e:            # refused, reset, timed out: look again
                self.errors.append(type(e).__name__)
                coord = None
                continue
            code = r.topics[0].partitions[0].error_code
            if code == 0:
                self.acked.append((time.monotonic(), self.n))
            else:
                self.errors.append(code)      # the test checks they are all retriable
                coord = None

    def acked_after(self, t):
        return any(at > t for at, _ in self.acked)

    def last_acked(self):
        return self.acked[-1][1] if self.acked else None
