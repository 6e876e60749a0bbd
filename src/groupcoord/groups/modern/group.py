"""What the KIP-848 group types (consumer/group.py, connect/group.py) share as groups: Kafka's
state names and how they follow from the epochs, the OffsetCommit / OffsetFetch member-epoch
checks, the "answered but not confirmed" event, and the DescribeGroups frame. Reconciliation
itself is modern/reconcile.py's.

A modern group keeps ``members`` (member id -> its metadata, whatever the type keeps there),
``epoch`` (the group epoch), ``target_epoch`` and ``unconfirmed`` (member ids), and says
where a member's current assignment lives (``assignment_of``, ``assignments``).
"""
from __future__ import annotations

from abc import abstractmethod
from typing import Optional

from groupcoord.groups.group import Group
from groupcoord.groups.modern.reconcile import STABLE, MemberAssignment
from groupcoord.groups.result import Volatile
from groupcoord.protocol import messages as m
from groupcoord.protocol.error_codes import ErrorCode as E

__all__ = ["ModernGroup", "Unconfirmed", "described_member"]


class Unconfirmed(Volatile, frozen=True, gc=False):
    """A member was answered an assignment it has not confirmed yet (unconfirmed=True), or it
    has now reported exactly its assignment as owned (False). Decided by
    reconcile.reconcile_member for every modern group type."""
    group_id: str
    member_id: str
    unconfirmed: bool


class ModernGroup(Group):
    members: dict
    epoch: int
    target_epoch: int
    unconfirmed: set

    # ---- where the type keeps a member's current assignment
    @abstractmethod
    def assignment_of(self, member_id: Optional[str]) -> Optional[MemberAssignment]:
        """The member's current assignment; None for a member the group does not know."""

    @abstractmethod
    def assignments(self):
        """Every member's current assignment."""

    def commit_protocol_error(self, member_id: str, epoch: int, version: int) -> Optional[int]:
        """An OffsetCommit rule of the member's protocol that decides before the epoch
        check (an ErrorCode value, 0 = accept), or None: the epoch check decides."""
        return None

    # ---- Group interface
    def state_name(self) -> str:
        # Kafka's ConsumerGroup/StreamsGroup states: the target behind the group epoch is
        # Assigning; any member not yet stable at the target epoch is Reconciling.
        if not self.members:
            return "Empty"
        if self.epoch > self.target_epoch:
            return "Assigning"
        te = self.target_epoch
        for a in self.assignments():
            if a.state != STABLE or a.epoch != te:
                return "Reconciling"
        return "Stable"

    def protocol_type(self) -> str:
        return self.TYPE                 # ListGroups: "consumer" / "connect"

    def is_empty(self) -> bool:
        return not self.members

    def validate_offset_commit(self, member_id, instance_id, generation_or_epoch, version):
        if generation_or_epoch < 0 and not self.members:
            return 0                     # an admin tool or a simple consumer, group empty
        a = self.assignment_of(member_id)
        if a is None:
            return int(E.UNKNOWN_MEMBER_ID)
        err = self.commit_protocol_error(member_id, generation_or_epoch, version)
        if err is not None:
            return err
        return 0 if generation_or_epoch == a.epoch else int(E.STALE_MEMBER_EPOCH)

    def validate_offset_fetch(self, member_id, member_epoch):
        # Kafka: no member id and a negative epoch is an admin tool or a client that names
        # no member (offsets.py asks only when the request names one).
        if member_id is None and member_epoch < 0:
            return 0
        a = self.assignment_of(member_id)
        if a is None:
            return int(E.UNKNOWN_MEMBER_ID)
        return 0 if member_epoch == a.epoch else int(E.STALE_MEMBER_EPOCH)

    # ---- DescribeGroups (admin.py)
    def described(self, protocol_data: str, members: list):
        return m.DescribeGroupsResponseDescribedGroup(
            error_code=0, group_id=self.group_id, group_state=self.state_name(),
            protocol_type=self.TYPE, protocol_data=protocol_data, members=members)


def described_member(member_id: str, meta, metadata: bytes, assignment: bytes):
    """One member as DescribeGroups shows it; ``meta`` has instance_id, client_id and
    client_host (both types' member metadata records do)."""
    return m.DescribeGroupsResponseDescribedGroupMember(
        member_id=member_id, group_instance_id=meta.instance_id, client_id=meta.client_id,
        client_host=meta.client_host, member_metadata=metadata, member_assignment=assignment)


def replay_unconfirmed(shard, ev, _) -> None:
    g = shard.groups.get(ev.group_id)
    if isinstance(g, ModernGroup) and ev.member_id in g.members:
        if ev.unconfirmed:
            g.unconfirmed.add(ev.member_id)
        else:
            g.unconfirmed.discard(ev.member_id)
