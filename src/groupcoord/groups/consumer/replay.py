"""Consumer groups' replayers: the only code that changes a ConsumerGroup (registry.py maps
each record type to one of them; recovery runs the same)."""
from __future__ import annotations

from typing import Optional

from groupcoord.groups import group_config
from groupcoord.groups.classic.group import is_offsets_only
from groupcoord.groups.consumer.group import ConsumerGroup
from groupcoord.groups.modern.reconcile import NEW_MEMBER, MemberAssignment


def _group(shard, group_id: str, create: bool) -> Optional[ConsumerGroup]:
    g = shard.groups.get(group_id)
    if create and (g is None or is_offsets_only(g)):
        g = shard.groups[group_id] = ConsumerGroup(group_id, shard.config)
        g.session_ms = group_config.consumer_session_ms(shard, group_id)   # for rearm
    return g if isinstance(g, ConsumerGroup) else None


def _replay_group_metadata(shard, key, value) -> None:
    if value is None:
        if isinstance(shard.groups.get(key.group_id), ConsumerGroup):
            del shard.groups[key.group_id]
        return
    g = _group(shard, key.group_id, True)
    if g is not None:
        g.epoch = value.epoch


def _replay_partition_metadata(shard, key, value) -> None:
    g = _group(shard, key.group_id, value is not None)
    if g is not None:
        g.topic_meta = {} if value is None else {
            t.topic_name: (t.topic_id, t.num_partitions) for t in value.topics}


def _replay_member_metadata(shard, key, value) -> None:
    g = _group(shard, key.group_id, value is not None)
    if g is None:
        return
    if value is None:
        g.remove(key.member_id)
    else:
        g.set_meta(key.member_id, value)


def _replay_target_member(shard, key, value) -> None:
    g = _group(shard, key.group_id, value is not None)
    if g is None:
        return
    if value is None:
        g.targets.pop(key.member_id, None)
    else:
        g.targets[key.member_id] = g.units_of(value.topic_partitions)


def _replay_target_metadata(shard, key, value) -> None:
    g = _group(shard, key.group_id, value is not None)
    if g is not None:
        g.target_epoch = 0 if value is None else value.assignment_epoch
        g.recount()


def _replay_current_assignment(shard, key, value) -> None:
    g = _group(shard, key.group_id, value is not None)
    if g is None:
        return
    if value is None:
        if key.member_id in g.members:
            g.set_assignment(key.member_id, NEW_MEMBER)
        return
    g.set_assignment(key.member_id, MemberAssignment(
        value.member_epoch, value.previous_member_epoch, value.state,
        g.units_of(value.assigned_partitions), g.units_of(value.partitions_pending_revocation)))
