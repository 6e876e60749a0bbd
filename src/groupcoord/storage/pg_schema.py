"""The PostgreSQL schema of cluster mode (docs/cluster.md), created and upgraded by versioned
migrations.

Tables (version 1):

    groupcoord_schema_version(version int PRIMARY KEY,
                              applied_at timestamptz NOT NULL DEFAULT now())
        one row per migration applied
    groupcoord_nodes(node_id int PRIMARY KEY, host text NOT NULL, port int NOT NULL,
                     started_at timestamptz NOT NULL, last_seen timestamptz NOT NULL)
        the nodes of the cluster and their heartbeats
    groupcoord_shards(shard int PRIMARY KEY, owner int NULL, epoch bigint NOT NULL DEFAULT 0,
                      lease_expires timestamptz NULL)
        one row per shard 0..shards-1 (made here with owner NULL); the epoch grows by one at
        every acquisition and every write checks it under a row lock (fencing)
    groupcoord_log(shard int NOT NULL, base_offset bigint NOT NULL, last_offset bigint NOT NULL,
                   epoch bigint NOT NULL, batch bytea NOT NULL,
                   PRIMARY KEY (shard, base_offset))
        a shard's log: one RecordBatch v2 per row, the bytes storage/batch.py encodes for the
        file segments (storage/pg_log.py); epoch: the shard epoch of the writer

Version 2 adds:

    groupcoord_catalog(id int PRIMARY KEY CHECK (id = 1), version bigint NOT NULL,
                       body bytea NOT NULL)
        the cluster's one topic catalog (server/catalog.py PgCatalogStore): body is the JSON
        a single node keeps in topics.json ({"version": 1, "topics": [...], "given": [...]});
        version grows by one at every change, and a change is stored only if the version is
        still the one its writer read (compare-and-set). The row is made here, empty, at 0.

Version 3 adds:

    groupcoord_security(base_offset bigint PRIMARY KEY, last_offset bigint NOT NULL,
                        batch bytea NOT NULL, appended_at timestamptz NOT NULL DEFAULT now())
        the users' SCRAM credentials and the ACLs (security/store.py PgSecurityStore): one
        RecordBatch v2 of security records (security/records.py) per append, the bytes
        storage/batch.py encodes, its records at offsets base_offset..last_offset. Appends
        are serialised by a lock on the table, so offsets grow in commit order and a reader
        that saw offset n has seen everything below it.

Version 4 adds (independent of version 3: one column, added if missing):

    groupcoord_nodes.incarnation text NULL
        a random token of the process that holds the node id (cluster/pg_leases.py): a node
        takes its id's row only if the row is its own or not seen within the lease, and its
        heartbeat renews only a row of its incarnation, so two processes started with one
        --node-id are found (cluster/node.py). NULL: a row written before version 4.

Version 5 adds (one column, added if missing):

    groupcoord_nodes.endpoints text NULL
        the node's listeners as JSON, {"PLAINTEXT": [host, port], "SASL_SSL": [host, port]}
        (server/listeners.py), so that a node tells each client the other nodes' addresses
        on the listener the client came in on. NULL: one listener, host and port above.

    await migrate(conn, shards)     # idempotent; safe when several nodes start at once

Every migration runs in one transaction under a transaction-level advisory lock, so nodes
starting together apply each version once (the others wait, then find it applied) and a
failure leaves the previous version whole (PostgreSQL's DDL is transactional).
"""
from __future__ import annotations

from typing import Optional

__all__ = ["SCHEMA_VERSION", "MIGRATIONS", "migrate", "SchemaError"]

# pg_advisory_xact_lock key of the migration ("gcschema" as 8 bytes): any constant that no
# other application sharing the database uses.
MIGRATION_LOCK = int.from_bytes(b"gcschema", "big") & ((1 << 63) - 1)

