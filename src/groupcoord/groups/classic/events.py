"""The classic group's in-memory events (Volatile: replayed like records, never written) and
the functions that apply them; the replayers the registry names for these events and for the
GroupMetadata record.

A handler's draft (rebalance.ClassicTx) applies each event it stages with ``apply_to``, and
the shard's replay applies the same event to the real group with the same function, so what a
handler saw is what replay makes.
"""
from __future__ import annotations

from typing import Optional

from groupcoord.groups.classic.group import (STATE_COMPLETING, STATE_DEAD, STATE_EMPTY,
                                             STATE_PREPARING, ClassicGroup, Member,
                                             count_protocols)
from groupcoord.groups.records import Record
from groupcoord.groups.result import Volatile
from groupcoord.protocol import messages as m

__all__ = ["PendingMemberAdded", "PendingMemberForgotten", "MemberJoined",
           "StaticMemberReplaced", "RebalanceStarted", "BarrierExtended", "MemberRemoved",
           "JoinCompleted", "SyncReceived", "apply_to"]


class PendingMemberAdded(Volatile, frozen=True, gc=False):
    group_id: str
    member_id: str


class PendingMemberForgotten(Volatile, frozen=True, gc=False):
    group_id: str
    member_id: str


class MemberJoined(Volatile, frozen=True, gc=False):
    """Add or update a member and mark it as having joined this barrier (parked)."""
    group_id: str
    member_id: str
    instance_id: Optional[str]
    client_id: str
    client_host: str
    session_timeout: int
    rebalance_timeout: int
    protocol_type: str
    protocols: tuple
    version: int


class StaticMemberReplaced(Volatile, frozen=True, gc=False):
    """A known group.instance.id rejoined with a new member id: the old id is fenced."""
    group_id: str
    old_member_id: str
    new_member_id: str
    client_id: str
    client_host: str
    session_timeout: int
    rebalance_timeout: int
    protocols: tuple


class RebalanceStarted(Volatile, frozen=True, gc=False):
    group_id: str
    deadline: int
    delay_cap: int          # -1: a normal barrier; else the end of the initial-delay phase
    now: int


class BarrierExtended(Volatile, frozen=True, gc=False):
    group_id: str
    deadline: int


class MemberRemoved(Volatile, frozen=True, gc=False):
    group_id: str
    member_id: str


class JoinCompleted(Volatile, frozen=True, gc=False):
    group_id: str
    generation: int
    protocol: str
    leader: str
    now: int


class SyncReceived(Volatile, frozen=True, gc=False):
    group_id: str
    member_id: str
    parked: bool
    version: int


def _apply_pending_added(g: ClassicGroup, ev) -> None:
    g.pending[ev.member_id] = None
    g.id_seq += 1


def _apply_pending_forgotten(g: ClassicGroup, ev) -> None:
    g.pending.pop(ev.member_id, None)


def _apply_joined(g: ClassicGroup, ev: MemberJoined) -> None:
    mb = g.writable(ev.member_id) if ev.member_id in g.members else None
    if mb is not None:
        count_protocols(g, mb.protocols, -1)
    else:
        if not g.members:
            g._ptype = ev.protocol_type
        mb = g.members[ev.member_id] = Member(ev.member_id)
        g.pending.pop(ev.member_id, None)
        g.id_seq += 1
        if g.state == STATE_PREPARING and g.delay_cap is not None:
            g.new_member_added = True
    mb.instance_id = ev.instance_id
    if ev.instance_id is not None:
        g.static_members[ev.instance_id] = ev.member_id
    mb.client_id = ev.client_id
    mb.client_host = ev.client_host
    mb.session_timeout = ev.session_timeout
    mb.rebalance_timeout = ev.rebalance_timeout
    mb.protocols = ev.protocols
    count_protocols(g, ev.protocols, 1)
    if not mb.joined:
        mb.joined = True
        g.num_joined += 1
    mb.join_version = ev.version


def _apply_replaced(g: ClassicGroup, ev: StaticMemberReplaced) -> None:
    old = g.members[ev.old_member_id]
    mb = old.copy()
    mb.member_id = ev.new_member_id
    mb.client_id = ev.client_id
    mb.client_host = ev.client_host
    mb.session_timeout = ev.session_timeout
    mb.rebalance_timeout = ev.rebalance_timeout
    mb.protocols = ev.protocols
    count_protocols(g, old.protocols, -1)
    count_protocols(g, ev.protocols, 1)
    if old.joined:
        g.num_joined -= 1
    mb.joined = mb.sync_parked = False
    mb.synced_generation = -1           # a new incarnation: it synced nothing yet
    # Same position in join order, so leader election is unaffected by the rename.
    g.members = {(ev.new_member_id if k == ev.old_member_id else k):
                 (mb if k == ev.old_member_id else v) for k, v in g.members.items()}
    g.static_members[mb.instance_id] = ev.new_member_id
    if ev.old_member_id in g.pending_sync:
        g.pending_sync = {(ev.new_member_id if k == ev.old_member_id else k): None
                          for k in g.pending_sync}
    if g.leader == ev.old_member_id:
        g.leader = ev.new_member_id
    g.id_seq += 1


