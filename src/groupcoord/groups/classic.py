"""Classic groups: JoinGroup / SyncGroup / Heartbeat / LeaveGroup (client-side assignment).

The group elects a leader among its members; the leader computes every member's assignment
from the metadata the coordinator collected and hands it back in SyncGroup. The coordinator
only runs the barrier, picks the protocol and stores the result (docs/coordinator-classic.md).

States (Kafka's names) and transitions::

    Empty                --a member joins----------------------------> PreparingRebalance
    PreparingRebalance   --all joined, or the barrier deadline--------> CompletingRebalance
                         --the same with no member left (record)------> Empty
    CompletingRebalance  --the leader's SyncGroup (record)-------------> Stable
    CompletingRebalance,
    Stable               --a new member, changed metadata, the leader's
                           rejoin (Stable), a leave, a session expiry,
                           the pending-sync timeout--------------------> PreparingRebalance
    any                  --GroupMetadata tombstone (removed)-----------> Dead

Unknown groups are described as Dead by the shard.

* PreparingRebalance is the join barrier. Every JoinGroup is parked (ParkKey kind "join")
  until all known members have rejoined and no MEMBER_ID_REQUIRED member is outstanding,
  or until the barrier deadline (the largest rebalance timeout of the members) passes;
  members that did not rejoin are then removed. A rebalance that starts in Empty waits
  group.initial.rebalance.delay.ms instead, and one more delay (capped by the rebalance
  timeout) each time the window closes with a new member having joined in it.
* Completing the barrier: generation + 1, the protocol is voted (each member votes for its
  most preferred protocol among those every member supports; most votes wins; a tie goes to
  the name that sorts first), the leader is the previous leader if still a member, else the
  first member in join order. Every parked JoinGroup is answered; only the leader gets the
  member list. No record is written: the generation becomes durable with the leader's sync.
* CompletingRebalance: followers' SyncGroups park (kind "sync") until the leader's SyncGroup,
  whose assignments are written as ONE GroupMetadataValue record; the parked syncs are answered
  in the same Result. A member that has not sent SyncGroup within the rebalance timeout after
  the join completed is removed (Kafka's pending-sync timeout), in Stable as well. A record
  that cannot be written (over message.max.bytes: 40 members with 1 MiB of metadata each)
  fails the generation as Kafka's failed append does: the leader and the parked syncs get
  UNKNOWN_SERVER_ERROR and the group rebalances.
* Durable state is the last GroupMetadataValue. Everything else (who joined, parked requests,
  pending members, barrier deadline) is in-memory and changed by the Volatile events below, so
  recovery gives a Stable group at the recorded generation (Empty if it has no members).

Handlers never mutate: each works on a draft copy of its group (``_Tx``), applying the same
``_apply`` functions the shard's replay uses, then returns the events and records it applied.
"""
from __future__ import annotations

import logging
from typing import Optional

import msgspec

from groupcoord.groups import ids, limits
from groupcoord.groups.group import Group
from groupcoord.groups.records import Record
from groupcoord.groups.result import EMPTY, ParkKey, RequestContext, Result, TimerKey, \
    Volatile
from groupcoord.groups.timers import CLASSIC_JOIN, CLASSIC_SESSION, CLASSIC_SYNC
from groupcoord.groups.tx import GroupTx
from groupcoord.protocol import embedded
from groupcoord.protocol import messages as m
from groupcoord.protocol.error_codes import ErrorCode as E

log = logging.getLogger("groupcoord.groups")

__all__ = ["ClassicGroup", "new_empty_group",
           "check_member", "EMPTY_STATE", "PREPARING", "COMPLETING", "STABLE", "DEAD",
           "SESSION", "JOIN", "SYNC"]

EMPTY_STATE = "Empty"
PREPARING = "PreparingRebalance"
COMPLETING = "CompletingRebalance"
STABLE = "Stable"
DEAD = "Dead"

# Timer kinds (timers.py). SESSION is per member (and per MEMBER_ID_REQUIRED member); JOIN is
# the barrier deadline; SYNC the pending-sync deadline after a join completed.
SESSION, JOIN, SYNC = CLASSIC_SESSION, CLASSIC_JOIN, CLASSIC_SYNC


# ------------------------------------------------------------------------------- state
class Member:
    __slots__ = ("member_id", "instance_id", "client_id", "client_host", "session_timeout",
                 "rebalance_timeout", "protocols", "assignment", "joined", "join_version",
                 "sync_parked", "sync_version")

    def __init__(self, member_id: str, instance_id: Optional[str] = None, client_id: str = "",
                 client_host: str = "", session_timeout: int = 0, rebalance_timeout: int = 0,
                 protocols: tuple = (), assignment: bytes = b""):
        self.member_id = member_id
        self.instance_id = instance_id
        self.client_id = client_id
        self.client_host = client_host
        self.session_timeout = session_timeout
        self.rebalance_timeout = rebalance_timeout
        self.protocols = protocols          # ((name, metadata), ...) in preference order
        self.assignment = assignment
        self.joined = False                 # rejoined in this barrier = JoinGroup parked
        self.join_version = 0
        self.sync_parked = False            # SyncGroup parked until the leader's arrives
        self.sync_version = 0

    def copy(self) -> "Member":
        c = Member.__new__(Member)
        for s in Member.__slots__:
            setattr(c, s, getattr(self, s))
        return c

    def metadata(self, protocol: Optional[str]) -> bytes:
        for name, md in self.protocols:
            if name == protocol:
                return md
        return b""

    def snapshot(self) -> tuple:
        return tuple(getattr(self, s) for s in Member.__slots__)


