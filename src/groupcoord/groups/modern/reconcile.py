"""KIP-848 per-member reconciliation: the one implementation every modern group type runs
(consumer groups, connect groups, and the classic-protocol members inside either). A group
type supplies only its units and its target; :func:`reconcile_member` decides the rest.

A unit of work is an int key: ``(index << 32) | sub`` where ``index`` is a topic (consumer) or
connector (connect) interned by the group and ``sub`` the partition, or ``task + 1`` with 0 for
the connector instance itself (see :func:`unit`). Sets of units are frozensets of such keys.

A member's current assignment is a :class:`MemberAssignment`. Its ``assigned`` and
``pending_revocation`` units are *held* by the member: no other member may be given them.
The group keeps ``holders: unit -> member id`` over every member's held units; a unit absent
from it is free.

Transitions (Kafka's CurrentAssignmentBuilder, the seed's "Member Epoch - Reconciliation"):

  STABLE      at the target epoch: nothing to do. Behind it: compute.
  UNREVOKED   waits until the member reports owned units without any pending revocation
              (a heartbeat whose owned set is null cannot acknowledge), then computes.
  UNRELEASED  at the target epoch but some target units are still held by others; computes
              again on every heartbeat (and at once when the target moves).

  compute: kept = assigned & target; revoke = assigned - target; new = target - assigned.
    revoke non-empty -> UNREVOKED, epoch unchanged, assigned = kept, pending = revoke
                        (revoke before assign: nothing new is given while revoking)
    else             -> epoch = target epoch, assigned = kept + the new units that are free;
                        UNRELEASED if any new unit is still held by another member, else STABLE
"""
from __future__ import annotations

from bisect import bisect_left
from typing import NamedTuple, Optional

from groupcoord.assign.kernels import MemberState
from groupcoord.protocol.error_codes import ErrorCode

__all__ = ["STABLE", "UNREVOKED", "UNRELEASED", "MemberAssignment", "unit", "unit_parts",
           "units_of_index", "split_units", "next_assignment", "revoked_moves_epoch",
           "check_member_epoch", "EMPTY_SET", "NEW_MEMBER", "Step", "reconcile_member",
           "acknowledging", "KEEP", "ARM", "CANCEL"]

STABLE = int(MemberState.STABLE)
UNREVOKED = int(MemberState.UNREVOKED)
UNRELEASED = int(MemberState.UNRELEASED)

EMPTY_SET: frozenset = frozenset()
_SHIFT = 32
_MASK = (1 << _SHIFT) - 1


def unit(index: int, sub: int) -> int:
    return (index << _SHIFT) | sub


def unit_parts(u: int) -> tuple:
    return u >> _SHIFT, u & _MASK


def units_of_index(index: int, subs):
    """The units ``unit(index, s)`` for every ``s`` in subs, as an iterator. Per-unit work
    is a C-level ``map`` (join storms touch millions of units; no Python frame per unit)."""
    return map((index << _SHIFT).__or__, subs)


def split_units(units) -> list:
    """[(index, [sub, ...] ascending), ...] by ascending index: one sort (C), then per index a
    bisect and a C-level map — no Python frame per unit."""
    us = sorted(units)
    out = []
    i, n = 0, len(us)
    mask = _MASK.__and__
    while i < n:
        ix = us[i] >> _SHIFT
        j = bisect_left(us, (ix + 1) << _SHIFT, i)
        out.append((ix, list(map(mask, us[i:j]))))
        i = j
    return out


class MemberAssignment(NamedTuple):
    epoch: int
    previous_epoch: int
    state: int
    assigned: frozenset
    pending_revocation: frozenset

    @property
    def held(self) -> frozenset:
        return self.assigned | self.pending_revocation if self.pending_revocation \
            else self.assigned


NEW_MEMBER = MemberAssignment(0, 0, STABLE, EMPTY_SET, EMPTY_SET)


