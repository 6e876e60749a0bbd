"""cluster/node.py (ClusterNode, the lease glue) against a real PostgreSQL (tests/pg_server.py):
two or three nodes in one event loop share one database, each with a pool of its own and a
fake ShardSet that journals its load_shard / unload_shard calls in one list shared by all
nodes (the order of events across nodes, no timestamps).

A node's pool is wrapped in a gate: closed, the node's store calls hang (a partition, or a
node too slow to renew) or fail at once (a store that refuses connections); its local clock
runs on, as a paused renewal path does. A crash is the node's tasks cancelled: nothing is
unloaded or released, its leases run out by the database's clock.

After every scenario the journal is replayed: no shard is ever loaded by two nodes at once
(a crashed node's fake is left out from its crash on: it cannot write, the store fences it),
and each shard's epochs grow from load to load. Waits poll a condition with a deadline that
only stops a hang (tests/waiting.py).
"""
import asyncio
import logging

import asyncpg
import pytest

from groupcoord.cluster import node as node_mod
from groupcoord.cluster.balance import target
from groupcoord.cluster.node import ClusterNode, NodeIdInUseError
from groupcoord.cluster.pg_leases import read_shards
from groupcoord.storage.pg_schema import migrate
from pg_server import pg_db, pg_server  # noqa: F401  (fixtures)
from waiting import until

SHARDS = 12
LEASE_MS = 1000         # safety 100 ms, renewals and refreshes every 333 ms, retries 100 ms
WAIT_S = 60             # only against a hang
HANG_GUARD_S = 240


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, HANG_GUARD_S))


class FakeShards:
    """ShardSet's load_shard / unload_shard / loaded, journaled."""

    def __init__(self, node_id, journal):
        self.node_id = node_id
        self.journal = journal
        self.epochs = {}            # loaded shard -> epoch

    async def load_shard(self, index, epoch):
        await asyncio.sleep(0)
        assert index not in self.epochs, "shard %d loaded twice on node %d" % (index,
                                                                               self.node_id)
        self.epochs[index] = epoch
        self.journal.append((self.node_id, "load", index, epoch))

    async def unload_shard(self, index):
        await asyncio.sleep(0)
        self.journal.append((self.node_id, "unload", index, self.epochs.pop(index, None)))

    def loaded(self, index):
        return index in self.epochs


class GatedPool:
    """The node's view of the store: open, closed ("hang": calls wait for the gate) or
    refusing ("fail": calls raise at once)."""

    def __init__(self, pool):
        self.pool = pool
        self.gate = asyncio.Event()
        self.gate.set()
        self.mode = "open"
        self.refused = 0

    def set(self, mode):
        self.mode = mode
        if mode == "open":
            self.gate.set()
        else:
            self.gate.clear()

    async def _pass(self):
        if self.mode == "fail":
            self.refused += 1
            raise ConnectionRefusedError("connection refused (test gate)")
        await self.gate.wait()

    async def execute(self, *args):
        await self._pass()
        return await self.pool.execute(*args)

    async def fetch(self, *args):
        await self._pass()
        return await self.pool.fetch(*args)

    async def fetchval(self, *args):
        await self._pass()
        return await self.pool.fetchval(*args)