# version -> its statements; append a version, never edit one that was released.
MIGRATIONS = {
    1: (
        """CREATE TABLE groupcoord_nodes (
               node_id int PRIMARY KEY,
               host text NOT NULL,
               port int NOT NULL,
               started_at timestamptz NOT NULL,
               last_seen timestamptz NOT NULL)""",
        """CREATE TABLE groupcoord_shards (
               shard int PRIMARY KEY,
               owner int NULL,
               epoch bigint NOT NULL DEFAULT 0,
               lease_expires timestamptz NULL)""",
        # Compaction updates and deletes rows all the time (a steady commit load rewrites the
        # same keys): vacuum this table after far fewer dead rows than the 20% default, so
        # that its size stays bounded (storage/pg_log.py also vacuums after its compactions).
        # No truncation by vacuum: it takes an ACCESS EXCLUSIVE lock that would hold appends;
        # the freed space is reused instead.
        """CREATE TABLE groupcoord_log (
               shard int NOT NULL,
               base_offset bigint NOT NULL,
               last_offset bigint NOT NULL,
               epoch bigint NOT NULL,
               batch bytea NOT NULL,
               PRIMARY KEY (shard, base_offset))
           WITH (autovacuum_vacuum_scale_factor = 0.01, autovacuum_vacuum_threshold = 1000,
                 autovacuum_vacuum_cost_delay = 0, vacuum_truncate = false)""",
    ),
    2: (
        """CREATE TABLE groupcoord_catalog (
               id int PRIMARY KEY CHECK (id = 1),
               version bigint NOT NULL,
               body bytea NOT NULL)""",
        """INSERT INTO groupcoord_catalog (id, version, body)
           VALUES (1, 0, convert_to('{"version":1,"topics":[],"given":[]}', 'UTF8'))""",
    ),
    3: (
        """CREATE TABLE groupcoord_security (
               base_offset bigint PRIMARY KEY,
               last_offset bigint NOT NULL,
               batch bytea NOT NULL,
               appended_at timestamptz NOT NULL DEFAULT now())""",
    ),
    4: (
        "ALTER TABLE groupcoord_nodes ADD COLUMN IF NOT EXISTS incarnation text NULL",
    ),
    5: (
        "ALTER TABLE groupcoord_nodes ADD COLUMN IF NOT EXISTS endpoints text NULL",
    ),
}
SCHEMA_VERSION = max(MIGRATIONS)


class SchemaError(RuntimeError):
    """The database holds a schema this node cannot use: a newer version, or another shard
    count (the hash of a group id to its shard must be the same on every node)."""


async def migrate(conn, shards: Optional[int]) -> int:
    """Bring the schema to SCHEMA_VERSION and make sure the rows of shards 0..shards-1 exist
    (``conn``: an asyncpg connection, not inside a transaction). -> the version before.
    SchemaError when the database is newer than this code or was made with another number
    of shards. shards None: the tables only, no shard row is made or checked (`groupcoord
    users` before a node's first start: that node makes the rows with its --shards)."""
    if shards is not None and shards < 1:
        raise ValueError("shards must be at least 1")
    async with conn.transaction():
        # Serializes concurrent migrators; released at COMMIT/ROLLBACK.
        await conn.execute("SELECT pg_advisory_xact_lock($1)", MIGRATION_LOCK)
        await conn.execute(
            "CREATE TABLE IF NOT EXISTS groupcoord_schema_version ("
            " version int PRIMARY KEY,"
            " applied_at timestamptz NOT NULL DEFAULT now())")
        before = await conn.fetchval(
            "SELECT coalesce(max(version), 0) FROM groupcoord_schema_version")
        if before > SCHEMA_VERSION:
            raise SchemaError("the database's groupcoord schema is version %d; this node "
                              "knows up to %d: upgrade the node" % (before, SCHEMA_VERSION))
        for version in sorted(MIGRATIONS):
            if version <= before:
                continue
            for statement in MIGRATIONS[version]:
                await conn.execute(statement)
            await conn.execute("INSERT INTO groupcoord_schema_version (version) VALUES ($1)",
                               version)
        if shards is None:
            return before
        have = await conn.fetchval("SELECT count(*) FROM groupcoord_shards")
        beyond = await conn.fetchval("SELECT count(*) FROM groupcoord_shards WHERE shard >= $1",
                                     shards)
        if beyond or (have and have != shards):
            raise SchemaError("the cluster's store has %d shards, this node was started with "
                              "%d: every node must use the same number" % (have, shards))
        await conn.execute(
            "INSERT INTO groupcoord_shards (shard) SELECT generate_series(0, $1 - 1)"
            " ON CONFLICT (shard) DO NOTHING", shards)
    return before