def _apply_rebalance_started(g: ClassicGroup, ev: RebalanceStarted) -> None:
    if g.state != STATE_COMPLETING or g.rebalance_since < 0:
        g.rebalance_since = ev.now
    g.state = STATE_PREPARING
    g.state_timestamp = ev.now
    g.barrier_deadline = ev.deadline
    g.delay_cap = None if ev.delay_cap < 0 else ev.delay_cap
    g.new_member_added = False
    g.pending_sync = {}
    for mid in [mid for mid, mb in g.members.items() if mb.sync_parked]:
        g.writable(mid).sync_parked = False   # the handler answered them REBALANCE_IN_PROGRESS


def _apply_barrier_extended(g: ClassicGroup, ev: BarrierExtended) -> None:
    g.barrier_deadline = ev.deadline
    g.new_member_added = False


def _apply_removed(g: ClassicGroup, ev: MemberRemoved) -> None:
    mb = g.members.pop(ev.member_id)
    count_protocols(g, mb.protocols, -1)
    if mb.joined:
        g.num_joined -= 1
    if mb.instance_id is not None and g.static_members.get(mb.instance_id) == ev.member_id:
        del g.static_members[mb.instance_id]
    g.pending_sync.pop(ev.member_id, None)


def _apply_join_completed(g: ClassicGroup, ev: JoinCompleted) -> None:
    g.state = STATE_COMPLETING
    g.state_timestamp = ev.now
    g.generation = ev.generation
    g.protocol = ev.protocol
    g.leader = ev.leader
    g.barrier_deadline = g.delay_cap = None
    g.new_member_added = False
    for mid in [mid for mid, mb in g.members.items() if mb.joined]:
        g.writable(mid).joined = False
    g.num_joined = 0
    g.pending_sync = {mid: None for mid in g.members}


def _apply_sync(g: ClassicGroup, ev: SyncReceived) -> None:
    g.pending_sync.pop(ev.member_id, None)
    mb = g.writable(ev.member_id)
    mb.synced_generation = g.generation
    if ev.parked:
        mb.sync_parked = True
        mb.sync_version = ev.version


_APPLY = {
    PendingMemberAdded: _apply_pending_added,
    PendingMemberForgotten: _apply_pending_forgotten,
    MemberJoined: _apply_joined,
    StaticMemberReplaced: _apply_replaced,
    RebalanceStarted: _apply_rebalance_started,
    BarrierExtended: _apply_barrier_extended,
    MemberRemoved: _apply_removed,
    JoinCompleted: _apply_join_completed,
    SyncReceived: _apply_sync,
}


def apply_to(g: ClassicGroup, item) -> None:
    """Apply one staged item, an event above or a GroupMetadata record, to ``g`` (a draft or
    the shard's group)."""
    if isinstance(item, Record):
        if item.value is None:
            g.state = STATE_DEAD
        else:
            g.load(item.value)
    else:
        _APPLY[type(item)](g, item)


# ------------------------------------------------------------------------------ replay
def _replay_event(shard, ev, _value) -> None:
    gid = ev.group_id
    g = shard.groups.get(gid)
    if g is None:
        g = shard.groups[gid] = ClassicGroup(gid)
    elif not isinstance(g, ClassicGroup):
        raise ValueError("classic event %s for %s group %s" % (type(ev).__name__, g.TYPE, gid))
    apply_to(g, ev)
    # A group that only ever held MEMBER_ID_REQUIRED members leaves nothing behind.
    if (g.state == STATE_EMPTY and not g.members and not g.pending and g.last_record is None
            and not shard.offsets.get(gid)):
        del shard.groups[gid]


def _replay_group_metadata(shard, key: m.GroupMetadataKey, value) -> None:
    gid = key.group
    g = shard.groups.get(gid)
    if value is None:
        if isinstance(g, ClassicGroup):
            g.state = STATE_DEAD
            del shard.groups[gid]
        return
    if not isinstance(g, ClassicGroup):
        g = shard.groups[gid] = ClassicGroup(gid)
    g.load(value)

