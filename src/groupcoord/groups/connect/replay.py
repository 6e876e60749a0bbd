"""Connect groups' replayers: the only code that changes a ConnectGroup (registry.py maps each
record type and volatile event to one of them; recovery runs the same)."""
from __future__ import annotations


from groupcoord.groups.classic.group import is_offsets_only
from groupcoord.groups.connect.group import ConnectGroup, TargetEntry
from groupcoord.groups.modern import reconcile as rc
from groupcoord.protocol import messages as m


def _group(shard, gid: str) -> ConnectGroup:
    g = shard.groups.get(gid)
    if g is None or is_offsets_only(g):
        g = shard.groups[gid] = ConnectGroup(gid)
        g.session_ms = shard.config.connect_session_timeout_ms
    return g


def _replay_epoch(shard, key, value):
    if value is None:
        shard.groups.pop(key.group_id, None)
    else:
        _group(shard, key.group_id).epoch = value.epoch


def _replay_member(shard, key, value):
    g = _group(shard, key.group_id)
    old = g.members.pop(key.member_id, None)
    if value is None:
        g.unconfirmed.discard(key.member_id)
    if old is not None and old.instance_id is not None \
            and g.static.get(old.instance_id) == key.member_id:
        del g.static[old.instance_id]
    if value is not None:
        g.members[key.member_id] = value
        if value.instance_id is not None:
            g.static[value.instance_id] = key.member_id


def _replay_config(shard, key, value):
    g = _group(shard, key.group_id)
    if value is None:
        g.config_offset, g.connectors = -1, {}
        return
    g.config_offset = value.config_offset
    g.connectors = {c.name: c.task_count for c in value.connectors}
    for c in value.connectors:
        g.register(c.name)


def _replay_target_meta(shard, key, value):
    g = _group(shard, key.group_id)
    if value is None:
        value = m.ConnectWorkerGroupTargetAssignmentMetadataValue()
    g.target_epoch = value.assignment_epoch
    g.target_error = value.assignment_error
    g.assignor_name = value.assignor_name
    g.assignor_state = value.assignor_state
    g.rebalance_deadline_ms = value.rebalance_deadline_ms
    g.recount()


def _replay_target(shard, key, value):
    g = _group(shard, key.group_id)
    if value is None:
        g.target.pop(key.member_id, None)
    else:
        g.target[key.member_id] = TargetEntry(
            g.units(value.connectors, value.tasks, intern=True), value.version, value.metadata)


def _replay_current(shard, key, value):
    g = _group(shard, key.group_id)
    mid = key.member_id
    old = g.current.pop(mid, None)
    new = None
    if value is not None:
        new = rc.MemberAssignment(
            value.member_epoch, value.previous_member_epoch, value.state,
            g.units(value.connectors, value.tasks, intern=True),
            g.units(value.connectors_pending_revocation, value.tasks_pending_revocation,
                    intern=True))
        g.current[mid] = new
    rc.update_holders(g.holders, mid, old, new)
    g.track(old, new)


def _replay_choose(shard, ev, _):
    g = shard.groups.get(ev.group_id)
    if g is not None:
        g.computing = ev.member_id
        g.prepared = None
        if ev.member_id is not None:
            g.leader = ev.member_id


def _replay_prepared(shard, ev, _):
    g = shard.groups.get(ev.group_id)
    if g is not None:
        g.prepared = ev