class ClassicGroup(Group):
    TYPE = "classic"

    def __init__(self, group_id: str):
        self.group_id = group_id
        self.state = EMPTY_STATE
        self.state_timestamp = -1
        self.generation = 0
        self._ptype: Optional[str] = None      # protocol type (protocol_type() is Group's)
        self.protocol: Optional[str] = None
        self.leader: Optional[str] = None
        self.members: dict = {}          # member id -> Member, in join order
        self.static_members: dict = {}   # group.instance.id -> member id
        self.pending: dict = {}          # MEMBER_ID_REQUIRED ids awaiting their rejoin (a set)
        self.pending_sync: dict = {}     # members that have not sent SyncGroup yet (a set)
        self.barrier_deadline: Optional[int] = None
        self.delay_cap: Optional[int] = None   # not None: in the initial-delay phase
        self.new_member_added = False          # a member joined in this initial-delay window
        self.id_seq = 0                  # makes generated member ids unique per group
        # Derived counters, kept by replay so that a join is not O(members):
        self.num_joined = 0              # members with joined set
        self.protocol_counts: dict = {}  # protocol name -> members that support it
        self.last_record: Optional[m.GroupMetadataValue] = None
        self._copied: Optional[set] = None   # a draft: ids of the members it owns a copy of

    def copy(self) -> "ClassicGroup":
        """A draft for a handler. Members are copied on first write (``_w``), so a request
        touching one member of a large group does not copy them all."""
        c = ClassicGroup.__new__(ClassicGroup)
        c.__dict__.update(self.__dict__)
        c.members = dict(self.members)
        c.static_members = dict(self.static_members)
        c.pending = dict(self.pending)
        c.pending_sync = dict(self.pending_sync)
        c.protocol_counts = dict(self.protocol_counts)
        c._copied = set()
        return c

    def _w(self, member_id: str) -> "Member":
        """The member, writable: in a draft, its own copy."""
        mb = self.members[member_id]
        if self._copied is not None and member_id not in self._copied:
            mb = self.members[member_id] = mb.copy()
            self._copied.add(member_id)
        return mb

    # ---- Group interface
    def state_name(self) -> str:
        return self.state

    def protocol_type(self) -> str:
        return self._ptype or ""

    def is_empty(self) -> bool:
        return self.state == EMPTY_STATE

    def as_described_group(self, catalog):
        st = self.state
        # Kafka's: metadata and assignment only while Stable (describeNoMetadata otherwise).
        show = st == STABLE
        members = [m.DescribeGroupsResponseDescribedGroupMember(
            member_id=mb.member_id, group_instance_id=mb.instance_id, client_id=mb.client_id,
            client_host=mb.client_host,
            member_metadata=mb.metadata(self.protocol) if show else b"",
            member_assignment=mb.assignment if show else b"")
            for mb in self.members.values()]
        return m.DescribeGroupsResponseDescribedGroup(
            error_code=0, group_id=self.group_id, group_state=st,
            protocol_type=self._ptype or "",
            protocol_data=(self.protocol or "") if st == STABLE else "", members=members)

    def validate_member(self, member_id: str, instance_id: Optional[str]) -> int:
        """UNKNOWN_MEMBER_ID / FENCED_INSTANCE_ID / 0 for a request naming this member."""
        if instance_id is not None:
            known = self.static_members.get(instance_id)
            if known is None:
                return E.UNKNOWN_MEMBER_ID
            if known != member_id:
                return E.FENCED_INSTANCE_ID
        if member_id not in self.members:
            return E.UNKNOWN_MEMBER_ID
        return 0

    def validate_offset_commit(self, member_id: str, instance_id: Optional[str],
                               generation_or_epoch: int, version: int) -> int:
        if self.state == DEAD:
            return E.COORDINATOR_NOT_AVAILABLE
        if generation_or_epoch < 0 and self.state == EMPTY_STATE:
            return 0                # a simple consumer or an admin tool
        if generation_or_epoch >= 0 or member_id or instance_id is not None:
            err = self.validate_member(member_id, instance_id)
            if err:
                return err
            if generation_or_epoch != self.generation:
                return E.ILLEGAL_GENERATION
        else:
            return E.UNKNOWN_MEMBER_ID   # no membership claimed, but the group has members
        if self.state == COMPLETING:
            return E.REBALANCE_IN_PROGRESS
        return 0

    def rearm(self, now_ms: int) -> list:
        ops = [(TimerKey(SESSION, self.group_id, mid), _session_deadline(mb, now_ms))
               for mid, mb in self.members.items()]
        ops += [(TimerKey(SESSION, self.group_id, mid), now_ms + _PENDING_GRACE_MS)
                for mid in self.pending]
        if self.state == PREPARING and self.barrier_deadline is not None:
            ops.append((TimerKey(JOIN, self.group_id), self.barrier_deadline))
        if self.pending_sync and self.state in (COMPLETING, STABLE):
            rt = max(mb.rebalance_timeout for mb in self.members.values())
            ops.append((TimerKey(SYNC, self.group_id), now_ms + rt))
        return ops

    # ---- offsets retention and group expiry (offsets.py)
    def empty_since(self) -> int:
        # The record of the group going Empty carries when (Kafka's currentStateTimestamp);
        # the live, volatile state timestamp would not survive a restart.
        r = self.last_record
        return r.current_state_timestamp if r is not None and not r.members else -1

    def subscribed_topics(self):
        # Kafka's rule: only a Stable group of the "consumer" protocol type whose members'
        # subscriptions all parse says which topics it subscribes to.
        if self.state != STABLE or self._ptype != "consumer" or self.protocol is None:
            return None
        topics = set()
        for mb in self.members.values():
            try:
                topics.update(embedded.decode_subscription(mb.metadata(self.protocol))[1].topics)
            except ValueError:               # the codec's DecodeError: not a subscription
                return None
        return topics

    def deletion(self) -> Optional[tuple]:
        if self.pending:
            return None              # a MEMBER_ID_REQUIRED join is on its way: not idle
        gid = self.group_id
        return ([_record(self, None)],
                [(TimerKey(JOIN, gid), None), (TimerKey(SYNC, gid), None)])

    def snapshot(self, durable: bool):
        if durable:
            return None if self.last_record is None else msgspec.to_builtins(self.last_record)
        return (self.state, self.state_timestamp, self.generation, self._ptype, self.protocol,
                self.leader, [mb.snapshot() for mb in self.members.values()],
                sorted(self.static_members.items()), list(self.pending),
                list(self.pending_sync), self.barrier_deadline, self.delay_cap,
                self.new_member_added, self.id_seq, self.num_joined,
                sorted(self.protocol_counts.items()),
                None if self.last_record is None else msgspec.to_builtins(self.last_record))

    # ---- loading a GroupMetadataValue (live after a write, or during recovery)
    def load(self, value: m.GroupMetadataValue) -> None:
        self.last_record = value
        self.generation = value.generation
        self._ptype = value.protocol_type or None
        self.protocol = value.protocol
        self.leader = value.leader
        self.state_timestamp = value.current_state_timestamp
        old = self.members
        members = {}
        for rm in value.members:
            mb = self._w(rm.member_id) if rm.member_id in old else Member(rm.member_id)
            if mb.metadata(value.protocol) != rm.subscription or not mb.protocols:
                # Recovery knows only the chosen protocol's metadata (as Kafka).
                mb.protocols = ((value.protocol, bytes(rm.subscription)),) \
                    if value.protocol is not None else ()
            mb.instance_id = rm.group_instance_id
            mb.client_id = rm.client_id
            mb.client_host = rm.client_host
            mb.session_timeout = rm.session_timeout
            mb.rebalance_timeout = rm.rebalance_timeout
            mb.assignment = bytes(rm.assignment)
            mb.joined = mb.sync_parked = False
            members[rm.member_id] = mb
        self.members = members
        self.num_joined = 0
        self.protocol_counts = {}
        for mb in members.values():
            _count_protocols(self, mb.protocols, 1)
        self.static_members = {mb.instance_id: mid for mid, mb in members.items()
                               if mb.instance_id is not None}
        self.pending_sync = {mid: None for mid in self.pending_sync if mid in members}
        self.state = STABLE if members else EMPTY_STATE
        self.barrier_deadline = self.delay_cap = None
        self.new_member_added = False