class Cluster:
    def __init__(self, dsn, lease_ms=LEASE_MS):
        self.dsn = dsn
        self.lease_ms = lease_ms
        self.journal = []
        self.nodes = {}             # node id -> ClusterNode
        self.fakes = {}
        self.gates = {}
        self.crashed = {}           # node id -> journal length at its crash
        self.admin = None

    async def __aenter__(self):
        self.admin = await asyncpg.connect(self.dsn)
        await migrate(self.admin, SHARDS)
        return self

    async def add(self, node_id):
        pool = GatedPool(await asyncpg.create_pool(self.dsn, min_size=1, max_size=4))
        fake = FakeShards(node_id, self.journal)
        node = ClusterNode(pool, fake, node_id=node_id, host="127.0.0.1", port=9100 + node_id,
                           lease_ms=self.lease_ms, shard_count=SHARDS)
        self.nodes[node_id], self.fakes[node_id], self.gates[node_id] = node, fake, pool
        await node.start()
        return node

    async def crash(self, node_id):
        """The process dies: its tasks stop, nothing is unloaded or released."""
        node = self.nodes[node_id]
        tasks = list(node._tasks)
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self.crashed[node_id] = len(self.journal)

    def live(self):
        return [n for n in sorted(self.nodes) if n not in self.crashed]

    def holders(self):
        """shard -> the live nodes whose fake has it loaded."""
        out = {s: [] for s in range(SHARDS)}
        for n in self.live():
            for s in self.fakes[n].epochs:
                out[s].append(n)
        return out

    def balanced(self, nodes):
        """Every shard loaded by exactly one of nodes, evenly, and every node's view (brokers,
        owners) agreeing with that."""
        holders = self.holders()
        if any(len(h) != 1 or h[0] not in nodes for h in holders.values()):
            return False
        counts = sorted(len(self.fakes[n].epochs) for n in nodes)
        if counts[-1] - counts[0] > 1:
            return False
        want = [(n, "127.0.0.1", 9100 + n) for n in sorted(nodes)]
        return all(self.nodes[n].brokers() == want
                   and all(self.nodes[n].owner(s) == holders[s][0] for s in range(SHARDS))
                   for n in nodes)

    async def wait_balanced(self, nodes, what):
        await until(lambda: self.balanced(nodes), WAIT_S, what)
        # The store agrees: each shard's owner and epoch are its holder's.
        rows = await read_shards(self.admin)
        for r in rows:
            n = self.holders()[r.shard][0]
            assert (r.owner, r.epoch) == (n, self.fakes[n].epochs[r.shard])
            assert r.lease_left_ms > 0

    def check_journal(self):
        """No shard loaded by two (uncrashed) nodes at once; epochs grow from load to load."""
        held = {}
        last_epoch = {}
        for i, (n, kind, shard, epoch) in enumerate(self.journal):
            if n in self.crashed and i >= self.crashed[n]:
                continue
            if kind == "load":
                others = {m for m in held.get(shard, set())
                          if not (m in self.crashed and i >= self.crashed[m])}
                assert not others, "shard %d loaded by %d while %s hold it (event %d)" % (
                    shard, n, others, i)
                assert epoch > last_epoch.get(shard, 0), (shard, epoch, last_epoch)
                last_epoch[shard] = epoch
                held.setdefault(shard, set()).add(n)
            else:
                held.get(shard, set()).discard(n)

    def index(self, node_id, kind, shard, after=0):
        for i in range(after, len(self.journal)):
            n, k, s, _ = self.journal[i]
            if (n, k, s) == (node_id, kind, shard):
                return i
        return None

    async def __aexit__(self, *exc):
        for n, node in self.nodes.items():
            if n in self.crashed:
                continue
            self.gates[n].set("open")
            await node.close()
        for g in self.gates.values():
            await g.pool.close()
        await self.admin.close()


def _lines(caplog, text, level=logging.INFO):
    return [r.getMessage() for r in caplog.records
            if r.name == "groupcoord.cluster" and r.levelno == level and text in r.getMessage()]


@pytest.fixture
def cluster_log(caplog):
    caplog.set_level(logging.INFO, logger="groupcoord.cluster")
    yield caplog
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert not errors, errors           # the glue never hit an internal error