def _compute(cur: MemberAssignment, target_epoch: int, target: frozenset, holders: dict,
             me) -> MemberAssignment:
    assigned = cur.assigned
    revoke = assigned - target
    if revoke:
        return MemberAssignment(cur.epoch, cur.epoch, UNREVOKED, assigned & target, revoke)
    new = target - assigned
    if not new:
        return MemberAssignment(target_epoch, cur.epoch, STABLE, assigned, EMPTY_SET)
    get = holders.get
    free = [u for u in new if get(u, me) == me]
    state = UNRELEASED if len(free) < len(new) else STABLE
    return MemberAssignment(target_epoch, cur.epoch, state, assigned.union(free), EMPTY_SET)


def next_assignment(cur: MemberAssignment, target_epoch: int, target: frozenset,
                    owned: Optional[frozenset], holders: dict, me) -> MemberAssignment:
    """The member's next current assignment (``cur`` itself when nothing changes).

    target_epoch/target: the group's target assignment epoch and this member's target units.
    owned: the units the member reports owning in this heartbeat (None: not reported).
    holders: unit -> member id over all members' held units (this member's included)."""
    st = cur.state
    if st == STABLE:
        if cur.epoch == target_epoch:
            return cur
        return _compute(cur, target_epoch, target, holders, me)
    if st == UNREVOKED:
        if owned is None or not owned.isdisjoint(cur.pending_revocation):
            return cur
        released = MemberAssignment(cur.epoch, cur.previous_epoch, STABLE, cur.assigned,
                                    EMPTY_SET)
        # The units just revoked are still in holders under this member: free for it only.
        return _compute(released, target_epoch, target, holders, me)
    # UNRELEASED
    nxt = _compute(cur, target_epoch, target, holders, me)
    if nxt.epoch == cur.epoch and nxt.state == cur.state and nxt.assigned == cur.assigned:
        return cur
    if nxt.epoch == cur.epoch and nxt.state != UNREVOKED:
        # Same epoch, more units released to us: the previous epoch does not move, so a
        # member whose response moving it to this epoch was lost is still recognised.
        return nxt._replace(previous_epoch=cur.previous_epoch)
    return nxt


def revoked_moves_epoch(cur: MemberAssignment, nxt: MemberAssignment,
                        target_epoch: int) -> MemberAssignment:
    """Kafka's CurrentAssignmentBuilder: a member that has revoked what was pending moves to
    the next epoch (min(epoch + 1, target epoch)), also when the target moved meanwhile and it
    must now revoke more (next_assignment keeps its epoch then). The epoch is what tells the
    member's late requests from its live ones: kept, a commit it sent before it released
    those partitions, arriving late, passes the epoch check and overwrites the offsets of
    their new owner (simulation finding 11, seed 1006657). Every group type gets it through
    reconcile_member."""
    if (cur.state == UNREVOKED and nxt.state == UNREVOKED and nxt != cur
            and 0 <= cur.epoch < target_epoch):
        return nxt._replace(epoch=cur.epoch + 1, previous_epoch=cur.epoch)
    return nxt


def check_member_epoch(cur: MemberAssignment, received: int,
                       owned: Optional[frozenset]) -> int:
    """Kafka's fencing rule: a newer epoch than ours is FENCED; an older one is accepted only
    when it is the previous epoch and the owned units are a subset of the assignment (the
    response that moved the member forward was lost). Returns an ErrorCode value (0 = ok)."""
    if received == cur.epoch:
        return 0
    if received > cur.epoch:
        return ErrorCode.FENCED_MEMBER_EPOCH
    if received == cur.previous_epoch and owned is not None and owned <= cur.assigned:
        return 0
    return ErrorCode.FENCED_MEMBER_EPOCH


