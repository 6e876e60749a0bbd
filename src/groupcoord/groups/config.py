"""Shard configuration (Kafka's broker-side group settings, same names and defaults)."""
from __future__ import annotations

import msgspec

__all__ = ["ShardConfig", "KAFKA_UNITS"]

# Fields Kafka sets in another unit, under another name: field -> (Kafka's name, ms per unit).
KAFKA_UNITS = {"offsets_retention_ms": ("offsets.retention.minutes", 60_000)}


class ShardConfig(msgspec.Struct, frozen=True, kw_only=True):
    # classic groups (group.*)
    group_min_session_timeout_ms: int = 6_000
    group_max_session_timeout_ms: int = 1_800_000
    group_initial_rebalance_delay_ms: int = 3_000
    group_max_size: int = 2**31 - 1
    # consumer groups (group.consumer.*)
    consumer_session_timeout_ms: int = 45_000
    consumer_heartbeat_interval_ms: int = 5_000
    consumer_max_size: int = 2**31 - 1
    # The bounds of a group's own consumer.session.timeout.ms / consumer.heartbeat.interval.ms
    # (IncrementalAlterConfigs on a GROUP resource, admin.py). Kafka also refuses to start
    # when the two settings above lie outside them; here they widen the bounds instead
    # (group_config.py), so short test and demo intervals keep working.
    consumer_min_session_timeout_ms: int = 45_000
    consumer_max_session_timeout_ms: int = 60_000
    consumer_min_heartbeat_interval_ms: int = 5_000
    consumer_max_heartbeat_interval_ms: int = 15_000
    consumer_assignors: tuple = ("uniform", "range")     # first = default
    # Assignor runs over at least this many partitions are handed to the runtime to run off
    # the event loop (Result.offload); 0 = always run inline (pure tests, simulations).
    consumer_assignor_offload_partitions: int = 0
    # KIP-1263 assignment batching: after a target assignment is computed, the next one waits
    # until this much time has passed; epoch bumps meanwhile (a join storm) share one run.
    # 0 = compute at every epoch bump (Kafka before KIP-1263; the pure protocol tests).
    consumer_assignment_interval_ms: int = 1_000
    # connect groups (this project's; named like the consumer ones)
    connect_session_timeout_ms: int = 45_000
    connect_heartbeat_interval_ms: int = 3_000
    connect_max_size: int = 2**31 - 1
    # offsets retention (offsets.py): Kafka's offsets.retention.minutes (7 days; set in
    # minutes under that name, in ms under this field's name) and
    # offsets.retention.check.interval.ms (10 min)
    offsets_retention_ms: int = 7 * 24 * 3600 * 1000
    offsets_retention_check_interval_ms: int = 600_000
    offset_metadata_max_bytes: int = 4096          # Kafka's offset.metadata.max.bytes
    # Limits on what one request may make a shard store (groups/limits.py).
    # Kafka's message.max.bytes (1 MiB + 12): the largest record a write may produce, and the
    # largest batch of records one OffsetCommit may produce.
    message_max_bytes: int = 1_048_588
    # Groups one shard holds; a request that would create one more is refused (this
    # project's; Kafka has no such bound).
    shard_max_groups: int = 100_000
    # Bytes (UTF-8) of a group id, member id, instance id, client id and host, rack, assignor,
    # protocol and connector name, worker URL, subscription regex (this project's; Kafka
    # bounds none of them, a record field holds 32,767).
    name_max_bytes: int = 1024

    def __post_init__(self):
        if not 1 <= self.name_max_bytes <= NAME_MAX_BYTES_CEILING:
            raise ValueError("name.max.bytes must be 1..%d (a record field holds 32,767 bytes "
                             "and a classic member id adds 37 to the client id)"
                             % NAME_MAX_BYTES_CEILING)
        for f in ("message_max_bytes", "shard_max_groups"):
            if getattr(self, f) < 0:
                raise ValueError("%s must be >= 0" % f.replace("_", "."))
        if self.offsets_retention_ms < 1:
            raise ValueError("offsets.retention.minutes must be >= 1 (offsets_retention_ms "
                             ">= 1 ms)")
        for lo, hi in (("consumer_min_session_timeout_ms", "consumer_max_session_timeout_ms"),
                       ("consumer_min_heartbeat_interval_ms",
                        "consumer_max_heartbeat_interval_ms")):
            if not 1 <= getattr(self, lo) <= getattr(self, hi):
                raise ValueError("group.%s must be >= 1 and <= group.%s"
                                 % (lo.replace("_", "."), hi.replace("_", ".")))
        if self.offsets_retention_check_interval_ms < 1:
            raise ValueError("offsets.retention.check.interval.ms must be >= 1")
        if not 0 <= self.offset_metadata_max_bytes <= 32_767:
            raise ValueError("offset.metadata.max.bytes must be 0..32767 (what the metadata "
                             "field of an offset record holds)")


# Keeps every bounded string (and a classic member id: client id + "-" + a UUID) within the
# int16 length of a record's string field.
NAME_MAX_BYTES_CEILING = 16_384
