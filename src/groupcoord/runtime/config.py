"""Runtime settings: where the logs live, how they are written, how the shards are laid out."""
from __future__ import annotations

import msgspec

from groupcoord.groups.config import ShardConfig

__all__ = ["RuntimeConfig", "FSYNC_POLICIES"]

FSYNC_POLICIES = ("always", "unsafe-no-fsync")


class RuntimeConfig(msgspec.Struct, frozen=True, kw_only=True):
    data_dir: str = "./groupcoord-data"
    # Like Kafka's offsets.topic.num.partitions: groups hash onto this many shards, each
    # with its own log directory (<data_dir>/__consumer_offsets-<n>).
    shards: int = 50
    # "always": every group commit is fdatasync'ed before its requests are answered.
    # "unsafe-no-fsync": written but not synced (benchmarks only; loses data on power loss).
    fsync: str = "always"
    segment_bytes: int = 64 << 20
    # Compaction of a shard's closed segments starts when at least this many bytes were
    # written to them since the last compaction and they are at least this dirty (Kafka's
    # log.cleaner.min.cleanable.ratio; here the ratio of new bytes to all closed bytes).
    compact_min_dirty_bytes: int = 16 << 20
    compact_min_dirty_ratio: float = 0.5
    # Tombstones older than this are dropped by compaction (Kafka's delete.retention.ms).
    tombstone_retention_ms: int = 24 * 3600 * 1000
    # Threads for log writes (write + fdatasync, one group commit per shard at a time) and
    # for assignor runs taken off the event loop.
    io_threads: int = 8
    assignor_threads: int = 1
    # Server-side assignor runs over at least this many partitions run in a worker thread
    # (unless shard_config sets its own consumer_assignor_offload_partitions).
    offload_partitions: int = 100_000
    # A failed shard (a log write, fsync or segment roll error) reloads from its log after
    # reload_backoff_ms; each further failure with no successful write in between doubles
    # the pause, up to reload_backoff_max_ms (or reload_backoff_ms if larger): a persistent
    # fault such as a full disk then costs one reload per interval, not one per second. A
    # failed compaction is retried on the same schedule.
    reload_backoff_ms: int = 1_000
    reload_backoff_max_ms: int = 30_000
    shard_config: ShardConfig = ShardConfig()

    def __post_init__(self):
        if self.shards < 1:
            raise ValueError("shards must be >= 1")
        if self.fsync not in FSYNC_POLICIES:
            raise ValueError("fsync must be one of %s" % (FSYNC_POLICIES,))
        if self.reload_backoff_ms < 0 or self.reload_backoff_max_ms < 0:
            raise ValueError("reload_backoff_ms and reload_backoff_max_ms must be >= 0")
