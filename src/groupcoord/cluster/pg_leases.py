"""Shard leases and the node registry in PostgreSQL (asyncpg), over schema version 1
(storage/pg_schema.py creates it):

    groupcoord_nodes(node_id int PRIMARY KEY, host text, port int,
                     started_at timestamptz, last_seen timestamptz)
    groupcoord_shards(shard int PRIMARY KEY, owner int NULL, epoch bigint NOT NULL DEFAULT 0,
                      lease_expires timestamptz NULL)

One row per shard; ``epoch`` grows by one at every grant and is never reset (a release keeps
it), so an (owner, epoch) pair names one tenure. Every expiry decision uses the database's
clock, ``clock_timestamp()`` (the time of the statement, not of its transaction), so nodes'
clocks never have to agree: a node only measures its own deadline from when it sent the call
(cluster/leases.py). Writes are fenced elsewhere: the log append checks owner and epoch under a
row lock in its own transaction.

Each operation is one statement (autocommit), so a race between nodes is settled by the row
lock: the loser's UPDATE re-reads the winner's row and no longer matches. ``db`` is an asyncpg
Connection or Pool. Errors (connection lost, server down) are raised as asyncpg or OS errors;
the caller reports them to the lease machine as a failed call and retries.
"""
from __future__ import annotations

from typing import Iterable, List, NamedTuple, Optional, Set, Tuple

__all__ = ["PgLeases", "NodeRow", "ShardRow", "read_nodes", "read_shards", "missing_tables",
           "TABLES"]

TABLES = ("groupcoord_schema_version", "groupcoord_nodes", "groupcoord_shards")

_MS = "$%d::bigint * interval '1 millisecond'"

_ACQUIRE = """
UPDATE groupcoord_shards
   SET owner = $2, epoch = epoch + 1, lease_expires = clock_timestamp() + """ + _MS % 3 + """
 WHERE shard = $1
   AND (owner IS NULL OR owner = $2 OR lease_expires IS NULL
        OR lease_expires <= clock_timestamp())
RETURNING epoch"""

# Lock the rows in shard order first: two renewals over overlapping shards (stale views of two
# nodes) then wait for each other instead of deadlocking.
_RENEW = """
WITH mine AS (
  SELECT s.shard
    FROM groupcoord_shards AS s
    JOIN unnest($3::int[], $4::bigint[]) AS r(shard, epoch)
      ON s.shard = r.shard AND s.epoch = r.epoch
   WHERE s.owner = $1
   ORDER BY s.shard
     FOR UPDATE OF s)
UPDATE groupcoord_shards AS s
   SET lease_expires = clock_timestamp() + """ + _MS % 2 + """
  FROM mine
 WHERE s.shard = mine.shard
RETURNING s.shard"""

_RELEASE = """
UPDATE groupcoord_shards SET owner = NULL, lease_expires = NULL
 WHERE shard = $1 AND owner = $2 AND epoch = $3"""

# register: a (re)start sets started_at; heartbeat keeps it (and re-creates a deleted row).
_UPSERT_NODE = """
INSERT INTO groupcoord_nodes (node_id, host, port, started_at, last_seen)
VALUES ($1, $2, $3, clock_timestamp(), clock_timestamp())
ON CONFLICT (node_id) DO UPDATE
   SET host = EXCLUDED.host, port = EXCLUDED.port, last_seen = EXCLUDED.last_seen%s"""
_REGISTER = _UPSERT_NODE % ", started_at = EXCLUDED.started_at"
_HEARTBEAT = _UPSERT_NODE % ""

_NODES = """
SELECT node_id, host, port, started_at, last_seen,
       (extract(epoch FROM clock_timestamp() - last_seen) * 1000)::bigint AS seen_ms_ago,
       last_seen > clock_timestamp() - """ + _MS % 1 + """ AS live
  FROM groupcoord_nodes
 ORDER BY node_id"""

_SHARDS = """
SELECT shard, owner, epoch,
       (extract(epoch FROM lease_expires - clock_timestamp()) * 1000)::bigint AS lease_left_ms
  FROM groupcoord_shards
 ORDER BY shard"""


class NodeRow(NamedTuple):
    node_id: int
    host: str
    port: int
    started_at: object          # datetime (timezone-aware)
    last_seen: object
    seen_ms_ago: int            # by the database's clock
    live: bool                  # seen within the lease


class ShardRow(NamedTuple):
    shard: int
    owner: Optional[int]
    epoch: int
    lease_left_ms: Optional[int]    # negative: expired; None: released or never owned


async def read_nodes(db, lease_ms: int) -> List[NodeRow]:
    return [NodeRow(*r) for r in await db.fetch(_NODES, lease_ms)]


async def read_shards(db) -> List[ShardRow]:
    return [ShardRow(*r) for r in await db.fetch(_SHARDS)]


async def missing_tables(db) -> List[str]:
    """The tables of the schema this module needs that the database does not have."""
    found = await db.fetch("SELECT t, to_regclass(t) IS NOT NULL FROM unnest($1::text[]) AS t",
                           list(TABLES))
    return [t for t, present in found if not present]


class PgLeases:
    """One node's lease operations. lease_ms is the lease every grant and renewal sets."""

    def __init__(self, db, node_id: int, lease_ms: int, host: str = "", port: int = 0):
        if node_id <= 0:
            raise ValueError("node_id must be a positive integer, got %d" % node_id)
        if lease_ms <= 0:
            raise ValueError("lease_ms must be positive, got %d" % lease_ms)
        self.db = db
        self.node_id = node_id
        self.lease_ms = lease_ms
        self.host = host
        self.port = port

    async def register(self) -> None:
        """Upsert this node's row at start: address, started_at and last_seen = now."""
        await self.db.execute(_REGISTER, self.node_id, self.host, self.port)

    async def heartbeat(self) -> None:
        """last_seen = now (the node stays in live_nodes for one lease after this)."""
        await self.db.execute(_HEARTBEAT, self.node_id, self.host, self.port)

    async def live_nodes(self) -> List[Tuple[int, str, int]]:
        """(node_id, host, port) of every node seen within the lease, by node id."""
        return [(r.node_id, r.host, r.port) for r in await read_nodes(self.db, self.lease_ms)
                if r.live]

    async def acquire(self, shard: int) -> Optional[int]:
        """Take the shard if it is free (no owner, or its lease expired by the database's
        clock) or already ours: the new epoch (old + 1), else None."""
        return await self.db.fetchval(_ACQUIRE, shard, self.node_id, self.lease_ms)

    async def renew(self, epochs: Iterable[Tuple[int, int]]) -> Set[int]:
        """Extend the leases of the (shard, epoch) pairs that are still ours at that epoch;
        the shards renewed. A shard missing from the answer is lost at that epoch for good."""
        pairs = sorted(epochs)
        if not pairs:
            return set()
        rows = await self.db.fetch(_RENEW, self.node_id, self.lease_ms,
                                   [s for s, _ in pairs], [e for _, e in pairs])
        return {r[0] for r in rows}

    async def release(self, shard: int, epoch: int) -> bool:
        """Graceful hand-off: no owner, no expiry, epoch kept (the next grant is epoch + 1).
        False when the shard was no longer ours at that epoch."""
        status = await self.db.execute(_RELEASE, shard, self.node_id, epoch)
        return status.endswith(" 1")

    async def shards(self) -> List[ShardRow]:
        return await read_shards(self.db)
