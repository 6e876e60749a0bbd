"""The classic group's state: ``ClassicGroup`` (the shard's Group interface, groups/group.py;
loading a GroupMetadataValue), ``Member``, the state names and timer kinds.

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

Durable state is the last GroupMetadataValue (``ClassicGroup.load``). Everything else (who
joined, parked requests, pending members, barrier deadline) is in memory and changed by the
Volatile events of events.py, so recovery gives a Stable group at the recorded generation
(Empty if it has no members).
"""
from __future__ import annotations

from typing import Optional

import msgspec

from groupcoord.groups.group import Group
from groupcoord.groups.records import Record
from groupcoord.groups.result import TimerKey
from groupcoord.groups.timers import CLASSIC_JOIN, CLASSIC_SESSION, CLASSIC_SYNC
from groupcoord.protocol import embedded
from groupcoord.protocol import messages as m
from groupcoord.protocol.error_codes import ErrorCode as E

__all__ = ["ClassicGroup", "Member", "new_empty_group", "is_offsets_only", "check_member",
           "session_deadline", "count_protocols", "group_record",
           "STATE_EMPTY", "STATE_PREPARING", "STATE_COMPLETING", "STATE_STABLE", "STATE_DEAD",
           "SESSION", "JOIN", "SYNC"]

# Kafka's state names (DescribeGroups, ListGroups show them as they are).
STATE_EMPTY = "Empty"
STATE_PREPARING = "PreparingRebalance"
STATE_COMPLETING = "CompletingRebalance"
STATE_STABLE = "Stable"
STATE_DEAD = "Dead"

# Timer kinds (timers.py). SESSION is per member (and per MEMBER_ID_REQUIRED member); JOIN is
# the barrier deadline; SYNC the pending-sync deadline after a join completed.
SESSION, JOIN, SYNC = CLASSIC_SESSION, CLASSIC_JOIN, CLASSIC_SYNC


