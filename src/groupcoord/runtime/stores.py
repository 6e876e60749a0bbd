"""Where a node's shard logs live: the store a ShardSet opens its shards' logs in.

FileStore(data_dir)    the embedded default (`--store file:DIR`): shard n's log is the
                       directory <DIR>/__consumer_offsets-<n> (storage/log.py), written by
                       this process only.
PgStore(pool, node_id) cluster mode (`--store postgresql://...`): shard n's log is its rows of
                       groupcoord_log (storage/pg_log.py), written only by the node that holds
                       the shard's lease at the epoch it loaded with (the append checks it).

A ShardRuntime asks its store for a log when it loads; the write path is the same for both,
except that a PostgreSQL group commit is one awaited transaction on the loop (no I/O thread)
and a refused append (the lease is gone) unloads the shard instead of reloading it.
"""
from __future__ import annotations

import os

from groupcoord.storage.pg_log import PgShardLog

__all__ = ["FileStore", "PgStore"]


class FileStore:
    kind = "file"

    def __init__(self, data_dir: str):
        self.data_dir = data_dir

    def where(self, index: int) -> str:
        return os.path.join(self.data_dir, "__consumer_offsets-%d" % index)

    def __str__(self) -> str:
        return self.data_dir


class PgStore:
    kind = "postgresql"

    def __init__(self, pool, node_id: int, *, name: str = "postgresql"):
        # pool: an asyncpg Pool shared by every shard of the node (and its lease glue).
        self.pool = pool
        self.node_id = node_id
        self.name = name

    def where(self, index: int) -> str:
        return "%s shard %d" % (self.name, index)

    def open(self, index: int, epoch: int, clock) -> PgShardLog:
        return PgShardLog(self.pool, index, self.node_id, epoch, clock=clock)

    def __str__(self) -> str:
        return self.name