def new_empty_group(group_id: str) -> ClassicGroup:
    """An Empty classic group, generation 0, no protocol type (offsets.py creates one when it
    replays a commit for an unknown group)."""
    return ClassicGroup(group_id)


def is_offsets_only(group) -> bool:
    """A classic group that exists only because offsets were committed for its id (no group
    record, no member). Replaying another group type's records for the id replaces it: after
    compaction drops a conversion's classic tombstone, the offset commit before it recreates
    such a group (Kafka calls it a simple group and replaces it the same way)."""
    return (isinstance(group, ClassicGroup) and group.last_record is None
            and not group.members)


def check_member(group, member_id: str, instance_id: Optional[str]) -> int:
    """For other modules (offsets): UNKNOWN_MEMBER_ID / FENCED_INSTANCE_ID / 0."""
    return group.validate_member(member_id, instance_id)


def _session_deadline(mb: Member, now: int) -> Optional[int]:
    """When the member's session expires; None while it waits on a parked request (it
    cannot heartbeat then, and the barrier or the pending-sync timer bounds the wait, as
    Kafka keeps a member awaiting a join or sync response alive)."""
    if mb.joined or mb.sync_parked:
        return None
    return now + mb.session_timeout


# A pending (MEMBER_ID_REQUIRED) member re-armed after load; never happens on recovery
# (pending members are volatile), only if rearm() is called on a live group.
_PENDING_GRACE_MS = 6_000


# ---------------------------------------------------------------------- volatile events
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


def _count_protocols(g: ClassicGroup, protocols: tuple, sign: int) -> None:
    counts = g.protocol_counts
    for name in set(n for n, _ in protocols):
        c = counts.get(name, 0) + sign
        if c:
            counts[name] = c
        else:
            del counts[name]


def _apply_pending_added(g: ClassicGroup, ev) -> None:
    g.pending[ev.member_id] = None
    g.id_seq += 1


def _apply_pending_forgotten(g: ClassicGroup, ev) -> None:
    g.pending.pop(ev.member_id, None)


def _apply_joined(g: ClassicGroup, ev: MemberJoined) -> None:
    mb = g._w(ev.member_id) if ev.member_id in g.members else None
    if mb is not None:
        _count_protocols(g, mb.protocols, -1)
    else:
        if not g.members:
            g._ptype = ev.protocol_type
        mb = g.members[ev.member_id] = Member(ev.member_id)
        g.pending.pop(ev.member_id, None)
        g.id_seq += 1
        if g.state == PREPARING and g.delay_cap is not None:
            g.new_member_added = True
    mb.instance_id = ev.instance_id
    if ev.instance_id is not None:
        g.static_members[ev.instance_id] = ev.member_id
    mb.client_id = ev.client_id
    mb.client_host = ev.client_host
    mb.session_timeout = ev.session_timeout
    mb.rebalance_timeout = ev.rebalance_timeout
    mb.protocols = ev.protocols
    _count_protocols(g, ev.protocols, 1)
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
    _count_protocols(g, old.protocols, -1)
    _count_protocols(g, ev.protocols, 1)
    if old.joined:
        g.num_joined -= 1
    mb.joined = mb.sync_parked = False
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
    g.state = PREPARING
    g.state_timestamp = ev.now
    g.barrier_deadline = ev.deadline
    g.delay_cap = None if ev.delay_cap < 0 else ev.delay_cap
    g.new_member_added = False
    g.pending_sync = {}
    for mid in [mid for mid, mb in g.members.items() if mb.sync_parked]:
        g._w(mid).sync_parked = False   # the handler answered them REBALANCE_IN_PROGRESS


