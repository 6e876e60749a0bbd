"""Requests whose group id is held by a group of another type than the API's (KIP-848 online
migration; docs/coordinator-migration.md). registry.py sends these APIs here; everything else
goes straight to its group type's handler.

  JoinGroup, SyncGroup,      a classic group or no group      -> classic.py
  Heartbeat, LeaveGroup      a consumer group                 -> consumer_classic.py (its
                                                                 members using the classic
                                                                 protocol)
                             a connect group                  -> migration_connect.py (its
                                                                 classic workers)
                             any other type                   -> INCONSISTENT_GROUP_PROTOCOL
                                                                 (join), else UNKNOWN_MEMBER_ID
The modern heartbeats need no route: when a classic group holds the id, consumer.py opens
its Plan through migration.upgrade and connect.py takes migration_connect.upgrade's records
(the conversion modules sit below both).

This module sits above every group type, so no group module imports another one's handlers.
"""
from __future__ import annotations

from groupcoord.groups import classic, consumer_classic, migration_connect
from groupcoord.groups.connect_group import ConnectGroup
from groupcoord.groups.consumer import ConsumerGroup
from groupcoord.groups.result import RequestContext, Result
from groupcoord.protocol import messages as m
from groupcoord.protocol.error_codes import ErrorCode as E

__all__ = ["join_group", "sync_group", "heartbeat", "leave_group"]


# ------------------------------------------------------------------- classic requests
def _other_type(shard, group_id: str):
    """The group holding ``group_id`` when it is not a classic group, else None."""
    g = shard.groups.get(group_id) if group_id else None
    return None if g is None or isinstance(g, classic.ClassicGroup) else g


def _route(shard, req, ctx: RequestContext, classic_fn, table: dict, other) -> Result:
    """classic_fn for a classic group or none; table[type of the group] for the classic members
    of a consumer or connect group; ``other(req, version)``'s response for any other type."""
    g = _other_type(shard, req.group_id)
    if g is None:
        return classic_fn(shard, req, ctx)
    fn = table.get(type(g))
    return fn(shard, g, req, ctx) if fn is not None else Result(other(req, ctx.version))


def _unknown_member(resp_cls):
    return lambda req, version: resp_cls(error_code=int(E.UNKNOWN_MEMBER_ID))


def _leave_unknown(req, version: int):
    who = [(mi.member_id, mi.group_instance_id) for mi in req.members] if version >= 3 \
        else [(req.member_id, None)]
    return classic.leave_response(version, who, [E.UNKNOWN_MEMBER_ID] * len(who))


def join_group(shard, req: m.JoinGroupRequest, ctx: RequestContext) -> Result:
    return _route(shard, req, ctx, classic.handle_join,
                  {ConsumerGroup: consumer_classic.join,
                   ConnectGroup: migration_connect.classic_join},
                  lambda r, v: classic._join_error(v, E.INCONSISTENT_GROUP_PROTOCOL,
                                                   r.member_id))


def sync_group(shard, req: m.SyncGroupRequest, ctx: RequestContext) -> Result:
    return _route(shard, req, ctx, classic.handle_sync,
                  {ConsumerGroup: consumer_classic.sync,
                   ConnectGroup: migration_connect.classic_sync},
                  _unknown_member(m.SyncGroupResponse))


def heartbeat(shard, req: m.HeartbeatRequest, ctx: RequestContext) -> Result:
    return _route(shard, req, ctx, classic.handle_heartbeat,
                  {ConsumerGroup: consumer_classic.heartbeat,
                   ConnectGroup: migration_connect.classic_heartbeat},
                  _unknown_member(m.HeartbeatResponse))


def leave_group(shard, req: m.LeaveGroupRequest, ctx: RequestContext) -> Result:
    return _route(shard, req, ctx, classic.handle_leave,
                  {ConsumerGroup: consumer_classic.leave,
                   ConnectGroup: migration_connect.classic_leave},
                  _leave_unknown)