def test_three_nodes_split_the_shards_and_a_closing_node_hands_its_shards_off(pg_db,
                                                                             cluster_log):
    async def main():
        async with Cluster(pg_db) as c:
            one = await c.add(1)
            await c.wait_balanced([1], "node 1 alone holds every shard")
            assert one.controller_id() == 1
            await c.add(2)
            await c.add(3)
            await c.wait_balanced([1, 2, 3], "12 shards split 4/4/4")
            assert sorted(len(c.fakes[n].epochs) for n in (1, 2, 3)) == [4, 4, 4]
            assert all(c.nodes[n].controller_id() == 1 for n in (1, 2, 3))
            # Node 1 gave 8 (or more) shards away by hand-off: released, never lost.
            assert len([x for x in _lines(cluster_log, "released") if "node 1:" in x]) >= 8
            assert not _lines(cluster_log, " lost at epoch")
            twos = dict(c.fakes[2].epochs)
            mark = len(c.journal)
            await c.nodes[2].close()
            del c.nodes[2]
            await c.wait_balanced([1, 3], "node 2's shards with nodes 1 and 3")
            assert sorted(len(c.fakes[n].epochs) for n in (1, 3)) == [6, 6]
            assert c.fakes[2].epochs == {}
            for s, e in twos.items():
                # Unloaded, released (not left to expire), then loaded by its next owner at
                # the next epoch.
                unload = c.index(2, "unload", s, mark)
                holder = c.holders()[s][0]
                assert unload is not None and unload < c.index(holder, "load", s, mark)
                assert "node 2: shard %d released at epoch %d" % (s, e) in _lines(
                    cluster_log, "released")
                assert c.fakes[holder].epochs[s] == e + 1
            assert not _lines(cluster_log, " lost at epoch")
            assert all(c.nodes[n].brokers() == [(1, "127.0.0.1", 9101), (3, "127.0.0.1", 9103)]
                       for n in (1, 3))
            c.check_journal()
    run(main())


def test_a_crashed_node_loses_its_shards_to_the_others_after_the_lease(pg_db, cluster_log):
    async def main():
        async with Cluster(pg_db) as c:
            for n in (1, 2, 3):
                await c.add(n)
            await c.wait_balanced([1, 2, 3], "12 shards split 4/4/4")
            threes = dict(c.fakes[3].epochs)
            await c.crash(3)
            mark = len(c.journal)
            await c.wait_balanced([1, 2], "node 3's shards taken over by nodes 1 and 2")
            for s, e in threes.items():
                # Taken by the store's expiry: never unloaded nor released by node 3.
                assert c.index(3, "unload", s, mark) is None
                assert c.fakes[c.holders()[s][0]].epochs[s] == e + 1
            assert not any("node 3: shard" in line for line in _lines(cluster_log, "released"))
            c.check_journal()
    run(main())


def test_a_node_that_cannot_renew_stops_serving_before_another_node_takes_over(pg_db,
                                                                               cluster_log):
    async def main():
        # The longest lease: node 3 unloads safety_ms (lease/10) before the store's lease ends.
        async with Cluster(pg_db, lease_ms=1500) as c:
            for n in (1, 2, 3):
                await c.add(n)
            await c.wait_balanced([1, 2, 3], "12 shards split 4/4/4")
            threes = dict(c.fakes[3].epochs)
            mark = len(c.journal)
            c.gates[3].set("hang")          # node 3's renewals and heartbeats stall
            await until(lambda: all(len(h) == 1 and h[0] in (1, 2)
                                    for h in c.holders().values()),
                        WAIT_S, "nodes 1 and 2 holding every shard")
            for s, e in threes.items():
                unload = c.index(3, "unload", s, mark)
                holder = c.holders()[s][0]
                # On its own local clock, before the store's lease ran out for the others.
                assert unload is not None and unload < c.index(holder, "load", s, mark), s
                assert "node 3: shard %d lost at epoch %d" % (s, e) in " ".join(
                    _lines(cluster_log, "lost at epoch"))
            assert c.fakes[3].epochs == {}
            # Its hung calls time out a lease after they were sent, maybe after the takeover.
            await until(lambda: _lines(cluster_log, "node 3: store call failed",
                                       logging.WARNING), WAIT_S, "node 3's calls timing out")
            c.check_journal()
            # The store answers again: node 3 heartbeats, is live, and takes its share back.
            c.gates[3].set("open")
            await c.wait_balanced([1, 2, 3], "node 3 back with its share")
            assert _lines(cluster_log, "node 3: the store answers again")
            c.check_journal()
    run(main())


