"""What every group type provides to the shard (classic.py, consumer.py, connect.py).

A group object holds state and is changed only by its module's replay functions. Handlers
read it. Every group type implements this interface; the shard uses it for ListGroups,
DescribeGroups, offset validation, timers after load, and the tests' invariants.
"""
from __future__ import annotations

from typing import Optional

__all__ = ["Group"]


class Group:
    TYPE: str = ""            # "classic" | "consumer" | "connect" (ListGroups' GroupType)
    group_id: str

    # ---- listing / describing
    def state_name(self) -> str:
        """Kafka's state names: classic Empty/PreparingRebalance/CompletingRebalance/Stable/
        Dead; consumer and connect Empty/Assigning/Reconciling/Stable/Dead."""
        raise NotImplementedError

    def protocol_type(self) -> str:
        """ListGroups' ProtocolType: the classic protocol type, "consumer" for consumer
        groups, "connect" for connect groups."""
        raise NotImplementedError

    def is_empty(self) -> bool:
        raise NotImplementedError

    def describe_classic(self):
        """A DescribeGroupsResponseDescribedGroup (every group type answers DescribeGroups;
        consumer/connect groups describe themselves in classic terms as Kafka does)."""
        raise NotImplementedError

    # ---- offsets
    def validate_offset_commit(self, member_id: str, instance_id: Optional[str],
                               generation_or_epoch: int, version: int) -> int:
        """ErrorCode value (0 = accept) for an OffsetCommit from this member."""
        raise NotImplementedError

    def validate_offset_fetch(self, member_id: Optional[str], member_epoch: int) -> int:
        """ErrorCode value (0 = accept) for an OffsetFetch naming a member (v9+)."""
        return 0

    # ---- runtime and tests
    def rearm(self, now_ms: int) -> list:
        """Timer operations to re-create after loading from the log."""
        return []

    def snapshot(self, durable: bool) -> object:
        """Plain, comparable data in external identities (member ids, topic ids, names).
        durable=True: only what the log restores (what recovery must reproduce exactly);
        durable=False: everything, including volatile in-memory state (used to check that
        handlers do not mutate)."""
        raise NotImplementedError

    def held_units(self) -> Optional[dict]:
        """member id -> iterable of units currently held (assigned or pending revocation);
        None for groups whose assignments the coordinator cannot see (classic)."""
        return None