def _apply_barrier_extended(g: ClassicGroup, ev: BarrierExtended) -> None:
    g.barrier_deadline = ev.deadline
    g.new_member_added = False


def _apply_removed(g: ClassicGroup, ev: MemberRemoved) -> None:
    mb = g.members.pop(ev.member_id)
    _count_protocols(g, mb.protocols, -1)
    if mb.joined:
        g.num_joined -= 1
    if mb.instance_id is not None and g.static_members.get(mb.instance_id) == ev.member_id:
        del g.static_members[mb.instance_id]
    g.pending_sync.pop(ev.member_id, None)


def _apply_join_completed(g: ClassicGroup, ev: JoinCompleted) -> None:
    g.state = COMPLETING
    g.state_timestamp = ev.now
    g.generation = ev.generation
    g.protocol = ev.protocol
    g.leader = ev.leader
    g.barrier_deadline = g.delay_cap = None
    g.new_member_added = False
    for mid in [mid for mid, mb in g.members.items() if mb.joined]:
        g._w(mid).joined = False
    g.num_joined = 0
    g.pending_sync = {mid: None for mid in g.members}


def _apply_sync(g: ClassicGroup, ev: SyncReceived) -> None:
    g.pending_sync.pop(ev.member_id, None)
    if ev.parked:
        mb = g._w(ev.member_id)
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


def _apply(g: ClassicGroup, item) -> None:
    if isinstance(item, Record):
        if item.value is None:
            g.state = DEAD
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
    _apply(g, ev)
    # A group that only ever held MEMBER_ID_REQUIRED members leaves nothing behind.
    if (g.state == EMPTY_STATE and not g.members and not g.pending and g.last_record is None
            and not shard.offsets.get(gid)):
        del shard.groups[gid]


def _replay_group_metadata(shard, key: m.GroupMetadataKey, value) -> None:
    gid = key.group
    g = shard.groups.get(gid)
    if value is None:
        if isinstance(g, ClassicGroup):
            g.state = DEAD
            del shard.groups[gid]
        return
    if not isinstance(g, ClassicGroup):
        g = shard.groups[gid] = ClassicGroup(gid)
    g.load(value)


# ------------------------------------------------------------------------------ drafts
class _Tx(GroupTx):
    """A classic handler's GroupTx (tx.py) with a draft: each staged event is also applied to
    a copy of the group (never to the shard's), which the next steps read."""

    def __init__(self, shard, group_id: str, now: int):
        super().__init__(group_id, now)
        self.shard = shard
        self.gid = group_id
        g = shard.groups.get(group_id)
        self.g = g.copy() if isinstance(g, ClassicGroup) else ClassicGroup(group_id)

    def emit(self, item) -> None:
        _apply(self.g, item)
        self.records.append(item)

    def timer(self, kind: str, member_id: str, deadline: Optional[int]) -> None:
        self.schedule(TimerKey(kind, self.gid, member_id), deadline)

    def session(self, member_id: str) -> None:
        self.timer(SESSION, member_id, _session_deadline(self.g.members[member_id], self.now))

    def answer(self, member_id: str, kind: str, response) -> None:
        self.complete(ParkKey(self.gid, member_id, kind), response)


# --------------------------------------------------------------------------- responses
def _join_error(version: int, code: int, member_id: str = "") -> m.JoinGroupResponse:
    return m.JoinGroupResponse(error_code=int(code), generation_id=-1, member_id=member_id,
                               protocol_name=None if version >= 7 else "")


def _join_response(g: ClassicGroup, member_id: str, version: int, *,
                   with_members: Optional[bool] = None, skip: bool = False):
    """The current generation as member_id sees it; the leader gets the member list."""
    if with_members is None:
        with_members = member_id == g.leader
    members = [m.JoinGroupResponseMember(
        member_id=mb.member_id, group_instance_id=mb.instance_id if version >= 5 else None,
        metadata=mb.metadata(g.protocol)) for mb in g.members.values()] if with_members else []
    return m.JoinGroupResponse(
        error_code=0, generation_id=g.generation,
        protocol_type=g._ptype if version >= 7 else None, protocol_name=g.protocol,
        leader=g.leader or "", skip_assignment=skip and version >= 9, member_id=member_id,
        members=members)


def _sync_response(g: ClassicGroup, version: int, code: int = 0, assignment: bytes = b""):
    v5 = version >= 5 and not code
    return m.SyncGroupResponse(error_code=int(code), assignment=assignment,
                               protocol_type=g._ptype if v5 else None,
                               protocol_name=g.protocol if v5 else None)


def _group_value(g: ClassicGroup, timestamp: int, assignments: Optional[dict] = None):
    """The GroupMetadataValue of the group as it stands (assignments: new ones, else the
    members' current ones)."""
    return m.GroupMetadataValue(
        protocol_type=g._ptype or "", generation=g.generation, protocol=g.protocol,
        leader=g.leader, current_state_timestamp=timestamp,
        members=[m.GroupMetadataValueMemberMetadata(
            member_id=mb.member_id, group_instance_id=mb.instance_id, client_id=mb.client_id,
            client_host=mb.client_host, rebalance_timeout=mb.rebalance_timeout,
            session_timeout=mb.session_timeout, subscription=mb.metadata(g.protocol),
            assignment=mb.assignment if assignments is None
            else assignments.get(mb.member_id, b""))
            for mb in g.members.values()])