def test_a_fenced_shard_is_unloaded_and_taken_again_where_the_balance_says(pg_db,
                                                                           cluster_log):
    async def main():
        async with Cluster(pg_db) as c:
            for n in (1, 2):
                await c.add(n)
            await c.wait_balanced([1, 2], "12 shards split 6/6")
            shard, epoch = sorted(c.fakes[1].epochs.items())[0]
            mark = len(c.journal)
            c.nodes[1].fenced(shard, epoch)
            await until(lambda: c.index(1, "unload", shard, mark) is not None, WAIT_S,
                        "the fenced shard unloaded")
            assert _lines(cluster_log, "node 1: shard %d fenced at epoch %d" % (shard, epoch))
            # A stale fence (an epoch already given up) changes nothing.
            c.nodes[1].fenced(shard, epoch)
            await until(lambda: any(shard in c.fakes[n].epochs and c.fakes[n].epochs[shard]
                                    > epoch for n in (1, 2)), WAIT_S, "the shard loaded again")
            await c.wait_balanced([1, 2], "12 shards split 6/6 again")
            rows = await read_shards(c.admin)
            holder = c.holders()[shard][0]
            # Its lease was still node 1's in the store: the balance keeps it there.
            assert target(SHARDS, [1, 2], [r.owner for r in rows])[shard] == holder == 1
            assert c.fakes[1].epochs[shard] == epoch + 1
            assert len(_lines(cluster_log, "fenced at epoch")) == 1
            c.check_journal()
    run(main())


def test_store_failures_are_retried_logged_once_per_interval_and_never_stop_the_node(
        pg_db, cluster_log, monkeypatch):
    monkeypatch.setattr(node_mod, "STORE_LOG_EVERY_MS", 10 ** 9)    # one line in this test

    async def main():
        async with Cluster(pg_db) as c:
            await c.add(1)
            await c.wait_balanced([1], "node 1 holds every shard")
            before = dict(c.fakes[1].epochs)
            c.gates[1].set("fail")
            # Its leases cannot be renewed: it unloads everything on its own, and keeps trying.
            await until(lambda: not c.fakes[1].epochs and c.gates[1].refused >= 20, WAIT_S,
                        "node 1 unloading every shard while the store refuses it")
            assert len(_lines(cluster_log, "store call failed", logging.WARNING)) == 1
            c.gates[1].set("open")
            await c.wait_balanced([1], "node 1 holding every shard again")
            assert all(e > before[s] for s, e in c.fakes[1].epochs.items())
            assert len(_lines(cluster_log, "node 1: the store answers again")) == 1
            assert len(_lines(cluster_log, "store call failed", logging.WARNING)) == 1
            c.check_journal()
    run(main())


# ---------------------------------------------------------------------- one process per id
async def _twin(c, node_id, port):
    """Another process started with node_id: a pool, fake shards and a journal of its own."""
    pool = await asyncpg.create_pool(c.dsn, min_size=1, max_size=4)
    fake = FakeShards(node_id, [])
    node = ClusterNode(pool, fake, node_id=node_id, host="127.0.0.1", port=port,
                       lease_ms=c.lease_ms, shard_count=SHARDS)
    return node, fake, pool


async def _port_of(c, node_id):
    return await c.admin.fetchval("SELECT port FROM groupcoord_nodes WHERE node_id = $1",
                                  node_id)


