"""Membership rules every modern group type shares: fencing by member epoch, who may take a
static member's instance id, and when a session or revocation deadline removes a member.

Each rule raises :class:`Reject` (errors.py) with Kafka's error code and a message, or
answers a plain value; the group types turn a Reject into their own response frame. Where
the types still differ, it is said at the type (docs/architecture.md, "What differs").
"""
from __future__ import annotations

from typing import Optional

from groupcoord.groups.errors import Reject
from groupcoord.groups.modern import reconcile as rc
from groupcoord.groups.modern.reconcile import UNREVOKED, MemberAssignment
from groupcoord.protocol.error_codes import ErrorCode as E

__all__ = ["LEAVE_EPOCH", "STATIC_LEAVE_EPOCH", "check_epoch", "check_instance_free",
           "check_instance_holder", "expiry_removes", "classic_member_id"]

LEAVE_EPOCH = -1           # a heartbeat at this epoch leaves the group
STATIC_LEAVE_EPOCH = -2    # a static member leaves for a while; it keeps its instance id


def check_epoch(a: MemberAssignment, epoch: int, owned: Optional[frozenset]) -> None:
    """Kafka's fencing rule (reconcile.check_member_epoch) as a Reject: the member must
    abandon its work and rejoin. (Through the module: the simulation's mutation
    accept-stale-epoch patches reconcile.check_member_epoch.)"""
    if rc.check_member_epoch(a, epoch, owned):
        raise Reject(E.FENCED_MEMBER_EPOCH, "The member has a %s member epoch (%d) than the "
                     "one known by the group coordinator (%d). The member must abandon all "
                     "its work and rejoin with epoch 0."
                     % ("greater" if epoch > a.epoch else "smaller", epoch, a.epoch))


def check_instance_free(holder_id: str, holder: MemberAssignment, instance_id: str) -> None:
    """A join naming an instance id another member holds replaces that member only when it
    left for a while (epoch -2); else UNRELEASED_INSTANCE_ID."""
    if holder.epoch != STATIC_LEAVE_EPOCH:
        raise Reject(E.UNRELEASED_INSTANCE_ID, "Static member %s with instance id %s is still "
                     "active; it must leave the group (epoch -2) before another member takes "
                     "its instance id." % (holder_id, instance_id))


def check_instance_holder(holder_id: Optional[str], member_id: str, instance_id: str) -> None:
    """A heartbeat (epoch > 0) or leave naming an instance id must come from its holder."""
    if holder_id is None:
        raise Reject(E.UNKNOWN_MEMBER_ID, "Instance id %s is unknown." % instance_id)
    if holder_id != member_id:
        raise Reject(E.FENCED_INSTANCE_ID, "The static member %s with instance id %s was "
                     "fenced by member %s." % (member_id, instance_id, holder_id))


def expiry_removes(a: Optional[MemberAssignment], revocation: bool) -> bool:
    """Whether a member's session (revocation=False) or revocation deadline, having passed,
    removes it: always for the session; for the revocation, only while it is still revoking
    at a live epoch (a static member that left for a while answers to its session)."""
    if a is None:
        return False
    return not revocation or (a.state == UNREVOKED and a.epoch >= 0)


def classic_member_id(g, member_id: str, instance: Optional[str],
                      is_classic) -> tuple:
    """(member id, 0) or (None, error code) for a Sync/Heartbeat/Leave naming a classic member
    of a consumer or connect group (the instance id, when given, decides who it is);
    ``is_classic(member entry)`` says whether the member uses the classic protocol."""
    if instance is not None:
        holder = g.static.get(instance)
        if holder is None:
            return None, E.UNKNOWN_MEMBER_ID
        if member_id and holder != member_id:
            return None, E.FENCED_INSTANCE_ID
        member_id = holder
    if not is_classic(g.members.get(member_id)):
        return None, E.UNKNOWN_MEMBER_ID
    return member_id, 0
