"""Shard configuration (Kafka's broker-side group settings, same names and defaults)."""
from __future__ import annotations

import msgspec

__all__ = ["ShardConfig"]


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
    # offsets
    offsets_retention_ms: int = 7 * 24 * 3600 * 1000