# ------------------------------------------------------------------------------- state
class Member:
    __slots__ = ("member_id", "instance_id", "client_id", "client_host", "session_timeout",
                 "rebalance_timeout", "protocols", "assignment", "joined", "join_version",
                 "sync_parked", "sync_version", "synced_generation")

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
        # The newest generation this member sent a SyncGroup for (volatile): it had the
        # JoinGroup answer of that generation, so a JoinGroup it sends later cannot carry
        # an older subscription generation (handlers._stale_join).
        self.synced_generation = -1

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
        self.state = STATE_EMPTY
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
        # When the rebalance in progress started (RebalanceStarted; -1: none since load), for
        # the lifecycle log's duration: kept while the group goes back from
        # CompletingRebalance to PreparingRebalance (the same run).
        self.rebalance_since = -1
        # Derived counters, kept by replay so that a join is not O(members):
        self.num_joined = 0              # members with joined set
        self.protocol_counts: dict = {}  # protocol name -> members that support it
        self.last_record: Optional[m.GroupMetadataValue] = None
        self._copied: Optional[set] = None   # a draft: ids of the members it owns a copy of

    def copy(self) -> "ClassicGroup":
        """A draft for a handler. Members are copied on first write (``writable``), so a request
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

    def writable(self, member_id: str) -> "Member":
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
        return self.state == STATE_EMPTY

    def as_described_group(self, catalog):
        st = self.state
        # Kafka's: metadata and assignment only while Stable (describeNoMetadata otherwise).
        show = st == STATE_STABLE
        members = [m.DescribeGroupsResponseDescribedGroupMember(
            member_id=mb.member_id, group_instance_id=mb.instance_id, client_id=mb.client_id,
            client_host=mb.client_host,
            member_metadata=mb.metadata(self.protocol) if show else b"",
            member_assignment=mb.assignment if show else b"")
            for mb in self.members.values()]
        return m.DescribeGroupsResponseDescribedGroup(
            error_code=0, group_id=self.group_id, group_state=st,
            protocol_type=self._ptype or "",
            protocol_data=(self.protocol or "") if st == STATE_STABLE else "", members=members)

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
        if self.state == STATE_DEAD:
            return E.COORDINATOR_NOT_AVAILABLE
        if generation_or_epoch < 0 and self.state == STATE_EMPTY:
            return 0                # a simple consumer or an admin tool
        if generation_or_epoch >= 0 or member_id or instance_id is not None:
            err = self.validate_member(member_id, instance_id)
            if err:
                return err
            if generation_or_epoch != self.generation:
                return E.ILLEGAL_GENERATION
        else:
            return E.UNKNOWN_MEMBER_ID   # no membership claimed, but the group has members
        if self.state == STATE_COMPLETING:
            return E.REBALANCE_IN_PROGRESS
        return 0

    def rearm(self, now_ms: int) -> list:
        ops = [(TimerKey(SESSION, self.group_id, mid), session_deadline(mb, now_ms))
               for mid, mb in self.members.items()]
        ops += [(TimerKey(SESSION, self.group_id, mid), now_ms + _PENDING_GRACE_MS)
                for mid in self.pending]
        if self.state == STATE_PREPARING and self.barrier_deadline is not None:
            ops.append((TimerKey(JOIN, self.group_id), self.barrier_deadline))
        if self.pending_sync and self.state in (STATE_COMPLETING, STATE_STABLE):
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
        if self.state != STATE_STABLE or self._ptype != "consumer" or self.protocol is None:
            return None
        return self.members_topics()

    def members_topics(self) -> Optional[set]:
        """The union of the members' subscribed topics (for the chosen protocol), or None when
        some member's metadata is not a consumer subscription."""
        topics = set()
        for mb in self.members.values():
            mine = self.member_topics(mb)
            if mine is None:
                return None
            topics.update(mine)
        return topics

    def member_topics(self, mb: Member) -> Optional[list]:
        """The topics of mb's subscription (its metadata for the chosen protocol), or None
        when that metadata is not a consumer subscription."""
        try:
            return embedded.decode_subscription(mb.metadata(self.protocol))[1].topics
        except ValueError:               # the codec's DecodeError: not a subscription
            return None

    def deletion(self) -> Optional[tuple]:
        if self.pending:
            return None              # a MEMBER_ID_REQUIRED join is on its way: not idle
        gid = self.group_id
        return ([group_record(self, None)],
                [(TimerKey(JOIN, gid), None), (TimerKey(SYNC, gid), None)])

    def snapshot(self, durable: bool):
        if durable:
            return None if self.last_record is None else msgspec.to_builtins(self.last_record)
        return (self.state, self.state_timestamp, self.generation, self._ptype, self.protocol,
                self.leader, [mb.snapshot() for mb in self.members.values()],
                sorted(self.static_members.items()), list(self.pending),
                list(self.pending_sync), self.barrier_deadline, self.delay_cap,
                self.new_member_added, self.id_seq, self.num_joined,
                sorted(self.protocol_counts.items()), self.rebalance_since,
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
            mb = self.writable(rm.member_id) if rm.member_id in old else Member(rm.member_id)
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
            count_protocols(self, mb.protocols, 1)
        self.static_members = {mb.instance_id: mid for mid, mb in members.items()
                               if mb.instance_id is not None}
        self.pending_sync = {mid: None for mid in self.pending_sync if mid in members}
        self.state = STATE_STABLE if members else STATE_EMPTY
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


def session_deadline(mb: Member, now: int) -> Optional[int]:
    """When the member's session expires; None while it waits on a parked request (it
    cannot heartbeat then, and the barrier or the pending-sync timer bounds the wait, as
    Kafka keeps a member awaiting a join or sync response alive)."""
    if mb.joined or mb.sync_parked:
        return None
    return now + mb.session_timeout


# A pending (MEMBER_ID_REQUIRED) member re-armed after load; never happens on recovery
# (pending members are volatile), only if rearm() is called on a live group.
_PENDING_GRACE_MS = 6_000


def count_protocols(g: ClassicGroup, protocols: tuple, sign: int) -> None:
    """Keep g.protocol_counts (protocol name -> members that support it) as ``protocols``
    join (sign 1) or leave (sign -1)."""
    counts = g.protocol_counts
    for name in set(n for n, _ in protocols):
        c = counts.get(name, 0) + sign
        if c:
            counts[name] = c
        else:
            del counts[name]


def group_record(g: ClassicGroup, value) -> Record:
    """The group's GroupMetadata record (value None: its tombstone)."""
    return Record(m.GroupMetadataKey(group=g.group_id), value)