def test_a_second_process_with_a_live_node_id_is_refused(pg_db, cluster_log):
    async def main():
        async with Cluster(pg_db) as c:
            await c.add(1)
            await c.wait_balanced([1], "node 1 holds every shard")
            twin, fake, pool = await _twin(c, 1, 9201)
            try:
                # node 1 heartbeats while the twin watches its row: refused.
                with pytest.raises(NodeIdInUseError) as e:
                    await twin.start()
            finally:
                await pool.close()
            msg = str(e.value)
            assert "node id 1 is in use" in msg and "127.0.0.1:9101" in msg, msg
            assert "last seen" in msg and fake.epochs == {}
            assert _lines(cluster_log, "waiting until it is older than the lease",
                          logging.WARNING)
            # Node 1 is untouched: its row, every shard at the epoch it loaded.
            assert await _port_of(c, 1) == 9101
            await c.wait_balanced([1], "node 1 still holding every shard")
            assert [k for _n, k, _s, _e in c.journal] == ["load"] * SHARDS
    run(main())


def test_a_crashed_node_id_is_taken_by_its_restart_once_the_lease_passed(pg_db, cluster_log):
    async def main():
        async with Cluster(pg_db) as c:
            for n in (1, 2):
                await c.add(n)
            await c.wait_balanced([1, 2], "12 shards split 6/6")
            await c.crash(1)
            again, fake, pool = await _twin(c, 1, 9301)
            try:
                await again.start()     # at once: it waits for the dead row to age
                assert await _port_of(c, 1) == 9301
                assert _lines(cluster_log, "node 1: the node id's previous holder was not "
                                           "seen for the lease: taking the id")
                await until(lambda: len(fake.epochs) == len(c.fakes[2].epochs) == SHARDS // 2
                            and not set(fake.epochs) & set(c.fakes[2].epochs)
                            and again.brokers() == c.nodes[2].brokers()
                            == [(1, "127.0.0.1", 9301), (2, "127.0.0.1", 9102)],
                            WAIT_S, "the restarted node 1 and node 2 splitting the shards")
            finally:
                await again.close()
                await pool.close()
    run(main())


def test_a_node_whose_id_another_process_took_stops_serving(pg_db, caplog):
    caplog.set_level(logging.INFO, logger="groupcoord.cluster")

    async def main():
        async with Cluster(pg_db) as c:
            for n in (1, 2):
                await c.add(n)
            await c.wait_balanced([1, 2], "12 shards split 6/6")
            old = c.nodes[1]
            c.gates[1].set("hang")      # node 1 stalls (paused, cut off) past the lease
            twin, fake, pool = await _twin(c, 1, 9401)
            try:
                await twin.start()      # takes id 1 once the old row is older than the lease
                await until(lambda: len(fake.epochs) == len(c.fakes[2].epochs) == SHARDS // 2,
                            WAIT_S, "the new node 1 and node 2 splitting the shards")
                assert c.fakes[1].epochs == {}      # unloaded on its own clock meanwhile
                mark = len(c.journal)
                reads = []
                real = old.leases.live_rows

                async def counted():
                    reads.append(1)
                    return await real()
                old.leases.live_rows = counted
                c.gates[1].set("open")  # the old process runs again
                await until(lambda: old.displaced is not None, WAIT_S,
                            "the old node 1 finding its id taken")
                errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
                assert len(errors) == 1 and "another process took node id 1" in errors[0] \
                    and "127.0.0.1:9401" in errors[0], errors
                # It keeps its view current but no longer heartbeats nor takes shards.
                await until(lambda: len(reads) >= 4, WAIT_S, "the old node's refreshes")
                assert await _port_of(c, 1) == 9401
                assert c.fakes[1].epochs == {}
                assert not [e for e in c.journal[mark:] if e[0] == 1], c.journal[mark:]
                assert old.machine.idle()
                epochs = dict(fake.epochs)
                assert len(epochs) == SHARDS // 2
                # Its view sends clients to id 1's new address for the new node's shards.
                assert all(old.owner(s) == 1 for s in epochs)
                assert old.brokers() == [(1, "127.0.0.1", 9401), (2, "127.0.0.1", 9102)]
            finally:
                await twin.close()
                await pool.close()
    run(main())