def _record(g: ClassicGroup, value) -> Record:
    return Record(m.GroupMetadataKey(group=g.group_id), value)


def _unwritable(record: Record, limit: int) -> Optional[str]:
    """Why ``record`` cannot be written (a field over its size, or the record over
    message.max.bytes), or None."""
    try:
        size = limits.BATCH_OVERHEAD + limits.record_size(record)
    except ValueError as exc:               # the codec's EncodeError
        return str(exc)
    if size > limit:
        return ("its GroupMetadata record of %d bytes (every member's metadata and "
                "assignment) exceeds message.max.bytes %d" % (size, limit))
    return None


# -------------------------------------------------------------- rebalance machinery
def _select_protocol(members) -> str:
    """Each member votes for its most preferred protocol that every member supports; most
    votes wins, a tie goes to the name that sorts first."""
    members = list(members)
    common = set(n for n, _ in members[0].protocols)
    for mb in members[1:]:
        common &= set(n for n, _ in mb.protocols)
    votes: dict = {}
    for mb in members:
        for name, _ in mb.protocols:
            if name in common:
                votes[name] = votes.get(name, 0) + 1
                break
    return min(votes.items(), key=lambda kv: (-kv[1], kv[0]))[0]


def _prepare(tx: _Tx, sync_error: int = E.REBALANCE_IN_PROGRESS) -> None:
    """Start a rebalance (no-op in PreparingRebalance). Parked syncs are answered
    ``sync_error``: their generation will never be stored."""
    g = tx.g
    if g.state == PREPARING:
        return
    answered = [mid for mid, mb in g.members.items() if mb.sync_parked]
    for mid in answered:
        tx.answer(mid, "sync", _sync_response(g, g.members[mid].sync_version, sync_error))
    rt = max((mb.rebalance_timeout for mb in g.members.values()), default=0)
    delay = tx.shard.config.group_initial_rebalance_delay_ms
    if g.state == EMPTY_STATE and delay > 0:
        deadline, cap = tx.now + delay, tx.now + max(rt, delay)
    else:
        deadline, cap = tx.now + rt, -1
    tx.emit(RebalanceStarted(tx.gid, deadline, cap, tx.now))
    tx.timer(JOIN, "", deadline)
    tx.timer(SYNC, "", None)
    for mid in answered:
        tx.session(mid)          # no longer parked: its session runs again


def _maybe_complete(tx: _Tx, requester: Optional[str] = None):
    """Complete the barrier if everyone it waits for has joined (never during the initial
    delay: that phase ends by its timer). Returns the requester's join response, if any."""
    g = tx.g
    if g.state != PREPARING or g.delay_cap is not None or g.pending:
        return None
    if g.num_joined < len(g.members):
        return None
    return _complete_join(tx, requester)


def _complete_join(tx: _Tx, requester: Optional[str] = None):
    g = tx.g
    for mid in [mid for mid, mb in g.members.items() if not mb.joined]:
        _remove_member(tx, mid)
    tx.timer(JOIN, "", None)
    if not g.members:
        # Kafka stores the group going Empty: next generation, no protocol, no members.
        tx.emit(_record(g, m.GroupMetadataValue(
            protocol_type=g._ptype or "", generation=g.generation + 1, protocol=None,
            leader=None, current_state_timestamp=tx.now, members=[])))
        tx.timer(SYNC, "", None)
        return None
    leader = g.leader if g.leader in g.members else next(iter(g.members))
    versions = {mid: mb.join_version for mid, mb in g.members.items()}
    tx.emit(JoinCompleted(tx.gid, g.generation + 1, _select_protocol(g.members.values()),
                          leader, tx.now))
    direct = None
    for mid in g.members:
        resp = _join_response(g, mid, versions[mid])
        if mid == requester:
            direct = resp
        else:
            tx.answer(mid, "join", resp)
        tx.session(mid)
    tx.timer(SYNC, "", tx.now + max(mb.rebalance_timeout for mb in g.members.values()))
    return direct


def _remove_member(tx: _Tx, member_id: str) -> None:
    """Remove a member; its parked requests are answered UNKNOWN_MEMBER_ID."""
    g = tx.g
    mb = g.members[member_id]
    if mb.joined:
        tx.answer(member_id, "join", _join_error(mb.join_version, E.UNKNOWN_MEMBER_ID,
                                                 member_id))
    if mb.sync_parked:
        tx.answer(member_id, "sync", _sync_response(g, mb.sync_version, E.UNKNOWN_MEMBER_ID))
    tx.emit(MemberRemoved(tx.gid, member_id))
    tx.timer(SESSION, member_id, None)


def _after_removal(tx: _Tx) -> None:
    g = tx.g
    if g.state in (STABLE, COMPLETING):
        _prepare(tx)
    _maybe_complete(tx)


def _park_join(tx: _Tx, member_id: str) -> Result:
    """The member has joined (MemberJoined applied): start or continue the barrier, and
    answer at once if this join completes it."""
    _prepare(tx)
    direct = _maybe_complete(tx, member_id)
    if direct is not None:
        return tx.result(direct)
    tx.session(member_id)
    return tx.result(None, park=ParkKey(tx.gid, member_id, "join"))


