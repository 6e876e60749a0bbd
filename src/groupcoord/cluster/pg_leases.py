"""Shard leases and the node registry in PostgreSQL (asyncpg), over schema version 1 and
version 4's incarnation column (storage/pg_schema.py creates them):

    groupcoord_nodes(node_id int PRIMARY KEY, host text, port int,
                     started_at timestamptz, last_seen timestamptz, incarnation text NULL)
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

A node id belongs to one process at a time, its **incarnation** (a random token per PgLeases):
``register`` takes the id's row only if the row is this incarnation's, or was not seen within
the lease (the process that held it died or left), else it answers the holder's row; the
heartbeat renews only a row of this incarnation and says when another one holds it. The node
id is also the shards' owner, so two processes with one id would share their leases: the
check keeps the second one out (cluster/node.py decides what to do about it).
"""
from __future__ import annotations

import json
import secrets
from typing import Iterable, List, NamedTuple, Optional, Set, Tuple

__all__ = ["PgLeases", "NodeRow", "ShardRow", "IdHolder", "read_nodes", "read_shards",
           "missing_tables", "TABLES"]

TABLES = ("groupcoord_schema_version", "groupcoord_nodes", "groupcoord_shards")

_MS = "$%d::bigint * interval '1 millisecond'"

# The last condition: never while another incarnation holds this node id's row. Two
# processes with one id would otherwise take each other's shards (owner = $2 is "ours"): a
# displaced process that wakes up and acquires before its heartbeat finds its row taken
# (tests/test_cluster_node.py, the node whose id another process took).
_ACQUIRE = """
UPDATE groupcoord_shards
   SET owner = $2, epoch = epoch + 1, lease_expires = clock_timestamp() + """ + _MS % 3 + """
 WHERE shard = $1
   AND (owner IS NULL OR owner = $2 OR lease_expires IS NULL
        OR lease_expires <= clock_timestamp())
   AND NOT EXISTS (SELECT 1 FROM groupcoord_nodes AS n
                    WHERE n.node_id = $2 AND n.incarnation IS NOT NULL
                      AND n.incarnation <> $4)
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

# register: a (re)start sets started_at and takes the row if it is free (its own, or not seen
# within the lease $5); heartbeat keeps started_at, renews only its own incarnation's row (and
# re-creates a deleted one). No row returned: another incarnation holds the id.
_UPSERT_NODE = """
INSERT INTO groupcoord_nodes (node_id, host, port, started_at, last_seen, incarnation,
                              endpoints)
VALUES ($1, $2, $3, clock_timestamp(), clock_timestamp(), $4, $5)
ON CONFLICT (node_id) DO UPDATE
   SET host = EXCLUDED.host, port = EXCLUDED.port, last_seen = EXCLUDED.last_seen,
       endpoints = EXCLUDED.endpoints%s
 WHERE groupcoord_nodes.incarnation = EXCLUDED.incarnation%s
RETURNING node_id"""
_REGISTER = _UPSERT_NODE % (
    ", started_at = EXCLUDED.started_at, incarnation = EXCLUDED.incarnation",
    "\n    OR groupcoord_nodes.last_seen <= clock_timestamp() - " + _MS % 6)
_HEARTBEAT = _UPSERT_NODE % ("", "")

_HOLDER = """
SELECT host, port, incarnation, started_at, last_seen,
       (extract(epoch FROM clock_timestamp() - last_seen) * 1000)::bigint AS seen_ms_ago
  FROM groupcoord_nodes
 WHERE node_id = $1"""

_LEAVE = "DELETE FROM groupcoord_nodes WHERE node_id = $1 AND incarnation = $2"

_NODES = """
SELECT node_id, host, port, started_at, last_seen,
       (extract(epoch FROM clock_timestamp() - last_seen) * 1000)::bigint AS seen_ms_ago,
       last_seen > clock_timestamp() - """ + _MS % 1 + """ AS live, endpoints
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
    endpoints: Optional[str] = None     # JSON {listener: [host, port]} (schema v5)

    def listeners(self) -> dict:
        """{listener name: (host, port)}; {} for a node with one listener (or unreadable
        JSON: the row's host and port then stand for every listener)."""
        if not self.endpoints:
            return {}
        try:
            return {k: (str(v[0]), int(v[1])) for k, v in json.loads(self.endpoints).items()}
        except (ValueError, TypeError, IndexError, AttributeError):
            return {}


class IdHolder(NamedTuple):
    """The row of a node id as another incarnation left it."""
    host: str
    port: int
    incarnation: Optional[str]  # None: written by a node older than schema version 4
    started_at: object          # datetime (timezone-aware)
    last_seen: object
    seen_ms_ago: int            # by the database's clock


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

    def __init__(self, db, node_id: int, lease_ms: int, host: str = "", port: int = 0,
                 endpoints: Optional[dict] = None):
        if node_id <= 0:
            raise ValueError("node_id must be a positive integer, got %d" % node_id)
        if lease_ms <= 0:
            raise ValueError("lease_ms must be positive, got %d" % lease_ms)
        self.db = db
        self.node_id = node_id
        self.lease_ms = lease_ms
        self.host = host
        self.port = port
        self.incarnation = secrets.token_hex(8)
        # {listener: (host, port)} when the node has several listeners (NodeRow.listeners).
        self.endpoints = (json.dumps({k: [h, p] for k, (h, p) in sorted(endpoints.items())})
                          if endpoints else None)

    async def register(self) -> Optional[IdHolder]:
        """Take this node id's row at start (address, started_at and last_seen = now, this
        incarnation) if it is ours or not seen within the lease: None. Else the row of the
        other incarnation that holds the id."""
        while True:
            if await self.db.fetchval(_REGISTER, self.node_id, self.host, self.port,
                                      self.incarnation, self.endpoints,
                                      self.lease_ms) is not None:
                return None
            holder = await self.holder()
            if holder is not None:
                return holder
            # Deleted between the two statements (its node left): try again.

    async def heartbeat(self) -> bool:
        """last_seen = now (the node stays in live_nodes for one lease after this). False:
        the row belongs to another incarnation now (nothing was written)."""
        return await self.db.fetchval(_HEARTBEAT, self.node_id, self.host, self.port,
                                      self.incarnation, self.endpoints) is not None

    async def holder(self) -> Optional[IdHolder]:
        """This node id's row as it is now (None: there is none)."""
        rows = await self.db.fetch(_HOLDER, self.node_id)
        return IdHolder(*rows[0]) if rows else None

    async def leave(self) -> None:
        """Delete this node's row, if it is still this incarnation's: the others drop it from
        the live nodes at once instead of a lease later."""
        await self.db.execute(_LEAVE, self.node_id, self.incarnation)

    async def live_nodes(self) -> List[Tuple[int, str, int]]:
        """(node_id, host, port) of every node seen within the lease, by node id."""
        return [(r.node_id, r.host, r.port) for r in await self.live_rows()]

    async def live_rows(self) -> List[NodeRow]:
        """The rows of every node seen within the lease, by node id."""
        return [r for r in await read_nodes(self.db, self.lease_ms) if r.live]

    async def acquire(self, shard: int) -> Optional[int]:
        """Take the shard if it is free (no owner, or its lease expired by the database's
        clock) or already ours: the new epoch (old + 1), else None."""
        return await self.db.fetchval(_ACQUIRE, shard, self.node_id, self.lease_ms,
                                      self.incarnation)

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
