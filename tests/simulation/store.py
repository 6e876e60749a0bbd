"""The simulated PostgreSQL store of the cluster mode (docs/simulation.md, "Cluster mode").

What it holds (schema version 1 of storage/pg_schema.py, in memory):

    rows[shard]  = [owner | None, epoch, lease_expires_us | None]     groupcoord_shards
    log[shard]   = {base_offset: (last_offset, epoch, batch bytes)}     groupcoord_log
    nodes[id]    = last_seen_us                                        groupcoord_nodes

Its clock is the virtual clock itself (the database's clock_timestamp(): the one clock lease
expiry is decided by); the nodes' clocks drift against it (cluster.py).

Two ways in, both through `call`-like round trips that take virtual time, may find the store
down (StoreUnavailable before anything ran) and may lose the answer (StoreUnavailable after the
statement or transaction ran: the outcome is unknown to the caller, as when a connection drops
during COMMIT):

* the lease operations of cluster/pg_leases.py (acquire / renew / release / heartbeat / read),
  with the same semantics as its SQL, called by the simulation's lease glue;
* `SimPool`, a stand-in for the asyncpg pool that the REAL storage/pg_log.PgShardLog runs
  against unchanged (group commit, the epoch check, fencing, the unsure-commit retry, loading,
  compaction). It models exactly the statements PgShardLog sends, matched by their text (the
  module's own constants where it has them); any other statement fails the seed loudly
  ("unmodelled statement"), so a change of PgShardLog's SQL cannot go unnoticed. Chosen over a
  SimShardLog re-implementation because the code under test -- where the planted
  append-without-epoch-check bug lives -- is then the real one; the price is this small
  statement table.

A transaction runs at ONE virtual instant: the request travels, every statement of the
transaction and its COMMIT execute with no suspension in between, then the answer travels back.
That is a valid serialisation of what PostgreSQL does under the row lock the epoch check takes
(FOR SHARE: a takeover's UPDATE waits for the transaction), so nothing is lost by not modelling
the lock; a slow commit is a slow round trip.

Oracles (the store sees every write): `on_write(node, shard, epoch, what)` is called for every
write as it commits (the checker asserts the writer holds the shard's lease at that epoch), and
a second write at an existing (shard, base_offset) raises UniqueViolation and is reported too.
"""
from __future__ import annotations

import asyncio
from typing import Optional

from groupcoord.storage import pg_log

__all__ = ["SimStore", "SimPool", "StoreUnavailable", "UniqueViolation"]


class StoreUnavailable(ConnectionError):
    """The store could not be reached, or the connection dropped before its answer. The
    message says "simulated" (the runner's error-log watcher lets such lines through)."""


class UniqueViolation(Exception):
    """INSERT of a (shard, base_offset) that exists: two writers wrote the same offsets."""


def _norm(sql: str) -> str:
    return " ".join(sql.split())


# The statements PgShardLog sends, by their normalised text (pg_log's constants where it has
# them; the others as written there).
_S_CHECK = _norm(pg_log._CHECK)
_S_INSERT = _norm(pg_log._INSERT)
_S_UPDATE = _norm(pg_log._UPDATE)
_S_DELETE = _norm(pg_log._DELETE)
_S_SELECT = _norm(pg_log._SELECT)
_S_OWNER = "SELECT owner, epoch FROM groupcoord_shards WHERE shard = $1"
_S_WRITTEN = ("SELECT base_offset FROM groupcoord_log WHERE shard = $1 AND base_offset >= $2"
              " ORDER BY base_offset")
_S_COMPACT_READ = ("SELECT base_offset, last_offset, epoch, batch FROM groupcoord_log"
                   " WHERE shard = $1 AND last_offset < $2 ORDER BY base_offset")
_S_VACUUM = "VACUUM (SKIP_LOCKED) groupcoord_log"


class StoreParams:
    """Per-seed behaviour of the store (drawn by cluster.py)."""

    def __init__(self, *, base_ms=0.5, jitter_ms=2.0, slow_p=0.0, slow_ms=1500.0,
                 lose_p=0.0):
        self.base_ms = base_ms
        self.jitter_ms = jitter_ms
        self.slow_p = slow_p          # a round trip is slow (a slow commit, a stalled server)
        self.slow_ms = slow_ms
        self.lose_p = lose_p          # the answer is lost after the statement ran (unsure)