# ---------------------------------------------------------------------------- JoinGroup
def _supports(g: Optional[ClassicGroup], protocol_type: str, protocols: tuple,
              exclude: Optional[str]) -> bool:
    """Kafka's supportsProtocols: an empty group takes any non-empty type and list; otherwise
    the type must match and some protocol must be supported by every other member."""
    if not protocol_type or not protocols:
        return False
    if g is None or not g.members:
        return True
    if protocol_type != g._ptype:
        return False
    others = len(g.members)
    mine = ()
    if exclude in g.members:
        others -= 1
        mine = set(n for n, _ in g.members[exclude].protocols)
    if not others:
        return True
    counts = g.protocol_counts
    return any(counts.get(n, 0) - (n in mine) == others for n, _ in protocols)


def _new_member_id(g: ClassicGroup, prefix: str, now: int) -> str:
    salt = 0
    while True:
        mid = "%s-%s" % (prefix, ids.generated_id(g.group_id, now, g.id_seq, salt, prefix))
        if mid not in g.members and mid not in g.pending:
            return mid
        salt += 1


def _joined_event(gid: str, member_id: str, instance_id, req, ctx: RequestContext,
                  rebalance_timeout: int, protocols: tuple) -> MemberJoined:
    return MemberJoined(gid, member_id, instance_id, ctx.client_id, ctx.client_host,
                        req.session_timeout_ms, rebalance_timeout, req.protocol_type, protocols,
                        ctx.version)


def handle_join(shard, req: m.JoinGroupRequest, ctx: RequestContext) -> Result:
    v, now, gid = ctx.version, ctx.now_ms, req.group_id
    if not gid:
        return Result(_join_error(v, E.INVALID_GROUP_ID, req.member_id))
    g = shard.groups.get(gid)
    cfg = shard.config
    if not cfg.group_min_session_timeout_ms <= req.session_timeout_ms \
            <= cfg.group_max_session_timeout_ms:
        return Result(_join_error(v, E.INVALID_SESSION_TIMEOUT, req.member_id))
    if g is not None and g.state == DEAD:
        return Result(_join_error(v, E.COORDINATOR_NOT_AVAILABLE, req.member_id))
    instance = req.group_instance_id if v >= 5 else None
    # v0 has no rebalance timeout: the session timeout plays both parts (as Kafka).
    rt = req.rebalance_timeout_ms if v >= 1 and req.rebalance_timeout_ms >= 0 \
        else req.session_timeout_ms
    protocols = tuple((p.name, bytes(p.metadata)) for p in req.protocols)
    replacing = g.static_members.get(instance) if g is not None and instance is not None \
        and not req.member_id else None
    if not _supports(g, req.protocol_type, protocols, req.member_id or replacing):
        return Result(_join_error(v, E.INCONSISTENT_GROUP_PROTOCOL, req.member_id))
    if not req.member_id:
        if replacing is not None:
            return _replace_static(shard, g, replacing, req, ctx, rt, protocols)
        if g is not None and len(g.members) + len(g.pending) >= cfg.group_max_size:
            return Result(_join_error(v, E.GROUP_MAX_SIZE_REACHED))
        tx = _Tx(shard, gid, now)
        new_id = _new_member_id(tx.g, instance if instance is not None else ctx.client_id, now)
        if instance is None and v >= 4:
            # KIP-394: the member learns its id first and must rejoin with it.
            tx.emit(PendingMemberAdded(gid, new_id))
            tx.timer(SESSION, new_id, now + req.session_timeout_ms)
            return tx.result(_join_error(v, E.MEMBER_ID_REQUIRED, new_id))
        tx.emit(_joined_event(gid, new_id, instance, req, ctx, rt, protocols))
        return _park_join(tx, new_id)
    if g is None:
        return Result(_join_error(v, E.UNKNOWN_MEMBER_ID, req.member_id))
    if req.member_id in g.pending:
        tx = _Tx(shard, gid, now)
        tx.emit(_joined_event(gid, req.member_id, None, req, ctx, rt, protocols))
        return _park_join(tx, req.member_id)
    err = g.validate_member(req.member_id, instance)
    if err:
        return Result(_join_error(v, err, req.member_id))
    return _join_known(shard, g, req, ctx, rt, protocols, instance)


def _join_known(shard, g: ClassicGroup, req, ctx, rt: int, protocols: tuple, instance):
    mid = req.member_id
    mb = g.members[mid]
    tx = _Tx(shard, g.group_id, ctx.now_ms)
    unchanged = mb.protocols == protocols
    if g.state == COMPLETING and unchanged or \
            g.state == STABLE and unchanged and mid != g.leader:
        # It probably lost its JoinGroup response: hand the current generation back.
        tx.session(mid)
        return tx.result(_join_response(g, mid, ctx.version))
    if g.state == PREPARING and mb.joined:
        # A second JoinGroup while the first is parked: the first is superseded.
        tx.answer(mid, "join", _join_error(mb.join_version, E.REBALANCE_IN_PROGRESS, mid))
    # Stable leader rejoin (it wants a new assignment), changed metadata, or the barrier.
    tx.emit(_joined_event(g.group_id, mid, instance if instance is not None else
                          mb.instance_id, req, ctx, rt, protocols))
    return _park_join(tx, mid)


