"""Requests whose group id is held by a group of another type than the API's (KIP-848 online
migration; docs/coordinator-migration.md). registry.py sends these APIs here; everything else
goes straight to its group type's handler.

  JoinGroup, SyncGroup,      a classic group or no group      -> classic/handlers.py
  Heartbeat, LeaveGroup      a consumer group                 -> consumer/classic_members.py (its
                                                                 members using the classic
                                                                 protocol)
                             a connect group                  -> connect/classic_members.py (its
                                                                 classic workers)
                             any other type                   -> INCONSISTENT_GROUP_PROTOCOL
                                                                 (join), else UNKNOWN_MEMBER_ID
The modern heartbeats need no route: when a classic group holds the id, consumer/tx.py opens
its ConsumerTx through consumer/migration.py's upgrade and connect/heartbeat.py takes
connect/migration.py's upgrade records (each bridge sits below its type's handlers).

This module sits above every group type, so no group module imports another one's handlers.
"""
from __future__ import annotations

from groupcoord.groups.connect import classic_members as connect_classic
from groupcoord.groups.consumer import classic_members as consumer_classic
from groupcoord.groups.classic.group import ClassicGroup
from groupcoord.groups.classic.handlers import (handle_heartbeat, handle_join, handle_leave,
                                                handle_sync, leave_response)
from groupcoord.groups.classic.rebalance import join_error
from groupcoord.groups.connect.group import ConnectGroup
from groupcoord.groups.consumer.group import ConsumerGroup
from groupcoord.groups.result import RequestContext, Result
from groupcoord.protocol import messages as m
from groupcoord.protocol.error_codes import ErrorCode as E

__all__ = ["join_group", "sync_group", "heartbeat", "leave_group"]


# ------------------------------------------------------------------- classic requests
def _other_type(shard, group_id: str):
    """The group holding ``group_id`` when it is not a classic group, else None."""
    g = shard.groups.get(group_id) if group_id else None
    return None if g is None or isinstance(g, ClassicGroup) else g


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
    return leave_response(version, who, [E.UNKNOWN_MEMBER_ID] * len(who))


def join_group(shard, req: m.JoinGroupRequest, ctx: RequestContext) -> Result:
    return _route(shard, req, ctx, handle_join,
                  {ConsumerGroup: consumer_classic.join,
                   ConnectGroup: connect_classic.classic_join},
                  lambda r, v: join_error(v, E.INCONSISTENT_GROUP_PROTOCOL, r.member_id))


def sync_group(shard, req: m.SyncGroupRequest, ctx: RequestContext) -> Result:
    return _route(shard, req, ctx, handle_sync,
                  {ConsumerGroup: consumer_classic.sync,
                   ConnectGroup: connect_classic.classic_sync},
                  _unknown_member(m.SyncGroupResponse))


def heartbeat(shard, req: m.HeartbeatRequest, ctx: RequestContext) -> Result:
    return _route(shard, req, ctx, handle_heartbeat,
                  {ConsumerGroup: consumer_classic.heartbeat,
                   ConnectGroup: connect_classic.classic_heartbeat},
                  _unknown_member(m.HeartbeatResponse))


def leave_group(shard, req: m.LeaveGroupRequest, ctx: RequestContext) -> Result:
    return _route(shard, req, ctx, handle_leave,
                  {ConsumerGroup: consumer_classic.leave,
                   ConnectGroup: connect_classic.classic_leave},
                  _leave_unknown)