class SimStore:
    def __init__(self, loop, rng, shards: int, params: StoreParams, trace):
        self.loop = loop
        self.rng = rng
        self.params = params
        self.trace = trace
        self.rows = {i: [None, 0, None] for i in range(shards)}
        self.log = {i: {} for i in range(shards)}
        self.nodes: dict = {}
        self.grants = {i: {} for i in range(shards)}     # shard -> {epoch: node id} (oracle)
        self.down_until_us = 0
        self.lose_next = False        # the next transaction's answer is lost (a fault)
        self.on_write = None          # checker hook: (node_id, shard, epoch, what)
        self.on_conflict = None       # checker hook: (node_id, shard, base_offset)
        # counters
        self.calls = 0
        self.failed = 0
        self.unsure = 0
        self.commits = 0

    # ---------------------------------------------------------------- round trips
    @property
    def now_us(self) -> int:
        return self.loop.now_us

    def up(self) -> bool:
        return self.now_us >= self.down_until_us

    def down_for(self, ms: float) -> None:
        self.down_until_us = max(self.down_until_us, self.now_us + int(ms * 1000))
        self.trace("store", "unavailable for %d ms" % ms)

    def _delay_s(self) -> float:
        p, r = self.params, self.rng
        ms = p.base_ms + r.random() * p.jitter_ms
        if p.slow_p and r.random() < p.slow_p:
            ms += r.random() * p.slow_ms
        return ms / 1000

    async def reach(self, node, inc: int) -> None:
        """The request travels to the store (the node must be running to send it)."""
        await node.running(inc)
        self.calls += 1
        await asyncio.sleep(self._delay_s())
        if not self.up():
            self.failed += 1
            raise StoreUnavailable("simulated store unavailable")

    async def answer(self, node, inc: int, lose_ok: bool = True) -> None:
        """The answer travels back; it is lost (outcome unknown) when the store went down
        meanwhile or by chance; a paused node reads it when it resumes."""
        lost = False
        if lose_ok and (self.lose_next or (self.params.lose_p
                                          and self.rng.random() < self.params.lose_p)):
            self.lose_next = False
            lost = True
        await asyncio.sleep(self._delay_s())
        if lost or not self.up():
            self.unsure += 1
            raise StoreUnavailable("simulated connection lost before the answer "
                                   "(outcome unknown)")
        await node.running(inc)

    async def call(self, node, inc: int, fn, *args):
        """One autocommit statement of the lease glue: fn(*args) runs at the store."""
        await self.reach(node, inc)
        result = fn(*args)
        await self.answer(node, inc)
        return result

    # ---------------------------------------------------------------- leases (pg_leases.py)
    def acquire(self, shard: int, node_id: int, lease_ms: int) -> Optional[int]:
        row = self.rows[shard]
        owner, epoch, expires = row
        if owner is None or owner == node_id or expires is None or expires <= self.now_us:
            row[0], row[1], row[2] = node_id, epoch + 1, self.now_us + lease_ms * 1000
            self.grants[shard][row[1]] = node_id
            return row[1]
        return None

    def renew(self, node_id: int, pairs, lease_ms: int) -> set:
        done = set()
        for shard, epoch in sorted(pairs):
            row = self.rows[shard]
            if row[0] == node_id and row[1] == epoch:
                row[2] = self.now_us + lease_ms * 1000
                done.add(shard)
        return done

    def release(self, shard: int, node_id: int, epoch: int) -> bool:
        row = self.rows[shard]
        if row[0] == node_id and row[1] == epoch:
            row[0] = row[2] = None
            return True
        return False

    def heartbeat(self, node_id: int) -> None:
        self.nodes[node_id] = self.now_us

    def read(self, lease_ms: int) -> tuple:
        """-> (live node ids, [(owner, epoch, lease_left_ms | None)] by shard)."""
        now = self.now_us
        live = sorted(n for n, seen in self.nodes.items() if seen > now - lease_ms * 1000)
        rows = [(o, e, None if x is None else (x - now) // 1000)
                for o, e, x in (self.rows[i] for i in sorted(self.rows))]
        return live, rows

    # ---------------------------------------------------------------- the log's statements
    def run(self, conn, sql: str, args: tuple):
        s = _norm(sql)
        txn = conn.txn
        if s == _S_CHECK or s == _S_OWNER:
            owner, epoch, _x = self.rows.get(args[0], (None, None, None))
            return None if args[0] not in self.rows else {"owner": owner, "epoch": epoch}
        if s == _S_SELECT:
            shard, lo, hi = args
            return [(b, l_, d) for b, (l_, _e, d) in sorted(self.log[shard].items())
                    if l_ >= lo and b < hi]
        if s == _S_WRITTEN:
            shard, lo = args
            return [(b,) for b in sorted(self.log[shard]) if b >= lo]
        if s == _S_COMPACT_READ:
            shard, end = args
            return [(b, l_, e, d) for b, (l_, e, d) in sorted(self.log[shard].items())
                    if l_ < end]
        if s == _S_VACUUM:
            return "VACUUM"
        if s == _S_INSERT:
            shard, epoch, bases, lasts, datas = args
            taken = set(self.log[shard]) | {b for op in (txn or ()) if op[0] == "insert"
                                            for b in op[3]}
            for b in bases:
                if b in taken:
                    if self.on_conflict is not None:
                        self.on_conflict(conn.node.node_id, shard, b)
                    raise UniqueViolation("simulated unique violation: shard %d offset %d "
                                          "exists" % (shard, b))
            self._write(conn, ("insert", shard, epoch, list(bases), list(lasts), list(datas)))
            return "INSERT 0 %d" % len(bases)
        if s == _S_UPDATE:
            shard, bases, lasts, epochs, datas = args
            self._write(conn, ("update", shard, None, list(bases), list(lasts), list(epochs),
                               list(datas)))
            return "UPDATE %d" % len(bases)
        if s == _S_DELETE:
            shard, bases = args
            self._write(conn, ("delete", shard, None, list(bases)))
            return "DELETE %d" % len(bases)
        raise AssertionError("simulated store: unmodelled statement %r" % s[:120])

    def _write(self, conn, op) -> None:
        if conn.txn is None:
            raise AssertionError("simulated store: PgShardLog writes outside a transaction")
        conn.txn.append(op)

    def commit(self, conn) -> None:
        """Apply a transaction's writes at once (the checker sees each as it commits)."""
        ops, conn.txn = conn.txn, None
        for op in ops or ():
            kind, shard = op[0], op[1]
            if self.on_write is not None:
                self.on_write(conn.node.node_id, shard, conn.epoch_of(shard, op), kind)
            rows = self.log[shard]
            if kind == "insert":
                for b, l_, d in zip(op[3], op[4], op[5]):
                    rows[b] = (l_, op[2], d)
            elif kind == "update":
                for b, l_, e, d in zip(op[3], op[4], op[5], op[6]):
                    if b in rows:
                        rows[b] = (l_, e, d)
            else:
                for b in op[3]:
                    rows.pop(b, None)
        if ops:
            self.commits += 1

    def holds(self, node_id: int, shard: int, epoch: int) -> bool:
        """Does the node hold the shard's lease now, with nobody else granted it since
        `epoch`? (Its own later grant -- an acquire whose answer came after the node gave it
        up -- does not make the state it loaded at `epoch` stale.)"""
        owner, e, expires = self.rows[shard]
        if owner != node_id or expires is None or expires <= self.now_us or e < epoch:
            return False
        g = self.grants[shard]
        return all(g.get(x) == node_id for x in range(epoch, e + 1))

    def rows_of(self, shard: int) -> list:
        """(base_offset, last_offset, batch) of a shard's rows, in offset order."""
        return [(b, l_, d) for b, (l_, _e, d) in sorted(self.log[shard].items())]


# ====================================================================== the fake asyncpg pool
class SimPool:
    """What PgShardLog asks of an asyncpg pool: acquire() -> a connection with transaction(),
    fetchrow, fetch, execute. One per shard log (it knows the node and the epoch it writes
    with, for the checker's oracle; PostgreSQL would not need them)."""

    def __init__(self, store: SimStore, node, inc: int, epoch: int):
        self.store = store
        self.node = node
        self.inc = inc
        self.epoch = epoch

    def acquire(self):
        return _Acquire(self)


class _Acquire:
    def __init__(self, pool: SimPool):
        self.pool = pool

    async def __aenter__(self):
        p = self.pool
        if p.node.pause_at_next_write is not None and p.inc == p.node.incarnation:
            # The process stops right before its next log round trip goes out (the write a
            # zombie sends when it resumes).
            ms, p.node.pause_at_next_write = p.node.pause_at_next_write, None
            p.node.pause(ms)
        await p.store.reach(p.node, p.inc)
        return _Conn(p)

    async def __aexit__(self, et, e, tb):
        return False


class _Conn:
    def __init__(self, pool: SimPool):
        self.pool = pool
        self.store = pool.store
        self.node = pool.node
        self.txn: Optional[list] = None
        self.used = False             # a statement ran since the round trip began

    def epoch_of(self, shard: int, op) -> int:
        return op[2] if op[2] is not None else self.pool.epoch

    def transaction(self, **_kw):
        return _Txn(self)

    async def _stmt(self, sql, args):
        if self.used and self.txn is None:
            # A second autocommit statement on one connection: another round trip.
            await self.store.reach(self.node, self.pool.inc)
        result = self.store.run(self, sql, args)
        if self.txn is None:
            self.used = True
            await self.store.answer(self.node, self.pool.inc, lose_ok=False)
        return result

    async def fetchrow(self, sql, *args):
        return await self._stmt(sql, args)

    async def fetch(self, sql, *args):
        return await self._stmt(sql, args)

    async def execute(self, sql, *args):
        return await self._stmt(sql, args)


class _Txn:
    def __init__(self, conn: _Conn):
        self.conn = conn

    async def __aenter__(self):
        c = self.conn
        if c.used:
            await c.store.reach(c.node, c.pool.inc)
        c.txn = []
        return self

    async def __aexit__(self, et, e, tb):
        c = self.conn
        c.used = True
        if et is not None:
            c.txn = None                # rolled back: nothing of it happened
            return False
        c.store.commit(c)
        await c.store.answer(c.node, c.pool.inc)
        return False