def _replace_static(shard, g: ClassicGroup, old_id: str, req, ctx, rt: int,
                    protocols: tuple) -> Result:
    """A known group.instance.id joins with no member id: it takes over the member under a
    new id; the old id is fenced (its parked requests get FENCED_INSTANCE_ID)."""
    v = ctx.version
    tx = _Tx(shard, g.group_id, ctx.now_ms)
    old = g.members[old_id]
    if old.joined:
        tx.answer(old_id, "join", _join_error(old.join_version, E.FENCED_INSTANCE_ID, old_id))
    if old.sync_parked:
        tx.answer(old_id, "sync", _sync_response(g, old.sync_version, E.FENCED_INSTANCE_ID))
    tx.timer(SESSION, old_id, None)
    new_id = _new_member_id(tx.g, req.group_instance_id, ctx.now_ms)
    keep = g.state == STABLE and old.protocols == protocols
    tx.emit(StaticMemberReplaced(g.group_id, old_id, new_id, ctx.client_id, ctx.client_host,
                                 req.session_timeout_ms, rt, protocols))
    if keep:
        # Same protocols in Stable: keep the assignment, no rebalance; store the new id.
        d = tx.g
        tx.emit(_record(d, _group_value(d, d.state_timestamp)))
        tx.session(new_id)
        leader = new_id == d.leader
        return tx.result(_join_response(d, new_id, v, with_members=leader and v >= 9,
                                        skip=leader))
    tx.emit(_joined_event(g.group_id, new_id, req.group_instance_id, req, ctx, rt, protocols))
    return _park_join(tx, new_id)


# ---------------------------------------------------------------------------- SyncGroup
def handle_sync(shard, req: m.SyncGroupRequest, ctx: RequestContext) -> Result:
    v, gid = ctx.version, req.group_id
    g = shard.groups.get(gid)
    err = _member_error(g, gid, req.member_id, req.group_instance_id if v >= 3 else None)
    if not err and req.generation_id != g.generation:
        err = E.ILLEGAL_GENERATION
    if not err and v >= 5 and (
            req.protocol_type is not None and req.protocol_type != (g._ptype or "") or
            req.protocol_name is not None and req.protocol_name != g.protocol):
        err = E.INCONSISTENT_GROUP_PROTOCOL
    if not err and g.state == PREPARING:
        err = E.REBALANCE_IN_PROGRESS
    if err:
        return Result(m.SyncGroupResponse(error_code=int(err)))
    mid = req.member_id
    resp = _sync_response(g, v, 0, g.members[mid].assignment)
    if g.state == STABLE and mid not in g.pending_sync:
        # The common case (a member re-reading its assignment): no state change at all.
        return Result(resp, timers=((TimerKey(SESSION, gid, mid),
                                     _session_deadline(g.members[mid], ctx.now_ms)),))
    tx = _Tx(shard, gid, ctx.now_ms)
    if g.state == STABLE:
        tx.emit(SyncReceived(gid, mid, False, v))
        if not tx.g.pending_sync:
            tx.timer(SYNC, "", None)
        tx.session(mid)
        return tx.result(resp)
    # CompletingRebalance
    if mid != g.leader:
        if g.members[mid].sync_parked:
            tx.answer(mid, "sync", _sync_response(g, g.members[mid].sync_version,
                                                  E.REBALANCE_IN_PROGRESS))
        tx.emit(SyncReceived(gid, mid, True, v))
        tx.session(mid)
        return tx.result(None, park=ParkKey(gid, mid, "sync"))
    # The leader's assignments complete the generation: one record, every parked sync
    # answered in the same Result (the runtime releases them once the record is durable).
    assignments = {a.member_id: bytes(a.assignment) for a in req.assignments}
    record = _record(tx.g, _group_value(tx.g, ctx.now_ms, assignments))
    too_large = _unwritable(record, shard.config.message_max_bytes)
    if too_large:
        # Kafka's classic coordinator when the GroupMetadata append fails: every member
        # waiting for its assignment and the leader get the error (RecordTooLargeException
        # maps to UNKNOWN_SERVER_ERROR) and the group rebalances; nothing is written.
        log.warning("group %s: generation %d not stored: %s; members get "
                    "UNKNOWN_SERVER_ERROR and the group rebalances", gid[:256], g.generation,
                    too_large)
        _prepare(tx, E.UNKNOWN_SERVER_ERROR)
        tx.session(mid)
        return tx.result(_sync_response(tx.g, v, E.UNKNOWN_SERVER_ERROR))
    tx.emit(SyncReceived(gid, mid, False, v))
    d = tx.g
    parked = [(mb.member_id, mb.sync_version) for mb in d.members.values() if mb.sync_parked]
    tx.emit(record)
    for pid, pv in parked:
        tx.answer(pid, "sync", _sync_response(d, pv, 0, d.members[pid].assignment))
        tx.session(pid)
    tx.session(mid)
    if not d.pending_sync:
        tx.timer(SYNC, "", None)
    return tx.result(_sync_response(d, v, 0, d.members[mid].assignment))


def _member_error(g, gid: str, member_id: str, instance_id: Optional[str]) -> int:
    """The checks SyncGroup, Heartbeat and offset commits share."""
    if not gid:
        return E.INVALID_GROUP_ID
    if g is None or not isinstance(g, ClassicGroup):
        return E.UNKNOWN_MEMBER_ID
    if g.state == DEAD:
        return E.COORDINATOR_NOT_AVAILABLE
    return g.validate_member(member_id, instance_id)


# ---------------------------------------------------------------------------- Heartbeat
def handle_heartbeat(shard, req: m.HeartbeatRequest, ctx: RequestContext) -> Result:
    g = shard.groups.get(req.group_id)
    err = _member_error(g, req.group_id, req.member_id,
                        req.group_instance_id if ctx.version >= 3 else None)
    if not err and req.generation_id != g.generation:
        err = E.ILLEGAL_GENERATION
    if err:
        return Result(m.HeartbeatResponse(error_code=int(err)))
    # Accepted (even in PreparingRebalance, where it tells the member to rejoin): the
    # session restarts.
    mb = g.members[req.member_id]
    ops = ((TimerKey(SESSION, g.group_id, mb.member_id), _session_deadline(mb, ctx.now_ms)),)
    code = E.REBALANCE_IN_PROGRESS if g.state == PREPARING else 0
    return Result(m.HeartbeatResponse(error_code=int(code)), timers=ops)