def update_holders(holders: dict, member_id, old: Optional[MemberAssignment],
                   new: Optional[MemberAssignment]) -> None:
    """Keep ``holders`` (unit -> member id) in step when a member's current assignment
    changes from ``old`` to ``new`` (None = no assignment / member removed). Replay only."""
    new_held = new.held if new is not None else EMPTY_SET
    if old is not None:
        get = holders.get
        # Units kept are overwritten below: only the ones given up need a look.
        for u in old.held - new_held if new_held else old.held:
            if get(u) == member_id:
                del holders[u]
    if new_held:
        holders.update(dict.fromkeys(new_held, member_id))


# ---------------------------------------------------------------- one heartbeat's step
KEEP, ARM, CANCEL = 0, 1, 2        # what happens to the member's revocation timer


class Step(NamedTuple):
    """What one request does to a member's current assignment (reconcile_member)."""
    cur: MemberAssignment
    nxt: MemberAssignment
    revocation: int                 # KEEP, ARM (now + rebalance timeout) or CANCEL
    send: bool                      # the answer carries the assignment
    unconfirmed: Optional[bool]     # the member's new "unconfirmed" flag; None: unchanged


def acknowledging(owned: Optional[frozenset], rejoin: bool) -> Optional[frozenset]:
    """The owned set that may acknowledge a pending revocation: not that of an epoch-0
    heartbeat of a member the group already knows (``rejoin``): a rejoin, or a late copy of
    its first join whose set predates work given to it since -- acknowledged, that copy
    would release work its member still runs (simulation, seeds 209968, 211303). The
    member's next heartbeat at its epoch acknowledges."""
    return None if rejoin else owned


def reconcile_member(cur: MemberAssignment, target_epoch: int, target: frozenset,
                     owned: Optional[frozenset], acks: Optional[frozenset], holders, me, *,
                     joining: bool, repeat: Optional[bool]) -> Step:
    """The member's next assignment and what follows from it.

    owned: the units the member reports in this request (None: not reported); acks: the
    set that may acknowledge a revocation (acknowledging(), or owned for a classic-protocol
    member, whose JoinGroup is how it revokes); joining: a (re)join (epoch 0 / JoinGroup);
    repeat: whether the member was answered an assignment it has not confirmed yet, or None
    for a classic-protocol member (SyncGroup carries its assignment, not this answer).

    Rules, each written here only:
    - next_assignment, then revoked_moves_epoch (Kafka's epoch move after a revocation);
    - the revocation timer is armed when the member starts revoking, when what it must
      revoke changes, and on a (re)join that leaves it revoking (its timer was cancelled or
      must restart); cancelled when it stops revoking;
    - the send-assignment rule (Kafka's, plus ours): the answer carries the assignment when
      it changed, on a (re)join, when the owned set reported differs from it, on every
      answer while a revocation is pending (finding 2), and until the member confirms it by
      reporting exactly that assignment as owned (finding 10). The answer that carried a
      change may have gone to a late copy of a request: the member saw its retry answered,
      so its next heartbeats omit their owned set; it would never run units given to it, or
      never acknowledge a revocation it never heard of (seeds 100011, 502916, 502670)."""
    nxt = next_assignment(cur, target_epoch, target, acks, holders, me)
    # Through the module's globals: the simulation's mutation revoked-keeps-epoch patches it.
    nxt = revoked_moves_epoch(cur, nxt, target_epoch)
    if nxt.state == UNREVOKED and (cur.state != UNREVOKED or nxt != cur or joining):
        revocation = ARM
    elif cur.state == UNREVOKED and nxt.state != UNREVOKED:
        revocation = CANCEL
    else:
        revocation = KEEP
    if repeat is None:
        return Step(cur, nxt, revocation, False, None)
    confirmed = owned == nxt.assigned
    send = (joining or nxt.assigned != cur.assigned or nxt.state == UNREVOKED
            or ((owned is not None or repeat) and not confirmed))
    unconfirmed = send and not confirmed
    return Step(cur, nxt, revocation, send, None if unconfirmed == repeat else unconfirmed)
