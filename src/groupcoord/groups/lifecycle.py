"""Lifecycle events: what happened to a group, as data (``Result.events``), for the runtime to
write as log lines (runtime/lifecycle_log.py; docs/operations.md, "Lifecycle logs").

A handler or timer function adds an :class:`Event` where the thing happens (a member joins,
leaves, is fenced or expires, a static member is replaced, a rebalance starts or completes, a
target assignment is computed, offsets expire). Events are never replayed and never written
to the log: ``Shard.apply`` ignores them, so a restart does not report old rebalances again,
and the state machines make no logging call of their own.

One struct for every kind; the fields a kind does not use keep their defaults (and a JSON
line omits them). ``epoch`` is the group epoch of a consumer or connect group and the
generation of a classic group. ``reason`` is one of the codes below: for a rebalance, why it
started (``member`` is the member that caused it, if any); for a member leaving, expiring or
fenced, how.
"""
from __future__ import annotations

from typing import Optional

import msgspec

__all__ = ["Event", "KINDS", "REASONS", "MEMBER_JOINED", "MEMBER_LEFT", "MEMBER_FENCED",
           "MEMBER_EXPIRED", "STATIC_REPLACED", "REBALANCE_STARTED", "REBALANCE_COMPLETED",
           "ASSIGNMENT_COMPUTED", "OFFSETS_EXPIRED", "GROUP_DELETED"]

# ---- kinds
MEMBER_JOINED = "member-joined"
MEMBER_LEFT = "member-left"
MEMBER_FENCED = "member-fenced"                 # refused: stale epoch or instance id taken
MEMBER_EXPIRED = "member-expired"               # removed by a deadline (reason says which)
STATIC_REPLACED = "static-member-replaced"
REBALANCE_STARTED = "rebalance-started"         # a new group epoch / generation is wanted
REBALANCE_COMPLETED = "rebalance-completed"     # every member reached it
ASSIGNMENT_COMPUTED = "assignment-computed"     # a target: server assignor or connect worker
OFFSETS_EXPIRED = "offsets-expired"
GROUP_DELETED = "group-deleted"

KINDS = (MEMBER_JOINED, MEMBER_LEFT, MEMBER_FENCED, MEMBER_EXPIRED, STATIC_REPLACED,
         REBALANCE_STARTED, REBALANCE_COMPLETED, ASSIGNMENT_COMPUTED, OFFSETS_EXPIRED,
         GROUP_DELETED)

# ---- reasons: code -> what it means (the log line says it in these words)
REASONS = {
    # why a rebalance started
    "join": "member {member} joined",
    "rejoin": "member {member} rejoined with new metadata",
    "leader-rejoin": "leader {member} rejoined",
    "leave": "member {member} left",
    "session-expired": "member {member}'s session expired",
    "revocation-timeout": "member {member} did not revoke in time",
    "rebalance-timeout": "member {member} did not rejoin in time",
    "sync-timeout": "member {member} did not sync in time",
    "subscription": "member {member} changed its subscription",
    "assignors": "member {member} changed its assignors",
    "metadata": "the subscribed topics changed",
    "config": "the connectors or tasks changed",
    "delayed": "the assignor's delayed rebalance is due",
    "store-failed": "the assignment could not be stored",
    # how a member left or was fenced
    "static-leave": "static member left for a while (epoch -2)",
    "stale-epoch": "stale member epoch",
    "instance-taken": "its instance id is held by another member",
    # why a group was deleted
    "empty-expired": "empty, and its offsets expired",
    "delete-request": "by a DeleteGroups request",
}


class Event(msgspec.Struct, frozen=True, gc=False, omit_defaults=True, kw_only=True):
    kind: str
    group: str
    type: str                           # "classic", "consumer" or "connect"
    member: str = ""
    instance: Optional[str] = None
    epoch: int = -1                     # group epoch, or a classic group's generation
    reason: str = ""
    client: str = ""                    # member-joined, static-member-replaced
    host: str = ""
    previous: str = ""                  # static-member-replaced: the member id it fenced
    member_epoch: int = -1              # member-fenced: the epoch the request carried
    duration_ms: int = -1               # rebalance-completed: since it started; -1 unknown
    members: int = -1
    units_moved: int = -1               # units whose owner changed in the targets; -1 unknown
    unit: str = ""                      # "partitions" or "connectors/tasks"
    assignor: str = ""
    worker: str = ""                    # assignment-computed: the connect worker that did
    error: int = 0                      # assignment-computed: the connect assignor's error
    offsets: int = -1                   # offsets-expired: how many; group-deleted: with it
    topics: tuple = ()                  # offsets-expired: of which topics (sorted)