# --------------------------------------------------------------------------- LeaveGroup
def handle_leave(shard, req: m.LeaveGroupRequest, ctx: RequestContext) -> Result:
    v, gid = ctx.version, req.group_id
    if v >= 3:
        who = [(mi.member_id, mi.group_instance_id) for mi in req.members]
    else:
        who = [(req.member_id, None)]
    g = shard.groups.get(gid)
    top = 0
    if not gid:
        top = E.INVALID_GROUP_ID
    elif isinstance(g, ClassicGroup) and g.state == DEAD:
        top = E.COORDINATOR_NOT_AVAILABLE
    if top:
        return Result(m.LeaveGroupResponse(error_code=int(top)))
    codes = []
    tx = None
    if not isinstance(g, ClassicGroup):
        codes = [E.UNKNOWN_MEMBER_ID] * len(who)
    else:
        tx = _Tx(shard, gid, ctx.now_ms)
        for member_id, instance_id in who:
            codes.append(_leave_one(tx, member_id, instance_id))
        if any(c == 0 for c in codes):
            _after_removal(tx)
    resp = leave_response(v, who, codes)
    return tx.result(resp) if tx is not None else Result(resp)


def leave_response(v: int, who, codes) -> m.LeaveGroupResponse:
    """v0-2 carry one top-level code; v3+ one result per (member id, instance id)."""
    if v < 3:
        return m.LeaveGroupResponse(error_code=int(codes[0]))
    return m.LeaveGroupResponse(error_code=0, members=[
        m.LeaveGroupResponseMemberResponse(member_id=mid, group_instance_id=iid,
                                           error_code=int(c))
        for (mid, iid), c in zip(who, codes)])


def _leave_one(tx: _Tx, member_id: str, instance_id: Optional[str]) -> int:
    g = tx.g
    if instance_id is None:
        if member_id in g.pending:
            tx.emit(PendingMemberForgotten(tx.gid, member_id))
            tx.timer(SESSION, member_id, None)
            return 0
        if member_id not in g.members:
            return E.UNKNOWN_MEMBER_ID
        target = member_id
    else:
        # A static member may leave by instance id alone (an empty member id).
        target = g.static_members.get(instance_id)
        if target is None:
            return E.UNKNOWN_MEMBER_ID
        if member_id and member_id != target:
            return E.FENCED_INSTANCE_ID
    _remove_member(tx, target)
    return 0


# ------------------------------------------------------------------------------- timers
def _fire_session(shard, key: TimerKey, now: int) -> Result:
    g = shard.groups.get(key.group_id)
    if not isinstance(g, ClassicGroup):
        return EMPTY
    tx = _Tx(shard, key.group_id, now)
    if key.member_id in g.members:
        _remove_member(tx, key.member_id)
        _after_removal(tx)
    elif key.member_id in g.pending:
        tx.emit(PendingMemberForgotten(key.group_id, key.member_id))
        _maybe_complete(tx)
    else:
        return EMPTY
    return tx.result()


def _fire_join(shard, key: TimerKey, now: int) -> Result:
    g = shard.groups.get(key.group_id)
    if not isinstance(g, ClassicGroup) or g.state != PREPARING \
            or g.barrier_deadline is None or now < g.barrier_deadline:
        return EMPTY
    tx = _Tx(shard, key.group_id, now)
    if g.delay_cap is not None and g.new_member_added and now < g.delay_cap:
        # Someone joined during this window: wait one more delay (Kafka's InitialDelayedJoin)
        deadline = min(now + shard.config.group_initial_rebalance_delay_ms, g.delay_cap)
        tx.emit(BarrierExtended(key.group_id, deadline))
        tx.timer(JOIN, "", deadline)
        return tx.result()
    _complete_join(tx)
    return tx.result()


def _fire_sync(shard, key: TimerKey, now: int) -> Result:
    g = shard.groups.get(key.group_id)
    if not isinstance(g, ClassicGroup) or g.state not in (COMPLETING, STABLE) \
            or not g.pending_sync:
        return EMPTY
    tx = _Tx(shard, key.group_id, now)
    for mid in list(g.pending_sync):
        _remove_member(tx, mid)
    _after_removal(tx)
    return tx.result()


# ------------------------------------------------------------------ topic catalog changes
def _subscribes_to(g: ClassicGroup, topics) -> bool:
    for mb in g.members.values():
        try:
            sub = embedded.decode_subscription(mb.metadata(g.protocol))[1]
        except ValueError:               # the codec's DecodeError: not a subscription
            continue
        if not topics.isdisjoint(sub.topics):
            return True
    return False


def rebalance_for_topics(shard, topics, now: int) -> list:
    """The catalog changed ``topics`` (created, grown, deleted): every Stable or
    CompletingRebalance group of the "consumer" protocol type with a member subscribed to
    one of them starts a rebalance, so its members learn it from their next heartbeat
    (REBALANCE_IN_PROGRESS) and the leader assigns from fresh metadata. Kafka's coordinator
    does not do this for classic groups (each consumer rejoins when its own metadata refresh
    sees the change, up to metadata.max.age.ms later); this node is the metadata and knows
    at once (docs/decisions.md). -> one Result per group. Pure."""
    out = []
    for gid in sorted(shard.groups):
        g = shard.groups[gid]
        if (isinstance(g, ClassicGroup) and g.state in (STABLE, COMPLETING)
                and g.protocol_type() == "consumer" and _subscribes_to(g, topics)):
            tx = _Tx(shard, gid, now)
            _prepare(tx)
            log.info("classic group %r: rebalancing, the topic catalog changed a subscribed "
                     "topic", gid[:256])
            out.append(tx.result())
    return out
